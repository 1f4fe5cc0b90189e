//! The requests of an election's candidate on one Redis server, built without being
//! sent: the take script, the renewal, the release (with a switchover's reservation
//! and the baton waiter's unblock) and the announcement. [`super::RedisBackend`] sends
//! them and hands the answers to its core.

use std::time::Duration;

use redis::{Cmd, Pipeline, Script, ScriptInvocation};

use super::{baton, switchover, Keys, ACQUIRE, CLOCK, QUEUE, READERS, RELEASE, RELEASE_END, RENEW};
use crate::status::FencingToken;

/// One candidate's names, identity, ttl and scripts.
pub(super) struct Requests {
    pub(super) keys: Keys,
    identity: String,
    ttl: Duration,
    acquire: Script,
    renew: Script,
    /// The release script, with the baton's hand-out.
    release: String,
}

impl Requests {
    pub(super) fn new(keys: Keys, identity: &str, ttl: Duration) -> Requests {
        Requests {
            keys,
            identity: identity.to_owned(),
            ttl,
            acquire: Script::new(&format!(
                "{CLOCK}{}{READERS}{QUEUE}{ACQUIRE}",
                switchover::RESERVED
            )),
            renew: Script::new(&format!("{CLOCK}{QUEUE}{RENEW}")),
            release: format!(
                "{QUEUE}{RELEASE}{}{RELEASE_END}",
                baton::hand_out("KEYS[2]", "ARGV[4]")
            ),
        }
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// The take script for our tenure's `prefix` (`<nonce>|`), with tokens from
    /// `floor` and the store's `use_by`.
    pub(super) fn take(
        &self,
        prefix: &str,
        floor: FencingToken,
        use_by: u64,
    ) -> ScriptInvocation<'_> {
        let keys = &self.keys;
        let mut call = self.acquire.prepare_invoke();
        for key in [&keys.lock, &keys.fence, &keys.to, &keys.baton] {
            call.key(key);
        }
        call.key(&keys.readers)
            .key(&keys.writer_waits)
            .key(&keys.busy);
        call.arg(prefix)
            .arg(&self.identity)
            .arg(self.ttl_ms())
            .arg(floor)
            .arg(&keys.events)
            .arg(use_by)
            .arg(&keys.presence)
            .arg(&keys.rw);
        call
    }

    /// The compare-and-PEXPIRE of our tenure's `value`.
    pub(super) fn renew(&self, value: &str, use_by: u64) -> ScriptInvocation<'_> {
        let keys = &self.keys;
        let mut call = self.renew.prepare_invoke();
        call.key(&keys.lock)
            .key(&keys.alive)
            .key(&keys.writer_waits)
            .key(&keys.busy);
        call.arg(value).arg(self.ttl_ms()).arg(use_by);
        call
    }

    /// The release of the tenure of `prefix`, in one round trip: the baton waiter's
    /// `unblock` first (a candidate that lets go waits for no baton: one it popped
    /// would wake nobody else), then a switchover's reservation for `to`, then the
    /// script. `EVAL` with the script's text, not `EVALSHA`: one round trip whatever
    /// the server has cached (a server that never ran the release script, or
    /// restarted, would answer `EVALSHA` with `NOSCRIPT`, and `SCRIPT LOAD` and
    /// `EVALSHA` again make three: on a slow link they miss the release budget, and
    /// the followers wait a ttl).
    pub(super) fn release(&self, prefix: &str, to: Option<&str>, unblock: Option<Cmd>) -> Pipeline {
        let keys = &self.keys;
        let mut release = redis::pipe();
        if let Some(unblock) = unblock {
            release.add_command(unblock).ignore();
        }
        if let Some(to) = to {
            release
                .add_command(switchover::reserve(&keys.to, to, self.ttl))
                .ignore();
        }
        release
            .cmd("EVAL")
            .arg(&self.release)
            .arg(4)
            .arg(&keys.lock)
            .arg(&keys.baton)
            .arg(&keys.writer_waits)
            .arg(&keys.busy)
            .arg(prefix)
            .arg(&keys.events)
            .arg(if to.is_some() { "all" } else { "one" })
            .arg(self.ttl_ms().max(1))
            .arg(&keys.rw);
        release
    }

    /// A new leader's announcement of its `value` (see [`baton`]).
    pub(super) fn announce(&self, value: &str) -> Cmd {
        let mut publish = redis::cmd("PUBLISH");
        publish
            .arg(&self.keys.leader)
            .arg(format!("acquired|{value}"));
        publish
    }
}
