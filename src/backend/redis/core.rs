//! The `redis` campaign as a state machine: one explicit [`Phase`] (what this
//! candidate follows, waits for or holds), moved on by the store's answers, and the
//! decisions taken from it: after a take script's answer ([`Core::after_take`] ->
//! [`Next`]) or an announcement ([`Core::follow_announced`]), how a wait goes on
//! ([`Core::wait`] -> [`WaitFor`]) and what it hears ([`Core::on_notice`],
//! [`Core::on_follow_push`], [`Core::on_quiet_push`], [`Core::on_timer`]; the stagger
//! is [`super::baton::grace`]), and a renewal's outcome ([`Core::renewed`]). No I/O
//! and no clock: `now` is an argument. [`super::RedisBackend`] does the I/O and asks
//! this core what to do with each answer.
//!
//! Invariants kept here:
//! - a take that came too late did nothing, and changes nothing here;
//! - tokens never go below the highest one seen (`floor`), and a follower takes no
//!   announcement older than a token it knows;
//! - a candidate that led since its last look (its tracking is on the lock key, or it
//!   still holds a tenure) looks instead of following an announcement;
//! - a follower sends nothing while the holder's renewals are pushed at their cadence,
//!   and looks when one is late, when the holder's key would have expired, when the
//!   tracking connection is lost, and a stagger after a push that came too soon (unless
//!   an announcement comes first);
//! - one kept out of the read-write lock waits as [`super::quiet`] decides, and hears
//!   the read-write lock's channel only then; a `--mode` candidate (the core's `mode`)
//!   waits so behind every holder, and neither announces itself nor waits for a baton;
//! - a holder takes the first push within [`OWN_PUSH_WINDOW`] of its renewal's answer
//!   for that renewal's own.

use std::time::Duration;

use tokio::time::Instant;

use super::cadence::{announced_holder, names_alive, Cadence, Follow, Pushed};
use super::own::{renewal_of, Push, TooLate, Tracking, OWN_PUSH_WINDOW};
use super::quiet::{self, Look};
use super::requests::Take;
use super::{named, parse_value, rw};
use crate::backend::token_floor::TokenFloor;
use crate::backend::{LockMode, Renewal, Wake};
use crate::status::{FencingToken, Holder, Mode, Slots};

/// What a script answers when the request came after its use-by and did nothing.
pub(crate) const REFUSED: i64 = 2;

/// This candidate's tenure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tenure {
    /// Our full value in the lock key.
    pub(super) value: String,
    /// Whether followers still need to hear of us (see [`super::baton`]): from a claim
    /// whose tracking read found the key ours until the server took the announcement.
    pub(super) announce: bool,
    /// Until when a push is taken for the invalidation of our own last renewal.
    pub(super) own_push_until: Option<Instant>,
}

/// What this candidate follows, waits for or holds.
#[derive(Clone, Debug, Default)]
pub(super) enum Phase {
    /// Nothing to follow: no look yet, after a release, or after a take whose tracking
    /// read found the key no longer ours. A wait hears the notices only.
    #[default]
    Idle,
    /// Following the holder of the lock key (or a free lock), as the last look or
    /// announcement found it.
    Following(Follow),
    /// Kept out of the read-write lock by the shared holders or a place ahead in the
    /// queue: a silent wait (see [`super::quiet`]).
    KeptOut(quiet::Wait),
    /// Holding the lock (taken or adopted; from the take, even before its tracking
    /// read confirmed it).
    Leading(Tenure),
}

/// What a campaign does after the take script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// The request came after its use-by and did nothing.
    TooLate,
    /// Won, but the value (given) has no token: not a value we can lead with.
    NoToken(String),
    /// Won: turn tracking of our key on with a read of it, and claim on that read
    /// ([`Core::claimed`]).
    Claim { token: FencingToken },
    /// Held by another (or free, or refused): report it.
    Held(Option<Holder>),
}

