//! The ZooKeeper backend's decisions, apart from its I/O: the queue order of the latch
//! nodes, whom a follower watches and how it hears of a new holder, whether a
//! switchover's reservation asks us to let its candidate pass, whether a node is ours
//! to claim or renew, which watch events end a claim, and the claim's ttl. Plain
//! functions, driven by unit tests.

use std::time::Duration;

/// The sequence number Curator and ZooKeeper append: the last 10 digits.
pub(super) fn sequence_of(name: &str) -> Option<u64> {
    name.len()
        .checked_sub(10)
        .and_then(|i| name.get(i..))
        .and_then(|s| s.parse().ok())
}

/// The latch nodes among `children`, lowest sequence first (others are left out).
pub(super) fn queue_of(children: Vec<String>) -> Vec<(u64, String)> {
    let mut queue: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| sequence_of(&c).map(|s| (s, c)))
        .collect();
    queue.sort();
    queue
}

/// Our position in the queue; `None` when our node is not in it (gone with its
/// session). Position 0 leads.
pub(super) fn position(queue: &[(u64, String)], ours: &str) -> Option<usize> {
    queue.iter().position(|(_, c)| c == ours)
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

/// Where a reader at `position` stands: the last node ahead of it that is not a
/// reader's (`None`: none, so it holds beside the readers ahead). Any node but a
/// reader's excludes it: a writer's, and an election's (a Curator `LeaderLatch`,
/// or leasekeeper without `--mode`).
pub(super) fn writer_ahead(queue: &[(u64, String)], position: usize) -> Option<usize> {
    queue[..position].iter().rposition(|(_, c)| !reads(c))
}

/// What a follower at `position` (> 0) watches: the head of the queue (the holder,
/// named by its `/leader`) and the node just ahead of ours, `None` when that is the
/// head (one watch serves both). Never any other node: no herd at a handover.
pub(super) fn watches(queue: &[(u64, String)], position: usize) -> (&str, Option<&str>) {
    let head = queue[0].1.as_str();
    let predecessor = (position > 1).then(|| queue[position - 1].1.as_str());
    (head, predecessor)
}

/// The first group of the uuid in our nodes' protection prefix
/// (`_c_1ea5ee4e-…-latch-`): a Curator-shaped name that tells other leasekeeper
/// candidates this node's candidate announces its claims (see [`holder_news`]).
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

/// How a follower hears of a new holder, for its `/leader`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HolderNews {
    /// A watch on the head of the queue: the next in line (for whom the head is the
    /// predecessor anyway), and followers whose next in line does not announce (a
    /// Curator `LeaderLatch`).
    Head,
    /// The election's announcement, which a leasekeeper candidate writes once it has
    /// claimed, and the next in line's node (should it leave, the next one may not
    /// announce). A handover then wakes the next in line alone; the others hear of
    /// the new holder after its claim.
    Announcement,
}

/// How the follower at `position` (> 0) hears of a new holder, given the node the
/// announcement names (`announced`): by the announcement when it is behind the next
/// in line, the next in line announces, and the holder has announced itself (so the
/// announcement can be written here: ACLs allow it, and leasekeeper writes it).
pub(super) fn holder_news(
    queue: &[(u64, String)],
    position: usize,
    announced: Option<&str>,
) -> HolderNews {
    if position >= 2 && announces(&queue[1].1) && announced == Some(queue[0].1.as_str()) {
        HolderNews::Announcement
    } else {
        HolderNews::Head
    }
}

/// Whether a switchover's reservation naming the node `reserved` asks us (at
/// `position`) to give our place up: only while that node is queued behind ours.
/// Gone (its session ended), ahead of us, or ours: nothing asked.
pub(super) fn must_requeue(
    queue: &[(u64, String)],
    position: usize,
    reserved: Option<&str>,
) -> bool {
    reserved.is_some_and(|r| queue[position + 1..].iter().any(|(_, c)| c == r))
}

/// Whether a reservation keeps a candidate that became first by its predecessor's
/// delete from the one-round-trip claim: it names another node (the full round then
/// decides, with the list).
pub(super) fn reserved_for_another(reserved: Option<&str>, ours: &str) -> bool {
    reserved.is_some_and(|r| r != ours)
}

/// Whether a node, as a read behind our proof found it (`owner`: its
/// ephemeralOwner; `None`: gone), is ours to claim or renew: owned by this very
/// session. A node of an older session leads nobody (CURATOR-1211), and a node
/// deleted and created again under our name by another client is not ours, though
/// its version is 0 like ours.
pub(super) fn owned_by(owner: Option<i64>, session: i64) -> bool {
    owner == Some(session)
}

