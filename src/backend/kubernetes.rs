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
//! - **Fencing token** = `leaseTransitions`, written at every acquisition as
//!   `max(leaseTransitions + 1, resourceVersion + 1)` over the Lease we read, and as
//!   `listResourceVersion + 1` when we create it, where the list version comes from a
//!   LIST of the one Lease (`fieldSelector=metadata.name=<election>`, `limit=1`): the
//!   API server's current resourceVersion. On an API server backed by etcd,
//!   resourceVersions are etcd revisions, which grow with every write in the cluster;
//!   every earlier token T was (a version we read) + 1 <= the version of the write that
//!   stored it <= any version read later, so the token of every tenure is strictly
//!   greater than every earlier one, also across a deletion of the Lease, and a fresh
//!   install still takes the Lease at once. client-go keeps working (it adds one to what
//!   it finds). A resourceVersion that does not parse as an integer, or whose successor
//!   does not fit the field's int32, falls back to `leaseTransitions + 1` (logged once):
//!   then a token is greater than every earlier one of the same Lease object only.
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
//!   the deletion still waits out that holder's duration. (A candidate that never saw
//!   the Lease creates it at once, as client-go does; the list version gives it a token
//!   above every earlier tenure's.)
//! - **The leader watches its own Lease** ([`Backend::record_lost`]) from the version of
//!   its last write: a DELETED event, or a MODIFIED one whose record is not our tenure's
//!   (another holder, or a write we did not make), ends the claim at once (invariant 9).
//!   Our own renewals show up as MODIFIED events of our tenure and are not a loss. A
//!   watch that ends is reopened from the last version seen; 410 Gone means we cannot
//!   tell, so we do not step down: the next renew decides, and the watch starts again
//!   from its version.
//!
//! - **Coordinated leader election** (KEP-4355: `spec.strategy`, `spec.preferredHolder`):
//!   every write (renew, release, take-over) keeps both fields as it found them, but for
//!   a release, without a strategy, of a Lease whose `preferredHolder` names us (what a
//!   switchover to us left: kept, it would leave the free Lease to us for a ttl). A
//!   leader whose Lease comes to name another candidate as `preferredHolder` hands over
//!   gracefully ([`Backend::handover_requested`]): drain, release. A free Lease whose
//!   `preferredHolder` names another candidate is left to that one for one ttl after
//!   its record last changed (as seen here), then taken as any free Lease. A Lease
//!   whose `strategy` is set is taken only when its `preferredHolder` names us, unless
//!   `--lease-strategy-mixed` (then the rules above apply as without a strategy).
//! - **Switchover** ([`Backend::release_to`]): the release write with `preferredHolder`
//!   set to the named candidate, in the same single write at the resourceVersion: the
//!   others leave the free Lease to it for one ttl (above), and it takes it at once.
//!   [`Backend::candidates`]: with `--lease-candidate`, the live LeaseCandidates of the
//!   Lease ([`candidate`]); else `None`.
//! - **`--lease-candidate`**: a `coordination.k8s.io/v1beta1` LeaseCandidate published
//!   and renewed as client-go's `NewCandidate` does, by a task this backend owns
//!   ([`candidate`]); it ends when the backend is dropped.
//!
//! Safety of the claim: our deadline is measured from the send time of the request that
//! wrote the record, and a rival measures a whole lease duration from the moment it
//! *saw* that write, which is later; so a rival's takeover is never before our deadline.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use tokio::time::{sleep_until, timeout_at, Instant};

use self::core::{Event, FollowEvent, Next, Phase, Us, Wait};
use super::record::Seen;
use super::{Backend, BackendError, Campaign, Candidacy, Renewal, SlowPaths, Wake};
use crate::settings::{bad, fmt_d, ConfigError};
use rules::{coordination, Record};
use settings::KubeSettings;

pub mod candidate;
mod core;
pub mod driven;
pub mod entry;
mod rules;
pub mod settings;

/// The events of a watch on the Lease.
type LeaseEvents = BoxStream<'static, Result<WatchEvent<Lease>, kube::Error>>;

