//! The `kubernetes` backend: a `coordination.k8s.io/v1` Lease named after the election,
//! with client-go's field semantics, so client-go electors and leasekeeper can share one
//! Lease.
//!
//! - **Acquire** when the holder is empty, is us, or the record (holder, times,
//!   duration, transitions) has not changed for `leaseDurationSeconds` *as observed
//!   here*: the time is taken from this process's monotonic clock when it first saw the
//!   record, never from `renewTime` (skew-safe, like client-go's `observedTime`).
//! - **Every write carries the resourceVersion it read.** A 409 means somebody else wrote
//!   first: re-read, never overwrite blindly.
//! - **Fencing token** = `leaseTransitions`, bumped on every acquisition. client-go bumps
//!   it only when the holder changes; we also bump it when we take the Lease back from
//!   our own earlier tenure, so every tenure's token is strictly greater (invariant 4).
//!   A created Lease starts at 0.
//! - **Renew** = a replace of `renewTime` with the resourceVersion of our last write.
//! - **Followers watch the Lease** from the resourceVersion they read: a release or a
//!   change of holder wakes them at once; a renew by the same holder is a quiet wake
//!   (the observation is fresh, nothing to campaign for). Without events they wake
//!   when the observed record would expire, or after the retry interval.
//! - **Release** = empty holder, `leaseDurationSeconds: 1`, as client-go's
//!   `ReleaseOnCancel` does, so client-go candidates take over at once too.
//! - **Our own name is not proof of ownership**: a record naming our identity counts as
//!   ours only if it is one this process wrote (a second process with the same identity,
//!   say a StatefulSet Pod force-deleted on a partitioned node, is treated as a rival).
//! - **A deleted Lease is not a free Lease**: a candidate that saw a live holder before
//!   the deletion still waits out that holder's duration, and the Lease it creates
//!   continues the token count. (A candidate that never saw the Lease creates it at
//!   once with token 0, as client-go does.)
//!
//! Safety of the claim: our deadline is measured from the send time of the request that
//! wrote the record, and a rival measures a whole lease duration from the moment it
//! *saw* that write, which is later; so a rival's takeover is never before our deadline.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use tokio::time::{sleep_until, timeout_at, Instant};

use super::{Backend, BackendError, Campaign, Renewal, Wake};
use crate::status::Holder;

/// The fields of a Lease that make up client-go's leader-election record.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    duration_secs: i32,
    acquire: Option<MicroTime>,
    renew: Option<MicroTime>,
    transitions: i32,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            duration_secs: spec.lease_duration_seconds.unwrap_or(0),
            acquire: spec.acquire_time,
            renew: spec.renew_time,
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    fn token(&self) -> u64 {
        u64::try_from(self.transitions).unwrap_or(0)
    }
}

/// The last Lease read or written, and when its record last changed as seen here.
struct Observed {
    lease: Lease,
    record: Record,
    changed_at: Instant,
}

impl Observed {
    fn resource_version(&self) -> String {
        self.lease
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default()
    }

    /// When a rival's record may be taken over, by our own clock.
    fn expires_at(&self) -> Instant {
        let secs = u64::try_from(self.record.duration_secs).unwrap_or(0);
        self.changed_at + Duration::from_secs(secs)
    }
}

/// What a write over our own tenure came to.
enum OwnWrite {
    Written(Box<Lease>),
    /// The Lease is gone or is no longer our tenure.
    Gone,
    /// It kept changing under us (still ours, but two conflicts in a row).
    Contended,
}

pub struct KubeBackend {
    api: Api<Lease>,
    name: String,
    namespace: String,
    identity: String,
    ttl: Duration,
    observed: Option<Observed>,
    /// Our own tenure: the Lease as our last write left it.
    held: Option<Lease>,
    /// The records of our last few writes (sent, whether or not the answer came back).
    written: VecDeque<Record>,
    /// The Lease was deleted after `observed` was seen (whose version is the deletion's).
    deleted: bool,
}

/// Now, in whole microseconds, so a record reads back exactly as it was written.
fn now() -> MicroTime {
    use k8s_openapi::jiff::Timestamp;
    let t = Timestamp::now();
    MicroTime(Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t))
}

/// How long to wait before looking again after a watch that ended at once.
const SETTLE: Duration = Duration::from_millis(500);

