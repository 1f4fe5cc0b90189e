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
#[derive(Debug, Default)]
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

/// The campaign's state: the phase, the tracking, the highest token seen and an
/// announcement heard during a wait.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) phase: Phase,
    pub(super) tracking: Tracking,
    /// The highest token seen; new tokens never go below it.
    pub(super) floor: FencingToken,
    /// An announced new holder (`<value>`) the next campaign follows without a request.
    pub(super) announced: Option<String>,
    ttl: Duration,
    cadence: Cadence,
    /// How this candidate joins (`--mode`): the election's lease, or a side of the
    /// read-write lock.
    mode: LockMode,
    /// Who holds, as the last look found it (a `--mode` candidate's, for `/leader`).
    observed: Vec<(Holder, Mode)>,
}

impl Core {
    pub(super) fn new(ttl: Duration, renew_interval: Duration, mode: LockMode) -> Core {
        Core {
            phase: Phase::Idle,
            tracking: Tracking::default(),
            floor: 0,
            announced: None,
            ttl,
            cadence: Cadence {
                ttl,
                renew_interval,
            },
            mode,
            observed: Vec::new(),
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
            self.floor = seen.fold(self.floor, FencingToken::max);
        }
        let parsed = parse_value(&take.value);
        if let Some(token) = parsed.token {
            self.floor = self.floor.max(token);
        }
        if take.won == 1 {
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
        let holder = announced_holder(value, self.floor)?;
        if self.value().is_some() || self.tracking.lock {
            return None;
        }
        self.floor = holder.token.unwrap_or(self.floor);
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
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_millis(3_000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A candidate with tracking on (ttl 3 s, renewals every second).
    fn core() -> Core {
        let mut c = Core::new(TTL, ms(1_000), LockMode::Election);
        c.follower_tracking(true);
        c
    }

    fn take(won: i64, value: &str, pttl: i64, why: i64) -> Take {
        Take {
            won,
            value: value.to_owned(),
            pttl,
            why,
            readers: Vec::new(),
        }
    }

    fn held(identity: &str, token: u64) -> Next {
        Next::Held(Some(Holder {
            identity: identity.to_owned(),
            token: Some(token),
        }))
    }

    #[test]
    fn a_take_that_came_too_late_changes_nothing() {
        let mut c = core();
        let t0 = Instant::now();
        assert_eq!(
            c.after_take(take(0, "n|5|b", 2_000, 0), t0, t0),
            held("b", 5)
        );
        let before = format!("{:?}", c.phase);
        let late = c.after_take(take(REFUSED, "n|9|c", 2_000, 3), t0, t0 + ms(5));
        assert_eq!(late, Next::TooLate);
        assert_eq!(c.floor, 5, "a refused take raised the floor");
        assert_eq!(
            format!("{:?}", c.phase),
            before,
            "a refused take moved the phase"
        );
    }

    #[test]
    fn a_won_take_leads_only_once_the_tracking_read_finds_it_ours() {
        let mut c = core();
        let t0 = Instant::now();
        let next = c.after_take(take(1, "n|7|a", -1, 0), t0, t0);
        assert_eq!(next, Next::Claim { token: 7 });
        assert_eq!(c.floor, 7);
        assert_eq!(c.value(), Some("n|7|a"));
        assert_eq!(c.to_announce(), None, "announced before the tracking read");
        assert!(!c.arms_baton(), "a holder waits for no baton");
        assert!(c.claimed(true));
        c.own_tracking();
        assert_eq!(c.to_announce(), Some("n|7|a"));
        c.announced_sent();
        assert_eq!(
            c.to_announce(),
            None,
            "announced twice once the server took it"
        );
        // Taken between the take and the tracking read: not ours to claim.
        let mut c = core();
        c.after_take(take(1, "n|8|a", -1, 0), t0, t0);
        assert!(!c.claimed(false));
        assert!(matches!(c.phase, Phase::Idle));
        assert_eq!(c.value(), None);
        // A won value without a token is no tenure.
        let mut c = core();
        let no_token = c.after_take(take(1, "n|x|a", -1, 0), t0, t0);
        assert_eq!(no_token, Next::NoToken("n|x|a".into()));
        assert_eq!(c.value(), None);
    }

    #[test]
    fn tokens_never_go_below_the_highest_seen() {
        let mut c = core();
        let t0 = Instant::now();
        c.after_take(take(0, "n|9|b", 2_000, 0), t0, t0);
        c.after_take(take(0, "n|4|a", 2_000, 0), t0, t0);
        assert_eq!(c.floor, 9);
        // A former holder's announcement, delayed past its successor's take.
        assert_eq!(c.follow_announced("n|8|a", t0), None);
        assert_eq!(c.floor, 9);
        let followed = c.follow_announced("n|10|c", t0).expect("followed");
        assert_eq!(followed.token, Some(10));
        assert_eq!(c.floor, 10);
    }

    #[test]
    fn a_follower_of_a_tracked_holder_looks_when_its_renewal_is_late_or_its_key_expires() {
        let mut c = core();
        let (read_at, now) = (Instant::now(), Instant::now() + ms(4));
        assert_eq!(
            c.after_take(take(0, "n|5|b", 2_000, 0), read_at, now),
            held("b", 5)
        );
        // Due at the read's expiry (2 s, 2 ms after), sooner than 9/4 of the interval.
        assert_eq!(
            c.wait(),
            WaitFor::Renewals {
                due: read_at + ms(2_002)
            }
        );
        assert!(c.arms_baton());
        // A holder read with its full ttl left: due when its renewal is late.
        c.after_take(take(0, "n|5|b", 3_000, 0), read_at, now);
        assert_eq!(
            c.wait(),
            WaitFor::Renewals {
                due: read_at + ms(2_250)
            }
        );
    }

    #[test]
    fn an_untracked_follower_waits_for_the_holders_expiry_once() {
        let mut c = Core::new(TTL, ms(1_000), LockMode::Election);
        let (read_at, now) = (Instant::now(), Instant::now() + ms(4));
        c.after_take(take(0, "n|5|b", 2_000, 0), read_at, now);
        assert_eq!(
            c.wait(),
            WaitFor::Notices {
                hint: Some(now + ms(2_002))
            }
        );
        assert_eq!(
            c.wait(),
            WaitFor::Notices { hint: None },
            "the hint used twice"
        );
        // Tracking lost: the same follower waits on its notices.
        let mut c = core();
        c.after_take(take(0, "n|5|b", 2_000, 0), read_at, now);
        c.tracking.on_push(&redis::PushKind::Disconnection);
        assert!(matches!(c.wait(), WaitFor::Notices { hint: Some(_) }));
        // A free lock: nothing to follow, no time to look by itself.
        let mut c = core();
        assert_eq!(
            c.after_take(take(0, "", -2, 0), read_at, now),
            Next::Held(None)
        );
        assert_eq!(c.wait(), WaitFor::Notices { hint: None });
    }

    #[test]
    fn renewals_at_their_cadence_keep_a_follower_quiet() {
        let mut c = core();
        let t0 = Instant::now();
        c.after_take(take(0, "n|5|b", 3_000, 0), t0, t0);
        let never = || -> Duration { panic!("no stagger for a renewal") };
        assert_eq!(c.on_alive_push(t0 + ms(1_000), never), Some(Wake::Quiet));
        // The renewal moved the last sign and the expiry on.
        assert_eq!(
            c.wait(),
            WaitFor::Renewals {
                due: t0 + ms(3_250)
            }
        );
        // None by 9/4 of the interval: the holder stopped renewing.
        assert_eq!(c.on_alive_push(t0 + ms(3_300), never), Some(Wake::Changed));
    }

    #[test]
    fn a_push_too_soon_staggers_the_look_unless_news_comes_first() {
        let mut c = core();
        let t0 = Instant::now();
        c.after_take(take(0, "n|5|b", 3_000, 0), t0, t0);
        let WaitFor::Renewals { due } = c.wait() else {
            panic!("not following the renewals")
        };
        let max = t0 + ms(10_000);
        assert_eq!(c.on_alive_push(t0 + ms(100), || ms(300)), None);
        assert_eq!(c.renewals_until(max.min(due)), t0 + ms(400));
        // A second push within the stagger does not move it.
        assert_eq!(c.on_alive_push(t0 + ms(200), || ms(999)), None);
        assert_eq!(c.renewals_until(max.min(due)), t0 + ms(400));
        assert_eq!(c.on_timer(t0 + ms(400), due), Wake::Changed);
        assert_eq!(c.renewals_until(max), max, "the stagger outlived its look");
        // Before it is due and without a stagger: the wait's `max`.
        assert_eq!(c.on_timer(t0 + ms(500), due), Wake::Waiting);
        assert_eq!(c.on_timer(due, due), Wake::Changed);
        // A campaign forgets the stagger and the last sign.
        assert_eq!(c.on_alive_push(t0 + ms(100), || ms(300)), None);
        assert!(!c.begin(), "tracking on: no new tracking");
        assert_eq!(c.renewals_until(max), max);
        assert!(matches!(c.wait(), WaitFor::Notices { .. }));
    }

    #[test]
    fn an_announcement_is_followed_without_a_look_by_a_follower_only() {
        let mut c = core();
        let t0 = Instant::now();
        let h = c.follow_announced("n|3|b", t0).expect("followed");
        assert_eq!(h.identity, "b");
        assert_eq!(
            c.wait(),
            WaitFor::Renewals {
                due: t0 + ms(2_250)
            }
        );
        // Names nobody: a look settles it.
        assert_eq!(c.follow_announced("quarantine|4|", t0), None);
        // A candidate that led since its last look looks once.
        let mut c = core();
        c.after_take(take(1, "n|7|a", -1, 0), t0, t0);
        assert_eq!(c.follow_announced("n|8|b", t0), None, "a holder followed");
        c.claimed(true);
        c.own_tracking();
        c.released();
        c.tracking.on = false;
        assert!(matches!(c.phase, Phase::Idle));
        assert_eq!(
            c.follow_announced("n|8|b", t0),
            None,
            "a former holder followed"
        );
        // Its next look turns the follower's tracking on, and then it follows.
        assert!(c.begin());
        c.follower_tracking(true);
        assert!(c.follow_announced("n|9|b", t0).is_some());
    }

    #[test]
    fn a_holders_tracking_is_replaced_by_a_followers_at_the_next_look() {
        let mut c = core();
        assert!(!c.begin());
        c.own_tracking();
        assert!(c.begin(), "a holder's tracking kept by a follower");
        c.follower_tracking(false);
        assert!(c.begin(), "refused tracking not asked again");
    }

    #[test]
    fn kept_out_of_the_read_write_lock_it_waits_quietly_and_hears_its_channel() {
        let mut c = core();
        let t0 = Instant::now();
        let next = c.after_take(take(0, "r|6|", 2_000, 3), t0, t0);
        assert_eq!(next, Next::Held(None));
        assert_eq!(c.floor, 6);
        assert!(c.kept_out());
        assert_eq!(
            c.wait(),
            WaitFor::Quietly {
                look_at: t0 + ms(2_002)
            }
        );
        // The read-write lock's channel asks for a look only now.
        assert_eq!(c.on_notice(false, true, || None), Some(Wake::Changed));
        let readers = [b"leasekeeper:{e}:readers".to_vec()];
        let busy = "leasekeeper:{e}:busy";
        let renewed = Push::Invalidated(&readers);
        assert_eq!(
            c.on_quiet_push(renewed, busy, t0 + ms(400)),
            Some(Wake::Quiet)
        );
        // Queued behind a place ahead: half a ttl at the latest.
        c.after_take(take(0, "", 60_000, 4), t0, t0);
        assert_eq!(
            c.wait(),
            WaitFor::Quietly {
                look_at: t0 + ms(1_500)
            }
        );
        // Following a holder again: the channel says nothing to it.
        c.after_take(take(0, "n|7|b", 2_000, 0), t0, t0);
        assert!(!c.kept_out());
        assert_eq!(c.on_notice(false, true, || None), None);
        assert_eq!(c.on_quiet_push(renewed, busy, t0), None);
    }

    #[test]
    fn a_wake_up_looks_or_keeps_the_announcement_for_the_next_campaign() {
        let mut c = core();
        let announced = || Some("n|3|b".to_owned());
        assert_eq!(c.on_notice(false, false, announced), Some(Wake::Changed));
        assert_eq!(c.announced.as_deref(), Some("n|3|b"));
        // A request to look wins over the announcement, which stays unread.
        let unread = || -> Option<String> { panic!("announcement taken") };
        assert_eq!(c.on_notice(true, false, unread), Some(Wake::Changed));
        assert_eq!(c.announced, None);
        assert_eq!(c.on_notice(false, false, || None), None);
    }

    #[test]
    fn a_renewals_answer_is_kept_lost_or_too_late_and_its_own_push_expected() {
        let mut c = core();
        let t0 = Instant::now();
        c.after_take(take(1, "n|7|a", -1, 0), t0, t0);
        assert_eq!(c.renewed(1, t0), Ok(Renewal::Renewed));
        let until = c.take_own_push_until();
        assert_eq!(until, Some(t0 + OWN_PUSH_WINDOW));
        assert_eq!(
            c.take_own_push_until(),
            None,
            "one push taken for our own twice"
        );
        assert_eq!(c.renewed(REFUSED, t0), Err(TooLate));
        assert_eq!(c.renewed(0, t0), Ok(Renewal::Lost));
    }
}
