//! The tokio driver of the elector's [`Machine`]: it reads the clock, runs the
//! backend calls under their budgets, waits for what the machine waits for, and
//! applies the machine's effects to `Status`, the transition log, the observer and
//! the log. It decides nothing: every choice is the machine's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use super::machine::{
    Answer, Config, Effect, Event, Exit, Failure, LogLine, Machine, Next, Note, Op, Publish, Say,
    Time, WaitOn,
};
use super::{await_shown, Heartbeat, Marks, Observer, ReleaseRequest, Released, TransitionLog};
use crate::backend::{Backend, BackendError};
use crate::status::{Claim, Holder, Role, Status, TenureHold};
use crate::timing::Timing;

/// The parts an elector is built from, besides the backend.
pub struct ElectorParts {
    pub timing: Timing,
    pub status: watch::Sender<Status>,
    pub observer: Arc<dyn Observer>,
    pub log: TransitionLog,
    pub releases: mpsc::Receiver<ReleaseRequest>,
    pub shutdown: watch::Receiver<bool>,
    pub heartbeat: Arc<Heartbeat>,
    pub exit_on_loss: bool,
    /// Publishers that must show "not leader" before a voluntary release (each says
    /// `true` once it does), like the Pod label; waited for at most a backend timeout.
    pub before_release: Vec<watch::Receiver<bool>>,
    /// Signals that must show "stopped" before any release, up to the claim's deadline.
    pub must_stop: Vec<watch::Receiver<bool>>,
    /// Signals that must show "drained" before a graceful release, up to
    /// `drain_timeout` and the claim's deadline, while the lease is renewed.
    pub drained: Vec<watch::Receiver<bool>>,
    pub drain_timeout: Duration,
}

/// The elector: the machine, run against one backend.
pub struct Elector<B: Backend> {
    backend: B,
    machine: Machine,
    epoch: Instant,
    status: watch::Sender<Status>,
    observer: Arc<dyn Observer>,
    log: TransitionLog,
    releases: mpsc::Receiver<ReleaseRequest>,
    replies: HashMap<u64, oneshot::Sender<Released>>,
    next_request: u64,
    /// The release request the machine holds, when it is a switchover, and to whom:
    /// every release while it is unanswered leaves the lease to that candidate.
    switchover: Option<(u64, String)>,
    identity: String,
    shutdown: watch::Receiver<bool>,
    shutdown_told: bool,
    heartbeat: Arc<Heartbeat>,
    before_release: Vec<watch::Receiver<bool>>,
    must_stop: Vec<watch::Receiver<bool>>,
    drained: Vec<watch::Receiver<bool>>,
    /// The one strong copy of the tenure's hold ([`crate::status::TenureHold`]), from
    /// the acquisition until the tenure ends or the lease is released.
    hold: Option<Arc<std::os::fd::OwnedFd>>,
    /// A tenure ended for the shutdown and its release was sent: the backend lingers
    /// before it goes ([`LINGER`]).
    released_at_shutdown: bool,
    /// A tenure ended for the shutdown (its release follows).
    stepped_down_at_shutdown: bool,
    /// The marks of the handover's steps in the transition log: when the last wait
    /// ended on a possible change of holder (a claim follows its acquiring request
    /// with no wait between, so the claim's line takes it), and the token of the last
    /// tenure that ended (its release's line).
    woke_at: Option<Instant>,
    ended_token: u64,
    /// The "stepped down" log line of a tenure that just ended, until its release is
    /// on its way, and at shutdown until the [`LINGER`] after it is over: a log line
    /// wakes the log's writer thread, whose run on a small node delays the store and
    /// the successor by tens of microseconds while the successor takes over.
    unsaid_end: Option<(u64, &'static str)>,
}

/// How long the backend's connections stay open after a release at shutdown before
/// the process ends them. The successor takes the lease within milliseconds of the
/// release; ending our sessions at that same moment makes the store (and, on a shared
/// node, the machine) do their teardown while it serves the successor's take, which
/// slows the handover by several milliseconds on a small server. After this pause the
/// teardown runs when nobody waits on it.
pub const LINGER: Duration = Duration::from_millis(100);

impl<B: Backend> Elector<B> {
    pub fn new(backend: B, parts: ElectorParts) -> Self {
        let flaws = super::machine::Flaws {
            overclaim: crate::sabotage::overclaim(),
            claim_on_error: crate::sabotage::claims_on_error(),
            ..Default::default()
        };
        let config = Config {
            timing: parts.timing,
            exit_on_loss: parts.exit_on_loss,
            publishers: !parts.before_release.is_empty(),
            must_stop: !parts.must_stop.is_empty(),
            drain: (!parts.drained.is_empty()).then_some(parts.drain_timeout),
            seed: rand::rng().random(),
            flaws,
        };
        let identity = parts.status.borrow().identity.clone();
        Elector {
            backend,
            machine: Machine::new(config),
            epoch: Instant::now(),
            status: parts.status,
            observer: parts.observer,
            log: parts.log,
            releases: parts.releases,
            replies: HashMap::new(),
            next_request: 0,
            switchover: None,
            identity,
            shutdown: parts.shutdown,
            shutdown_told: false,
            heartbeat: parts.heartbeat,
            before_release: parts.before_release,
            must_stop: parts.must_stop,
            drained: parts.drained,
            hold: None,
            released_at_shutdown: false,
            stepped_down_at_shutdown: false,
            woke_at: None,
            ended_token: 0,
            unsaid_end: None,
        }
    }