fn kube_err(op: &'static str) -> impl Fn(kube::Error) -> BackendError {
    move |e| BackendError::Store {
        op,
        message: e.to_string(),
    }
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

impl KubeBackend {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        election: &str,
        identity: &str,
        ttl: Duration,
    ) -> Self {
        KubeBackend {
            api: Api::namespaced(client, namespace),
            name: election.to_owned(),
            namespace: namespace.to_owned(),
            identity: identity.to_owned(),
            ttl,
            observed: None,
            held: None,
            written: VecDeque::new(),
            deleted: false,
        }
    }

    fn ttl_secs(&self) -> i32 {
        i32::try_from(self.ttl.as_secs()).unwrap_or(i32::MAX)
    }

    /// Notes a Lease read or written; the clock restarts only when the record changed.
    fn observe(&mut self, lease: Lease) {
        let record = Record::of(&lease);
        let changed_at = match &self.observed {
            Some(o) if o.record == record => o.changed_at,
            _ => Instant::now(),
        };
        self.observed = Some(Observed {
            lease,
            record,
            changed_at,
        });
    }

    fn holder_of(record: &Record) -> Option<Holder> {
        (!record.holder.is_empty()).then(|| Holder {
            identity: record.holder.clone(),
            token: Some(record.token()),
        })
    }

    /// A Lease carrying `spec`, to be written over `base` (its name and resourceVersion).
    fn with_spec(base: &Lease, spec: LeaseSpec) -> Lease {
        Lease {
            metadata: base.metadata.clone(),
            spec: Some(spec),
        }
    }

    /// Our record over `base`'s spec (other fields, like `strategy`, are kept), noted as
    /// one of our writes before it is sent.
    fn our_spec(
        &mut self,
        base: Option<&LeaseSpec>,
        acquire: Option<MicroTime>,
        transitions: i32,
    ) -> LeaseSpec {
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.ttl_secs()),
            acquire_time: acquire,
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..base.cloned().unwrap_or_default()
        };
        self.note_write(&spec);
        spec
    }

    fn note_write(&mut self, spec: &LeaseSpec) {
        let lease = Lease {
            metadata: ObjectMeta::default(),
            spec: Some(spec.clone()),
        };
        if self.written.len() == 4 {
            self.written.pop_front();
        }
        self.written.push_back(Record::of(&lease));
    }

    /// A record this process wrote (not merely one that carries our name).
    fn is_ours(&self, record: &Record) -> bool {
        record.holder == self.identity && self.written.contains(record)
    }

    /// The token after `transitions`.
    fn next_token(transitions: i32) -> Result<i32, BackendError> {
        transitions.checked_add(1).ok_or(BackendError::Store {
            op: "campaign",
            message: "leaseTransitions cannot grow any further".to_owned(),
        })
    }

    /// The Lease is missing: create it, unless a holder seen before the deletion may
    /// still be live.
    async fn create(&mut self) -> Result<Campaign, BackendError> {
        let transitions = match &self.observed {
            Some(o) => {
                let live = !o.record.holder.is_empty()
                    && !self.is_ours(&o.record)
                    && Instant::now() < o.expires_at();
                if live {
                    return Ok(Campaign::Held(Self::holder_of(&o.record)));
                }
                Self::next_token(o.record.transitions)?
            }
            None => 0,
        };
        let spec = self.our_spec(None, Some(now()), transitions);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                self.deleted = false;
                self.observe(created.clone());
                self.held = Some(created);
                Ok(Campaign::Acquired {
                    token: u64::try_from(transitions).unwrap_or(0),
                })
            }
            // Another candidate created it first.
            Err(e) if status_code(&e) == Some(409) => Ok(Campaign::Held(None)),
            Err(e) => Err(kube_err("create lease")(e)),
        }
    }

    /// Replaces the Lease with `lease` (which carries the resourceVersion it was read at).
    async fn replace(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
    }

    /// Writes `spec_for(base)` over our own tenure (token `transitions`), re-reading once
    /// after a conflict: it may come from a write that did not change the holder (a
    /// label, say, or our own earlier write whose answer was lost).
    async fn write_own(
        &mut self,
        mut base: Lease,
        transitions: i32,
        op: &'static str,
        mut spec_for: impl FnMut(&mut Self, &Lease) -> LeaseSpec + Send,
    ) -> Result<OwnWrite, BackendError> {
        for _ in 0..2 {
            let spec = spec_for(self, &base);
            match self.replace(&Self::with_spec(&base, spec)).await {
                Ok(written) => {
                    self.observe(written.clone());
                    return Ok(OwnWrite::Written(Box::new(written)));
                }
                Err(e) if status_code(&e) == Some(409) => {
                    match self.still_ours(transitions).await? {
                        Some(current) => base = current,
                        None => return Ok(OwnWrite::Gone),
                    }
                }
                Err(e) if status_code(&e) == Some(404) => {
                    self.deleted = true;
                    return Ok(OwnWrite::Gone);
                }
                Err(e) => return Err(kube_err(op)(e)),
            }
        }
        Ok(OwnWrite::Contended)
    }

    /// Reads the Lease; notes whether it is gone.
    async fn read(&mut self) -> Result<Option<Lease>, BackendError> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(kube_err("get lease"))?;
        self.deleted = current.is_none();
        Ok(current)
    }

    /// Reads the Lease again after a conflict; `Some` when it is still our tenure.
    async fn still_ours(&mut self, token: i32) -> Result<Option<Lease>, BackendError> {
        let Some(current) = self.read().await? else {
            return Ok(None);
        };
        self.observe(current.clone());
        let record = Record::of(&current);
        Ok((record.holder == self.identity && record.transitions == token).then_some(current))
    }
}

