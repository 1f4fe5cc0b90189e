//! The etcd backend's decisions, apart from its I/O: where a campaign's read put us
//! in the queue, whether a switchover's reservation asks us to let its candidate
//! pass, whether a watch event on our own key ends our claim, whether a keep-alive
//! may go out now. Plain functions over what the store answered (and `now`), so
//! that unit tests drive every rule without a server.

use std::time::Duration;

use tokio::time::Instant;

/// Where one consistent read of the queue put our key.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Place<'a> {
    /// Ours is the key of lowest create revision: we may claim (after a fresh
    /// keep-alive, see the module doc of the backend).
    First,
    /// The queue is empty, so our key is gone too: start over with a new lease.
    Gone,
    /// Someone is ahead: watch `watch` (the key just ahead of ours, or the first
    /// one when the read found none ahead) for a delete, and `leader` too when it
    /// is not the one watched (to keep `/leader` current).
    Behind {
        watch: &'a [u8],
        leader: Option<&'a [u8]>,
    },
}

/// Our place from the first key of the queue (`leader`), the key just ahead of ours
/// (`predecessor`) and our own key. Only the first key leads, and a follower watches
/// only the key just ahead of it (no herd), plus the leader.
pub(super) fn place<'a>(
    leader: Option<&'a [u8]>,
    predecessor: Option<&'a [u8]>,
    ours: &[u8],
) -> Place<'a> {
    match (leader, predecessor) {
        (Some(l), _) if l == ours => Place::First,
        (None, _) => Place::Gone,
        (Some(l), p) => Place::Behind {
            watch: p.unwrap_or(l),
            leader: p.filter(|p| *p != l).map(|_| l),
        },
    }
}

/// A shared candidate's place (`--mode shared`), from the first key of the queue
/// (`leader`) and the last key ahead of ours that is not a reader's
/// (`writer_ahead`): it holds when no such key is ahead (readers ahead hold beside
/// it), else it watches that key, and the leader too when it is another.
pub(super) fn place_shared<'a>(
    leader: Option<&'a [u8]>,
    writer_ahead: Option<&'a [u8]>,
) -> Place<'a> {
    match (leader, writer_ahead) {
        (None, _) => Place::Gone,
        (Some(_), None) => Place::First,
        (Some(l), Some(w)) => Place::Behind {
            watch: w,
            leader: (l != w).then_some(l),
        },
    }
}

/// The end of the key range of `prefix`: its last byte plus one (etcd's
/// `GetPrefixRangeEnd`; our prefixes end in `/`, so `<election>/` ends at
/// `<election>0`).
pub(super) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The tag in the upper bits of the lease ids we ask for (`tagged_lease_id`): a key
/// `<election>/<lease id in hex>` with it is a leasekeeper candidate's, which
/// announces its claims (see [`holder_news`]). etcd's own ids start with bits of the
/// member's id instead.
pub(super) const LEASE_TAG: i64 = 0x1e_a5e4;
const TAG_SHIFT: u32 = 40;

/// A lease id with our tag and 40 bits of `random` (positive, as etcd wants).
pub(super) fn tagged_lease_id(random: u64) -> i64 {
    let low = i64::try_from(random & ((1 << TAG_SHIFT) - 1)).unwrap_or(0);
    (LEASE_TAG << TAG_SHIFT) | low
}

/// Whether the queue's key `key` (under `prefix`) is a leasekeeper candidate's, by
/// the tag of its lease id.
pub(super) fn announces(key: &[u8], prefix: &str) -> bool {
    key.strip_prefix(prefix.as_bytes())
        .and_then(|hex| std::str::from_utf8(hex).ok())
        .and_then(|hex| i64::from_str_radix(hex, 16).ok())
        .is_some_and(|id| id >> TAG_SHIFT == LEASE_TAG)
}

/// How a follower hears of a new holder, for its `/leader`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HolderNews {
    /// A watch on the leader's key: the next in line (whose predecessor it is), and
    /// followers whose next in line does not announce (`etcdctl elect`, a Go
    /// `concurrency.Election`).
    Leader,
    /// The election's announcement, which a leasekeeper candidate puts once it has
    /// claimed, and the next in line's key (should it go, the next one may not
    /// announce): a handover wakes the next in line alone.
    Announcement,
}

