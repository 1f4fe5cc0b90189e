//! The `Backend` trait: how one store is turned into the elector's small vocabulary.
//!
//! A backend answers four questions — may I take the lease now (`campaign`), do I
//! still hold it (`renew`), give it back (`release`), and tell me when the holder may
//! have changed (`wait_for_change`). It never computes deadlines and never publishes
//! anything: the elector owns time, `Status` and every safety decision.
//!
//! Contract for implementations:
//! - `campaign` and `renew` succeed only if the store guarantees the lease for at least
//!   the ttl from the moment the request was *sent* (the elector measures from there).
//! - `renew` and `release` act only on this candidate's own tenure (compare-and-act).
//! - Every future may be dropped at any await point (the elector puts timeouts on all
//!   of them); a dropped campaign that did succeed at the server must be recognised as
//!   ours by the next `campaign` or cleaned up by `release`.

use std::future::Future;
use std::time::Duration;

use crate::status::{FencingToken, Holder};
use crate::timing::Timing;

/// What every backend is built with besides its own settings: which lease, for whom,
/// and its timing.
#[derive(Clone, Copy, Debug)]
pub struct Candidacy<'a> {
    pub election: &'a str,
    pub identity: &'a str,
    pub timing: &'a Timing,
    /// How it joins the election (`--mode`).
    pub mode: LockMode,
}

/// How a candidate joins its election (`--mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// No `--mode`: the election's lease (one holder).
    #[default]
    Election,
    /// `--mode exclusive`: the write side of the election's read-write lock, on the
    /// store's read-write layout (etcd's `recipes.RWMutex`, Curator's
    /// `InterProcessReadWriteLock`). It excludes every other holder, an election's
    /// included, as an election's holder does.
    Exclusive,
    /// `--mode shared`: the read side. Shared holders coexist; any other holder
    /// excludes them, and a waiting exclusive candidate keeps new shared ones out.
    Shared,
}

impl LockMode {
    /// How a holder of this mode holds, as published.
    pub fn held_as(self) -> crate::status::Mode {
        match self {
            LockMode::Shared => crate::status::Mode::Shared,
            _ => crate::status::Mode::Exclusive,
        }
    }

    /// The flag's value (`None` without `--mode`).
    pub fn flag(self) -> Option<&'static str> {
        match self {
            LockMode::Election => None,
            LockMode::Exclusive => Some("exclusive"),
            LockMode::Shared => Some("shared"),
        }
    }
}

/// How long a follower that is not next in line waits before it looks at a new holder
/// (50 to 500 ms, at random). At a handover every follower's watch on the holder fires
/// at once; the next in line looks at once and the others spread out behind it, so with
/// a hundred candidates on two cores the successor's requests do not queue behind
/// ninety-nine others'. Their `/leader` names the old holder that much longer.
pub(crate) fn stagger() -> Duration {
    use rand::Rng;
    Duration::from_millis(rand::rng().random_range(50..500))
}

/// A follower's wait on a store that pushes changes: a wake-up from the store's
/// notifications (`wake`), the observed holder's expiry (`hint`, used once; a crashed
/// holder sends nothing), or `max`, whichever comes first.
pub(crate) async fn wait_for_wake(
    wake: &tokio::sync::Notify,
    hint: &mut Option<tokio::time::Instant>,
    max: Duration,
) {
    let mut until = tokio::time::Instant::now() + max;
    if let Some(h) = hint.take() {
        until = until.min(h);
    }
    tokio::select! {
        _ = wake.notified() => {}
        _ = tokio::time::sleep_until(until) => {}
    }
}

// Each store is a cargo feature (Cargo.toml); `--backend` names the one that is missing.
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "file")]
pub mod file;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
// Each queued store uses its part of the rules: a build with only some of them leaves
// the others unused.
#[cfg(any(feature = "etcd", feature = "zookeeper", feature = "sql"))]
#[cfg_attr(
    not(all(feature = "etcd", feature = "zookeeper", feature = "sql")),
    allow(dead_code)
)]
mod queue;
// Every store reads its own record through it; a build with only some stores leaves
// parts of it unused.
pub mod protocol;
#[cfg_attr(
    not(all(
        feature = "etcd",
        feature = "zookeeper",
        feature = "redis",
        feature = "kubernetes"
    )),
    allow(dead_code)
)]
mod record;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod redlock;
pub mod slots;
#[cfg(feature = "sql")]
pub mod sql;
pub mod store;
pub mod store_clock;
pub mod stores;
// The stores whose takes carry the highest token seen (Redis, Redlock, SQL) keep it in
// one; a build with only some of them leaves parts of it unused.
#[cfg(any(feature = "redis", feature = "sql"))]
#[cfg_attr(not(all(feature = "redis", feature = "sql")), allow(dead_code))]
mod token_floor;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

/// Logs what became of a switchover's reservation for `to` before the release: written
/// (naming the entry `named` of the store's queue), `to` not found alive, or failed.
pub(crate) fn log_reservation(to: &str, outcome: Result<Option<String>, BackendError>) {
    match outcome {
        Ok(Some(named)) => {
            tracing::info!(to, entry = named, "switchover: the lease is left to {to}");
        }
        Ok(None) => tracing::warn!(
            to,
            "switchover: {to:?} is not a live candidate; releasing for whoever is next"
        ),
        Err(e) => tracing::warn!(
            to,
            error = %e,
            "switchover: no reservation written; releasing for whoever is next"
        ),
    }
}

