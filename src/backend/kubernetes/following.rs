//! A follower's wait on the Lease: the watch it opens from the version it read, what
//! each event means to the core ([`super::follow::FollowWatch`]), and when it looks
//! again.

use std::time::Duration;

use tokio::time::{sleep_until, timeout_at, Instant};

use super::answers::{Heard, Refusal};
use super::core::Wait;
use super::follow::{FollowWatch, Then};
use super::watches::LeaseEvents;
use super::{split, KubeTransport};
use crate::backend::Wake;

impl KubeTransport {
    /// How a follower waits at `now` for `max` at most: `None`, not at all; else until
    /// when, until when nothing can change without an event, and the version to open a
    /// watch from (none: the kept one goes on).
    fn plan_wait(
        &mut self,
        now: Instant,
        max: Duration,
    ) -> Option<((Instant, Instant), Option<String>)> {
        let phase = self.take_phase();
        let (phase, wait) = phase.wait(now, max, self.us());
        self.phase = phase;
        // Nothing read yet (or a create lost a race), free, handed to us, or expired:
        // campaign now.
        let Wait::Watch {
            until,
            expires,
            version,
        } = wait
        else {
            return None;
        };
        let (watch, open) = std::mem::take(&mut self.follow_watch).towards(version);
        self.set_follow_watch(watch);
        Some(((until, expires), open))
    }

    /// The answer to opening the follower's watch from `version` (`None`: not by
    /// `until`).
    fn follow_opened(
        &mut self,
        answer: Option<Result<LeaseEvents, Refusal>>,
        version: String,
        until: Instant,
    ) -> Then {
        let (answer, events) = match answer.map(split) {
            Some((answer, events)) => (Some(answer), events),
            None => (None, None),
        };
        let answer = answer.as_ref().map(|a| a.as_ref().map(|_| ()));
        let (watch, then) = FollowWatch::opened(answer, version, Instant::now(), until);
        if let Some(events) = events.filter(|_| watch.is_open()) {
            self.follow_events.set(events);
        }
        self.set_follow_watch(watch);
        then
    }

    /// One answer of the follower's watch (`None`: the time is up).
    fn follow_heard(&mut self, heard: Option<Heard>, window: (Instant, Instant)) -> Then {
        let watch = std::mem::take(&mut self.follow_watch);
        let phase = self.take_phase();
        let (watch, phase, then) = watch.heard(phase, heard, Instant::now(), window);
        self.phase = phase;
        self.set_follow_watch(watch);
        then
    }

    /// A follower's wait, `max` at most (see [`super::Transport::wait`]).
    pub(super) async fn wait_for_change(&mut self, max: Duration) -> Wake {
        let Some((window, open)) = self.plan_wait(Instant::now(), max) else {
            return Wake::Changed;
        };
        let (until, _) = window;
        let mut then = Then::Read;
        if let Some(version) = open {
            let answer = timeout_at(until, self.api.watch_follow(&version)).await;
            then = self.follow_opened(answer.ok(), version, until);
        }
        loop {
            match then {
                Then::Read => {}
                Then::Wake(wake) => return wake,
                Then::LookAt(t) => {
                    sleep_until(t).await;
                    return Wake::Changed;
                }
            }
            let heard = self.follow_events.next(Some(until)).await;
            then = self.follow_heard(heard, window);
        }
    }
}
