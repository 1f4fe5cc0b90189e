//! MySQL's own decisions around its take and its leader's look, as plain functions
//! (the rules both dialects share are `super::super::core`'s): what the conditional
//! take's answer means, when the token counter's row is missing, what the signal
//! connection queues with, whether the named lock slipped away from the leader, how
//! long a follower that hands the lock on pauses, and what a silent wait for others'
//! locks leads to.

use std::time::Duration;

use tokio::time::Instant;

use super::super::{LeaseRow, QUARANTINE};

/// What the conditional take's answer means (see the parent module's take).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    /// The row is ours with `token`; `raise`: the token is above the one counted, so
    /// the row's token was above the counter (tampered with meanwhile), and the
    /// counter catches up.
    Ours { token: i64, raise: bool },
    /// The take applied, but the server did not pass the token on: read the row.
    Look,
    /// Not ours: read the row to learn who holds it.
    Refused,
}

/// The take's answer (`answer`: the token it handed out, 0 when the server did not
/// pass it on, `None` when it did not apply), with `reserved`, the token counted
/// before it (none when the row was not free for a new tenure of ours).
pub(super) fn applied(reserved: Option<i64>, answer: Option<i64>) -> Applied {
    match answer {
        Some(token) if token > 0 => Applied::Ours {
            token,
            raise: reserved.is_some_and(|r| token > r),
        },
        Some(_) => Applied::Look,
        None => Applied::Refused,
    }
}

/// Whether a row read after a refused take says that the counter's row is gone: the
/// row is free (no time left, not left to another: `kept`) and not ours, yet no token
/// was counted (`counted`). The counter is seeded again for the next campaign, at
/// once (the row shows no expiry to wait for).
pub(super) fn counter_gone(counted: bool, kept: bool, row: &LeaseRow, tenure: &str) -> bool {
    !counted && !kept && row.left_ms == 0 && row.tenure != tenure
}

/// The row inserted for a missing one (`counted`: the counter's token; `ttl_us`):
/// its tenure and how long it lasts. When tokens were handed out before, a quarantine
/// row nobody holds that expires a ttl later, so that a leader still claiming on the
/// deleted row runs out first; otherwise a free one.
pub(super) fn missing_row(counted: i64, ttl_us: i64) -> (&'static str, i64) {
    if counted > 0 {
        (QUARANTINE, ttl_us)
    } else {
        ("", 0)
    }
}

/// What a counting statement (`LAST_INSERT_ID(expr)`) handed out, by its answer: the
/// rows it changed and the id it passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    /// It counted nothing (no row matched).
    Nothing,
    /// This token.
    Token(i64),
    /// It counted, but the server did not pass the value on: ask the session (the
    /// value is the session's still).
    Ask,
}

pub(super) fn counted(rows: u64, last_id: u64) -> Counted {
    if rows != 1 {
        return Counted::Nothing;
    }
    match i64::try_from(last_id) {
        Ok(token) if token > 0 => Counted::Token(token),
        _ => Counted::Ask,
    }
}

/// Whether a leaving shared holder frees the lease row, by the version it read after
/// deleting its own row (`token`, `renewed_at` µs, the count of other live shared
/// holders; none when the row is no longer shared): only the last one does, and only
/// at that version.
pub(super) fn frees(version: Option<(i64, i64, i64)>) -> Option<(i64, i64)> {
    match version {
        Some((token, at, 0)) => Some((token, at)),
        _ => None,
    }
}

/// What the last campaign saw of the row, as the signal connection queues with it:
/// its tenure (a follower queues only while the row still has it), and whether the
/// free row is left to another candidate (a switchover's, or the queue's: the lock is
/// handed on).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Sight {
    pub(super) tenure: String,
    pub(super) left_to_another: bool,
}

impl Sight {
    /// A campaign saw `row` (`None`: no row even after the insert), and whether it is
    /// left to another.
    pub(super) fn saw(&mut self, row: Option<&LeaseRow>, left_to_another: bool) {
        self.tenure = row.map(|r| r.tenure.clone()).unwrap_or_default();
        self.left_to_another = left_to_another;
    }

