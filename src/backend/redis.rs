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
//!   and its listener hears `…:rw` while it waits so.
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
//! PREFIX <lock key> NOLOOP` and reads the key again in the same round trip. From then
//! on every change of the key by anyone else — `DEL`, `SET`, its expiry, `FLUSHALL` —
//! is pushed to us as an invalidation and ends the claim at once, once a read confirms
//! the key no longer holds our value (`NOLOOP` should keep our own renewals quiet, but
//! Redis 7.0.15 still pushes a change made by a script of this connection; other
//! candidates' scripts only read a held key). A lost connection loses the tracking: the next renew turns it on again before its
//! compare-and-PEXPIRE, so the compare covers whatever happened meanwhile. Stepping
//! down turns tracking off. This needs Redis 6 or later (RESP3 and `CLIENT TRACKING`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use rand::Rng;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, PushInfo, PushKind, Script};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::record::Seen;
use super::store_clock::StoreClock;
use super::{Backend, BackendError, Campaign, Candidacy, Renewal, Wake};
use crate::backoff::Backoff;
use crate::status::{FencingToken, Holder};

pub(crate) mod baton;
pub mod entry;
mod quiet;
pub mod rw;
mod settings;
pub(crate) mod switchover;
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

/// The holder an announcement (`acquired|<value>`) names, for a follower that knows
/// of tokens up to `floor` to take without a look: `None` for a value that names
/// nobody, or an older tenure's announcement (a former holder's, delayed past its
/// successor's take), which a look settles instead.
pub(crate) fn announced_holder(value: &str, floor: FencingToken) -> Option<Holder> {
    let parsed = parse_value(value);
    let token = parsed.token.filter(|t| *t >= floor)?;
    (!parsed.identity.is_empty()).then(|| Holder {
        identity: parsed.identity.to_owned(),
        token: Some(token),
    })
}

pub(crate) fn new_nonce() -> String {
    let n: u128 = rand::rng().random();
    format!("{n:032x}")
}

/// One Redis server: a self-reconnecting connection whose every request times out,
/// and a pub/sub listener that wakes `wake` on the election's events.
pub(crate) struct Node {
    pub(crate) conn: ConnectionManager,
    /// What the listener heard besides the wake-up (see [`baton::Notices`]).
    pub(crate) notices: Arc<baton::Notices>,
    listener: JoinHandle<()>,
}

impl Node {
    /// As [`Node::connect_announced`], for a candidate of the read-write lock
    /// (`--mode`), whose listener asks for a look on every message (see [`rw`]).
    pub(crate) fn connect_rw(
        settings: &RedisSettings,
        keys: &Keys,
        identity: &str,
        wake: Arc<Notify>,
        op_timeout: Duration,
    ) -> Result<(Node, mpsc::UnboundedReceiver<PushInfo>), BackendError> {
        Self::connect(settings, keys, identity, wake, op_timeout, Hears::ReadWrite)
    }

    /// Connects lazily (an unreachable server is not an error here, the elector
    /// retries), with the command connection on RESP3 and its server pushes (tracking
    /// invalidations, and the library's own disconnect notices) sent to the returned
    /// receiver; the listener hears the new leaders on their announcement channel (see
    /// [`baton`]): a `redis` candidate, and a `redlock` one on every node.
    pub(crate) fn connect_announced(
        settings: &RedisSettings,
        keys: &Keys,
        identity: &str,
        wake: Arc<Notify>,
        op_timeout: Duration,
    ) -> Result<(Node, mpsc::UnboundedReceiver<PushInfo>), BackendError> {
        Self::connect(
            settings,
            keys,
            identity,
            wake,
            op_timeout,
            Hears::Announcements,
        )
    }

    /// As [`Node::connect_announced`], for an election's candidate on one server,
    /// whose listener also notes the read-write lock's channel (see [`Hears::Election`]).
    fn connect_election(
        settings: &RedisSettings,
        keys: &Keys,
        identity: &str,
        wake: Arc<Notify>,
        op_timeout: Duration,
    ) -> Result<(Node, mpsc::UnboundedReceiver<PushInfo>), BackendError> {
        Self::connect(settings, keys, identity, wake, op_timeout, Hears::Election)
    }

