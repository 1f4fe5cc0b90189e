//! `redis` backend: one Redis server, every step an atomic Lua script.
//!
//! Keys (hash-tagged so that a cluster keeps them in one slot):
//! - `leasekeeper:{<election>}:lock`  = `<nonce>|<token>|<identity>`, with a PX ttl;
//! - `leasekeeper:{<election>}:fence` = the fencing counter;
//! - channel `leasekeeper:{<election>}:events` carries `acquired|…` (every take) and
//!   `released|…` (a switchover's release);
//! - `leasekeeper:{<election>}:baton`, `…:alive` and channel `…:leader`: the handover
//!   without a herd (see [`baton`]);
//! - channels `leasekeeper:{<election>}:cand:<identity>`, each candidate's presence, and
//!   `leasekeeper:{<election>}:to`, a switchover's reservation (see [`switchover`]);
//! - `leasekeeper:{<election>}:readers`, `…:writer-waits`, `…:busy` and channel `…:rw`:
//!   the read-write lock (`--mode`, see [`rw`]); the take refuses while live readers
//!   exist, and, while `--mode` candidates wait, queues (see [`QUEUE`]). A candidate
//!   kept out by the shared holders or by a place ahead in the queue waits as a
//!   `--mode` one does (see [`quiet`]): it tracks the readers' set and `…:busy` too,
//!   and its listener hears `…:rw` while it waits so. A `--mode shared|exclusive`
//!   candidate is a `RedisBackend` too, whose core takes the mode and whose requests
//!   are the read-write lock's scripts (see [`rw`]): it waits so behind every holder,
//!   hears `…:rw` always, and neither announces itself nor waits for a baton.
//!
//! The nonce is fresh for every tenure, so renew and release (compare-and-PEXPIRE,
//! compare-and-DEL) only ever touch this tenure's own value, even when a restarted
//! sidecar reuses its identity. A campaign whose answer was lost leaves our nonce in
//! the key; the next campaign recognises it and adopts it (refreshing its expiry
//! from the new send time), and a shutdown releases it.
//!
//! Tokens: `INCR` of the fence key in the same script as the `SET NX`, never lower
//! than the highest token this candidate has seen (`floor`). If the fence key is gone
//! although tokens were handed out before, the server lost its data (restart without
//! persistence) while a leader may still hold a claim: the script then fences the
//! lock with a placeholder for one ttl, so that claim runs out before anyone else's
//! starts.
//!
//! Followers do not herd (see [`baton`]): a graceful release hands one follower a
//! baton, the new leader announces itself once it has claimed, and the others name it
//! from the announcement without a request. Followers track the renewals through
//! `CLIENT TRACKING` of the key every renewal writes (below), and look by themselves
//! on a release announced to everyone (a switchover), on
//! `__keyevent@<db>__:expired` (when the server has keyspace notifications on), when
//! the holder's renewals stop, and otherwise at the jittered retry interval.
//!
//! **The leader hears about its own key** (invariant 9) through server-assisted
//! client-side caching, which needs no server configuration: the command connection
//! speaks RESP3, and once a campaign is won it turns on `CLIENT TRACKING ON BCAST
//! PREFIX <lock key> NOLOOP` and reads the key again in the same round trip — the
//! follower a baton woke sends both behind its take, so its claim costs one round
//! trip. From then
//! on every change of the key by anyone else — `DEL`, `SET`, its expiry, `FLUSHALL` —
//! is pushed to us as an invalidation and ends the claim at once, once a read confirms
//! the key no longer holds our value (`NOLOOP` should keep our own renewals quiet, but
//! Redis 7.0.15 still pushes a change made by a script of this connection; other
//! candidates' scripts only read a held key). A lost connection loses the tracking: the next renew turns it on again before its
//! compare-and-PEXPIRE, so the compare covers whatever happened meanwhile. Stepping
//! down turns tracking off, in the release's own round trip. This needs Redis 6 or later
//! (RESP3 and `CLIENT TRACKING`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use rand::Rng;
use redis::{PushInfo, PushKind};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use self::core::{Core, Next, WaitFor};
use self::own::Push;
use self::requests::{Requests, Take};
use super::protocol::{Own, Protocol, Transport, Waited};
use super::store_clock::StoreClock;
use super::{BackendError, Campaign, Candidacy, Renewal, Wake};
use crate::backend::LockMode;
use crate::status::{FencingToken, Holder};

