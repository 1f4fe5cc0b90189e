//! `redlock` backend: one lease over N ≥ 3 independent Redis masters, held while a
//! majority (N/2 + 1) of them hold it.
//!
//! Acquire runs in two phases, each on the nodes in parallel under a per-node timeout
//! far below the ttl:
//!
//! 1. **Take**: on every node one script does `SET NX PX ttl` of a pending value
//!    `<nonce>|pending|<identity>` and returns that node's fence counter and whether the
//!    node is trusted (below). Success on a majority of trusted nodes is needed to go on.
//! 2. **Confirm**: `token = max(fence counters of the nodes taken, highest token seen) + 1`
//!    is written, on every node taken, into the fence counter (never lowering it) and
//!    into the lock value `<nonce>|<token>|<identity>` (compare-nonce, `KEEPTTL`). The
//!    tenure exists only once a majority confirmed.
//!
//! Why tokens strictly grow: tenure k confirmed its token on a majority M while it held
//! the lock on each of them. A later tenure k+1 took a majority A; M and A share a node
//! X. On X, k+1's `SET NX` only succeeded after k's lock on X was gone, which is after
//! k's confirm on X (that confirm required k's lock). So k+1 read X's fence counter
//! after k wrote its token there, and k+1's token is greater. (Both count trusted
//! nodes only; if X restarted in between, it is trusted again only once caught up.)
//!
//! The local deadline is the elector's: send time of phase 1 + ttl × (1 − drift) −
//! margin, i.e. Redlock's validity `ttl − elapsed − drift` counted conservatively. A
//! failed campaign releases on *every* node (not only those that said yes) and retries
//! after a short random delay, so competing candidates do not split votes in lockstep.
//!
//! **Restarted nodes** (DESIGN invariant 10). A node that restarts — empty, or from an
//! RDB/AOF file older than its last writes, or a replica promoted in its place — has
//! forgotten locks and fence writes that claims and tokens relied on. It is not a vote
//! (toward a majority, a renewal, or the token) until both:
//!
//! 1. **one ttl has passed since it started** (Redlock's "delayed restart"): every claim
//!    that counted its lost state was renewed before the restart, so it has run out;
//! 2. **its fence counter has been caught up**: a round (a campaign's take, a leader's
//!    renew) that saw, after (1), either a majority of trusted nodes or every node
//!    answer writes a counter at least as high as all their counters into the node's
//!    counter, and the node's current `run_id` into a marker key
//!    `leasekeeper:{<election>}:incarnation` (in the campaign's confirm or give-back
//!    requests, or in one extra request after a renew). Every earlier tenure was
//!    confirmed on a majority, which shares a node with what that round read, and its
//!    confirms had all landed a ttl before; so the caught-up counter is at least that
//!    tenure's token. A time rule alone would not do: after the ttl the restored
//!    counter can still be below the last token, and while the nodes that know better
//!    hang, a new tenure would repeat or lower it.
//!
//! A node is *trusted* while its marker equals its own `run_id`: `INFO server` gives a
//! new `run_id` on every start, and a restored file brings back the old marker, so no
//! memory on the client side is needed and a freshly started candidate judges a node
//! exactly like one that watched it restart. Checking once per connection instead
//! would need a hook into the connection manager's transparent reconnects and would
//! still tell a fresh candidate nothing about a node restored an hour ago (whose
//! counter is stale all the same). Every script reads `INFO server` itself
//! (scripts may call `INFO`; effects replication allows writes after it), so the check
//! costs no extra request: the take, confirm and renew scripts return the node's state
//! with their answer. `uptime_in_seconds` is whole seconds between two truncated clock
//! readings; with `server_time_usec` from the same `INFO` the start is bounded from
//! above to within one second, and a node counts as started at that bound (never
//! early, at most a second late). The ttl is stretched by the 1% drift allowance.
//!
//! **Handovers** wake one follower, not all of them: one baton on the first configured
//! node, followers tracking the renewal-only `alive` key, and the new leader's
//! announcement (see [`handover`]).
//!
//! **The holder hears of its own record** between renewals (DESIGN invariant 9):
//! tracking of its record on every node, a read of a node that pushes a change, and a
//! step-down once the nodes that said "not ours" leave no majority (see [`own`]).
//!
//! Costs: no extra round trip, except one request to a restarted node after the
//! renew that catches it up; every script call runs `INFO server` on the node (a few
//! microseconds) and the user needs `+info` in its ACL. After starting a fresh set of
//! nodes, nobody leads for one ttl (plus up to a second). While a restarted node is
//! not caught up, it is one node fewer toward every majority: with 3 nodes, one
//! restored and one hanging, nobody leads (tokens could not be made safely).
//! If a majority of nodes lose data together, what they lost is lost: the token goes
//! on from the highest counter still found (or the candidate's own memory). Uptime is
//! the server's wall clock: a node whose clock is stepped forward right after a
//! restart looks settled early (as with Redis' own key expiry).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use rand::Rng;
use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind, Script};
use tokio::sync::{mpsc, Notify};
use tokio::time::{timeout, Instant};