    fn connect(
        settings: &RedisSettings,
        keys: &Keys,
        identity: &str,
        wake: Arc<Notify>,
        op_timeout: Duration,
        hears: Hears,
    ) -> Result<(Node, mpsc::UnboundedReceiver<PushInfo>), BackendError> {
        let (pushed, pushes) = mpsc::unbounded_channel();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(op_timeout))
            .set_response_timeout(Some(op_timeout))
            .set_number_of_retries(1)
            .set_max_delay(op_timeout)
            .set_push_sender(pushed);
        let resp3 = settings
            .info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(settings.info.clone().set_redis_settings(resp3))
            .map_err(store("connect"))?;
        let conn =
            ConnectionManager::new_lazy_with_config(client, config).map_err(store("connect"))?;
        // The listener stays on the protocol of the URL.
        let listen_client = redis::Client::open(settings.info.clone()).map_err(store("connect"))?;
        let db = settings.info.redis_settings().db();
        let notices = Arc::new(baton::Notices::default());
        let listener = tokio::spawn(listen(Listen {
            client: listen_client,
            keys: keys.clone(),
            presence: switchover::presence_channel(&keys.presence, identity),
            db,
            wake,
            notices: notices.clone(),
            hears,
            op_timeout,
        }));
        Ok((
            Node {
                conn,
                notices,
                listener,
            },
            pushes,
        ))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

pub struct RedisBackend {
    node: Node,
    keys: Keys,
    identity: String,
    ttl: Duration,
    /// How a follower reads tracking pushes.
    cadence: super::redis::Cadence,
    /// This tenure's nonce; rotated on every release.
    nonce: String,
    /// The full value while we lead.
    value: Option<String>,
    /// The highest token seen; new tokens never go below it.
    floor: FencingToken,
    wake: Arc<Notify>,
    /// When the observed holder's key expires, if soon.
    expiry_hint: Option<Instant>,
    acquire: Script,
    renew: Script,
    /// The server's clock, for the use-by of campaigns and renewals.
    clock: StoreClock,
    /// How long the elector waits for an answer (the backend timeout).
    patience: Duration,
    /// Server pushes on the command connection (see the module doc).
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    /// Whether `CLIENT TRACKING` is on for the current connection.
    tracking: bool,
    /// Until when a push is taken for the invalidation of our own last renewal.
    own_push_until: Option<Instant>,
    /// A follower's last sign of the holder's record: the campaign's read, or the last
    /// invalidation pushed for the key (see [`RedisBackend::wait_for_change`]).
    last_sign: Option<Instant>,
    /// When the holder's key expires unless renewed: as the campaign's read found it,
    /// or a ttl after the last renewal heard.
    holder_expires: Option<Instant>,
    /// This follower's wait for the baton (see [`baton`]).
    waiter: baton::Waiter,
    /// The release script, with the baton's hand-out.
    release: String,
    /// An announced new holder (`<value>`) the next campaign follows without a request.
    announced: Option<String>,
    /// A follower that saw the lock change looks by itself at this time, unless an
    /// announcement comes first.
    grace: Option<Instant>,
    /// Whether tracking is on the lock key (a leader's) rather than the renewals'.
    tracks_lock: bool,
    /// Our value, to announce once we lead (see `record_lost`).
    announce: Option<String>,
    /// Kept out of the read-write lock: when it looks by itself (see [`quiet`]).
    quiet: quiet::Wait,
}

/// An exclusive holder of the lock key, which hears of the key's changes by others
/// through `CLIENT TRACKING` (invariant 9): the election's holder and the read-write
/// lock's exclusive one (see [`own_key_lost`]).
pub(crate) trait OwnKey: Send {
    /// The pushes of the command connection.
    fn pushes(&mut self) -> &mut mpsc::UnboundedReceiver<PushInfo>;
    /// Records what one push means; `true` for a change of our key (tracking on).
    /// A disconnect notice means the tracking is gone with its connection.
    fn note_push(&mut self, push: &PushInfo) -> bool;
    /// Turns tracking of our key on and reads it in the same round trip: `true` while
    /// it holds our tenure's value.
    fn track_own_key(
        &mut self,
        op: &'static str,
    ) -> impl std::future::Future<Output = Result<bool, BackendError>> + Send;
    /// Until when a push is taken for the invalidation of our own last renewal.
    fn own_push_until(&mut self) -> &mut Option<Instant>;
    /// A read of the key after a push: whether it holds another value than ours.
    fn taken(&mut self) -> impl std::future::Future<Output = bool> + Send;
}

/// An exclusive holder's wait for news of its key (`record_lost`), resolving once the
/// key is gone or no longer ours.
///
/// Redis (7.0.15 here) pushes an invalidation for a key a script of this very
/// connection changed, NOLOOP or not, right after the script's answer: the first
/// push within [`OWN_PUSH_WINDOW`] of a renewal's answer is taken for that one,
/// so the holder sends one request per renewal. Any other push for our key is
/// looked at before concluding. (On a server that does not push our own changes,
/// someone else's change within that window is found by the next renewal instead.)
///
/// A disconnect notice (the tracking went with its connection) turns tracking on
/// again at once, on the connection the client opened since, with a read of our
/// key: waiting for the next renewal to do it left us blind to a takeover until
/// then, and when the notice came after a renewal had gone out on the new
/// connection, that renewal had not done it either. Cancel-safe: a wait dropped
/// during that read leaves tracking off, and the next renewal turns it on.
pub(crate) async fn own_key_lost(holder: &mut impl OwnKey) {
    while let Some(push) = holder.pushes().recv().await {
        if push.kind == PushKind::Disconnection {
            holder.note_push(&push);
            // Refused (the connection still down): the next renewal tracks again.
            if let Ok(false) = holder.track_own_key("record_lost").await {
                return;
            }
            continue;
        }
        if !holder.note_push(&push) {
            continue;
        }
        let own = holder.own_push_until().take();
        if push.kind == PushKind::Invalidate && own.is_some_and(|u| Instant::now() <= u) {
            continue;
        }
        if holder.taken().await {
            return;
        }
    }
    std::future::pending().await
}

/// What a renew script's answer (`kept`) means. A renewal's own invalidation follows
/// its answer: expected until `own_push_until` (see `record_lost`).
pub(crate) fn renewal_of(
    kept: i64,
    own_push_until: &mut Option<Instant>,
) -> Result<Renewal, BackendError> {
    match kept {
        1 => {
            *own_push_until = Some(Instant::now() + OWN_PUSH_WINDOW);
            Ok(Renewal::Renewed)
        }
        REFUSED => Err(too_late("renew")),
        _ => Ok(Renewal::Lost),
    }
}

/// After a push for the lock key: whether a read shows our tenure over (the key gone,
/// or holding another value than our tenure's `value`). A read that fails says
/// nothing (`false`): the renewals decide then.
pub(crate) async fn lock_taken(conn: &mut ConnectionManager, lock: &str, value: &str) -> bool {
    let current: Result<Option<String>, _> = redis::cmd("GET").arg(lock).query_async(conn).await;
    current.is_ok_and(|v| !Seen::of(v.as_deref(), value).still_ours())
}

/// How soon after a renewal's answer its own invalidation is expected.
pub(crate) const OWN_PUSH_WINDOW: Duration = Duration::from_millis(50);

/// What a script answers when the request came after its use-by and did nothing.
pub(crate) const REFUSED: i64 = 2;

/// A request the server refused because it arrived after its use-by: the elector had
/// stopped waiting for it (see [`super::store_clock`]).
pub(crate) fn too_late(op: &'static str) -> BackendError {
    BackendError::Store {
        op,
        message: "the request reached the server after its use-by and was refused".into(),
    }
}

pub(crate) fn store(op: &'static str) -> impl FnOnce(redis::RedisError) -> BackendError {
    move |e| {
        if e.is_timeout() {
            // The connection's own response timeout: the request may still act.
            BackendError::TimedOut {
                op,
                detail: e.to_string(),
            }
        } else {
            BackendError::Store {
                op,
                message: e.to_string(),
            }
        }
    }
}

impl RedisBackend {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    pub fn new(settings: &RedisSettings, lease: &Candidacy) -> Result<Self, BackendError> {
        let (election, identity) = (lease.election, lease.identity);
        let (ttl, renew_interval, op_timeout) = (
            lease.timing.ttl,
            lease.timing.renew_interval,
            lease.timing.backend_timeout,
        );
        let keys = Keys::for_election(election);
        let wake = Arc::new(Notify::new());
        let (node, pushes) =
            Node::connect_election(settings, &keys, identity, wake.clone(), op_timeout)?;
        let waiter = baton::Waiter::spawn(
            redis::Client::open(settings.info.clone()).map_err(store("connect"))?,
            keys.baton.clone(),
            node.notices.clone(),
            wake.clone(),
            op_timeout,
        );
        Ok(RedisBackend {
            node,
            keys,
            identity: identity.to_owned(),
            ttl,
            cadence: super::redis::Cadence {
                ttl,
                renew_interval,
            },
            nonce: new_nonce(),
            value: None,
            floor: 0,
            wake,
            expiry_hint: None,
            acquire: Script::new(&format!(
                "{CLOCK}{}{READERS}{QUEUE}{ACQUIRE}",
                switchover::RESERVED
            )),
            renew: Script::new(&format!("{CLOCK}{QUEUE}{RENEW}")),
            clock: StoreClock::new(lease.timing.clock_drift),
            patience: op_timeout,
            pushes,
            tracking: false,
            own_push_until: None,
            last_sign: None,
            holder_expires: None,
            waiter,
            release: format!(
                "{QUEUE}{RELEASE}{}{RELEASE_END}",
                baton::hand_out("KEYS[2]", "ARGV[4]")
            ),
            announced: None,
            grace: None,
            tracks_lock: false,
            announce: None,
            quiet: quiet::Wait::default(),
        })
    }

