//! The elector's decisions, as a pure state machine: `now` and an [`Event`] in, a
//! [`Step`] (effects to apply, then one thing to do next) out.
//!
//! Nothing here reads a clock, draws from a global random source, touches the
//! environment or does I/O. Time is the candidate's own monotonic clock, written as a
//! [`Time`] (a duration since an epoch its driver chose); jitter comes from a seeded
//! generator in the state. The tokio driver ([`super::driver`]) runs this machine
//! against a real backend; the simulator (`tests/suite/elector_sim.rs`) runs many copies of
//! the very same code against simulated stores, in simulated time.
//!
//! Every rule of DESIGN §2 that the elector keeps lives here:
//! - a claim's deadline is the instant the acquiring or renewing request was *sent*
//!   plus [`Timing::claim_length`] (the ttl shrunk by the drift factor and the safety
//!   margin), and an answer that arrives at or after the deadline never extends it;
//! - the leader steps down at its deadline, when the store says the lease is gone, and
//!   when its own record is lost; "not leader" is published before the claim's end is
//!   logged and before any release;
//! - a graceful end (shutdown, `POST /release`, a hand-over the store asks for) waits
//!   for the publishers, the app's drain (renewing meanwhile) and the command's end,
//!   then releases; after a requested release the candidate sits out;
//! - a candidate whose proof came too late releases and sits out one ttl;
//! - failed campaigns back off (jittered), and one that timed out releases first;
//! - a token not greater than one already claimed is never claimed.
//!
//! Only the answer to the call the machine is waiting for counts: answers carry the
//! call's id, and any other answer (a duplicate, or one the driver gave up on) is
//! ignored.

use std::time::Duration;

use crate::backend::{Campaign, Renewal, Wake};
use crate::backoff::Backoff;
use crate::status::{FencingToken, Holder};
use crate::timing::Timing;

/// A candidate's local monotonic time: how long after its driver's epoch.
pub type Time = Duration;

/// Why the elector ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exit {
    /// Shutdown was asked for; any lease held was released.
    Shutdown,
    /// Leadership was lost and `--exit-on-loss` is set.
    LostLeadership,
}

/// Deliberately wrong behaviour, for self-tests only: the checker and the simulator
/// must catch each of these. All off in a real sidecar (the first two can be switched
/// on in debug builds through [`crate::sabotage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flaws {
    /// Claim this much past the conservative deadline, and on every end of a tenure
    /// give the lease back first and go on claiming that long.
    pub overclaim: Duration,
    /// Take a failed campaign for a won one.
    pub claim_on_error: bool,
    /// Count the deadline from the instant the answer arrived, not the request's send.
    pub deadline_from_reply: bool,
    /// Take the ttl less the safety margin as the claim, with no drift factor.
    pub no_drift: bool,
    /// Take a late answer (to a renewal the machine gave up on) as a renewal, even
    /// after stepping down.
    pub trust_late_answers: bool,
    /// Campaign again at once after giving the lease back (no sit-out).
    pub no_sit_out: bool,
}

/// What the machine is built with.
#[derive(Clone, Debug)]
pub struct Config {
    pub timing: Timing,
    pub exit_on_loss: bool,
    /// Some publisher must show "not leader" before a voluntary release (the label).
    pub publishers: bool,
    /// Something must be proven gone before any release (the command of `run`).
    pub must_stop: bool,
    /// The app drains before a graceful release, for at most this long.
    pub drain: Option<Duration>,
    /// Seed of the jitter.
    pub seed: u64,
    pub flaws: Flaws,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The machine starts.
    Start,
    /// The answer to call `id`.
    Answer {
        id: u64,
        answer: Answer,
    },
    /// The follower's wait for a change ended.
    Woke(Wake),
    /// While leading: the store shows our record deleted or taken.
    RecordLost,
    /// While leading: the store asks this leader to hand over to another candidate.
    HandoverRequested,
    /// The `until` of the current wait passed.
    Timer,
    /// What the current wait waited for arrived (publishers, drain, command stopped).
    Done,
    /// `POST /release`; answered by [`Effect::Reply`] with the same id.
    ReleaseRequested {
        id: u64,
        cooldown: Option<Duration>,
    },
    Shutdown,
}

/// A backend call that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Failure {
    /// No answer in time: the request may still act at the store.
    pub timed_out: bool,
}

/// A backend call's answer, with the ttl the store grants.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    Campaign {
        result: Result<Campaign, Failure>,
        ttl: Duration,
        /// Which of the backend's leases answered: a slot of an election of several
        /// holders, 0 for one lease. Tokens grow per lease (each slot has its own
        /// counter), so the token rule compares a tenure's token with the earlier
        /// tenures of the same lease only.
        lease: u32,
    },
    Renew {
        result: Result<Renewal, Failure>,
        ttl: Duration,
    },
    Release,
}

/// A backend call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Campaign,
    Renew,
    Release,
}