    fn now(&self) -> Time {
        Instant::now().saturating_duration_since(self.epoch)
    }

    fn instant(&self, t: Time) -> Instant {
        self.epoch + t
    }

    /// Runs until shutdown (or a loss with `--exit-on-loss`).
    pub async fn run(mut self) -> Exit {
        let mut event = Event::Start;
        loop {
            self.heartbeat.beat();
            let step = self.machine.on(self.now(), event);
            for effect in step.effects {
                self.apply(effect);
            }
            // A step-down's line waits until its release is on its way, at shutdown
            // until the process is about to end (`unsaid_end`).
            let releases = matches!(step.next, Next::Call { op, .. } if op == Op::Release);
            if !releases {
                self.say_ended(false);
            }
            event = match step.next {
                Next::Exit(Exit::Shutdown) => {
                    let budget = self.machine.config().timing.backend_timeout;
                    retire(budget, &mut self.backend).await;
                    if self.released_at_shutdown {
                        tokio::time::sleep(LINGER).await;
                    }
                    self.say_ended(true);
                    return Exit::Shutdown;
                }
                Next::Exit(exit) => {
                    self.say_ended(true);
                    return exit;
                }
                Next::Call { id, op, budget } => {
                    let answer = self.call(op, budget).await;
                    self.say_ended(false);
                    self.note_slots();
                    Event::Answer { id, answer }
                }
                Next::Wait { until, on } => {
                    let event = self.wait(until, on).await;
                    self.woke_at = matches!(event, Event::Woke(_)).then(Instant::now);
                    event
                }
            };
        }
    }

    /// One backend call under its budget.
    async fn call(&mut self, op: Op, budget: Duration) -> Answer {
        let shutting_down = self.shutting_down();
        let observer = &*self.observer;
        let backend = &mut self.backend;
        match op {
            Op::Campaign => Answer::Campaign {
                result: failure(timed(observer, "campaign", budget, backend.campaign()).await),
                ttl: backend.lease_ttl(),
                lease: backend.lease_index(),
            },
            Op::Renew => Answer::Renew {
                result: failure(timed(observer, "renew", budget, backend.renew()).await),
                ttl: backend.lease_ttl(),
            },
            Op::Release => {
                // Our copy of a descriptor-held lease must not outlive the release.
                self.hold = None;
                if shutting_down {
                    // Withdraw first: a coordinator that saw the release before the
                    // withdrawal would wait for this candidate's answer (the Lease's).
                    retire(budget, backend).await;
                    self.released_at_shutdown = self.stepped_down_at_shutdown;
                }
                let sent = Instant::now();
                let released = match &self.switchover {
                    Some((_, to)) => {
                        tracing::info!(to = %to, "switchover: leaving the lease to the named candidate");
                        timed(observer, "release", budget, backend.release_to(to)).await
                    }
                    None => timed(observer, "release", budget, backend.release()).await,
                };
                if let Err(e) = released {
                    tracing::warn!(error = %e, "release failed; the lease will expire by itself");
                }
                let marks = Marks {
                    sent: Some(sent),
                    ..Marks::default()
                };
                let token = self.ended_token;
                self.log.record("release", token, Instant::now(), marks);
                Answer::Release
            }
        }
    }

    /// The slots the backend reports (an election of several holders), into `Status`.
    fn note_slots(&mut self) {
        if let Some(slots) = self.backend.slots() {
            self.log.set_slot(slots.own.filter(|_| slots.count() > 1));
            self.status.send_if_modified(|s| {
                let changed = s.slots != slots;
                s.slots = slots;
                changed
            });
        }
    }

