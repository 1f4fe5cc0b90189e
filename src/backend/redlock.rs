//! `redlock` backend: one lease over N ≥ 3 independent Redis masters, held while a
//! majority (N/2 + 1) of them hold it.
//!
//! Acquire runs in one phase, or two when it must, each on the nodes in parallel under
//! a per-node timeout far below the ttl:
//!
//! 1. **Take**: on every node one script does `SET NX PX ttl` of our value with that
//!    node's next token, `<nonce>|<t>|<identity>` with `t = max(the node's fence
//!    counter, highest token seen) + 1`, writes `t` into the node's fence counter in
//!    the same script, and returns `t` and whether the node is trusted (below). Success
//!    on a majority of trusted nodes is needed to go on. When every node taken answered
//!    the same `t`, `t` is above the highest token seen and at least every counter and
//!    token the round read, and the round catches up no node, the tenure exists with
//!    token `t`: each node of that majority holds `t` in the lock value and the counter,
//!    written while the lock was ours there, which is what a confirm writes. The round
//!    waits for every node's answer (or its timeout): a take that agreed late would
//!    leave that node holding our lock with another token, one node fewer toward the
//!    tenure's renewals, and the confirm that tokens which differ call for brings the
//!    nodes' counters back in step.
//! 2. **Confirm**, otherwise (the takes' tokens differ, a node read holds a higher one,
//!    a restarted node is caught up, or a `--mode shared` take's pending member, see
//!    [`rw`]): `token = max(fence counters of the nodes taken, highest token seen) + 1`
//!    is written, on every node taken, into the fence counter (never lowering it) and
//!    into the lock value `<nonce>|<token>|<identity>` (compare-nonce, `KEEPTTL`). The
//!    tenure exists only once a majority confirmed.
//!
//! Why tokens strictly grow: tenure k wrote its token on a majority M (by its takes or
//! by its confirms) while it held the lock on each of them. A later tenure k+1 took a
//! majority A; M and A share a node X. On X, k+1's `SET NX` only succeeded after k's
//! lock on X was gone, which is after k wrote its token there (that write required
//! k's lock). So k+1's take read X's fence counter after k wrote its token there, and
//! the token it wrote on X is greater; k+1's token is that one (every take agreed) or
//! above it (the confirm's). A take that adopts our own value left on X by an earlier
//! campaign held X since that take, which read X's counter after every tenure that
//! held X before. (Both count trusted nodes only; if X restarted in between, it is
//! trusted again only once caught up.)
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
//!    `leasekeeper:{<election>}:incarnation` (in the campaign's confirm, which a take
//!    round that catches up a node always sends, or give-back requests, or in one
//!    extra request after a renew). Every earlier tenure wrote its token on a majority,
//!    which shares a node with what that round read, and those writes (takes or
//!    confirms) had all landed a ttl before; so the caught-up counter is at least that
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
//! Costs: one round trip per acquire when the nodes' counters agree (the common
//! case: each tenure writes its token on the nodes it took), two otherwise; no extra
//! round trip for the rest, except one request to a restarted node after the renew
//! that catches it up; every script call runs `INFO server` on the node (a few
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
use redis::{PushInfo, PushKind};
use tokio::sync::{mpsc, Notify};
use tokio::time::{timeout, Instant};

