//! The waiting candidates' queue on the SQL stores (`--mode`): whose turn it
//! is to take (or join) the lease row, from what one read saw. A plain decision; the
//! reads and writes are the dialects'. The order and the turn are the queue's rules
//! that etcd and ZooKeeper follow too (`super::super::queue`); the grace and the
//! staleness below are SQL's own.
//!
//! Every candidate refused by the row or by this queue writes a waiting row of its own
//! in the shared holders' table (kind `w` for a writer, `q` for a shared candidate),
//! keyed by its presence and stamped with its arrival (the server's clock, in µs, kept
//! while the row stays): its place in the queue. The row lives for as long as its
//! presence does, without rewrites, and is deleted once its candidate holds.
//!
//! - a **writer** (`--mode exclusive`, or an election's candidate when the table is
//!   there) takes a free row only when no live waiting candidate is ahead of it;
//! - a **shared candidate** joins only when no live waiting writer is ahead of it
//!   (the shared candidates ahead of it join too);
//! - a candidate that has no waiting row yet (its first look) comes after every one;
//! - a row free for longer than the grace (a ttl) lets anyone in: the candidates ahead
//!   had their turn and did not take it (a frozen process's presence lives on);
//! - while shared holders hold the row, a waiting row not written again for a while
//!   (`stale_ms` past its expiry: its candidate looks at least every few ttl while it
//!   waits, a frozen one does not) keeps nobody out.

use super::super::queue::{self, Entry};

/// One live waiting candidate, as the queue read saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Its presence (the key of its waiting row).
    pub presence: String,
    /// A writer (`w`), or a shared candidate (`q`).
    pub writer: bool,
    /// When it arrived (server µs; the order of the queue, ties by presence).
    pub arrived: i64,
    /// How long ago its row's expiry passed (ms, server clock; negative while ahead):
    /// the row is written again at each of its candidate's looks.
    pub lapsed_ms: i64,
}

/// The nearest waiting writer ahead of a shared candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ahead {
    /// Its presence (whose turn lock the shared candidate waits for).
    pub presence: String,
    /// In how many ms its row goes stale unless written again (`None`: no staleness
    /// counts, the row is not held by shared holders).
    pub stale_in_ms: Option<i64>,
}

/// Whether this candidate may take (or join) the row now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// Take (or join) now: no one it must let go first is ahead.
    Go,
    /// Wait: candidates ahead go first. `writer`: the nearest waiting writer ahead,
    /// whose tenure a shared candidate waits to end.
    Wait { writer: Option<Ahead> },
}

/// Whose turn it is, for the candidate whose presence is `me` (`shared`: a shared
/// candidate), from the live waiting candidates and how long the row has been free
/// (`free_ms`, negative while it is held), with a grace of `grace_ms`. `stale_ms`:
/// while shared holders hold the row, how long past its expiry a waiting row still
/// counts (`None` otherwise).
pub fn turn(
    shared: bool,
    me: &str,
    waiting: &[Waiting],
    (free_ms, grace_ms): (i64, i64),
    stale_ms: Option<i64>,
) -> Turn {
    if free_ms > grace_ms {
        return Turn::Go;
    }
    let counts =
        |w: &&Waiting| w.presence == me || stale_ms.is_none_or(|limit| w.lapsed_ms <= limit);
    let entries = waiting.iter().filter(counts).map(|w| Entry {
        order: w.arrived,
        name: w.presence.as_str(),
        shared: !w.writer,
    });
    let in_order = queue::in_order(entries.collect());
    let queue::Turn::Wait { writer } = queue::turn(&in_order, &me, shared) else {
        return Turn::Go;
    };
    let writer = writer.and_then(|e| waiting.iter().find(|w| w.presence == e.name));
    Turn::Wait {
        writer: writer.map(|w| Ahead {
            presence: w.presence.clone(),
            stale_in_ms: stale_ms.map(|limit| limit - w.lapsed_ms),
        }),
    }
}

