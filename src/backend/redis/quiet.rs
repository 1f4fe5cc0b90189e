//! How a candidate kept out of the read-write lock waits without asking:
//! a `--mode` follower (see [`super::rw`]), and an election's candidate (no `--mode`)
//! kept out by the shared holders or by a place ahead in the queue (see
//! [`super::RedisBackend`]).
//!
//! Its command connection tracks (`CLIENT TRACKING BCAST`) the readers' set, the
//! exclusive holder's `…:alive` and the queue's keeping `…:busy`, so each renewal of
//! what keeps it out is pushed to it ([`heard_until`]); it looks by itself only when
//! that would have expired unheard-of ([`next_look`]: a crashed or stopped holder, a
//! lapsed place ahead), or when the read-write lock's channel says something changed;
//! and at the latest before its own place or the one ahead goes stale
//! ([`latest_look`], [`QUEUE_TTLS`]): one look per five ttl beside renewing holders.
//! A key's expiry pushes the same invalidation as its renewal: a push heard less than
//! [`DUE_WITHIN`] before what keeps it out would expire unless renewed is taken for
//! the expiry, and it looks then ([`Heard::Due`]); and with nobody holding, no push
//! of `…:busy` keeps the queue (its expiry, half a ttl after the last holder's
//! release, is none).
//! Decisions only: the callers do the I/O and pass the time.

use std::time::Duration;

use redis::PushInfo;
use tokio::time::Instant;

/// What one take script said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Look {
    /// We hold the lock (taken, or our earlier take adopted), with this value.
    Took(String),
    /// Held exclusively (an exclusive or an election's holder, a quarantine, or left to
    /// a switchover's candidate: value empty), for `pttl` ms more (-1: unknown).
    Exclusive { value: String, pttl: i64 },
    /// Kept out by the shared holders (a writer), for `pttl` ms at most unless renewed.
    KeptOut { pttl: i64 },
    /// Kept out by a candidate ahead in the queue (a writer for a reader, anyone for a
    /// writer), whose place goes stale in `pttl` ms unless it looks ([`QUEUE_TTLS`]).
    Queued { pttl: i64 },
    /// The request came after its use-by and did nothing.
    TooLate,
}

impl Look {
    /// A take script's answer read as a look: `won` (1 taken, 0 not,
    /// [`super::REFUSED`] too late), what kept it out (`why`: 3 the shared holders, 4 a
    /// place ahead in the queue, else a holder of the lock key), the value and `pttl`.
    pub(crate) fn of(won: i64, why: i64, value: &str, pttl: i64) -> Look {
        match (won, why) {
            (1, _) => Look::Took(value.to_owned()),
            (super::REFUSED, _) => Look::TooLate,
            (_, 3) => Look::KeptOut { pttl },
            (_, 4) => Look::Queued { pttl },
            _ => Look::Exclusive {
                value: value.to_owned(),
                pttl,
            },
        }
    }
}

/// What a follower's last look found keeping it out: which pushes are renewals of it
/// ([`heard_until`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeptBy {
    /// A holder: the shared holders' renewals (the readers' set), the exclusive
    /// holder's (`…:alive`).
    #[default]
    Holder,
    /// A place ahead in the queue, beside holders that keep the queue (`…:busy`).
    PlaceBesideHolders,
    /// A place ahead in the queue, with nobody holding: nothing keeps the queue (a
    /// push of `…:busy` is the expiry of the last holders' keeping, or a new holder's
    /// take, which the next look finds).
    PlaceAlone,
}

/// What one push heard by a waiting follower asks for ([`Wait::heard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// Nothing about what keeps it out: it waits on.
    Nothing,
    /// A renewal of what keeps it out: the look moved on.
    Renewal,
    /// A change of what keeps it out less than [`DUE_WITHIN`] before it would expire
    /// unless renewed: the key's expiry pushes the same invalidation as a renewal (one
    /// heard late, on a busy machine, comes before the follower's own time to look; a
    /// renewal this late costs one look), so it looks now.
    Due,
}