/// How a wait goes on, by the phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WaitFor {
    /// Kept out of the read-write lock: [`Core::on_quiet_push`], until its look.
    Quietly { look_at: Instant },
    /// The holder's renewals pushed: [`Core::on_alive_push`] until `due`.
    Renewals { due: Instant },
    /// Only the listener's and the baton's wake-ups, until `hint` (if any) or `max`.
    Notices { hint: Option<Instant> },
}

/// Known-wrong rules, each a switch the simulator turns on to show that it catches the
/// rule broken (`tests/suite/elector_sim.rs`); every one is off in the product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flaws {
    /// A take claims on the value its answer carries (when it has a token), whatever
    /// the script's code says: a holder's value read as ours.
    pub claims_on_value: bool,
    /// A take sends no floor (0), whatever tokens were seen: after the server lost its
    /// fence key, the counter starts again at 1 and nothing fences the old claim.
    pub sends_no_floor: bool,
    /// A renewal answered "not ours" (0) counts as kept: the claim goes on over a lock
    /// that another may take.
    pub renewal_not_ours_kept: bool,
}

/// The campaign's state: the phase, the tracking, the highest token seen and an
/// announcement heard during a wait.
#[derive(Clone, Debug)]
pub(super) struct Core {
    pub(super) phase: Phase,
    pub(super) tracking: Tracking,
    /// The highest token seen; new tokens never go below it.
    pub(super) floor: TokenFloor,
    /// An announced new holder (`<value>`) the next campaign follows without a request.
    pub(super) announced: Option<String>,
    ttl: Duration,
    cadence: Cadence,
    /// How this candidate joins (`--mode`): the election's lease, or a side of the
    /// read-write lock.
    mode: LockMode,
    /// Who holds, as the last look found it (a `--mode` candidate's, for `/leader`).
    observed: Vec<(Holder, Mode)>,
    /// Off in the product.
    pub(super) flaws: Flaws,
}

impl Core {
    pub(super) fn new(ttl: Duration, renew_interval: Duration, mode: LockMode) -> Core {
        Core {
            phase: Phase::Idle,
            tracking: Tracking::default(),
            floor: TokenFloor::default(),
            announced: None,
            ttl,
            cadence: Cadence {
                ttl,
                renew_interval,
            },
            mode,
            observed: Vec::new(),
            flaws: Flaws::default(),
        }
    }

    /// Whether this candidate is one of the read-write lock's (`--mode`).
    pub(super) fn rw(&self) -> bool {
        self.mode != LockMode::Election
    }

    pub(super) fn mode(&self) -> LockMode {
        self.mode
    }

    /// The holders a `--mode` candidate's last look found (`None`: an election's).
    pub(super) fn slots(&self) -> Option<Slots> {
        self.rw()
            .then(|| Slots::one_lock(self.observed.iter().cloned()))
    }

    /// Our tenure's value, while we hold.
    pub(super) fn value(&self) -> Option<&str> {
        match &self.phase {
            Phase::Leading(t) => Some(&t.value),
            _ => None,
        }
    }

    /// The floor a take sends: the highest token seen, so that the script hands out
    /// none at or below it, and fences the lock for a ttl when the server lost its
    /// fence key.
    pub(super) fn floor_sent(&self) -> FencingToken {
        match self.flaws.sends_no_floor {
            true => 0,
            false => self.floor.get(),
        }
    }

    /// Whether we wait for the read-write lock (its channel wakes us then).
    pub(super) fn kept_out(&self) -> bool {
        matches!(self.phase, Phase::KeptOut(_))
    }

    /// A campaign begins (after any announcement it follows): the last sign and the
    /// stagger are of the wait before it. Returns whether the follower's tracking must
    /// be turned on before the look (it is off, or it is a holder's; a `--mode` holder
    /// keeps its own).
    pub(super) fn begin(&mut self) -> bool {
        if let Phase::Following(f) = &mut self.phase {
            f.last_sign = None;
            f.grace = None;
        }
        (!self.tracking.on || self.tracking.lock) && !(self.rw() && self.value().is_some())
    }

