//! The elector: the state machine that turns backend answers into one `Status`.
//!
//! It is the only writer of `Status` and the only owner of time. The safety
//! invariants of DESIGN §2 are kept here:
//!
//! 1. *At most one claim at a time* follows from 2 and from each backend's compare-
//!    and-act renew: a claim never outlives the lease the store granted.
//! 2. *The local deadline is conservative*: [`Elector::lead`] derives every deadline
//!    from the monotonic instant the acquire/renew request was **sent**, plus the ttl
//!    shrunk by the drift factor and the safety margin ([`Timing::claim_length`]). A
//!    reply that arrives at or after the current deadline never extends it: the
//!    candidate steps down instead.
//! 3. *Answers are checked at answer time*: `Status` carries the deadline, and
//!    publishers call [`Status::is_leader_at`]; the role flag alone is never trusted.
//!    On stepping down the elector publishes "not leader" **before** it logs the end of
//!    the claim and before it releases, so no observer can see a leader after release.
//! 4. *Fencing tokens* come from the backend with every acquisition and are published
//!    with the claim.
//! 5. *Release only what you hold* is the backend's compare-and-act.
//! 6. *Losing never kills the sidecar*: after a loss the loop campaigns again, unless
//!    `--exit-on-loss` asked for [`Exit::LostLeadership`].
//! 7. *Graceful shutdown releases*: shutdown publishes "not leader", then releases.
//! 9. *The leader hears about its own record*: between renewals [`Elector::lead`]
//!    waits on [`Backend::record_lost`] too, and steps down the moment the store shows
//!    the record deleted or taken.
//! 11. *A slow candidate does not block the election*: a candidate whose proof came
//!     too late (an acquisition answered after its deadline, a tenure whose deadline
//!     passed without a renew answered in time) releases whatever it may hold and
//!     sits out one ttl ([`Elector::sit_out_slow`]) before it campaigns again, so a
//!     candidate with a healthy link wins meanwhile. A campaign without an answer in
//!     time releases too, so that the next campaign never adopts what the unanswered
//!     one may have taken at the store.
//!
//! Two more guards live here: the elector never claims a token that is not greater
//! than every token it claimed before (a backend bug or a store that went back in
//! time must not hand out one token twice), and when the store grants a shorter ttl
//! than asked for, the renew interval shrinks to fit the granted claim (logged once)
//! instead of letting every tenure run out before its first renew.
//!
//! Every backend call runs under a timeout (the backend timeout, and never past the
//! current deadline while leading), so a frozen store cannot stall a step-down.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rand::Rng;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use crate::backend::{Backend, BackendError, Campaign, Renewal, Wake};
use crate::backoff::Backoff;
use crate::clock::to_monotonic_ns;
use crate::status::{Claim, FencingToken, Holder, Role, Status};
use crate::timing::Timing;

/// Why the elector loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Shutdown was asked for; any lease held was released.
    Shutdown,
    /// Leadership was lost and `--exit-on-loss` is set.
    LostLeadership,
}

/// Things the elector reports that are not part of `Status` (counters, histograms).
pub trait Observer: Send + Sync + 'static {
    fn acquired(&self, _campaign_took: Duration) {}
    fn lost(&self) {}
    fn released(&self) {}
    fn renewed(&self, _ok: bool, _took: Duration) {}
    fn backend_error(&self, _op: &'static str) {}
}

/// An observer that records nothing.
pub struct NoObserver;
impl Observer for NoObserver {}

/// A request to step down now (from `POST /release`); answered with whether we led.
/// A request to hand leadership over (`POST /release`): answered `true` once released,
/// `false` when not leading. `cooldown`: how long not to campaign again afterwards.
pub struct ReleaseRequest {
    pub reply: oneshot::Sender<bool>,
    pub cooldown: Option<Duration>,
}

/// The last time the elector loop made progress, for `/healthz`.
#[derive(Debug)]
pub struct Heartbeat {
    last: Mutex<Instant>,
    stuck_after: Duration,
}