pub(crate) mod baton;
mod cadence;
mod core;
pub mod driven;
pub mod entry;
mod node;
mod own;
mod quiet;
mod requests;
pub mod rw;
mod settings;
pub(crate) mod switchover;
pub(crate) use self::cadence::{announced_holder, Cadence, Pushed};
pub(crate) use self::core::REFUSED;
pub(crate) use self::node::{store, too_late, wait_for_notice, Hears, Node};
pub use self::own::OwnLook;
pub(crate) use self::own::{
    follower_tracking, lock_taken, on_own_push, own_look, shared_entry_lost, track_own,
    tracking_pipe, OwnKey, OWN_PUSH_WINDOW,
};
pub use settings::{Args, RedisSettings};

/// Lua prelude of the scripts that may extend or take the lock: the store's clock in
/// milliseconds, and whether a request whose use-by (`0`: none) is `use_by` came too
/// late to act (see [`super::store_clock`]).
pub(crate) const CLOCK: &str = include_str!("redis/lua/clock.lua");

/// Take or adopt the lock. Returns {won (2: refused, too late), value, pttl of a held
/// lock, store ms, why}, `why` saying what kept it out as [`rw::judge`]'s codes do: 0
/// a holder of the lock key (or nothing: taken, refused), 3 the shared holders, 4 a
/// place ahead in the queue. Live shared holders (`--mode shared`, `KEYS[5]`, see [`rw`]) keep
/// it out as a holder would: the answer names the first of them, with the time until
/// the last one's expiry, and queues this candidate as a waiting writer (`KEYS[6]`,
/// see [`QUEUE`]) so that no later shared holder comes in meanwhile. While `--mode`
/// candidates wait in the queue, it queues too (behind a holder), and takes only
/// when nobody came before it (answer: nobody named, with the time until the one
/// ahead goes stale, see [`QUEUE`]).
const ACQUIRE: &str = include_str!("redis/lua/acquire.lua");

/// Lua prelude of the scripts that read or change the queue of waiting candidates
/// (`…:writer-waits`, see [`rw`]). An entry is `<arrival µs, 16 digits>|<r or w>|
/// <nonce>|<identity>` (a reader or a writer; an election's candidate is a writer),
/// scored with its lapse (the server's ms, `life` after its candidate's last look: one
/// and a half ttl for the one-server scripts, two ttl when not given).
/// The queue's order is the arrival. An entry is dropped (`queue`) when its lapse
/// has passed while no holder keeps the queue (`…:busy`, set for two ttl by every
/// take and renewal while the queue is not empty: the holders that waiting
/// candidates wait for keep their places), when it is stale (`stale`: `ttl * 9 / 2`
/// past its lapse, six ttl after its candidate's last look, `busy` or not, so that a
/// frozen one keeps nobody out for long; the scripts that pass their `ttl` only, not
/// Redlock's; a live one looks by itself before, see [`quiet::QUEUE_TTLS`], and one
/// queued behind it is told when it would go stale, `cutoff_left`), or when its
/// candidate's presence
/// channel (see [`switchover`]) has had no subscriber since a second after its
/// arrival (its process is gone); a script that drops one tells the read-write
/// lock's followers (`channel`), since what kept them out may be gone. A release that
/// leaves the lock free cuts the keeping to half a ttl (`let_queue_go`): the waiting
/// candidates it wakes look at once and so keep their own places, while one that is
/// stopped (SIGSTOP: its presence channel still has its subscriber) loses its place
/// then, not two ttl after the holders' last renewal. A shared holder's renewal checks
/// the presence and staleness of the first `k` places only, in arrival order (`check_heads`): while
/// readers hold, the first writer keeps the readers behind it out, and the places
/// behind it are checked as they come to the head and by every look (`queue`), so a
/// renewal's cost does not grow with the queue.
pub(crate) const QUEUE: &str = include_str!("redis/lua/queue.lua");

/// Lua prelude of the take scripts: `live_readers(key, now)` drops the shared holders
/// whose expiry (score, the store's ms) has passed, and returns the first one left
/// with the latest expiry, or nil when there is none (see [`rw`]).
pub(crate) const READERS: &str = include_str!("redis/lua/readers.lua");

