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

use std::time::Duration;

use tokio::time::Instant;

use super::super::queue::{self, Entry};
use crate::backend::Wake;

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

/// When a shared candidate waiting behind a writer's turn looks anyway, from `now`:
/// when the writer's waiting row goes stale (`stale_in_ms`; see [`turn`]).
pub fn stale_at(now: Instant, ahead: Option<&Ahead>) -> Option<Instant> {
    let ms = ahead.and_then(|a| a.stale_in_ms)?;
    Some(now + Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0) + 1))
}

/// A wait behind a writer's turn lasts until `stale_at` at most (`max` otherwise).
pub fn behind_for(max: Duration, stale_at: Option<Instant>, now: Instant) -> Duration {
    stale_at.map_or(max, |at| at.saturating_duration_since(now).min(max))
}

/// A wait behind a writer's turn that ran out (`Quiet`) once the writer's row went
/// stale is a change: the candidate looks (and goes past a frozen writer).
pub fn behind_woke(wake: Wake, stale_at: Option<Instant>, now: Instant) -> Wake {
    match (wake, stale_at) {
        (Wake::Quiet, Some(at)) if now >= at => Wake::Changed,
        _ => wake,
    }
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

    /// The wait behind a waiting writer's turn, and its end, from the writer's
    /// staleness alone.
    #[test]
    fn a_wait_behind_a_waiting_writer_ends_when_its_row_goes_stale() {
        let now = Instant::now();
        let max = Duration::from_secs(10);
        let at = |ms| Some(now + Duration::from_millis(ms));
        let stale_in = |ms| Ahead {
            presence: "w".to_owned(),
            stale_in_ms: ms,
        };
        let at3 = stale_at(now, Some(&stale_in(Some(3000))));
        assert_eq!(at3, at(3001));
        assert_eq!(stale_at(now, Some(&stale_in(None))), None);
        assert_eq!(stale_at(now, None), None);
        assert_eq!(stale_at(now, Some(&stale_in(Some(-50)))), at(1));
        assert_eq!(behind_for(max, at3, now), Duration::from_millis(3001));
        assert_eq!(
            behind_for(Duration::from_secs(2), at3, now),
            Duration::from_secs(2)
        );
        assert_eq!(behind_for(max, None, now), max);
        let later = now + Duration::from_secs(4);
        assert_eq!(behind_for(max, at3, later), Duration::ZERO);
        assert_eq!(behind_woke(Wake::Quiet, at3, later), Wake::Changed);
        assert_eq!(behind_woke(Wake::Quiet, at3, now), Wake::Quiet);
        assert_eq!(behind_woke(Wake::Quiet, None, later), Wake::Quiet);
        assert_eq!(behind_woke(Wake::Waiting, at3, later), Wake::Waiting);
        assert_eq!(
            behind_woke(Wake::Quiet, at3, now + Duration::from_millis(3001)),
            Wake::Changed
        );
    }
}