    /// A follower's tracking of the renewals was sent (`on`: the server took it).
    pub(super) fn follower_tracking(&mut self, on: bool) {
        self.tracking = Tracking { on, lock: false };
    }

    /// After a take that did not win: whether the tracking is a holder's (a take
    /// after a baton turned it on), and the follower's must be turned on again (an
    /// election's candidate; a `--mode` holder keeps its own).
    pub(super) fn tracks_as_holder(&self) -> bool {
        self.tracking.lock && !self.rw()
    }

    /// A holder's tracking of its own key was turned on.
    pub(super) fn own_tracking(&mut self) {
        self.tracking = Tracking {
            on: true,
            lock: true,
        };
    }

    /// The take script answered (read at `read_at`, answered at `now`).
    pub(super) fn after_take(&mut self, take: Take, read_at: Instant, now: Instant) -> Next {
        if take.won == REFUSED {
            return Next::TooLate;
        }
        let look = Look::of(take.won, take.why, &take.value, take.pttl);
        if self.rw() {
            self.observed = rw::holders(&look, &take.readers, self.mode);
            let seen = self.observed.iter().filter_map(|(h, _)| h.token);
            self.floor.raise_all(seen);
        }
        let parsed = parse_value(&take.value);
        self.floor.raise_all(parsed.token);
        let won = take.won == 1 || (self.flaws.claims_on_value && parsed.token.is_some());
        if won {
            let Some(token) = parsed.token else {
                return Next::NoToken(take.value);
            };
            self.phase = Phase::Leading(Tenure {
                value: take.value,
                announce: false,
                own_push_until: None,
            });
            return Next::Claim { token };
        }
        let holder = match look {
            Look::KeptOut { .. } | Look::Queued { .. } if self.rw() => {
                self.observed.first().map(|(h, _)| h.clone())
            }
            _ => named(&take.value),
        };
        let held = !take.readers.is_empty();
        self.phase = self.phase_after_look(look, held, take.pttl, read_at, now);
        Next::Held(holder)
    }

    /// Kept out of the read-write lock (`look`; `held`: shared holders listed), or
    /// following the holder a look found with `pttl` ms left. A `--mode` candidate
    /// waits for an exclusive holder as for the shared ones.
    fn phase_after_look(
        &self,
        look: Look,
        held: bool,
        pttl: i64,
        read_at: Instant,
        now: Instant,
    ) -> Phase {
        let quietly = match look {
            Look::KeptOut { .. } | Look::Queued { .. } => true,
            Look::Exclusive { .. } => self.rw(),
            Look::Took(_) | Look::TooLate => false,
        };
        if quietly {
            let mut wait = quiet::Wait::default();
            let tracked = self.tracking.on;
            wait.looked(&look, held, self.ttl, tracked, now, OWN_PUSH_WINDOW);
            return Phase::KeptOut(wait);
        }
        let left = u64::try_from(pttl).ok().filter(|ms| *ms > 0);
        let left = left.map(Duration::from_millis);
        Phase::Following(Follow {
            last_sign: left.map(|_| read_at),
            expires: left.map(|l| read_at + l),
            hint: left.map(|l| now + l + Duration::from_millis(2)),
            grace: None,
        })
    }

    /// The tracking read after a take (`ours`: the record still holds our value):
    /// claim, or not ours to claim (taken or deleted between the two requests). An
    /// election's holder announces itself then; a `--mode` one does not.
    pub(super) fn claimed(&mut self, ours: bool) -> bool {
        let announce = !self.rw();
        match (&mut self.phase, ours) {
            (Phase::Leading(t), true) => {
                t.announce = announce;
                true
            }
            (_, _) => {
                self.phase = Phase::Idle;
                false
            }
        }
    }