/// Compare-and-PEXPIRE; also writes `KEYS[2]` (what followers track, see [`baton`])
/// and keeps the queue of waiting candidates (`KEYS[3]`, `KEYS[4]`, see [`QUEUE`])
/// when given. Returns {kept (2: refused, too late), store ms}.
pub(crate) const RENEW: &str = include_str!("redis/lua/renew.lua");

/// Compare-and-DEL. A switchover (`ARGV[3]` = `all`) announces the release to every
/// follower; a plain release hands one follower the baton (`KEYS[2]`, PX `ARGV[4]`),
/// also when the lock is already gone (someone should look), see [`baton`]. It also
/// withdraws our place in the queue (`KEYS[3]`, see [`QUEUE`]) and tells the
/// read-write lock's followers (channel `ARGV[5]`, see [`rw`]) that the lock is free
/// (cutting the queue's keeping `KEYS[4]`, see [`QUEUE`]) or that one who waited
/// before them is gone.
/// Returns 1 when it released our lock.
const RELEASE: &str = include_str!("redis/lua/release.lua");

const RELEASE_END: &str = include_str!("redis/lua/release_end.lua");

/// The take script's answer: its code, the lock's value, its pttl, the server's clock
/// in ms, and its last field (see [`Requests::answer`]).
type TakeAnswer = (i64, String, i64, u64, redis::Value);

/// The Redis names one election uses.
#[derive(Clone, Debug)]
pub struct Keys {
    pub lock: String,
    pub fence: String,
    pub events: String,
    /// A switchover's reservation.
    pub to: String,
    /// The prefix of the candidates' presence channels.
    pub presence: String,
    /// The list a release hands the baton on (see [`baton`]).
    pub baton: String,
    /// Written by every renewal: what followers track (see [`baton`]).
    pub alive: String,
    /// Where a new leader announces itself once it has claimed (see [`baton`]).
    pub leader: String,
    /// The shared holders of the read-write lock (see [`rw`]).
    pub readers: String,
    /// The queue of waiting candidates (see [`QUEUE`]; named for its first use, the
    /// writers waiting for the shared holders).
    pub writer_waits: String,
    /// Set by the holders while candidates wait: their places are kept (see [`QUEUE`]).
    pub busy: String,
    /// Where the read-write lock's followers hear that it may be free (see [`rw`]).
    pub rw: String,
}

impl Keys {
    pub fn for_election(election: &str) -> Self {
        Keys {
            lock: format!("leasekeeper:{{{election}}}:lock"),
            fence: format!("leasekeeper:{{{election}}}:fence"),
            events: format!("leasekeeper:{{{election}}}:events"),
            to: format!("leasekeeper:{{{election}}}:to"),
            presence: format!("leasekeeper:{{{election}}}:cand:"),
            baton: format!("leasekeeper:{{{election}}}:baton"),
            alive: format!("leasekeeper:{{{election}}}:alive"),
            leader: format!("leasekeeper:{{{election}}}:leader"),
            readers: format!("leasekeeper:{{{election}}}:readers"),
            writer_waits: format!("leasekeeper:{{{election}}}:writer-waits"),
            busy: format!("leasekeeper:{{{election}}}:busy"),
            rw: format!("leasekeeper:{{{election}}}:rw"),
        }
    }
}

/// A lock value split into its parts.
#[derive(Debug, PartialEq, Eq)]
pub struct LockValue<'a> {
    pub nonce: &'a str,
    pub token: Option<FencingToken>,
    pub identity: &'a str,
}

pub fn parse_value(value: &str) -> LockValue<'_> {
    let mut parts = value.splitn(3, '|');
    let nonce = parts.next().unwrap_or("");
    let token = parts.next().and_then(|t| t.parse().ok());
    let identity = parts.next().unwrap_or("");
    LockValue {
        nonce,
        token,
        identity,
    }
}

/// The holder a lock value names (`None`: nobody, as a quarantine's value).
pub(crate) fn named(value: &str) -> Option<Holder> {
    let parsed = parse_value(value);
    (!parsed.identity.is_empty()).then(|| Holder {
        identity: parsed.identity.to_owned(),
        token: parsed.token,
    })
}

pub(crate) fn new_nonce() -> String {
    let n: u128 = rand::rng().random();
    format!("{n:032x}")
}

