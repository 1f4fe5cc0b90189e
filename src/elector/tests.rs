//! The state machine against a scripted backend on tokio's paused clock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, Instant};

use super::*;
use crate::backend::{Backend, BackendError, Campaign, Renewal, Wake};
use crate::status::{Holder, Role, Status};

/// One scripted answer: how long the store takes, then what it says.
#[derive(Clone)]
enum Step<T> {
    Answer(Duration, Result<T, &'static str>),
    /// The process is paused (SIGSTOP) after the store answered: time jumps without
    /// any timer firing first.
    Frozen(Duration, T),
}

#[derive(Default)]
struct Script {
    campaigns: VecDeque<Step<Campaign>>,
    renews: VecDeque<Step<Renewal>>,
}

#[derive(Default)]
struct Calls {
    release: AtomicUsize,
    /// Whom each `release_to` left the lease to.
    released_to: std::sync::Mutex<Vec<String>>,
    /// Whether the published status still said "leader" when release was called.
    released_while_published_leader: AtomicUsize,
    /// When the last release was called, and when the backend was dropped.
    released_at: std::sync::Mutex<Option<Instant>>,
    dropped_at: std::sync::Mutex<Option<Instant>>,
}

struct Scripted {
    script: Script,
    calls: Arc<Calls>,
    status: watch::Receiver<Status>,
}

const TTL: Duration = Duration::from_secs(3);

async fn play<T: Clone>(step: Option<Step<T>>, idle: T) -> Result<T, BackendError> {
    match step {
        None => {
            // Script exhausted: behave like a healthy store.
            Ok(idle)
        }
        Some(Step::Answer(delay, answer)) => {
            sleep(delay).await;
            answer.map_err(|m| BackendError::Store {
                op: "scripted",
                message: m.into(),
            })
        }
        Some(Step::Frozen(jump, answer)) => {
            tokio::time::advance(jump).await;
            Ok(answer)
        }
    }
}

impl Backend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn lease_ttl(&self) -> Duration {
        TTL
    }
    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        let step = self.script.campaigns.pop_front();
        play(
            step,
            Campaign::Held(Some(Holder {
                identity: "other".into(),
                token: Some(1),
            })),
        )
        .await
    }
    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let step = self.script.renews.pop_front();
        play(step, Renewal::Renewed).await
    }
    async fn release(&mut self) -> Result<(), BackendError> {
        self.calls.release.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut at) = self.calls.released_at.lock() {
            *at = Some(Instant::now());
        }
        if self.status.borrow().is_leader_at(Instant::now()) {
            self.calls
                .released_while_published_leader
                .fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        Ok(Some(vec!["me".into(), "alive".into()]))
    }
    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        if let Ok(mut list) = self.calls.released_to.lock() {
            list.push(to.to_owned());
        }
        self.release().await
    }
    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        sleep(max).await;
        Wake::Changed
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        if let Ok(mut at) = self.calls.dropped_at.lock() {
            *at = Some(Instant::now());
        }
    }
}

fn timing() -> Timing {
    Timing {
        ttl: TTL,
        renew_interval: Duration::from_secs(1),
        retry_interval: Duration::from_secs(1),
        backend_timeout: Duration::from_millis(500),
        clock_drift: 0.01,
        safety_margin: Duration::from_millis(30),
    }
}

struct Harness {
    status: watch::Receiver<Status>,
    shutdown: watch::Sender<bool>,
    releases: mpsc::Sender<ReleaseRequest>,
    calls: Arc<Calls>,
    heartbeat: Arc<Heartbeat>,
    task: tokio::task::JoinHandle<Exit>,
}

fn start(script: Script, exit_on_loss: bool) -> Harness {
    start_logged(script, exit_on_loss, TransitionLog::disabled())
}

fn start_logged(script: Script, exit_on_loss: bool, log: TransitionLog) -> Harness {
    let (status_tx, status_rx) = watch::channel(Status::new("e", "me", "scripted", TTL));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (release_tx, release_rx) = mpsc::channel(1);
    let calls = Arc::new(Calls::default());
    let heartbeat = Heartbeat::new(&timing());
    let backend = Scripted {
        script,
        calls: calls.clone(),
        status: status_rx.clone(),
    };
    let elector = Elector::new(
        backend,
        ElectorParts {
            timing: timing(),
            status: status_tx,
            observer: Arc::new(NoObserver),
            log,
            releases: release_rx,
            shutdown: shutdown_rx,
            heartbeat: heartbeat.clone(),
            exit_on_loss,
            before_release: Vec::new(),
            must_stop: Vec::new(),
            drained: Vec::new(),
            drain_timeout: Duration::from_secs(30),
        },
    );
    Harness {
        status: status_rx,
        shutdown: shutdown_tx,
        releases: release_tx,
        calls,
        heartbeat,
        task: tokio::spawn(elector.run()),
    }
}