/// The leader's watch on its own Lease (see [`Backend::record_lost`]). It lives in the
/// backend, not in the future that polls it, so dropping that future loses no event.
#[derive(Default)]
struct OwnWatch {
    /// (In a mutex only to make the backend `Sync`; it is reached through `&mut` alone.)
    events: std::sync::Mutex<Option<LeaseEvents>>,
    /// The version to (re)open the watch from: our last write or the last event seen.
    /// `None` after 410 Gone: we cannot tell until the next renew writes a new version.
    from: Option<String>,
    /// Do not reopen before this (a watch that failed or ended at once).
    not_before: Option<Instant>,
    opened: Option<Instant>,
    events_seen: usize,
}

impl OwnWatch {
    fn events(&mut self) -> &mut Option<LeaseEvents> {
        self.events
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A follower's watch on the Lease, kept open across the holder's renewals: each
/// renewal arrives as an event on it, so a follower sends no request while the holder
/// renews (the stream is re-opened only when it ends or falls behind our observation).
/// It lives in the backend, so a dropped `wait_for_change` loses no event.
#[derive(Default)]
struct FollowWatch {
    /// (In a mutex only to make the backend `Sync`; it is reached through `&mut` alone.)
    events: std::sync::Mutex<Option<LeaseEvents>>,
    /// The version of the last event read from `events`: where the stream stands.
    at: Option<String>,
    opened: Option<Instant>,
}

impl FollowWatch {
    fn events(&mut self) -> &mut Option<LeaseEvents> {
        self.events
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn close(&mut self) {
        *self.events() = None;
        self.at = None;
    }
}

/// How long the API server keeps a follower's watch open (kube refuses 295 s or more).
const FOLLOW_WATCH_SECS: u32 = 290;

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
    /// What we know of the Lease, and our tenure while we lead ([`Phase`]).
    phase: Phase,
    /// The records of our last few writes (sent, whether or not the answer came back).
    written: VecDeque<Record>,
    /// While leading: the watch on our own record.
    own_watch: OwnWatch,
    /// While following: the watch on the holder's record.
    follow_watch: FollowWatch,
    /// A resourceVersion that is no integer (or too large) was logged already.
    version_warned: bool,
    /// Renewals refused with a conflict and retried after a read (client-go's slow path).
    slow_paths: SlowPaths,
    settings: KubeSettings,
    /// True once our Lease names another candidate as `preferredHolder` during our tenure.
    handover: tokio::sync::watch::Sender<bool>,
    /// The `preferredHolder` our tenure began with (not a request to hand over).
    preferred_at_start: Option<String>,
    /// With `--lease-candidate`: the task that publishes our LeaseCandidate (ends on drop).
    candidate: Option<candidate::Candidate>,
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

/// The Lease counts whole seconds (`leaseDurationSeconds`).
pub fn check_ttl(ttl: Duration) -> Result<(), ConfigError> {
    if ttl.subsec_nanos() != 0 {
        return Err(bad(format!(
            "--ttl {} must be whole seconds with --backend kubernetes (the Lease counts leaseDurationSeconds)",
            fmt_d(ttl)
        )));
    }
    Ok(())
}

impl KubeBackend {
    /// Opens the watch a follower waits on, from `version`; `Some` when the wait ends
    /// here (no watch: the API refuses or is away, or the time is up).
    async fn open_follow_watch(&mut self, version: String, until: Instant) -> Option<Wake> {
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(FOLLOW_WATCH_SECS)
            .disable_bookmarks();
        match timeout_at(until, self.api.watch(&params, &version)).await {
            Ok(Ok(stream)) => {
                *self.follow_watch.events() = Some(stream.boxed());
                self.follow_watch.at = Some(version);
                self.follow_watch.opened = Some(Instant::now());
                None
            }
            Ok(Err(e)) => {
                // No watch: fall back to polling.
                tracing::debug!(error = %e, "watching the lease failed; polling instead");
                sleep_until(until).await;
                Some(Wake::Changed)
            }
            Err(_) => Some(Wake::Changed),
        }
    }

    /// One event of the follower's watch; `Some` when the wait ends with it.
    async fn on_follow_event(&mut self, event: WatchEvent<Lease>, settle: Instant) -> Option<Wake> {
        let event = match event {
            WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                self.follow_watch.at = lease.metadata.resource_version.clone();
                FollowEvent::Written(Box::new(lease))
            }
            WatchEvent::Deleted(lease) => {
                self.follow_watch.at = lease.metadata.resource_version.clone();
                FollowEvent::Deleted(lease.metadata.resource_version)
            }
            WatchEvent::Bookmark(_) => return None,
            WatchEvent::Error(status) => {
                // 410 Gone among them: the campaign's read lists afresh.
                tracing::debug!(code = status.code, "the lease watch ended with an error");
                self.follow_watch.close();
                sleep_until(settle).await;
                return Some(Wake::Changed);
            }
        };
        let (phase, event) = self.take_phase().on_follow_event(event, Instant::now());
        self.phase = phase;
        match event {
            Event::Changed => Some(Wake::Changed),
            Event::Renewed => Some(Wake::Quiet),
            Event::Nothing => None,
        }
    }

    pub fn new(
        client: kube::Client,
        namespace: &str,
        lease: &Candidacy,
        settings: KubeSettings,
    ) -> Self {
        let candidate = settings
            .lease_candidate
            .then(|| {
                candidate::Candidate::start(
                    client.clone(),
                    namespace,
                    lease.identity,
                    lease.election,
                )
            })
            .flatten();
        KubeBackend {
            api: Api::namespaced(client, namespace),
            name: lease.election.to_owned(),
            namespace: namespace.to_owned(),
            identity: lease.identity.to_owned(),
            ttl: lease.timing.ttl,
            phase: Phase::Unseen,
            written: VecDeque::new(),
            own_watch: OwnWatch::default(),
            follow_watch: FollowWatch::default(),
            version_warned: false,
            slow_paths: SlowPaths::default(),
            settings,
            handover: tokio::sync::watch::channel(false).0,
            preferred_at_start: None,
            candidate,
        }
    }

    /// This candidate, as the core sees it.
    fn us(&self) -> Us<'_> {
        Us {
            identity: &self.identity,
            written: &self.written,
            strategy_mixed: self.settings.strategy_mixed,
            ttl: self.ttl,
            flaws: self::core::Flaws::default(),
        }
    }

    /// The phase, to be moved on by the core (put back by the caller).
    fn take_phase(&mut self) -> Phase {
        std::mem::take(&mut self.phase)
    }

    /// Moves the phase on with `f` (a store's answer).
    fn step(&mut self, f: impl FnOnce(Phase) -> Phase) {
        self.phase = f(self.take_phase());
    }

    /// Notes a request to hand over when `lease` (our tenure) names another candidate
    /// as `preferredHolder` than it did when the tenure began.
    fn check_preferred(&mut self, lease: &Lease) {
        let (_, preferred) = coordination(lease);
        let at_start = self.preferred_at_start.as_deref();
        let asked = rules::asks_handover(preferred, &self.identity, at_start);
        if asked && !*self.handover.borrow() {
            tracing::info!(
                preferred = preferred.unwrap_or(""),
                "the Lease prefers another candidate; handing over"
            );
            self.handover.send_replace(true);
        }
    }

    /// Counts renewals that fell back to a read into `slow_paths` (for the metrics).
    pub fn with_slow_paths(mut self, slow_paths: SlowPaths) -> Self {
        self.slow_paths = slow_paths;
        self
    }

    /// Our write `written` (a take-over or a create) began a tenure: watch our own
    /// record from its version.
    fn taken(&mut self, written: Lease) {
        self.follow_watch.close();
        self.handover.send_replace(false);
        self.preferred_at_start = coordination(&written).1.map(str::to_owned);
        self.own_watch = OwnWatch {
            from: written.metadata.resource_version.clone(),
            ..OwnWatch::default()
        };
        self.step(|p| p.taken(written, Instant::now()));
    }

    /// Our tenure ends: stop watching our own record; the tenure as our last write
    /// left it, if we held one.
    fn end_tenure(&mut self) -> Option<Lease> {
        self.handover.send_replace(false);
        self.preferred_at_start = None;
        self.own_watch = OwnWatch::default();
        let (phase, held) = self.take_phase().end_tenure();
        self.phase = phase;
        held
    }

    /// A renew wrote `lease`, over a version it judged our tenure (it named that version),
    /// so after a 410 the watch may start again from here.
    fn renewed(&mut self, lease: Lease) {
        if self.own_watch.from.is_none() && self.own_watch.events().is_none() {
            self.own_watch.from = lease.metadata.resource_version.clone();
        }
        self.check_preferred(&lease);
        self.step(|p| p.renewed(lease));
    }

    /// A resourceVersion as the etcd revision it is on every API server backed by etcd;
    /// `None` (and a warning, once) when it is not an integer that fits a token.
    fn revision(&mut self, version: Option<&str>) -> Option<i32> {
        let parsed = rules::revision(version);
        if parsed.is_none() && !self.version_warned {
            self.version_warned = true;
            tracing::warn!(
                resource_version = version.unwrap_or(""),
                "the API server's resourceVersion is no integer that fits leaseTransitions; \
                 fencing tokens then grow only while the Lease object exists (a deleted and \
                 recreated Lease may start lower)"
            );
        }
        parsed
    }

    /// The token of a new tenure over a Lease whose record carries `transitions` and
    /// whose version (or the list's, for a create) is `version` ([`rules::token_over`]).
    fn token_over(&mut self, transitions: i32, version: Option<&str>) -> Result<i32, BackendError> {
        let revision = self.revision(version);
        rules::token_over(transitions, revision).ok_or(BackendError::Store {
            op: "campaign",
            message: "leaseTransitions cannot grow any further".to_owned(),
        })
    }

    /// The API server's current resourceVersion: a consistent LIST of our one Lease.
    /// (No resourceVersion is sent, so the API server answers at least as fresh as
    /// etcd's current revision; `resourceVersion=0` would allow a stale cache.)
    async fn list_version(&self) -> Result<Option<String>, BackendError> {
        let params = ListParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .limit(1);
        let list = self
            .api
            .list(&params)
            .await
            .map_err(kube_err("list leases"))?;
        Ok(list.metadata.resource_version)
    }

    fn ttl_secs(&self) -> i32 {
        i32::try_from(self.ttl.as_secs()).unwrap_or(i32::MAX)
    }

    /// Notes a Lease read or written; the clock restarts only when the record changed.
    fn observe(&mut self, lease: Lease) {
        self.step(|p| p.observe(lease, Instant::now()));
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
        if self.written.len() == 8 {
            self.written.pop_front();
        }
        self.written.push_back(Record::of_spec(spec.clone()));
    }

    /// A record this process wrote (not merely one that carries our name).
    fn is_ours(&self, record: &Record) -> bool {
        self.us().seen(record) == Seen::Ours
    }

    /// Whether `lease`, seen by the leader's watch, is still our tenure.
    fn own_tenure(&self, lease: &Lease) -> bool {
        self.phase
            .held()
            .is_some_and(|held| rules::own_tenure(lease, held, &self.identity, &self.written))
    }

    /// One step of the leader's watch: `true` when the record is lost.
    async fn next_own_event(&mut self) -> bool {
        if let Some(t) = self.own_watch.not_before {
            sleep_until(t).await;
            self.own_watch.not_before = None;
        }
        if self.own_watch.events().is_none() {
            let Some(from) = self.own_watch.from.clone() else {
                // 410 Gone: we cannot tell; the next renew decides and sets a version.
                std::future::pending::<()>().await;
                return false;
            };
            let params = WatchParams::default()
                .fields(&format!("metadata.name={}", self.name))
                .timeout(290);
            match self.api.watch(&params, &from).await {
                Ok(events) => {
                    *self.own_watch.events() = Some(events.boxed());
                    self.own_watch.opened = Some(Instant::now());
                    self.own_watch.events_seen = 0;
                }
                Err(e) if status_code(&e) == Some(410) => {
                    tracing::debug!(version = %from, "our lease's version is gone from the watch cache; the next renew checks");
                    self.own_watch.from = None;
                    return false;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "watching our own lease failed; retrying");
                    self.own_watch.not_before = Some(Instant::now() + SETTLE);
                    return false;
                }
            }
        }
        let Some(events) = self.own_watch.events().as_mut() else {
            return false;
        };
        let event = events.next().await;
        let ended = |w: &mut OwnWatch| {
            // A watch that ended at once without a word is not reopened in a tight loop.
            let quick = w.events_seen == 0 && w.opened.is_none_or(|t| t.elapsed() < SETTLE);
            *w.events() = None;
            if quick {
                w.not_before = Some(Instant::now() + SETTLE);
            }
        };
        match event {
            Some(Ok(WatchEvent::Added(lease) | WatchEvent::Modified(lease))) => {
                self.own_watch.events_seen += 1;
                if self.own_tenure(&lease) {
                    self.own_watch.from = lease.metadata.resource_version.clone();
                    self.check_preferred(&lease);
                    return false;
                }
                tracing::info!(
                    holder = %Record::of(&lease).holder,
                    "our lease was written by someone else"
                );
                self.observe(lease);
                *self.own_watch.events() = None;
                true
            }
            Some(Ok(WatchEvent::Deleted(lease))) => {
                tracing::info!("our lease was deleted");
                self.step(|p| p.deleted_at(lease.metadata.resource_version));
                *self.own_watch.events() = None;
                true
            }
            Some(Ok(WatchEvent::Bookmark(b))) => {
                self.own_watch.from = Some(b.metadata.resource_version);
                false
            }
            Some(Ok(WatchEvent::Error(status))) if status.code == 410 => {
                tracing::debug!("our lease's watch is too old (410); the next renew checks");
                *self.own_watch.events() = None;
                self.own_watch.from = None;
                false
            }
            Some(Ok(WatchEvent::Error(status))) => {
                tracing::debug!(code = status.code, "our lease's watch ended with an error");
                ended(&mut self.own_watch);
                false
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "our lease's watch broke");
                ended(&mut self.own_watch);
                false
            }
            None => {
                ended(&mut self.own_watch);
                false
            }
        }
    }

    /// The Lease is missing: create it, with a token above `above` (the token of the
    /// record seen before the deletion; -1: none).
    async fn create(&mut self, above: i32) -> Result<Campaign, BackendError> {
        // Above every token of the Lease before it was deleted: the list's version is
        // at least that of every write so far. (-1: a token of 0 when nothing is known.)
        let version = self.list_version().await?;
        let transitions = self.token_over(above, version.as_deref())?;
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
                self.taken(created);
                Ok(Campaign::Acquired {
                    token: u64::try_from(transitions).unwrap_or(0),
                })
            }
            // Another candidate created it first.
            Err(e) if status_code(&e) == Some(409) => Ok(Campaign::Held(None)),
            Err(e) => Err(kube_err("create lease")(e)),
        }
    }

    /// Writes our tenure over `current` (the Lease as found), with a token above `over`
    /// and its version: every acquisition gets a greater token, also one from our own
    /// old tenure, and one above every token of an earlier incarnation of the Lease.
    async fn take_over(&mut self, current: Lease, over: i32) -> Result<Campaign, BackendError> {
        let version = current.metadata.resource_version.clone();
        let transitions = self.token_over(over, version.as_deref())?;
        let spec = self.our_spec(current.spec.as_ref(), Some(now()), transitions);
        let lease = Self::with_spec(&current, spec);
        match self.replace(&lease).await {
            Ok(written) => {
                self.taken(written);
                Ok(Campaign::Acquired {
                    token: u64::try_from(transitions).unwrap_or(0),
                })
            }
            Err(e) if status_code(&e) == Some(409) => {
                // Somebody wrote since we read: they are the holder now (or will tell).
                self.step(Phase::outrun);
                Ok(Campaign::Held(None))
            }
            Err(e) => Err(kube_err("update lease")(e)),
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
                    if op == "renew lease" {
                        self.slow_paths.add();
                    }
                    match self.still_ours(transitions).await? {
                        Some(current) => base = current,
                        None => return Ok(OwnWrite::Gone),
                    }
                }
                Err(e) if status_code(&e) == Some(404) => {
                    self.step(Phase::missing);
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
        match current {
            Some(_) => self.step(Phase::present),
            None => self.step(Phase::absent),
        }
        Ok(current)
    }

    /// The Lease as it stands: the watch's event that ended the last wait
    /// ([`Phase::fresh`]), or a read.
    async fn current(&mut self) -> Result<Option<Lease>, BackendError> {
        let (phase, fresh) = self.take_phase().fresh();
        self.phase = phase;
        match fresh {
            Some(lease) => Ok(Some(lease)),
            None => self.read().await,
        }
    }

    /// Reads the Lease again after a conflict; `Some` when it is still our tenure.
    async fn still_ours(&mut self, token: i32) -> Result<Option<Lease>, BackendError> {
        let Some(current) = self.read().await? else {
            self.step(Phase::missing);
            return Ok(None);
        };
        self.observe(current.clone());
        let record = Record::of(&current);
        Ok((record.holder == self.identity && record.transitions == token).then_some(current))
    }
}