impl Heartbeat {
    pub fn new(timing: &Timing) -> Arc<Self> {
        let longest_wait =
            timing.retry_interval.max(timing.renew_interval) + timing.backend_timeout;
        Arc::new(Heartbeat {
            last: Mutex::new(Instant::now()),
            stuck_after: longest_wait * 2 + Duration::from_secs(1),
        })
    }

    fn beat(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = Instant::now();
        }
    }

    /// True while the loop has made progress recently enough.
    pub fn is_alive_at(&self, now: Instant) -> bool {
        self.last
            .lock()
            .map(|last| now.saturating_duration_since(*last) <= self.stuck_after)
            .unwrap_or(false)
    }
}

/// One line of the transition log (JSON). Times are `CLOCK_MONOTONIC` nanoseconds.
#[derive(Serialize)]
struct TransitionRecord<'a> {
    event: &'a str,
    identity: &'a str,
    pid: u32,
    token: FencingToken,
    at_ns: u64,
    /// For `claim_start`: when the acquiring request was sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    sent_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// Append-only JSON-lines log of claims, for the election checker and post-mortems.
/// Each line is one `write` on an `O_APPEND` file. `claim_start` and `deadline` lines
/// are written *before* the matching `Status` is published, `claim_end` *after* "not
/// leader" is published: either way the logged claim covers every moment the process
/// could have answered "leader", so a process killed at any point never asserted more
/// than its log shows.
pub struct TransitionLog {
    file: Option<std::fs::File>,
    identity: String,
}

impl TransitionLog {
    pub fn open(path: Option<&Path>, identity: &str) -> std::io::Result<Self> {
        let file = match path {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
            None => None,
        };
        Ok(TransitionLog {
            file,
            identity: identity.to_owned(),
        })
    }

    pub fn disabled() -> Self {
        TransitionLog {
            file: None,
            identity: String::new(),
        }
    }

    fn record(
        &mut self,
        event: &str,
        token: FencingToken,
        at: Instant,
        sent: Option<Instant>,
        deadline: Option<Instant>,
        reason: Option<&str>,
    ) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let rec = TransitionRecord {
            event,
            identity: &self.identity,
            pid: std::process::id(),
            token,
            at_ns: to_monotonic_ns(at),
            sent_ns: sent.map(to_monotonic_ns),
            deadline_ns: deadline.map(to_monotonic_ns),
            reason,
        };
        let Ok(mut line) = serde_json::to_vec(&rec) else {
            return;
        };
        line.push(b'\n');
        if let Err(e) = file.write_all(&line) {
            tracing::warn!(error = %e, "could not write the transition log");
        }
    }
}

/// How a tenure ended.
enum TenureEnd {
    Shutdown,
    /// The store says the lease is someone else's now.
    Lost,
    /// The proof of holding came too late (the deadline passed): our link or the
    /// store is too slow to hold a useful claim.
    TooSlow,
    Released,
}

pub struct Elector<B: Backend> {
    backend: B,
    timing: Timing,
    status: watch::Sender<Status>,
    observer: Arc<dyn Observer>,
    log: TransitionLog,
    releases: mpsc::Receiver<ReleaseRequest>,
    shutdown: watch::Receiver<bool>,
    heartbeat: Arc<Heartbeat>,
    exit_on_loss: bool,
    before_release: Vec<watch::Receiver<bool>>,
    /// What must be gone before any release, however the tenure ends (the command of
    /// `run`): waited for up to the claim's deadline.
    must_stop: Vec<watch::Receiver<bool>>,
    /// The app's drain (`--drain-url`) before a graceful release, renewing meanwhile.
    drained: Vec<watch::Receiver<bool>>,
    drain_timeout: Duration,
    /// How long to stay out after the release just made (`POST /release?cooldown=`).
    cooldown: Option<Duration>,
    /// The current claim's deadline, while leading.
    claim_deadline: Option<Instant>,
    /// The greatest token this process has claimed (invariant 4 across tenures).
    last_token: Option<FencingToken>,
    /// Whether the shortened renew interval was logged already.
    adapted_logged: bool,
}

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