pub struct RedisTransport {
    node: Node,
    /// The election's names and this candidate's requests (see [`requests`]).
    req: Requests,
    ttl: Duration,
    /// This tenure's nonce; rotated on every release.
    nonce: String,
    /// What this candidate follows, waits for or holds, and what it tracks (see
    /// [`core`]).
    core: Core,
    wake: Arc<Notify>,
    /// The server's clock, for the use-by of campaigns and renewals.
    clock: StoreClock,
    /// How long the elector waits for an answer (the backend timeout).
    patience: Duration,
    /// Server pushes on the command connection (see the module doc).
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    /// This follower's wait for the baton (see [`baton`]).
    waiter: baton::Waiter,
}

/// The core's reading of one push of the command connection (`keys`: the keys it
/// invalidates, see [`quiet::invalidated`]).
fn push_of<'k>(push: &PushInfo, keys: &'k [Vec<u8>]) -> Push<'k> {
    match push.kind {
        PushKind::Disconnection => Push::Lost,
        PushKind::Invalidate => Push::Invalidated(keys),
        _ => Push::Other,
    }
}

/// The Redis store as a [`super::Backend`].
pub type RedisBackend = Protocol<RedisTransport>;

impl RedisBackend {
    pub fn new(settings: &RedisSettings, lease: &Candidacy) -> Result<Self, BackendError> {
        RedisTransport::new(settings, lease).map(Protocol::over)
    }
}

impl RedisTransport {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    /// The candidacy's mode picks the election's lease or a side of the read-write lock
    /// (see [`rw`]).
    pub fn new(settings: &RedisSettings, lease: &Candidacy) -> Result<Self, BackendError> {
        let (election, identity, mode) = (lease.election, lease.identity, lease.mode);
        let (ttl, renew_interval, op_timeout) = (
            lease.timing.ttl,
            lease.timing.renew_interval,
            lease.timing.backend_timeout,
        );
        let keys = Keys::for_election(election);
        let wake = Arc::new(Notify::new());
        let (node, pushes) = Node::connect(
            settings,
            &keys,
            identity,
            wake.clone(),
            op_timeout,
            match mode {
                LockMode::Election => Hears::Election,
                LockMode::Exclusive | LockMode::Shared => Hears::ReadWrite,
            },
        )?;
        let waiter = baton::Waiter::spawn(
            redis::Client::open(settings.info.clone()).map_err(store("connect"))?,
            keys.baton.clone(),
            node.notices.clone(),
            wake.clone(),
            op_timeout,
        );
        Ok(RedisTransport {
            node,
            req: Requests::new(keys, identity, ttl, mode),
            ttl,
            nonce: new_nonce(),
            core: Core::new(ttl, renew_interval, mode),
            wake,
            clock: StoreClock::new(lease.timing.clock_drift),
            patience: op_timeout,
            pushes,
            waiter,
        })
    }

    fn keys(&self) -> &Keys {
        &self.req.keys
    }

    /// Gives our own lock back, with a switchover's reservation for `to` written first
    /// in the same round trip.
    async fn release_for(&mut self, to: Option<&str>) -> Result<(), BackendError> {
        // Whatever the answer, this tenure is over: the next one gets a fresh nonce so
        // a leftover value of this one is never adopted as a new tenure.
        let prefix = self.nonce_prefix();
        self.nonce = new_nonce();
        self.core.released();
        self.node.notices.want_rw(false);
        let tracking_off = self.core.stops_tracking();
        let release = self
            .req
            .release(&prefix, to, self.waiter.disarm(), tracking_off);
        // A release is the one request a graceful stop depends on: if it met a connection
        // that died since the last use (a restarted server), it is worth one more try on
        // the fresh connection, or the followers wait a whole ttl.
        let first: Result<(i64,), _> = release.query_async(&mut self.node.conn).await;
        match first {
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() => {
                let _: (i64,) = release
                    .query_async(&mut self.node.conn)
                    .await
                    .map_err(store("release"))?;
            }
            other => {
                other.map_err(store("release"))?;
            }
        }
        self.drain_pushes();
        // What was heard during the tenure is of it or older.
        self.node.notices.clear();
        Ok(())
    }

    fn nonce_prefix(&self) -> String {
        format!("{}|", self.nonce)
    }

