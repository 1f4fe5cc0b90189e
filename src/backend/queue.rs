//! The queue rules of the stores whose candidates line up: etcd (keys in the order of
//! their create revision), ZooKeeper (latch nodes in the order of their sequence
//! number) and SQL (waiting rows in the order of their arrival). Plain functions over
//! [`Entry`], what one read of a store's queue saw; the reads, the writes and the
//! watches are the stores'.
//!
//! The rules, which every one of these stores follows:
//!
//! 1. **Order** ([`in_order`]): entries go by their `order`, ties by name; one name is
//!    one entry.
//! 2. **Where a candidate stands** ([`stand`]): an exclusive candidate (an election's,
//!    or `--mode exclusive`) holds when its entry is the first; a shared candidate
//!    (`--mode shared`) holds when no exclusive entry is ahead of its own (the shared
//!    ones ahead hold beside it). A candidate whose entry is not in the queue is gone
//!    (its entry went with its lease or session): it starts over.
//! 3. **What a follower watches** ([`Stand::Behind`]): the entry whose going may bring
//!    its turn (the one just ahead of its own; for a shared candidate, the last
//!    exclusive one ahead), and the head (the holder, for `/leader`)
//!    when that is another. Never any other entry: a handover wakes no herd.
//! 4. **How a follower hears of a new holder** ([`holder_news`]): from the head
//!    itself, unless it is an exclusive candidate behind the next in line, the next
//!    in line announces its claims, and the announcement names the head: then from
//!    the announcement (and the next in line's entry), so that a handover wakes the
//!    next in line alone.
//! 5. **Whose turn it is** ([`turn`]): as [`stand`], for a candidate that may have no
//!    entry yet (its first look), which comes after every one.
//! 6. **Switchover** ([`named_entry`], [`lets_pass`], [`reserved_for_another`]): the
//!    leaving holder names the first entry whose identity is the one asked for, never
//!    its own. The reservation asks a candidate to give its place up (and queue again
//!    at the end) only while the named entry is in the queue, is not its own, and is
//!    behind its own; a candidate that finds itself first by a shortcut claims only
//!    when no reservation names another entry.
//! 7. **Who holds** ([`holders`]): the head, and with it every shared entry right
//!    behind a shared head.

use std::cmp::Ordering;

#[cfg(test)]
mod cases;

/// One candidate's entry in a store's queue, as one read saw it. `N` is its name in
/// the store: an etcd key, a ZooKeeper node's name, a SQL waiting row's presence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry<N> {
    /// Its place: lower goes first (etcd: the create revision; ZooKeeper: the
    /// sequence number; SQL: the arrival).
    pub order: i64,
    pub name: N,
    /// A shared candidate's (a reader's), which holds beside other shared ones.
    pub shared: bool,
}

impl<N: Ord> Entry<N> {
    fn queue_order(&self, other: &Self) -> Ordering {
        (self.order, &self.name).cmp(&(other.order, &other.name))
    }
}

/// The entries in queue order (rule 1): lowest `order` first, ties by name; an entry
/// seen twice (one read's answers may overlap) counts once.
pub(super) fn in_order<N: Ord>(mut entries: Vec<Entry<N>>) -> Vec<Entry<N>> {
    entries.sort_by(Entry::queue_order);
    entries.dedup_by(|a, b| a.name == b.name);
    entries
}

/// Where the entry named `name` stands in `queue` (in queue order); `None`: not in it.
/// Position 0 is the head.
pub(super) fn position<N: PartialEq>(queue: &[Entry<N>], name: &N) -> Option<usize> {
    queue.iter().position(|e| e.name == *name)
}

/// Where a candidate stands (rule 2), and what it watches while it waits (rule 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stand<'q, N> {
    /// It may claim (or, shared, join the holders).
    First,
    /// It waits for `turn` to go, and watches the head too when that is another
    /// (`head`: `None` when `turn` is the head: one watch serves both).
    Behind {
        turn: &'q Entry<N>,
        head: Option<&'q Entry<N>>,
    },
    /// Its entry is not in the queue: it starts over.
    Gone,
}