/// What a wait waits for, besides its `until`, shutdown and release requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitOn {
    /// A possible change of holder (the backend's wait, at most `max`): [`Event::Woke`].
    Change { max: Duration },
    /// The renew time; meanwhile [`Event::RecordLost`] or [`Event::HandoverRequested`].
    Lead,
    /// Nothing but time.
    Time,
    /// Every publisher shows "not leader": [`Event::Done`].
    Publishers,
    /// The app drained: [`Event::Done`].
    Drained,
    /// What must stop stopped: [`Event::Done`].
    Stopped,
    /// The answer to the call on its way (an event came meanwhile, which a driver
    /// that waits for the answer alone never delivers): go on waiting for it.
    Answer,
}

/// Go on waiting for the answer to the call on its way.
pub const ANSWER_DUE: Next = Next::Wait {
    until: None,
    on: WaitOn::Answer,
};

/// What to do after the effects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Call the backend; answer with [`Event::Answer`] and this id, a failure with
    /// `timed_out` after `budget`.
    Call {
        id: u64,
        op: Op,
        budget: Duration,
    },
    /// Wait until `until` ([`Event::Timer`]) or what `on` says.
    Wait {
        until: Option<Time>,
        on: WaitOn,
    },
    Exit(Exit),
}

/// A change to `Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Publish {
    /// A campaign failed: a candidate (unless still leading).
    Campaigning,
    /// Not leading, no claim.
    NotLeading,
    /// Leading with this claim; the store answered now.
    Acquired { token: FencingToken, deadline: Time },
    /// The claim now ends at `deadline`; the store answered now.
    Extended { deadline: Time },
    /// Not leading, no claim, holder unknown.
    SteppedDown,
    /// Following this holder (none known: a candidate); the store answered now.
    Observed(Option<Holder>),
    /// The store answered now; nothing changed.
    Heard,
    /// A graceful step-down waits for the app's drain until then.
    Draining { until: Time },
    /// The drain ended, acknowledged or not.
    DrainEnded,
    /// The graceful step-down is over.
    DrainOver,
}

/// A line of the transition log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogLine {
    ClaimStart {
        token: FencingToken,
        sent: Time,
        deadline: Time,
    },
    Deadline {
        token: FencingToken,
        deadline: Time,
    },
    ClaimEnd {
        token: FencingToken,
        reason: &'static str,
    },
}

/// Counters and histograms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    Acquired { campaign_took: Duration },
    Lost,
    Released,
    Renewed { ok: bool, took: Duration },
}

/// Something worth a log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Say {
    AcquiredTooLate {
        token: FencingToken,
    },
    TokenNotGreater {
        token: FencingToken,
        last: FencingToken,
    },
    Lost {
        token: FencingToken,
        reason: &'static str,
    },
    RenewIntervalAdapted {
        granted_ttl: Duration,
        configured: Duration,
        adapted: Duration,
    },
    TooSlow {
        ttl: Duration,
    },
    Cooldown {
        cooldown: Duration,
    },
    DrainTimedOut,
    LostWhileDraining,
    NotProvenGone,
    NotReleasing {
        token: FencingToken,
    },
}

/// One effect, applied in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    Publish(Publish),
    Log(LogLine),
    Note(Note),
    Say(Say),
    /// Answer release request `id`: whether this candidate led and released.
    Reply {
        id: u64,
        released: bool,
    },
}

/// The machine's answer to one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub effects: Vec<Effect>,
    pub next: Next,
}

/// What comes after a release or a wind-down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum After {
    Campaign,
    Exit(Exit),
    /// The sit-out after a requested release (the cooldown, else a renew interval).
    SitOut {
        cooldown: Option<Duration>,
    },
    /// One ttl out, after proof came too late.
    SitOutSlow,
    /// The next jittered back-off wait.
    Backoff,
}

/// A tenure's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tenure {
    token: FencingToken,
    deadline: Time,
    next_renew: Time,
}

/// The stages of the end of a tenure, in order; each may be skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Stage {
    /// (Self-tests only) give back first, then claim on for the overclaim.
    Overclaim,
    StepDown,
    Publishers,
    Drain,
    Stopped,
    Release,
    Done,
}

/// What a wind-down's stage waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Pending {
    None,
    Call { id: u64, sent: Time },
    Until(Time),
}

/// The end of a tenure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct WindDown {
    tenure: Tenure,
    stage: Stage,
    /// Graceful (shutdown, release requested): publishers, drain, and no release
    /// when the command was not proven gone. Otherwise a loss.
    graceful: bool,
    reason: &'static str,
    /// While draining: when the drain must end by.
    drain_until: Option<Time>,
    pending: Pending,
    /// (Overclaim only) the lease was given back first.
    given_back: bool,
    /// Whether the command was proven gone (or nothing had to stop).
    stopped: bool,
    reply: Option<u64>,
    after: After,
}