    /// A release request becomes an event, unless it is a switchover this leader
    /// refuses at once: to itself, or to a candidate the store does not show alive.
    async fn admit(&mut self, req: ReleaseRequest) -> Option<Event> {
        if let (Some(to), true) = (req.to.as_deref(), self.machine.leading()) {
            if let Some(refused) = self.check_target(to).await {
                let _ = req.reply.send(refused);
                return None;
            }
        }
        self.next_request += 1;
        let id = self.next_request;
        self.replies.insert(id, req.reply);
        if let Some(to) = req.to {
            self.switchover = Some((id, to));
        }
        Some(Event::ReleaseRequested {
            id,
            cooldown: req.cooldown,
        })
    }

    /// Why a switchover to `to` is refused, if it is.
    async fn check_target(&mut self, to: &str) -> Option<Released> {
        if to == self.identity {
            return Some(Released::ToSelf);
        }
        let budget = self.machine.config().timing.backend_timeout;
        match timeout(budget, self.backend.candidates()).await {
            Ok(Ok(Some(live))) if !live.iter().any(|c| c == to) => {
                Some(Released::NotACandidate { live })
            }
            Ok(Ok(_)) => None,
            Ok(Err(BackendError::Refused { reason, .. })) => Some(Released::Refused(reason)),
            Ok(Err(e)) => Some(Released::Unchecked(e.to_string())),
            Err(_) => Some(Released::Unchecked(format!(
                "the store did not list its candidates within {}",
                crate::settings::fmt_d(budget)
            ))),
        }
    }

    fn shutting_down(&self) -> bool {
        // A dropped sender means the process is going away: treat it as shutdown.
        *self.shutdown.borrow() || self.shutdown.has_changed().is_err()
    }

    /// Waits for what the machine waits for, for its `until`, a shutdown or a
    /// release request (one refused at once is answered, and the wait goes on),
    /// whichever comes first.
    async fn wait(&mut self, until: Option<Time>, on: WaitOn) -> Event {
        loop {
            match self.wait_once(until, on).await {
                Ok(event) => return event,
                Err(req) => {
                    if let Some(event) = self.admit(req).await {
                        return event;
                    }
                }
            }
        }
    }

    async fn wait_once(
        &mut self,
        until: Option<Time>,
        on: WaitOn,
    ) -> Result<Event, ReleaseRequest> {
        if !self.shutdown_told && self.shutting_down() {
            self.shutdown_told = true;
            return Ok(Event::Shutdown);
        }
        let at = until.map(|t| self.instant(t));
        let mut shutdown = self.shutdown.clone();
        let told = self.shutdown_told;
        let waited = Waited {
            backend: &mut self.backend,
            heartbeat: &self.heartbeat,
            beat_every: (self.machine.config().timing.retry_interval)
                .max(Duration::from_millis(10)),
            before_release: &mut self.before_release,
            must_stop: &mut self.must_stop,
            drained: &mut self.drained,
        };
        let req = tokio::select! {
            biased;
            _ = shutdown.changed(), if !told => None,
            Some(req) = self.releases.recv() => Some(req),
            event = waited.event(on, at) => return Ok(event),
            _ = sleep_until_some(at) => return Ok(Event::Timer),
        };
        match req {
            Some(req) => Err(req),
            None => {
                self.shutdown_told = true;
                Ok(Event::Shutdown)
            }
        }
    }

    fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::Publish(p) => self.publish(p),
            Effect::Log(line) => self.log_line(line),
            Effect::Note(note) => self.note(note),
            Effect::Say(say) => self.say(say),
            Effect::Reply { id, released } => {
                if self.switchover.as_ref().is_some_and(|(s, _)| *s == id) {
                    self.switchover = None;
                }
                if let Some(reply) = self.replies.remove(&id) {
                    let _ = reply.send(if released {
                        Released::Yes
                    } else {
                        Released::NotLeader
                    });
                }
            }
        }
    }

    fn publish(&mut self, p: Publish) {
        let now = Instant::now();
        let heard = Some((now, SystemTime::now()));
        match p {
            Publish::Campaigning => self.status.send_modify(|s| {
                if s.role != Role::Leader {
                    s.role = Role::Candidate;
                }
            }),
            Publish::NotLeading => {
                self.hold = None;
                self.status.send_modify(|s| {
                    s.role = Role::Candidate;
                    s.claim = None;
                    s.tenure_hold = TenureHold::new();
                });
            }
            Publish::Acquired { token, deadline } => self.publish_acquired(token, deadline),
            Publish::Extended { deadline } => {
                let deadline = self.instant(deadline);
                self.status.send_modify(|s| {
                    if let Some(c) = s.claim.as_mut() {
                        c.deadline = deadline;
                    }
                    s.heard_at = heard;
                });
            }
            Publish::SteppedDown => {
                self.hold = None;
                self.status.send_modify(|s| {
                    s.role = Role::Candidate;
                    s.claim = None;
                    s.tenure_hold = TenureHold::new();
                    note_holder(s, None);
                });
            }
            Publish::Observed(holder) => {
                self.hold = None;
                self.status.send_modify(|s| {
                    s.role = if holder.is_some() {
                        Role::Follower
                    } else {
                        Role::Candidate
                    };
                    s.claim = None;
                    s.tenure_hold = TenureHold::new();
                    note_holder(s, holder);
                    s.heard_at = heard;
                    s.ready = true;
                });
            }
            Publish::Heard => self.status.send_modify(|s| s.heard_at = heard),
            Publish::Draining { until } => {
                let until = self.instant(until);
                self.status.send_modify(|s| {
                    s.draining = true;
                    s.drain_until = Some(until);
                });
            }
            Publish::DrainEnded => self.status.send_modify(|s| s.drain_until = None),
            Publish::DrainOver => self.status.send_modify(|s| s.draining = false),
        }
    }

    fn publish_acquired(&mut self, token: u64, deadline: Time) {
        let deadline = self.instant(deadline);
        let identity = self.status.borrow().identity.clone();
        let holder = Holder {
            identity: identity.clone(),
            token: Some(token),
        };
        let now = Instant::now();
        self.hold = self.backend.tenure_hold().map(Arc::new);
        let hold = self.hold.as_ref().map(Arc::downgrade).unwrap_or_default();
        self.status.send_modify(|s| {
            s.role = Role::Leader;
            s.claim = Some(Claim {
                deadline,
                token,
                since: SystemTime::now(),
            });
            s.tenure_hold = hold;
            note_holder(s, Some(holder));
            s.heard_at = Some((now, SystemTime::now()));
            s.ready = true;
            s.own_tenures += 1;
        });
        tracing::info!(token, identity = %identity, "acquired leadership");
    }

    fn log_line(&mut self, line: LogLine) {
        let now = Instant::now();
        match line {
            LogLine::ClaimStart {
                token,
                sent,
                deadline,
            } => {
                let marks = Marks {
                    sent: Some(self.instant(sent)),
                    woke: self.woke_at.take(),
                    deadline: Some(self.instant(deadline)),
                    reason: None,
                };
                self.log.record("claim_start", token, now, marks);
            }
            LogLine::Deadline { token, deadline } => {
                let deadline = Some(self.instant(deadline));
                let marks = Marks {
                    deadline,
                    ..Marks::default()
                };
                self.log.record("deadline", token, now, marks);
            }
            LogLine::ClaimEnd { token, reason } => {
                self.stepped_down_at_shutdown |= self.shutting_down();
                self.ended_token = token;
                let marks = Marks {
                    reason: Some(reason),
                    ..Marks::default()
                };
                self.log.record("claim_end", token, now, marks);
                self.unsaid_end = Some((token, reason));
            }
        }
    }

    /// Logs the end of the last tenure, if not yet said; at shutdown only once the
    /// process is about to end (`at_exit`).
    fn say_ended(&mut self, at_exit: bool) {
        if !at_exit && self.shutting_down() {
            return;
        }
        if let Some((token, reason)) = self.unsaid_end.take() {
            tracing::info!(token, reason, "stepped down");
        }
    }

    fn note(&self, note: Note) {
        match note {
            Note::Acquired { campaign_took } => self.observer.acquired(campaign_took),
            Note::Lost => self.observer.lost(),
            Note::Released => self.observer.released(),
            Note::Renewed { ok, took } => self.observer.renewed(ok, took),
        }
    }

    fn say(&self, say: Say) {
        let fmt = crate::settings::fmt_d;
        match say {
            Say::AcquiredTooLate { token } => tracing::warn!(
                token,
                "acquired, but the answer arrived after the deadline; not claiming"
            ),
            Say::TokenNotGreater { token, last } => tracing::error!(
                token,
                last,
                "the backend handed out a token not greater than one this candidate already claimed; not claiming"
            ),
            Say::Lost { token, reason } => tracing::warn!(token, reason, "lost leadership"),
            Say::RenewIntervalAdapted {
                granted_ttl,
                configured,
                adapted,
            } => tracing::warn!(
                granted_ttl = %fmt(granted_ttl),
                renew_interval = %fmt(configured),
                adapted = %fmt(adapted),
                "the store granted a shorter ttl than asked for; renewing more often to fit it"
            ),
            Say::TooSlow { ttl } => tracing::warn!(
                ttl = %fmt(ttl),
                "too slow to hold a claim; sitting out one ttl before campaigning again"
            ),
            Say::Cooldown { cooldown } => tracing::info!(
                cooldown = %fmt(cooldown),
                "not campaigning again before the cooldown ends"
            ),
            Say::DrainTimedOut => {
                tracing::warn!("the app did not finish draining in time; releasing")
            }
            Say::LostWhileDraining => tracing::warn!("the lease was lost while the app drained"),
            Say::NotProvenGone => {
                tracing::error!("the command was not proven gone by the claim's deadline")
            }
            Say::NotReleasing { token } => {
                tracing::warn!(token, "not releasing; the lease expires by itself")
            }
        }
    }
}