use super::redis::{
    baton, new_nonce, parse_value, store, switchover, wait_for_notice, Args, Hears, Keys, Node,
    Pushed, RedisSettings, CLOCK, QUEUE, READERS, REFUSED,
};
use super::store_clock::StoreClock;
use super::{Backend, BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::settings::{bad, redact, ConfigError};
use crate::status::{FencingToken, Holder};

mod handover;
use handover::{holder_due, BATON_NODE};
mod own;
mod rw;

/// Lua prelude of every script. `incarnation`: this server's `run_id` and whether the
/// election's counter on it is trusted (2: the marker holds this `run_id`), the server
/// started at least `settle_ms` ago but is not caught up yet (1), or it started later
/// than that (0, with the milliseconds left). `uptime_in_seconds` = ⌊now⌋ − ⌊start⌋ in
/// whole seconds, so the start was before ⌊now⌋ − uptime + 1 s: judged from there,
/// never early. `catch_up`: on a settled node still in the incarnation a round saw,
/// raise the counter to `counter` and mark the node trusted; returns the new state.
const INCARNATION: &str = include_str!("redlock/lua/incarnation.lua");

/// Node states returned by the scripts.
const SETTLING: i64 = 0;
const STALE: i64 = 1;
const TRUSTED: i64 = 2;

/// Phase 1 on one node: [`rw::TAKE_EXCLUSIVE`] (the lock with a pending value, or our
/// own value left by a campaign whose answer was lost, adopted; refused beside shared
/// holders), or [`rw::TAKE_SHARED`] for `--mode shared`.
/// Phase 2 on one node: if the lock is still ours, record the token and announce it.
/// With `ARGV[6]` = the `run_id` seen in phase 1, a settled node that is not trusted
/// yet is caught up: its counter now holds the token, and the marker its `run_id`.
/// Returns {ours, state}.
const CONFIRM: &str = include_str!("redlock/lua/confirm.lua");

/// Compare-and-PEXPIRE, and the renewal's sign of life for followers (`KEYS[4]`, the
/// `alive` key, see [`handover`]); keeps the places of the candidates waiting in the
/// queue (`KEYS[5]`, `KEYS[6]`, see [`rw`]). Returns {ours (2: refused, it came after its use-by `ARGV[4]`),
/// state, fence, run_id, store ms}: the state and counter of every node, so that the
/// leader can catch up a restarted node too.
const RENEW: &str = include_str!("redlock/lua/renew.lua");

/// Compare-and-DEL of our nonce's lock, announced on the events channel when
/// `ARGV[6]` is `1`, or on a release (`ARGV[7]`: our queue id, whose places in the
/// queue `KEYS[4]` go) while candidates wait in the queue (see [`rw`]); with `ARGV[3]` = a `run_id` a round saw, also catches the node up
/// to counter `ARGV[4]`. Returns 1 when it released a lock.
const GIVE_BACK: &str = include_str!("redlock/lua/give_back.lua");

/// A renew round's catch-up of a restarted node: `catch_up` alone. Returns the state.
const CATCH_UP: &str = include_str!("redlock/lua/catch_up.lua");

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

/// One node's answer to phase 1.
struct Take {
    won: bool,
    /// Kept out beside shared holders, `value` one of them (see [`rw`]).
    beside_shared: bool,
    /// It came after its use-by and did nothing.
    refused: bool,
    value: String,
    pttl: i64,
    fence: FencingToken,
    state: i64,
    settle_ms: i64,
    run_id: String,
    store_ms: u64,
    /// The shared holders' members on the node, live (up to [`rw::SHOWN`]).
    readers: Vec<String>,
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

/// One node's answer to a renewal: {ours (2: refused as late), state, fence, run_id,
/// store ms}.
type Renewed = (i64, i64, FencingToken, String, u64);

pub struct RedlockBackend {
    nodes: Vec<Node>,
    keys: Keys,
    /// `leasekeeper:{<election>}:incarnation`: the `run_id` under which a node's
    /// counter was last caught up.
    marker: String,
    identity: String,
    ttl: Duration,
    /// How a follower reads tracking pushes.
    cadence: super::redis::Cadence,
    /// How long a node must have been up before it may be caught up: the ttl plus the
    /// drift allowance, in milliseconds.
    settle_ms: u64,
    node_timeout: Duration,
    nonce: String,
    value: Option<String>,
    floor: FencingToken,
    wake: Arc<Notify>,
    expiry_hint: Option<Instant>,
    take: Script,
    confirm: Script,
    renew: Script,
    give_back: Script,
    catch_up: Script,
    /// Server pushes of each node's command connection (RESP3): tracking
    /// invalidations and disconnect notices (see [`RedlockBackend::wait_for_change`]).
    pushes: Vec<mpsc::UnboundedReceiver<PushInfo>>,
    /// Whether `CLIENT TRACKING` is on for each node's current connection.
    tracking: Vec<bool>,
    /// Per node that the last campaign found holding the majority holder's value:
    /// the last sign of the holder there (that read, or a renewal pushed since).
    signs: Vec<Option<Instant>>,
    /// Per such node, when its key expires unless renewed, as that read found it (a
    /// renewal pushed since makes it unknown).
    expires: Vec<Option<Instant>>,
    /// Each node's clock, for the use-by of takes and renewals.
    clocks: Vec<StoreClock>,
    /// This follower's wait for the baton on the baton node (see [`handover`]).
    waiter: baton::Waiter,
    /// A release's baton hand-out.
    hand_out: Script,
    /// An announced new holder (`<value>`) the next campaign follows without a request.
    announced: Option<String>,
    /// The holder's value a follower follows (an announcement of it is nothing new).
    followed: Option<String>,
    /// Our value, to announce once we lead (see `record_lost`).
    announce: Option<String>,
    /// How we join the election (`--mode`, see [`rw`]).
    mode: LockMode,
    /// This process's id in the nodes' queues (see [`rw`]).
    queue_id: String,
    /// Our place in the queues while we wait (see [`rw::queue_entry`]).
    entry: Option<String>,
    /// Per node that the last campaign found kept out by shared holders: the last
    /// sign of them there (that read, or a change of the readers' set pushed since).
    shared_signs: Vec<Option<Instant>>,
    /// A holder's watch of its own record, per node (see [`own`]).
    own: Vec<own::OwnNode>,
    /// Who holds the read-write lock, as the last campaign found it (for `/leader`'s
    /// holders with `--mode`, see [`rw`]).
    observed: Vec<(Holder, crate::status::Mode)>,
}

/// One node's part of a round: its answer and when it came, or `None` for an error, a
/// timeout or no request at all.
async fn ask<T: redis::FromRedisValue>(
    limit: Duration,
    node: usize,
    mut conn: ConnectionManager,
    invocation: Option<redis::ScriptInvocation<'_>>,
) -> Option<(T, Instant)> {
    let invocation = invocation?;
    match timeout(limit, invocation.invoke_async::<T>(&mut conn)).await {
        Ok(Ok(v)) => Some((v, Instant::now())),
        Ok(Err(e)) => {
            tracing::debug!(node, error = %e, "redlock node failed");
            None
        }
        Err(_) => None,
    }
}

/// The nodes one round may catch up, by the `run_id` it saw there: the settled
/// untrusted ones, when what the round read covers every confirmed tenure — a
/// majority (`quorum`) of trusted nodes answered, or every node answered and all
/// have been up for a ttl. `answers` holds (state, run_id) per node.
fn catch_up_targets(quorum: usize, answers: &[Option<(i64, &str)>]) -> Vec<Option<String>> {
    let trusted = answers
        .iter()
        .flatten()
        .filter(|(state, _)| *state == TRUSTED)
        .count();
    let all_settled = answers
        .iter()
        .all(|a| a.is_some_and(|(state, _)| state != SETTLING));
    let covered = trusted >= quorum || all_settled;
    answers
        .iter()
        .map(|a| match a {
            Some((STALE, run_id)) if covered => Some((*run_id).to_owned()),
            _ => None,
        })
        .collect()
}

/// How many of `n` nodes make a majority: more than half (3 of 4, not 2).
fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// What one renew round proves, from each node's (ours, state) answer (`None`: no
/// answer in time; ours 1: the node still held our value and extended it, 0: it holds
/// something else): renewed when a majority of *trusted* nodes extended our value (a
/// restarted node's yes proves nothing, DESIGN invariant 10); lost when so many nodes
/// hold something else that no majority can be ours again; otherwise unproven, with
/// how many trusted nodes said yes (`Err`).
fn renew_verdict(answers: &[Option<(i64, i64)>]) -> Result<Renewal, usize> {
    let q = quorum(answers.len());
    let kept = answers
        .iter()
        .flatten()
        .filter(|(ours, state)| *ours == 1 && *state == TRUSTED)
        .count();
    let gone = answers
        .iter()
        .flatten()
        .filter(|(ours, _)| *ours == 0)
        .count();
    if kept >= q {
        Ok(Renewal::Renewed)
    } else if own::lost(gone, answers.len()) {
        Ok(Renewal::Lost)
    } else {
        Err(kept)
    }
}

/// Whether a campaign's confirm round made a tenure: a majority of the `n` nodes
/// confirmed our value while trusted (`(1, TRUSTED)`; a node that was caught up in
/// the same request counts as trusted).
fn confirmed_by_majority(n: usize, confirmed: &[Option<(i64, i64)>]) -> bool {
    let yes = confirmed
        .iter()
        .filter(|c| **c == Some((1, TRUSTED)))
        .count();
    yes >= quorum(n)
}

/// The value seen most often among `seen`, and how often (the first of equals).
fn most_seen(seen: &[String]) -> Option<(&str, usize)> {
    let mut best: Option<(&str, usize)> = None;
    for v in seen {
        let n = seen.iter().filter(|s| *s == v).count();
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((v.as_str(), n));
        }
    }
    best
}

/// Answers of one parallel round: one entry per node, `None` for no answer in time.
type Round<T> = Vec<Option<T>>;

/// The redlock nodes from the Redis flags: at least three distinct, independent
/// masters; an even count is accepted with a warning (returned, logged once logging
/// is up).
pub fn node_settings(args: &Args) -> Result<(Vec<RedisSettings>, Vec<String>), ConfigError> {
    let urls = args.urls();
    if urls.len() < 3 {
        return Err(bad(format!(
            "--redis-url: redlock needs at least 3 independent Redis masters, got {}; repeat --redis-url or separate URLs with commas",
            urls.len()
        )));
    }
    let mut nodes: Vec<RedisSettings> = Vec::with_capacity(urls.len());
    for url in urls {
        let node = args.node(url)?;
        if nodes.iter().any(|other| other.same_server(&node)) {
            return Err(bad(format!(
                "--redis-url {:?} is given twice; redlock needs distinct servers",
                redact(url)
            )));
        }
        nodes.push(node);
    }
    let mut warnings = Vec::new();
    if nodes.len().is_multiple_of(2) {
        warnings.push(format!(
            "redlock over {} nodes: an even count tolerates no more failures than {} nodes",
            nodes.len(),
            nodes.len() - 1
        ));
    }
    Ok((nodes, warnings))
}

impl RedlockBackend {
    /// Connects lazily to every node; unreachable nodes are retried by the elector.
    pub fn new(settings: &[RedisSettings], lease: &Candidacy) -> Result<Self, BackendError> {
        let (election, identity) = (lease.election, lease.identity);
        let (ttl, renew_interval, op_timeout) = (
            lease.timing.ttl,
            lease.timing.renew_interval,
            lease.timing.backend_timeout,
        );
        let keys = Keys::for_election(election);
        let wake = Arc::new(Notify::new());
        // Like redsync's timeout factor: a slow node must not eat the validity.
        // Two phases must fit in the elector's budget for one call, with room to spare.
        let node_timeout = (ttl / 10).min(op_timeout / 3).max(Duration::from_millis(5));
        let (nodes, pushes): (Vec<Node>, Vec<_>) = settings
            .iter()
            .map(|s| {
                Node::connect(
                    s,
                    &keys,
                    identity,
                    wake.clone(),
                    node_timeout,
                    Hears::Announcements,
                )
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let n = nodes.len();
        let baton_node = settings
            .get(BATON_NODE)
            .ok_or_else(|| BackendError::Store {
                op: "connect",
                message: "redlock needs at least 3 nodes".into(),
            })?;
        let waiter = baton::Waiter::spawn(
            redis::Client::open(baton_node.info.clone()).map_err(store("connect"))?,
            keys.baton.clone(),
            nodes[BATON_NODE].notices.clone(),
            wake.clone(),
            op_timeout,
        );
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let with_prelude = |body: &str| Script::new(&with_preludes(body));
        let shared = lease.mode == LockMode::Shared;
        let pick = |shared_one: &'static str, exclusive_one: &'static str| {
            with_prelude(if shared { shared_one } else { exclusive_one })
        };
        Ok(RedlockBackend {
            nodes,
            marker: format!("leasekeeper:{{{election}}}:incarnation"),
            keys,
            identity: identity.to_owned(),
            ttl,
            cadence: super::redis::Cadence {
                ttl,
                renew_interval,
            },
            settle_ms: ttl_ms.saturating_add(ttl_ms.div_ceil(100)),
            node_timeout,
            nonce: new_nonce(),
            value: None,
            floor: 0,
            wake,
            expiry_hint: None,
            take: Script::new(&take_source(lease.mode)),
            confirm: pick(rw::CONFIRM_SHARED, CONFIRM),
            renew: pick(rw::RENEW_SHARED, RENEW),
            give_back: pick(rw::GIVE_BACK_SHARED, GIVE_BACK),
            catch_up: with_prelude(CATCH_UP),
            pushes,
            tracking: vec![false; n],
            signs: vec![None; n],
            expires: vec![None; n],
            clocks: vec![StoreClock::new(lease.timing.clock_drift); n],
            waiter,
            hand_out: Script::new(&baton::hand_out("KEYS[1]", "ARGV[1]")),
            announced: None,
            followed: None,
            announce: None,
            mode: lease.mode,
            queue_id: new_nonce(),
            entry: None,
            shared_signs: vec![None; n],
            own: vec![own::OwnNode::default(); n],
            observed: Vec::new(),
        })
    }

    /// Runs one plain request on every node in parallel, each under the per-node
    /// timeout; errors and timeouts read as "no answer".
    async fn on_each_plain<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Round<T> {
        join_all(self.nodes.iter().enumerate().map(|(i, node)| {
            let mut conn = node.conn.clone();
            async move {
                match timeout(self.node_timeout, pipe.query_async::<T>(&mut conn)).await {
                    Ok(Ok(v)) => Some(v),
                    Ok(Err(e)) => {
                        tracing::debug!(node = i, error = %e, "redlock node failed");
                        None
                    }
                    Err(_) => None,
                }
            }
        }))
        .await
    }

    /// Takes the pushes that arrived so far, from every node (`all`) or from the nodes
    /// a follower's wait does not look at. A disconnect notice means that node's
    /// tracking is gone with its connection.
    fn drain_pushes(&mut self, all: bool) {
        for (i, pushes) in self.pushes.iter_mut().enumerate() {
            // A follower's wait reads the pushes of the nodes it watches itself.
            let follows = self.signs[i].is_some() || self.shared_signs[i].is_some();
            if !all && follows && self.tracking[i] {
                continue;
            }
            while let Ok(push) = pushes.try_recv() {
                if push.kind == PushKind::Disconnection {
                    self.tracking[i] = false;
                    self.signs[i] = None;
                    self.own[i].on_push(&push.kind, Instant::now());
                }
            }
        }
    }

    /// Turns tracking on where a follower needs it and it is off: on the nodes the
    /// last campaign found holding the holder's value. `true` if it turned on for
    /// enough of them that a new look would be followed by pushes alone.
    async fn start_tracking(&mut self, holds: &[bool]) -> bool {
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let wanted = holds[i] && !self.tracking[i];
            let mut conn = node.conn.clone();
            let pipe = rw::follower_tracking(&self.keys);
            let limit = self.node_timeout;
            async move {
                if !wanted {
                    return false;
                }
                matches!(
                    timeout(limit, pipe.query_async::<()>(&mut conn)).await,
                    Ok(Ok(()))
                )
            }
        });
        let started = join_all(calls).await;
        for (i, on) in started.into_iter().enumerate() {
            self.tracking[i] |= on;
        }
        let tracked = (0..self.nodes.len())
            .filter(|&i| holds[i] && self.tracking[i])
            .count();
        tracked >= self.quorum()
    }

    fn quorum(&self) -> usize {
        quorum(self.nodes.len())
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn nonce_prefix(&self) -> String {
        format!("{}|", self.nonce)
    }

    /// Runs one script invocation per node that has one, in parallel, each under the
    /// per-node timeout. Errors and timeouts both read as "no answer".
    async fn on_each<T: redis::FromRedisValue>(
        &self,
        invocations: Vec<Option<redis::ScriptInvocation<'_>>>,
    ) -> Round<T> {
        let answers = self.on_each_timed(invocations).await;
        answers.into_iter().map(|a| a.map(|(v, _)| v)).collect()
    }

    /// [`RedlockBackend::on_each`], with when each answer came.
    async fn on_each_timed<T: redis::FromRedisValue>(
        &self,
        invocations: Vec<Option<redis::ScriptInvocation<'_>>>,
    ) -> Round<(T, Instant)> {
        let calls = self.nodes.iter().zip(invocations).enumerate();
        join_all(calls.map(|(i, (node, invocation))| {
            ask(self.node_timeout, i, node.conn.clone(), invocation)
        }))
        .await
    }

    /// Per node, the use-by of a request sent at `sent` (see [`StoreClock`]): the
    /// round stops waiting for a node after the per-node timeout.
    fn use_bys(&self, sent: Instant) -> Vec<u64> {
        self.clocks
            .iter()
            .map(|c| c.use_by(sent, self.node_timeout))
            .collect()
    }

    /// Learns each node's clock from a round sent at `sent`, and drops the answers of
    /// the nodes that refused the request as late (`refused`): they did nothing.
    fn learn_clocks<T>(
        &mut self,
        sent: Instant,
        answers: Round<(T, Instant)>,
        store_ms: impl Fn(&T) -> u64,
        refused: impl Fn(&T) -> bool,
    ) -> Round<T> {
        answers
            .into_iter()
            .zip(self.clocks.iter_mut())
            .map(|(answer, clock)| {
                let (v, received) = answer?;
                clock.learn(sent, received, store_ms(&v));
                (!refused(&v)).then_some(v)
            })
            .collect()
    }

    /// Releases our nonce on the nodes `release_on` names, whatever each said before
    /// (and then never uses that nonce again), with `leave` our places in the queues
    /// too (see [`rw`]), and catches up the nodes `targets`
    /// names (with the `run_id` a round saw there) to `counter`, in one request per
    /// node. Returns how many nodes answered, and on how many it released a lock.
    ///
    /// `announce` publishes the release, which wakes every waiting candidate. Only a
    /// value held on a majority needs it: anyone who saw a value on fewer nodes saw no
    /// holder and retries soon by itself. A campaign that took a minority gives it
    /// back quietly: announcing it would make every waiting candidate look, each look
    /// a take on every node that wakes the others again, a storm that grows with the
    /// number of candidates.
    async fn give_back(
        &mut self,
        release_on: &[bool],
        announce: bool,
        targets: &[Option<String>],
        counter: FencingToken,
        leave: bool,
    ) -> (usize, usize) {
        let prefix = self.nonce_prefix();
        // A release leaves the queues too (a failed campaign still waits).
        let leave = if leave {
            self.entry = None;
            format!("{}|", self.queue_id)
        } else {
            String::new()
        };
        if release_on.iter().any(|r| *r) {
            self.nonce = new_nonce();
            self.value = None;
        }
        let invocations = targets
            .iter()
            .zip(release_on)
            .map(|(target, release)| {
                if !release && target.is_none() {
                    return None;
                }
                let mut invocation = self.give_back.prepare_invoke();
                invocation
                    .key(self.held_key())
                    .key(&self.keys.fence)
                    .key(&self.marker)
                    .key(&self.keys.writer_waits)
                    .key(&self.keys.lock)
                    .arg(&prefix)
                    .arg(&self.keys.events)
                    .arg(target.as_deref().unwrap_or(""))
                    .arg(counter)
                    .arg(self.settle_ms)
                    .arg(if announce { "1" } else { "0" })
                    .arg(&leave);
                Some(invocation)
            })
            .collect();
        let answers: Round<i64> = self.on_each(invocations).await;
        let released = answers.iter().filter(|a| **a == Some(1)).count();
        (answers.iter().filter(|a| a.is_some()).count(), released)
    }

    /// A leader's part in catching up restarted nodes (no follower may campaign for
    /// a long time): after a renew round that covers every confirmed tenure, one more
    /// request to each node that needs it.
    async fn catch_up_after_renew(&self, answers: &Round<Renewed>) {
        let states: Vec<Option<(i64, &str)>> = answers
            .iter()
            .map(|a| {
                a.as_ref()
                    .map(|(_, state, _, run_id, _)| (*state, run_id.as_str()))
            })
            .collect();
        let targets = catch_up_targets(self.quorum(), &states);
        if targets.iter().all(Option::is_none) {
            return;
        }
        let invocations = targets
            .iter()
            .map(|target| {
                let mut catch_up = self.catch_up.prepare_invoke();
                catch_up
                    .key(&self.keys.fence)
                    .key(&self.marker)
                    .arg(target.as_deref()?)
                    .arg(self.floor)
                    .arg(self.settle_ms);
                Some(catch_up)
            })
            .collect();
        let _: Round<i64> = self.on_each(invocations).await;
    }

    /// The holder a majority of nodes agree on, if any.
    fn majority_holder(&self, most_seen: Option<(&str, usize)>) -> Option<Holder> {
        let (value, _) = most_seen.filter(|(_, n)| *n >= self.quorum())?;
        let parsed = parse_value(value);
        (!parsed.identity.is_empty()).then(|| Holder {
            identity: parsed.identity.to_owned(),
            token: parsed.token,
        })
    }
}

/// One campaign's answers, counted.
struct Tally {
    answered: usize,
    /// Nodes where our value was set.
    taken: Vec<usize>,
    /// Of those, the ones that count (trusted, or caught up in this round).
    counted_taken: usize,
    /// Nodes that count at all.
    usable: usize,
    /// Nodes restarted less than a ttl ago.
    settling: Vec<usize>,
    /// When the first settling node counts again, in ms.
    settled_in: Option<u64>,
    /// The values trusted nodes hold (someone else's).
    seen: Vec<String>,
    soonest_expiry: Option<i64>,
    /// The shared holders trusted nodes named (see [`rw`]).
    shared: Vec<String>,
}

impl Tally {
    fn of(answers: &Round<Take>, targets: &[Option<String>]) -> Tally {
        let counts = |i: usize| {
            answers[i]
                .as_ref()
                .is_some_and(|a| a.state == TRUSTED || targets[i].is_some())
        };
        let mut t = Tally {
            answered: answers.iter().filter(|a| a.is_some()).count(),
            taken: Vec::new(),
            counted_taken: 0,
            usable: (0..answers.len()).filter(|&i| counts(i)).count(),
            settling: Vec::new(),
            settled_in: None,
            seen: Vec::new(),
            soonest_expiry: None,
            shared: Vec::new(),
        };
        for (i, answer) in answers.iter().enumerate() {
            let Some(a) = answer else {
                continue;
            };
            if a.state == SETTLING {
                t.settling.push(i);
                let ms = a.settle_ms.max(0) as u64;
                t.settled_in = Some(t.settled_in.map_or(ms, |s| s.min(ms)));
            }
            if a.won {
                t.taken.push(i);
                continue;
            }
            if a.state == TRUSTED && a.beside_shared {
                // Kept out by the shared holders: nobody holds the lock itself.
                t.seen.push(String::new());
                t.shared.push(a.value.clone());
            } else if a.state == TRUSTED {
                t.seen.push(a.value.clone());
            }
            if a.pttl > 0 {
                t.soonest_expiry = Some(t.soonest_expiry.map_or(a.pttl, |s| s.min(a.pttl)));
            }
        }
        t.counted_taken = t.taken.iter().filter(|&&i| counts(i)).count();
        t
    }
}

impl RedlockBackend {
    /// Gives our lock back on every node: announced to everyone (`released|…` on the
    /// events channel, a switchover), or followed by one baton for one follower (see
    /// [`handover`]) when we led or released a lock anywhere.
    async fn release_for(&mut self, to_everyone: bool) -> Result<(), BackendError> {
        // A candidate that lets go waits for no baton: one it popped would wake nobody.
        self.stop_waiting().await;
        let led = self.value.is_some();
        self.announce = None;
        let none = vec![None; self.nodes.len()];
        let everywhere = vec![true; self.nodes.len()];
        let (answered, released) = self
            .give_back(&everywhere, to_everyone, &none, 0, true)
            .await;
        if answered == 0 {
            return Err(BackendError::Store {
                op: "release",
                message: "no redlock node answered".into(),
            });
        }
        if !to_everyone && (led || released > 0) {
            self.hand_baton().await;
        }
        // What was heard during the tenure is of it or older.
        self.clear_notices();
        Ok(())
    }

    /// Phase one: the TAKE script on every node at once.
    async fn take_everywhere(&mut self, prefix: &str) -> Round<Take> {
        let entry = self.queue_entry();
        let sent = Instant::now();
        let invocations = self
            .use_bys(sent)
            .into_iter()
            .map(|use_by| {
                let mut take = self.take.prepare_invoke();
                take.key(&self.keys.lock)
                    .key(&self.keys.fence)
                    .key(&self.marker)
                    .key(&self.keys.to)
                    .key(&self.keys.readers)
                    .key(&self.keys.writer_waits)
                    .key(&self.keys.busy)
                    .arg(prefix)
                    .arg(&self.identity)
                    .arg(self.ttl_ms())
                    .arg(self.settle_ms)
                    .arg(use_by)
                    .arg(&entry)
                    .arg(format!("{}|", self.queue_id))
                    .arg(&self.keys.presence)
                    .arg(&self.keys.events)
                    .arg(if self.mode == LockMode::Election {
                        "0"
                    } else {
                        "1"
                    })
                    .arg(rw::SHOWN);
                Some(take)
            })
            .collect();
        let answers = self.on_each_timed(invocations).await;
        self.learn_clocks(sent, answers, |t: &Take| t.store_ms, |t| t.refused)
    }

    /// The highest token any answering node (or we) ever saw: every counter counts,
    /// trusted or not, since a higher token is never wrong.
    fn learn_tokens(&mut self, answers: &Round<Take>) {
        for a in answers.iter().flatten() {
            self.floor = self.floor.max(a.fence);
            if let Some(t) = parse_value(&a.value).token {
                self.floor = self.floor.max(t);
            }
        }
    }

    /// Phase two, on the nodes we took: our value with the next token. The token when
    /// a majority confirmed it.
    async fn confirm_everywhere(
        &mut self,
        answers: &Round<Take>,
        targets: &[Option<String>],
        prefix: &str,
    ) -> Option<FencingToken> {
        let token = self.floor + 1;
        let value = format!("{prefix}{token}|{}", self.identity);
        let invocations = answers
            .iter()
            .zip(targets)
            .map(|(answer, target)| {
                answer.as_ref().filter(|a| a.won)?;
                let mut confirm = self.confirm.prepare_invoke();
                confirm
                    .key(self.held_key())
                    .key(&self.keys.fence)
                    .key(&self.marker)
                    .arg(prefix)
                    .arg(token)
                    .arg(&value)
                    .arg(&self.keys.events)
                    .arg(self.settle_ms)
                    .arg(target.as_deref().unwrap_or(""));
                Some(confirm)
            })
            .collect();
        let confirmed: Round<(i64, i64)> = self.on_each(invocations).await;
        if !confirmed_by_majority(self.nodes.len(), &confirmed) {
            return None;
        }
        self.floor = self.floor.max(token);
        self.value = Some(value);
        self.expiry_hint = None;
        Some(token)
    }

    /// After a campaign that did not win: the holder, the nodes to follow it on, and
    /// when to look again.
    fn follow(&mut self, answers: &Round<Take>, tally: &Tally, read_at: Instant) -> Option<Holder> {
        let top = most_seen(&tally.seen);
        let holder = self.majority_holder(top);
        self.followed = holder.as_ref().and(top).map(|(value, _)| value.to_owned());
        if let (Some(_), Some((value, _))) = (&holder, top) {
            // The nodes that hold the holder's value, for a follower's wait.
            for (i, a) in answers.iter().enumerate() {
                let Some(a) = a else { continue };
                if !a.won && a.value == value {
                    self.signs[i] = Some(read_at);
                    self.expires[i] =
                        (a.pttl > 0).then(|| read_at + Duration::from_millis(a.pttl as u64 + 2));
                }
            }
        }
        // A value on fewer than a majority of the nodes that answered may still be on a
        // majority of all of them (a node we cannot reach holds it too): not a split
        // vote, so no quick retry while the holder lives, only at its expiry.
        let unanswered = self.nodes.len() - tally.answered;
        let maybe_held = top.is_some_and(|(_, n)| n + unanswered >= self.quorum());
        let retry_in = match (&holder, tally.soonest_expiry) {
            (Some(_), Some(pttl)) => Some(Duration::from_millis(pttl as u64 + 2)),
            (Some(_), None) => Some(self.ttl),
            (None, Some(pttl)) if maybe_held => Some(Duration::from_millis(pttl as u64 + 2)),
            // A split vote: try again after a short random delay.
            (None, _) if tally.usable >= self.quorum() => {
                Some(Duration::from_millis(rand::rng().random_range(2..25)))
            }
            // Too few nodes to count: once the first restarted one has settled, or at
            // the retry interval (a hanging node may come back).
            (None, _) => tally.settled_in.map(|ms| Duration::from_millis(ms + 2)),
        };
        self.expiry_hint = retry_in.map(|d| Instant::now() + d);
        holder
    }
}

impl Backend for RedlockBackend {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        if let Some(held) = self.follow_announced() {
            return Ok(held);
        }
        let prefix = self.nonce_prefix();
        // What was pushed before this read is older than it.
        self.drain_pushes(true);
        self.signs.fill(None);
        self.expires.fill(None);
        self.shared_signs.fill(None);
        let read_at = Instant::now();
        let answers = self.take_everywhere(&prefix).await;
        self.learn_tokens(&answers);
        let states: Vec<Option<(i64, &str)>> = answers
            .iter()
            .map(|a| a.as_ref().map(|a| (a.state, a.run_id.as_str())))
            .collect();
        let targets = catch_up_targets(self.quorum(), &states);
        let tally = Tally::of(&answers, &targets);
        if !tally.settling.is_empty() {
            tracing::info!(nodes = ?tally.settling, "redlock nodes restarted less than a ttl ago; not counting them");
        }
        if tally.counted_taken >= self.quorum() {
            if let Some(token) = self.confirm_everywhere(&answers, &targets, &prefix).await {
                self.on_acquired().await;
                self.on_acquired_rw();
                self.own_reset();
                self.observe(&answers, None, Some(token));
                return Ok(Campaign::Acquired { token });
            }
        }
        // No majority: give back whatever we took, and wherever the take may have
        // acted without our hearing of it (a node that did not answer in time: a slow
        // link may still deliver it), with a new nonce from then on so no later take
        // adopts it; retry soon but not in step with the other candidates. Restarted
        // nodes this round may catch up are caught up in the same requests, so that
        // they vote again even while another candidate leads.
        let maybe_ours: Vec<bool> = answers
            .iter()
            .enumerate()
            .map(|(i, a)| a.is_none() || tally.taken.contains(&i))
            .collect();
        if maybe_ours.iter().any(|m| *m) || targets.iter().any(Option::is_some) {
            let floor = self.floor;
            // Only a value on a majority can have been seen as the holder. (Counting
            // the nodes that did not answer as taken too made a follower that cannot
            // reach one node announce every look, and wake itself and every other
            // candidate into the storm again.)
            let announce = tally.taken.len() >= self.quorum();
            self.give_back(&maybe_ours, announce, &targets, floor, false)
                .await;
        }
        if tally.answered < self.quorum() {
            return Err(BackendError::Store {
                op: "campaign",
                message: format!(
                    "only {} of {} redlock nodes answered; a majority of {} is needed",
                    tally.answered,
                    self.nodes.len(),
                    self.quorum()
                ),
            });
        }
        let holder = self.follow(&answers, &tally, read_at);
        if holder.is_none() {
            self.follow_shared(&answers, read_at);
        }
        self.observe(&answers, holder.clone(), None);
        Ok(Campaign::Held(holder.or_else(|| tally.shared_holder())))
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        // A leader needs no pushes (its own renewals are pushed back too).
        self.drain_pushes(true);
        let Some(value) = self.value.clone() else {
            return Ok(Renewal::Lost);
        };
        self.announce_once().await;
        let sent = Instant::now();
        let invocations = self
            .use_bys(sent)
            .into_iter()
            .map(|use_by| {
                let mut renew = self.renew.prepare_invoke();
                renew
                    .key(self.held_key())
                    .key(&self.keys.fence)
                    .key(&self.marker)
                    .key(self.beside_key())
                    .key(&self.keys.writer_waits)
                    .key(&self.keys.busy)
                    .arg(&value)
                    .arg(self.ttl_ms())
                    .arg(self.settle_ms)
                    .arg(use_by);
                Some(renew)
            })
            .collect();
        let answers = self.on_each_timed(invocations).await;
        let answers: Round<Renewed> =
            self.learn_clocks(sent, answers, |r: &Renewed| r.4, |r| r.0 == REFUSED);
        for (_, _, fence, ..) in answers.iter().flatten() {
            self.floor = self.floor.max(*fence);
        }
        self.catch_up_after_renew(&answers).await;
        self.own_renewed(
            &answers
                .iter()
                .map(|a| a.as_ref().map(|r| r.0))
                .collect::<Vec<_>>(),
        );
        let seen: Vec<Option<(i64, i64)>> = answers
            .iter()
            .map(|a| a.as_ref().map(|(ours, state, ..)| (*ours, *state)))
            .collect();
        renew_verdict(&seen).map_err(|kept| BackendError::Store {
            op: "renew",
            message: format!("renewed on {kept} trusted nodes of {}", self.nodes.len()),
        })
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.no_switchover()?;
        let mut reserve = redis::pipe();
        reserve.add_command(switchover::reserve(&self.keys.to, to, self.ttl));
        let reserved: Round<()> = self.on_each_plain(&reserve).await;
        if reserved.iter().flatten().count() < self.quorum() {
            tracing::warn!(to, "the switchover's reservation reached fewer than a majority of the nodes; another candidate may take the lease");
        }
        // The named candidate must look, whoever would get a baton: tell everyone.
        self.release_for(true).await
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        self.no_switchover()?;
        let mut ask = redis::pipe();
        ask.add_command(switchover::live(&self.keys.presence));
        let answers: Round<(Vec<String>,)> = self.on_each_plain(&ask).await;
        if answers.iter().flatten().count() == 0 {
            return Err(BackendError::Store {
                op: "candidates",
                message: "no redlock node answered".into(),
            });
        }
        // A candidate subscribed on any node is alive (its presence on the others may
        // be reconnecting).
        let channels: Vec<String> = answers.into_iter().flatten().flat_map(|(l,)| l).collect();
        Ok(Some(switchover::identities(&self.keys.presence, channels)))
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.release_for(false).await
    }

    /// A new leader's announcement first (see [`handover`]); then the watch of our
    /// own record on every node (see [`own`]).
    async fn record_lost(&mut self) {
        self.announce_once().await;
        self.own_record_lost().await
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        (self.mode != LockMode::Election)
            .then(|| crate::status::Slots::one_lock(self.observed.iter().cloned()))
    }

    /// A follower sends nothing while the holder renews, as on the `redis` backend:
    /// with `CLIENT TRACKING` of the `alive` key (which only renewals write, see
    /// [`handover`]) on every node that holds the holder's value (at least a majority),
    /// each renewal pushes an invalidation from each such node, which shows the holder
    /// alive there (`Quiet`). It looks again (`Changed`) when it got the baton, on a
    /// `released|…` notice on the events channel (a switchover), when one of those
    /// nodes' connection is lost, when an invalidation from one of them comes sooner
    /// than a renewal would (half the renew interval after that node's last sign,
    /// `ttl/6` by default: someone else wrote the key) or later than one would (9/4 of
    /// it, `3/4 ttl` by default, or past that node's expiry as read; see `Cadence`), and
    /// once nothing came by then from all but a minority of them. A new leader's
    /// announcement (`acquired|<value>`) is followed without a request (`Changed`, and
    /// the campaign takes the announced holder). Pushes from the other nodes are not
    /// looked at. Campaigns decide, so a wrong guess costs a look, never safety.
    /// Without tracking on enough of them, it turns it on and looks again, or (a
    /// server that refuses it) waits without tracking: the notices, the holder's
    /// expiry, or `max`.
    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        if self.value.is_none() {
            self.waiter.arm();
        }
        let holds: Vec<bool> = self.signs.iter().map(Option::is_some).collect();
        self.drain_pushes(false);
        let watched: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| holds[i] && self.tracking[i])
            .collect();
        let beside_shared = self.shared_signs.iter().flatten().count() >= self.quorum();
        if self.value.is_none() && beside_shared {
            return self.wait_beside_shared(max).await;
        }
        if self.value.is_some() || holds.iter().filter(|h| **h).count() < self.quorum() {
            return self.wait_for_notice(max).await;
        }
        if watched.len() < self.quorum() {
            if self.start_tracking(&holds).await {
                return Wake::Changed;
            }
            return self.wait_for_notice(max).await;
        }
        let dues = watched
            .iter()
            .filter_map(|&i| Some(self.cadence.due(self.signs[i]?, self.expires[i])))
            .collect();
        let due = holder_due(dues, self.quorum()).unwrap_or_else(Instant::now);
        let until = (Instant::now() + max).min(due);
        loop {
            let (i, push) = match self.next_push_from(&watched, until, due).await {
                Ok(heard) => heard,
                Err(wake) => return wake,
            };
            let Some(push) = push else {
                // The connection's push channel is gone: no pushes from this node again.
                self.tracking[i] = false;
                self.signs[i] = None;
                return self.wait_for_notice(max).await;
            };
            if let Some(w) = self.on_push(i, &push) {
                return w;
            }
        }
    }
}