    /// Gives our own lock back, with a switchover's reservation for `to` written first
    /// in the same round trip.
    async fn release_for(&mut self, to: Option<&str>) -> Result<(), BackendError> {
        // Whatever the answer, this tenure is over: the next one gets a fresh nonce so
        // a leftover value of this one is never adopted as a new tenure.
        let prefix = self.nonce_prefix();
        self.nonce = new_nonce();
        self.value = None;
        self.announce = None;
        self.wait_quietly_after(0, -1);
        // EVAL with the script's text, not EVALSHA: one round trip whatever the server
        // has cached (a server that never ran the release script, or restarted, would
        // answer EVALSHA with NOSCRIPT, and SCRIPT LOAD and EVALSHA again make three:
        // on a slow link they miss the release budget, and the followers wait a ttl).
        let mut release = redis::pipe();
        // Nor does a candidate that lets go (a stop, or a slot withdrawn from while it
        // holds another) wait for a baton: a baton it popped would wake nobody else.
        if let Some(unblock) = self.waiter.disarm() {
            release.add_command(unblock).ignore();
        }
        if let Some(to) = to {
            release
                .add_command(switchover::reserve(&self.keys.to, to, self.ttl))
                .ignore();
        }
        release
            .cmd("EVAL")
            .arg(&self.release)
            .arg(4)
            .arg(&self.keys.lock)
            .arg(&self.keys.baton)
            .arg(&self.keys.writer_waits)
            .arg(&self.keys.busy)
            .arg(&prefix)
            .arg(&self.keys.events)
            .arg(if to.is_some() { "all" } else { "one" })
            .arg(self.ttl_ms().max(1))
            .arg(&self.keys.rw);
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
        self.stop_tracking().await;
        // What was heard during the tenure is of it or older.
        self.node.notices.clear();
        Ok(())
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn nonce_prefix(&self) -> String {
        format!("{}|", self.nonce)
    }

    /// Takes the pushes that arrived so far; `true` if one says our key changed.
    /// A disconnect notice means the tracking is gone with its connection.
    fn drain_pushes(&mut self) -> bool {
        let mut changed = false;
        while let Ok(push) = self.pushes.try_recv() {
            changed |= self.note_push(&push);
        }
        changed
    }

    fn tracking_pipe(&self) -> redis::Pipeline {
        tracking_pipe(&[&self.keys.lock])
    }

    /// A follower's tracking: the key every renewal writes (see [`baton`]), and what
    /// keeps a candidate of the read-write lock out ([`follower_tracking`]).
    async fn start_tracking(&mut self) -> Result<(), BackendError> {
        self.tracks_lock = false;
        let () = follower_tracking(&self.keys)
            .query_async(&mut self.node.conn)
            .await
            .map_err(store("campaign"))?;
        Ok(())
    }

    /// Best effort: followers need no pushes (and ignore any that still come).
    async fn stop_tracking(&mut self) {
        if self.tracking {
            self.tracking = false;
            let _: Result<(), _> = redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("OFF")
                .query_async(&mut self.node.conn)
                .await;
        }
        self.drain_pushes();
    }

    /// A new leader's announcement (`acquired|<value>` on the announcement channel),
    /// once, after its claim began: followers wake after the claim, not during it.
    /// Sent again before the next renewal until the server has taken it (twice is
    /// harmless); a follower whose subscription was down meanwhile looks once it is
    /// back (see [`listen`]).
    async fn announce_once(&mut self) {
        let Some(value) = self.announce.clone() else {
            return;
        };
        let sent: redis::RedisResult<i64> = redis::cmd("PUBLISH")
            .arg(&self.keys.leader)
            .arg(format!("acquired|{value}"))
            .query_async(&mut self.node.conn)
            .await;
        if sent.is_ok() {
            self.announce = None;
        }
    }

    /// A follower takes an announced holder as its observation, without a request (the
    /// take script published it in the same step as the take). `None` for a value that
    /// names nobody, which a look settles instead.
    fn follow_announced(&mut self, value: &str) -> Option<Campaign> {
        let holder = announced_holder(value, self.floor)?;
        // A former leader still tracking the lock looks once (which tracks the renewals).
        if self.value.is_some() || self.tracks_lock {
            return None;
        }
        self.floor = holder.token.unwrap_or(self.floor);
        let now = Instant::now();
        self.grace = None;
        self.wait_quietly_after(0, -1);
        self.drain_pushes();
        self.last_sign = self.tracking.then_some(now);
        self.holder_expires = Some(now + self.ttl);
        self.expiry_hint = Some(now + self.ttl + Duration::from_millis(2));
        Some(Campaign::Held(Some(holder)))
    }

    /// After a look: an election's candidate kept out by the shared holders (`why` 3)
    /// or by a place ahead in the queue (4) waits as a `--mode` candidate does (see
    /// [`quiet`], [`RedisBackend::wait_quietly`]), woken by the read-write lock's
    /// channel; one kept out by a holder of the lock key follows it (see
    /// [`baton`]).
    fn wait_quietly_after(&mut self, why: i64, pttl: i64) {
        let look = match why {
            3 => quiet::Look::KeptOut { pttl },
            4 => quiet::Look::Queued { pttl },
            _ => {
                self.quiet.stop();
                self.node.notices.want_rw(false);
                return;
            }
        };
        // Kept out by a place ahead, not by the shared holders: nobody holds.
        let (ttl, tracked) = (self.ttl, self.tracking);
        (self.quiet).looked(&look, false, ttl, tracked, Instant::now(), OWN_PUSH_WINDOW);
        self.node.notices.want_rw(true);
    }

    /// An election's candidate kept out by the shared holders or by a place ahead in
    /// the queue (see [`RedisBackend::wait_quietly_after`]) waits as a `--mode
    /// exclusive` one does: it sends nothing while what keeps it out is renewed (each
    /// renewal pushed to it, `Quiet`), and looks (`Changed`) on the baton, on a message
    /// of the read-write lock's channel (also one heard since its last look began), on
    /// a lost tracking connection, or when what keeps it out would have expired
    /// unheard-of; `max` first: `Waiting`.
    async fn wait_quietly(&mut self, max: Duration) -> Wake {
        if self.node.notices.take_rw() {
            return Wake::Changed;
        }
        let until = Instant::now() + max;
        loop {
            let look_at = self.quiet.look_at().unwrap_or(until);
            tokio::select! {
                _ = self.wake.notified() => {
                    if let Some(wake) = self.on_notice() {
                        return wake;
                    }
                }
                push = self.pushes.recv() => {
                    let Some(push) = push else { return Wake::Changed };
                    match push.kind {
                        PushKind::Disconnection => {
                            self.tracking = false;
                            return Wake::Changed;
                        }
                        PushKind::Invalidate => {
                            let keys = quiet::invalidated(&push);
                            let now = Instant::now();
                            match self.quiet.heard(&keys, &self.keys.busy, self.ttl, now) {
                                quiet::Heard::Renewal => return Wake::Quiet,
                                quiet::Heard::Due => return Wake::Changed,
                                quiet::Heard::Nothing => {}
                            }
                        }
                        _ => {}
                    }
                }
                _ = tokio::time::sleep_until(until.min(look_at)) => {
                    let now = Instant::now();
                    return if now >= look_at { Wake::Changed } else { Wake::Waiting };
                }
            }
        }
    }

    /// Whether an invalidation concerns the holder of the lock key a follower follows
    /// (its `alive`; a flush of everything too), not the read-write lock's keys.
    fn names_alive(&self, push: &PushInfo) -> bool {
        let keys = quiet::invalidated(push);
        keys.is_empty() || keys.iter().any(|k| k == self.keys.alive.as_bytes())
    }

    /// What a wake-up of the listener or the baton waiter asks for: a look (`Changed`,
    /// the campaign runs the script), an announced holder to follow (`Changed`, the
    /// campaign follows it without a request), or nothing new (`None`).
    fn on_notice(&mut self) -> Option<Wake> {
        // The read-write lock's channel asks for a look only while we wait for it.
        let rw = self.node.notices.take_rw() && self.quiet.look_at().is_some();
        if self.node.notices.take_look() || rw {
            self.announced = None;
            return Some(Wake::Changed);
        }
        let (_, value) = self.node.notices.take_announcement()?;
        self.announced = Some(value);
        Some(Wake::Changed)
    }

    /// A tracking invalidation while following a holder whose last sign was at `last`:
    /// `Some(wake)` to return, `None` to keep waiting.
    fn on_invalidation(&mut self, last: Instant, expires: Option<Instant>) -> Option<Wake> {
        let now = Instant::now();
        match self.cadence.read_push(now, last, expires) {
            Pushed::Look => Some(Wake::Changed),
            Pushed::TooSoon => {
                // Not a renewal at its cadence: two holders' renewals (one about to
                // find its key gone), or a change by hand. Look only if no
                // announcement comes within the grace.
                self.grace.get_or_insert_with(|| now + baton::grace());
                None
            }
            Pushed::Renewal => {
                self.last_sign = Some(now);
                self.holder_expires = Some(now + self.ttl);
                Some(Wake::Quiet)
            }
        }
    }
}

/// How a follower reads the holder's tracking pushes: they come at the renew
/// interval (this candidate's own, which a fleet shares; a holder with another one
/// costs looks, never safety). A push sooner than half of it after the last sign is
/// someone else's change; none by 9/4 of it (at most the ttl) means the holder
/// stopped renewing there. With the default renew interval (ttl/3): ttl/6 and 3/4 ttl.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cadence {
    pub(crate) ttl: Duration,
    pub(crate) renew_interval: Duration,
}

impl Cadence {
    /// (too soon, too late) after the last sign.
    pub(crate) fn bounds(&self) -> (Duration, Duration) {
        (
            self.renew_interval / 2,
            (self.renew_interval * 9 / 4).min(self.ttl),
        )
    }

