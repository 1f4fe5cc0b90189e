//! What the `redis` and `redlock` backends share for a switchover.
//!
//! - **Live candidates**: a sorted set `leasekeeper:{<election>}:candidates` of
//!   identities scored by the Unix ms until which each counts as alive. Every
//!   candidate adds itself at its first campaign and then once every
//!   [`Listing::every`] while it follows (one request, no script); a member whose
//!   score has passed is gone (a crashed candidate drops out within three periods).
//! - **Reservation**: `leasekeeper:{<election>}:to` = the named candidate's identity,
//!   with a PX of one ttl, written by the leader in the same round trip as its
//!   release. While it lives, the take scripts refuse every other candidate (they see
//!   nobody holding the lock and wait for the key's expiry or the next notice); the
//!   named candidate's take deletes it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Lua prelude of the take scripts: `reserved(key, me)` is the reservation's pttl when
/// the lock is left to another candidate; the named one's look deletes the key.
pub(crate) const RESERVED: &str = r#"
local function reserved(key, me)
  local to = redis.call('GET', key)
  if to and to ~= me then
    return redis.call('PTTL', key)
  end
  if to then
    redis.call('DEL', key)
  end
  return nil
end
"#;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// When a candidate next adds itself to the live candidates.
#[derive(Debug)]
pub(crate) struct Listing {
    every: Duration,
    next: Option<Instant>,
}

impl Listing {
    /// Once every half ttl, between 1 s and 10 s.
    pub(crate) fn new(ttl: Duration) -> Self {
        Listing {
            every: (ttl / 2).clamp(Duration::from_secs(1), Duration::from_secs(10)),
            next: None,
        }
    }

    /// The request that lists `identity` as alive, if one is due at `now`.
    pub(crate) fn due(
        &mut self,
        now: Instant,
        set: &str,
        identity: &str,
    ) -> Option<redis::Pipeline> {
        if self.next.is_some_and(|n| now < n) {
            return None;
        }
        self.next = Some(now + self.every);
        let alive_until = unix_ms() + 3 * self.every.as_millis() as u64;
        let mut pipe = redis::pipe();
        pipe.zadd(set, identity, alive_until)
            .ignore()
            .zrembyscore(set, "-inf", unix_ms())
            .ignore()
            .pexpire(set, 3 * self.every.as_millis() as i64)
            .ignore();
        Some(pipe)
    }
}

/// The request for the identities listed as alive now.
pub(crate) fn live(set: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("ZRANGEBYSCORE");
    cmd.arg(set).arg(unix_ms()).arg("+inf");
    cmd
}

/// The reservation for `to`, for `ttl`.
pub(crate) fn reserve(key: &str, to: &str, ttl: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key)
        .arg(to)
        .arg("PX")
        .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1));
    cmd
}