    /// Takes the pushes that arrived so far (a disconnect notice: the tracking is gone
    /// with its connection).
    fn drain_pushes(&mut self) {
        while let Ok(push) = self.pushes.try_recv() {
            self.core.tracking.on_push(&push.kind);
        }
    }

    /// A follower's tracking: the key every renewal writes (see [`baton`]), and what
    /// keeps a candidate of the read-write lock out ([`follower_tracking`]). A server
    /// without tracking (before Redis 6) refuses; its followers wait without it.
    async fn start_tracking(&mut self) {
        let on: Result<(), _> = follower_tracking(self.keys())
            .query_async(&mut self.node.conn)
            .await;
        self.core.follower_tracking(on.is_ok());
    }

    /// A new leader's announcement (`acquired|<value>` on the announcement channel),
    /// once, after its claim began: followers wake after the claim, not during it.
    /// Sent again before the next renewal until the server has taken it (twice is
    /// harmless); a follower whose subscription was down meanwhile looks once it is
    /// back (see [`node::listen`]).
    async fn announce_once(&mut self) {
        let Some(publish) = self.core.to_announce().map(|v| self.req.announce(v)) else {
            return;
        };
        let sent: redis::RedisResult<i64> = publish.query_async(&mut self.node.conn).await;
        if sent.is_ok() {
            self.core.announced_sent();
        }
    }

    /// A follower takes an announced holder as its observation, without a request (the
    /// take script published it in the same step as the take), when the core says so
    /// ([`Core::follow_announced`]).
    fn follow_announced(&mut self) -> Option<Campaign> {
        let value = self.core.announced.take()?;
        let holder = self.core.follow_announced(&value, Instant::now())?;
        self.node.notices.want_rw(false);
        self.drain_pushes();
        Some(Campaign::Held(Some(holder)))
    }

    /// One take script, sent at `sent` (the pushes so far are older than its read).
    async fn take(&mut self, sent: Instant) -> Result<Take, BackendError> {
        self.drain_pushes();
        let use_by = self.clock.use_by(sent, self.patience);
        let call = self
            .req
            .take(&self.nonce_prefix(), self.core.floor_sent(), use_by);
        let answer: TakeAnswer = call
            .invoke_async(&mut self.node.conn)
            .await
            .map_err(store("campaign"))?;
        self.took(sent, answer)
    }

    /// What the take script sent at `sent` answered: the server's clock learnt from
    /// it, and the take it reports.
    fn took(&mut self, sent: Instant, answer: TakeAnswer) -> Result<Take, BackendError> {
        let (code, value, pttl, store_ms, last) = answer;
        self.clock.learn(sent, Instant::now(), store_ms);
        (self.req.answer(code, value, pttl, last)).map_err(|message| BackendError::Store {
            op: "campaign",
            message,
        })
    }

    /// The take script, sent at `sent`: after a baton (this follower is the one the
    /// release woke, and its take most likely wins), with the holder's tracking and
    /// the read of the lock key behind it in the same round trip, and what that read
    /// found (see [`RedisTransport::take_tracked`]).
    async fn take_for_look(
        &mut self,
        sent: Instant,
    ) -> Result<(Take, Option<Option<String>>), BackendError> {
        if self.node.notices.take_baton() && !self.core.rw() {
            if let Some((take, read)) = self.take_tracked(sent).await? {
                return Ok((take, Some(read)));
            }
        }
        Ok((self.take(sent).await?, None))
    }

