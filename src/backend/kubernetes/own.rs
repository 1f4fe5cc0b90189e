//! The leader's side of the Lease as plain decisions: the watch on our own Lease as a
//! state machine ([`OwnWatch`]: when it is (re)opened, from which version, and what
//! each of its events means for the claim), and what a write over our own tenure came
//! to ([`OwnAnswer`]). No I/O and no clock: `now` and the API server's answers are
//! arguments; the backend ([`super::KubeBackend`]) sends the requests and keeps the
//! stream.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;

use super::answers::{Heard, Refusal};
use super::rules::Record;

/// How long to wait before looking again after a watch that ended at once.
pub(super) const SETTLE: Duration = Duration::from_millis(500);

/// Where the leader's watch on its own Lease stands (see [`crate::backend::Backend::record_lost`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum OwnWatch {
    /// No version to open it from: no tenure, or 410 Gone (we cannot tell until the
    /// next renew writes a version).
    #[default]
    Blind,
    /// Closed: open it from `from` (our last write or the last event seen), not before
    /// `not_before` (a watch that failed or ended at once).
    Closed {
        from: String,
        not_before: Option<Instant>,
    },
    /// Open since `opened`, `events` events read; `from` is the last version seen.
    Open {
        from: Option<String>,
        opened: Instant,
        events: usize,
    },
}

/// What the leader's watch does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum OwnStep {
    /// Nothing to watch from: wait for the next renew.
    Park,
    /// Wait until then before opening it again.
    Pause(Instant),
    /// Open the watch from this version.
    Open(String),
    /// Read the next event of the open watch.
    Read,
}

/// What an event of the leader's watch means for the claim.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Own {
    /// Still our tenure, as written: go on (its `preferredHolder` may ask for a handover).
    Ours(Box<Lease>),
    /// Nothing about the tenure: go on.
    Nothing,
    /// Written by someone else, or a write we did not make: the claim is lost.
    Overwritten(Box<Lease>),
    /// Deleted, at this version: the claim is lost.
    Deleted(Option<String>),
}

impl Own {
    pub(super) fn lost(&self) -> bool {
        matches!(self, Own::Overwritten(_) | Own::Deleted(_))
    }
}

impl OwnWatch {
    /// The watch of a tenure whose write came back at `version`.
    pub(super) fn from_write(version: Option<String>) -> OwnWatch {
        match version {
            Some(from) => OwnWatch::Closed {
                from,
                not_before: None,
            },
            None => OwnWatch::Blind,
        }
    }

    fn closed(from: Option<String>, not_before: Option<Instant>) -> OwnWatch {
        match from {
            Some(from) => OwnWatch::Closed { from, not_before },
            None => OwnWatch::Blind,
        }
    }

    pub(super) fn is_open(&self) -> bool {
        matches!(self, OwnWatch::Open { .. })
    }

    /// What to do at `now`.
    pub(super) fn step(&self, now: Instant) -> OwnStep {
        match self {
            OwnWatch::Blind => OwnStep::Park,
            OwnWatch::Closed {
                not_before: Some(t),
                ..
            } if now < *t => OwnStep::Pause(*t),
            OwnWatch::Closed { from, .. } => OwnStep::Open(from.clone()),
            OwnWatch::Open { .. } => OwnStep::Read,
        }
    }

    /// The answer to opening the watch at `now`: open, or refused (410 Gone: the
    /// version is gone from the watch cache, so we cannot tell until the next renew).
    pub(super) fn opened(self, answer: Result<(), &Refusal>, now: Instant) -> OwnWatch {
        let OwnWatch::Closed { from, .. } = self else {
            return self;
        };
        match answer {
            Ok(()) => OwnWatch::Open {
                from: Some(from),
                opened: now,
                events: 0,
            },
            Err(e) if e.code == Some(410) => {
                tracing::debug!(version = %from, "our lease's version is gone from the watch cache; the next renew checks");
                OwnWatch::Blind
            }
            Err(e) => {
                tracing::debug!(error = %e, "watching our own lease failed; retrying");
                OwnWatch::closed(Some(from), Some(now + SETTLE))
            }
        }
    }