/// The entry a switchover leaves the lease to: the first in queue order whose
/// identity is `to`, never our own node. `entries`: (name, identity).
pub(super) fn named_entry<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    to: &str,
    ours: &str,
) -> Option<usize> {
    entries
        .into_iter()
        .position(|(name, identity)| identity == to && name != ours)
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

/// The fencing token of a node: its creation zxid.
pub(super) fn token_of(czxid: i64) -> u64 {
    u64::try_from(czxid).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_waits_for_the_last_node_ahead_that_is_not_a_readers() {
        let q = |names: &[&str]| -> Vec<(u64, String)> {
            (names.iter().enumerate())
                .map(|(i, n)| (i as u64, format!("_c_x-{n}{i:010}")))
                .collect()
        };
        let queue = q(&[READ, READ, READ]);
        assert_eq!(writer_ahead(&queue, 2), None);
        let queue = q(&[READ, WRITE, READ, READ]);
        assert_eq!(writer_ahead(&queue, 3), Some(1));
        assert_eq!(writer_ahead(&queue, 0), None);
        // An election's node (a LeaderLatch's, or leasekeeper's without --mode) is a writer.
        let queue = q(&["latch-", READ]);
        assert_eq!(writer_ahead(&queue, 1), Some(0));
        assert!(!announces(&format!("_c_{OUR_TAG}-a-{READ}0000000001")));
        assert!(announces(&format!("_c_{OUR_TAG}-a-{WRITE}0000000001")));
    }

    fn names(queue: &[(u64, String)]) -> Vec<&str> {
        queue.iter().map(|(_, c)| c.as_str()).collect()
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
        assert_eq!(position(&queue, "_c_a-latch-0000000003"), Some(0));
        assert_eq!(position(&queue, "_c_c-latch-0000000100"), Some(2));
        assert_eq!(position(&queue, "_c_d-latch-0000000001"), None);
    }

    #[test]
    fn a_follower_watches_the_head_and_its_predecessor_only() {
        let queue = queue_of((1..=4).map(|i| format!("_c_{i}-latch-{i:010}")).collect());
        assert_eq!(watches(&queue, 1), ("_c_1-latch-0000000001", None));
        assert_eq!(
            watches(&queue, 3),
            ("_c_1-latch-0000000001", Some("_c_3-latch-0000000003"))
        );
        assert_eq!(
            watches(&queue, 2),
            ("_c_1-latch-0000000001", Some("_c_2-latch-0000000002"))
        );
    }

    #[test]
    fn only_followers_behind_an_announcing_next_in_line_leave_the_head_alone() {
        let ours = |i: u64| format!("_c_{OUR_TAG}-1111-2222-3333-444455556666-latch-{i:010}");
        let curator = |i: u64| format!("_c_0b1e2d3c-1111-4222-8333-444455556666-latch-{i:010}");
        assert!(announces(&ours(1)));
        assert!(!announces(&curator(1)));
        assert!(!announces(&format!("_c_{OUR_TAG}0-1111-latch-0000000001")));
        assert!(!announces(&format!("{OUR_TAG}-1111-latch-0000000001")));
        let queue = queue_of(vec![curator(1), ours(2), ours(3), ours(4)]);
        let head = Some(queue[0].1.as_str());
        assert_eq!(
            holder_news(&queue, 1, head),
            HolderNews::Head,
            "next in line"
        );
        assert_eq!(holder_news(&queue, 2, head), HolderNews::Announcement);
        assert_eq!(holder_news(&queue, 3, head), HolderNews::Announcement);
        let old = Some("_c_x-latch-0000000000");
        assert_eq!(
            holder_news(&queue, 3, old),
            HolderNews::Head,
            "not announced"
        );
        assert_eq!(
            holder_news(&queue, 3, None),
            HolderNews::Head,
            "never announced"
        );
        let queue = queue_of(vec![ours(1), curator(2), ours(3), ours(4)]);
        let head = Some(queue[0].1.as_str());
        assert_eq!(holder_news(&queue, 1, head), HolderNews::Head);
        assert_eq!(
            holder_news(&queue, 2, head),
            HolderNews::Head,
            "Curator next"
        );
        assert_eq!(
            holder_news(&queue, 3, head),
            HolderNews::Head,
            "Curator next"
        );
    }

    #[test]
    fn a_reservation_asks_only_nodes_ahead_of_its_live_candidate() {
        let queue = queue_of((1..=4).map(|i| format!("n-{i:010}")).collect());
        let named = Some("n-0000000003");
        assert!(must_requeue(&queue, 0, named));
        assert!(must_requeue(&queue, 1, named));
        assert!(!must_requeue(&queue, 2, named), "the named node itself");
        assert!(!must_requeue(&queue, 3, named), "behind the named node");
        assert!(!must_requeue(&queue, 0, Some("n-0000000009")), "gone");
        assert!(!must_requeue(&queue, 0, None));
        assert!(reserved_for_another(named, "n-0000000001"));
        assert!(!reserved_for_another(named, "n-0000000003"));
        assert!(!reserved_for_another(None, "n-0000000001"));
    }

    #[test]
    fn only_our_sessions_node_is_ours() {
        assert!(owned_by(Some(7), 7));
        assert!(!owned_by(Some(8), 7), "another session's");
        assert!(!owned_by(Some(0), 7), "a persistent node");
        assert!(!owned_by(None, 7), "gone");
    }

    #[test]
    fn a_switchover_names_the_first_entry_of_that_identity_never_ours() {
        let entries = [("n1", "A"), ("n2", "C"), ("n3", "B"), ("n4", "C")];
        assert_eq!(named_entry(entries, "C", "n1"), Some(1));
        assert_eq!(named_entry(entries, "A", "n1"), None);
        assert_eq!(named_entry(entries, "A", "n9"), Some(0));
        assert_eq!(named_entry(entries, "D", "n1"), None);
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
}