impl<B: Backend> Elector<B> {
    pub fn new(backend: B, parts: ElectorParts) -> Self {
        Elector {
            backend,
            timing: parts.timing,
            status: parts.status,
            observer: parts.observer,
            log: parts.log,
            releases: parts.releases,
            shutdown: parts.shutdown,
            heartbeat: parts.heartbeat,
            exit_on_loss: parts.exit_on_loss,
            before_release: parts.before_release,
            must_stop: parts.must_stop,
            drained: parts.drained,
            drain_timeout: parts.drain_timeout,
            cooldown: None,
            claim_deadline: None,
            last_token: None,
            adapted_logged: false,
        }
    }

    fn shutting_down(&self) -> bool {
        // A dropped sender means the process is going away: treat it as shutdown.
        *self.shutdown.borrow() || self.shutdown.has_changed().is_err()
    }

    /// Runs until shutdown (or a loss with `--exit-on-loss`).
    pub async fn run(mut self) -> Exit {
        let mut backoff = Backoff::new(FIRST_RETRY, self.timing.retry_interval);
        let mut campaign_started = Instant::now();
        loop {
            self.heartbeat.beat();
            if self.shutting_down() {
                return self.finish().await;
            }
            let sent = Instant::now();
            match timed(
                &*self.observer,
                "campaign",
                self.timing.backend_timeout,
                self.backend.campaign(),
            )
            .await
            {
                Ok(Campaign::Acquired { token }) => {
                    backoff.reset();
                    let deadline = sent + self.claim_length();
                    if Instant::now() >= deadline {
                        // The answer came too late to claim anything (invariant 2), and a
                        // link this slow would only keep the lease from the others.
                        tracing::warn!(
                            token,
                            "acquired, but the answer arrived after the deadline; not claiming"
                        );
                        self.release_quietly().await;
                        self.sit_out_slow().await;
                        continue;
                    }
                    if self.last_token.is_some_and(|last| token <= last) {
                        // Two tenures must never share a token, nor may one go back.
                        tracing::error!(
                            token,
                            last = self.last_token,
                            "the backend handed out a token not greater than one this candidate already claimed; not claiming"
                        );
                        self.release_quietly().await;
                        self.pause(jittered(backoff.next_wait())).await;
                        continue;
                    }
                    self.last_token = Some(token);
                    self.observer.acquired(campaign_started.elapsed());
                    match self.lead(token, sent, deadline).await {
                        TenureEnd::Shutdown => return Exit::Shutdown,
                        TenureEnd::Lost | TenureEnd::TooSlow if self.exit_on_loss => {
                            return Exit::LostLeadership
                        }
                        TenureEnd::Lost => {}
                        TenureEnd::TooSlow => self.sit_out_slow().await,
                        TenureEnd::Released => self.sit_out().await,
                    }
                    campaign_started = Instant::now();
                }
                Ok(Campaign::Held(holder)) => {
                    backoff.reset();
                    self.observe(holder);
                    self.follow().await;
                }
                Err(_) if crate::sabotage::claims_on_error() => {
                    let token = self.last_token.map_or(1, |t| t + 1);
                    self.last_token = Some(token);
                    let deadline = sent + self.claim_length();
                    if let TenureEnd::Shutdown = self.lead(token, sent, deadline).await {
                        return Exit::Shutdown;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, backend = self.backend.name(), "campaign failed; retrying");
                    self.status.send_modify(|s| {
                        if s.role != Role::Leader {
                            s.role = Role::Candidate;
                        }
                    });
                    if e.timed_out() {
                        // The unanswered campaign may still take the lease at the store,
                        // and the next one must not adopt it: give it back. (No full
                        // sit-out here: a store that was merely down for everyone
                        // would leave every candidate sitting out after it returned.)
                        self.release_quietly().await;
                    }
                    self.pause(jittered(backoff.next_wait())).await;
                }
            }
        }
    }

