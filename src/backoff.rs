//! Exponential backoff: each wait twice the last, from `first` up to `max`.

use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Backoff {
    first: Duration,
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Self {
        let first = first.min(max);
        Backoff {
            first,
            next: first,
            max,
        }
    }

    /// The next wait; the one after it doubles.
    pub fn next_wait(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// Back to the first wait, after a success.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}