use self::core::{on_timer, Core, Heard, WaitFor};
use self::requests::Requests;
use self::rules::{Renewed, Round, Take};
use super::protocol::{Own, Protocol, Transport, Waited};
use super::redis::{
    baton, new_nonce, store, wait_for_notice, Args, Hears, Node, RedisSettings, REFUSED,
};
use super::store_clock::StoreClock;
use super::{BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::settings::{bad, redact, ConfigError};
use crate::status::{FencingToken, Holder};

mod core;
pub mod driven;
mod handover;
use handover::BATON_NODE;
mod own;
pub use own::OwnNews;
mod requests;
mod round;
mod rules;
mod rw;

pub use self::requests::take_source;

pub struct RedlockTransport {
    nodes: Vec<Node>,
    /// The keys, the scripts and the requests built from them.
    req: Requests,
    identity: String,
    ttl: Duration,
    node_timeout: Duration,
    nonce: String,
    wake: Arc<Notify>,
    /// Server pushes of each node's command connection (RESP3): tracking
    /// invalidations and disconnect notices (see [`RedlockTransport::wait_for_change`]).
    pushes: Vec<mpsc::UnboundedReceiver<PushInfo>>,
    /// Each node's clock, for the use-by of takes and renewals.
    clocks: Vec<StoreClock>,
    /// This follower's wait for the baton on the baton node (see [`handover`]).
    waiter: baton::Waiter,
    /// How we join the election (`--mode`, see [`rw`]).
    mode: LockMode,
    /// This process's id in the nodes' queues (see [`rw`]).
    queue_id: String,
    /// Our place in the queues while we wait (see [`rw::queue_entry`]).
    entry: Option<String>,
    /// The campaign's state and decisions (see [`core`]).
    core: Core,
    /// Who holds the read-write lock, as the last campaign found it (for `/leader`'s
    /// holders with `--mode`, see [`rw`]).
    observed: Vec<(Holder, crate::status::Mode)>,
}

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

/// The per-node timeout: like redsync's timeout factor, a slow node must not eat the
/// validity, and two phases must fit in the elector's budget for one call (`op`),
/// with room to spare.
fn node_timeout(ttl: Duration, op: Duration) -> Duration {
    (ttl / 10).min(op / 3).max(Duration::from_millis(5))
}

/// The Redlock store as a [`super::Backend`].
pub type RedlockBackend = Protocol<RedlockTransport>;

impl RedlockBackend {
    pub fn new(settings: &[RedisSettings], lease: &Candidacy) -> Result<Self, BackendError> {
        RedlockTransport::new(settings, lease).map(Protocol::over)
    }
}

impl RedlockTransport {
    /// Connects lazily to every node; unreachable nodes are retried by the elector.
    pub fn new(settings: &[RedisSettings], lease: &Candidacy) -> Result<Self, BackendError> {
        let (election, identity, timing) = (lease.election, lease.identity, &lease.timing);
        let req = Requests::new(election, identity, timing.ttl, lease.mode);
        let wake = Arc::new(Notify::new());
        let node_timeout = node_timeout(timing.ttl, timing.backend_timeout);
        let connect = |s| {
            Node::connect(
                s,
                &req.keys,
                identity,
                wake.clone(),
                node_timeout,
                Hears::Announcements,
            )
        };
        let (nodes, pushes): (Vec<Node>, Vec<_>) = settings
            .iter()
            .map(connect)
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
            req.keys.baton.clone(),
            nodes[BATON_NODE].notices.clone(),
            wake.clone(),
            timing.backend_timeout,
        );
        Ok(RedlockTransport {
            nodes,
            req,
            identity: identity.to_owned(),
            ttl: timing.ttl,
            node_timeout,
            nonce: new_nonce(),
            wake,
            pushes,
            clocks: vec![StoreClock::new(timing.clock_drift); n],
            waiter,
            mode: lease.mode,
            queue_id: new_nonce(),
            entry: None,
            core: Core::new(n, timing.ttl, timing.renew_interval),
            observed: Vec::new(),
        })
    }

    /// Takes the pushes that arrived so far, from every node (`all`) or from the nodes
    /// a follower's wait does not look at. A disconnect notice means that node's
    /// tracking is gone with its connection.
    fn drain_pushes(&mut self, all: bool) {
        for (i, pushes) in self.pushes.iter_mut().enumerate() {
            // A follower's wait reads the pushes of the nodes it watches itself.
            if !all && self.core.watches(i) {
                continue;
            }
            while let Ok(push) = pushes.try_recv() {
                if push.kind == PushKind::Disconnection {
                    self.core.disconnected(i, Instant::now());
                }
            }
        }
    }

    /// Turns tracking on where a follower needs it and it is off: on the nodes the
    /// last campaign found holding the holder's value (`holds`). `true` if it turned on
    /// for enough of them that a new look would be followed by pushes alone.
    async fn start_tracking(&mut self, holds: &[bool]) -> bool {
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let wanted = holds[i] && !self.core.tracking[i];
            let mut conn = node.conn.clone();
            let pipe = rw::follower_tracking(&self.req.keys);
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
        self.core.started_tracking(holds, &started)
    }

    fn nonce_prefix(&self) -> String {
        format!("{}|", self.nonce)
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
            self.core.drop_tenure();
        }
        let invocations = targets
            .iter()
            .zip(release_on)
            .map(|(target, release)| {
                (*release || target.is_some()).then(|| {
                    self.req
                        .give_back(&prefix, target.as_deref(), counter, announce, &leave)
                })
            })
            .collect();
        let answers: Round<i64> = self.on_each(invocations).await;
        let released = answers.iter().filter(|a| **a == Some(1)).count();
        (answers.iter().filter(|a| a.is_some()).count(), released)
    }

    /// A leader's part in catching up restarted nodes (no follower may campaign for
    /// a long time): after a renew round that covers every confirmed tenure, one more
    /// request to each node that needs it (`targets`).
    async fn catch_up_after_renew(&self, targets: &[Option<String>]) {
        if targets.iter().all(Option::is_none) {
            return;
        }
        let floor = self.core.floor.get();
        let invocations = targets
            .iter()
            .map(|target| Some(self.req.catch_up(target.as_deref()?, floor)))
            .collect();
        let _: Round<i64> = self.on_each(invocations).await;
    }

    /// Gives our lock back on every node: announced to everyone (`released|…` on the
    /// events channel, a switchover), or followed by one baton for one follower (see
    /// [`handover`]) when we led or released a lock anywhere.
    async fn release_for(&mut self, to_everyone: bool) -> Result<(), BackendError> {
        // A candidate that lets go waits for no baton: one it popped would wake nobody.
        self.stop_waiting().await;
        let led = self.core.drop_tenure();
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

    /// Phase one: the take script on every node at once, above the highest token seen.
    async fn take_everywhere(&mut self, prefix: &str) -> Round<Take> {
        let entry = self.queue_entry();
        let sent = Instant::now();
        let floor = self.core.floor.get();
        let queue = (entry.as_str(), self.queue_id.as_str());
        let invocations = self
            .use_bys(sent)
            .into_iter()
            .map(|use_by| Some(self.req.take(prefix, use_by, queue, floor)))
            .collect();
        let answers = self.on_each_timed(invocations).await;
        self.learn_clocks(sent, answers, |t: &Take| t.store_ms, |t| t.refused)
    }

    /// Phase two, when the takes made no token by themselves, on the nodes we took
    /// (caught up where the take round may, `targets`): our value with the next token.
    /// The token when a majority confirmed it.
    async fn confirm_everywhere(
        &mut self,
        answers: &Round<Take>,
        targets: &[Option<String>],
        prefix: &str,
    ) -> Option<FencingToken> {
        let token = self.core.next_token();
        let value = format!("{prefix}{token}|{}", self.identity);
        let invocations = answers
            .iter()
            .zip(targets)
            .map(|(answer, target)| {
                answer.as_ref().filter(|a| a.won)?;
                Some(self.req.confirm(prefix, token, &value, target.as_deref()))
            })
            .collect();
        let confirmed: Round<(i64, i64)> = self.on_each(invocations).await;
        // Only exclusive holders announce themselves (see `rw`).
        let announce = self.mode != LockMode::Shared;
        self.core
            .confirmed(&confirmed, token, value, announce)
            .then_some(token)
    }
}

