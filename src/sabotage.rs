//! Deliberate misbehaviour, for the election checker's self-tests only: they must see
//! the checker fail when a sidecar claims longer than it may. Compiled into debug
//! builds only (the tests' binary); a release build has no such switch.
//!
//! `LEASEKEEPER_TEST_OVERCLAIM=<duration>` makes the elector (1) claim that much past
//! its conservative deadline, and (2) on every voluntary or forced end of a tenure,
//! give the lease back first and go on claiming that much longer.
//! `LEASEKEEPER_TEST_CLAIM_ON_ERROR=1` makes a failed campaign count as won.

use std::time::Duration;

/// The configured overclaim; zero unless a debug build was asked to misbehave.
#[cfg(debug_assertions)]
pub fn overclaim() -> Duration {
    use std::sync::OnceLock;
    static OVERCLAIM: OnceLock<Duration> = OnceLock::new();
    *OVERCLAIM.get_or_init(|| {
        std::env::var("LEASEKEEPER_TEST_OVERCLAIM")
            .ok()
            .and_then(|raw| humantime::parse_duration(raw.trim()).ok())
            .inspect(
                |d| tracing::error!(overclaim = %crate::settings::fmt_d(*d), "misbehaving on purpose (checker self-test)"),
            )
            .unwrap_or(Duration::ZERO)
    })
}

/// The configured overclaim; always zero in a release build.
#[cfg(not(debug_assertions))]
pub fn overclaim() -> Duration {
    Duration::ZERO
}

/// Whether a failed campaign is to be taken for a won one
/// (`LEASEKEEPER_TEST_CLAIM_ON_ERROR=1`, debug builds only): a candidate cut off from
/// the store then claims a lease it does not hold.
#[cfg(debug_assertions)]
pub fn claims_on_error() -> bool {
    use std::sync::OnceLock;
    static CLAIMS: OnceLock<bool> = OnceLock::new();
    *CLAIMS.get_or_init(|| {
        let on = std::env::var("LEASEKEEPER_TEST_CLAIM_ON_ERROR").is_ok_and(|v| v == "1");
        if on {
            tracing::error!("claiming on failed campaigns on purpose (checker self-test)");
        }
        on
    })
}

/// Whether a failed campaign is to be taken for a won one; never in a release build.
#[cfg(not(debug_assertions))]
pub fn claims_on_error() -> bool {
    false
}
