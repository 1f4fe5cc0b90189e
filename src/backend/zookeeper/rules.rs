//! The ZooKeeper backend's own decisions, apart from its I/O: the latch nodes' names
//! (their sequence, whether a reader's, whether a leasekeeper candidate's, which
//! announces its claims), whether a node is ours to claim or renew, which watch
//! events end a claim, and the claim's ttl. Plain functions, driven by unit tests.
//! The queue's rules (our place, what a follower watches, the switchover's) are
//! `super::super::queue`'s, over the entries [`queue_of`] makes of the latch nodes.

use std::time::Duration;

use super::super::queue::{self, Entry};
use super::super::record::Seen;

/// The sequence number Curator and ZooKeeper append: the last 10 digits.
pub(super) fn sequence_of(name: &str) -> Option<u64> {
    name.len()
        .checked_sub(10)
        .and_then(|i| name.get(i..))
        .and_then(|s| s.parse().ok())
}

/// The latch nodes among `children` as entries of the queue, lowest sequence first
/// (others are left out).
pub(super) fn queue_of(children: Vec<String>) -> Vec<Entry<String>> {
    let entries = children.into_iter().filter_map(|name| {
        let order = i64::try_from(sequence_of(&name)?).ok()?;
        Some(Entry {
            order,
            shared: reads(&name),
            name,
        })
    });
    queue::in_order(entries.collect())
}

/// The kind in the names of Curator's `InterProcessReadWriteLock` nodes
/// (`_c_<uuid>-__READ__<sequence>`), which `--mode shared` and `--mode exclusive`
/// use too.
pub(super) const READ: &str = "__READ__";
pub(super) const WRITE: &str = "__WRIT__";

/// Whether the node `name` is a shared holder's (a reader's).
pub(super) fn reads(name: &str) -> bool {
    name.contains(READ)
}

/// The first group of the uuid in our nodes' protection prefix
/// (`_c_1ea5ee4e-…-latch-`): a Curator-shaped name that tells other leasekeeper
/// candidates this node's candidate announces its claims (see `queue::holder_news`).
/// Curator's own uuids are random, version 4.
pub(super) const OUR_TAG: &str = "1ea5ee4e";

/// Whether the latch node `name` is a leasekeeper candidate's (which announces its
/// claims), by the tag in its name.
pub(super) fn announces(name: &str) -> bool {
    !reads(name)
        && name
            .strip_prefix("_c_")
            .is_some_and(|rest| rest.starts_with(OUR_TAG) && rest[OUR_TAG.len()..].starts_with('-'))
}

/// Our node as a read behind our proof found it (`owner`: its ephemeralOwner;
/// `None`: gone): ours to claim or renew only when owned by this very session. A
/// node of an older session leads nobody (CURATOR-1211), and a node deleted and
/// created again under our name by another client is not ours, though its version
/// is 0 like ours.
pub(super) fn seen_node(owner: Option<i64>, session: i64) -> Seen {
    Seen::of(owner, session)
}

/// What one event on our own node's watch says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OwnEvent {
    /// Deleted or rewritten by someone else.
    Changed,
    /// The session's state changed; `ended`: expired, closed or refused (our node is
    /// gone with it). A mere disconnect also ends a one-shot watch but proves nothing.
    Session { ended: bool },
    /// Anything else (a create, a child change): nothing about our node.
    Other,
}

/// Whether that event ends our claim.
pub(super) fn ends_claim(event: OwnEvent) -> bool {
    match event {
        OwnEvent::Changed => true,
        OwnEvent::Session { ended } => ended,
        OwnEvent::Other => false,
    }
}

/// The claim's ttl: the session timeout less one renew interval (at most a third of
/// it; see `lease_ttl`).
pub(super) fn claim_ttl(session_timeout: Duration, renew_interval: Duration) -> Duration {
    session_timeout.saturating_sub(renew_interval.min(session_timeout / 3))
}

/// Our node is created once and never written: its version stays 0.
pub(super) const OWN_VERSION: i32 = 0;