impl Transport for RedlockTransport {
    type News = OwnNews;
    type Look = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "redlock"
    }

    fn no_switchover(&self) -> Option<&'static str> {
        self.mode.flag()
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        // What was pushed before this read is older than it.
        self.drain_pushes(true);
        if let Some(held) = self.follow_announced() {
            return Ok(held);
        }
        let prefix = self.nonce_prefix();
        self.core.begin();
        let read_at = Instant::now();
        let answers = self.take_everywhere(&prefix).await;
        let look = self.core.after_take(&answers);
        if !look.tally.settling.is_empty() {
            tracing::info!(nodes = ?look.tally.settling, "redlock nodes restarted less than a ttl ago; not counting them");
        }
        let quorum = self.core.quorum();
        // Only exclusive holders announce themselves (see `rw`).
        let announce = self.mode != LockMode::Shared;
        if look.wins(quorum) {
            let token = match self.core.took(&answers, &look, announce) {
                Some(token) => Some(token),
                None => {
                    self.confirm_everywhere(&answers, &look.targets, &prefix)
                        .await
                }
            };
            if let Some(token) = token {
                self.on_acquired().await;
                self.observe(&answers, None, Some(token));
                return Ok(Campaign::Acquired { token });
            }
        }
        // No majority: give back whatever we took, and wherever the take may have
        // acted without our hearing of it, with a new nonce from then on so no later
        // take adopts it; retry soon but not in step with the other candidates.
        // Restarted nodes this round may catch up are caught up in the same requests,
        // so that they vote again even while another candidate leads.
        if let Some(give) = look.give_back(&answers, quorum) {
            let floor = self.core.floor.get();
            self.give_back(&give.release_on, give.announce, &look.targets, floor, false)
                .await;
        }
        if let Some(message) = look.too_few_answered(self.nodes.len()) {
            return Err(BackendError::Store {
                op: "campaign",
                message,
            });
        }
        let split = || Duration::from_millis(rand::rng().random_range(2..25));
        let holder = self
            .core
            .follow(&answers, &look.tally, read_at, Instant::now(), split);
        self.observe(&answers, holder.clone(), None);
        Ok(Campaign::Held(
            holder.or_else(|| look.tally.shared_holder()),
        ))
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        // A leader needs no pushes (its own renewals are pushed back too).
        self.drain_pushes(true);
        let Some(value) = self.core.value().map(str::to_owned) else {
            return Ok(Renewal::Lost);
        };
        self.announce_once().await;
        let sent = Instant::now();
        let invocations = self
            .use_bys(sent)
            .into_iter()
            .map(|use_by| Some(self.req.renew(&value, use_by)))
            .collect();
        let answers = self.on_each_timed(invocations).await;
        let answers: Round<Renewed> =
            self.learn_clocks(sent, answers, |r: &Renewed| r.4, |r| r.0 == REFUSED);
        let targets = self.core.after_renew_round(&answers);
        self.catch_up_after_renew(&targets).await;
        self.core
            .renewed(&answers, Instant::now())
            .map_err(|kept| BackendError::Store {
                op: "renew",
                message: format!("renewed on {kept} trusted nodes of {}", self.nodes.len()),
            })
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        let reserved: Round<()> = self.on_each_plain(&self.req.reserve(to)).await;
        if reserved.iter().flatten().count() < self.core.quorum() {
            tracing::warn!(to, "the switchover's reservation reached fewer than a majority of the nodes; another candidate may take the lease");
        }
        // The named candidate must look, whoever would get a baton: tell everyone.
        self.release_for(true).await
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        let answers: Round<(Vec<String>,)> = self.on_each_plain(&self.req.live()).await;
        if answers.iter().flatten().count() == 0 {
            return Err(BackendError::Store {
                op: "candidates",
                message: "no redlock node answered".into(),
            });
        }
        // A candidate subscribed on any node is alive (its presence on the others may
        // be reconnecting).
        let channels: Vec<String> = answers.into_iter().flatten().flat_map(|(l,)| l).collect();
        Ok(Some(super::redis::switchover::identities(
            &self.req.keys.presence,
            channels,
        )))
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.release_for(false).await
    }

    /// A new leader's announcement first (see [`handover`]); then the watch of our
    /// own record on every node (see [`own`]).
    async fn own_news(&mut self) -> Option<OwnNews> {
        self.announce_once().await;
        self.own_record_news().await
    }

    fn on_own(&mut self, now: Instant, news: OwnNews) -> Own<Self::Look> {
        self.on_own_news(now, news)
    }

    async fn own_look(&mut self, look: Self::Look) -> bool {
        match look {}
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
    /// expiry, or `max`. One kept out by shared holders waits as [`rw`] says.
    async fn wait(&mut self, max: Duration) -> Waited {
        Waited::Wake(self.wait_for_change(max).await)
    }
}