    /// A campaign with an announced holder (`value`, heard at `now`) follows it
    /// without a request; `None`: a look settles it (the value names nobody or an
    /// older tenure, or we led since our last look).
    pub(super) fn follow_announced(&mut self, value: &str, now: Instant) -> Option<Holder> {
        let holder = announced_holder(value, self.floor.get())?;
        if self.value().is_some() || self.tracking.lock {
            return None;
        }
        self.floor.raise_all(holder.token);
        self.phase = Phase::Following(Follow {
            last_sign: Some(now),
            expires: Some(now + self.ttl),
            hint: Some(now + self.ttl + Duration::from_millis(2)),
            grace: None,
        });
        Some(holder)
    }

    /// Our tenure ends (a release, whatever its answer): nothing followed until the
    /// next look, which follows no announcement (we led since our last look).
    pub(super) fn released(&mut self) {
        self.phase = match std::mem::take(&mut self.phase) {
            Phase::Following(f) => Phase::Following(f),
            _ => Phase::Idle,
        };
    }

    /// Whether a wait arms the baton (an election's follower's; a holder and a `--mode`
    /// candidate wait for none).
    pub(super) fn arms_baton(&self) -> bool {
        !self.rw() && !matches!(self.phase, Phase::Leading(_))
    }

    /// At a release: whether to turn the tracking off (it is on; a `--mode` candidate's
    /// only when it is a holder's). It is off from then on.
    pub(super) fn stops_tracking(&mut self) -> bool {
        if self.rw() && !self.tracking.lock {
            return false;
        }
        std::mem::take(&mut self.tracking.on)
    }

    /// How the next wait goes on. Takes the untracked follower's hint (used once).
    pub(super) fn wait(&mut self) -> WaitFor {
        let tracked = self.tracking.on;
        match &mut self.phase {
            Phase::KeptOut(w) => match w.look_at() {
                Some(look_at) => WaitFor::Quietly { look_at },
                None => WaitFor::Notices { hint: None },
            },
            Phase::Following(f) => match f.last_sign.filter(|_| tracked) {
                Some(last) => WaitFor::Renewals {
                    due: self.cadence.due(last, f.expiry()),
                },
                None => WaitFor::Notices {
                    hint: f.hint.take(),
                },
            },
            Phase::Idle | Phase::Leading(_) => WaitFor::Notices { hint: None },
        }
    }

    /// When a wait on the renewals ends by itself, whatever it hears (`until`: its
    /// `max`): its due time or the stagger.
    pub(super) fn renewals_until(&self, until: Instant) -> Instant {
        match &self.phase {
            Phase::Following(f) => f.grace.map_or(until, |g| until.min(g)),
            _ => until,
        }
    }

    /// A wake-up of the listener or the baton waiter: a request to look (`look`), a
    /// message on the read-write lock's channel (`rw`: a look only while we wait for
    /// that lock), or else the last announcement (taken only then): `Changed`, and the
    /// next campaign looks, or follows the announced holder. `None`: nothing new.
    pub(super) fn on_notice(
        &mut self,
        look: bool,
        rw: bool,
        announcement: impl FnOnce() -> Option<String>,
    ) -> Option<Wake> {
        if look || (rw && self.kept_out()) {
            self.announced = None;
            return Some(Wake::Changed);
        }
        self.announced = Some(announcement()?);
        Some(Wake::Changed)
    }

    /// A push of the holder's `alive` while following it by its renewals, heard at
    /// `now`: `Some(wake)` to return, `None` to wait on; `grace`: the stagger after a
    /// push that came too soon.
    pub(super) fn on_alive_push(
        &mut self,
        now: Instant,
        grace: impl FnOnce() -> Duration,
    ) -> Option<Wake> {
        let Phase::Following(f) = &mut self.phase else {
            return Some(Wake::Changed);
        };
        let Some(last) = f.last_sign else {
            return Some(Wake::Changed);
        };
        match self.cadence.read_push(now, last, f.expiry()) {
            Pushed::Look => Some(Wake::Changed),
            Pushed::TooSoon => {
                // Not a renewal at its cadence: two holders' renewals (one about to
                // find its key gone), or a change by hand. Look only if no
                // announcement comes within the grace.
                f.grace.get_or_insert_with(|| now + grace());
                None
            }
            Pushed::Renewal => {
                f.last_sign = Some(now);
                f.expires = Some(now + self.ttl);
                Some(Wake::Quiet)
            }
        }
    }