/// How a follower hears of a new holder: by the announcement when it is behind the
/// next in line (`next`, the second key of the queue, not `ours`), that key announces,
/// and the announcement names the leader's key (`announced`: so it can be written
/// here, the role allows it).
pub(super) fn holder_news(
    leader: &[u8],
    next: Option<&[u8]>,
    ours: &[u8],
    announced: Option<&[u8]>,
    prefix: &str,
) -> HolderNews {
    match next {
        Some(n) if n != ours && announces(n, prefix) && announced == Some(leader) => {
            HolderNews::Announcement
        }
        _ => HolderNews::Leader,
    }
}

/// Whether a switchover's reservation, naming the key `named` (its create revision
/// `named_revision`, `None` when that key is gone), asks us (our key `ours`, created
/// at `our_revision`) to give our place up: only while the named key is alive, not
/// ours, and queued behind ours.
pub(super) fn lets_pass(
    named: &[u8],
    named_revision: Option<i64>,
    ours: &[u8],
    our_revision: i64,
) -> bool {
    named != ours && named_revision.is_some_and(|r| r > our_revision)
}

/// The entry a switchover leaves the lease to: the first in queue order (`queue`
/// as (key, value) pairs, lowest create revision first) whose value is `to`, never
/// our own key.
pub(super) fn named_entry<'a>(
    queue: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    to: &str,
    ours: &[u8],
) -> Option<usize> {
    queue
        .into_iter()
        .position(|(key, value)| value == to.as_bytes() && key != ours)
}

/// Whether one event on our own key ends our claim: a delete, or a put that is not
/// ours (another lease, another value, or no value at all).
pub(super) fn takes_our_key(
    delete: bool,
    put: Option<(i64, &[u8])>,
    lease: i64,
    identity: &str,
) -> bool {
    delete || put.is_none_or(|(l, value)| l != lease || value != identity.as_bytes())
}

/// Whether a read of our key shows it still ours: the create revision we placed,
/// our lease, our identity.
pub(super) fn still_ours(
    found: Option<(i64, i64, &[u8])>,
    revision: i64,
    lease: i64,
    identity: &str,
) -> bool {
    found.is_some_and(|(created, l, value)| {
        created == revision && l == lease && value == identity.as_bytes()
    })
}

/// A keep-alive sent and not answered yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct InFlight {
    pub sent: Instant,
    /// Sent on the stream in use (its answer may still come on it), or on one that
    /// broke since (it may still reach the server).
    pub on_stream: bool,
}

/// What a keep-alive call does first, given the one still in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Before {
    /// Nothing pending: send one.
    Send,
    /// Wait for the pending answer on this stream first (it proves nothing about
    /// this call), then send one.
    Drain,
    /// A leader's renew while a keep-alive sent on a broken stream less than a ttl
    /// ago may still reach the server and extend the lease from there: send none.
    HoldBack,
}

/// See [`Before`]. Only a renew is held back: a follower's keep-alive, or the
/// refresh before claiming, only keeps that candidate in the queue.
pub(super) fn before_keep_alive(
    pending: Option<InFlight>,
    renew: bool,
    now: Instant,
    ttl: Duration,
) -> Before {
    match pending {
        Some(p) if p.on_stream => Before::Drain,
        Some(p) if renew && now < p.sent + ttl => Before::HoldBack,
        _ => Before::Send,
    }
}

/// Whether a keep-alive answer keeps the lease (and our key) alive: a TTL above 0.
pub(super) fn lease_alive(answered_ttl: Option<i64>) -> bool {
    answered_ttl.is_some_and(|t| t > 0)
}

/// The lease ttl etcd is asked for: whole seconds, rounded up (a longer real lease
/// only; the deadline keeps the configured ttl), at least one.
pub(super) fn lease_seconds(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1)
}

