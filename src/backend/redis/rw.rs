//! The read-write lock on one Redis server (`--mode shared|exclusive`).
//!
//! Keys, beside the election's (all hash-tagged with `{<election>}`):
//! - the **exclusive holder** is the election's own lock key, `…:lock` =
//!   `<nonce>|<token>|<identity>` with a PX ttl: a `--mode exclusive` holder and an
//!   election's holder (no `--mode`) are the same thing on the wire, so each keeps the
//!   other out, and the election's followers see a writer as a holder;
//! - the **shared holders**: the sorted set `…:readers`, member = the holder's value
//!   `<nonce>|<token>|<identity>`, score = its expiry in the server's milliseconds;
//!   every script drops the members whose expiry has passed before it decides;
//! - the **queue**: the sorted set `…:writer-waits` (named for its first use), one
//!   entry per waiting candidate, `<arrival µs>|<r or w>|<nonce>|<identity>`, scored
//!   with its lapse (see [`super::QUEUE`]). A reader takes unless an exclusive holder
//!   holds or a writer waits ahead of it; a writer takes when nobody holds and nobody
//!   waits ahead of it; an election's candidate queues as a writer while `--mode`
//!   candidates wait. So writers are not starved, and a reader that came before a
//!   writer goes before it. A take or a release removes the own entry; the entry of
//!   a candidate that is gone (its presence channel has no subscriber) or silent past
//!   its lapse (one and a half ttl after its last look, or two ttl after the holders
//!   last kept the queue by `…:busy`, half a ttl after a release that left the lock
//!   free), or stale (six ttl after its last look, `…:busy` or not) is dropped;
//! - the fencing counter `…:fence`, bumped by every take, shared or exclusive, so
//!   tokens grow across every tenure of the election.
//!
//! Every decision is one Lua script judged by the server's clock ([`TAKE`], the
//! shared holder's compare-and-act [`RENEW_SHARED`], the exclusive holder's renewal
//! the election's, and [`RELEASE`]); the election's own take refuses while shared
//! holders live or a `--mode` candidate waits ahead of it, and queues its candidate
//! as a waiting writer, as [`TAKE`] does. A stopped (SIGSTOP) waiting candidate keeps
//! its place while the holders renew (its connections stay open: the server cannot
//! tell it from a live one) for six ttl after its last look at most
//! ([`super::quiet::QUEUE_TTLS`]; a live one looks at least every five);
//! once they are gone its place lapses half a ttl after their release (two ttl after
//! the last renewal of a crashed holder), or one and a half ttl after its last look
//! if that is later. A
//! killed one's place goes at the next script that reads the queue (a shared holder's
//! renewal, a look: a candidate queued behind another looks within half a ttl).
//!
//! **Waiting** sends one look per five ttl at steady state (to keep its place). A follower's listener hears the events
//! channel and `…:rw`: every release of the exclusive lock (the election's too), the
//! release of the last shared holder, a waiting candidate's withdrawal and the drop of
//! a gone one's entry publish there, and every follower of the read-write lock looks
//! then (one script call each). Otherwise it hears the holders without asking: its
//! command connection tracks (`CLIENT TRACKING BCAST`) the readers' set, the
//! exclusive holder's `…:alive` and `…:busy`, so each renewal of what keeps it out
//! is pushed to it ([`heard_until`]); it looks by itself only when that would have
//! expired unheard-of (a crashed or stopped holder, a lapsed place ahead), when the
//! place ahead would go stale, and five ttl after its last look at the latest. Its
//! own place is kept by the holders it waits for (every take and renewal sets
//! `…:busy` for two ttl while the queue is not empty) for six ttl after its last look
//! (the decisions: [`super::quiet`]). An election's candidate (no `--mode`) kept out by the shared
//! holders or by a place ahead waits the same way, by the same decisions (see
//! [`super::RedisBackend`]); the election's release also hands the baton, and so does
//! the last shared holder's, so it wakes at once.
//!
//! **Own record** (invariant 9): every holder tracks what its tenure is made of
//! (`CLIENT TRACKING`, see [`super::RedisBackend`], by the one watch
//! [`own_key_lost`]): an exclusive holder the lock key, as an election's holder does; a
//! shared holder its entry in the readers' set and the lock key (a value there beside
//! a shared entry is a tenure that excludes it). A change by anyone else is pushed and
//! read at once ([`shared_entry_lost`]), so a tampered record ends the claim within a
//! round trip, not at the next renewal. The price for shared holders: every reader's
//! renewal changes the one sorted set, so each of N shared holders reads once after
//! each other one's renewal (N·(N−1) reads per renew interval, one round trip each);
//! waiting candidates still send only their looks.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use redis::{PushInfo, PushKind, Script};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