    /// When a follower whose last sign of the holder was at `last` looks by itself:
    /// when the next renewal is late, or at `expires`, when the holder's key expires
    /// unless renewed (as read, or a ttl after the last renewal heard).
    pub(crate) fn due(&self, last: Instant, expires: Option<Instant>) -> Instant {
        let (_, late) = self.bounds();
        let due = last + late;
        expires.map_or(due, |e| due.min(e))
    }

    /// What a tracking push of the holder's `alive`, heard at `now`, means to such a
    /// follower. The key's expiry pushes the same invalidation as a renewal: a push
    /// less than [`quiet::DUE_WITHIN`] before `expires` is taken for the expiry (a
    /// renewal that late costs one look, never safety), one at its cadence for a
    /// renewal, one sooner for someone else's change.
    pub(crate) fn read_push(
        &self,
        now: Instant,
        last: Instant,
        expires: Option<Instant>,
    ) -> Pushed {
        let expiring = expires.is_some_and(|e| now + self.ttl / quiet::DUE_WITHIN >= e);
        if expiring || now >= self.due(last, expires) {
            return Pushed::Look;
        }
        let (too_soon, _) = self.bounds();
        if now.saturating_duration_since(last) < too_soon {
            return Pushed::TooSoon;
        }
        Pushed::Renewal
    }
}

/// What a push of the holder's `alive` means to a follower ([`Cadence::read_push`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// The holder's renewal is late or its key expired: look.
    Look,
    /// Sooner than a renewal: another holder's change, or one by hand.
    TooSoon,
    /// A renewal: the holder lives, its key expires a ttl later.
    Renewal,
}