/// Where the candidate whose entry is named `ours` stands in `queue` (in queue
/// order); its entry says whether it is a shared candidate.
pub(super) fn stand<'q, N: PartialEq>(queue: &'q [Entry<N>], ours: &N) -> Stand<'q, N> {
    let Some(at) = position(queue, ours) else {
        return Stand::Gone;
    };
    match awaited(&queue[..at], queue[at].shared) {
        None => Stand::First,
        Some(t) => Stand::Behind {
            turn: &queue[t],
            head: (t > 0).then(|| &queue[0]),
        },
    }
}

/// Among the entries `ahead` of a candidate, the one whose going may bring its turn:
/// the last one, or for a shared candidate the last exclusive one. `None`: its turn.
fn awaited<N>(ahead: &[Entry<N>], shared: bool) -> Option<usize> {
    match shared {
        true => ahead.iter().rposition(|e| !e.shared),
        false => ahead.len().checked_sub(1),
    }
}

/// Whether it is a candidate's turn (rule 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turn<'q, N> {
    /// Take (or join) now: nobody it must let go first is ahead.
    Go,
    /// Wait: entries ahead go first. `writer`: the last exclusive entry ahead (whose
    /// tenure a shared candidate waits to end).
    Wait { writer: Option<&'q Entry<N>> },
}

/// Whose turn it is, for the candidate named `ours` (`shared`: a shared candidate)
/// in `queue` (in queue order), where it may have no entry yet: then it comes after
/// every one.
pub(super) fn turn<'q, N: PartialEq>(queue: &'q [Entry<N>], ours: &N, shared: bool) -> Turn<'q, N> {
    let ahead = match position(queue, ours) {
        Some(at) => &queue[..at],
        None => queue,
    };
    match awaited(ahead, shared) {
        None => Turn::Go,
        Some(_) => Turn::Wait {
            writer: awaited(ahead, true).map(|w| &ahead[w]),
        },
    }
}

/// How a follower hears of a new holder, for its `/leader` (rule 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HolderNews {
    /// From the head itself (a watch on it): the next in line (the head is what it
    /// waits for anyway), a shared candidate, and the followers behind a next in line
    /// that does not announce (an etcd `concurrency.Election`, `etcdctl elect`, a
    /// Curator `LeaderLatch`), or before the announcement names the head.
    Head,
    /// From the announcement, which a leasekeeper candidate writes once it has
    /// claimed, and the next in line's entry (should it go, the next one may not
    /// announce). A handover then wakes the next in line alone; the others hear of
    /// the new holder after its claim.
    Announcement,
}

/// How the candidate named `ours` hears of a new holder, given the entry the
/// announcement names (`announced`) and which entries announce their claims (a
/// store's mark on its own candidates' names).
pub(super) fn holder_news<N: PartialEq>(
    queue: &[Entry<N>],
    ours: &N,
    announced: Option<&N>,
    announces: impl Fn(&Entry<N>) -> bool,
) -> HolderNews {
    let exclusive_behind_next =
        position(queue, ours).is_some_and(|at| at >= 2 && !queue[at].shared);
    match (queue.first(), queue.get(1)) {
        (Some(head), Some(next))
            if exclusive_behind_next && announces(next) && announced == Some(&head.name) =>
        {
            HolderNews::Announcement
        }
        _ => HolderNews::Head,
    }
}

/// The entry a switchover leaves the lease to: the first in queue order whose
/// identity is `to`, never the leaving candidate's own (`ours`). `entries`: (name,
/// identity), in queue order.
pub(super) fn named_entry<'a, N: PartialEq>(
    entries: impl IntoIterator<Item = (N, &'a [u8])>,
    to: &str,
    ours: &N,
) -> Option<usize> {
    entries
        .into_iter()
        .position(|(name, identity)| identity == to.as_bytes() && name != *ours)
}