/// What a change of the announcement's stat says, as an exists-watch set it
/// (`now`: its mzxid, `None`: not there) against the listing's read of it (`seen`):
/// changed in between already (news at once), or not yet (wait for the watch).
pub(super) fn announced_since(now: Option<i64>, seen: Option<i64>) -> bool {
    now != seen
}

/// The fencing token of a node: its creation zxid.
pub(super) fn token_of(czxid: i64) -> u64 {
    u64::try_from(czxid).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(queue: &[Entry<String>]) -> Vec<&str> {
        queue.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn the_lowest_sequence_leads_whatever_the_prefix() {
        let children = vec![
            "_c_b-latch-0000000012".to_owned(),
            "_c_a-latch-0000000003".to_owned(),
            "not-a-latch".to_owned(),
            "_c_c-latch-0000000100".to_owned(),
        ];
        let queue = queue_of(children);
        assert_eq!(
            names(&queue),
            [
                "_c_a-latch-0000000003",
                "_c_b-latch-0000000012",
                "_c_c-latch-0000000100"
            ]
        );
        assert_eq!(queue[2].order, 100);
    }

    #[test]
    fn only_a_readers_node_is_shared_and_only_ours_announce() {
        let queue = queue_of(vec![
            format!("_c_x-{READ}0000000001"),
            format!("_c_x-{WRITE}0000000002"),
            "_c_x-latch-0000000003".to_owned(),
        ]);
        let shared: Vec<bool> = queue.iter().map(|e| e.shared).collect();
        // An election's node (a LeaderLatch's, or leasekeeper's without --mode) is a
        // writer's.
        assert_eq!(shared, [true, false, false]);
        let ours = |i: u64| format!("_c_{OUR_TAG}-1111-2222-3333-444455556666-latch-{i:010}");
        let curator = |i: u64| format!("_c_0b1e2d3c-1111-4222-8333-444455556666-latch-{i:010}");
        assert!(announces(&ours(1)));
        assert!(!announces(&curator(1)));
        assert!(!announces(&format!("_c_{OUR_TAG}0-1111-latch-0000000001")));
        assert!(!announces(&format!("{OUR_TAG}-1111-latch-0000000001")));
        assert!(!announces(&format!("_c_{OUR_TAG}-a-{READ}0000000001")));
        assert!(announces(&format!("_c_{OUR_TAG}-a-{WRITE}0000000001")));
    }

    #[test]
    fn only_our_sessions_node_is_ours() {
        assert_eq!(seen_node(Some(7), 7), Seen::Ours);
        assert_eq!(seen_node(Some(8), 7), Seen::Another, "another session's");
        assert_eq!(seen_node(Some(0), 7), Seen::Another, "a persistent node");
        assert_eq!(seen_node(None, 7), Seen::Free, "gone");
    }

    #[test]
    fn what_ends_a_claim() {
        assert!(ends_claim(OwnEvent::Changed));
        assert!(ends_claim(OwnEvent::Session { ended: true }));
        assert!(!ends_claim(OwnEvent::Session { ended: false }));
        assert!(!ends_claim(OwnEvent::Other));
    }

    #[test]
    fn claim_ttl_and_token() {
        let s = Duration::from_secs(3);
        assert_eq!(
            claim_ttl(s, Duration::from_millis(500)),
            Duration::from_millis(2500)
        );
        assert_eq!(claim_ttl(s, Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(token_of(42), 42);
        assert_eq!(token_of(-1), 0);
    }

    #[test]
    fn curator_sequences() {
        assert_eq!(
            sequence_of("_c_0b1e2d3c-1111-2222-3333-444455556666-latch-0000000042"),
            Some(42)
        );
        assert_eq!(sequence_of("short"), None);
    }

    #[test]
    fn the_announcement_is_news_when_it_changed_since_the_listing() {
        assert!(!announced_since(Some(40), Some(40)));
        assert!(!announced_since(None, None));
        assert!(announced_since(Some(41), Some(40)));
        assert!(announced_since(Some(41), None));
        assert!(announced_since(None, Some(40)));
    }
}