/// `CLIENT TRACKING` (re)started on a holder's own keys (the lock key; a shared
/// holder's also the readers' set). Off first: switching on again with the same prefix
/// is refused by some servers when tracking was left on (a failed turn-off at a
/// step-down).
pub(crate) fn tracking_pipe(own: &[&str]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("CLIENT").arg("TRACKING").arg("OFF").ignore();
    let on = pipe.cmd("CLIENT").arg("TRACKING").arg("ON").arg("BCAST");
    for key in own {
        on.arg("PREFIX").arg(*key);
    }
    on.arg("NOLOOP").ignore();
    pipe
}

/// A follower's `CLIENT TRACKING` (restarted, as [`tracking_pipe`]): every change of
/// the holders' renewals (the exclusive holder's `alive`, the readers' set) and of
/// their keeping of the queue (`busy`) is pushed to it, so that it needs to ask
/// nothing while they renew: an election's follower (see [`baton`], [`quiet`]) and a
/// `--mode` one (see [`rw`]).
pub(crate) fn follower_tracking(keys: &Keys) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("CLIENT").arg("TRACKING").arg("OFF").ignore();
    pipe.cmd("CLIENT").arg("TRACKING").arg("ON").arg("BCAST");
    for key in [&keys.readers, &keys.alive, &keys.busy] {
        pipe.arg("PREFIX").arg(key);
    }
    pipe.arg("NOLOOP").ignore();
    pipe
}

