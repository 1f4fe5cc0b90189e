//! What the `redis` and `redlock` backends share for a switchover.
//!
//! - **Live candidates** are the server's own notion of presence, not a list anyone
//!   keeps: every candidate's pub/sub connection (the one that listens for release
//!   news) also subscribes to its own *presence channel*
//!   `leasekeeper:{<election>}:cand:<identity>`, once per connection, and the server
//!   lists the channels with a subscriber (`PUBSUB CHANNELS <pattern>`). A candidate
//!   is listed from its subscription until its connection closes (a killed process's
//!   at once), and costs nothing in between: followers send no request to stay listed.
//!   Nobody ever publishes there. (In a Redis Cluster, `PUBSUB CHANNELS` answers for
//!   one node only: the listener must subscribe on the node that is asked.)
//! - **Reservation**: `leasekeeper:{<election>}:to` = the named candidate's identity,
//!   with a PX of one ttl, written by the leader in the same round trip as its
//!   release. While it lives, the take scripts refuse every other candidate (they see
//!   nobody holding the lock and wait for the key's expiry or the next notice); the
//!   named candidate's take deletes it.

use std::time::Duration;

/// Lua prelude of the take scripts: `reserved(key, me)` is the reservation's pttl when
/// the lock is left to another candidate; the named one's look deletes the key.
pub(crate) const RESERVED: &str = include_str!("lua/reserved.lua");

/// The presence channel of `identity`, under the election's `prefix`.
pub(crate) fn presence_channel(prefix: &str, identity: &str) -> String {
    format!("{prefix}{identity}")
}

/// The `PUBSUB CHANNELS` pattern for every presence channel under `prefix`: the
/// prefix with glob characters escaped, then `*`.
pub(crate) fn presence_pattern(prefix: &str) -> String {
    let mut p = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('*');
    p
}

/// The identities behind the presence `channels` the server listed, sorted, once each.
pub(crate) fn identities(prefix: &str, channels: Vec<String>) -> Vec<String> {
    let mut live: Vec<String> = channels
        .into_iter()
        .filter_map(|c| c.strip_prefix(prefix).map(str::to_owned))
        .collect();
    live.sort();
    live.dedup();
    live
}

/// The request for the presence channels with a subscriber now.
pub(crate) fn live(prefix: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("PUBSUB");
    cmd.arg("CHANNELS").arg(presence_pattern(prefix));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_channels_are_listed_by_an_escaped_pattern() {
        let prefix = "leasekeeper:{a*b?[c]\\}:cand:";
        assert_eq!(
            presence_pattern(prefix),
            "leasekeeper:{a\\*b\\?\\[c\\]\\\\}:cand:*"
        );
        assert_eq!(presence_channel(prefix, "pod-1"), format!("{prefix}pod-1"));
        let listed = vec![
            presence_channel(prefix, "pod-2"),
            presence_channel(prefix, "pod 1|x"),
            presence_channel(prefix, "pod-2"),
            "leasekeeper:{other}:cand:pod-3".to_owned(),
        ];
        assert_eq!(identities(prefix, listed), ["pod 1|x", "pod-2"]);
    }

    #[test]
    fn a_reservation_lasts_a_ttl_and_at_least_a_millisecond() {
        let packed = |c: redis::Cmd| String::from_utf8_lossy(&c.get_packed_command()).into_owned();
        let c = packed(reserve("k", "to", Duration::from_secs(2)));
        assert!(c.ends_with("$2\r\nPX\r\n$4\r\n2000\r\n"), "{c:?}");
        let c = packed(reserve("k", "to", Duration::ZERO));
        assert!(c.ends_with("$2\r\nPX\r\n$1\r\n1\r\n"), "{c:?}");
        let c = packed(live("p:"));
        assert!(c.contains("CHANNELS\r\n$3\r\np:*\r\n"), "{c:?}");
    }
}
