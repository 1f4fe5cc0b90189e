//! What a store's clock reads at a local instant, learnt from answers that carry it.
//!
//! A request that arrives late must not act: a renewal or a campaign the elector has
//! stopped waiting for (its backend timeout passed) would only extend, or take, a
//! record nobody can use, and keep it from the other candidates for another ttl (a
//! slow link, a gray failure). So such a request carries the latest instant at
//! which it may still act, in the store's clock, and the store refuses it after that.
//!
//! The store's clock is read by the scripts themselves (`TIME`), so every answer is
//! a reading `store_ms`, taken at some local instant between the request's send and
//! the answer's receipt. From the reading with the least uncertainty, the store's
//! clock at a later local instant `at` is at most `store_ms + (at − sent) × (1 + 2 ×
//! drift)`: the latest it can read then. A use-by computed that way makes the store
//! refuse only what surely arrived after the local instant, so a timely request is
//! never refused; a wide reading (taken over a slow round trip) only makes the bound
//! looser. This bound decides liveness only: safety stays with the local deadline,
//! and the store's expiry is still counted from each request's arrival.

use std::time::Duration;

use tokio::time::Instant;

/// One answer's reading of the store's clock.
#[derive(Clone, Copy, Debug)]
struct Reading {
    sent: Instant,
    received: Instant,
    store_ms: u64,
}

/// The best reading of one store's clock so far (see the module doc).
#[derive(Clone, Debug)]
pub struct StoreClock {
    drift: f64,
    best: Option<Reading>,
}

impl StoreClock {
    /// `drift`: how far the two clocks' rates may differ each, as a fraction
    /// (`--clock-drift`).
    pub fn new(drift: f64) -> Self {
        StoreClock { drift, best: None }
    }

    /// An answer to a request sent at `sent` and received at `received`, whose store
    /// read its clock at `store_ms` (milliseconds) meanwhile. Kept when it is at least
    /// as certain as the best reading so far, aged to now.
    pub fn learn(&mut self, sent: Instant, received: Instant, store_ms: u64) {
        let new = Reading {
            sent,
            received,
            store_ms,
        };
        let width = received.saturating_duration_since(sent);
        let keep_old = self
            .best
            .is_some_and(|old| self.uncertainty(old, received) < width);
        if !keep_old {
            self.best = Some(new);
        }
    }

    /// The latest the store's clock can read at local instant `at`, in milliseconds;
    /// `None` before any reading, or for an `at` before the best reading was sent.
    pub fn latest_at(&self, at: Instant) -> Option<u64> {
        let best = self.best?;
        let since = at.checked_duration_since(best.sent)?;
        let stretched = since.mul_f64(1.0 + 2.0 * self.drift);
        let ms = u64::try_from(stretched.as_millis()).unwrap_or(u64::MAX);
        // Rounded up: never a millisecond early.
        Some(best.store_ms.saturating_add(ms).saturating_add(1))
    }

    /// The use-by of a request sent now that the elector waits `patience` for: the
    /// latest the store's clock can read when the elector stops waiting. `0` (no
    /// use-by; the store treats it as none) before any reading.
    pub fn use_by(&self, now: Instant, patience: Duration) -> u64 {
        self.latest_at(now + patience).unwrap_or(0)
    }

    /// How far off `reading`'s bound can be at local instant `at`: its round trip, and
    /// the drift since.
    fn uncertainty(&self, reading: Reading, at: Instant) -> Duration {
        let width = reading.received.saturating_duration_since(reading.sent);
        let age = at.saturating_duration_since(reading.sent);
        width + age.mul_f64(2.0 * self.drift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn no_reading_no_use_by() {
        let c = StoreClock::new(0.01);
        let now = Instant::now();
        assert_eq!(c.latest_at(now), None);
        assert_eq!(c.use_by(now, ms(600)), 0);
    }

    #[test]
    fn the_bound_runs_from_the_send_time_stretched_by_the_drift() {
        let mut c = StoreClock::new(0.01);
        let t = Instant::now();
        c.learn(t, t + ms(2), 1_000_000);
        // 1000 ms after the send: at most 1000 × 1.02 + 1 ms later in the store.
        assert_eq!(c.latest_at(t + ms(1000)), Some(1_000_000 + 1020 + 1));
        assert_eq!(c.use_by(t + ms(400), ms(600)), 1_000_000 + 1020 + 1);
        assert_eq!(c.latest_at(t), Some(1_000_001));
        // Before the reading's send it says nothing.
        assert_eq!(c.latest_at(t - ms(1)), None);
    }

    #[test]
    fn a_narrower_reading_replaces_a_wider_one_and_not_the_other_way() {
        let mut c = StoreClock::new(0.01);
        let t = Instant::now();
        // A slow round trip first (3 s wide).
        c.learn(t, t + ms(3000), 5_000);
        assert_eq!(c.latest_at(t + ms(3000)), Some(5_000 + 3060 + 1));
        // A quick one replaces it.
        c.learn(t + ms(4000), t + ms(4001), 9_100);
        assert_eq!(c.latest_at(t + ms(5000)), Some(9_100 + 1020 + 1));
        // Another slow one does not.
        c.learn(t + ms(5000), t + ms(6500), 11_000);
        assert_eq!(c.latest_at(t + ms(7000)), Some(9_100 + 3060 + 1));
    }

    #[test]
    fn an_old_reading_gives_way_once_its_drift_outgrows_a_new_round_trip() {
        let mut c = StoreClock::new(0.01);
        let t = Instant::now();
        c.learn(t, t + ms(1), 0);
        // 10 s later the old one is off by 1 + 200 ms; a 150 ms round trip is better.
        c.learn(t + ms(10_000), t + ms(10_150), 10_000);
        assert_eq!(c.latest_at(t + ms(10_000)), Some(10_001));
        // A 250 ms one would not have been.
        let mut d = StoreClock::new(0.01);
        d.learn(t, t + ms(1), 0);
        d.learn(t + ms(10_000), t + ms(10_250), 10_000);
        assert_eq!(d.latest_at(t + ms(10_000)), Some(10_200 + 1));
    }
}