/// How close to the expiry of what keeps a follower out a push is taken for that
/// expiry ([`Heard::Due`]): a quarter of a ttl (renewals come every third of a ttl,
/// the holders' keeping of the queue lasts two; a holder with a renew interval above
/// 3/4 ttl costs looks, never safety).
pub const DUE_WITHIN: u32 = 4;

/// How many ttl after its candidate's last look a place in the queue keeps anyone
/// out at most, even while the holders keep the queue (`…:busy`): past it the place
/// is stale, and `queue` (every take script) or a shared holder's renewal
/// (`check_heads`) drops it (see [`super::QUEUE`]: the lapse, the score, is one and a
/// half ttl after the look, the cutoff `ttl * 9 / 2` after the lapse). The SQL
/// backends' figure: a frozen (SIGSTOP) waiting candidate keeps the ones behind it
/// out for about `QUEUE_TTLS` + 1 ttl at most.
pub const QUEUE_TTLS: u32 = 6;

/// The latest a waiting candidate looks after a look that found `look`, whatever it
/// hears: `QUEUE_TTLS - 1` ttl (its look rewrites its place before the place goes
/// stale), and, queued behind another candidate, when the place ahead goes stale
/// (the `pttl` of [`Look::Queued`]), 2 ms after, so that it learns of a frozen one's
/// drop without polling.
pub fn latest_look(look: &Look, ttl: Duration) -> Duration {
    let own = ttl * (QUEUE_TTLS - 1);
    match look {
        Look::Queued { pttl } => match u64::try_from(*pttl) {
            Ok(ms) => own.min(Duration::from_millis(ms.saturating_add(2))),
            Err(_) => own,
        },
        _ => own,
    }
}

/// When a follower looks again by itself after a look that found `look`: when what
/// kept it out would expire unless renewed (2 ms after). A follower that hears the
/// renewals (`tracked`, see [`Wait::heard`]) moves that time on with each one and
/// sends nothing else; one that does not (a server without `CLIENT TRACKING`) looks at
/// the latest 3/4 ttl later, so its `/leader` stays current. One queued behind another
/// candidate looks at the latest half a ttl later unless it hears the holders keep
/// the queue meanwhile: with nobody holding, the one ahead should have taken by then,
/// and the look drops its place if its process is gone (its presence channel without
/// a subscriber), where its place could otherwise last two ttl after its last look.
pub fn next_look(look: &Look, ttl: Duration, tracked: bool) -> Duration {
    let latest = if tracked { ttl * 2 } else { ttl * 3 / 4 };
    let latest = match look {
        Look::Queued { .. } => latest.min(ttl / 2),
        _ => latest,
    };
    let pttl = match look {
        Look::Exclusive { pttl, .. } | Look::KeptOut { pttl } | Look::Queued { pttl } => *pttl,
        Look::Took(_) | Look::TooLate => -1,
    };
    match u64::try_from(pttl) {
        Ok(ms) => latest.min(Duration::from_millis(ms.saturating_add(2))),
        Err(_) => latest,
    }
}

/// How far a push for `key` moves a follower's look on (from when it is heard): for
/// one kept out by a holder, a holder's renewal (the readers' set, the exclusive
/// holder's `alive`) by one ttl; for one kept out by a place ahead in the queue
/// beside holders, the holders' keeping of the queue (`busy`) by two; 2 ms to spare.
/// `None`: a change that says nothing about what keeps it out (with nobody holding,
/// no push does).
pub fn heard_until(key: &[u8], busy: &str, ttl: Duration, kept: KeptBy) -> Option<Duration> {
    let spare = Duration::from_millis(2);
    match (key == busy.as_bytes(), kept) {
        (true, KeptBy::PlaceBesideHolders) => Some(ttl * 2 + spare),
        (false, KeptBy::Holder) => Some(ttl + spare),
        _ => None,
    }
}

/// The keys an invalidation push names (none for a flush of everything).
pub(crate) fn invalidated(push: &PushInfo) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for v in &push.data {
        match v {
            redis::Value::Array(items) | redis::Value::Set(items) => {
                for item in items {
                    if let redis::Value::BulkString(k) = item {
                        keys.push(k.clone());
                    }
                }
            }
            redis::Value::BulkString(k) => keys.push(k.clone()),
            _ => {}
        }
    }
    keys
}