    /// The take script and, behind it in the same round trip, what a won take's claim
    /// sends next ([`OwnKey::track_own_key`]): the holder's tracking of the lock key
    /// and a read of it, so that a change of the key after the take is either seen by
    /// the read or pushed. Tracking is the holder's then, whatever the take's answer
    /// (a take that did not win turns the follower's on again). `None`: the server
    /// had not loaded the script, and the take did not run (a plain take loads it).
    async fn take_tracked(
        &mut self,
        sent: Instant,
    ) -> Result<Option<(Take, Option<String>)>, BackendError> {
        self.drain_pushes();
        let use_by = self.clock.use_by(sent, self.patience);
        let call = (self.req).take(&self.nonce_prefix(), self.core.floor_sent(), use_by);
        let mut pipe = redis::pipe();
        pipe.invoke_script(&call);
        track_own(&mut pipe, &[&self.req.keys.lock]);
        pipe.cmd("GET").arg(&self.req.keys.lock);
        self.core.own_tracking();
        let answer: redis::RedisResult<(TakeAnswer, Option<String>)> =
            pipe.query_async(&mut self.node.conn).await;
        let no_script = redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);
        let (answer, read) = match answer {
            Err(e) if e.kind() == no_script => return Ok(None),
            answer => answer.map_err(store("campaign"))?,
        };
        Ok(Some((self.took(sent, answer)?, read)))
    }

    /// A take won: claim once tracking of our key is on and its read finds it ours
    /// (`read`: the read a take after a baton sent with it found; `None`: both sent
    /// now).
    async fn claim(
        &mut self,
        token: FencingToken,
        read: Option<Option<String>>,
    ) -> Result<Campaign, BackendError> {
        self.node.notices.clear();
        let ours = match read {
            Some(current) => self.read_ours(current.as_deref()).await,
            None => self.track_own_key("campaign").await?,
        };
        if !self.core.claimed(ours) {
            // Taken or deleted between our two requests: not ours to claim.
            return Ok(Campaign::Held(None));
        }
        // Followers hear of us once we lead (see `record_lost`).
        Ok(Campaign::Acquired { token })
    }

    /// Whether the lock key, as a read behind the holder's tracking found it
    /// (`current`), holds our tenure's value. A leader waits for no baton: a follower's
    /// wait still open is ended (as [`OwnKey::track_own_key`] does).
    async fn read_ours(&mut self, current: Option<&str>) -> bool {
        if let Some(unblock) = self.waiter.disarm() {
            let _: redis::RedisResult<i64> = unblock.query_async(&mut self.node.conn).await;
        }
        (self.core.value())
            .is_some_and(|value| rw::seen(LockMode::Election, value, None, current).still_ours())
    }

    /// A candidate kept out of the read-write lock by the shared holders or by a place
    /// ahead in the queue (see [`quiet`], [`Core::after_take`]) waits as a `--mode
    /// exclusive` one does: it sends nothing while what keeps it out is renewed (each
    /// renewal pushed to it, `Quiet`), and looks (`Changed`) on the baton, on a message
    /// of the read-write lock's channel (also one heard since its last look began), on
    /// a lost tracking connection, or at `look_at`, when what keeps it out would have
    /// expired unheard-of; `max` first: `Waiting`.
    async fn wait_quietly(&mut self, look_at: Instant, max: Duration) -> Wake {
        if self.node.notices.take_rw() {
            return Wake::Changed;
        }
        let until = Instant::now() + max;
        loop {
            tokio::select! {
                _ = self.wake.notified() => {
                    if let Some(wake) = self.on_notice() {
                        return wake;
                    }
                }
                push = self.pushes.recv() => {
                    let Some(push) = push else { return Wake::Changed };
                    let keys = quiet::invalidated(&push);
                    let push = push_of(&push, &keys);
                    let busy = &self.req.keys.busy;
                    if let Some(wake) = self.core.on_quiet_push(push, busy, Instant::now()) {
                        return wake;
                    }
                }
                _ = tokio::time::sleep_until(until.min(look_at)) => {
                    return if Instant::now() >= look_at { Wake::Changed } else { Wake::Waiting };
                }
            }
        }
    }

    /// A follower that hears the holder's renewals (see `wait_for_change`) until it is
    /// `due` to look, its stagger is over, or `max`.
    async fn wait_for_renewals(&mut self, due: Instant, max: Duration) -> Wake {
        let until = (Instant::now() + max).min(due);
        loop {
            let until = self.core.renewals_until(until);
            tokio::select! {
                _ = self.wake.notified() => {
                    if let Some(wake) = self.on_notice() {
                        return wake;
                    }
                }
                push = self.pushes.recv() => {
                    let Some(push) = push else { return Wake::Changed };
                    let keys = quiet::invalidated(&push);
                    let push = push_of(&push, &keys);
                    let alive = &self.req.keys.alive;
                    let now = Instant::now();
                    if let Some(wake) = self.core.on_follow_push(push, alive, now, baton::grace) {
                        return wake;
                    }
                }
                _ = tokio::time::sleep_until(until) => {
                    return self.core.on_timer(Instant::now(), due);
                }
            }
        }
    }

    /// What a wake-up of the listener or the baton waiter asks for (see
    /// [`Core::on_notice`]).
    fn on_notice(&mut self) -> Option<Wake> {
        let notices = &self.node.notices;
        let rw = notices.take_rw();
        let look = notices.take_look();
        let announcement = || notices.take_announcement().map(|(_, value)| value);
        self.core.on_notice(look, rw, announcement)
    }
}