/// How long a candidate refused by the queue waits before it looks again, when the
/// row is free (`free_ms` ≥ 0): until the grace ends. `None` while the row is held
/// (its holder's expiry and signal decide).
pub fn grace_left(free_ms: i64, grace_ms: i64) -> Option<i64> {
    (free_ms >= 0).then(|| (grace_ms - free_ms).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(presence: &str, writer: bool, arrived: i64) -> Waiting {
        Waiting {
            presence: presence.to_owned(),
            writer,
            arrived,
            lapsed_ms: 0,
        }
    }

    /// The nearest waiting writer ahead, no staleness counting.
    fn ahead(presence: &str) -> Option<Ahead> {
        Some(Ahead {
            presence: presence.to_owned(),
            stale_in_ms: None,
        })
    }

    const GRACE: i64 = 2000;

    /// The order and the turn are the queue's (see `queue::turn`): a shared
    /// candidate waits for the nearest writer ahead, a newcomer is behind everyone.
    #[test]
    fn the_turn_goes_by_arrival() {
        let q = [
            w("w1", true, 5),
            w("w0", true, 7),
            w("me", false, 20),
            w("w2", true, 30),
        ];
        let wait = turn(true, "me", &q, (-1, GRACE), None);
        assert_eq!(
            wait,
            Turn::Wait {
                writer: ahead("w0")
            }
        );
        assert_eq!(turn(false, "w1", &q, (-1, GRACE), None), Turn::Go);
        let newcomer = turn(false, "new", &q, (5, GRACE), None);
        assert_eq!(
            newcomer,
            Turn::Wait {
                writer: ahead("w2")
            }
        );
    }

    /// A row free for longer than the grace lets anyone in; at the grace's end
    /// exactly, the queue still holds.
    #[test]
    fn a_row_free_past_the_grace_lets_anyone_in() {
        let q = [w("w1", true, 5)];
        assert_eq!(turn(false, "new", &q, (GRACE + 1, GRACE), None), Turn::Go);
        assert_eq!(turn(true, "new", &q, (GRACE + 1, GRACE), None), Turn::Go);
        assert_ne!(turn(false, "new", &q, (GRACE, GRACE), None), Turn::Go);
        assert_eq!(grace_left(0, GRACE), Some(GRACE));
        assert_eq!(grace_left(500, GRACE), Some(GRACE - 500));
        assert_eq!(grace_left(GRACE + 9, GRACE), Some(1));
        assert_eq!(grace_left(-1, GRACE), None);
    }

    /// While shared holders hold, a waiting row lapsed for longer than `stale_ms`
    /// keeps nobody out (its candidate did not look: frozen); up to it exactly, it
    /// still does, and a shared candidate learns when the writer ahead goes stale.
    /// Without `stale_ms` (the row not held by shared holders) it counts however old.
    #[test]
    fn a_waiting_row_not_written_again_goes_stale_beside_shared_holders() {
        const STALE: i64 = 12_000;
        let at = |lapsed_ms| Waiting {
            lapsed_ms,
            ..w("w1", true, 5)
        };
        let q = [at(STALE + 1)];
        assert_eq!(turn(true, "new", &q, (-1, GRACE), Some(STALE)), Turn::Go);
        assert_eq!(turn(false, "new", &q, (-1, GRACE), Some(STALE)), Turn::Go);
        let old = turn(true, "new", &q, (-1, GRACE), None);
        assert_eq!(
            old,
            Turn::Wait {
                writer: ahead("w1")
            }
        );
        let q = [at(STALE), w("me", false, 9)];
        let wait = turn(true, "me", &q, (-1, GRACE), Some(STALE));
        let writer = Some(Ahead {
            presence: "w1".to_owned(),
            stale_in_ms: Some(0),
        });
        assert_eq!(wait, Turn::Wait { writer });
        let q = [at(-300)];
        let Turn::Wait { writer: Some(w1) } = turn(true, "new", &q, (-1, GRACE), Some(STALE))
        else {
            panic!("a fresh waiting writer keeps a shared candidate out");
        };
        assert_eq!(w1.stale_in_ms, Some(STALE + 300));
    }
}
