//! A follower's watch on the Lease as a state machine ([`FollowWatch`]), kept open
//! across the holder's renewals: each renewal arrives as an event on it, so a follower
//! sends no request while the holder renews (it is opened again only when it ends or
//! stands elsewhere than our observation). What each answer means for one wait
//! ([`Then`]) is decided here, with the campaign's [`Phase`]; no I/O and no clock.

use tokio::time::Instant;

use super::answers::{Heard, Refusal};
use super::core::{Event, FollowEvent, Phase};
use super::own::SETTLE;
use crate::backend::Wake;

/// How long the API server keeps a follower's watch open (kube refuses 295 s or more).
pub(super) const FOLLOW_WATCH_SECS: u32 = 290;

/// Where the follower's watch stands (the stream itself is the transport's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum FollowWatch {
    #[default]
    Closed,
    /// Open since `opened`; `at` is the version of the last event read from it.
    Open { at: Option<String>, opened: Instant },
}

/// How a follower's wait goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Then {
    /// Read the watch's next event.
    Read,
    /// The wait ends with this.
    Wake(Wake),
    /// The watch failed or ended: look again ([`Wake::Changed`]), but not before this (a
    /// watch that ends soon after it opened must not become a tight loop of reads).
    LookAt(Instant),
}

impl FollowWatch {
    pub(super) fn is_open(&self) -> bool {
        matches!(self, FollowWatch::Open { .. })
    }

    /// A wait on the Lease as observed at `version`: the kept watch goes on when it
    /// stands there (the read of a campaign that changed nothing leaves it there); else
    /// it is closed, and the version to open one from is returned.
    pub(super) fn towards(self, version: String) -> (FollowWatch, Option<String>) {
        match &self {
            FollowWatch::Open { at: Some(at), .. } if *at == version => (self, None),
            _ => (FollowWatch::Closed, Some(version)),
        }
    }

