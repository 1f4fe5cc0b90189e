//! The read-write lock on one Redis server (`--mode shared|exclusive`): its keys, its
//! scripts and its rules. A candidate with a `--mode` is a [`super::RedisBackend`]
//! like an election's: its core ([`super::core`]) takes the mode, and its requests
//! ([`super::requests`]) are this lock's scripts, picked by the mode.
//!
//! Keys, beside the election's (all hash-tagged with `{<election>}`):
//! - the **exclusive holder** is the election's own lock key, `…:lock` =
//!   `<nonce>|<token>|<identity>` with a PX ttl: a `--mode exclusive` holder and an
//!   election's holder (no `--mode`) are the same thing on the wire, so each keeps the
//!   other out, and the election's followers see a writer as a holder;
//! - the **shared holders**: the sorted set `…:readers`, member = the holder's value
//!   `<nonce>|<token>|<identity>`, score = its expiry in the server's milliseconds;
//!   every script drops the members whose expiry has passed before it decides;
//! - the **queue**: the sorted set `…:writer-waits` (named for its first use), one
//!   entry per waiting candidate, `<arrival µs>|<r or w>|<nonce>|<identity>`, scored
//!   with its lapse (see [`super::QUEUE`]). A reader takes unless an exclusive holder
//!   holds or a writer waits ahead of it; a writer takes when nobody holds and nobody
//!   waits ahead of it; an election's candidate queues as a writer while `--mode`
//!   candidates wait. So writers are not starved, and a reader that came before a
//!   writer goes before it. A take or a release removes the own entry; the entry of
//!   a candidate that is gone (its presence channel has no subscriber) or silent past
//!   its lapse (one and a half ttl after its last look, or two ttl after the holders
//!   last kept the queue by `…:busy`, half a ttl after a release that left the lock
//!   free), or stale (six ttl after its last look, `…:busy` or not) is dropped;
//! - the fencing counter `…:fence`, bumped by every take, shared or exclusive, so
//!   tokens grow across every tenure of the election.
//!
//! Every decision is one Lua script judged by the server's clock ([`TAKE`], the
//! shared holder's compare-and-act [`RENEW_SHARED`], the exclusive holder's renewal
//! the election's, and [`RELEASE`]); the election's own take refuses while shared
//! holders live or a `--mode` candidate waits ahead of it, and queues its candidate
//! as a waiting writer, as [`TAKE`] does. A stopped (SIGSTOP) waiting candidate keeps
//! its place while the holders renew (its connections stay open: the server cannot
//! tell it from a live one) for six ttl after its last look at most
//! ([`super::quiet::QUEUE_TTLS`]; a live one looks at least every five);
//! once they are gone its place lapses half a ttl after their release (two ttl after
//! the last renewal of a crashed holder), or one and a half ttl after its last look
//! if that is later. A
//! killed one's place goes at the next script that reads the queue (a shared holder's
//! renewal, a look: a candidate queued behind another looks within half a ttl).
//!
//! **Waiting** sends one look per five ttl at steady state (to keep its place). A follower's listener hears the events
//! channel and `…:rw`: every release of the exclusive lock (the election's too, while
//! a candidate waits in the queue: a `--mode` candidate kept out always does), the
//! release of the last shared holder, a waiting candidate's withdrawal and the drop of
//! a gone one's entry publish there, and every follower of the read-write lock looks
//! then (one script call each). Otherwise it hears the holders without asking: its
//! command connection tracks (`CLIENT TRACKING BCAST`) the readers' set, the
//! exclusive holder's `…:alive` and `…:busy`, so each renewal of what keeps it out
//! is pushed to it ([`super::quiet::heard_until`]); it looks by itself only when that would have
//! expired unheard-of (a crashed or stopped holder, a lapsed place ahead), when the
//! place ahead would go stale, and five ttl after its last look at the latest. Its
//! own place is kept by the holders it waits for (every take and renewal sets
//! `…:busy` for two ttl while the queue is not empty) for six ttl after its last look
//! (the decisions: [`super::quiet`]). An election's candidate (no `--mode`) kept out by
//! the shared holders or by a place ahead waits the same way, by the same decisions
//! (the core's [`Phase::KeptOut`](super::core::Phase::KeptOut)); a `--mode` candidate
//! waits so behind every holder, an exclusive one too. The election's release also
//! hands the baton, and so does the last shared holder's, so it wakes at once.
//!
//! **Own record** (invariant 9): every holder tracks what its tenure is made of
//! (`CLIENT TRACKING`, see [`super::RedisBackend`], by the one watch
//! [`super::own_key_lost`]): an exclusive holder the lock key, as an election's holder does; a
//! shared holder its entry in the readers' set and the lock key (a value there beside
//! a shared entry is a tenure that excludes it). A change by anyone else is pushed and
//! read at once ([`super::own::shared_entry_lost`], judged by [`seen`]), so a tampered record ends the claim within a
//! round trip, not at the next renewal. The price for shared holders: every reader's
//! renewal changes the one sorted set, so each of N shared holders reads once after
//! each other one's renewal (N·(N−1) reads per renew interval, one round trip each);
//! waiting candidates still send only their looks.