impl RedlockBackend {
    /// The next push from one of the `watched` nodes (which node, and `None` when its
    /// push channel is gone), unless a notice settles the wait first (`Err(wake)`) or
    /// `until` passes (`Err`: `Changed` once `due` has passed, else `Waiting`).
    async fn next_push_from(
        &mut self,
        watched: &[usize],
        until: Instant,
        due: Instant,
    ) -> Result<(usize, Option<PushInfo>), Wake> {
        let wake = self.wake.clone();
        loop {
            let pushes = &mut self.pushes;
            let next_push = select_all(pushes.iter_mut().enumerate().filter_map(|(i, rx)| {
                watched
                    .contains(&i)
                    .then(|| Box::pin(async move { (i, rx.recv().await) }))
            }));
            let (i, push) = tokio::select! {
                _ = wake.notified() => (None, None),
                ((i, push), _, _) = next_push => (Some(i), push),
                _ = tokio::time::sleep_until(until) => {
                    return Err(if Instant::now() >= due { Wake::Changed } else { Wake::Waiting });
                }
            };
            match i {
                Some(i) => return Ok((i, push)),
                None => {
                    if let Some(w) = self.on_notice() {
                        return Err(w);
                    }
                }
            }
        }
    }

    /// A follower's wait without pushes to follow: the notices, the holder's expiry,
    /// or `max`. What woke it is noted for the campaign (an announced holder).
    async fn wait_for_notice(&mut self, max: Duration) -> Wake {
        let wake = wait_for_notice(&self.wake, &mut self.expiry_hint, max).await;
        self.on_notice();
        wake
    }

