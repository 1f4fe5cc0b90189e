//! The requests of a Redlock candidate on one node, built without being sent: the
//! take (phase 1), the confirm (phase 2, when the take round made no token by itself), the renewal, the give-back, a renew round's
//! catch-up, the baton's hand-out and the announcement, with the scripts' text (the
//! preludes and the Lua files). [`super::RedlockTransport`] sends them on every node
//! (see [`super::round`]) and hands the answers to its core.

use std::time::Duration;

use redis::{Pipeline, Script, ScriptInvocation};

use super::rules::Take;
use super::rw;
use crate::backend::redis::{baton, switchover, Keys, CLOCK, QUEUE, READERS, REFUSED};
use crate::backend::LockMode;
use crate::status::FencingToken;

/// Lua prelude of every script. `incarnation`: this server's `run_id` and whether the
/// election's counter on it is trusted (2: the marker holds this `run_id`), the server
/// started at least `settle_ms` ago but is not caught up yet (1), or it started later
/// than that (0, with the milliseconds left). `uptime_in_seconds` = ⌊now⌋ − ⌊start⌋ in
/// whole seconds, so the start was before ⌊now⌋ − uptime + 1 s: judged from there,
/// never early. `catch_up`: on a settled node still in the incarnation a round saw,
/// raise the counter to `counter` and mark the node trusted; returns the new state.
const INCARNATION: &str = include_str!("lua/incarnation.lua");

/// Phase 1 on one node: [`rw::TAKE_EXCLUSIVE`] (the lock with our value and the node's
/// own next token, or our own value left by a campaign whose answer was lost, adopted;
/// refused beside shared holders), or [`rw::TAKE_SHARED`] for `--mode shared` (a
/// pending member).
/// Phase 2 on one node: if the lock is still ours, record the token and announce it.
/// With `ARGV[6]` = the `run_id` seen in phase 1, a settled node that is not trusted
/// yet is caught up: its counter now holds the token, and the marker its `run_id`.
/// Returns {ours, state}.
const CONFIRM: &str = include_str!("lua/confirm.lua");

/// Compare-and-PEXPIRE, and the renewal's sign of life for followers (`KEYS[4]`, the
/// `alive` key, see [`super::handover`]); keeps the places of the candidates waiting in
/// the queue (`KEYS[5]`, `KEYS[6]`, see [`rw`]). Returns {ours (2: refused, it came
/// after its use-by `ARGV[4]`), state, fence, run_id, store ms}: the state and counter
/// of every node, so that the leader can catch up a restarted node too.
const RENEW: &str = include_str!("lua/renew.lua");

/// Compare-and-DEL of our nonce's lock, announced on the events channel when
/// `ARGV[6]` is `1`, or on a release (`ARGV[7]`: our queue id, whose places in the
/// queue `KEYS[4]` go) while candidates wait in the queue (see [`rw`]); with `ARGV[3]`
/// = a `run_id` a round saw, also catches the node up to counter `ARGV[4]`. Returns 1
/// when it released a lock.
const GIVE_BACK: &str = include_str!("lua/give_back.lua");

/// A renew round's catch-up of a restarted node: `catch_up` alone. Returns the state.
const CATCH_UP: &str = include_str!("lua/catch_up.lua");

/// A script's text as the nodes run it: `body` after the preludes (the store's clock,
/// the incarnation, the switchover's reservation, the shared holders, the queue and
/// its order).
fn with_preludes(body: &str) -> String {
    format!(
        "{CLOCK}{INCARNATION}{}{READERS}{QUEUE}{}{body}",
        switchover::RESERVED,
        rw::ORDER
    )
}

/// The text of phase 1, the take script a candidate of `mode` runs on each node: the
/// shared take for `--mode shared`, the exclusive one otherwise (see `rw`).
pub fn take_source(mode: LockMode) -> String {
    with_preludes(match mode {
        LockMode::Shared => rw::TAKE_SHARED,
        LockMode::Exclusive | LockMode::Election => rw::TAKE_EXCLUSIVE,
    })
}