pub use super::quiet::{heard_until, next_look, Look};
use super::{
    baton, follower_tracking, lock_taken, new_nonce, own_key_lost, parse_value, quiet, store,
    switchover, too_late, Hears, Keys, Node, OwnKey, RedisSettings, CLOCK, QUEUE, READERS, REFUSED,
    RENEW,
};
use crate::backend::record::Seen;
use crate::backend::store_clock::StoreClock;
use crate::backend::{Backend, BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::status::{FencingToken, Holder, Mode};

/// How many shared holders a look lists for `/leader` (as etcd's).
const SHOWN: usize = 16;

/// Take or adopt, shared (`ARGV[7]` = `shared`) or exclusive. KEYS: lock, fence,
/// readers, queue (writer-waits), switchover reservation, baton, busy. ARGV: our
/// `<nonce>|`, identity, ttl ms, floor, events channel, use-by, mode, how many readers
/// to list, the presence channels' prefix, the read-write lock's channel.
/// Returns {code, value, pttl, store ms, readers listed}; code 1 taken (value ours),
/// 0 held exclusively (value the holder's, pttl its expiry), 3 kept out by the shared
/// holders (a writer), pttl until the last one expires, 4 kept out by a candidate
/// ahead in the queue (a writer for a reader, anyone for a writer), pttl until its
/// place goes stale (see [`super::QUEUE`]), 2 too late (nothing done). A candidate kept out takes (or keeps) its
/// place in the queue (see [`super::QUEUE`]).
pub const TAKE: &str = include_str!("lua/rw_take.lua");

/// A shared holder's compare-and-act renewal: only its own entry, only while it has
/// not expired, and only while nobody holds the lock exclusively. It keeps the queue
/// (the waiting candidates' places, see [`super::QUEUE`]) and drops the entries of
/// candidates that are gone or stale among the first two in arrival order, telling the
/// followers (`ARGV[5]`). KEYS: readers, lock,
/// queue, busy. ARGV: our value, ttl ms, use-by, the presence channels' prefix, the
/// read-write lock's channel. Returns {kept (2: too late), store ms}.
pub const RENEW_SHARED: &str = include_str!("lua/rw_renew_shared.lua");

/// Give back whatever of ours the lock holds (compare-and-DEL of the exclusive lock,
/// our shared entries, our place in the queue). When the lock is then free of every
/// holder, or we left the queue, hand the baton to one of the election's followers
/// and cut the queue's keeping to half a ttl (when free, see [`super::QUEUE`]) and
/// tell the read-write lock's followers (`ARGV[2]`). KEYS: lock, readers, queue
/// (writer-waits), baton, busy. ARGV: our `<nonce>|`, channel, the baton's PX (the
/// ttl). Returns 1 when it released a tenure of ours.
pub const RELEASE: &str = include_str!("lua/rw_release.lua");

const RELEASE_END: &str = include_str!("lua/rw_release_end.lua");

/// The text of the take script every candidate of the read-write lock runs: [`TAKE`]
/// after its preludes (the store's clock, the switchover's reservation, the shared
/// holders, the queue).
pub fn take_source() -> String {
    format!("{CLOCK}{}{READERS}{QUEUE}{TAKE}", switchover::RESERVED)
}

/// Reads a take script's answer.
pub fn judge(code: i64, value: String, pttl: i64) -> Result<Look, String> {
    match code {
        1 => Ok(Look::Took(value)),
        0 => Ok(Look::Exclusive { value, pttl }),
        3 => Ok(Look::KeptOut { pttl }),
        4 => Ok(Look::Queued { pttl }),
        REFUSED => Ok(Look::TooLate),
        other => Err(format!("unknown answer {other} of the take script")),
    }
}

fn holder(value: &str) -> Option<Holder> {
    let parsed = parse_value(value);
    (!parsed.identity.is_empty()).then(|| Holder {
        identity: parsed.identity.to_owned(),
        token: parsed.token,
    })
}

/// Who holds the lock, as a look found it (`readers`: the shared holders it listed;
/// `mode`: how we asked), for `/leader`: the exclusive holder alone, or the shared
/// holders (ours among them when we took shared).
pub fn holders(look: &Look, readers: &[String], mode: LockMode) -> Vec<(Holder, Mode)> {
    let shared = |vs: &[String]| -> Vec<(Holder, Mode)> {
        (vs.iter().filter_map(|v| holder(v)))
            .map(|h| (h, Mode::Shared))
            .take(SHOWN)
            .collect()
    };
    match look {
        Look::Took(own) if mode == LockMode::Shared => {
            let mut all = readers.to_vec();
            if !all.contains(own) {
                all.insert(0, own.clone());
            }
            shared(&all)
        }
        Look::Took(own) | Look::Exclusive { value: own, .. } => holder(own)
            .map(|h| (h, Mode::Exclusive))
            .into_iter()
            .collect(),
        Look::KeptOut { .. } | Look::Queued { .. } => shared(readers),
        Look::TooLate => Vec::new(),
    }
}

/// A holder's record as one read found it: an exclusive holder's is ours while the
/// lock key holds `value`; a shared holder's while its entry is there (`score`: the
/// member's, when present) with no lock value beside it.
fn seen(mode: LockMode, value: &str, score: Option<f64>, lock: Option<&str>) -> Seen {
    match (mode, lock) {
        (LockMode::Shared, Some(_)) => Seen::Another,
        (LockMode::Shared, None) if score.is_some() => Seen::Ours,
        (LockMode::Shared, None) => Seen::Free,
        (_, lock) => Seen::of(lock, value),
    }
}

/// After a push for a shared holder's keys: whether a read shows its entry gone or a
/// lock value beside it (one round trip). A read that fails says nothing (`false`):
/// the renewals decide then.
async fn shared_entry_lost(
    conn: &mut redis::aio::ConnectionManager,
    keys: &Keys,
    value: &str,
) -> bool {
    let read: Result<(Option<f64>, Option<String>), _> = redis::pipe()
        .cmd("ZSCORE")
        .arg(&keys.readers)
        .arg(value)
        .cmd("GET")
        .arg(&keys.lock)
        .query_async(conn)
        .await;
    matches!(read, Ok((score, lock)) if !seen(LockMode::Shared, value, score, lock.as_deref()).still_ours())
}

/// A candidate of the read-write lock on one Redis server.
pub struct RwBackend {
    node: Node,
    /// Pushes of the command connection: an exclusive holder's tracking of its key,
    /// the library's disconnect notices.
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    keys: Keys,
    identity: String,
    mode: LockMode,
    ttl: Duration,
    /// This tenure's nonce; rotated on every release.
    nonce: String,
    /// Our value while we hold.
    value: Option<String>,
    /// The highest token seen; new tokens never go below it.
    floor: FencingToken,
    wake: Arc<Notify>,
    /// A follower's silent wait: when it looks by itself (see [`super::quiet`]).
    quiet: quiet::Wait,
    take: Script,
    renew: Script,
    release: String,
    clock: StoreClock,
    patience: Duration,
    /// Who holds, as last observed (for `/leader`'s holders).
    observed: Vec<(Holder, Mode)>,
    /// Whether `CLIENT TRACKING` of our own record is on (a holder's).
    tracking: bool,
    /// Until when a push is taken for the invalidation of our own last renewal.
    own_push_until: Option<Instant>,
    /// Whether a follower's `CLIENT TRACKING` of the holders' renewals is on.
    follows: bool,
}

impl RwBackend {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    pub fn new(settings: &RedisSettings, lease: &Candidacy) -> Result<Self, BackendError> {
        let keys = Keys::for_election(lease.election);
        let wake = Arc::new(Notify::new());
        let op_timeout = lease.timing.backend_timeout;
        let (node, pushes) = Node::connect(
            settings,
            &keys,
            lease.identity,
            wake.clone(),
            op_timeout,
            Hears::ReadWrite,
        )?;
        Ok(RwBackend {
            node,
            pushes,
            keys,
            identity: lease.identity.to_owned(),
            mode: lease.mode,
            ttl: lease.timing.ttl,
            nonce: new_nonce(),
            value: None,
            floor: 0,
            wake,
            quiet: quiet::Wait::default(),
            take: Script::new(&take_source()),
            renew: Script::new(&format!(
                "{CLOCK}{QUEUE}{}",
                if lease.mode == LockMode::Shared {
                    RENEW_SHARED
                } else {
                    RENEW
                }
            )),
            release: format!(
                "{CLOCK}{QUEUE}{RELEASE}{}{RELEASE_END}",
                baton::hand_out("KEYS[4]", "ARGV[3]")
            ),
            clock: StoreClock::new(lease.timing.clock_drift),
            patience: op_timeout,
            observed: Vec::new(),
            tracking: false,
            own_push_until: None,
            follows: false,
        })
    }

    /// A follower's tracking (before its look): every change of the holders'
    /// renewals (`readers`, `alive`) and of their keeping of the queue (`busy`) is
    /// pushed to it, so that it needs to ask nothing while they renew. A server that
    /// refuses (before Redis 6) leaves it looking by itself (see [`next_look`]).
    async fn follow(&mut self) {
        if self.follows {
            return;
        }
        let on: Result<(), _> = follower_tracking(&self.keys)
            .query_async(&mut self.node.conn)
            .await;
        self.follows = on.is_ok();
    }

    /// A push while following: `Some(wake)` to return. A renewal heard moves the
    /// look on ([`heard_until`]) and refreshes the observation (`Quiet`); one heard
    /// when what it renews was about to expire is taken for its expiry, and a lost
    /// connection (its tracking gone) asks for a look, which turns it on again.
    fn on_push(&mut self, push: &PushInfo) -> Option<Wake> {
        match push.kind {
            PushKind::Disconnection => {
                self.tracking = false;
                self.follows = false;
                Some(Wake::Changed)
            }
            PushKind::Invalidate if self.follows => {
                let keys = quiet::invalidated(push);
                match (self.quiet).heard(&keys, &self.keys.busy, self.ttl, Instant::now()) {
                    quiet::Heard::Renewal => Some(Wake::Quiet),
                    quiet::Heard::Due => Some(Wake::Changed),
                    quiet::Heard::Nothing => None,
                }
            }
            _ => None,
        }
    }

    /// Best effort, at a release: followers need no pushes.
    async fn stop_tracking(&mut self) {
        if std::mem::take(&mut self.tracking) {
            let _: Result<(), _> = redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("OFF")
                .query_async(&mut self.node.conn)
                .await;
        }
        self.drain_pushes();
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// Takes the pushes so far; a disconnect notice means the tracking is gone.
    fn drain_pushes(&mut self) {
        while let Ok(push) = self.pushes.try_recv() {
            self.note_push(&push);
        }
    }

    fn flag(&self) -> &'static str {
        self.mode.flag().unwrap_or("exclusive")
    }

    /// One take script: what it said, and the shared holders it listed.
    async fn look(&mut self) -> Result<(Look, Vec<String>), BackendError> {
        self.drain_pushes();
        let sent = Instant::now();
        let (code, value, pttl, store_ms, readers): (i64, String, i64, u64, Vec<String>) = self
            .take
            .key(&self.keys.lock)
            .key(&self.keys.fence)
            .key(&self.keys.readers)
            .key(&self.keys.writer_waits)
            .key(&self.keys.to)
            .key(&self.keys.baton)
            .key(&self.keys.busy)
            .arg(format!("{}|", self.nonce))
            .arg(&self.identity)
            .arg(self.ttl_ms())
            .arg(self.floor)
            .arg(&self.keys.events)
            .arg(self.clock.use_by(sent, self.patience))
            .arg(self.flag())
            .arg(SHOWN)
            .arg(&self.keys.presence)
            .arg(&self.keys.rw)
            .invoke_async(&mut self.node.conn)
            .await
            .map_err(store("campaign"))?;
        self.clock.learn(sent, Instant::now(), store_ms);
        let look = judge(code, value, pttl).map_err(|message| BackendError::Store {
            op: "campaign",
            message,
        })?;
        Ok((look, readers))
    }
}

impl OwnKey for RwBackend {
    fn pushes(&mut self) -> &mut mpsc::UnboundedReceiver<PushInfo> {
        &mut self.pushes
    }

    fn note_push(&mut self, push: &PushInfo) -> bool {
        match push.kind {
            PushKind::Disconnection => {
                self.tracking = false;
                self.follows = false;
                false
            }
            PushKind::Invalidate => self.tracking,
            _ => false,
        }
    }

    /// A holder's watch of its own record, as the election's holder's (see
    /// [`super::RedisBackend`]): tracking turned on (it replaces a follower's) and the
    /// record read in one round trip; `true` while it is still ours, so that every
    /// later change by anyone else is pushed to us. An exclusive holder's record is the
    /// lock key; a shared holder's its entry in the readers' set, and the lock key's
    /// absence.
    async fn track_own_key(&mut self, op: &'static str) -> Result<bool, BackendError> {
        let Some(value) = self.value.clone() else {
            return Ok(false);
        };
        self.drain_pushes();
        self.follows = false;
        let keys = &self.keys;
        let (score, current): (Option<f64>, Option<String>) = if self.mode == LockMode::Shared {
            super::tracking_pipe(&[&keys.lock, &keys.readers])
                .cmd("ZSCORE")
                .arg(&keys.readers)
                .arg(&value)
                .cmd("GET")
                .arg(&keys.lock)
                .query_async(&mut self.node.conn)
                .await
        } else {
            let got: Result<(Option<String>,), _> = super::tracking_pipe(&[&keys.lock])
                .cmd("GET")
                .arg(&keys.lock)
                .query_async(&mut self.node.conn)
                .await;
            got.map(|(current,)| (None, current))
        }
        .map_err(store(op))?;
        self.tracking = true;
        Ok(seen(self.mode, &value, score, current.as_deref()).still_ours())
    }

    fn take_own_push_until(&mut self) -> Option<Instant> {
        self.own_push_until.take()
    }

    async fn taken(&mut self) -> bool {
        let Some(value) = self.value.clone() else {
            return true;
        };
        if self.mode == LockMode::Shared {
            return shared_entry_lost(&mut self.node.conn, &self.keys, &value).await;
        }
        lock_taken(&mut self.node.conn, &self.keys.lock, &value).await
    }
}

impl Backend for RwBackend {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        Some(crate::status::Slots::one_lock(
            self.observed.iter().cloned(),
        ))
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        // What was heard so far is older than this look: no second look for it.
        self.node.notices.clear();
        let _ = self.wake.notified().now_or_never();
        if self.value.is_none() {
            self.follow().await;
        }
        let (look, readers) = self.look().await?;
        self.observed = holders(&look, &readers, self.mode);
        for (h, _) in &self.observed {
            self.floor = self.floor.max(h.token.unwrap_or(0));
        }
        // Our own script's change of a tracked key is pushed right after its answer.
        let (ttl, follows, held) = (self.ttl, self.follows, !readers.is_empty());
        let now = Instant::now();
        (self.quiet).looked(&look, held, ttl, follows, now, super::OWN_PUSH_WINDOW);
        match look {
            Look::TooLate => Err(too_late("campaign")),
            Look::Took(value) => {
                let token = parse_value(&value)
                    .token
                    .ok_or_else(|| BackendError::Store {
                        op: "campaign",
                        message: format!("lock value without a token: {value:?}"),
                    })?;
                self.floor = self.floor.max(token);
                self.value = Some(value);
                self.quiet.stop();
                if !self.track_own_key("campaign").await? {
                    // Taken or deleted between our two requests: not ours to claim.
                    self.value = None;
                    return Ok(Campaign::Held(None));
                }
                Ok(Campaign::Acquired { token })
            }
            Look::Exclusive { value, .. } => {
                if let Some(t) = parse_value(&value).token {
                    self.floor = self.floor.max(t);
                }
                Ok(Campaign::Held(holder(&value)))
            }
            Look::KeptOut { .. } | Look::Queued { .. } => Ok(Campaign::Held(
                self.observed.first().map(|(h, _)| h.clone()),
            )),
        }
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let Some(value) = self.value.clone() else {
            return Ok(Renewal::Lost);
        };
        // The script checks our value itself: pushes so far say nothing more.
        self.drain_pushes();
        if !self.tracking && !self.track_own_key("renew").await? {
            return Ok(Renewal::Lost);
        }
        let sent = Instant::now();
        let mut call = self.renew.prepare_invoke();
        if self.mode == LockMode::Shared {
            call.key(&self.keys.readers).key(&self.keys.lock);
        } else {
            call.key(&self.keys.lock).key(&self.keys.alive);
        }
        call.key(&self.keys.writer_waits).key(&self.keys.busy);
        let (kept, store_ms): (i64, u64) = call
            .arg(&value)
            .arg(self.ttl_ms())
            .arg(self.clock.use_by(sent, self.patience))
            .arg(&self.keys.presence)
            .arg(&self.keys.rw)
            .invoke_async(&mut self.node.conn)
            .await
            .map_err(store("renew"))?;
        let now = Instant::now();
        self.clock.learn(sent, now, store_ms);
        super::renewal_of(kept, now, &mut self.own_push_until).map_err(|_| too_late("renew"))
    }

    /// A holder hears of its record taken or deleted by anyone else at once, as the
    /// election's holder does (invariant 9), by the same watch ([`own_key_lost`]),
    /// which also tracks the record again as soon as the tracking connection is lost:
    /// an exclusive holder's key overwritten or deleted, a shared holder's entry
    /// removed or a lock value set beside it.
    async fn record_lost(&mut self) {
        own_key_lost(self).await
    }

    /// One request (`EVAL` with the text: a server that lost its script cache costs no
    /// second round trip), tried once more on a fresh connection when the last one died.
    async fn release(&mut self) -> Result<(), BackendError> {
        let prefix = format!("{}|", self.nonce);
        self.nonce = new_nonce();
        self.value = None;
        let mut release = redis::cmd("EVAL");
        release
            .arg(&self.release)
            .arg(5)
            .arg(&self.keys.lock)
            .arg(&self.keys.readers)
            .arg(&self.keys.writer_waits)
            .arg(&self.keys.baton)
            .arg(&self.keys.busy)
            .arg(&prefix)
            .arg(&self.keys.rw)
            .arg(self.ttl_ms().max(1));
        let first: Result<i64, _> = release.query_async(&mut self.node.conn).await;
        match first {
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() => {
                let _: i64 = release
                    .query_async(&mut self.node.conn)
                    .await
                    .map_err(store("release"))?;
            }
            other => {
                other.map_err(store("release"))?;
            }
        }
        self.stop_tracking().await;
        self.node.notices.clear();
        Ok(())
    }

    async fn release_to(&mut self, _to: &str) -> Result<(), BackendError> {
        Err(crate::backend::no_switchover_with(self.flag()))
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        Err(crate::backend::no_switchover_with(self.flag()))
    }

    /// A notice of the listener (a release, a take, a candidate gone from the queue,
    /// an expiry), or the time to look by itself ([`next_look`], moved on by every
    /// renewal heard: `Quiet`): `Changed`, a look. `max` first: `Waiting`.
    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        let until = Instant::now() + max;
        loop {
            let look_at = self.quiet.look_at().unwrap_or(until);
            tokio::select! {
                _ = self.wake.notified() => return Wake::Changed,
                push = self.pushes.recv(), if self.value.is_none() => {
                    let Some(push) = push else { return Wake::Changed };
                    if let Some(wake) = self.on_push(&push) {
                        return wake;
                    }
                }
                _ = tokio::time::sleep_until(until.min(look_at)) => {
                    return if Instant::now() >= look_at { Wake::Changed } else { Wake::Waiting };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holders_record_is_ours_only_as_its_mode_wrote_it() {
        let exclusive = LockMode::Exclusive;
        assert_eq!(seen(exclusive, "v", None, Some("v")), Seen::Ours);
        assert_eq!(seen(exclusive, "v", None, Some("w")), Seen::Another);
        assert_eq!(seen(exclusive, "v", None, None), Seen::Free);
        let shared = LockMode::Shared;
        assert_eq!(seen(shared, "v", Some(1.0), None), Seen::Ours);
        assert_eq!(seen(shared, "v", Some(1.0), Some("w")), Seen::Another);
        assert_eq!(seen(shared, "v", None, None), Seen::Free);
    }

    #[test]
    fn answers_are_read_by_their_code() {
        assert_eq!(judge(1, "n|3|a".into(), -1), Ok(Look::Took("n|3|a".into())));
        assert_eq!(
            judge(0, "n|3|a".into(), 900),
            Ok(Look::Exclusive {
                value: "n|3|a".into(),
                pttl: 900
            })
        );
        assert_eq!(judge(3, String::new(), 40), Ok(Look::KeptOut { pttl: 40 }));
        assert_eq!(judge(4, String::new(), 40), Ok(Look::Queued { pttl: 40 }));
        assert_eq!(judge(2, String::new(), -1), Ok(Look::TooLate));
        assert!(judge(7, String::new(), -1).is_err());
    }

    #[test]
    fn holders_are_the_exclusive_one_or_the_shared_ones() {
        let readers = vec!["a|1|r-a".to_owned(), "b|2|r-b".to_owned()];
        let ids = |v: Vec<(Holder, Mode)>| -> Vec<(String, Option<u64>, Mode)> {
            v.into_iter()
                .map(|(h, m)| (h.identity, h.token, m))
                .collect()
        };
        let w = Look::Exclusive {
            value: "w|9|w-0".into(),
            pttl: 5,
        };
        assert_eq!(
            ids(holders(&w, &[], LockMode::Shared)),
            [("w-0".into(), Some(9), Mode::Exclusive)]
        );
        let kept = Look::KeptOut { pttl: 5 };
        assert_eq!(
            ids(holders(&kept, &readers, LockMode::Exclusive)),
            [
                ("r-a".into(), Some(1), Mode::Shared),
                ("r-b".into(), Some(2), Mode::Shared)
            ]
        );
        let took = Look::Took("c|3|r-c".into());
        assert_eq!(holders(&took, &readers, LockMode::Shared).len(), 3);
        assert_eq!(
            ids(holders(&took, &readers, LockMode::Exclusive)),
            [("r-c".into(), Some(3), Mode::Exclusive)]
        );
        let quarantine = Look::Exclusive {
            value: "quarantine|4|".into(),
            pttl: 5,
        };
        assert!(holders(&quarantine, &[], LockMode::Shared).is_empty());
        let many: Vec<String> = (0..40).map(|i| format!("n{i}|{i}|r-{i}")).collect();
        assert_eq!(holders(&kept, &many, LockMode::Exclusive).len(), SHOWN);
    }
}