    /// What one push from node `i` means for a follower: `Some(wake)` to return,
    /// `None` to keep waiting.
    fn on_push(&mut self, i: usize, push: &PushInfo) -> Option<Wake> {
        match push.kind {
            PushKind::Disconnection => {
                self.tracking[i] = false;
                self.signs[i] = None;
                Some(Wake::Changed)
            }
            PushKind::Invalidate => {
                let now = Instant::now();
                let Some(sign) = self.signs[i] else {
                    return Some(Wake::Changed);
                };
                match self.cadence.read_push(now, sign, self.expires[i]) {
                    Pushed::Look | Pushed::TooSoon => Some(Wake::Changed),
                    Pushed::Renewal => {
                        self.signs[i] = Some(now);
                        self.expires[i] = Some(now + self.ttl);
                        Some(Wake::Quiet)
                    }
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(answers: &[Option<(i64, &str)>]) -> Vec<Option<String>> {
        catch_up_targets(answers.len() / 2 + 1, answers)
    }

    #[test]
    fn a_majority_of_trusted_nodes_vouches_for_a_settled_one() {
        let t = targets(&[
            Some((TRUSTED, "a")),
            Some((TRUSTED, "b")),
            Some((STALE, "c")),
        ]);
        assert_eq!(t, vec![None, None, Some("c".to_owned())]);
        // Even with a node silent or still settling.
        for other in [None, Some((SETTLING, "d"))] {
            let answers = [
                Some((TRUSTED, "a")),
                Some((STALE, "b")),
                Some((TRUSTED, "c")),
                other,
                Some((TRUSTED, "e")),
            ];
            let t = targets(&answers);
            assert_eq!(t, vec![None, Some("b".to_owned()), None, None, None]);
        }
    }

    #[test]
    fn without_a_trusted_majority_every_node_must_answer_settled() {
        // A fresh set of nodes (or all of them restarted): all answered, all settled.
        let t = targets(&[Some((STALE, "a")), Some((STALE, "b")), Some((TRUSTED, "c"))]);
        assert_eq!(t, vec![Some("a".to_owned()), Some("b".to_owned()), None]);
        // One silent: what the others hold may be older than what it holds.
        let t = targets(&[Some((STALE, "a")), None, Some((TRUSTED, "c"))]);
        assert_eq!(t, vec![None, None, None]);
        // One restarted less than a ttl ago: nobody is caught up from a minority.
        let t = targets(&[
            Some((STALE, "a")),
            Some((SETTLING, "b")),
            Some((TRUSTED, "c")),
        ]);
        assert_eq!(t, vec![None, None, None]);
    }

    #[test]
    fn a_majority_is_more_than_half_of_the_nodes() {
        assert_eq!(
            [1, 2, 3, 4, 5, 6, 7].map(quorum),
            [1, 2, 2, 3, 3, 4, 4],
            "n/2 would let two candidates hold 2 of 4 nodes each"
        );
    }

    #[test]
    fn a_renewal_counts_trusted_yes_answers_from_a_majority() {
        let yes = Some((1, TRUSTED));
        let no = Some((0, TRUSTED));
        let restarted = Some((1, STALE));
        assert_eq!(renew_verdict(&[yes, yes, None]), Ok(Renewal::Renewed));
        assert_eq!(renew_verdict(&[yes, yes, no, None]), Err(2), "2 of 4");
        assert_eq!(renew_verdict(&[yes, yes, yes, None]), Ok(Renewal::Renewed));
        // A restarted node's yes is no vote, settled or not.
        assert_eq!(renew_verdict(&[yes, restarted, None]), Err(1));
        assert_eq!(
            renew_verdict(&[yes, Some((1, SETTLING)), Some((1, STALE))]),
            Err(1)
        );
        // Lost once no majority can be ours again; silence is no "no".
        assert_eq!(renew_verdict(&[yes, no, no]), Ok(Renewal::Lost));
        assert_eq!(renew_verdict(&[yes, no, None]), Err(1));
        assert_eq!(renew_verdict(&[yes, yes, no, no]), Ok(Renewal::Lost));
        assert_eq!(renew_verdict(&[yes, yes, no, None, None]), Err(2));
        assert_eq!(renew_verdict(&[yes, yes, no, no, no]), Ok(Renewal::Lost));
    }

    #[test]
    fn a_tenure_needs_a_trusted_majority_of_confirms() {
        let yes = Some((1, TRUSTED));
        assert!(confirmed_by_majority(3, &[yes, yes, None]));
        assert!(!confirmed_by_majority(3, &[yes, Some((1, STALE)), None]));
        assert!(!confirmed_by_majority(3, &[yes, Some((0, TRUSTED)), None]));
        assert!(!confirmed_by_majority(4, &[yes, yes, None, None]));
        assert!(confirmed_by_majority(4, &[yes, yes, yes, None]));
    }

    fn take(won: bool, value: &str, state: i64) -> Option<Take> {
        Some(Take {
            won,
            beside_shared: false,
            refused: false,
            value: value.to_owned(),
            pttl: if won { -1 } else { 900 },
            fence: 0,
            state,
            settle_ms: if state == SETTLING { 400 } else { 0 },
            run_id: String::new(),
            store_ms: 0,
            readers: Vec::new(),
        })
    }

    #[test]
    fn a_campaign_counts_only_trusted_or_caught_up_nodes() {
        // Taken on a settling node and a trusted one: one vote.
        let answers = vec![
            take(true, "n|pending|me", SETTLING),
            take(true, "n|pending|me", TRUSTED),
            take(false, "o|3|other", TRUSTED),
        ];
        let t = Tally::of(&answers, &[None, None, None]);
        assert_eq!((t.answered, t.usable, t.counted_taken), (3, 2, 1));
        assert_eq!(t.taken, vec![0, 1]);
        assert_eq!((t.settling.clone(), t.settled_in), (vec![0], Some(400)));
        assert_eq!(t.seen, vec!["o|3|other".to_owned()]);
        assert_eq!(t.soonest_expiry, Some(900));
        // A settled node this round catches up counts.
        let answers = vec![
            take(true, "n|pending|me", STALE),
            take(true, "n|pending|me", TRUSTED),
            None,
        ];
        let t = Tally::of(&answers, &[Some("r".to_owned()), None, None]);
        assert_eq!((t.answered, t.usable, t.counted_taken), (2, 2, 2));
        let t = Tally::of(&answers, &[None, None, None]);
        assert_eq!((t.usable, t.counted_taken), (1, 1));
        // What an untrusted node holds is not seen as anyone's.
        let answers = vec![take(false, "o|3|other", STALE), None, None];
        let t = Tally::of(&answers, &[None, None, None]);
        assert!(t.seen.is_empty());
    }

    #[test]
    fn the_value_most_seen_wins_and_the_first_of_equals() {
        let seen = ["a", "b", "b", "c"].map(str::to_owned);
        assert_eq!(most_seen(&seen), Some(("b", 2)));
        let seen = ["a", "b"].map(str::to_owned);
        assert_eq!(most_seen(&seen), Some(("a", 1)));
        assert_eq!(most_seen(&[]), None);
    }

    #[test]
    fn a_settling_node_is_never_caught_up() {
        let t = targets(&[
            Some((TRUSTED, "a")),
            Some((TRUSTED, "b")),
            Some((SETTLING, "c")),
        ]);
        assert_eq!(t, vec![None, None, None]);
    }
}