impl OwnKey for RedisTransport {
    fn pushes(&mut self) -> &mut mpsc::UnboundedReceiver<PushInfo> {
        &mut self.pushes
    }

    fn note_push(&mut self, push: &PushInfo) -> bool {
        self.core.tracking.on_push(&push.kind)
    }

    /// Turns tracking of our key on (when it is off) and reads the key in the same
    /// round trip, so that every later change of it by anyone else will be pushed to
    /// us.
    async fn track_own_key(&mut self, op: &'static str) -> Result<bool, BackendError> {
        let Some(value) = self.core.value().map(str::to_owned) else {
            return Ok(false);
        };
        // What arrived before tracking was on is from an earlier tenure.
        self.drain_pushes();
        let (keys, mode) = (&self.req.keys, self.core.mode());
        let shared = mode == LockMode::Shared;
        // A shared holder's record: its entry in the readers' set, and no lock value.
        let own: &[&str] = if shared {
            &[&keys.lock, &keys.readers]
        } else {
            &[&keys.lock]
        };
        let mut pipe = tracking_pipe(own);
        // A leader waits for no baton: end a follower's wait that may still be open.
        if let Some(unblock) = self.waiter.disarm() {
            pipe.add_command(unblock).ignore();
        }
        if shared {
            pipe.cmd("ZSCORE").arg(&keys.readers).arg(&value);
        }
        pipe.cmd("GET").arg(&keys.lock);
        let read = if shared {
            pipe.query_async(&mut self.node.conn).await
        } else {
            let read = pipe.query_async(&mut self.node.conn).await;
            read.map(|(current,): (Option<String>,)| (None, current))
        };
        let (score, current): (Option<f64>, Option<String>) = read.map_err(store(op))?;
        self.core.own_tracking();
        Ok(rw::seen(mode, &value, score, current.as_deref()).still_ours())
    }

    fn take_own_push_until(&mut self) -> Option<Instant> {
        self.core.take_own_push_until()
    }

    async fn taken(&mut self) -> bool {
        let Some(value) = self.core.value().map(str::to_owned) else {
            return true;
        };
        if self.core.mode() == LockMode::Shared {
            return shared_entry_lost(&mut self.node.conn, &self.req.keys, &value).await;
        }
        lock_taken(&mut self.node.conn, &self.req.keys.lock, &value).await
    }
}

impl Transport for RedisTransport {
    type News = redis::PushInfo;
    type Look = OwnLook;