use super::{named, switchover, CLOCK, QUEUE, READERS, REFUSED};
use crate::backend::record::Seen;
use crate::backend::LockMode;
use crate::status::{Holder, Mode};

use super::quiet::Look;

/// How many shared holders a look lists for `/leader` (as etcd's).
pub(crate) const SHOWN: usize = 16;

/// Take or adopt, shared (`ARGV[7]` = `shared`) or exclusive. KEYS: lock, fence,
/// readers, queue (writer-waits), switchover reservation, baton, busy. ARGV: our
/// `<nonce>|`, identity, ttl ms, floor, events channel, use-by, mode, how many readers
/// to list, the presence channels' prefix, the read-write lock's channel.
/// Returns {code, value, pttl, store ms, readers listed}; code 1 taken (value ours),
/// 0 held exclusively (value the holder's, pttl its expiry), 3 kept out by the shared
/// holders (a writer), pttl until the last one expires, 4 kept out by a candidate
/// ahead in the queue (a writer for a reader, anyone for a writer), pttl until its
/// place goes stale (see [`super::QUEUE`]), 2 too late (nothing done). A candidate kept out takes (or keeps) its
/// place in the queue (see [`super::QUEUE`]).
pub const TAKE: &str = include_str!("lua/rw_take.lua");

/// A shared holder's compare-and-act renewal: only its own entry, only while it has
/// not expired, and only while nobody holds the lock exclusively. It keeps the queue
/// (the waiting candidates' places, see [`super::QUEUE`]) and drops the entries of
/// candidates that are gone or stale among the first two in arrival order, telling the
/// followers (`ARGV[5]`). KEYS: readers, lock,
/// queue, busy. ARGV: our value, ttl ms, use-by, the presence channels' prefix, the
/// read-write lock's channel. Returns {kept (2: too late), store ms}.
pub const RENEW_SHARED: &str = include_str!("lua/rw_renew_shared.lua");

/// Give back whatever of ours the lock holds (compare-and-DEL of the exclusive lock,
/// our shared entries, our place in the queue). When the lock is then free of every
/// holder, or we left the queue, hand the baton to one of the election's followers
/// and cut the queue's keeping to half a ttl (when free, see [`super::QUEUE`]) and
/// tell the read-write lock's followers (`ARGV[2]`). KEYS: lock, readers, queue
/// (writer-waits), baton, busy. ARGV: our `<nonce>|`, channel, the baton's PX (the
/// ttl). Returns 1 when it released a tenure of ours.
pub const RELEASE: &str = include_str!("lua/rw_release.lua");

pub(crate) const RELEASE_END: &str = include_str!("lua/rw_release_end.lua");

/// The text of the take script every candidate of the read-write lock runs: [`TAKE`]
/// after its preludes (the store's clock, the switchover's reservation, the shared
/// holders, the queue).
pub fn take_source() -> String {
    format!("{CLOCK}{}{READERS}{QUEUE}{TAKE}", switchover::RESERVED)
}

/// Reads a take script's code as the election's take answers: `(won, why)`, `won` 1
/// taken, 0 not, [`REFUSED`] too late; `why` what kept it out (0 an exclusive holder
/// or nothing, 3 the shared holders, 4 a place ahead in the queue).
pub(crate) fn judge(code: i64) -> Result<(i64, i64), String> {
    match code {
        1 => Ok((1, 0)),
        0 => Ok((0, 0)),
        3 | 4 => Ok((0, code)),
        REFUSED => Ok((REFUSED, 0)),
        other => Err(format!("unknown answer {other} of the take script")),
    }
}