/// Whether a switchover's reservation naming `reserved` asks the candidate named
/// `ours` to give its place up: only while the named entry is in `queue` (in queue
/// order) behind ours. Gone (its lease or session ended), ahead of ours, or ours:
/// nothing asked.
pub(super) fn lets_pass<N: PartialEq>(queue: &[Entry<N>], ours: &N, reserved: Option<&N>) -> bool {
    let named = reserved.and_then(|r| position(queue, r));
    match (position(queue, ours), named) {
        (Some(o), Some(n)) => n > o,
        _ => false,
    }
}

/// Whether a reservation keeps a candidate that found itself first without reading
/// the queue (its predecessor, the head, went) from claiming at once: it names
/// another entry (a full look then decides).
pub(super) fn reserved_for_another<N: PartialEq>(reserved: Option<&N>, ours: &N) -> bool {
    reserved.is_some_and(|r| r != ours)
}

/// Who holds (rule 7): the head, and, when it is a shared entry, every shared entry
/// right behind it.
pub(super) fn holders<N>(queue: &[Entry<N>]) -> &[Entry<N>] {
    let shared_head = queue.first().is_some_and(|h| h.shared);
    let n = match shared_head {
        true => queue.iter().take_while(|e| e.shared).count(),
        false => queue.len().min(1),
    };
    &queue[..n]
}

#[cfg(test)]
mod tests {
    use super::cases::{Case, CASES};
    use super::*;

    /// A case's queue in queue order, with a newcomer's entry last where it comes on
    /// its first look.
    fn laid_out(case: &Case) -> (Vec<Entry<&'static str>>, bool) {
        let entries = case.queue.iter().map(|&(order, name, shared)| Entry {
            order,
            name,
            shared,
        });
        let queue = in_order(entries.collect());
        let newcomer = position(&queue, &case.candidate).is_none();
        (queue, newcomer)
    }