impl redis::FromRedisValue for Take {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let (won, value, pttl, fence, state, settle_ms, run_id, store_ms, readers): (
            i64,
            String,
            i64,
            FencingToken,
            i64,
            i64,
            String,
            u64,
            Vec<String>,
        ) = redis::FromRedisValue::from_redis_value(v)?;
        Ok(Take {
            won: won == 1,
            beside_shared: won == rw::BESIDE_SHARED,
            refused: won == REFUSED,
            value,
            pttl,
            fence,
            state,
            settle_ms,
            run_id,
            store_ms,
            readers,
        })
    }
}

/// One candidate's keys, identity, ttl, mode and scripts.
pub(super) struct Requests {
    pub(super) keys: Keys,
    /// `leasekeeper:{<election>}:incarnation`: the `run_id` under which a node's
    /// counter was last caught up.
    marker: String,
    identity: String,
    ttl: Duration,
    /// How long a node must have been up before it may be caught up: the ttl plus the
    /// drift allowance, in milliseconds.
    settle_ms: u64,
    mode: LockMode,
    take: Script,
    confirm: Script,
    renew: Script,
    give_back: Script,
    catch_up: Script,
    /// A release's baton hand-out.
    hand_out: Script,
}

impl Requests {
    pub(super) fn new(election: &str, identity: &str, ttl: Duration, mode: LockMode) -> Requests {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let with_prelude = |body: &str| Script::new(&with_preludes(body));
        let pick = |shared_one: &'static str, exclusive_one: &'static str| {
            with_prelude(match mode {
                LockMode::Shared => shared_one,
                _ => exclusive_one,
            })
        };
        Requests {
            keys: Keys::for_election(election),
            marker: format!("leasekeeper:{{{election}}}:incarnation"),
            identity: identity.to_owned(),
            ttl,
            settle_ms: ttl_ms.saturating_add(ttl_ms.div_ceil(100)),
            mode,
            take: Script::new(&take_source(mode)),
            confirm: pick(rw::CONFIRM_SHARED, CONFIRM),
            renew: pick(rw::RENEW_SHARED, RENEW),
            give_back: pick(rw::GIVE_BACK_SHARED, GIVE_BACK),
            catch_up: with_prelude(CATCH_UP),
            hand_out: Script::new(&baton::hand_out("KEYS[1]", "ARGV[1]")),
        }
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// The key our tenure's value lives in on each node: the lock, or the readers' set.
    pub(super) fn held_key(&self) -> &str {
        match self.mode {
            LockMode::Shared => &self.keys.readers,
            _ => &self.keys.lock,
        }
    }

    /// The renewal's fourth key: the followers' `alive` (exclusive), or the lock that
    /// a shared renewal must find absent.
    fn beside_key(&self) -> &str {
        match self.mode {
            LockMode::Shared => &self.keys.lock,
            _ => &self.keys.alive,
        }
    }

    /// Phase 1 on one node: our `prefix` (`<nonce>|`) under the node's `use_by`, with
    /// our place in the queues (`entry`), our queue id and the highest token we have
    /// seen (`floor`, which an exclusive take's token goes above).
    pub(super) fn take(
        &self,
        prefix: &str,
        use_by: u64,
        (entry, queue_id): (&str, &str),
        floor: FencingToken,
    ) -> ScriptInvocation<'_> {
        let keys = &self.keys;
        let mut take = self.take.prepare_invoke();
        for key in [&keys.lock, &keys.fence, &self.marker, &keys.to] {
            take.key(key);
        }
        take.key(&keys.readers)
            .key(&keys.writer_waits)
            .key(&keys.busy);
        take.arg(prefix)
            .arg(&self.identity)
            .arg(self.ttl_ms())
            .arg(self.settle_ms)
            .arg(use_by)
            .arg(entry)
            .arg(format!("{queue_id}|"))
            .arg(&keys.presence)
            .arg(&keys.events)
            .arg(if self.mode == LockMode::Election {
                "0"
            } else {
                "1"
            })
            .arg(rw::SHOWN)
            .arg(floor);
        take
    }