/// What the pub/sub listener needs.
pub(crate) struct Listen {
    pub(crate) client: redis::Client,
    pub(crate) keys: Keys,
    /// This candidate's presence channel (see [`switchover`]).
    pub(crate) presence: String,
    pub(crate) db: i64,
    pub(crate) wake: Arc<Notify>,
    pub(crate) notices: Arc<baton::Notices>,
    pub(crate) hears: Hears,
    pub(crate) op_timeout: Duration,
}

/// Which message names a new holder for the listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hears {
    /// `acquired|…` on the announcement channel, published by the new leader once it
    /// has claimed (`redlock`); the take's own `acquired|…` on the events channel
    /// wakes nobody.
    Announcements,
    /// As `Announcements` (`redis`, an election's candidate), and the read-write
    /// lock's channel too, noted in [`baton::Notices`] and waking only while the
    /// candidate waits for the read-write lock (see [`RedisBackend::wait_quietly`]).
    Election,
    /// None: every message on the events channel and on the read-write lock's channel
    /// asks for a look (`redis --mode`, see [`rw`]).
    ReadWrite,
}

/// Keeps one pub/sub connection subscribed to the election's events, to key expiry
/// events and to this candidate's presence channel (which lists it as a live
/// candidate while the connection lives), and wakes the follower on each event, with
/// what it heard in `notices`: an announcement's value, or a request to look (a
/// release announced to everyone, an expiry). Reconnects with backoff; after every
/// (re)subscribe it asks to look once, since messages may have been missed.
pub(crate) async fn listen(l: Listen) {
    let expired = format!("__keyevent@{}__:expired", l.db);
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        let subscribed = async {
            let mut pubsub = l.client.get_async_pubsub().await?;
            pubsub.subscribe(&l.keys.events).await?;
            if l.hears != Hears::ReadWrite {
                pubsub.subscribe(&l.keys.leader).await?;
            }
            if l.hears != Hears::Announcements {
                pubsub.subscribe(&l.keys.rw).await?;
            }
            pubsub.subscribe(&expired).await?;
            pubsub.subscribe(&l.presence).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(l.op_timeout, subscribed).await {
            Ok(Ok(mut pubsub)) => {
                backoff.reset();
                l.notices.look();
                l.wake.notify_one();
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    if heard(&l, &expired, &msg) {
                        l.wake.notify_one();
                    }
                }
                tracing::debug!("redis pub/sub connection closed; reconnecting");
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "redis pub/sub subscribe failed"),
            Err(_) => tracing::debug!("redis pub/sub subscribe timed out"),
        }
        tokio::time::sleep(backoff.next_wait()).await;
    }
}

/// Notes what one pub/sub message says; `true` when it concerns the election.
fn heard(l: &Listen, expired: &str, msg: &redis::Msg) -> bool {
    let channel = msg.get_channel_name();
    let payload = msg.get_payload_bytes();
    let announced = |value: &[u8]| {
        l.notices.announce(&String::from_utf8_lossy(value));
        true
    };
    let look = || {
        l.notices.look();
        true
    };
    if channel == l.keys.events {
        match (payload.strip_prefix(b"acquired|"), l.hears) {
            (Some(_), Hears::Announcements | Hears::Election) => false,
            _ => look(),
        }
    } else if channel == l.keys.rw {
        match l.hears {
            Hears::ReadWrite => look(),
            Hears::Election => l.notices.rw_news(),
            Hears::Announcements => false,
        }
    } else if channel == l.keys.leader {
        payload.strip_prefix(b"acquired|").is_some_and(announced)
    } else if channel == expired && payload == l.keys.lock.as_bytes() {
        look()
    } else {
        false
    }
}

/// A Redis-family follower's wait (see [`super::wait_for_wake`]).
pub(crate) async fn wait_for_notice(
    wake: &Notify,
    hint: &mut Option<Instant>,
    max: Duration,
) -> Wake {
    super::wait_for_wake(wake, hint, max).await;
    Wake::Changed
}