/// How many renewals fell back from a write over the record the backend had cached to
/// a read and a second write (client-go's "slow path"), for the metrics. Handed to a
/// backend at wiring time; a backend without such a fallback never counts.
#[derive(Clone, Debug, Default)]
pub struct SlowPaths(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl SlowPaths {
    pub fn add(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A failed backend operation (unreachable, timed out, protocol error).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{op}: {message}")]
    Store { op: &'static str, message: String },
    /// No answer in time (the elector's limit or the client library's own): the
    /// request may still reach the store and take effect.
    #[error("{op}: {detail}")]
    TimedOut { op: &'static str, detail: String },
    /// The store decides what was asked of it by its own rules (a switchover on a
    /// coordinated Kubernetes Lease, say): refused, and `reason` says why.
    #[error("{op}: {reason}")]
    Refused { op: &'static str, reason: String },
}

impl BackendError {
    /// True when the request went unanswered in time, so it may still have acted.
    pub fn timed_out(&self) -> bool {
        matches!(self, BackendError::TimedOut { .. })
    }
}

/// A switchover asked of a holder of the read-write lock (`--mode`): refused. A
/// shared holder has no successor to name (others go on beside it); the stores'
/// reservations know the election's queue only.
pub(crate) fn no_switchover_with(mode: &str) -> BackendError {
    BackendError::Refused {
        op: "switchover",
        reason: format!("no switchover with --mode {mode} on this store: stop the holder instead"),
    }
}

/// What one campaign round found.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Campaign {
    /// This candidate now holds the lease with this token.
    Acquired { token: FencingToken },
    /// Someone else holds it (or nobody we could identify yet).
    Held(Option<Holder>),
}

/// Why `wait_for_change` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wake {
    /// The holder may have changed (or the backend cannot tell): campaign again.
    Changed,
    /// Nothing changed, and the store answered meanwhile (a keep-alive, say): the
    /// observation is still current and no new campaign is needed.
    Quiet,
    /// Nothing arrived yet on a subscription that would report a change (the record
    /// cannot have expired meanwhile): wait again, with neither a campaign nor a fresher
    /// observation.
    Waiting,
}

/// What one renew round found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Renewal {
    /// The lease is ours for another ttl from the send time of the request.
    Renewed,
    /// The store says the lease is no longer ours: step down at once.
    Lost,
}

pub trait Backend: Send + 'static {
    /// The name published in `Status` and metrics.
    fn name(&self) -> &'static str;

    /// The lease ttl this backend grants (it may differ from the requested one).
    fn lease_ttl(&self) -> Duration;

    /// Which of its leases the last campaign answered for: the slot of an election of
    /// several holders (each slot's tokens grow on their own), 0 for one lease.
    fn lease_index(&self) -> u32 {
        0
    }

    /// One attempt to take the lease, or learn who holds it.
    fn campaign(&mut self) -> impl Future<Output = Result<Campaign, BackendError>> + Send;

    /// Extend our own lease.
    fn renew(&mut self) -> impl Future<Output = Result<Renewal, BackendError>> + Send;

    /// Give our own lease back (a no-op when we do not hold it).
    fn release(&mut self) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Resolves when the holder may have changed, or after `max` at the latest.
    fn wait_for_change(&mut self, max: Duration) -> impl Future<Output = Wake> + Send;

    /// While leading, between renewals: resolves as soon as the store shows that our
    /// own record is gone or no longer ours (deleted or overwritten by another client,
    /// expired), so that the leader steps down as fast as the followers learn the
    /// record is free (DESIGN invariant 9) instead of at its next renew.
    ///
    /// The elector drops this future whenever a renew is due and calls it again
    /// afterwards, so it must be cancel-safe: events it has not returned yet stay
    /// queued in the backend. A backend whose record cannot change behind its back
    /// (the file lock) keeps the default, which never resolves.
    fn record_lost(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// The candidates the store shows alive now (their identities, this one's too),
    /// for a switchover's check that the named candidate can take the lease; `None`
    /// when the store keeps no such list.
    fn candidates(
        &mut self,
    ) -> impl Future<Output = Result<Option<Vec<String>>, BackendError>> + Send;

    /// Give our own lease back (as [`Backend::release`]) and leave it to the candidate
    /// `to` (a switchover): the store keeps the other candidates from taking it while
    /// `to` is alive, for about a ttl at most, so that `to` leads next. (A `to` the
    /// store no longer shows alive may get a plain release instead, with a warning.)
    fn release_to(&mut self, to: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// While leading: resolves once the store asks this leader to hand over to another
    /// candidate (a Kubernetes Lease whose `preferredHolder` comes to name someone
    /// else), so that the elector hands over gracefully, as for a release request.
    ///
    /// The future borrows nothing (`'static`), so the elector can wait on it and on
    /// [`Backend::record_lost`] in one `select!`; it is level-triggered (a request
    /// already made resolves it at once), so dropping it loses nothing. The backend
    /// notes the request while it processes its own-record events (in `record_lost`
    /// and `renew`). Backends whose store has no such notion keep the default, which
    /// never resolves.
    fn handover_requested(&mut self) -> impl Future<Output = ()> + Send + 'static {
        std::future::pending()
    }

    /// On a graceful shutdown, after the last release: withdraw whatever else marks
    /// this process as a candidate in the store (a Kubernetes LeaseCandidate), so the
    /// store does not wait for it. Backends with nothing of the kind keep the default.
    fn retire(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// While leading: a new descriptor that keeps this tenure's lease held for as long
    /// as it (or any copy of it) is open, on a store whose lease is held by the
    /// process itself (the file lock, which the kernel frees the instant its last
    /// descriptor closes). `None` on stores whose lease outlives a dead holder by the
    /// ttl. Exec mode lends it to CMD's processes ([`crate::status::TenureHold`]).
    fn tenure_hold(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }

    /// The election's slots as last observed, for an election of several holders
    /// ([`slots::Slots`]); `None` for one lease (the holder is the campaign's).
    fn slots(&self) -> Option<crate::status::Slots> {
        None
    }
}
