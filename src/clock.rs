//! Mapping of local monotonic instants to `CLOCK_MONOTONIC` nanoseconds.
//!
//! The transition log records claims in `CLOCK_MONOTONIC` nanoseconds so that logs of
//! different processes on one host can be compared (SIGSTOP does not stop that clock).
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux but does not expose its value,
//! so one pair (Instant, raw nanoseconds) is taken once and every later instant is
//! expressed relative to it.

use std::sync::OnceLock;
use std::time::Instant as StdInstant;

use tokio::time::Instant;

/// Reads `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn base() -> &'static (StdInstant, u64) {
    static BASE: OnceLock<(StdInstant, u64)> = OnceLock::new();
    BASE.get_or_init(|| (StdInstant::now(), monotonic_now_ns()))
}

/// The `CLOCK_MONOTONIC` reading (ns) that corresponds to `at`.
pub fn to_monotonic_ns(at: Instant) -> u64 {
    let (base_instant, base_ns) = *base();
    let at = at.into_std();
    if at >= base_instant {
        base_ns.saturating_add(u64::try_from((at - base_instant).as_nanos()).unwrap_or(u64::MAX))
    } else {
        base_ns.saturating_sub(u64::try_from((base_instant - at).as_nanos()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_agrees_with_the_raw_clock() {
        let before = monotonic_now_ns();
        let mapped = to_monotonic_ns(Instant::now());
        let after = monotonic_now_ns();
        // Allow for the rounding of the one-time base pair.
        assert!(
            mapped + 1_000_000 >= before && mapped <= after + 1_000_000,
            "{before} {mapped} {after}"
        );
    }
}