impl OwnKey for RedisBackend {
    fn pushes(&mut self) -> &mut mpsc::UnboundedReceiver<PushInfo> {
        &mut self.pushes
    }

    fn note_push(&mut self, push: &PushInfo) -> bool {
        match push.kind {
            PushKind::Disconnection => {
                self.tracking = false;
                false
            }
            PushKind::Invalidate => self.tracking,
            _ => false,
        }
    }

    /// Turns tracking of our key on (when it is off) and reads the key in the same
    /// round trip, so that every later change of it by anyone else will be pushed to
    /// us.
    async fn track_own_key(&mut self, op: &'static str) -> Result<bool, BackendError> {
        let Some(value) = self.value.clone() else {
            return Ok(false);
        };
        // What arrived before tracking was on is from an earlier tenure.
        self.drain_pushes();
        let mut pipe = self.tracking_pipe();
        // A leader waits for no baton: end a follower's wait that may still be open.
        if let Some(unblock) = self.waiter.disarm() {
            pipe.add_command(unblock).ignore();
        }
        let (current,): (Option<String>,) = pipe
            .cmd("GET")
            .arg(&self.keys.lock)
            .query_async(&mut self.node.conn)
            .await
            .map_err(store(op))?;
        self.tracking = true;
        self.tracks_lock = true;
        Ok(current.as_deref() == Some(value.as_str()))
    }

    fn own_push_until(&mut self) -> &mut Option<Instant> {
        &mut self.own_push_until
    }

    async fn taken(&mut self) -> bool {
        let Some(value) = self.value.clone() else {
            return true;
        };
        lock_taken(&mut self.node.conn, &self.keys.lock, &value).await
    }
}