fn claim_length() -> Duration {
    timing().claim_length(TTL)
}

fn acquired(delay_ms: u64, token: u64) -> Step<Campaign> {
    Step::Answer(
        Duration::from_millis(delay_ms),
        Ok(Campaign::Acquired { token }),
    )
}

/// Sleeps in small steps until the published status satisfies `f`, or panics.
async fn until(h: &Harness, what: &str, f: impl Fn(&Status, Instant) -> bool) -> Instant {
    for _ in 0..100_000 {
        let now = Instant::now();
        if f(&h.status.borrow(), now) {
            return now;
        }
        sleep(Duration::from_millis(1)).await;
    }
    panic!("never saw: {what}");
}

#[tokio::test(start_paused = true)]
async fn the_deadline_counts_from_when_the_acquire_was_sent() {
    let t0 = Instant::now();
    let h = start(
        Script {
            campaigns: [acquired(200, 5)].into(),
            ..Default::default()
        },
        false,
    );
    until(&h, "leader", |s, now| s.is_leader_at(now)).await;
    let s = h.status.borrow().clone();
    let claim = s.claim.expect("claim");
    assert_eq!(claim.token, 5);
    // Sent at t0, answered 200 ms later: the deadline ignores the 200 ms of answer time.
    assert_eq!(claim.deadline, t0 + claim_length());
    assert_eq!(s.holder.as_ref().map(|h| h.identity.as_str()), Some("me"));
}