    /// A renew wrote our tenure at `version`, over a version it judged ours (it named
    /// that version): a watch that cannot tell (410) starts again from here.
    pub(super) fn renewed(self, version: Option<String>) -> OwnWatch {
        match self {
            OwnWatch::Blind => OwnWatch::from_write(version),
            other => other,
        }
    }

    /// One event of the open watch, at `now`; `ours` tells whether a Lease written is
    /// still our tenure ([`super::rules::own_tenure`]).
    pub(super) fn heard(
        self,
        heard: Heard,
        now: Instant,
        ours: impl FnOnce(&Lease) -> bool,
    ) -> (OwnWatch, Own) {
        let OwnWatch::Open {
            from,
            opened,
            events,
        } = self
        else {
            return (self, Own::Nothing);
        };
        let open = |from, events| OwnWatch::Open {
            from,
            opened,
            events,
        };
        match heard {
            Heard::Written(lease) if ours(&lease) => {
                let version = lease.metadata.resource_version.clone();
                (open(version, events + 1), Own::Ours(lease))
            }
            Heard::Written(lease) => {
                let holder = Record::of(&lease).holder;
                tracing::info!(%holder, "our lease was written by someone else");
                (OwnWatch::closed(from, None), Own::Overwritten(lease))
            }
            Heard::Deleted(version) => {
                tracing::info!("our lease was deleted");
                (OwnWatch::closed(from, None), Own::Deleted(version))
            }
            Heard::Bookmark(version) => (open(Some(version), events), Own::Nothing),
            Heard::Error(410) => {
                tracing::debug!("our lease's watch is too old (410); the next renew checks");
                (OwnWatch::Blind, Own::Nothing)
            }
            ended => {
                match ended {
                    Heard::Error(code) => {
                        tracing::debug!(code, "our lease's watch ended with an error")
                    }
                    Heard::Broke(e) => tracing::debug!(error = %e, "our lease's watch broke"),
                    _ => {}
                }
                // A watch that ended at once without a word is not reopened in a tight loop.
                let quick = events == 0 && now.saturating_duration_since(opened) < SETTLE;
                let not_before = quick.then_some(now + SETTLE);
                (OwnWatch::closed(from, not_before), Own::Nothing)
            }
        }
    }
}

/// What a write over our own tenure (a renew, a release) was answered.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum OwnAnswer {
    /// Written, as this.
    Written(Box<Lease>),
    /// A conflict: somebody wrote since; read, and write again over a tenure still ours.
    Conflict,
    /// 404: the Lease is gone, and our tenure with it.
    Gone,
    Failed(Refusal),
}

impl OwnAnswer {
    pub(super) fn of(answer: Result<Lease, Refusal>) -> OwnAnswer {
        match answer {
            Ok(written) => OwnAnswer::Written(Box::new(written)),
            Err(e) if e.conflict() => OwnAnswer::Conflict,
            Err(e) if e.not_found() => OwnAnswer::Gone,
            Err(e) => OwnAnswer::Failed(e),
        }
    }
}

/// Whether `current`, read after a conflict over our tenure (token `token`), is still
/// ours to write over: our holder and our token (the conflict may come from a write
/// that did not change the holder: a label, say, or our own earlier write whose answer
/// was lost).
pub(super) fn still_ours(current: &Lease, identity: &str, token: i32) -> bool {
    let record = Record::of(current);
    record.holder == identity && record.transitions == token
}

#[cfg(test)]
mod tests {
    use super::super::rules::tests::{lease, record};
    use super::*;

    fn refusal(code: u16) -> Refusal {
        Refusal {
            code: Some(code),
            message: format!("{code}"),
        }
    }

    fn open_at(t: Instant) -> OwnWatch {
        let closed = OwnWatch::from_write(Some("10".to_owned()));
        closed.opened(Ok(()), t)
    }

