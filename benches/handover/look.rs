//! Looking for the end of a handover without taking the CPU it runs on.
//!
//! Every latency is read from instants the processes log themselves (the signal's
//! send, the new claim's start, a peer's stamp), so when the bench looks does not
//! change a figure; but each look reads and parses every log, and on a small machine
//! a look made while the handover runs takes a core from the processes being timed.
//! So the first look comes after a graceful handover has long ended, and the next
//! ones at a steady, slow pace (a crash failover waits out a ttl).

use std::time::Duration;

use crate::common::{polled, POLL_EVERY};

/// The first look after a stop: past every graceful handover but the slowest.
const FIRST_LOOK: Duration = Duration::from_millis(20);

/// `f`'s first `Some`, looking [`FIRST_LOOK`] after the call and then every
/// [`POLL_EVERY`], for `limit` at most; `None` when it never came.
pub fn after_stop<T>(limit: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    // Pause: the handover runs undisturbed (see the module doc).
    std::thread::sleep(FIRST_LOOK.min(limit));
    polled(limit.saturating_sub(FIRST_LOOK), POLL_EVERY, f)
}
