//! The requests of a candidate on one Redis server, built without being sent, and the
//! take's answer read: the take script, the renewal, the release (with a switchover's
//! reservation and the baton waiter's unblock) and the announcement. The scripts are
//! the election's, or the read-write lock's for a `--mode` candidate (see [`rw`]),
//! picked once by the mode. [`super::RedisBackend`] sends them and hands the answers
//! to its core.

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, Pipeline, Script, ScriptInvocation, Value};

use super::rw::{self, RENEW_SHARED, SHOWN};
use super::{baton, switchover, Keys, ACQUIRE, CLOCK, QUEUE, READERS, RELEASE, RELEASE_END, RENEW};
use crate::backend::LockMode;
use crate::status::FencingToken;

/// One answer of the take script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Take {
    /// 1 taken (or adopted), 0 not, [`super::REFUSED`] too late.
    pub(super) won: i64,
    /// Ours when won, else the holder's (empty: nobody).
    pub(super) value: String,
    /// The holder's expiry in ms (-1, -2: none or unknown); kept out by the shared
    /// holders or a place ahead: until what keeps us out goes.
    pub(super) pttl: i64,
    /// What kept it out: 0 a holder of the lock key or nothing, 3 the shared holders,
    /// 4 a place ahead in the queue.
    pub(super) why: i64,
    /// The shared holders the take listed (a `--mode` candidate's take only).
    pub(super) readers: Vec<String>,
}

/// One candidate's names, identity, ttl, mode and scripts.
pub(super) struct Requests {
    pub(super) keys: Keys,
    identity: String,
    ttl: Duration,
    mode: LockMode,
    acquire: Script,
    renew: Script,
    /// The release script, with the baton's hand-out.
    release: String,
}

impl Requests {
    pub(super) fn new(keys: Keys, identity: &str, ttl: Duration, mode: LockMode) -> Requests {
        let read_write = mode != LockMode::Election;
        let (take, renew) = match mode {
            LockMode::Election => (ACQUIRE, RENEW),
            LockMode::Exclusive => (rw::TAKE, RENEW),
            LockMode::Shared => (rw::TAKE, RENEW_SHARED),
        };
        let release = if read_write {
            let hand_out = baton::hand_out("KEYS[4]", "ARGV[3]");
            format!("{CLOCK}{QUEUE}{}{hand_out}{}", rw::RELEASE, rw::RELEASE_END)
        } else {
            let hand_out = baton::hand_out("KEYS[2]", "ARGV[4]");
            format!("{QUEUE}{RELEASE}{hand_out}{RELEASE_END}")
        };
        Requests {
            keys,
            identity: identity.to_owned(),
            ttl,
            mode,
            acquire: Script::new(&format!(
                "{CLOCK}{}{READERS}{QUEUE}{take}",
                switchover::RESERVED
            )),
            renew: Script::new(&format!("{CLOCK}{QUEUE}{renew}")),
            release,
        }
    }

    fn rw(&self) -> bool {
        self.mode != LockMode::Election
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
        if self.rw() {
            return self.rw_take(call, prefix, floor, use_by);
        }
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

    /// The read-write lock's take ([`rw::TAKE`]), shared or exclusive by the mode.
    fn rw_take<'a>(
        &'a self,
        mut call: ScriptInvocation<'a>,
        prefix: &str,
        floor: FencingToken,
        use_by: u64,
    ) -> ScriptInvocation<'a> {
        let keys = &self.keys;
        for key in [&keys.lock, &keys.fence, &keys.readers, &keys.writer_waits] {
            call.key(key);
        }
        call.key(&keys.to).key(&keys.baton).key(&keys.busy);
        call.arg(prefix)
            .arg(&self.identity)
            .arg(self.ttl_ms())
            .arg(floor)
            .arg(&keys.events)
            .arg(use_by)
            .arg(self.mode.flag().unwrap_or("exclusive"))
            .arg(SHOWN)
            .arg(&keys.presence)
            .arg(&keys.rw);
        call
    }

    /// Reads a take script's answer (its code, the value, the pttl, and its last
    /// part: what kept it out, or the read-write lock's listed shared holders).
    pub(super) fn answer(
        &self,
        code: i64,
        value: String,
        pttl: i64,
        last: Value,
    ) -> Result<Take, String> {
        let unreadable = |e: ParsingError| format!("unreadable answer of the take script: {e}");
        let ((won, why), readers) = if self.rw() {
            let readers = Vec::<String>::from_redis_value(last).map_err(unreadable)?;
            (rw::judge(code)?, readers)
        } else {
            let why = i64::from_redis_value(last).map_err(unreadable)?;
            ((code, why), Vec::new())
        };
        Ok(Take {
            won,
            value,
            pttl,
            why,
            readers,
        })
    }

    /// The renewal of our tenure's `value`: the compare-and-PEXPIRE of the lock key
    /// (an election's or an exclusive holder's), or a shared holder's compare-and-act
    /// on its entry ([`RENEW_SHARED`]).
    pub(super) fn renew(&self, value: &str, use_by: u64) -> ScriptInvocation<'_> {
        let keys = &self.keys;
        let mut call = self.renew.prepare_invoke();
        if self.mode == LockMode::Shared {
            call.key(&keys.readers).key(&keys.lock);
        } else {
            call.key(&keys.lock).key(&keys.alive);
        }
        call.key(&keys.writer_waits).key(&keys.busy);
        call.arg(value).arg(self.ttl_ms()).arg(use_by);
        if self.rw() {
            call.arg(&keys.presence).arg(&keys.rw);
        }
        call
    }

    /// The release of the tenure of `prefix`, in one round trip: `CLIENT TRACKING OFF`
    /// first when the tenure's tracking is on (`tracking_off`: the claim has ended, and the
    /// release's own `DEL` and the next holder's take then push nothing to this
    /// connection), the baton waiter's `unblock` (a candidate that lets go waits for no
    /// baton: one it popped would wake nobody else), then a switchover's reservation for
    /// `to`, then the script. `EVAL` with the script's text, not `EVALSHA`: one round trip
    /// whatever the server has cached (a server that never ran the release script, or
    /// restarted, would answer `EVALSHA` with `NOSCRIPT`, and `SCRIPT LOAD` and `EVALSHA`
    /// again make three: on a slow link they miss the release budget, and the followers
    /// wait a ttl).
    pub(super) fn release(
        &self,
        prefix: &str,
        to: Option<&str>,
        unblock: Option<Cmd>,
        tracking_off: bool,
    ) -> Pipeline {
        let keys = &self.keys;
        let mut release = redis::pipe();
        if tracking_off {
            release.cmd("CLIENT").arg("TRACKING").arg("OFF").ignore();
        }
        if let Some(unblock) = unblock {
            release.add_command(unblock).ignore();
        }
        if let Some(to) = to {
            release
                .add_command(switchover::reserve(&keys.to, to, self.ttl))
                .ignore();
        }
        if self.rw() {
            release.add_command(self.rw_release(prefix));
            return release;
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

    /// The read-write lock's release ([`rw::RELEASE`]) of the tenure of `prefix`.
    fn rw_release(&self, prefix: &str) -> Cmd {
        let keys = &self.keys;
        let mut release = redis::cmd("EVAL");
        release.arg(&self.release).arg(5);
        for key in [&keys.lock, &keys.readers, &keys.writer_waits, &keys.baton] {
            release.arg(key);
        }
        release
            .arg(&keys.busy)
            .arg(prefix)
            .arg(&keys.rw)
            .arg(self.ttl_ms().max(1));
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