impl WindDown {
    fn new(
        tenure: Tenure,
        graceful: bool,
        reason: &'static str,
        after: After,
        reply: Option<u64>,
    ) -> Self {
        WindDown {
            tenure,
            stage: Stage::Overclaim,
            graceful,
            reason,
            drain_until: None,
            pending: Pending::None,
            given_back: false,
            stopped: true,
            reply,
            after,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Campaigning { id: u64, sent: Time },
    Following,
    Pausing { until: Time },
    Leading(Tenure),
    Renewing { tenure: Tenure, id: u64, sent: Time },
    WindingDown(WindDown),
    Releasing { id: u64, then: After },
    Exited(Exit),
}

/// A small seeded generator for the jitter (splitmix64): the machine's state must be
/// comparable and hashable for the exhaustive search, which rand's generators are not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Jitter(u64);

impl Jitter {
    fn next_unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// ±20%, so that followers do not wake in lockstep.
    fn apply(&mut self, d: Duration) -> Duration {
        d.mul_f64(0.8 + 0.4 * self.next_unit())
    }
}

/// The machine's state: everything that differs between two candidates with the
/// same configuration (comparable and hashable, for the exhaustive search).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    phase: Phase,
    shutdown: bool,
    /// A release request that came while a renewal was on its way.
    release: Option<(u64, Option<Duration>)>,
    /// The highest token claimed on the current lease (`lease`).
    last_token: Option<FencingToken>,
    /// The lease of the last campaign's answer, and the highest token claimed on each
    /// other lease this candidate has held.
    lease: u32,
    other_tokens: std::collections::BTreeMap<u32, FencingToken>,
    backoff: Backoff,
    campaign_started: Time,
    tenure_ended: bool,
    /// The ttl the store grants.
    ttl: Duration,
    adapted_logged: bool,
    next_id: u64,
    jitter: Jitter,
}

/// The elector's decisions.
#[derive(Clone, Debug)]
pub struct Machine {
    cfg: Config,
    st: State,
}

/// The first wait after a failed campaign; the waits double up to the retry interval
/// (each jittered).
const FIRST_RETRY: Duration = Duration::from_millis(50);
/// How long past the claim's deadline the command may take to be proven gone.
const STOP_GRACE: Duration = Duration::from_millis(50);

/// Effects gathered while deciding.
#[derive(Default)]
struct Out(Vec<Effect>);

impl Out {
    fn publish(&mut self, p: Publish) {
        self.0.push(Effect::Publish(p));
    }
    fn say(&mut self, s: Say) {
        self.0.push(Effect::Say(s));
    }
    fn reply(&mut self, id: u64, released: bool) {
        self.0.push(Effect::Reply { id, released });
    }
    fn then(self, next: Next) -> Step {
        Step {
            effects: self.0,
            next,
        }
    }
}

impl Machine {
    pub fn new(cfg: Config) -> Self {
        let st = State {
            phase: Phase::Idle,
            shutdown: false,
            release: None,
            last_token: None,
            lease: 0,
            other_tokens: std::collections::BTreeMap::new(),
            backoff: Backoff::new(FIRST_RETRY, cfg.timing.retry_interval),
            campaign_started: Duration::ZERO,
            tenure_ended: false,
            ttl: cfg.timing.ttl,
            adapted_logged: false,
            next_id: 0,
            jitter: Jitter(cfg.seed),
        };
        Machine { cfg, st }
    }