/// One follower's silent wait: when it looks by itself, moved on by what it hears.
#[derive(Clone, Debug, Default)]
pub(crate) struct Wait {
    /// When it looks by itself; `None`: not waiting this way.
    look_at: Option<Instant>,
    /// The latest it looks, whatever it hears ([`latest_look`]).
    cap: Option<Instant>,
    /// What the last look found keeping it out.
    kept: KeptBy,
    /// When that expires unless renewed, as last seen (the look's `pttl`, or the last
    /// renewal heard).
    expires: Option<Instant>,
    /// Until when a push is taken for our own look's change (a script of this very
    /// connection pushes its own changes of a tracked key, NOLOOP or not).
    own_look_until: Option<Instant>,
}

impl Wait {
    /// After a look, answered at `now`, that found `look` (`held`: whether anyone
    /// held then, for a [`Look::Queued`]; `tracked`: whether the renewals are pushed
    /// to us; `own`: how soon the look's own pushes come).
    pub(crate) fn looked(
        &mut self,
        look: &Look,
        held: bool,
        ttl: Duration,
        tracked: bool,
        now: Instant,
        own: Duration,
    ) {
        let cap = now + latest_look(look, ttl);
        self.cap = Some(cap);
        self.look_at = Some(cap.min(now + next_look(look, ttl, tracked)));
        self.kept = match look {
            Look::Queued { .. } if held => KeptBy::PlaceBesideHolders,
            Look::Queued { .. } => KeptBy::PlaceAlone,
            _ => KeptBy::Holder,
        };
        self.expires = match look {
            Look::Exclusive { pttl, .. } | Look::KeptOut { pttl } => u64::try_from(*pttl)
                .ok()
                .map(|ms| now + Duration::from_millis(ms)),
            _ => None,
        };
        self.own_look_until = Some(now + own);
    }

    /// When it looks by itself (`None`: not waiting this way).
    pub(crate) fn look_at(&self) -> Option<Instant> {
        self.look_at
    }