    #[test]
    fn the_watch_opens_from_our_write_and_parks_without_a_version() {
        let t = Instant::now();
        assert_eq!(OwnWatch::from_write(None).step(t), OwnStep::Park);
        let closed = OwnWatch::from_write(Some("10".to_owned()));
        assert_eq!(closed.step(t), OwnStep::Open("10".to_owned()));
        assert_eq!(open_at(t).step(t), OwnStep::Read);
        // 410 on opening: blind until a renew writes a version.
        let blind = closed.clone().opened(Err(&refusal(410)), t);
        assert_eq!(blind, OwnWatch::Blind);
        let renewed = blind.renewed(Some("12".to_owned()));
        assert_eq!(renewed.step(t), OwnStep::Open("12".to_owned()));
        // Another failure: again after a pause.
        let failed = closed.opened(Err(&refusal(500)), t);
        assert_eq!(failed.step(t), OwnStep::Pause(t + SETTLE));
        assert_eq!(failed.step(t + SETTLE), OwnStep::Open("10".to_owned()));
    }

    #[test]
    fn a_renewal_of_ours_goes_on_and_anothers_write_is_a_loss() {
        let t = Instant::now();
        let ours = lease(&record("a", true, 3), "11");
        let (watch, own) = open_at(t).heard(Heard::Written(Box::new(ours.clone())), t, |_| true);
        assert_eq!(own, Own::Ours(Box::new(ours.clone())));
        assert!(!own.lost());
        assert_eq!(watch.step(t), OwnStep::Read);
        let rival = lease(&record("b", true, 4), "12");
        let written = Heard::Written(Box::new(rival));
        let (watch, own) = watch.heard(written, t, |_| false);
        assert!(own.lost());
        // Reopened (should the claim go on) from the last version of ours.
        assert_eq!(watch.step(t), OwnStep::Open("11".to_owned()));
        let (_, own) = open_at(t).heard(Heard::Deleted(Some("13".to_owned())), t, |_| true);
        assert_eq!(own, Own::Deleted(Some("13".to_owned())));
    }

    #[test]
    fn a_watch_that_ends_is_reopened_from_the_last_version_seen() {
        let t = Instant::now();
        let later = t + SETTLE;
        let (watch, own) = open_at(t).heard(Heard::Bookmark("15".to_owned()), t, |_| true);
        assert_eq!(own, Own::Nothing);
        // Ended at once without an event: not before a pause.
        let (quick, _) = watch.clone().heard(Heard::Ended, t, |_| true);
        assert_eq!(quick.step(t), OwnStep::Pause(later));
        // Ended later: at once.
        let (slow, _) = watch
            .clone()
            .heard(Heard::Broke("reset".to_owned()), later, |_| true);
        assert_eq!(slow.step(later), OwnStep::Open("15".to_owned()));
        // 410 as an event: blind.
        let (gone, own) = watch.heard(Heard::Error(410), t, |_| true);
        assert_eq!((gone, own), (OwnWatch::Blind, Own::Nothing));
    }

    #[test]
    fn an_own_write_conflict_rereads_and_a_404_ends_the_tenure() {
        let written = lease(&record("a", true, 3), "11");
        let ok = OwnAnswer::of(Ok(written.clone()));
        assert_eq!(ok, OwnAnswer::Written(Box::new(written)));
        assert_eq!(OwnAnswer::of(Err(refusal(409))), OwnAnswer::Conflict);
        assert_eq!(OwnAnswer::of(Err(refusal(404))), OwnAnswer::Gone);
        let failed = OwnAnswer::of(Err(refusal(500)));
        assert_eq!(failed, OwnAnswer::Failed(refusal(500)));
        let ours = lease(&record("a", true, 3), "12");
        assert!(still_ours(&ours, "a", 3));
        assert!(!still_ours(&ours, "a", 4));
        assert!(!still_ours(&lease(&record("b", true, 3), "12"), "a", 3));
    }
}
