//! MySQL's own decisions around its take and its leader's look, as plain functions
//! (the rules both dialects share are `super::super::core`'s): what the conditional
//! take's answer means, when the token counter's row is missing, what the signal
//! connection queues with, and whether the named lock slipped away from the leader.

use super::super::LeaseRow;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