/// What a wait borrows from the elector.
struct Waited<'a, B> {
    backend: &'a mut B,
    heartbeat: &'a Heartbeat,
    beat_every: Duration,
    before_release: &'a mut [watch::Receiver<bool>],
    must_stop: &'a mut [watch::Receiver<bool>],
    drained: &'a mut [watch::Receiver<bool>],
}

impl<B: Backend> Waited<'_, B> {
    /// The event `on` waits for; never resolves for a plain wait (the heartbeat goes
    /// on meanwhile, so a long pause never reads as a hang to the liveness probe).
    async fn event(self, on: WaitOn, until: Option<Instant>) -> Event {
        match on {
            WaitOn::Change { max } => Event::Woke(self.backend.wait_for_change(max).await),
            WaitOn::Lead => {
                let handover = self.backend.handover_requested();
                tokio::select! {
                    _ = self.backend.record_lost() => Event::RecordLost,
                    () = handover => Event::HandoverRequested,
                }
            }
            WaitOn::Time | WaitOn::Answer => loop {
                self.heartbeat.beat();
                sleep(self.beat_every).await;
            },
            WaitOn::Publishers => {
                let within = until.map_or(Duration::ZERO, |u| {
                    u.saturating_duration_since(Instant::now())
                });
                await_shown(self.before_release, within).await;
                Event::Done
            }
            WaitOn::Drained => {
                all_true(
                    self.drained,
                    "the drain publisher is gone; going on without it",
                )
                .await;
                Event::Done
            }
            WaitOn::Stopped => {
                all_true(self.must_stop, "the command's supervisor is gone").await;
                Event::Done
            }
        }
    }
}

/// Waits until every signal says `true` (a dropped sender counts, with a warning).
async fn all_true(signals: &mut [watch::Receiver<bool>], gone: &'static str) {
    for signal in signals {
        if signal.wait_for(|done| *done).await.is_err() {
            tracing::warn!("{gone}");
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A backend error as the machine sees it.
fn failure<T>(result: Result<T, BackendError>) -> Result<T, Failure> {
    result.map_err(|e| {
        tracing::warn!(error = %e, "backend call failed");
        Failure {
            timed_out: e.timed_out(),
        }
    })
}

/// Runs one backend operation under a timeout and counts its failures.
async fn timed<T>(
    observer: &dyn Observer,
    op: &'static str,
    limit: Duration,
    operation: impl std::future::Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    let result = match timeout(limit, operation).await {
        Ok(r) => r,
        Err(_) => Err(BackendError::TimedOut {
            op,
            detail: format!("no answer within {}", crate::settings::fmt_d(limit)),
        }),
    };
    if result.is_err() {
        observer.backend_error(op);
    }
    result
}

/// Updates the observed holder, counting a transition when it changed.
/// A holder that is seen again after a spell of "nobody known" (a step-down, a
/// fenced lock) is no new transition.
fn note_holder(s: &mut Status, holder: Option<Holder>) {
    if let Some(h) = &holder {
        if s.last_seen_holder.as_ref() != Some(h) {
            s.transitions += 1;
            s.holder_since = Some(SystemTime::now());
            s.last_seen_holder = Some(h.clone());
        }
    }
    s.holder = holder;
}

/// [`Backend::retire`] under `budget` (a no-op the second time, and for most stores).
async fn retire<B: Backend>(budget: Duration, backend: &mut B) {
    if timeout(budget, backend.retire()).await.is_err() {
        tracing::warn!("withdrawing the candidacy timed out");
    }
}