    /// What `stand` says of a case: whether it holds, and what it waits for.
    fn stood(queue: &[Entry<&'static str>], case: &Case) -> (bool, Option<&'static str>) {
        match stand(queue, &case.candidate) {
            Stand::First => (true, None),
            Stand::Behind { turn, .. } => (false, Some(turn.name)),
            Stand::Gone => panic!("{}: the candidate is not in the queue", case.name),
        }
    }

    #[test]
    fn every_case_of_the_table_stands_and_takes_its_turn_as_the_table_says() {
        for case in CASES {
            let (mut queue, newcomer) = laid_out(case);
            let turn = turn(&queue, &case.candidate, case.shared);
            assert_eq!(
                matches!(turn, Turn::Go),
                case.holds,
                "{}: turn says {turn:?}",
                case.name
            );
            if let (true, Turn::Wait { writer }) = (case.shared, turn) {
                assert_eq!(writer.map(|w| w.name), case.waits_for, "{}", case.name);
            }
            if newcomer {
                assert_eq!(stand(&queue, &case.candidate), Stand::Gone, "{}", case.name);
                let last = queue.last().map_or(0, |e| e.order) + 1;
                queue.push(Entry {
                    order: last,
                    name: case.candidate,
                    shared: case.shared,
                });
            }
            let own = queue.iter().find(|e| e.name == case.candidate);
            assert_eq!(own.map(|e| e.shared), Some(case.shared), "{}", case.name);
            let said = stood(&queue, case);
            let table = (case.holds, case.waits_for);
            assert_eq!(said, table, "{}: stand says (holds, waits for)", case.name);
        }
    }

    /// A queue from names: `r…` a shared candidate's entry, any other an exclusive
    /// one's, in the order given.
    fn q(names: &[&'static str]) -> Vec<Entry<&'static str>> {
        (names.iter().zip(1..))
            .map(|(&name, order)| Entry {
                order,
                name,
                shared: name.starts_with('r'),
            })
            .collect()
    }

    fn e(order: i64, name: &'static str) -> Entry<&'static str> {
        Entry {
            order,
            name,
            shared: false,
        }
    }

    fn behind<'q>(
        turn: &'q Entry<&'static str>,
        head: Option<&'q Entry<&'static str>>,
    ) -> Stand<'q, &'static str> {
        Stand::Behind { turn, head }
    }

    #[test]
    fn the_lowest_order_goes_first_ties_by_name_and_one_name_counts_once() {
        let queue = in_order(vec![
            e(12, "b"),
            e(3, "c"),
            e(100, "d"),
            e(3, "c"),
            e(12, "a"),
        ]);
        let names: Vec<_> = queue.iter().map(|e| e.name).collect();
        assert_eq!(names, ["c", "a", "b", "d"]);
    }

    #[test]
    fn only_the_first_entry_leads_and_a_follower_watches_the_one_just_ahead() {
        let queue = q(&["a", "b", "c", "d"]);
        assert_eq!(stand(&queue, &"a"), Stand::First);
        // Second in line: the entry ahead is the head, one watch serves both.
        assert_eq!(stand(&queue, &"b"), behind(&queue[0], None));
        // Further back: the entry just ahead, and the head; never the head alone.
        assert_eq!(stand(&queue, &"c"), behind(&queue[1], Some(&queue[0])));
        assert_eq!(stand(&queue, &"d"), behind(&queue[2], Some(&queue[0])));
        assert_eq!(stand(&queue, &"x"), Stand::Gone);
        assert_eq!(stand(&[], &"a"), Stand::Gone);
    }

    #[test]
    fn a_reader_holds_beside_readers_and_waits_for_the_last_writer_ahead() {
        let queue = q(&["r1", "r2", "r3"]);
        assert_eq!(stand(&queue, &"r3"), Stand::First);
        let queue = q(&["r1", "w2", "r3", "w4", "r5", "r6"]);
        assert_eq!(stand(&queue, &"r1"), Stand::First);
        assert_eq!(stand(&queue, &"r3"), behind(&queue[1], Some(&queue[0])));
        assert_eq!(stand(&queue, &"r6"), behind(&queue[3], Some(&queue[0])));
        // A writer waits for every entry ahead, a reader's too.
        assert_eq!(stand(&queue, &"w4"), behind(&queue[2], Some(&queue[0])));
        // The head is the writer ahead: one watch.
        let queue = q(&["w1", "r2", "r3"]);
        assert_eq!(stand(&queue, &"r3"), behind(&queue[0], None));
        // An election's entry (no --mode) counts as a writer's.
        let queue = q(&["latch", "r2"]);
        assert_eq!(stand(&queue, &"r2"), behind(&queue[0], None));
    }

    #[test]
    fn a_writer_waits_for_everyone_ahead_and_a_newcomer_comes_last() {
        let queue = q(&["r1", "me", "w3"]);
        assert_eq!(turn(&queue, &"me", false), Turn::Wait { writer: None });
        let queue = q(&["me", "w2", "r3"]);
        assert_eq!(turn(&queue, &"me", false), Turn::Go);
        assert_eq!(turn(&[], &"me", false), Turn::Go);
        let newcomer = turn(&queue, &"new", false);
        assert_eq!(
            newcomer,
            Turn::Wait {
                writer: Some(&queue[1])
            }
        );
    }

    #[test]
    fn a_shared_candidate_waits_for_writers_ahead_only_and_names_the_nearest() {
        let queue = q(&["r1", "rme", "w3"]);
        assert_eq!(turn(&queue, &"rme", true), Turn::Go);
        let queue = q(&["w1", "w0", "r1", "rme"]);
        let wait = turn(&queue, &"rme", true);
        assert_eq!(
            wait,
            Turn::Wait {
                writer: Some(&queue[1])
            }
        );
        let queue = q(&["w1"]);
        let newcomer = turn(&queue, &"rnew", true);
        assert_eq!(
            newcomer,
            Turn::Wait {
                writer: Some(&queue[0])
            }
        );
        assert_eq!(turn(&q(&["r1"]), &"rnew", true), Turn::Go);
    }

    #[test]
    fn ties_go_by_name_and_a_candidate_is_not_ahead_of_itself() {
        let queue = in_order(vec![e(10, "b"), e(10, "a")]);
        assert_eq!(turn(&queue, &"a", false), Turn::Go);
        let wait = turn(&queue, &"b", false);
        assert_eq!(
            wait,
            Turn::Wait {
                writer: Some(&queue[0])
            }
        );
        assert_eq!(turn(&[e(10, "a")], &"a", false), Turn::Go);
    }

    #[test]
    fn only_followers_behind_an_announcing_next_in_line_leave_the_head_alone() {
        // `o…`: a leasekeeper candidate's entry (it announces); any other does not.
        let ours = |e: &Entry<&str>| e.name.starts_with('o');
        let queue = q(&["curator", "o2", "o3", "o4"]);
        let head = Some(&"curator");
        let news = |me, announced| holder_news(&queue, &me, announced, ours);
        assert_eq!(news("o2", head), HolderNews::Head, "next in line");
        assert_eq!(news("o3", head), HolderNews::Announcement);
        assert_eq!(news("o4", head), HolderNews::Announcement);
        assert_eq!(news("o4", Some(&"old")), HolderNews::Head, "not announced");
        assert_eq!(news("o4", Some(&"o2")), HolderNews::Head, "not the head");
        assert_eq!(news("o4", None), HolderNews::Head, "never announced");
        assert_eq!(news("x", head), HolderNews::Head, "gone");
        let queue = q(&["o1", "curator", "o3", "o4"]);
        let head = Some(&"o1");
        assert_eq!(
            holder_news(&queue, &"o3", head, ours),
            HolderNews::Head,
            "Curator next"
        );
        assert_eq!(
            holder_news(&queue, &"o4", head, ours),
            HolderNews::Head,
            "Curator next"
        );
        // A reader hears of a new holder from the head.
        let queue = q(&["o1", "o2", "r3"]);
        assert_eq!(
            holder_news(&queue, &"r3", Some(&"o1"), ours),
            HolderNews::Head
        );
    }

    #[test]
    fn a_switchover_names_the_first_entry_of_that_identity_never_ours() {
        let entries = [("n1", "A"), ("n2", "C"), ("n3", "B"), ("n4", "C")];
        let entries = entries.map(|(n, i)| (n, i.as_bytes()));
        assert_eq!(named_entry(entries, "C", &"n1"), Some(1));
        assert_eq!(named_entry(entries, "A", &"n1"), None);
        assert_eq!(named_entry(entries, "A", &"n9"), Some(0));
        assert_eq!(named_entry(entries, "D", &"n1"), None);
    }

    #[test]
    fn a_reservation_asks_only_entries_ahead_of_its_live_candidate() {
        let queue = q(&["n1", "n2", "n3", "n4"]);
        let named = Some(&"n3");
        assert!(lets_pass(&queue, &"n1", named));
        assert!(lets_pass(&queue, &"n2", named));
        assert!(!lets_pass(&queue, &"n3", named), "the named entry itself");
        assert!(!lets_pass(&queue, &"n4", named), "behind the named entry");
        assert!(!lets_pass(&queue, &"n1", Some(&"n9")), "gone");
        assert!(!lets_pass(&queue, &"n9", named), "ours gone");
        assert!(!lets_pass(&queue, &"n1", None));
        assert!(reserved_for_another(named, &"n1"));
        assert!(!reserved_for_another(named, &"n3"));
        assert!(!reserved_for_another(None, &"n1"));
    }

    #[test]
    fn a_writer_holds_alone_and_readers_hold_together() {
        let names = |h: &[Entry<&'static str>]| h.iter().map(|e| e.name).collect::<Vec<_>>();
        assert_eq!(names(holders(&q(&["w1", "r2"]))), ["w1"]);
        assert_eq!(names(holders(&q(&["r1", "r2", "w3", "r4"]))), ["r1", "r2"]);
        assert!(holders::<&str>(&[]).is_empty());
    }
}