impl KubeBackend {
    /// Gives our own tenure back (a no-op when we hold none): without `to`, in
    /// client-go's `ReleaseOnCancel` form (no holder, a one-second duration); with `to`
    /// (a switchover), by handing the Lease to `to` in the same single write at the
    /// resourceVersion: `holderIdentity: to`, no `acquireTime`, our ttl as duration, as
    /// the API server's coordinator hands a Lease to the candidate it elected. `to`
    /// takes it at once with a write of its own ([`KubeBackend::handed`]); the others
    /// see a live holder and wait, client-go's candidates too; if `to` never takes it,
    /// it expires after a ttl like any record. (`preferredHolder` cannot carry this:
    /// the API server drops it without the `CoordinatedLeaderElection` gate and
    /// refuses it without `strategy` with the gate.)
    async fn release_leaving(&mut self, to: Option<&str>) -> Result<(), BackendError> {
        let mine = match self.end_tenure() {
            Some(l) => l,
            // A campaign whose answer was lost may have taken the Lease: look.
            None => match self.read().await? {
                Some(l) if self.is_ours(&Record::of(&l)) => l,
                _ => return Ok(()),
            },
        };
        let transitions = Record::of(&mine).transitions;
        let to = to.map(str::to_owned);
        let ttl = self.ttl_secs();
        // Whatever the outcome, the tenure is no longer ours to release.
        self.write_own(mine, transitions, "release lease", |me, lease| {
            let base = lease.spec.clone().unwrap_or_default();
            // Always a holderIdentity, even "": a Lease with a strategy and no such
            // field crashes kube-apiserver 1.33's coordinator.
            let spec = match &to {
                Some(to) => LeaseSpec {
                    holder_identity: Some(to.clone()),
                    lease_duration_seconds: Some(ttl),
                    acquire_time: None,
                    renew_time: Some(now()),
                    lease_transitions: Some(transitions),
                    ..base
                },
                None => LeaseSpec {
                    holder_identity: Some(String::new()),
                    lease_duration_seconds: Some(1),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(transitions),
                    ..base
                },
            };
            me.note_write(&spec);
            spec
        })
        .await?;
        Ok(())
    }