impl Backend for KubeBackend {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        let Some(current) = self.read().await? else {
            return self.create().await;
        };
        self.observe(current.clone());
        let Some(observed) = &self.observed else {
            return Ok(Campaign::Held(None));
        };
        let record = observed.record.clone();
        let free = record.holder.is_empty()
            || self.is_ours(&record)
            || Instant::now() >= observed.expires_at();
        if !free {
            return Ok(Campaign::Held(Self::holder_of(&record)));
        }
        // Every acquisition gets a greater token, also one from our own old tenure.
        let transitions = Self::next_token(record.transitions)?;
        let spec = self.our_spec(current.spec.as_ref(), Some(now()), transitions);
        let lease = Self::with_spec(&current, spec);
        match self.replace(&lease).await {
            Ok(written) => {
                self.observe(written.clone());
                self.held = Some(written);
                Ok(Campaign::Acquired {
                    token: u64::try_from(transitions).unwrap_or(0),
                })
            }
            Err(e) if status_code(&e) == Some(409) => {
                // Somebody wrote since we read: they are the holder now (or will tell).
                Ok(Campaign::Held(None))
            }
            Err(e) => Err(kube_err("update lease")(e)),
        }
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let Some(mine) = self.held.clone() else {
            return Ok(Renewal::Lost);
        };
        let record = Record::of(&mine);
        let written = self
            .write_own(mine, record.transitions, "renew lease", |me, base| {
                me.our_spec(
                    base.spec.as_ref(),
                    record.acquire.clone(),
                    record.transitions,
                )
            })
            .await?;
        match written {
            OwnWrite::Written(lease) => {
                self.held = Some(*lease);
                Ok(Renewal::Renewed)
            }
            OwnWrite::Gone => {
                self.held = None;
                Ok(Renewal::Lost)
            }
            OwnWrite::Contended => Err(BackendError::Store {
                op: "renew lease",
                message: "the Lease keeps changing under us".to_owned(),
            }),
        }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        let mine = match self.held.take() {
            Some(l) => l,
            // A campaign whose answer was lost may have taken the Lease: look.
            None => match self.read().await? {
                Some(l) if self.is_ours(&Record::of(&l)) => l,
                _ => return Ok(()),
            },
        };
        let transitions = Record::of(&mine).transitions;
        // client-go's ReleaseOnCancel form: no holder, a one-second duration. Whatever
        // the outcome, the tenure is no longer ours to release.
        self.write_own(mine, transitions, "release lease", |_, base| LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..base.spec.clone().unwrap_or_default()
        })
        .await?;
        Ok(())
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        let start = Instant::now();
        // Nothing read yet (or a create lost a race): read now.
        let Some(observed) = &self.observed else {
            return Wake::Changed;
        };
        // No holder: nothing to wait for.
        if observed.record.holder.is_empty() {
            return Wake::Changed;
        }
        let mut until = start + max;
        if !self.is_ours(&observed.record) {
            // A rival's record may be taken over once it has stood still for its duration.
            until = until.min(observed.expires_at());
        }
        if until <= start {
            return Wake::Changed;
        }
        let before = observed.record.clone();
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(u32::try_from(max.as_secs() + 1).unwrap_or(u32::MAX))
            .disable_bookmarks();
        let version = observed.resource_version();
        let stream = match timeout_at(until, self.api.watch(&params, &version)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                // No watch (the API refuses or is away): fall back to polling.
                tracing::debug!(error = %e, "watching the lease failed; polling instead");
                sleep_until(until).await;
                return Wake::Changed;
            }
            Err(_) => return Wake::Changed,
        };
        // A watch that ends at once (a proxy, a failing server) must not become a tight
        // loop of reads: wait a little before looking again.
        let settle = until.min(start + SETTLE);
        let mut stream = std::pin::pin!(stream);
        loop {
            let event = match timeout_at(until, stream.next()).await {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(e))) => {
                    tracing::debug!(error = %e, "the lease watch broke");
                    sleep_until(settle).await;
                    return Wake::Changed;
                }
                Ok(None) => {
                    sleep_until(settle).await;
                    return Wake::Changed;
                }
                // The time is up (the record may have expired): look again.
                Err(_) => return Wake::Changed,
            };
            match event {
                WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                    let record = Record::of(&lease);
                    self.deleted = false;
                    self.observe(lease);
                    if record.holder == before.holder && record.transitions == before.transitions {
                        // The same tenure renewed: the observation is fresh, nothing to do.
                        return Wake::Quiet;
                    }
                    return Wake::Changed;
                }
                WatchEvent::Deleted(lease) => {
                    // Keep the record (its holder may still be live), at the deletion's
                    // version, so the next watch starts after it.
                    let known = self.deleted;
                    self.deleted = true;
                    if let Some(o) = self.observed.as_mut() {
                        o.lease.metadata.resource_version = lease.metadata.resource_version;
                    }
                    if !known {
                        return Wake::Changed;
                    }
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(status) => {
                    tracing::debug!(code = status.code, "the lease watch ended with an error");
                    sleep_until(settle).await;
                    return Wake::Changed;
                }
            }
        }
    }
}