/// The ttl the deadline uses once etcd granted `granted_secs`: a shorter grant is
/// what the store holds us to; a longer one changes nothing.
pub(super) fn granted_ttl(configured: Duration, granted_secs: i64) -> Duration {
    configured.min(Duration::from_secs(
        u64::try_from(granted_secs).unwrap_or(0),
    ))
}

/// The fencing token of a key: its create revision (etcd revisions only grow).
pub(super) fn token_of(create_revision: i64) -> u64 {
    u64::try_from(create_revision).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_holds_beside_readers_and_waits_for_the_last_writer_ahead() {
        let (l, w) = (b"e/read/1".as_slice(), b"e/write/3".as_slice());
        assert_eq!(place_shared(Some(l), None), Place::First);
        assert_eq!(
            place_shared(Some(l), Some(w)),
            Place::Behind {
                watch: w,
                leader: Some(l)
            }
        );
        assert_eq!(
            place_shared(Some(w), Some(w)),
            Place::Behind {
                watch: w,
                leader: None
            }
        );
        assert_eq!(place_shared(None, None), Place::Gone);
    }

    #[test]
    fn a_prefix_ends_at_its_last_byte_plus_one() {
        assert_eq!(prefix_end("e/"), b"e0");
        assert_eq!(prefix_end("e/read/"), b"e/read0");
    }

    #[test]
    fn only_followers_behind_an_announcing_next_in_line_leave_the_leader_alone() {
        let key = |id: i64| format!("e/{id:x}").into_bytes();
        let ours = |r: u64| key(tagged_lease_id(r));
        assert!(tagged_lease_id(u64::MAX) > 0);
        assert!(announces(&ours(7), "e/"));
        assert!(announces(&ours(u64::MAX), "e/"));
        assert!(
            !announces(&key(0x694d_9b2e_5b6c_1f0a), "e/"),
            "an etcd-made id"
        );
        assert!(!announces(&ours(7), "f/"), "another election");
        assert!(!announces(b"e/zz", "e/"));
        let (leader, next, me) = (key(0x694d_9b2e_5b6c_1f0a), ours(2), ours(3));
        let news = |next: &[u8], announced: Option<&[u8]>| {
            holder_news(&leader, Some(next), &me, announced, "e/")
        };
        assert_eq!(news(&next, Some(&leader)), HolderNews::Announcement);
        assert_eq!(news(&me, Some(&leader)), HolderNews::Leader, "we are next");
        assert_eq!(
            news(&next, Some(&next)),
            HolderNews::Leader,
            "not announced"
        );
        assert_eq!(news(&next, None), HolderNews::Leader, "never announced");
        let go = key(0x694d_9b2e_5b6c_1f0b);
        assert_eq!(
            news(&go, Some(&leader)),
            HolderNews::Leader,
            "a Go candidate next"
        );
        assert_eq!(
            holder_news(&leader, None, &me, Some(&leader), "e/"),
            HolderNews::Leader
        );
    }

    #[test]
    fn only_the_first_key_leads_and_a_follower_watches_the_key_just_ahead() {
        let (a, b, c): (&[u8], &[u8], &[u8]) = (b"e/a", b"e/b", b"e/c");
        assert_eq!(place(Some(a), None, a), Place::First);
        // Second in line: the predecessor is the leader, one watch serves both.
        assert_eq!(
            place(Some(a), Some(a), b),
            Place::Behind {
                watch: a,
                leader: None
            }
        );
        // Third: the predecessor, and the leader for `/leader`; never the leader alone.
        assert_eq!(
            place(Some(a), Some(b), c),
            Place::Behind {
                watch: b,
                leader: Some(a)
            }
        );
        // Nobody ahead, yet not first (the queue moved between reads): the leader.
        assert_eq!(
            place(Some(a), None, c),
            Place::Behind {
                watch: a,
                leader: None
            }
        );
        assert_eq!(place(None, None, a), Place::Gone);
        assert_eq!(place(None, Some(b), a), Place::Gone);
    }

    #[test]
    fn a_reservation_asks_only_keys_ahead_of_its_live_candidate() {
        let (ours, named): (&[u8], &[u8]) = (b"e/1", b"e/2");
        assert!(lets_pass(named, Some(20), ours, 10));
        // Named key ahead of ours, gone, or ours: nothing asked.
        assert!(!lets_pass(named, Some(5), ours, 10));
        assert!(!lets_pass(named, Some(10), ours, 10));
        assert!(!lets_pass(named, None, ours, 10));
        assert!(!lets_pass(ours, Some(20), ours, 10));
    }

    #[test]
    fn a_switchover_names_the_first_live_entry_of_that_identity_never_ours() {
        let queue: [(&[u8], &[u8]); 4] = [
            (b"e/1", b"A"),
            (b"e/2", b"C"),
            (b"e/3", b"B"),
            (b"e/4", b"C"),
        ];
        assert_eq!(named_entry(queue, "C", b"e/1"), Some(1));
        assert_eq!(named_entry(queue, "A", b"e/1"), None);
        assert_eq!(named_entry(queue, "A", b"e/9"), Some(0));
        assert_eq!(named_entry(queue, "D", b"e/1"), None);
    }

    #[test]
    fn only_our_own_put_keeps_our_key() {
        assert!(!takes_our_key(false, Some((7, b"me")), 7, "me"));
        assert!(takes_our_key(true, None, 7, "me"));
        assert!(takes_our_key(true, Some((7, b"me")), 7, "me"));
        assert!(takes_our_key(false, Some((8, b"me")), 7, "me"));
        assert!(takes_our_key(false, Some((7, b"you")), 7, "me"));
        assert!(takes_our_key(false, None, 7, "me"));
    }

    #[test]
    fn a_read_vouches_for_our_key_only_as_we_placed_it() {
        assert!(still_ours(Some((5, 7, b"me")), 5, 7, "me"));
        assert!(!still_ours(None, 5, 7, "me"));
        assert!(!still_ours(Some((6, 7, b"me")), 5, 7, "me"));
        assert!(!still_ours(Some((5, 8, b"me")), 5, 7, "me"));
        assert!(!still_ours(Some((5, 7, b"you")), 5, 7, "me"));
    }

    #[test]
    fn a_renew_sends_no_keep_alive_while_one_on_a_broken_stream_may_still_arrive() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(3);
        let broken = Some(InFlight {
            sent: t0,
            on_stream: false,
        });
        let on_stream = Some(InFlight {
            sent: t0,
            on_stream: true,
        });
        assert_eq!(before_keep_alive(None, true, t0, ttl), Before::Send);
        assert_eq!(before_keep_alive(on_stream, true, t0, ttl), Before::Drain);
        assert_eq!(before_keep_alive(on_stream, false, t0, ttl), Before::Drain);
        assert_eq!(before_keep_alive(broken, true, t0, ttl), Before::HoldBack);
        let almost = t0 + ttl - Duration::from_millis(1);
        assert_eq!(
            before_keep_alive(broken, true, almost, ttl),
            Before::HoldBack
        );
        assert_eq!(before_keep_alive(broken, true, t0 + ttl, ttl), Before::Send);
        // A follower's keep-alive or the refresh before claiming is never held back.
        assert_eq!(before_keep_alive(broken, false, t0, ttl), Before::Send);
    }

    #[test]
    fn lease_arithmetic() {
        assert!(lease_alive(Some(1)));
        assert!(!lease_alive(Some(0)));
        assert!(!lease_alive(Some(-1)));
        assert!(!lease_alive(None));
        assert_eq!(lease_seconds(Duration::from_millis(1)), 1);
        assert_eq!(lease_seconds(Duration::from_millis(1000)), 1);
        assert_eq!(lease_seconds(Duration::from_millis(1001)), 2);
        assert_eq!(lease_seconds(Duration::ZERO), 1);
        let ttl = Duration::from_millis(2500);
        assert_eq!(granted_ttl(ttl, 2), Duration::from_secs(2));
        assert_eq!(granted_ttl(ttl, 3), ttl);
        assert_eq!(granted_ttl(ttl, -1), Duration::ZERO);
        assert_eq!(token_of(42), 42);
        assert_eq!(token_of(-1), 0);
    }
}