    /// Why a switchover cannot name the next holder of this Lease, if it cannot: the
    /// Lease has a `strategy` (the API server's coordinator elects its holders), or,
    /// with `--lease-candidate`, the API server runs that coordinator (the
    /// `CoordinatedLeaderElection` gate: a dry-run write of `preferredHolder` without
    /// `strategy` is refused with 422 then, and its field silently dropped without the
    /// gate), which would elect its own pick again.
    async fn coordinated(&mut self) -> Result<Option<String>, BackendError> {
        let Some(lease) = self.read().await? else {
            return Ok(None);
        };
        if let (Some(strategy), _) = coordination(&lease) {
            return Ok(Some(format!(
                "the Lease is coordinated (strategy {strategy}): the API server's coordinator elects its holder"
            )));
        }
        if self.candidate.is_none() {
            return Ok(None);
        }
        let mut probe = lease.clone();
        if let Some(spec) = probe.spec.as_mut() {
            spec.preferred_holder = Some(self.identity.clone());
        }
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        match self.api.replace(&self.name, &params, &probe).await {
            Ok(_) => Ok(None),
            Err(e) if status_code(&e) == Some(422) => Ok(Some(
                "the API server coordinates this election (CoordinatedLeaderElection is on and the candidates publish LeaseCandidates): its coordinator elects the holder and would undo a switchover".to_owned(),
            )),
            Err(e) => Err(kube_err("probe lease coordination")(e)),
        }
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
        let found = self.current().await?;
        let phase = self.take_phase();
        let (phase, next) = phase.campaign(found.clone(), Instant::now(), self.us());
        self.phase = phase;
        match next {
            Next::Follow(holder) => Ok(Campaign::Held(holder)),
            Next::Create { above } => self.create(above).await,
            Next::Take { over } => match found {
                Some(current) => self.take_over(current, over).await,
                // (A take is decided over a Lease found, never over none.)
                None => Ok(Campaign::Held(None)),
            },
        }
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let Some(mine) = self.phase.held().cloned() else {
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
                self.renewed(*lease);
                Ok(Renewal::Renewed)
            }
            OwnWrite::Gone => {
                self.end_tenure();
                Ok(Renewal::Lost)
            }
            OwnWrite::Contended => Err(BackendError::Store {
                op: "renew lease",
                message: "the Lease keeps changing under us".to_owned(),
            }),
        }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.release_leaving(None).await
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.release_leaving(Some(to)).await
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        if let Some(reason) = self.coordinated().await? {
            return Err(BackendError::Refused {
                op: "switchover",
                reason,
            });
        }
        match &self.candidate {
            Some(c) => c.alive().await.map_err(kube_err("list leasecandidates")),
            None => Ok(None),
        }
    }

    async fn record_lost(&mut self) {
        while self.phase.held().is_some() {
            if self.next_own_event().await {
                return;
            }
        }
        std::future::pending::<()>().await;
    }

    async fn retire(&mut self) {
        if let Some(c) = self.candidate.take() {
            c.withdraw().await;
        }
    }

    fn handover_requested(&mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut asked = self.handover.subscribe();
        async move {
            if asked.wait_for(|yes| *yes).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        let start = Instant::now();
        let phase = self.take_phase();
        let (phase, wait) = phase.wait(start, max, self.us());
        self.phase = phase;
        // Nothing read yet (or a create lost a race), free, handed to us, or expired:
        // campaign now.
        let Wait::Watch {
            until,
            expires,
            version,
        } = wait
        else {
            return Wake::Changed;
        };
        // Go on with the kept watch when it stands where our observation does (the read
        // of a campaign that changed nothing leaves it there); else open one from here.
        if self.follow_watch.at.as_deref() != Some(version.as_str()) {
            self.follow_watch.close();
        }
        if self.follow_watch.events().is_none() {
            if let Some(wake) = self.open_follow_watch(version, until).await {
                return wake;
            }
        }
        // A watch that ends soon after it opened (a proxy, a failing server) must not
        // become a tight loop of reads: wait a little before looking again.
        let settle = until.min(self.follow_watch.opened.unwrap_or(start) + SETTLE);
        loop {
            let next = match self.follow_watch.events().as_mut() {
                Some(events) => timeout_at(until, events.next()).await,
                None => return Wake::Changed,
            };
            let event = match next {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(e))) => {
                    tracing::debug!(error = %e, "the lease watch broke");
                    self.follow_watch.close();
                    sleep_until(settle).await;
                    return Wake::Changed;
                }
                Ok(None) => {
                    self.follow_watch.close();
                    sleep_until(settle).await;
                    return Wake::Changed;
                }
                // The time is up. Before the rival's record may have expired, the open
                // watch would have told of any change: wait on (no read). Else look
                // again; the watch stays open for the next wait.
                Err(_) if Instant::now() < expires => return Wake::Waiting,
                Err(_) => return Wake::Changed,
            };
            if let Some(wake) = self.on_follow_event(event, settle).await {
                return wake;
            }
        }
    }
}