    /// The time of a wait on the renewals came (`now`; `due`: as [`Core::wait`] said):
    /// the stagger over or the holder due: a look; else `max`: `Waiting`.
    pub(super) fn on_timer(&mut self, now: Instant, due: Instant) -> Wake {
        if let Phase::Following(f) = &mut self.phase {
            if f.grace.is_some_and(|g| now >= g) {
                f.grace = None;
                return Wake::Changed;
            }
        }
        if now >= due {
            Wake::Changed
        } else {
            Wake::Waiting
        }
    }

    /// A push while following the holder by its renewals (`alive`: the key they
    /// write), heard at `now`: `Some(wake)` to return, `None` to wait on. A lost
    /// connection (its tracking gone) asks for a look, which turns tracking on again.
    pub(super) fn on_follow_push(
        &mut self,
        push: Push<'_>,
        alive: &str,
        now: Instant,
        grace: impl FnOnce() -> Duration,
    ) -> Option<Wake> {
        match push {
            Push::Lost => self.tracking_lost(),
            Push::Invalidated(keys) if names_alive(keys, alive) => self.on_alive_push(now, grace),
            _ => None,
        }
    }

    /// A push while kept out of the read-write lock, heard at `now` (`busy`: the
    /// queue's keeping key): a renewal of what keeps us out (`Quiet`), its expiry or a
    /// lost connection (`Changed`), or nothing (`None`).
    pub(super) fn on_quiet_push(
        &mut self,
        push: Push<'_>,
        busy: &str,
        now: Instant,
    ) -> Option<Wake> {
        let keys = match push {
            Push::Lost => return self.tracking_lost(),
            Push::Invalidated(keys) => keys,
            Push::Other => return None,
        };
        let Phase::KeptOut(w) = &mut self.phase else {
            return None;
        };
        match w.heard(keys, busy, self.ttl, now) {
            quiet::Heard::Renewal => Some(Wake::Quiet),
            quiet::Heard::Due => Some(Wake::Changed),
            quiet::Heard::Nothing => None,
        }
    }

    fn tracking_lost(&mut self) -> Option<Wake> {
        self.tracking.on = false;
        Some(Wake::Changed)
    }

    /// The tenure's announcement, while followers still need it.
    pub(super) fn to_announce(&self) -> Option<&str> {
        match &self.phase {
            Phase::Leading(t) if t.announce => Some(&t.value),
            _ => None,
        }
    }

    /// The server took the announcement.
    pub(super) fn announced_sent(&mut self) {
        if let Phase::Leading(t) = &mut self.phase {
            t.announce = false;
        }
    }

    /// A renew script's answer (`kept`) at `now` (see [`renewal_of`]).
    pub(super) fn renewed(&mut self, kept: i64, now: Instant) -> Result<Renewal, TooLate> {
        let kept = match (self.flaws.renewal_not_ours_kept, kept) {
            (true, 0) => 1,
            _ => kept,
        };
        let mut unused = None;
        let until = match &mut self.phase {
            Phase::Leading(t) => &mut t.own_push_until,
            _ => &mut unused,
        };
        renewal_of(kept, now, until)
    }

    /// Takes the time until which a push is our own renewal's (see [`own_push`]).
    pub(super) fn take_own_push_until(&mut self) -> Option<Instant> {
        match &mut self.phase {
            Phase::Leading(t) => t.own_push_until.take(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