    /// The answer to opening the watch from `version` at `now` (`None`: not by `until`):
    /// open, or the wait ends (no watch: poll, at `until`).
    pub(super) fn opened(
        answer: Option<Result<(), &Refusal>>,
        version: String,
        now: Instant,
        until: Instant,
    ) -> (FollowWatch, Then) {
        match answer {
            Some(Ok(())) => {
                let open = FollowWatch::Open {
                    at: Some(version),
                    opened: now,
                };
                (open, Then::Read)
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "watching the lease failed; polling instead");
                (FollowWatch::Closed, Then::LookAt(until))
            }
            None => (FollowWatch::Closed, Then::Wake(Wake::Changed)),
        }
    }

    /// One answer of the watch in a wait until `until`: `heard` (`None`: the time is up
    /// at `now`), with the campaign's `phase`; before `expires`, nothing can change
    /// without an event on the watch.
    pub(super) fn heard(
        self,
        phase: Phase,
        heard: Option<Heard>,
        now: Instant,
        (until, expires): (Instant, Instant),
    ) -> (FollowWatch, Phase, Then) {
        let FollowWatch::Open { at, opened } = self else {
            return (FollowWatch::Closed, phase, Then::Wake(Wake::Changed));
        };
        let settle = Then::LookAt(until.min(opened + SETTLE));
        let (at, event) = match heard {
            // The time is up. Before the rival's record may have expired, the open
            // watch would have told of any change: wait on (no read). Else look again;
            // the watch stays open for the next wait.
            None => {
                let wake = if now < expires {
                    Wake::Waiting
                } else {
                    Wake::Changed
                };
                return (FollowWatch::Open { at, opened }, phase, Then::Wake(wake));
            }
            Some(Heard::Written(lease)) => {
                let version = lease.metadata.resource_version.clone();
                (version, FollowEvent::Written(lease))
            }
            Some(Heard::Deleted(version)) => (version.clone(), FollowEvent::Deleted(version)),
            Some(Heard::Bookmark(_)) => {
                return (FollowWatch::Open { at, opened }, phase, Then::Read);
            }
            Some(ended) => {
                match ended {
                    // 410 Gone among them: the campaign's read lists afresh.
                    Heard::Error(code) => {
                        tracing::debug!(code, "the lease watch ended with an error")
                    }
                    Heard::Broke(e) => tracing::debug!(error = %e, "the lease watch broke"),
                    _ => {}
                }
                return (FollowWatch::Closed, phase, settle);
            }
        };
        let (phase, event) = phase.on_follow_event(event, now);
        let then = match event {
            Event::Changed => Then::Wake(Wake::Changed),
            Event::Renewed => Then::Wake(Wake::Quiet),
            Event::Nothing => Then::Read,
        };
        (FollowWatch::Open { at, opened }, phase, then)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::rules::tests::{lease, record};
    use super::*;

    const UNTIL: Duration = Duration::from_secs(10);

    fn open(t: Instant) -> FollowWatch {
        FollowWatch::opened(Some(Ok(())), "5".to_owned(), t, t + UNTIL).0
    }

    fn follower(t: Instant) -> Phase {
        Phase::Unseen.observe(lease(&record("b", true, 1), "5"), t)
    }

    #[test]
    fn a_kept_watch_goes_on_only_from_where_the_observation_stands() {
        let t = Instant::now();
        let (kept, from) = open(t).towards("5".to_owned());
        assert_eq!((kept.is_open(), from), (true, None));
        let (closed, from) = open(t).towards("6".to_owned());
        assert_eq!((closed, from), (FollowWatch::Closed, Some("6".to_owned())));
        let (_, from) = FollowWatch::Closed.towards("5".to_owned());
        assert_eq!(from, Some("5".to_owned()));
    }

    #[test]
    fn no_watch_means_polling_at_the_end_of_the_wait() {
        let t = Instant::now();
        let refused = Refusal {
            code: Some(403),
            message: "forbidden".to_owned(),
        };
        let answer = FollowWatch::opened(Some(Err(&refused)), "5".to_owned(), t, t + UNTIL);
        assert_eq!(answer, (FollowWatch::Closed, Then::LookAt(t + UNTIL)));
        let late = FollowWatch::opened(None, "5".to_owned(), t, t + UNTIL);
        assert_eq!(late, (FollowWatch::Closed, Then::Wake(Wake::Changed)));
    }

    #[test]
    fn a_change_wakes_a_renewal_is_quiet_and_a_bookmark_reads_on() {
        let t = Instant::now();
        let window = (t + UNTIL, t + UNTIL);
        let renewed = lease(&record("b", true, 1), "6");
        let heard = Some(Heard::Written(Box::new(renewed)));
        let (watch, phase, then) = open(t).heard(follower(t), heard, t, window);
        assert_eq!(then, Then::Wake(Wake::Quiet));
        // The watch now stands at the event's version.
        assert_eq!(watch.clone().towards("6".to_owned()).1, None);
        let bookmark = Some(Heard::Bookmark("7".to_owned()));
        let (watch, phase, then) = watch.heard(phase, bookmark, t, window);
        assert_eq!(then, Then::Read);
        let released = lease(&record("", true, 1), "8");
        let heard = Some(Heard::Written(Box::new(released)));
        let (_, phase, then) = watch.heard(phase, heard, t, window);
        assert_eq!(then, Then::Wake(Wake::Changed));
        assert!(matches!(phase, Phase::Watched(_)));
    }

    #[test]
    fn the_time_up_waits_on_before_the_record_may_expire() {
        let t = Instant::now();
        let expires = t + UNTIL;
        let window = (t + Duration::from_secs(2), expires);
        let (watch, _, then) = open(t).heard(follower(t), None, t, window);
        assert_eq!(then, Then::Wake(Wake::Waiting));
        assert!(watch.is_open(), "the watch stays open for the next wait");
        let (_, _, then) = open(t).heard(follower(t), None, expires, window);
        assert_eq!(then, Then::Wake(Wake::Changed));
    }

    #[test]
    fn a_watch_that_ends_soon_after_it_opened_settles_first() {
        let t = Instant::now();
        let window = (t + UNTIL, t + UNTIL);
        for ended in [
            Heard::Ended,
            Heard::Error(410),
            Heard::Broke("reset".into()),
        ] {
            let (watch, _, then) = open(t).heard(follower(t), Some(ended), t, window);
            assert_eq!(
                (watch, then),
                (FollowWatch::Closed, Then::LookAt(t + SETTLE))
            );
        }
        // Never after the end of the wait.
        let short = (t + Duration::from_millis(100), t);
        let (_, _, then) = open(t).heard(follower(t), Some(Heard::Ended), t, short);
        assert_eq!(then, Then::LookAt(t + Duration::from_millis(100)));
    }
}