#[tokio::test(start_paused = true)]
async fn renewals_extend_from_their_send_time() {
    let t0 = Instant::now();
    let h = start(
        Script {
            campaigns: [acquired(0, 1)].into(),
            renews: [Step::Answer(
                Duration::from_millis(300),
                Ok(Renewal::Renewed),
            )]
            .into(),
        },
        false,
    );
    // First renew is sent at t0 + renew_interval and answered 300 ms later.
    let expected = t0 + timing().renew_interval + claim_length();
    until(&h, "extended deadline", |s, _| {
        s.claim.is_some_and(|c| c.deadline == expected)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_step_down_exactly_at_the_deadline_then_campaign_again() {
    let t0 = Instant::now();
    let failures = (0..20).map(|_| Step::Answer(Duration::from_millis(100), Err("down")));
    let h = start(
        Script {
            campaigns: [acquired(0, 1)].into(),
            renews: failures.collect(),
        },
        false,
    );
    let deadline = t0 + claim_length();
    until(&h, "leader", |s, now| s.is_leader_at(now)).await;
    // The answer at any instant before the deadline is "leader", at the deadline "no",
    // whether or not the elector task has run.
    assert!(h
        .status
        .borrow()
        .is_leader_at(deadline - Duration::from_millis(1)));
    assert!(!h.status.borrow().is_leader_at(deadline));
    let stepped = until(&h, "stepped down", |s, _| s.role != Role::Leader).await;
    assert!(
        stepped >= deadline && stepped <= deadline + Duration::from_millis(5),
        "{:?}",
        stepped - deadline
    );
    // It campaigns again and becomes a follower of the script's idle holder.
    until(&h, "follower", |s, _| s.role == Role::Follower).await;
    assert_eq!(
        h.calls
            .released_while_published_leader
            .load(Ordering::SeqCst),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn a_renew_answer_that_arrives_after_the_deadline_never_extends_the_claim() {
    let t0 = Instant::now();
    let h = start(
        Script {
            campaigns: [acquired(0, 9)].into(),
            // The store answers "renewed", but the process was frozen past its deadline.
            renews: [Step::Frozen(TTL * 2, Renewal::Renewed)].into(),
        },
        false,
    );
    until(&h, "leader", |s, now| s.is_leader_at(now)).await;
    let first_deadline = t0 + claim_length();
    let stepped = until(&h, "stepped down", |s, _| s.role != Role::Leader).await;
    assert!(stepped > first_deadline);
    // The late reply did not publish any later deadline.
    assert!(h.status.borrow().claim.is_none());
    assert!(
        h.calls.release.load(Ordering::SeqCst) >= 1,
        "it frees the store after a late answer"
    );
}

#[tokio::test(start_paused = true)]
async fn an_acquire_answer_that_arrives_after_the_deadline_is_not_claimed() {
    let h = start(
        Script {
            campaigns: [Step::Frozen(TTL * 2, Campaign::Acquired { token: 4 })].into(),
            ..Default::default()
        },
        false,
    );
    until(&h, "follower", |s, _| s.role == Role::Follower).await;
    assert_eq!(
        h.status.borrow().transitions,
        1,
        "only the other holder was ever seen"
    );
    assert!(h.calls.release.load(Ordering::SeqCst) >= 1);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_steps_down_at_once_and_exit_on_loss_ends_the_loop() {
    let h = start(
        Script {
            campaigns: [acquired(0, 1)].into(),
            renews: [Step::Answer(Duration::from_millis(5), Ok(Renewal::Lost))].into(),
        },
        true,
    );
    let exit = h.task.await.expect("elector task");
    assert_eq!(exit, Exit::LostLeadership);
    assert!(!h.status.borrow().is_leader_at(Instant::now()));
}

/// A leader (token 1) told to shut down, once its elector ended: its calls.
async fn leader_shut_down() -> Arc<Calls> {
    let h = start(
        Script {
            campaigns: [acquired(0, 1)].into(),
            ..Default::default()
        },
        false,
    );
    until(&h, "leader", |s, now| s.is_leader_at(now)).await;
    h.shutdown.send(true).expect("send");
    assert_eq!(h.task.await.expect("elector task"), Exit::Shutdown);
    h.calls
}

#[tokio::test(start_paused = true)]
async fn shutdown_publishes_not_leader_before_it_releases() {
    let calls = leader_shut_down().await;
    assert_eq!(calls.release.load(Ordering::SeqCst), 1);
    assert_eq!(
        calls.released_while_published_leader.load(Ordering::SeqCst),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn the_store_connections_outlive_a_release_at_shutdown_by_the_linger() {
    let calls = leader_shut_down().await;
    let released = calls.released_at.lock().ok().and_then(|at| *at);
    let dropped = calls.dropped_at.lock().ok().and_then(|at| *at);
    let (released, dropped) = (released.expect("released"), dropped.expect("dropped"));
    assert_eq!(dropped - released, driver::LINGER);
}

#[tokio::test(start_paused = true)]
async fn a_follower_that_stops_goes_at_once() {
    let h = start(Script::default(), false);
    until(&h, "following", |s, _| s.holder.is_some()).await;
    let stopped = Instant::now();
    h.shutdown.send(true).expect("send");
    assert_eq!(h.task.await.expect("elector task"), Exit::Shutdown);
    let dropped = h.calls.dropped_at.lock().ok().and_then(|at| *at);
    assert_eq!(dropped.expect("dropped") - stopped, Duration::ZERO);
}

/// The transition log's lines of a candidate that finds the lease held, wakes on a
/// change, takes it (token 7) and is then shut down.
async fn handover_lines() -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("transitions.jsonl");
    let log = TransitionLog::open(Some(&path), "me").expect("log");
    let held = Step::Answer(Duration::from_millis(5), Ok(Campaign::Held(None)));
    let script = Script {
        campaigns: [held, acquired(2, 7)].into(),
        ..Default::default()
    };
    let h = start_logged(script, false, log);
    until(&h, "leader", |s, now| s.is_leader_at(now)).await;
    h.shutdown.send(true).expect("send");
    assert_eq!(h.task.await.expect("elector task"), Exit::Shutdown);
    let text = std::fs::read_to_string(&path).expect("read the log");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_log_marks_the_wake_before_a_claim_and_the_release_after_its_end() {
    let lines = handover_lines().await;
    let events: Vec<_> = lines.iter().map(|l| l["event"].as_str()).collect();
    assert_eq!(
        events,
        [Some("claim_start"), Some("claim_end"), Some("release")]
    );
    let ns = |i: usize, k: &str| lines[i][k].as_u64().unwrap_or_else(|| panic!("{k}"));
    // Woke, then the acquiring request 0 later, answered 2 ms after.
    assert_eq!(ns(0, "sent_ns"), ns(0, "woke_ns"));
    assert_eq!(ns(0, "at_ns") - ns(0, "sent_ns"), 2_000_000);
    // The release of the tenure that ended, sent after its end.
    assert_eq!(lines[2]["token"].as_u64(), Some(7));
    assert!(ns(2, "sent_ns") >= ns(1, "at_ns"));
    assert!(ns(2, "at_ns") >= ns(2, "sent_ns"));
}

/// A leader (token 1) whose store hands it token 2 when it campaigns again.
async fn leading_for_two_tenures() -> Harness {
    let h = start(
        Script {
            campaigns: [acquired(0, 1), acquired(0, 2)].into(),
            ..Default::default()
        },
        false,
    );
    until(&h, "leader", |s, now| s.is_leader_at(now)).await;
    h
}

#[tokio::test(start_paused = true)]
async fn release_request_steps_down_and_sits_out_before_campaigning() {
    let h = leading_for_two_tenures().await;
    assert_eq!(ask_release(&h, None, None).await, Released::Yes);
    let released_at = Instant::now();
    assert!(!h.status.borrow().is_leader_at(released_at));
    let again = until(&h, "leader again", |s, now| s.is_leader_at(now)).await;
    assert!(again - released_at >= timing().renew_interval);
    assert_eq!(h.status.borrow().claim.map(|c| c.token), Some(2));
}

/// Asks the elector for a release (a switchover with `to`) and returns its answer.
async fn ask_release(h: &Harness, cooldown: Option<Duration>, to: Option<&str>) -> Released {
    let (tx, rx) = oneshot::channel();
    let request = ReleaseRequest {
        reply: tx,
        cooldown,
        to: to.map(str::to_owned),
    };
    h.releases.send(request).await.expect("send");
    rx.await.expect("answer")
}

async fn switch_to(h: &Harness, to: &str) -> Released {
    ask_release(h, None, Some(to)).await
}

/// A switchover releases through `release_to` with the named candidate, only when
/// the store shows that candidate alive and it is not the leader itself; a refused
/// one releases nothing and the leader goes on leading.
#[tokio::test(start_paused = true)]
async fn a_switchover_leaves_the_lease_to_a_live_candidate_only() {
    let h = leading_for_two_tenures().await;
    let dead = switch_to(&h, "gone").await;
    assert_eq!(
        dead,
        Released::NotACandidate {
            live: vec!["me".into(), "alive".into()]
        }
    );
    assert_eq!(switch_to(&h, "me").await, Released::ToSelf);
    assert_eq!(h.calls.release.load(Ordering::SeqCst), 0);
    assert!(h.status.borrow().is_leader_at(Instant::now()));
    assert_eq!(switch_to(&h, "alive").await, Released::Yes);
    assert!(!h.status.borrow().is_leader_at(Instant::now()));
    assert_eq!(*h.calls.released_to.lock().expect("lock"), vec!["alive"]);
    // The next tenure's releases are plain ones again.
    until(&h, "leader again", |s, now| s.is_leader_at(now)).await;
    h.shutdown.send(true).expect("shutdown");
    until(&h, "released at shutdown", |s, now| !s.is_leader_at(now)).await;
    sleep(Duration::from_secs(1)).await;
    assert_eq!(h.calls.release.load(Ordering::SeqCst), 2);
    assert_eq!(h.calls.released_to.lock().expect("lock").len(), 1);
}

/// A leader (tokens 1, then 2 when it campaigns again) that has just released with
/// this cooldown.
async fn leader_released_with(cooldown: Duration) -> Harness {
    let h = leading_for_two_tenures().await;
    assert_eq!(ask_release(&h, Some(cooldown), None).await, Released::Yes);
    h
}

/// A cooldown is a pause the elector chose, not a hang: `/healthz` (the heartbeat)
/// stays fresh through a cooldown of any length (a stale one would have the liveness
/// probe restart the sidecar and lose the cooldown).
#[tokio::test(start_paused = true)]
async fn a_long_cooldown_keeps_the_heartbeat_fresh() {
    let cooldown = Duration::from_secs(120);
    let h = leader_released_with(cooldown).await;
    let released_at = Instant::now();
    while Instant::now() - released_at < cooldown {
        sleep(Duration::from_millis(500)).await;
        let now = Instant::now();
        assert!(
            h.heartbeat.is_alive_at(now),
            "no heartbeat {:?} into the cooldown",
            now - released_at
        );
        assert!(!h.status.borrow().is_leader_at(now) || now - released_at >= cooldown);
    }
    let again = until(&h, "leader again", |s, now| s.is_leader_at(now)).await;
    assert!(again - released_at >= cooldown);
}

/// A release request while the elector pauses (a cooldown, a back-off) is answered
/// at once with "not leader", not after the pause.
#[tokio::test(start_paused = true)]
async fn a_release_request_during_a_cooldown_is_answered_at_once() {
    let h = leader_released_with(Duration::from_secs(60)).await;
    sleep(Duration::from_secs(1)).await;
    let (tx, rx) = oneshot::channel();
    let asked = Instant::now();
    let second = ReleaseRequest {
        reply: tx,
        cooldown: None,
        to: Some("alive".into()),
    };
    h.releases.send(second).await.expect("send");
    let answer = tokio::time::timeout(Duration::from_secs(2), rx).await;
    assert_eq!(
        answer.ok().and_then(Result::ok),
        Some(Released::NotLeader),
        "no answer to a release {:?} after it was asked, during a cooldown",
        Instant::now() - asked
    );
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_store_is_retried_with_backoff_and_is_not_ready() {
    let errors = (0..5).map(|_| Step::Answer(Duration::from_millis(10), Err("refused")));
    let h = start(
        Script {
            campaigns: errors.collect(),
            ..Default::default()
        },
        false,
    );
    sleep(Duration::from_millis(100)).await;
    assert!(!h.status.borrow().ready);
    until(&h, "follower after the store came back", |s, _| {
        s.role == Role::Follower && s.ready
    })
    .await;
}
