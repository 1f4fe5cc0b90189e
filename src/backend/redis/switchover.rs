//! What the `redis` and `redlock` backends share for a switchover.
//!
//! - **Live candidates**: a sorted set `leasekeeper:{<election>}:candidates` of
//!   identities scored by the Unix ms until which each counts as alive. Every
//!   candidate adds itself at its first campaign and then once per [`Listing`] period
//!   while it follows (one request, no script), alive for as long as
//!   [`Listing::alive`] says; a member whose score has passed is gone.
//! - **Reservation**: `leasekeeper:{<election>}:to` = the named candidate's identity,
//!   with a PX of one ttl, written by the leader in the same round trip as its
//!   release. While it lives, the take scripts refuse every other candidate (they see
//!   nobody holding the lock and wait for the key's expiry or the next notice); the
//!   named candidate's take deletes it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// The request that lists `identity` as alive for `alive` from now (and drops the
/// members whose time has passed).
pub(crate) fn listing(set: &str, identity: &str, alive: Duration) -> redis::Pipeline {
    let alive_ms = u64::try_from(alive.as_millis()).unwrap_or(u64::MAX);
    let mut pipe = redis::pipe();
    pipe.zadd(set, identity, unix_ms().saturating_add(alive_ms))
        .ignore()
        .zrembyscore(set, "-inf", unix_ms())
        .ignore()
        .pexpire(set, i64::try_from(alive_ms).unwrap_or(i64::MAX))
        .ignore();
    pipe
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