    /// Waits as a follower until the backend reports a possible change. A quiet wake
    /// (the store answered, nothing changed) refreshes the observation without a new
    /// campaign, so backends that are told of changes need not poll.
    async fn follow(&mut self) {
        loop {
            self.heartbeat.beat();
            let max = jittered(self.timing.retry_interval);
            let mut shutdown = self.shutdown.clone();
            let wake = tokio::select! {
                wake = self.backend.wait_for_change(max) => wake,
                _ = shutdown.changed() => return,
                Some(req) = self.releases.recv() => {
                    let _ = req.reply.send(false);
                    continue;
                }
            };
            match wake {
                Wake::Changed => return,
                Wake::Waiting => {}
                Wake::Quiet => {
                    let now = Instant::now();
                    self.status
                        .send_modify(|s| s.heard_at = Some((now, SystemTime::now())));
                }
            }
        }
    }

    fn claim_length(&self) -> Duration {
        self.timing.claim_length(self.backend.lease_ttl()) + crate::sabotage::overclaim()
    }

    /// Misbehaves on purpose when a checker self-test asks (see [`crate::sabotage`]):
    /// gives the lease back, then goes on claiming. A no-op otherwise.
    async fn overclaim_after(&mut self, release: bool) {
        let extra = crate::sabotage::overclaim();
        if !extra.is_zero() {
            if release {
                self.release_quietly().await;
            }
            sleep(extra).await;
        }
    }

    /// The configured renew interval, or a third of the claim when the store granted
    /// a ttl so much shorter than asked that the configured interval no longer fits
    /// twice into a claim (the leader would lose every tenure before renewing).
    fn renew_interval(&mut self) -> Duration {
        let claim = self.claim_length();
        let configured = self.timing.renew_interval;
        if configured * 2 <= claim {
            return configured;
        }
        let adapted = claim / 3;
        if !self.adapted_logged {
            self.adapted_logged = true;
            tracing::warn!(
                granted_ttl = %humantime::format_duration(self.backend.lease_ttl()),
                renew_interval = %humantime::format_duration(configured),
                adapted = %humantime::format_duration(adapted),
                "the store granted a shorter ttl than asked for; renewing more often to fit it"
            );
        }
        adapted
    }