/// Who holds the lock, as a look found it (`readers`: the shared holders it listed;
/// `mode`: how we asked), for `/leader`: the exclusive holder alone, or the shared
/// holders (ours among them when we took shared).
pub(crate) fn holders(look: &Look, readers: &[String], mode: LockMode) -> Vec<(Holder, Mode)> {
    let shared = |vs: &[String]| -> Vec<(Holder, Mode)> {
        (vs.iter().filter_map(|v| named(v)))
            .map(|h| (h, Mode::Shared))
            .take(SHOWN)
            .collect()
    };
    match look {
        Look::Took(own) if mode == LockMode::Shared => {
            let mut all = readers.to_vec();
            if !all.contains(own) {
                all.insert(0, own.clone());
            }
            shared(&all)
        }
        Look::Took(own) | Look::Exclusive { value: own, .. } => named(own)
            .map(|h| (h, Mode::Exclusive))
            .into_iter()
            .collect(),
        Look::KeptOut { .. } | Look::Queued { .. } => shared(readers),
        Look::TooLate => Vec::new(),
    }
}

/// A holder's record as one read found it: an exclusive holder's (an election's
/// too) is ours while the lock key holds `value`; a shared holder's while its entry
/// is there (`score`: the member's, when present) with no lock value beside it.
pub(super) fn seen(mode: LockMode, value: &str, score: Option<f64>, lock: Option<&str>) -> Seen {
    match (mode, lock) {
        (LockMode::Shared, Some(_)) => Seen::Another,
        (LockMode::Shared, None) if score.is_some() => Seen::Ours,
        (LockMode::Shared, None) => Seen::Free,
        (_, lock) => Seen::of(lock, value),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::super::core::{Core, Next, Phase, WaitFor};
    use super::super::requests::Take;
    use super::*;
    use crate::backend::Wake;

    const TTL: Duration = Duration::from_millis(3_000);

    /// A `--mode` candidate with its follower's tracking on (ttl 3 s).
    fn core(mode: LockMode) -> Core {
        let mut c = Core::new(TTL, TTL / 3, mode);
        c.follower_tracking(true);
        c
    }

    fn take(won: i64, value: &str, pttl: i64, why: i64, readers: &[&str]) -> Take {
        Take {
            won,
            value: value.to_owned(),
            pttl,
            why,
            readers: readers.iter().map(|r| (*r).to_owned()).collect(),
        }
    }

    fn listed(c: &Core) -> Vec<(String, Mode)> {
        let slots = c.slots().expect("a --mode candidate lists its holders");
        (slots.list.into_iter())
            .map(|h| (h.holder.identity, h.mode))
            .collect()
    }

    #[test]
    fn a_holders_record_is_ours_only_as_its_mode_wrote_it() {
        let exclusive = LockMode::Exclusive;
        assert_eq!(seen(exclusive, "v", None, Some("v")), Seen::Ours);
        assert_eq!(seen(exclusive, "v", None, Some("w")), Seen::Another);
        assert_eq!(seen(exclusive, "v", None, None), Seen::Free);
        let shared = LockMode::Shared;
        assert_eq!(seen(shared, "v", Some(1.0), None), Seen::Ours);
        assert_eq!(seen(shared, "v", Some(1.0), Some("w")), Seen::Another);
        assert_eq!(seen(shared, "v", None, None), Seen::Free);
    }

    #[test]
    fn answers_are_read_by_their_code() {
        assert_eq!(judge(1), Ok((1, 0)));
        assert_eq!(judge(0), Ok((0, 0)));
        assert_eq!(judge(3), Ok((0, 3)));
        assert_eq!(judge(4), Ok((0, 4)));
        assert_eq!(judge(2), Ok((REFUSED, 0)));
        assert!(judge(7).is_err());
    }

    #[test]
    fn holders_are_the_exclusive_one_or_the_shared_ones() {
        let readers = vec!["a|1|r-a".to_owned(), "b|2|r-b".to_owned()];
        let ids = |v: Vec<(Holder, Mode)>| -> Vec<(String, Option<u64>, Mode)> {
            v.into_iter()
                .map(|(h, m)| (h.identity, h.token, m))
                .collect()
        };
        let w = Look::Exclusive {
            value: "w|9|w-0".into(),
            pttl: 5,
        };
        assert_eq!(
            ids(holders(&w, &[], LockMode::Shared)),
            [("w-0".into(), Some(9), Mode::Exclusive)]
        );
        let kept = Look::KeptOut { pttl: 5 };
        assert_eq!(
            ids(holders(&kept, &readers, LockMode::Exclusive)),
            [
                ("r-a".into(), Some(1), Mode::Shared),
                ("r-b".into(), Some(2), Mode::Shared)
            ]
        );
        let took = Look::Took("c|3|r-c".into());
        assert_eq!(holders(&took, &readers, LockMode::Shared).len(), 3);
        assert_eq!(
            ids(holders(&took, &readers, LockMode::Exclusive)),
            [("r-c".into(), Some(3), Mode::Exclusive)]
        );
        let quarantine = Look::Exclusive {
            value: "quarantine|4|".into(),
            pttl: 5,
        };
        assert!(holders(&quarantine, &[], LockMode::Shared).is_empty());
        let many: Vec<String> = (0..40).map(|i| format!("n{i}|{i}|r-{i}")).collect();
        assert_eq!(holders(&kept, &many, LockMode::Exclusive).len(), SHOWN);
    }

    #[test]
    fn a_mode_candidate_waits_quietly_behind_an_exclusive_holder_too() {
        let t0 = Instant::now();
        let held = take(0, "w|9|w-0", 2_000, 0, &[]);
        let mut c = core(LockMode::Shared);
        let next = c.after_take(held.clone(), t0, t0);
        let w0 = named("w|9|w-0");
        assert_eq!(next, Next::Held(w0.clone()));
        assert_eq!(c.floor.get(), 9);
        assert!(matches!(c.phase, Phase::KeptOut(_)), "{:?}", c.phase);
        let look_at = t0 + Duration::from_millis(2_002);
        assert_eq!(c.wait(), WaitFor::Quietly { look_at });
        assert!(!c.arms_baton(), "a --mode candidate waits for a baton");
        assert_eq!(listed(&c), [("w-0".to_owned(), Mode::Exclusive)]);
        // The holder's renewal (its `…:alive`) is pushed: it stays quiet.
        let alive = [b"leasekeeper:{e}:alive".to_vec()];
        let pushed = super::super::own::Push::Invalidated(&alive);
        let busy = "leasekeeper:{e}:busy";
        let heard = c.on_quiet_push(pushed, busy, t0 + Duration::from_millis(900));
        assert_eq!(heard, Some(Wake::Quiet));
        // An election's candidate follows the same holder by its cadence instead.
        let mut e = core(LockMode::Election);
        assert_eq!(e.after_take(held, t0, t0), Next::Held(w0));
        assert!(matches!(e.phase, Phase::Following(_)));
        assert!(e.arms_baton() && e.slots().is_none());
    }

    #[test]
    fn a_writer_kept_out_by_readers_names_the_first_and_learns_their_tokens() {
        let t0 = Instant::now();
        let mut c = core(LockMode::Exclusive);
        let readers = ["a|1|r-a", "b|12|r-b"];
        let next = c.after_take(take(0, "", 1_000, 3, &readers), t0, t0);
        assert_eq!(next, Next::Held(named("a|1|r-a")));
        assert_eq!(c.floor.get(), 12, "a reader's token below the floor");
        let look_at = t0 + Duration::from_millis(1_002);
        assert_eq!(c.wait(), WaitFor::Quietly { look_at });
        let shared = |id: &str| (id.to_owned(), Mode::Shared);
        assert_eq!(listed(&c), [shared("r-a"), shared("r-b")]);
        // Too late: nothing changes, the holders listed neither.
        let late = c.after_take(take(REFUSED, "", -1, 0, &[]), t0, t0);
        assert_eq!(late, Next::TooLate);
        assert_eq!(listed(&c), [shared("r-a"), shared("r-b")]);
    }

    #[test]
    fn a_mode_holder_neither_announces_itself_nor_gives_up_its_own_tracking() {
        let t0 = Instant::now();
        let mut c = core(LockMode::Shared);
        let next = c.after_take(take(1, "c|3|r-c", -1, 0, &["a|1|r-a"]), t0, t0);
        assert_eq!(next, Next::Claim { token: 3 });
        let shared = |id: &str| (id.to_owned(), Mode::Shared);
        assert_eq!(listed(&c), [shared("r-c"), shared("r-a")]);
        assert!(c.claimed(true));
        c.own_tracking();
        assert_eq!(c.to_announce(), None, "a --mode holder announced itself");
        assert!(!c.begin(), "a --mode holder's look tracks as a follower");
        assert!(
            c.stops_tracking(),
            "a holder's tracking left on at its release"
        );
        assert!(!c.stops_tracking());
        // A follower's tracking stays on at a release (it follows on).
        let mut f = core(LockMode::Exclusive);
        assert!(!f.stops_tracking(), "a follower's tracking turned off");
        assert!(f.tracking.on);
        // An election's holder announces itself, and turns any tracking off.
        let mut e = core(LockMode::Election);
        e.after_take(take(1, "d|4|e", -1, 0, &[]), t0, t0);
        assert!(e.claimed(true));
        assert_eq!(e.to_announce(), Some("d|4|e"));
        let mut f = core(LockMode::Election);
        assert!(f.stops_tracking());
    }
}
