//! The etcd backend's own decisions, apart from its I/O: which keys announce their
//! claims, whether a watch event or a read on our own key ends our claim, whether a
//! keep-alive may go out now, the lease's seconds and the token. Plain functions over
//! what the store answered (and `now`), so that unit tests drive every rule without a
//! server. The queue's rules (our place, what a follower watches, the switchover's)
//! are `super::super::queue`'s.

use std::time::Duration;

use tokio::time::Instant;

use super::super::queue::{self, Entry};
use super::super::record::Seen;

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
/// announces its claims (see `queue::holder_news`). etcd's own ids start with bits of the
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

/// Our key as one watch event on it shows it: gone after a delete (or an event with
/// no value at all), ours after a put of our own (our lease, our identity), else
/// another's.
pub(super) fn seen_in_event(
    delete: bool,
    put: Option<(i64, &[u8])>,
    lease: i64,
    identity: &str,
) -> Seen {
    let put = put.filter(|_| !delete);
    Seen::of(put, (lease, identity.as_bytes()))
}

/// Our key as a read of it shows it: ours only at the create revision we placed, on
/// our lease, holding our identity.
pub(super) fn seen_in_read(
    found: Option<(i64, i64, &[u8])>,
    revision: i64,
    lease: i64,
    identity: &str,
) -> Seen {
    Seen::of(found, (revision, lease, identity.as_bytes()))
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

/// A keep-alive's bookkeeping: the one still in flight, and when a follower's next
/// is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pace {
    pending: Option<InFlight>,
    /// When the next follower keep-alive is due.
    pub(super) due: Instant,
}

impl Pace {
    /// A lease granted at `now`, kept alive `every` so often while following.
    pub(super) fn new(now: Instant, every: Duration) -> Pace {
        Pace {
            pending: None,
            due: now + every,
        }
    }

    /// What a keep-alive call does first (see [`before_keep_alive`]).
    pub(super) fn before(&self, renew: bool, now: Instant, ttl: Duration) -> Before {
        before_keep_alive(self.pending, renew, now, ttl)
    }

    /// Whether a new keep-alive stream may be opened at `now` (opening one sends a
    /// keep-alive): not by a renew while one sent less than a ttl ago may still
    /// reach the server.
    pub(super) fn may_open(&self, renew: bool, now: Instant, ttl: Duration) -> bool {
        !(renew && self.pending.is_some_and(|p| now < p.sent + ttl))
    }

    /// A keep-alive goes out at `now`: on the stream in use (`on_stream`), or by
    /// opening a new one.
    pub(super) fn sent(&mut self, now: Instant, on_stream: bool) {
        self.pending = Some(InFlight {
            sent: now,
            on_stream,
        });
    }

    /// The keep-alive in flight is answered (or about to be replaced by a new one).
    pub(super) fn answered(&mut self) {
        self.pending = None;
    }

    /// An answer at `now` kept the lease alive: the next follower keep-alive is due
    /// `every` later.
    pub(super) fn kept(&mut self, now: Instant, every: Duration) {
        self.due = now + every;
    }

    /// The keep-alive failed on its way: one cancelled by our own timeout may still
    /// reach the server, any other failure forgets it.
    pub(super) fn failed(&mut self, cancelled: bool) {
        if !cancelled {
            self.pending = None;
        }
    }

    /// The stream went with its connection: what it carried can no longer be answered
    /// on it, but may still reach the server.
    pub(super) fn stream_lost(&mut self) {
        if let Some(p) = self.pending.as_mut() {
            p.on_stream = false;
        }
    }
}

/// Whether a switchover's reservation naming the key `named` (read at its create
/// revision `named_at`, `None`: it is gone) asks us (`ours`: our key and its create
/// revision) to let it pass: only while it is a live key queued behind ours.
pub(super) fn lets_named_pass(named: &[u8], named_at: Option<i64>, ours: (&str, i64)) -> bool {
    let (key, revision) = ours;
    let reserved = named_at.map(|order| Entry {
        order,
        name: named,
        shared: false,
    });
    let ours = Entry {
        order: revision,
        name: key.as_bytes(),
        shared: false,
    };
    let entries = queue::in_order(std::iter::once(ours).chain(reserved).collect());
    queue::lets_pass(&entries, &key.as_bytes(), Some(&named))
}

/// Whether an error of the store says the lease is gone (expired, or revoked).
pub(super) fn lease_not_found(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
}