    /// The state, to compare and hash (the exhaustive search).
    pub fn state(&self) -> &State {
        &self.st
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// True once the machine has exited.
    pub fn exited(&self) -> Option<Exit> {
        match self.st.phase {
            Phase::Exited(e) => Some(e),
            _ => None,
        }
    }

    /// Decides what `event`, seen at `now`, leads to.
    pub fn on(&mut self, now: Time, event: Event) -> Step {
        let mut out = Out::default();
        let next = self.decide(now, event, &mut out);
        out.then(next)
    }

    fn decide(&mut self, now: Time, event: Event, out: &mut Out) -> Next {
        match event {
            Event::Shutdown => self.st.shutdown = true,
            // Served while leading, one at a time; any other is answered at once.
            Event::ReleaseRequested { id, cooldown } => {
                if self.leading() && self.st.release.is_none() {
                    self.st.release = Some((id, cooldown));
                } else {
                    out.reply(id, false);
                }
            }
            _ => {}
        }
        match self.st.phase {
            Phase::Idle => self.on_idle(now, event, out),
            Phase::Campaigning { id, sent } => self.on_campaigning(now, event, id, sent, out),
            Phase::Following => self.on_following(now, event, out),
            Phase::Pausing { until } => self.on_pausing(now, event, until, out),
            Phase::Leading(t) => self.on_leading(now, event, t, out),
            Phase::Renewing { tenure, id, sent } => {
                self.on_renewing(now, event, tenure, (id, sent), out)
            }
            Phase::WindingDown(w) => self.on_winding_down(now, event, w, out),
            Phase::Releasing { id, then } => self.on_releasing(now, event, id, then, out),
            Phase::Exited(e) => Next::Exit(e),
        }
    }

    /// True while this candidate holds a claim (between renewals or renewing).
    pub fn leading(&self) -> bool {
        matches!(self.st.phase, Phase::Leading(_) | Phase::Renewing { .. })
    }

    /// The current wait again (an event that changes nothing in this phase).
    fn wait_again(&mut self, now: Time, out: &mut Out) -> Next {
        match self.st.phase {
            Phase::Following => self.follow(now, out),
            Phase::Pausing { until } => pause_wait(until),
            Phase::Leading(t) => self.lead_wait(now, t, out),
            Phase::WindingDown(w) => pending_wait(&w),
            Phase::Exited(e) => Next::Exit(e),
            // Waiting for an answer: nothing to do until it comes.
            Phase::Idle
            | Phase::Campaigning { .. }
            | Phase::Renewing { .. }
            | Phase::Releasing { .. } => ANSWER_DUE,
        }
    }

    fn on_idle(&mut self, now: Time, event: Event, out: &mut Out) -> Next {
        match event {
            Event::Start => {
                self.st.campaign_started = now;
                self.campaign(now, out)
            }
            _ => self.wait_again(now, out),
        }
    }

    // ---- campaigning and following -------------------------------------------------

    /// The top of the loop: shut down when asked, else campaign.
    fn campaign(&mut self, now: Time, out: &mut Out) -> Next {
        if self.st.shutdown {
            return self.finish(out);
        }
        if std::mem::take(&mut self.st.tenure_ended) {
            self.st.campaign_started = now;
        }
        let (id, call) = self.call(Op::Campaign, self.cfg.timing.backend_timeout);
        self.st.phase = Phase::Campaigning { id, sent: now };
        call
    }

    /// A backend call under a fresh id.
    fn call(&mut self, op: Op, budget: Duration) -> (u64, Next) {
        self.st.next_id += 1;
        let id = self.st.next_id;
        (id, Next::Call { id, op, budget })
    }

    /// Shutdown while not leading: a campaign whose answer was lost may still have
    /// taken the lease, so release (a no-op when it is not ours).
    fn finish(&mut self, out: &mut Out) -> Next {
        out.publish(Publish::NotLeading);
        self.release_then(After::Exit(Exit::Shutdown))
    }

    fn release_then(&mut self, then: After) -> Next {
        let (id, call) = self.call(Op::Release, self.cfg.timing.backend_timeout);
        self.st.phase = Phase::Releasing { id, then };
        call
    }

    fn on_campaigning(
        &mut self,
        now: Time,
        event: Event,
        id: u64,
        sent: Time,
        out: &mut Out,
    ) -> Next {
        match event {
            Event::Answer {
                id: got,
                answer: Answer::Campaign { result, ttl, lease },
            } if got == id => {
                self.st.ttl = ttl;
                self.switch_lease(lease);
                self.campaign_answered(now, sent, result, out)
            }
            _ => self.wait_again(now, out),
        }
    }

    /// The campaign answered for `lease`: from now on the token rule looks at that
    /// lease's tokens.
    fn switch_lease(&mut self, lease: u32) {
        if lease == self.st.lease {
            return;
        }
        if let Some(t) = self.st.last_token {
            self.st.other_tokens.insert(self.st.lease, t);
        }
        self.st.last_token = self.st.other_tokens.remove(&lease);
        self.st.lease = lease;
    }

    fn campaign_answered(
        &mut self,
        now: Time,
        sent: Time,
        result: Result<Campaign, Failure>,
        out: &mut Out,
    ) -> Next {
        match result {
            Ok(Campaign::Acquired { token }) => {
                self.st.backoff.reset();
                self.acquired(now, sent, token, out)
            }
            Ok(Campaign::Held(holder)) => {
                self.st.backoff.reset();
                out.publish(Publish::Observed(holder));
                self.st.phase = Phase::Following;
                self.follow(now, out)
            }
            Err(_) if self.cfg.flaws.claim_on_error => {
                let token = self.st.last_token.map_or(1, |t| t + 1);
                self.st.last_token = Some(token);
                let deadline = sent + self.claim_length();
                self.lead(now, token, sent, deadline, out)
            }
            Err(failure) => {
                out.publish(Publish::Campaigning);
                if failure.timed_out {
                    // The unanswered campaign may still take the lease at the store,
                    // and the next one must not adopt it: give it back. (No full
                    // sit-out: a store that was merely down for everyone would leave
                    // every candidate sitting out after it returned.)
                    self.release_then(After::Backoff)
                } else {
                    self.after(now, After::Backoff, out)
                }
            }
        }
    }

    fn acquired(&mut self, now: Time, sent: Time, token: FencingToken, out: &mut Out) -> Next {
        let deadline = self.claim_from(sent, now);
        if now >= deadline {
            // The answer came too late to claim anything, and a link this slow would
            // only keep the lease from the others.
            out.say(Say::AcquiredTooLate { token });
            return self.release_then(After::SitOutSlow);
        }
        if let Some(last) = self.st.last_token.filter(|last| token <= *last) {
            // Two tenures must never share a token, nor may one go back.
            out.say(Say::TokenNotGreater { token, last });
            return self.release_then(After::Backoff);
        }
        self.st.last_token = Some(token);
        out.0.push(Effect::Note(Note::Acquired {
            campaign_took: now.saturating_sub(self.st.campaign_started),
        }));
        self.lead(now, token, sent, deadline, out)
    }

    /// Waits as a follower until the backend reports a possible change.
    fn follow(&mut self, _now: Time, out: &mut Out) -> Next {
        if self.st.shutdown {
            return self.finish(out);
        }
        let max = self.st.jitter.apply(self.cfg.timing.retry_interval);
        Next::Wait {
            until: None,
            on: WaitOn::Change { max },
        }
    }

    fn on_following(&mut self, now: Time, event: Event, out: &mut Out) -> Next {
        match event {
            Event::Woke(Wake::Changed) => self.campaign(now, out),
            Event::Woke(Wake::Quiet) => {
                out.publish(Publish::Heard);
                self.follow(now, out)
            }
            _ => self.follow(now, out),
        }
    }

    fn on_pausing(&mut self, now: Time, _event: Event, until: Time, out: &mut Out) -> Next {
        if self.st.shutdown {
            return self.finish(out);
        }
        if now >= until {
            return self.campaign(now, out);
        }
        pause_wait(until)
    }

    fn pause(&mut self, now: Time, d: Duration, out: &mut Out) -> Next {
        if self.st.shutdown {
            return self.finish(out);
        }
        let until = now + d;
        self.st.phase = Phase::Pausing { until };
        pause_wait(until)
    }

    /// After a release or a wind-down.
    fn after(&mut self, now: Time, after: After, out: &mut Out) -> Next {
        match after {
            After::Exit(e) => {
                self.st.phase = Phase::Exited(e);
                Next::Exit(e)
            }
            After::Campaign => self.campaign(now, out),
            _ if self.cfg.flaws.no_sit_out && !matches!(after, After::Backoff) => {
                self.campaign(now, out)
            }
            After::SitOut { cooldown } => {
                let wait = match cooldown {
                    Some(cooldown) => {
                        out.say(Say::Cooldown { cooldown });
                        cooldown
                    }
                    None => self.cfg.timing.renew_interval,
                };
                self.pause(now, wait, out)
            }
            After::SitOutSlow => {
                out.say(Say::TooSlow { ttl: self.st.ttl });
                out.publish(Publish::NotLeading);
                self.pause(now, self.st.ttl, out)
            }
            After::Backoff => {
                let wait = self.st.backoff.next_wait();
                let wait = self.st.jitter.apply(wait);
                self.pause(now, wait, out)
            }
        }
    }

    fn on_releasing(
        &mut self,
        now: Time,
        event: Event,
        id: u64,
        then: After,
        out: &mut Out,
    ) -> Next {
        match event {
            Event::Answer {
                id: got,
                answer: Answer::Release,
            } if got == id => self.after(now, then, out),
            Event::Answer {
                answer: Answer::Renew { result, .. },
                ..
            } => self.late_renewal(now, result, out),
            _ => self.wait_again(now, out),
        }
    }

    /// (Flaw `trust_late_answers` only) a renewal answered after the machine gave up
    /// on it is taken as proof: the candidate claims again.
    fn late_renewal(&mut self, now: Time, result: Result<Renewal, Failure>, out: &mut Out) -> Next {
        let (true, Ok(Renewal::Renewed), Some(token)) = (
            self.cfg.flaws.trust_late_answers,
            result,
            self.st.last_token,
        ) else {
            return self.wait_again(now, out);
        };
        let deadline = now + self.claim_length();
        self.lead(now, token, now, deadline, out)
    }

    // ---- leading -------------------------------------------------------------------

    /// How long a claim lasts after the request that established it was sent.
    fn claim_length(&self) -> Duration {
        let t = &self.cfg.timing;
        let claim = if self.cfg.flaws.no_drift {
            self.st.ttl.saturating_sub(t.safety_margin)
        } else {
            t.claim_length(self.st.ttl)
        };
        claim + self.cfg.flaws.overclaim
    }

    /// The deadline a proof sent at `sent` and answered at `now` buys: counted from
    /// the send (from the answer only with the flaw `deadline_from_reply`).
    fn claim_from(&self, sent: Time, now: Time) -> Time {
        let base = if self.cfg.flaws.deadline_from_reply {
            now
        } else {
            sent
        };
        base + self.claim_length()
    }

    /// The configured renew interval, or a third of the claim when the store granted
    /// a ttl so much shorter than asked that a renewal sent at the configured interval
    /// would not be answered within the claim (the leader would lose every tenure
    /// before renewing). The rule is validation's ([`Timing::renews_in_time`]), so a
    /// ttl granted as asked keeps the configured interval.
    fn renew_interval(&mut self, out: &mut Out) -> Duration {
        let claim = self.claim_length();
        let configured = self.cfg.timing.renew_interval;
        if self.cfg.timing.renews_in_time(claim) {
            return configured;
        }
        let adapted = claim / 3;
        if !self.st.adapted_logged {
            self.st.adapted_logged = true;
            out.say(Say::RenewIntervalAdapted {
                granted_ttl: self.st.ttl,
                configured,
                adapted,
            });
        }
        adapted
    }

    /// The claim begins: logged first, then published.
    fn lead(
        &mut self,
        now: Time,
        token: FencingToken,
        sent: Time,
        deadline: Time,
        out: &mut Out,
    ) -> Next {
        out.0.push(Effect::Log(LogLine::ClaimStart {
            token,
            sent,
            deadline,
        }));
        out.publish(Publish::Acquired { token, deadline });
        let next_renew = sent + self.renew_interval(out);
        let tenure = Tenure {
            token,
            deadline,
            next_renew,
        };
        self.st.phase = Phase::Leading(tenure);
        self.lead_wait(now, tenure, out)
    }

    /// Between renewals: a shutdown or a release request waiting ends the tenure
    /// gracefully; otherwise wait for the next renewal (or the deadline).
    fn lead_wait(&mut self, now: Time, t: Tenure, out: &mut Out) -> Next {
        if self.st.shutdown {
            return self.hand_over(now, t, "shutdown", After::Exit(Exit::Shutdown), None, out);
        }
        if let Some((id, cooldown)) = self.st.release.take() {
            let reply = if self.cfg.flaws.overclaim.is_zero() {
                Some(id)
            } else {
                // Misbehaving on purpose: answer at once, claim on after.
                out.reply(id, true);
                None
            };
            let after = After::SitOut { cooldown };
            return self.hand_over(now, t, "release requested", after, reply, out);
        }
        self.st.phase = Phase::Leading(t);
        Next::Wait {
            until: Some(t.next_renew.min(t.deadline)),
            on: WaitOn::Lead,
        }
    }

    fn on_leading(&mut self, now: Time, event: Event, t: Tenure, out: &mut Out) -> Next {
        match event {
            Event::RecordLost => self.lose(
                now,
                t,
                "our record in the store was deleted or taken",
                false,
                out,
            ),
            Event::HandoverRequested => {
                let after = After::SitOut { cooldown: None };
                self.hand_over(now, t, "another candidate is preferred", after, None, out)
            }
            // (A shutdown or release request never waits here: `lead_wait` serves it.)
            Event::Timer => self.renew(now, t, out),
            _ => self.lead_wait(now, t, out),
        }
    }

    /// One renewal, sent now, unless the deadline has passed.
    fn renew(&mut self, now: Time, t: Tenure, out: &mut Out) -> Next {
        if now < t.next_renew.min(t.deadline) {
            return self.lead_wait(now, t, out);
        }
        if now >= t.deadline {
            let reason = "the deadline passed without a successful renew";
            return self.lose(now, t, reason, true, out);
        }
        let budget = self.cfg.timing.backend_timeout.min(t.deadline - now);
        let (id, call) = self.call(Op::Renew, budget);
        self.st.phase = Phase::Renewing {
            tenure: t,
            id,
            sent: now,
        };
        call
    }

    fn on_renewing(
        &mut self,
        now: Time,
        event: Event,
        t: Tenure,
        (id, sent): (u64, Time),
        out: &mut Out,
    ) -> Next {
        match event {
            Event::Answer {
                id: got,
                answer: Answer::Renew { result, ttl },
            } if got == id => {
                self.st.ttl = ttl;
                self.renew_answered(now, t, sent, result, out)
            }
            _ => self.wait_again(now, out),
        }
    }

    fn renew_answered(
        &mut self,
        now: Time,
        mut t: Tenure,
        sent: Time,
        result: Result<Renewal, Failure>,
        out: &mut Out,
    ) -> Next {
        let took = now.saturating_sub(sent);
        let ok = matches!(result, Ok(Renewal::Renewed));
        out.0.push(Effect::Note(Note::Renewed { ok, took }));
        let renew_interval = self.renew_interval(out);
        match result {
            Ok(Renewal::Renewed) => {
                if now >= t.deadline {
                    // Never extend a claim from a reply that arrives after the deadline.
                    let reason = "the renew answer arrived after the deadline";
                    return self.lose(now, t, reason, true, out);
                }
                let extended = self.claim_from(sent, now);
                if extended > t.deadline {
                    t.deadline = extended;
                    out.0.push(Effect::Log(LogLine::Deadline {
                        token: t.token,
                        deadline: extended,
                    }));
                }
                out.publish(Publish::Extended {
                    deadline: t.deadline,
                });
                t.next_renew = sent + renew_interval;
                self.lead_wait(now, t, out)
            }
            Ok(Renewal::Lost) => {
                self.lose(now, t, "the store no longer holds our lease", false, out)
            }
            Err(_) => {
                t.next_renew = retry_renew_at(now, renew_interval);
                self.lead_wait(now, t, out)
            }
        }
    }

    // ---- the end of a tenure -------------------------------------------------------

    /// The store took the lease away, or proof came too late (`too_slow`): step down,
    /// then free whatever may still be ours once what must stop has stopped.
    fn lose(
        &mut self,
        now: Time,
        t: Tenure,
        reason: &'static str,
        too_slow: bool,
        out: &mut Out,
    ) -> Next {
        let after = match (self.cfg.exit_on_loss, too_slow) {
            (true, _) => After::Exit(Exit::LostLeadership),
            (false, true) => After::SitOutSlow,
            (false, false) => After::Campaign,
        };
        self.begin_wind_down(now, WindDown::new(t, false, reason, after, None), out)
    }

    /// A graceful end: "not leader" published, the app drained (the lease renewed
    /// meanwhile), what must stop stopped, then the release.
    fn hand_over(
        &mut self,
        now: Time,
        t: Tenure,
        reason: &'static str,
        after: After,
        reply: Option<u64>,
        out: &mut Out,
    ) -> Next {
        self.begin_wind_down(now, WindDown::new(t, true, reason, after, reply), out)
    }

    fn begin_wind_down(&mut self, now: Time, w: WindDown, out: &mut Out) -> Next {
        self.st.tenure_ended = true;
        if let Some((id, _)) = self.st.release.take() {
            // A request that came while a renewal was on its way, and the tenure ended
            // otherwise: nothing left to hand over.
            out.reply(id, false);
        }
        self.wind_down(now, w, out)
    }

    /// Runs the wind-down's stages from the current one until one has to wait.
    fn wind_down(&mut self, now: Time, mut w: WindDown, out: &mut Out) -> Next {
        loop {
            if let Some(next) = self.stage_start(now, &mut w, out) {
                self.st.phase = Phase::WindingDown(w);
                return next;
            }
            if w.stage == Stage::Done {
                return self.wound_down(now, w, out);
            }
            self.advance(now, &mut w, out);
        }
    }

    /// Starts what the current stage waits for (a call or a wait), or `None` when
    /// the stage has nothing (more) to do.
    fn stage_start(&mut self, now: Time, w: &mut WindDown, out: &mut Out) -> Option<Next> {
        let timing = self.cfg.timing;
        let next = match w.stage {
            Stage::StepDown | Stage::Done => return None,
            Stage::Overclaim => {
                let extra = self.cfg.flaws.overclaim;
                if extra.is_zero() {
                    return None;
                }
                if w.graceful && !w.given_back {
                    return Some(self.wind_down_call(now, w, Op::Release, timing.backend_timeout));
                }
                Pending::Until(now + extra)
            }
            Stage::Publishers if w.graceful && self.cfg.publishers => {
                Pending::Until(now + timing.backend_timeout)
            }
            Stage::Drain => return self.drain_step(now, w, out),
            Stage::Stopped if self.cfg.must_stop => {
                Pending::Until(w.tenure.deadline.max(now) + STOP_GRACE)
            }
            Stage::Release if !w.graceful || w.stopped => {
                return Some(self.wind_down_call(now, w, Op::Release, timing.backend_timeout));
            }
            Stage::Publishers | Stage::Stopped | Stage::Release => return None,
        };
        w.pending = next;
        Some(pending_wait(w))
    }

    fn wind_down_call(&mut self, now: Time, w: &mut WindDown, op: Op, budget: Duration) -> Next {
        let (id, call) = self.call(op, budget);
        w.pending = Pending::Call { id, sent: now };
        call
    }

    /// While the app drains: renew on schedule, until it is done, the drain's time is
    /// up, or the claim's deadline comes.
    fn drain_step(&mut self, now: Time, w: &mut WindDown, out: &mut Out) -> Option<Next> {
        let bound = w.drain_until?.min(w.tenure.deadline);
        if now >= bound {
            out.say(Say::DrainTimedOut);
            return None;
        }
        if now < w.tenure.next_renew {
            w.pending = Pending::Until(bound.min(w.tenure.next_renew));
            return Some(pending_wait(w));
        }
        let budget = self
            .cfg
            .timing
            .backend_timeout
            .min(w.tenure.deadline.saturating_sub(now));
        Some(self.wind_down_call(now, w, Op::Renew, budget))
    }

    /// The next stage, with its one-off effects.
    fn advance(&mut self, now: Time, w: &mut WindDown, out: &mut Out) {
        if w.stage == Stage::Drain && w.drain_until.is_some() {
            out.publish(Publish::DrainEnded);
        }
        w.stage = match w.stage {
            Stage::Overclaim => Stage::StepDown,
            Stage::StepDown => Stage::Publishers,
            Stage::Publishers => Stage::Drain,
            Stage::Drain => Stage::Stopped,
            Stage::Stopped => Stage::Release,
            Stage::Release | Stage::Done => Stage::Done,
        };
        w.pending = Pending::None;
        match w.stage {
            Stage::StepDown => self.step_down(now, w, out),
            Stage::Release if w.graceful && !w.stopped => out.say(Say::NotReleasing {
                token: w.tenure.token,
            }),
            _ => {}
        }
    }

    /// "Not leader" first, then the end of the claim in the log.
    fn step_down(&mut self, now: Time, w: &mut WindDown, out: &mut Out) {
        let token = w.tenure.token;
        if let (true, Some(drain)) = (w.graceful, self.cfg.drain) {
            // Marked while still leader, so the drain publisher cannot take the
            // step-down for a loss; with the instant the drain must end by.
            w.drain_until = Some(now + drain);
            out.publish(Publish::Draining { until: now + drain });
        }
        out.publish(Publish::SteppedDown);
        out.0.push(Effect::Log(LogLine::ClaimEnd {
            token,
            reason: w.reason,
        }));
        if w.graceful {
            out.0.push(Effect::Note(Note::Released));
        } else {
            out.0.push(Effect::Note(Note::Lost));
            out.say(Say::Lost {
                token,
                reason: w.reason,
            });
        }
    }

    fn on_winding_down(&mut self, now: Time, event: Event, mut w: WindDown, out: &mut Out) -> Next {
        let finished = match (w.pending, event) {
            (Pending::Call { id, sent }, Event::Answer { id: got, answer }) if got == id => {
                w.pending = Pending::None;
                self.wind_down_answered(now, &mut w, sent, answer, out)
            }
            (Pending::Until(t), Event::Timer) if now >= t => {
                w.pending = Pending::None;
                match w.stage {
                    Stage::Stopped => {
                        out.say(Say::NotProvenGone);
                        w.stopped = false;
                        true
                    }
                    // The drain step looks at the clock itself.
                    Stage::Drain => false,
                    _ => true,
                }
            }
            (Pending::Until(_), Event::Done) => {
                w.pending = Pending::None;
                true
            }
            (
                _,
                Event::Answer {
                    answer: Answer::Renew { result, .. },
                    ..
                },
            ) if self.cfg.flaws.trust_late_answers => return self.late_renewal(now, result, out),
            _ => {
                self.st.phase = Phase::WindingDown(w);
                return pending_wait(&w);
            }
        };
        if finished {
            self.advance(now, &mut w, out);
        }
        self.wind_down(now, w, out)
    }

    /// A call of the wind-down answered; true when its stage is over.
    fn wind_down_answered(
        &mut self,
        now: Time,
        w: &mut WindDown,
        sent: Time,
        answer: Answer,
        out: &mut Out,
    ) -> bool {
        match (w.stage, answer) {
            (Stage::Overclaim, _) => {
                w.given_back = true;
                false
            }
            (Stage::Drain, Answer::Renew { result, ttl }) => {
                self.st.ttl = ttl;
                self.drain_renewed(now, w, sent, result, out)
            }
            _ => true,
        }
    }

    /// A renewal while draining; true when the drain is over (the lease is gone, or
    /// the answer came too late).
    fn drain_renewed(
        &mut self,
        now: Time,
        w: &mut WindDown,
        sent: Time,
        result: Result<Renewal, Failure>,
        out: &mut Out,
    ) -> bool {
        let renew_interval = self.renew_interval(out);
        match result {
            Ok(Renewal::Renewed) if now < w.tenure.deadline => {
                w.tenure.deadline = w.tenure.deadline.max(sent + self.claim_length());
                w.tenure.next_renew = sent + renew_interval;
                false
            }
            Ok(Renewal::Renewed) => true,
            Ok(Renewal::Lost) => {
                out.say(Say::LostWhileDraining);
                true
            }
            Err(_) => {
                w.tenure.next_renew = retry_renew_at(now, renew_interval);
                false
            }
        }
    }

    /// The wind-down is over: the drain flag down, the requester told, then on.
    fn wound_down(&mut self, now: Time, w: WindDown, out: &mut Out) -> Next {
        if w.graceful && self.cfg.drain.is_some() {
            out.publish(Publish::DrainOver);
        }
        if let Some(id) = w.reply {
            // Released only when the release was sent: a command not proven gone
            // keeps the lease until it expires, and the requester must not take the
            // step-down for a hand-over.
            out.reply(id, w.stopped);
        }
        self.after(now, w.after, out)
    }
}

/// The wait for what a wind-down's stage has pending.
fn pending_wait(w: &WindDown) -> Next {
    let on = match w.stage {
        Stage::Publishers => WaitOn::Publishers,
        Stage::Drain => WaitOn::Drained,
        Stage::Stopped => WaitOn::Stopped,
        _ => WaitOn::Time,
    };
    match w.pending {
        Pending::Until(t) => wait(t, on),
        // An answer is due (or nothing is pending, which does not happen).
        Pending::Call { .. } | Pending::None => ANSWER_DUE,
    }
}

/// After a failed renewal: retry soon, but not in a tight loop against a failing store.
fn retry_renew_at(now: Time, renew_interval: Duration) -> Time {
    now + (renew_interval / 4).max(Duration::from_millis(10))
}

fn wait(until: Time, on: WaitOn) -> Next {
    Next::Wait {
        until: Some(until),
        on,
    }
}

fn pause_wait(until: Time) -> Next {
    wait(until, WaitOn::Time)
}

#[cfg(test)]
mod tests;
