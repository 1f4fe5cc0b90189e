//! Lease timing: the ttl and every interval the elector and the backends use, with the
//! flags that set them and the checks that keep a leader able to renew in time.
//!
//! The claim a renewal buys is [`Timing::claim_length`]: the ttl shrunk by the clock
//! drift factor and the safety margin (DESIGN §2, invariant 2).

use std::time::Duration;

use crate::settings::{bad, fmt_d, parse_duration, ConfigError};

/// The timing flags (`--ttl` and the intervals derived from it).
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Lease timing")]
pub struct Args {
    /// Lease time to live, like 15s or 1500ms [default: 15s].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_TTL",
        allow_hyphen_values = true
    )]
    pub ttl: Option<String>,
    /// How often the leader renews [default: ttl/3].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_RENEW_INTERVAL",
        allow_hyphen_values = true
    )]
    pub renew_interval: Option<String>,
    /// Fallback re-check period for followers [default: ttl/3].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_RETRY_INTERVAL",
        allow_hyphen_values = true
    )]
    pub retry_interval: Option<String>,
    /// Time limit of each backend call [default: ttl/5, at most 5s].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_BACKEND_TIMEOUT",
        allow_hyphen_values = true
    )]
    pub backend_timeout: Option<String>,
    /// Clock drift allowed, as a fraction of the ttl [default: 0.01].
    #[arg(
        long,
        value_name = "FRACTION",
        env = "LEASEKEEPER_CLOCK_DRIFT",
        allow_hyphen_values = true
    )]
    pub clock_drift: Option<String>,
    /// Taken off every local deadline [default: ttl/100, at least 10ms].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_SAFETY_MARGIN",
        allow_hyphen_values = true
    )]
    pub safety_margin: Option<String>,
}

/// Lease timing; every duration the elector uses comes from here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub ttl: Duration,
    pub renew_interval: Duration,
    pub retry_interval: Duration,
    pub backend_timeout: Duration,
    pub clock_drift: f64,
    pub safety_margin: Duration,
}

impl Timing {
    /// The defaults of DESIGN §6 for a given ttl.
    pub fn for_ttl(ttl: Duration) -> Self {
        Timing {
            ttl,
            renew_interval: ttl / 3,
            retry_interval: ttl / 3,
            backend_timeout: (ttl / 5).min(Duration::from_secs(5)),
            clock_drift: 0.01,
            safety_margin: (ttl / 100).max(Duration::from_millis(10)),
        }
    }

    /// How long a claim may be asserted after the request that established it was sent.
    pub fn claim_length(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(1.0 - self.clock_drift)
            .saturating_sub(self.safety_margin)
    }

    /// Whether a renewal sent a renew interval into a claim of length `claim`, and
    /// answered within the backend timeout, arrives before the claim ends. Validation
    /// asks it of the configured ttl's claim, the elector of the claim a store's
    /// granted ttl buys: one rule, so a ttl granted as asked is never taken for a
    /// shorter one.
    pub fn renews_in_time(&self, claim: Duration) -> bool {
        self.renew_interval + self.backend_timeout < claim
    }
}

impl Args {
    /// The flags read and checked against each other.
    pub fn timing(&self) -> Result<Timing, ConfigError> {
        let ttl = match &self.ttl {
            Some(raw) => parse_duration("--ttl", raw)?,
            None => Duration::from_secs(15),
        };
        let mut t = Timing::for_ttl(ttl);
        if let Some(raw) = &self.renew_interval {
            t.renew_interval = parse_duration("--renew-interval", raw)?;
        }
        if let Some(raw) = &self.retry_interval {
            t.retry_interval = parse_duration("--retry-interval", raw)?;
        }
        if let Some(raw) = &self.backend_timeout {
            t.backend_timeout = parse_duration("--backend-timeout", raw)?;
        }
        if let Some(raw) = &self.safety_margin {
            t.safety_margin = safety_margin(raw)?;
        }
        if let Some(raw) = &self.clock_drift {
            t.clock_drift = clock_drift(raw)?;
        }
        check(&t)?;
        Ok(t)
    }
}

/// A margin may be zero (unlike the other durations).
fn safety_margin(raw: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(raw.trim()).map_err(|_| {
        bad(format!(
            "--safety-margin {raw:?} is not a duration; write it like 50ms"
        ))
    })
}

fn clock_drift(raw: &str) -> Result<f64, ConfigError> {
    raw.trim()
        .parse::<f64>()
        .ok()
        .filter(|d| (0.0..0.5).contains(d))
        .ok_or_else(|| {
            bad(format!(
                "--clock-drift {raw:?} must be a fraction from 0 up to 0.5, like 0.01"
            ))
        })
}

/// The intervals must fit in the ttl, and a renewal must be able to arrive in time.
fn check(t: &Timing) -> Result<(), ConfigError> {
    let ttl = t.ttl;
    if ttl < Duration::from_millis(100) {
        return Err(bad(format!(
            "--ttl {} is too short; use at least 100ms",
            fmt_d(ttl)
        )));
    }
    if t.renew_interval >= ttl {
        return Err(bad(format!(
            "--ttl {} is not longer than --renew-interval {}; the leader could never renew in time",
            fmt_d(ttl),
            fmt_d(t.renew_interval)
        )));
    }
    if t.retry_interval >= ttl {
        return Err(bad(format!(
            "--retry-interval {} is not shorter than --ttl {}; followers would report a stale leader between checks",
            fmt_d(t.retry_interval),
            fmt_d(ttl)
        )));
    }
    if t.backend_timeout >= ttl {
        return Err(bad(format!(
            "--backend-timeout {} is not shorter than --ttl {}; a hung call would outlive the lease",
            fmt_d(t.backend_timeout),
            fmt_d(ttl)
        )));
    }
    let claim = t.claim_length(ttl);
    if !t.renews_in_time(claim) {
        return Err(bad(format!(
            "--ttl {} leaves a claim of {} after drift and margin, not more than --renew-interval {} plus --backend-timeout {}; the leader could lose every lease it renews",
            fmt_d(ttl),
            fmt_d(claim),
            fmt_d(t.renew_interval),
            fmt_d(t.backend_timeout)
        )));
    }
    Ok(())
}