/// How soon a release's revoke goes again while the store does not answer.
pub(super) const REVOKE_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// Until when a release's revoke goes again, from `now`: past it the lease (of
/// `lease_secs`) has expired by itself, even one that a restart of the store gave its
/// whole ttl again just before.
pub(super) fn revoke_until(now: Instant, lease_secs: i64) -> Instant {
    now + Duration::from_secs(u64::try_from(lease_secs).unwrap_or(0) * 2 + 1)
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
    fn a_lost_release_is_sent_again_until_the_lease_would_have_expired_twice_over() {
        let t0 = Instant::now();
        assert_eq!(revoke_until(t0, 2), t0 + Duration::from_secs(5));
        assert_eq!(revoke_until(t0, 1), t0 + Duration::from_secs(3));
        assert_eq!(revoke_until(t0, -1), t0 + Duration::from_secs(1));
    }

    #[test]
    fn a_prefix_ends_at_its_last_byte_plus_one() {
        assert_eq!(prefix_end("e/"), b"e0");
        assert_eq!(prefix_end("e/read/"), b"e/read0");
    }

    #[test]
    fn only_keys_of_a_tagged_lease_announce() {
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
        assert!(!announces(b"e/read/1ea5e4000000000a", "e/"), "a reader's");
    }

    #[test]
    fn only_our_own_put_keeps_our_key() {
        let seen = |delete, put: Option<(i64, &[u8])>| seen_in_event(delete, put, 7, "me");
        assert_eq!(seen(false, Some((7, b"me"))), Seen::Ours);
        assert_eq!(seen(true, None), Seen::Free);
        assert_eq!(seen(true, Some((7, b"me"))), Seen::Free);
        assert_eq!(seen(false, Some((8, b"me"))), Seen::Another);
        assert_eq!(seen(false, Some((7, b"you"))), Seen::Another);
        assert_eq!(seen(false, None), Seen::Free);
    }

    #[test]
    fn a_read_vouches_for_our_key_only_as_we_placed_it() {
        let seen = |found: Option<(i64, i64, &[u8])>| seen_in_read(found, 5, 7, "me");
        assert_eq!(seen(Some((5, 7, b"me"))), Seen::Ours);
        assert_eq!(seen(None), Seen::Free);
        assert_eq!(seen(Some((6, 7, b"me"))), Seen::Another);
        assert_eq!(seen(Some((5, 8, b"me"))), Seen::Another);
        assert_eq!(seen(Some((5, 7, b"you"))), Seen::Another);
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
    fn the_pace_keeps_one_keep_alive_in_flight_and_forgets_it_only_when_it_cannot_arrive() {
        let t0 = Instant::now();
        let (ttl, every) = (Duration::from_secs(3), Duration::from_secs(1));
        let mut pace = Pace::new(t0, every);
        assert_eq!(pace.due, t0 + every);
        assert_eq!(pace.before(true, t0, ttl), Before::Send);
        assert!(pace.may_open(true, t0, ttl));
        // Sent on the stream in use: its answer comes first.
        pace.sent(t0, true);
        assert_eq!(pace.before(true, t0, ttl), Before::Drain);
        assert_eq!(pace.before(false, t0, ttl), Before::Drain);
        // The stream went with its connection: it may still reach the server.
        pace.stream_lost();
        assert_eq!(pace.before(true, t0, ttl), Before::HoldBack);
        assert!(!pace.may_open(true, t0, ttl), "a renew opened a stream");
        assert!(pace.may_open(false, t0, ttl));
        assert!(pace.may_open(true, t0 + ttl, ttl));
        // Cancelled by our own timeout: still on its way.
        pace.failed(true);
        assert_eq!(pace.before(true, t0, ttl), Before::HoldBack);
        // Failed any other way: forgotten.
        pace.failed(false);
        assert_eq!(pace.before(true, t0, ttl), Before::Send);
        pace.sent(t0, false);
        pace.answered();
        assert_eq!(pace.before(true, t0, ttl), Before::Send);
        let later = t0 + Duration::from_secs(2);
        pace.kept(later, every);
        assert_eq!(pace.due, later + every);
    }

    #[test]
    fn only_a_live_named_key_behind_ours_is_let_pass() {
        let ours = ("e/a", 5);
        assert!(lets_named_pass(b"e/b", Some(7), ours));
        assert!(!lets_named_pass(b"e/b", Some(3), ours), "named ahead of us");
        assert!(!lets_named_pass(b"e/b", None, ours), "named key gone");
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