    fn name(&self) -> &'static str {
        "redis"
    }

    fn no_switchover(&self) -> Option<&'static str> {
        self.core.mode().flag()
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        self.core.slots()
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        if self.core.rw() {
            // What was heard so far is older than this look: no second look for it.
            self.node.notices.clear();
            let _ = self.wake.notified().now_or_never();
        } else if let Some(held) = self.follow_announced() {
            return Ok(held);
        }
        if self.core.begin() {
            // Before the read: a follower then hears of every renewal without asking
            // (see `wait_for_change`).
            self.drain_pushes();
            self.start_tracking().await;
        }
        // What the read-write lock's channel said so far is older than this look.
        self.node.notices.take_rw();
        let read_at = Instant::now();
        let (take, read) = self.take_for_look(read_at).await?;
        let next = self.core.after_take(take, read_at, Instant::now());
        if next != Next::TooLate {
            // Its channel wakes a candidate kept out of the read-write lock only.
            self.node.notices.want_rw(self.core.kept_out());
        }
        match next {
            Next::TooLate => Err(too_late("campaign")),
            Next::NoToken(value) => Err(BackendError::Store {
                op: "campaign",
                message: format!("lock value without a token: {value:?}"),
            }),
            Next::Claim { token } => self.claim(token, read).await,
            Next::Held(holder) => {
                if self.core.tracks_as_holder() {
                    // The take after a baton turned the holder's tracking on.
                    self.start_tracking().await;
                }
                // Pushes are answered in order on the connection: those queued now are
                // about changes before our read, which it has seen.
                self.drain_pushes();
                Ok(Campaign::Held(holder))
            }
        }
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let Some(value) = self.core.value().map(str::to_owned) else {
            return Ok(Renewal::Lost);
        };
        // The script below checks our value itself: pushes so far say nothing more
        // (and our own scripted renewals push one, NOLOOP or not).
        self.drain_pushes();
        if !self.core.tracking.on && !self.track_own_key("renew").await? {
            return Ok(Renewal::Lost);
        }
        let sent = Instant::now();
        self.announce_once().await;
        let use_by = self.clock.use_by(sent, self.patience);
        let (kept, store_ms): (i64, u64) = (self.req.renew(&value, use_by))
            .invoke_async(&mut self.node.conn)
            .await
            .map_err(store("renew"))?;
        let now = Instant::now();
        self.clock.learn(sent, now, store_ms);
        self.core.renewed(kept, now).map_err(|_| too_late("renew"))
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.release_for(None).await
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.release_for(Some(to)).await
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        let presence = &self.req.keys.presence;
        let channels: Vec<String> = switchover::live(presence)
            .query_async(&mut self.node.conn)
            .await
            .map_err(store("candidates"))?;
        Ok(Some(switchover::identities(presence, channels)))
    }

    /// A follower with tracking on sends nothing while the holder renews: each renewal
    /// (a `PEXPIRE`) pushes an invalidation, which shows the holder alive (`Quiet`).
    /// It looks again (`Changed`, the script) when it got the baton (see [`baton`]), on
    /// a release announced to everyone or an expiry event, when the tracking connection
    /// is lost, when an invalidation comes later than a renewal would (`3/4 ttl`, or
    /// past the expiry the last read found: likely the key's expiry; see `Cadence`),
    /// when nothing came by then, and [`baton::grace`] after an invalidation that came
    /// sooner than a renewal would (`ttl/6` after the last sign with the default renew
    /// interval: someone else changed the key) unless an announcement came meanwhile.
    /// An announcement (`acquired|<value>`) is followed without a request (`Changed`,
    /// and the campaign takes the announced holder). The script decides on every take,
    /// so a wrong guess costs one request, never safety. Without tracking: the events
    /// channel, the baton, the holder's expiry, or `max`. Kept out of the read-write
    /// lock: [`RedisTransport::wait_quietly`]. The core decides which ([`Core::wait`]).
    async fn wait(&mut self, max: Duration) -> Waited {
        if self.core.arms_baton() {
            self.waiter.arm();
        }
        Waited::Wake(match self.core.wait() {
            WaitFor::Quietly { look_at } => self.wait_quietly(look_at, max).await,
            WaitFor::Renewals { due } => self.wait_for_renewals(due, max).await,
            WaitFor::Notices { mut hint } => {
                // Nothing to follow by pushes; drop what a past tenure left.
                self.drain_pushes();
                let wake = wait_for_notice(&self.wake, &mut hint, max).await;
                self.on_notice();
                wake
            }
        })
    }

    /// Once it announced itself, the next push of the command connection (`None`
    /// once the connection's pushes end).
    async fn own_news(&mut self) -> Option<redis::PushInfo> {
        self.announce_once().await;
        self.pushes().recv().await
    }

    fn on_own(&mut self, now: Instant, push: redis::PushInfo) -> Own<OwnLook> {
        on_own_push(self, now, &push)
    }

    async fn own_look(&mut self, look: OwnLook) -> bool {
        own_look(self, look).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_values_split_even_when_the_identity_has_bars_or_colons() {
        let v = parse_value("0123|42|pod:a|b");
        assert_eq!(
            v,
            LockValue {
                nonce: "0123",
                token: Some(42),
                identity: "pod:a|b"
            }
        );
        let q = parse_value("quarantine|7|");
        assert_eq!(q.identity, "");
        assert_eq!(q.token, Some(7));
    }

    #[test]
    fn keys_share_one_cluster_slot() {
        let k = Keys::for_election("my-app");
        assert_eq!(k.lock, "leasekeeper:{my-app}:lock");
        assert!(k.fence.contains("{my-app}") && k.events.contains("{my-app}"));
    }
}
