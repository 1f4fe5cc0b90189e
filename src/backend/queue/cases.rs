//! The queue rules as a table of cases: the specification that [`super`] (the queue
//! rules of etcd, ZooKeeper and SQL) and the Redis and Redlock take scripts, which
//! keep the same rules in Lua, are all held to. Plain data with no dependency, so
//! that the integration tests include this very file (`tests/suite/queue_scripts.rs`
//! runs every case through the real scripts on a real server).
//!
//! A queue lists its entries as `(order, name, shared)`: lower order goes first, ties
//! by name. A candidate whose name is in the queue stands at its entry (its mode is
//! its entry's); one whose name is not is on its first look, and comes after every
//! entry.

/// One case: a queue, a candidate, and what the rules say of it.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// What the case shows, for a failure's message.
    pub name: &'static str,
    /// The entries `(order, name, shared)`, in any order.
    pub queue: &'static [(i64, &'static str, bool)],
    /// The candidate's name: an entry's, or a newcomer's.
    pub candidate: &'static str,
    /// Whether the candidate is a shared one (`--mode shared`).
    pub shared: bool,
    /// Whether it holds (or, shared, holds beside the shared holders ahead): its turn.
    pub holds: bool,
    /// While it does not hold: the entry whose going may bring its turn (the one just
    /// ahead of it; for a shared candidate the last exclusive one ahead).
    pub waits_for: Option<&'static str>,
}

const fn case(
    name: &'static str,
    queue: &'static [(i64, &'static str, bool)],
    candidate: &'static str,
    shared: bool,
    waits_for: Option<&'static str>,
) -> Case {
    Case {
        name,
        queue,
        candidate,
        shared,
        holds: waits_for.is_none(),
        waits_for,
    }
}

const R: bool = true;
const W: bool = false;

/// Every case: `w…` names an exclusive candidate's entry, `r…` a shared one's.
pub const CASES: &[Case] = &[
    case(
        "an exclusive newcomer to an empty queue",
        &[],
        "w1",
        W,
        None,
    ),
    case("a shared newcomer to an empty queue", &[], "r1", R, None),
    case(
        "an exclusive candidate first",
        &[(1, "w1", W), (2, "w2", W)],
        "w1",
        W,
        None,
    ),
    case(
        "an exclusive candidate behind a reader",
        &[(1, "r1", R), (2, "w2", W)],
        "w2",
        W,
        Some("r1"),
    ),
    case(
        "a reader with readers ahead only holds beside them",
        &[(1, "r1", R), (2, "r2", R), (3, "r3", R)],
        "r3",
        R,
        None,
    ),
    case(
        "a reader first, a writer behind it",
        &[(1, "r1", R), (2, "w2", W)],
        "r1",
        R,
        None,
    ),
    case(
        "a reader behind a waiting writer does not pass it",
        &[(1, "r1", R), (2, "w2", W), (3, "r3", R)],
        "r3",
        R,
        Some("w2"),
    ),
    case(
        "the first of several readers behind a writer",
        &[(1, "w1", W), (2, "r2", R), (3, "r3", R), (4, "r4", R)],
        "r2",
        R,
        Some("w1"),
    ),
    case(
        "the last of several readers behind a writer",
        &[(1, "w1", W), (2, "r2", R), (3, "r3", R), (4, "r4", R)],
        "r4",
        R,
        Some("w1"),
    ),
    case(
        "a reader behind two writers waits for the last",
        &[(1, "w1", W), (2, "w2", W), (3, "r3", R)],
        "r3",
        R,
        Some("w2"),
    ),
    case(
        "a writer behind a writer",
        &[(1, "w1", W), (2, "w2", W)],
        "w2",
        W,
        Some("w1"),
    ),
    case(
        "a writer waits for the reader just ahead",
        &[(1, "w1", W), (2, "r2", R), (3, "w3", W)],
        "w3",
        W,
        Some("r2"),
    ),
    case(
        "an exclusive newcomer behind readers",
        &[(1, "r1", R), (2, "r2", R)],
        "w9",
        W,
        Some("r2"),
    ),
    case(
        "a shared newcomer behind readers joins them",
        &[(1, "r1", R), (2, "r2", R)],
        "r9",
        R,
        None,
    ),
    case(
        "a shared newcomer behind a waiting writer",
        &[(1, "r1", R), (2, "w2", W), (3, "r3", R)],
        "r9",
        R,
        Some("w2"),
    ),
    case(
        "a tie goes to the first name",
        &[(5, "wb", W), (5, "wa", W)],
        "wa",
        W,
        None,
    ),
    case(
        "a tie's second name waits for the first",
        &[(5, "wb", W), (5, "wa", W)],
        "wb",
        W,
        Some("wa"),
    ),
    case(
        "a writer tied with a reader waits for it",
        &[(7, "wb", W), (7, "ra", R), (8, "rc", R)],
        "wb",
        W,
        Some("ra"),
    ),
];