    /// The queue kept this candidate out of `row`: a free row is left to the
    /// candidates ahead.
    pub(super) fn kept(&mut self, row: &LeaseRow) {
        self.saw(Some(row), row.holder.is_empty());
    }
}

/// Whether the leader's look found its signal connection's lock gone: it believes it
/// holds the lock (`held`), yet the server names another connection than its own
/// (`ours`) as the holder, or none (the connection lost the lock, and likely itself,
/// unnoticed).
pub(super) fn lock_slipped(held: bool, holder: Option<i64>, ours: u64) -> bool {
    held && holder.and_then(|h| u64::try_from(h).ok()) != Some(ours)
}

/// Consecutive yields for one tenure: the first queues again at once, later ones
/// pause 10 ms, doubling, at most `max`. A yield counts as consecutive while it comes
/// within `max` of the end of the last pause, so a follower that keeps finding the
/// lock free stays at `max` instead of starting over once its pause reached it.
#[derive(Default)]
pub(super) struct Yields {
    tenure: String,
    count: u32,
    resumes_at: Option<Instant>,
}

impl Yields {
    pub(super) fn pause(&mut self, tenure: &str, now: Instant, max: Duration) -> Duration {
        let recent = self.resumes_at.is_some_and(|t| now < t + max);
        if self.tenure != tenure || !recent {
            self.tenure = tenure.to_owned();
            self.count = 0;
        }
        self.count += 1;
        let pause = match self.count {
            1 => Duration::ZERO,
            n => (Duration::from_millis(10) * (1u32 << (n - 2).min(16))).min(max),
        };
        self.resumes_at = Some(now + pause);
        pause
    }
}

/// What a silent wait for others' locks (a writer's for the shared holders', a shared
/// candidate's for a waiting writer's turn lock) answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waited {
    /// The locks were let go (1), or the backstop ran out (0): look.
    Woke,
    /// Nobody held the locks (-1): let go since the candidate's look, or never held
    /// (a crashed holder's row, or an older version's); [`Absent`] decides.
    Nobody,
    /// The server refused the wait: rest.
    Rest,
    /// The connection failed, or the wait overran: renew it.
    Broken,
}

impl Waited {
    /// The answer of a wait for `what`.
    pub(super) fn of<E>(answer: Result<Result<Option<i64>, sqlx::Error>, E>, what: &str) -> Waited {
        match answer {
            Ok(Ok(n)) => {
                tracing::debug!(result = ?n, "the wait for {what} ended");
                match n {
                    Some(0 | 1) => Waited::Woke,
                    Some(-1) => Waited::Nobody,
                    _ => Waited::Rest,
                }
            }
            Ok(Err(sqlx::Error::Database(e))) => {
                tracing::debug!(error = %e, "could not wait for {what}");
                Waited::Rest
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the wait for {what} failed");
                Waited::Broken
            }
            Err(_) => Waited::Broken,
        }
    }
}

/// Which silent wait (`W`: what it waits for) last found nobody holding the locks.
/// The first such answer of a wait wakes the candidate (its holders may have let go
/// between its look and the wait: one look finds out); the same answer for the same
/// wait again rests (a crashed holder's row stands until its expiry, which the
/// candidate waits by: one look, never a loop). A wait that woke, or another wait,
/// starts over.
#[derive(Debug)]
pub(super) struct Absent<W> {
    last: Option<W>,
}

impl<W> Default for Absent<W> {
    fn default() -> Self {
        Absent { last: None }
    }
}

impl<W: PartialEq> Absent<W> {
    /// What the wait for `wait` that answered `waited` leads to: [`Waited::Woke`],
    /// [`Waited::Rest`] or [`Waited::Broken`] (never [`Waited::Nobody`]).
    pub(super) fn settle(&mut self, wait: W, waited: Waited) -> Waited {
        match waited {
            Waited::Nobody if self.last.as_ref() == Some(&wait) => Waited::Rest,
            Waited::Nobody => {
                self.last = Some(wait);
                Waited::Woke
            }
            Waited::Woke => {
                self.last = None;
                Waited::Woke
            }
            other => other,
        }
    }