    /// Leads from an acquisition sent at `sent` until the tenure ends.
    async fn lead(
        &mut self,
        token: FencingToken,
        sent: Instant,
        mut deadline: Instant,
    ) -> TenureEnd {
        self.publish_acquired(token, sent, deadline);
        let renew_interval = self.renew_interval();
        let mut next_renew = sent + renew_interval;
        loop {
            self.heartbeat.beat();
            let mut shutdown = self.shutdown.clone();
            let wake = next_renew.min(deadline);
            let handover = self.backend.handover_requested();
            tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    self.overclaim_after(true).await;
                    self.hand_over(token, "shutdown", &mut deadline, &mut next_renew).await;
                    return TenureEnd::Shutdown;
                }
                Some(req) = self.releases.recv() => {
                    let req = if crate::sabotage::overclaim().is_zero() {
                        Some(req)
                    } else {
                        // Misbehaving on purpose: answer at once, claim on after.
                        let _ = req.reply.send(true);
                        None
                    };
                    self.overclaim_after(true).await;
                    self.hand_over(token, "release requested", &mut deadline, &mut next_renew)
                        .await;
                    if let Some(req) = req {
                        self.cooldown = req.cooldown;
                        let _ = req.reply.send(true);
                    }
                    return TenureEnd::Released;
                }
                () = handover => {
                    // The store prefers another candidate: a release without a cooldown.
                    self.hand_over(token, "another candidate is preferred", &mut deadline, &mut next_renew)
                        .await;
                    return TenureEnd::Released;
                }
                _ = self.backend.record_lost() => {
                    return self
                        .lose(token, "our record in the store was deleted or taken")
                        .await;
                }
                _ = sleep_until(wake) => {}
            }
            if self.shutting_down() {
                continue;
            }
            if let Some(end) = self.renew_once(token, &mut deadline, &mut next_renew).await {
                return end;
            }
        }
    }

    /// The claim begins: the transition log, `Status` and the log line.
    fn publish_acquired(&mut self, token: FencingToken, sent: Instant, deadline: Instant) {
        let now = Instant::now();
        self.claim_deadline = Some(deadline);
        self.log
            .record("claim_start", token, now, Some(sent), Some(deadline), None);
        let identity = self.status.borrow().identity.clone();
        let holder = Holder {
            identity: identity.clone(),
            token: Some(token),
        };
        self.status.send_modify(|s| {
            s.role = Role::Leader;
            s.claim = Some(Claim {
                deadline,
                token,
                since: SystemTime::now(),
            });
            note_holder(s, Some(holder.clone()));
            s.heard_at = Some((now, SystemTime::now()));
            s.ready = true;
            s.own_tenures += 1;
        });
        tracing::info!(token, identity = %identity, "acquired leadership");
    }

    /// One renewal, sent now: the deadline moves to the send time plus a claim when
    /// the answer comes before the old deadline. `Some` when the tenure ends.
    async fn renew_once(
        &mut self,
        token: FencingToken,
        deadline: &mut Instant,
        next_renew: &mut Instant,
    ) -> Option<TenureEnd> {
        let renew_interval = self.renew_interval();
        let sent = Instant::now();
        if sent >= *deadline {
            self.lose(token, "the deadline passed without a successful renew")
                .await;
            return Some(TenureEnd::TooSlow);
        }
        let budget = self.timing.backend_timeout.min(*deadline - sent);
        let result = timed(&*self.observer, "renew", budget, self.backend.renew()).await;
        let now = Instant::now();
        match result {
            Ok(Renewal::Renewed) => {
                self.observer.renewed(true, now - sent);
                if now >= *deadline {
                    // Never extend a claim from a reply that arrives after the deadline.
                    self.lose(token, "the renew answer arrived after the deadline")
                        .await;
                    return Some(TenureEnd::TooSlow);
                }
                let extended = sent + self.claim_length();
                if extended > *deadline {
                    *deadline = extended;
                    self.claim_deadline = Some(extended);
                    self.log
                        .record("deadline", token, now, None, Some(extended), None);
                }
                let current = *deadline;
                self.status.send_modify(|s| {
                    if let Some(c) = s.claim.as_mut() {
                        c.deadline = current;
                    }
                    s.heard_at = Some((now, SystemTime::now()));
                });
                *next_renew = sent + renew_interval;
                None
            }
            Ok(Renewal::Lost) => {
                self.observer.renewed(false, now - sent);
                Some(
                    self.lose(token, "the store no longer holds our lease")
                        .await,
                )
            }
            Err(e) => {
                self.observer.renewed(false, now - sent);
                tracing::warn!(error = %e, token, "renew failed; retrying until the deadline");
                // Retry soon, but not in a tight loop against a failing store.
                *next_renew = now + (renew_interval / 4).max(Duration::from_millis(10));
                None
            }
        }
    }

    async fn lose(&mut self, token: FencingToken, reason: &'static str) -> TenureEnd {
        self.overclaim_after(false).await;
        self.step_down(token, reason);
        self.observer.lost();
        tracing::warn!(token, reason, "lost leadership");
        // Our value may still be in the store (a late renew); free it for the others,
        // once what must stop first has stopped (or the claim's deadline passed).
        self.await_stopped().await;
        self.release_quietly().await;
        TenureEnd::Lost
    }

    /// Publishes "not leader" first, then records the end of the claim.
    fn step_down(&mut self, token: FencingToken, reason: &str) {
        self.status.send_modify(|s| {
            s.role = Role::Candidate;
            s.claim = None;
            note_holder(s, None);
        });
        self.log
            .record("claim_end", token, Instant::now(), None, None, Some(reason));
        tracing::info!(token, reason, "stepped down");
    }

    /// A graceful end of the tenure: "not leader" published, the app drained (the
    /// lease renewed meanwhile), what must stop stopped, then the release.
    async fn hand_over(
        &mut self,
        token: FencingToken,
        reason: &str,
        deadline: &mut Instant,
        next_renew: &mut Instant,
    ) {
        let draining = !self.drained.is_empty();
        let drain_end = Instant::now() + self.drain_timeout;
        if draining {
            // Marked while still leader, so the drain publisher cannot take the
            // step-down for a loss; with the instant the drain must end by (the lease is
            // renewed meanwhile; if it is lost first, the drain ends then).
            self.status.send_modify(|s| {
                s.draining = true;
                s.drain_until = Some(drain_end);
            });
        }
        self.step_down(token, reason);
        self.observer.released();
        self.await_publishers().await;
        if draining {
            self.await_drained(drain_end, deadline, next_renew).await;
            // Ended, acknowledged or not: a drain publisher still asking tells the app.
            self.status.send_modify(|s| s.drain_until = None);
        }
        if self.await_stopped().await {
            self.release_quietly().await;
        } else {
            // Processes of the command may still run: let the lease expire by itself
            // instead of handing it over now.
            tracing::warn!(token, "not releasing; the lease expires by itself");
        }
        if draining {
            self.status.send_modify(|s| s.draining = false);
        }
    }

    /// Waits for the drain acknowledgements, at most `drain_timeout` and never past the
    /// claim's deadline, renewing the lease on schedule so the claim runs on meanwhile.
    async fn await_drained(
        &mut self,
        until: Instant,
        deadline: &mut Instant,
        next_renew: &mut Instant,
    ) {
        let mut drained = self.drained.clone();
        let all = async move {
            for d in &mut drained {
                if d.wait_for(|done| *done).await.is_err() {
                    tracing::warn!("the drain publisher is gone; going on without it");
                }
            }
        };
        tokio::pin!(all);
        loop {
            let bound = until.min(*deadline);
            tokio::select! {
                _ = &mut all => return,
                _ = sleep_until(bound.min(*next_renew)) => {}
            }
            let now = Instant::now();
            if now >= bound {
                tracing::warn!("the app did not finish draining in time; releasing");
                return;
            }
            if now < *next_renew {
                continue;
            }
            let sent = now;
            let budget = self
                .timing
                .backend_timeout
                .min(deadline.saturating_duration_since(sent));
            let result = timed(&*self.observer, "renew", budget, self.backend.renew()).await;
            let now = Instant::now();
            match result {
                Ok(Renewal::Renewed) if now < *deadline => {
                    *deadline = (*deadline).max(sent + self.claim_length());
                    self.claim_deadline = Some(*deadline);
                    *next_renew = sent + self.renew_interval();
                }
                Ok(Renewal::Renewed) => return,
                Ok(Renewal::Lost) => {
                    tracing::warn!("the lease was lost while the app drained");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "renew while draining failed; retrying until the deadline");
                    *next_renew = now + (self.renew_interval() / 4).max(Duration::from_millis(10));
                }
            }
        }
    }

    /// Before any release: what must be gone first (the command of `run`) is gone, or
    /// the claim's deadline has passed (the store then no longer counts on us anyway).
    /// False when something was not proven gone by then.
    async fn await_stopped(&mut self) -> bool {
        let Some(deadline) = self.claim_deadline.take() else {
            return true;
        };
        let within = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(50);
        let limit = Instant::now() + within;
        let mut all = true;
        for stopped in &mut self.must_stop {
            if let Ok(Ok(_)) = tokio::time::timeout_at(limit, stopped.wait_for(|s| *s)).await {
                continue;
            }
            tracing::error!("the command was not proven gone by the claim's deadline");
            all = false;
        }
        all
    }

    /// Before a voluntary release: let every publisher show "not leader" first, so no
    /// observer sees this candidate as leader once another may be.
    async fn await_publishers(&mut self) {
        await_shown(&mut self.before_release, self.timing.backend_timeout).await;
    }

    async fn release_quietly(&mut self) {
        if let Err(e) = timed(
            &*self.observer,
            "release",
            self.timing.backend_timeout,
            self.backend.release(),
        )
        .await
        {
            tracing::warn!(error = %e, "release failed; the lease will expire by itself");
        }
    }

    /// Shutdown while not leading: a campaign whose answer was lost may still have
    /// taken the lease, so release (a no-op when it is not ours).
    async fn finish(&mut self) -> Exit {
        self.status.send_modify(|s| {
            s.role = Role::Candidate;
            s.claim = None;
        });
        self.release_quietly().await;
        Exit::Shutdown
    }

    /// After a requested release, stay out long enough for another candidate to win.
    async fn sit_out(&mut self) {
        let wait = match self.cooldown.take() {
            Some(cooldown) => {
                tracing::info!(cooldown = %humantime::format_duration(cooldown), "not campaigning again before the cooldown ends");
                cooldown
            }
            None => self.timing.renew_interval,
        };
        self.pause(wait).await;
    }

    /// After proof came too late (invariant 11): stay out one full ttl, so that the
    /// lease this candidate may still hold at the store runs out or its release lands,
    /// and a candidate with a healthy link wins it.
    async fn sit_out_slow(&mut self) {
        tracing::warn!(
            ttl = %humantime::format_duration(self.backend.lease_ttl()),
            "too slow to hold a claim; sitting out one ttl before campaigning again"
        );
        self.status.send_modify(|s| {
            s.role = Role::Candidate;
            s.claim = None;
        });
        self.pause(self.backend.lease_ttl()).await;
    }

    /// Waits `d` (or until shutdown), never leading meanwhile. A pause the elector
    /// chose is progress: the heartbeat goes on at the retry interval, so that a long
    /// cooldown never reads as a hang to the liveness probe.
    async fn pause(&mut self, d: Duration) {
        let mut shutdown = self.shutdown.clone();
        let until = Instant::now() + d;
        let beat_every = self.timing.retry_interval.max(Duration::from_millis(10));
        loop {
            self.heartbeat.beat();
            let now = Instant::now();
            if now >= until {
                return;
            }
            tokio::select! {
                _ = sleep((until - now).min(beat_every)) => {}
                _ = shutdown.changed() => return,
                // Not leading while pausing: a release request is answered at once
                // (409) instead of after the pause.
                Some(req) = self.releases.recv() => {
                    let _ = req.reply.send(false);
                }
            }
        }
    }

    fn observe(&mut self, holder: Option<Holder>) {
        let now = Instant::now();
        self.status.send_modify(|s| {
            s.role = if holder.is_some() {
                Role::Follower
            } else {
                Role::Candidate
            };
            s.claim = None;
            note_holder(s, holder);
            s.heard_at = Some((now, SystemTime::now()));
            s.ready = true;
        });
    }
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
            detail: format!("no answer within {}", humantime::format_duration(limit)),
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

/// ±20% so that followers do not wake in lockstep.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(rand::rng().random_range(0.8..1.2))
}

/// Waits, at most `within` in all, until each publisher says (`true`) that it shows
/// "not leader".
pub async fn await_shown(published: &mut [watch::Receiver<bool>], within: Duration) {
    let limit = Instant::now() + within;
    for shown in published {
        match tokio::time::timeout_at(limit, shown.wait_for(|shown| *shown)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => tracing::warn!("a publisher is gone; going on without it"),
            Err(_) => tracing::warn!("a publisher did not show \"not leader\" in time"),
        }
    }
}

/// The first wait after a failed campaign; the waits double up to the retry interval
/// (each jittered).
const FIRST_RETRY: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests;