    /// An invalidation naming `keys`, heard at `now`: a renewal of what keeps us out
    /// ([`heard_until`]), which moves the look on, unless that was to expire within
    /// [`DUE_WITHIN`] (then it is taken for the expiry).
    pub(crate) fn heard(
        &mut self,
        keys: &[Vec<u8>],
        busy: &str,
        ttl: Duration,
        now: Instant,
    ) -> Heard {
        if self.own_look_until.is_some_and(|u| now <= u) {
            return Heard::Nothing;
        }
        let Some(look_at) = self.look_at else {
            return Heard::Nothing;
        };
        let by = (keys.iter())
            .filter_map(|key| heard_until(key, busy, ttl, self.kept))
            .max();
        let Some(by) = by else {
            return Heard::Nothing;
        };
        if self.expires.is_some_and(|e| now + ttl / DUE_WITHIN >= e) {
            return Heard::Due;
        }
        self.expires = Some(now + by);
        let until = look_at.max(now + by);
        self.look_at = Some(self.cap.map_or(until, |cap| until.min(cap)));
        Heard::Renewal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_looks_when_the_blocker_expires() {
        let ttl = Duration::from_secs(2);
        let ex = |pttl| Look::Exclusive {
            value: String::new(),
            pttl,
        };
        for tracked in [true, false] {
            assert_eq!(
                next_look(&ex(100), ttl, tracked),
                Duration::from_millis(102)
            );
            assert_eq!(
                next_look(&Look::KeptOut { pttl: 0 }, ttl, tracked),
                Duration::from_millis(2)
            );
        }
        // Untracked, at the latest 3/4 ttl later; tracked, at the blocker's expiry
        // (two ttl at most: a queue's place kept by the holders).
        assert_eq!(
            next_look(&ex(1_900), ttl, false),
            Duration::from_millis(1_500)
        );
        assert_eq!(next_look(&ex(-1), ttl, false), Duration::from_millis(1_500));
        assert_eq!(
            next_look(&ex(1_900), ttl, true),
            Duration::from_millis(1_902)
        );
        assert_eq!(
            next_look(&Look::KeptOut { pttl: 3_500 }, ttl, true),
            Duration::from_millis(3_502)
        );
        assert_eq!(next_look(&ex(-1), ttl, true), Duration::from_millis(4_000));
        // Queued behind another candidate: half a ttl at the latest.
        for tracked in [true, false] {
            assert_eq!(
                next_look(&Look::Queued { pttl: 3_500 }, ttl, tracked),
                Duration::from_millis(1_000)
            );
            assert_eq!(
                next_look(&Look::Queued { pttl: 300 }, ttl, tracked),
                Duration::from_millis(302)
            );
        }
    }

    #[test]
    fn a_renewal_heard_moves_the_look_by_a_ttl_and_the_queues_keeping_by_two() {
        let ttl = Duration::from_secs(2);
        let busy = "leasekeeper:{e}:busy";
        let readers = b"leasekeeper:{e}:readers";
        let beside = KeptBy::PlaceBesideHolders;
        assert_eq!(
            heard_until(busy.as_bytes(), busy, ttl, beside),
            Some(Duration::from_millis(4_002))
        );
        assert_eq!(heard_until(readers, busy, ttl, beside), None);
        assert_eq!(
            heard_until(readers, busy, ttl, KeptBy::Holder),
            Some(Duration::from_millis(2_002))
        );
        assert_eq!(
            heard_until(busy.as_bytes(), busy, ttl, KeptBy::Holder),
            None
        );
        for key in [busy.as_bytes(), readers] {
            assert_eq!(heard_until(key, busy, ttl, KeptBy::PlaceAlone), None);
        }
    }

    #[test]
    fn a_wait_moves_on_with_renewals_but_not_with_its_own_look() {
        let ttl = Duration::from_secs(2);
        let own = Duration::from_millis(50);
        let busy = "leasekeeper:{e}:busy";
        let readers = [b"leasekeeper:{e}:readers".to_vec()];
        let keeping = [busy.as_bytes().to_vec()];
        let t0 = Instant::now();
        let mut w = Wait::default();
        assert_eq!(
            w.heard(&readers, busy, ttl, t0),
            Heard::Nothing,
            "not waiting"
        );
        w.looked(&Look::KeptOut { pttl: 1_000 }, true, ttl, true, t0, own);
        assert_eq!(w.look_at(), Some(t0 + Duration::from_millis(1_002)));
        // The look's own change of the readers' set moves nothing.
        let soon = t0 + Duration::from_millis(10);
        assert_eq!(w.heard(&readers, busy, ttl, soon), Heard::Nothing);
        assert_eq!(w.look_at(), Some(t0 + Duration::from_millis(1_002)));
        // A reader's renewal moves the look a ttl on from when it is heard.
        let later = t0 + Duration::from_millis(300);
        assert_eq!(w.heard(&readers, busy, ttl, later), Heard::Renewal);
        assert_eq!(w.look_at(), Some(later + Duration::from_millis(2_002)));
        // The queue's keeping says nothing to one kept out by the readers.
        assert_eq!(w.heard(&keeping, busy, ttl, later), Heard::Nothing);
        // Queued beside holders: only the keeping moves it, by two ttl.
        w.looked(&Look::Queued { pttl: 11_000 }, true, ttl, true, t0, own);
        assert_eq!(w.heard(&readers, busy, ttl, later), Heard::Nothing);
        assert_eq!(w.heard(&keeping, busy, ttl, later), Heard::Renewal);
        assert_eq!(w.look_at(), Some(later + Duration::from_millis(4_002)));
        // Queued with nobody holding: nothing keeps the queue.
        w.looked(&Look::Queued { pttl: 11_000 }, false, ttl, true, t0, own);
        assert_eq!(w.heard(&keeping, busy, ttl, later), Heard::Nothing);
        assert_eq!(w.look_at(), Some(t0 + ttl / 2));
    }

    #[test]
    fn an_expiry_heard_is_no_renewal() {
        let ttl = Duration::from_secs(2);
        let own = Duration::from_millis(50);
        let ms = Duration::from_millis;
        let busy = "leasekeeper:{e}:busy";
        let alive = [b"leasekeeper:{e}:alive".to_vec()];
        let keeping = [busy.as_bytes().to_vec()];
        let t0 = Instant::now();
        let mut w = Wait::default();
        // An exclusive holder renews a third of a ttl after the look; heard 300 ms
        // late, that renewal moves the look to 2 s after the hearing, past the
        // expiry of its `alive`, whose push (at 2 667 ms, and up to 100 ms later) is
        // no renewal: it looks then.
        let held = Look::Exclusive {
            value: "n|1|w".into(),
            pttl: 2_000,
        };
        w.looked(&held, true, ttl, true, t0, own);
        assert_eq!(w.heard(&alive, busy, ttl, t0 + ms(967)), Heard::Renewal);
        assert_eq!(w.look_at(), Some(t0 + ms(2_969)));
        assert_eq!(w.heard(&alive, busy, ttl, t0 + ms(2_690)), Heard::Due);
        // Renewals at their cadence are no expiry.
        w.looked(&held, true, ttl, true, t0, own);
        for at in [600, 1_270, 1_940, 2_610] {
            assert_eq!(w.heard(&alive, busy, ttl, t0 + ms(at)), Heard::Renewal);
        }
        // The queue's keeping beside holders: its expiry two ttl after the last one.
        w.looked(&Look::Queued { pttl: 11_000 }, true, ttl, true, t0, own);
        assert_eq!(w.heard(&keeping, busy, ttl, t0 + ms(300)), Heard::Renewal);
        assert_eq!(w.heard(&keeping, busy, ttl, t0 + ms(4_250)), Heard::Due);
    }

    #[test]
    fn the_scripts_stale_cutoff_is_queue_ttls_after_the_look() {
        // The score is the lapse, one and a half ttl after the look; the scripts add
        // the rest (`stale`, `cutoff_left`).
        let added = format!("ttl * {} / 2", QUEUE_TTLS * 2 - 3);
        assert_eq!(super::super::QUEUE.matches(&added).count(), 2, "{added}");
    }

    #[test]
    fn a_waiting_candidate_looks_before_its_place_or_the_one_ahead_goes_stale() {
        let ttl = Duration::from_secs(2);
        let s = Duration::from_secs;
        // Its own place: five ttl after its look, whatever it was kept out by.
        for look in [
            Look::KeptOut { pttl: 1_000 },
            Look::Exclusive {
                value: String::new(),
                pttl: -1,
            },
            Look::Queued { pttl: -1 },
            Look::Queued { pttl: 60_000 },
        ] {
            assert_eq!(latest_look(&look, ttl), s(10), "{look:?}");
        }
        // The place ahead goes stale sooner: then, 2 ms after.
        assert_eq!(
            latest_look(&Look::Queued { pttl: 3_000 }, ttl),
            Duration::from_millis(3_002)
        );
        let busy = "leasekeeper:{e}:busy";
        let keeping = [busy.as_bytes().to_vec()];
        let readers = [b"leasekeeper:{e}:readers".to_vec()];
        let own = Duration::from_millis(50);
        let t0 = Instant::now();
        // Beside renewing readers, renewals heard move the look on up to five ttl.
        let mut w = Wait::default();
        w.looked(&Look::KeptOut { pttl: 2_000 }, true, ttl, true, t0, own);
        for at in 1..=20 {
            let heard = w.heard(&readers, busy, ttl, t0 + ttl * at / 3);
            assert_eq!(heard, Heard::Renewal);
        }
        assert_eq!(w.look_at(), Some(t0 + s(10)));
        // Queued behind a place stale in 7 s: the keeping heard moves it to then.
        w.looked(&Look::Queued { pttl: 7_000 }, true, ttl, true, t0, own);
        assert_eq!(w.look_at(), Some(t0 + s(1)));
        for at in [1, 3, 5, 7] {
            assert_eq!(w.heard(&keeping, busy, ttl, t0 + s(at)), Heard::Renewal);
        }
        assert_eq!(w.look_at(), Some(t0 + Duration::from_millis(7_002)));
    }
}