    /// The candidate does anything else than a silent wait: the next one starts over.
    pub(super) fn forget(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A silent wait for others' locks looks when they were let go or the backstop
    /// ran out, rests when the server refused, renews a broken connection, and
    /// leaves a wait that found nobody to [`Absent`].
    #[test]
    fn a_silent_wait_looks_when_the_locks_went_or_the_backstop_ran_out() {
        let of = |n: Option<i64>| Waited::of(Ok::<_, ()>(Ok(n)), "them");
        assert_eq!(of(Some(1)), Waited::Woke);
        assert_eq!(of(Some(0)), Waited::Woke);
        assert_eq!(of(Some(-1)), Waited::Nobody);
        assert_eq!(of(None), Waited::Rest);
        let broken = Waited::of(Ok::<_, ()>(Err(sqlx::Error::PoolClosed)), "them");
        assert_eq!(broken, Waited::Broken);
        let overran = Waited::of(Err::<Result<Option<i64>, sqlx::Error>, _>(()), "them");
        assert_eq!(overran, Waited::Broken);
    }

    /// A wait that finds nobody holding the locks wakes the candidate once (they may
    /// have let go since its look), and rests when the same wait finds nobody again;
    /// a wait that woke, another wait, or anything else in between starts over.
    #[test]
    fn a_wait_that_finds_nobody_looks_once() {
        let nobody = || Waited::of(Ok::<_, ()>(Ok(Some(-1))), "them");
        let mut a = Absent::default();
        // (the wait, its answer, what it leads to)
        let table = [
            ("readers", nobody(), Waited::Woke),
            ("readers", nobody(), Waited::Rest),
            ("readers", nobody(), Waited::Rest),
            ("turn w1", nobody(), Waited::Woke),
            ("turn w2", nobody(), Waited::Woke),
            ("turn w2", Waited::Rest, Waited::Rest),
            ("turn w2", nobody(), Waited::Rest),
            ("turn w2", Waited::Woke, Waited::Woke),
            ("turn w2", nobody(), Waited::Woke),
            ("turn w2", Waited::Broken, Waited::Broken),
        ];
        for (i, (wait, waited, then)) in table.into_iter().enumerate() {
            assert_eq!(a.settle(wait, waited), then, "row {i}: {wait} {waited:?}");
        }
        a.forget();
        assert_eq!(a.settle("turn w2", nobody()), Waited::Woke, "after forget");
    }

    fn row(holder: &str, tenure: &str, left_ms: i64) -> LeaseRow {
        LeaseRow {
            holder: holder.to_owned(),
            tenure: tenure.to_owned(),
            token: 4,
            left_ms,
        }
    }

    /// The token in the answer makes the row ours; above the counted one, the counter
    /// is raised to it; no token in an answer that applied is a look; no answer is
    /// a refusal.
    #[test]
    fn the_takes_answer_names_the_token_or_asks_for_a_look() {
        assert_eq!(
            applied(Some(7), Some(7)),
            Applied::Ours {
                token: 7,
                raise: false
            }
        );
        assert_eq!(
            applied(Some(7), Some(9)),
            Applied::Ours {
                token: 9,
                raise: true
            }
        );
        let adopted = applied(None, Some(5));
        assert_eq!(
            adopted,
            Applied::Ours {
                token: 5,
                raise: false
            },
            "our own tenure again: nothing was counted"
        );
        assert_eq!(applied(Some(7), Some(0)), Applied::Look);
        assert_eq!(applied(Some(7), None), Applied::Refused);
        assert_eq!(applied(None, None), Applied::Refused);
    }

    /// Only a free row that is not ours, not left to another, and for which no token
    /// was counted says that the counter's row is gone.
    #[test]
    fn a_free_row_without_a_counted_token_means_the_counter_is_gone() {
        assert!(counter_gone(false, false, &row("", "", 0), "me"));
        assert!(!counter_gone(true, false, &row("", "", 0), "me"));
        assert!(!counter_gone(false, true, &row("", "", 0), "me"));
        assert!(!counter_gone(false, false, &row("b", "x", 300), "me"));
        assert!(!counter_gone(false, false, &row("me", "me", 0), "me"));
    }

    /// A missing row comes back as a quarantine row for a ttl once tokens were handed
    /// out, else free.
    #[test]
    fn a_missing_row_is_quarantined_once_tokens_were_handed_out() {
        assert_eq!(missing_row(3, 500), (QUARANTINE, 500));
        assert_eq!(missing_row(0, 500), ("", 0));
    }

    #[test]
    fn a_counted_token_comes_from_the_answer_or_the_session() {
        assert_eq!(counted(0, 9), Counted::Nothing);
        assert_eq!(counted(2, 9), Counted::Nothing);
        assert_eq!(counted(1, 9), Counted::Token(9));
        assert_eq!(counted(1, 0), Counted::Ask, "not passed on");
        assert_eq!(counted(1, u64::MAX), Counted::Ask);
    }

    /// Only the last live shared holder frees the row, at the version it read.
    #[test]
    fn only_the_last_shared_holder_frees_the_row() {
        assert_eq!(frees(Some((7, 100, 0))), Some((7, 100)));
        assert_eq!(frees(Some((7, 100, 1))), None, "another still holds");
        assert_eq!(frees(None), None, "no longer shared");
    }

    #[test]
    fn the_signal_queues_with_what_the_campaign_saw() {
        let mut sight = Sight::default();
        sight.saw(Some(&row("b", "x", 300)), false);
        assert_eq!((sight.tenure.as_str(), sight.left_to_another), ("x", false));
        sight.saw(None, true);
        assert_eq!((sight.tenure.as_str(), sight.left_to_another), ("", true));
        sight.kept(&row("", "y", 300));
        assert_eq!((sight.tenure.as_str(), sight.left_to_another), ("y", true));
        sight.kept(&row("b", "x", 300));
        assert!(!sight.left_to_another);
    }

    #[test]
    fn a_lock_the_server_names_for_another_connection_slipped_away() {
        assert!(!lock_slipped(true, Some(12), 12));
        assert!(lock_slipped(true, Some(13), 12));
        assert!(lock_slipped(true, None, 12));
        assert!(!lock_slipped(false, None, 12));
    }

    #[test]
    fn yields_for_one_tenure_pause_longer_and_longer() {
        let max = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut y = Yields::default();
        assert_eq!(y.pause("a", t0, max), Duration::ZERO);
        assert_eq!(y.pause("a", t0, max), Duration::from_millis(10));
        assert_eq!(y.pause("a", t0, max), Duration::from_millis(20));
        assert_eq!(y.pause("a", t0, max), Duration::from_millis(40));
        // Another tenure starts over, and so does one yielded for long ago.
        assert_eq!(y.pause("b", t0, max), Duration::ZERO);
        assert_eq!(y.pause("b", t0, max), Duration::from_millis(10));
        let later = t0 + Duration::from_millis(10) + max;
        assert_eq!(y.pause("b", later, max), Duration::ZERO);
    }

    #[test]
    fn a_follower_that_keeps_finding_the_lock_free_stays_at_the_longest_pause() {
        let max = Duration::from_millis(640);
        let mut now = Instant::now();
        let mut y = Yields::default();
        let mut pauses = Vec::new();
        for _ in 0..12 {
            let pause = y.pause("a", now, max);
            pauses.push(pause.as_millis());
            // Each yield comes a round trip after the end of the last pause.
            now += pause + Duration::from_millis(20);
        }
        assert_eq!(
            pauses,
            [0, 10, 20, 40, 80, 160, 320, 640, 640, 640, 640, 640],
            "the pauses of a yield loop"
        );
    }
}