    /// Phase 2 on one node we took: `token` in our `value`, catching up the node when
    /// the take round may (`target`: the `run_id` it saw there).
    pub(super) fn confirm(
        &self,
        prefix: &str,
        token: FencingToken,
        value: &str,
        target: Option<&str>,
    ) -> ScriptInvocation<'_> {
        let mut confirm = self.confirm.prepare_invoke();
        confirm
            .key(self.held_key())
            .key(&self.keys.fence)
            .key(&self.marker)
            .arg(prefix)
            .arg(token)
            .arg(value)
            .arg(&self.keys.events)
            .arg(self.settle_ms)
            .arg(target.unwrap_or(""));
        confirm
    }

    /// The renewal of our tenure's `value` on one node, under its `use_by`.
    pub(super) fn renew(&self, value: &str, use_by: u64) -> ScriptInvocation<'_> {
        let mut renew = self.renew.prepare_invoke();
        renew
            .key(self.held_key())
            .key(&self.keys.fence)
            .key(&self.marker)
            .key(self.beside_key())
            .key(&self.keys.writer_waits)
            .key(&self.keys.busy)
            .arg(value)
            .arg(self.ttl_ms())
            .arg(self.settle_ms)
            .arg(use_by);
        renew
    }

    /// The give-back of our `prefix`'s value on one node (announced when `announce`),
    /// leaving our places in the queues when `leave` is our `<queue id>|` (empty: we
    /// stay), and catching the node up to `counter` when `target` names the `run_id`
    /// a round saw there.
    pub(super) fn give_back(
        &self,
        prefix: &str,
        target: Option<&str>,
        counter: FencingToken,
        announce: bool,
        leave: &str,
    ) -> ScriptInvocation<'_> {
        let mut give_back = self.give_back.prepare_invoke();
        give_back
            .key(self.held_key())
            .key(&self.keys.fence)
            .key(&self.marker)
            .key(&self.keys.writer_waits)
            .key(&self.keys.lock)
            .arg(prefix)
            .arg(&self.keys.events)
            .arg(target.unwrap_or(""))
            .arg(counter)
            .arg(self.settle_ms)
            .arg(if announce { "1" } else { "0" })
            .arg(leave);
        give_back
    }

    /// A renew round's catch-up of one node (the `run_id` the round saw there) to
    /// `counter`.
    pub(super) fn catch_up(&self, target: &str, counter: FencingToken) -> ScriptInvocation<'_> {
        let mut catch_up = self.catch_up.prepare_invoke();
        catch_up
            .key(&self.keys.fence)
            .key(&self.marker)
            .arg(target)
            .arg(counter)
            .arg(self.settle_ms);
        catch_up
    }

    /// One baton on the baton node, for one follower (see [`super::handover`]).
    pub(super) fn hand_out(&self) -> ScriptInvocation<'_> {
        let mut hand_out = self.hand_out.prepare_invoke();
        hand_out.key(&self.keys.baton).arg(self.ttl_ms().max(1));
        hand_out
    }

    /// A new leader's announcement of its `value`.
    pub(super) fn announce(&self, value: &str) -> Pipeline {
        let mut publish = redis::pipe();
        publish
            .cmd("PUBLISH")
            .arg(&self.keys.leader)
            .arg(format!("acquired|{value}"));
        publish
    }

    /// A switchover's reservation of the lock for `to`.
    pub(super) fn reserve(&self, to: &str) -> Pipeline {
        let mut reserve = redis::pipe();
        reserve.add_command(switchover::reserve(&self.keys.to, to, self.ttl));
        reserve
    }

    /// The live candidates' presence channels.
    pub(super) fn live(&self) -> Pipeline {
        let mut ask = redis::pipe();
        ask.add_command(switchover::live(&self.keys.presence));
        ask
    }
}