impl Backend for RedisBackend {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        if let Some(held) = self
            .announced
            .take()
            .and_then(|v| self.follow_announced(&v))
        {
            return Ok(held);
        }
        self.grace = None;
        let prefix = self.nonce_prefix();
        self.last_sign = None;
        if !self.tracking || self.tracks_lock {
            // Before the read: a follower then hears of every renewal without asking
            // (see `wait_for_change`). A server without tracking (before Redis 6)
            // refuses; its followers wait as they did before.
            self.drain_pushes();
            self.tracking = self.start_tracking().await.is_ok();
        }
        // What the read-write lock's channel said so far is older than this look.
        self.node.notices.take_rw();
        let read_at = Instant::now();
        let (won, value, pttl, store_ms, why): (i64, String, i64, u64, i64) = self
            .acquire
            .key(&self.keys.lock)
            .key(&self.keys.fence)
            .key(&self.keys.to)
            .key(&self.keys.baton)
            .key(&self.keys.readers)
            .key(&self.keys.writer_waits)
            .key(&self.keys.busy)
            .arg(&prefix)
            .arg(&self.identity)
            .arg(self.ttl_ms())
            .arg(self.floor)
            .arg(&self.keys.events)
            .arg(self.clock.use_by(read_at, self.patience))
            .arg(&self.keys.presence)
            .arg(&self.keys.rw)
            .invoke_async(&mut self.node.conn)
            .await
            .map_err(store("campaign"))?;
        self.clock.learn(read_at, Instant::now(), store_ms);
        if won == REFUSED {
            return Err(too_late("campaign"));
        }
        let parsed = parse_value(&value);
        if let Some(token) = parsed.token {
            self.floor = self.floor.max(token);
        }
        self.wait_quietly_after(why, pttl);
        if won == 1 {
            let token = parsed.token.ok_or_else(|| BackendError::Store {
                op: "campaign",
                message: format!("lock value without a token: {value:?}"),
            })?;
            self.value = Some(value);
            self.expiry_hint = None;
            self.node.notices.clear();
            if !self.track_own_key("campaign").await? {
                // Taken or deleted between our two requests: not ours to claim.
                self.value = None;
                return Ok(Campaign::Held(None));
            }
            // Followers hear of us once we lead (see `record_lost`).
            self.announce = self.value.clone();
            return Ok(Campaign::Acquired { token });
        }
        self.expiry_hint =
            (pttl > 0).then(|| Instant::now() + Duration::from_millis(pttl as u64 + 2));
        // Pushes are answered in order on the connection: those queued now are about
        // changes before our read, which it has seen.
        self.drain_pushes();
        self.last_sign = (pttl > 0 && self.tracking).then_some(read_at);
        self.holder_expires =
            (pttl > 0).then(|| read_at + Duration::from_millis(pttl.unsigned_abs()));
        let holder = (!parsed.identity.is_empty()).then(|| Holder {
            identity: parsed.identity.to_owned(),
            token: parsed.token,
        });
        Ok(Campaign::Held(holder))
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let Some(value) = self.value.clone() else {
            return Ok(Renewal::Lost);
        };
        // The script below checks our value itself: pushes so far say nothing more
        // (and our own scripted renewals push one, NOLOOP or not).
        self.drain_pushes();
        if !self.tracking && !self.track_own_key("renew").await? {
            return Ok(Renewal::Lost);
        }
        let sent = Instant::now();
        self.announce_once().await;
        let (kept, store_ms): (i64, u64) = self
            .renew
            .key(&self.keys.lock)
            .key(&self.keys.alive)
            .key(&self.keys.writer_waits)
            .key(&self.keys.busy)
            .arg(&value)
            .arg(self.ttl_ms())
            .arg(self.clock.use_by(sent, self.patience))
            .invoke_async(&mut self.node.conn)
            .await
            .map_err(store("renew"))?;
        self.clock.learn(sent, Instant::now(), store_ms);
        renewal_of(kept, &mut self.own_push_until)
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.release_for(None).await
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.release_for(Some(to)).await
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        let channels: Vec<String> = switchover::live(&self.keys.presence)
            .query_async(&mut self.node.conn)
            .await
            .map_err(store("candidates"))?;
        Ok(Some(switchover::identities(&self.keys.presence, channels)))
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
    /// channel, the baton, the holder's expiry, or `max`.
    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        if self.value.is_none() {
            self.waiter.arm();
            if self.quiet.look_at().is_some() {
                return self.wait_quietly(max).await;
            }
        }
        let tracked = self.tracking && self.value.is_none();
        let Some(last) = self.last_sign.filter(|_| tracked) else {
            // Nothing to follow by pushes; drop what a past tenure left.
            self.drain_pushes();
            let wake = wait_for_notice(&self.wake, &mut self.expiry_hint, max).await;
            self.on_notice();
            return wake;
        };
        // The key's own expiry, as read or a ttl after the last renewal heard (pushed
        // too, but only once the server gets round to expiring it).
        let expires = self.holder_expires.map(|e| e + Duration::from_millis(2));
        let due = self.cadence.due(last, expires);
        let until = (Instant::now() + max).min(due);
        loop {
            let until = self.grace.map_or(until, |g| until.min(g));
            tokio::select! {
                _ = self.wake.notified() => {
                    if let Some(wake) = self.on_notice() {
                        return wake;
                    }
                }
                push = self.pushes.recv() => {
                    let Some(push) = push else { return Wake::Changed };
                    match push.kind {
                        PushKind::Disconnection => {
                            self.tracking = false;
                            return Wake::Changed;
                        }
                        PushKind::Invalidate if self.names_alive(&push) => {
                            if let Some(wake) = self.on_invalidation(last, expires) {
                                return wake;
                            }
                        }
                        _ => {}
                    }
                }
                _ = tokio::time::sleep_until(until) => {
                    let now = Instant::now();
                    if self.grace.is_some_and(|g| now >= g) {
                        self.grace = None;
                        return Wake::Changed;
                    }
                    return if now >= due { Wake::Changed } else { Wake::Waiting };
                }
            }
        }
    }

    /// Once it announced itself, [`own_key_lost`].
    async fn record_lost(&mut self) {
        self.announce_once().await;
        own_key_lost(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_takes_no_announcement_older_than_a_token_it_knows() {
        let named = |identity: &str, token| Holder {
            identity: identity.to_owned(),
            token: Some(token),
        };
        assert_eq!(announced_holder("n|5|b", 4), Some(named("b", 5)));
        assert_eq!(announced_holder("n|5|b", 5), Some(named("b", 5)));
        // A former holder's announcement, delayed past its successor's take.
        assert_eq!(announced_holder("n|4|a", 5), None);
        assert_eq!(announced_holder("n|6|", 5), None);
        assert_eq!(announced_holder("n|x|a", 0), None);
    }

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

    /// A follower's reading of the holder's pushes (ttl 3 s, renewals every second).
    #[test]
    fn a_push_at_the_holders_expiry_is_the_expiry_not_a_renewal() {
        let ms = Duration::from_millis;
        let cadence = Cadence {
            ttl: ms(3_000),
            renew_interval: ms(1_000),
        };
        let t0 = Instant::now();
        let renewed = Some(t0 + ms(3_000));
        assert_eq!(
            cadence.read_push(t0 + ms(1_000), t0, renewed),
            Pushed::Renewal
        );
        assert_eq!(
            cadence.read_push(t0 + ms(200), t0, renewed),
            Pushed::TooSoon
        );
        // No renewal by 9/4 of the interval: the holder stopped renewing.
        assert_eq!(cadence.read_push(t0 + ms(2_300), t0, renewed), Pushed::Look);
        // A look at t0 found the key expiring 750 ms later: its expiry's push comes
        // at the holder's renewal cadence, yet it is the expiry, even a little early.
        let read = Some(t0 + ms(752));
        assert_eq!(cadence.read_push(t0 + ms(745), t0, read), Pushed::Look);
        // Likewise a ttl after the last renewal heard.
        assert_eq!(
            cadence.read_push(t0 + ms(2_990), t0 + ms(900), renewed),
            Pushed::Look
        );
        assert_eq!(cadence.due(t0, read), t0 + ms(752));
        assert_eq!(cadence.due(t0, renewed), t0 + ms(2_250));
    }

    #[test]
    fn keys_share_one_cluster_slot() {
        let k = Keys::for_election("my-app");
        assert_eq!(k.lock, "leasekeeper:{my-app}:lock");
        assert!(k.fence.contains("{my-app}") && k.events.contains("{my-app}"));
    }
}