impl RedlockTransport {
    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        if self.core.arms_baton() {
            self.waiter.arm();
        }
        let holds = self.core.holds();
        self.drain_pushes(false);
        match self.core.wait(&holds, Instant::now()) {
            WaitFor::Notices => self.wait_for_notice(max).await,
            WaitFor::Track => {
                if self.start_tracking(&holds).await {
                    return Wake::Changed;
                }
                self.wait_for_notice(max).await
            }
            WaitFor::Renewals { watched, due } => {
                self.wait_on_pushes(&watched, due, max, false).await
            }
            WaitFor::Readers { watched, due } => {
                self.wait_on_pushes(&watched, due, max, true).await
            }
        }
    }
}

impl RedlockTransport {
    /// A follower's wait on the pushes of the `watched` nodes (of the shared holders'
    /// set when `readers`, else of the holder's renewals) until `due` or `max`, as the
    /// core reads each.
    async fn wait_on_pushes(
        &mut self,
        watched: &[usize],
        due: Instant,
        max: Duration,
        readers: bool,
    ) -> Wake {
        let until = (Instant::now() + max).min(due);
        loop {
            let (i, push) = match self.next_push_from(watched, until, due).await {
                Ok(heard) => heard,
                Err(wake) => return wake,
            };
            let kind = push.map(|p| p.kind);
            let now = Instant::now();
            let heard = match readers {
                true => self.core.on_readers_push(i, kind.as_ref(), now),
                false => self.core.on_renewal_push(i, kind.as_ref(), now),
            };
            match heard {
                Heard::Wake(wake) => return wake,
                Heard::Notices => return self.wait_for_notice(max).await,
                Heard::Nothing => {}
            }
        }
    }

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
                    return Err(on_timer(Instant::now(), due));
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
        let wake = wait_for_notice(&self.wake, &mut self.core.hint, max).await;
        self.on_notice();
        wake
    }
}
