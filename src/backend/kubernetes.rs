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

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::{sleep_until, Instant};

pub use self::answers::Heard;
use self::answers::Refusal;
use self::core::{Next, Phase, Us};
use self::follow::FollowWatch;
use self::own::{Own, OwnAnswer, OwnStep, OwnWatch};
use self::requests::LeaseApi;
use self::watches::{Events, LeaseEvents};
use super::protocol::{self, Protocol, Transport, Waited};
use super::record::Seen;
use super::{BackendError, Campaign, Candidacy, Renewal, SlowPaths};
use crate::settings::{bad, fmt_d, ConfigError};
use rules::{coordination, Coordinated, Record};
use settings::KubeSettings;

mod answers;
pub mod candidate;
mod core;
pub mod driven;
pub mod entry;
mod follow;
mod following;
mod own;
mod requests;
mod rules;
pub mod settings;
mod watches;

/// What a write over our own tenure came to.
enum OwnWrite {
    Written(Box<Lease>),
    /// The Lease is gone or is no longer our tenure.
    Gone,
    /// It kept changing under us (still ours, but two conflicts in a row).
    Contended,
}

pub struct KubeTransport {
    api: LeaseApi,
    identity: String,
    ttl: Duration,
    /// What we know of the Lease, and our tenure while we lead ([`Phase`]).
    phase: Phase,
    /// The records of our last few writes (sent, whether or not the answer came back).
    written: VecDeque<Record>,
    /// While leading: the watch on our own record ([`OwnWatch`]), and its stream.
    own_watch: OwnWatch,
    own_events: Events,
    /// While following: the watch on the holder's record ([`FollowWatch`]), and its
    /// stream, kept across waits.
    follow_watch: FollowWatch,
    follow_events: Events,
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

/// A watch request's answer, apart from its stream.
fn split(answer: Result<LeaseEvents, Refusal>) -> (Result<(), Refusal>, Option<LeaseEvents>) {
    match answer {
        Ok(events) => (Ok(()), Some(events)),
        Err(e) => (Err(e), None),
    }
}

/// The Kubernetes Lease as a [`super::Backend`].
pub type KubeBackend = Protocol<KubeTransport>;

impl KubeBackend {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        lease: &Candidacy,
        settings: KubeSettings,
    ) -> Self {
        Protocol::over(KubeTransport::new(client, namespace, lease, settings))
    }

    /// Opens the Lease's watches (the leader's and a follower's) over `client`, one with
    /// connections of its own: a watch holds its connection while it is open, and on
    /// the client of the writes it would leave a leader's release or a follower's take
    /// a new connection (a TLS handshake) to wait for.
    pub fn watching_over(mut self, client: kube::Client) -> Self {
        self.store_mut().api.watch_over(client);
        self
    }

    /// Counts renewals that fell back to a read into `slow_paths` (for the metrics).
    pub fn with_slow_paths(mut self, slow_paths: SlowPaths) -> Self {
        self.store_mut().slow_paths = slow_paths;
        self
    }
}

impl KubeTransport {
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
        KubeTransport {
            api: LeaseApi::new(client, namespace, lease.election),
            identity: lease.identity.to_owned(),
            ttl: lease.timing.ttl,
            phase: Phase::Unseen,
            written: VecDeque::new(),
            own_watch: OwnWatch::default(),
            own_events: Events::default(),
            follow_watch: FollowWatch::default(),
            follow_events: Events::default(),
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

    /// Moves the leader's watch on; a watch no longer open drops its stream.
    fn set_own_watch(&mut self, watch: OwnWatch) {
        if !watch.is_open() {
            self.own_events.close();
        }
        self.own_watch = watch;
    }

    /// Moves the follower's watch on; a watch no longer open drops its stream.
    fn set_follow_watch(&mut self, watch: FollowWatch) {
        if !watch.is_open() {
            self.follow_events.close();
        }
        self.follow_watch = watch;
    }

    /// Our write `written` (a take-over or a create) began a tenure: watch our own
    /// record from its version.
    fn taken(&mut self, written: Lease) {
        self.set_follow_watch(FollowWatch::Closed);
        self.handover.send_replace(false);
        self.preferred_at_start = coordination(&written).1.map(str::to_owned);
        let version = written.metadata.resource_version.clone();
        self.set_own_watch(OwnWatch::from_write(version));
        self.step(|p| p.taken(written, Instant::now()));
    }

    /// Our tenure ends: stop watching our own record; the tenure as our last write
    /// left it, if we held one.
    fn end_tenure(&mut self) -> Option<Lease> {
        self.handover.send_replace(false);
        self.preferred_at_start = None;
        self.set_own_watch(OwnWatch::Blind);
        let (phase, held) = self.take_phase().end_tenure();
        self.phase = phase;
        held
    }

    /// A renew wrote `lease`, over a version it judged our tenure (it named that version),
    /// so after a 410 the watch may start again from here.
    fn renewed(&mut self, lease: Lease) {
        let version = lease.metadata.resource_version.clone();
        self.own_watch = std::mem::take(&mut self.own_watch).renewed(version);
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

    /// Our tenure's record over `base`'s spec ([`rules::tenure_spec`]), noted as one of
    /// our writes before it is sent.
    fn our_spec(
        &mut self,
        base: Option<&LeaseSpec>,
        acquire: Option<MicroTime>,
        transitions: i32,
    ) -> LeaseSpec {
        let us = (self.identity.as_str(), self.ttl_secs());
        let spec = rules::tenure_spec(base, us, acquire, transitions, now());
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
}

/// The answers of the API server, taken by the cores.
impl KubeTransport {
    /// The answer to opening the leader's watch.
    fn own_opened(&mut self, answer: Result<LeaseEvents, Refusal>) {
        let (answer, events) = split(answer);
        let watch =
            std::mem::take(&mut self.own_watch).opened(answer.as_ref().map(|_| ()), Instant::now());
        if let Some(events) = events.filter(|_| watch.is_open()) {
            self.own_events.set(events);
        }
        self.set_own_watch(watch);
    }

    /// One event of the leader's watch: `true` when the record is lost.
    fn own_heard(&mut self, heard: Heard) -> bool {
        let watch = std::mem::take(&mut self.own_watch);
        let (watch, own) = watch.heard(heard, Instant::now(), |l| self.own_tenure(l));
        self.set_own_watch(watch);
        let lost = own.lost();
        match own {
            Own::Ours(lease) => self.check_preferred(&lease),
            Own::Overwritten(lease) => self.observe(*lease),
            Own::Deleted(version) => self.step(|p| p.deleted_at(version)),
            Own::Nothing => {}
        }
        lost
    }

    /// What a campaign sends next over `found`, the Lease as it stands ([`Phase::campaign`]).
    fn decide(&mut self, found: Option<Lease>) -> Next {
        let phase = self.take_phase();
        let (phase, next) = phase.campaign(found, Instant::now(), self.us());
        self.phase = phase;
        next
    }

    /// A campaign's write (a take-over, a create) of our tenure with token
    /// `transitions` was answered: our tenure, or a conflict (somebody wrote since we
    /// read, or created it first: they are the holder now, or will tell).
    fn took(
        &mut self,
        answer: Result<Lease, Refusal>,
        transitions: i32,
        op: &'static str,
    ) -> Result<Campaign, BackendError> {
        match answer {
            Ok(written) => {
                self.taken(written);
                Ok(Campaign::Acquired {
                    token: u64::try_from(transitions).unwrap_or(0),
                })
            }
            Err(e) if e.conflict() => {
                self.step(Phase::outrun);
                Ok(Campaign::Held(None))
            }
            Err(e) => Err(e.into_error(op)),
        }
    }

    /// A write over our own tenure was answered ([`OwnAnswer`]); `Some` when the write
    /// is over, `None` after a conflict (read, and write again).
    fn own_written(
        &mut self,
        answer: Result<Lease, Refusal>,
        op: &'static str,
    ) -> Result<Option<OwnWrite>, BackendError> {
        match OwnAnswer::of(answer) {
            OwnAnswer::Written(written) => {
                self.observe((*written).clone());
                Ok(Some(OwnWrite::Written(written)))
            }
            OwnAnswer::Conflict => {
                if op == "renew lease" {
                    self.slow_paths.add();
                }
                Ok(None)
            }
            OwnAnswer::Gone => {
                self.step(Phase::missing);
                Ok(Some(OwnWrite::Gone))
            }
            OwnAnswer::Failed(e) => Err(e.into_error(op)),
        }
    }

    /// The read after a conflict over our tenure (token `token`) found `current`: the
    /// Lease to write over again when it is still ours.
    fn still_ours(&mut self, current: Option<Lease>, token: i32) -> Option<Lease> {
        let Some(current) = current else {
            self.step(Phase::missing);
            return None;
        };
        self.observe(current.clone());
        own::still_ours(&current, &self.identity, token).then_some(current)
    }

    /// What a renew's write came to.
    fn renewal(&mut self, written: OwnWrite) -> Result<Renewal, BackendError> {
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
}

impl KubeTransport {
    /// The Lease is missing: create it, with a token above `above` (the token of the
    /// record seen before the deletion; -1: none).
    async fn create(&mut self, above: i32) -> Result<Campaign, BackendError> {
        // Above every token of the Lease before it was deleted: the list's version is
        // at least that of every write so far. (-1: a token of 0 when nothing is known.)
        let version = self.api.list_version().await;
        let version = version.map_err(|e| e.into_error("list leases"))?;
        let transitions = self.token_over(above, version.as_deref())?;
        let spec = self.our_spec(None, Some(now()), transitions);
        let created = self.api.create(spec).await;
        self.took(created, transitions, "create lease")
    }

    /// Writes our tenure over `current` (the Lease as found), with a token above `over`
    /// and its version: every acquisition gets a greater token, also one from our own
    /// old tenure, and one above every token of an earlier incarnation of the Lease.
    async fn take_over(&mut self, current: Lease, over: i32) -> Result<Campaign, BackendError> {
        let version = current.metadata.resource_version.clone();
        let transitions = self.token_over(over, version.as_deref())?;
        let spec = self.our_spec(current.spec.as_ref(), Some(now()), transitions);
        let written = self.api.replace(&Self::with_spec(&current, spec)).await;
        self.took(written, transitions, "update lease")
    }

    /// Writes `spec_for(base, now)` over our own tenure (token `transitions`), noted as
    /// one of our writes before it is sent; re-reading once after a conflict: it may
    /// come from a write that did not change the holder (a label, say, or our own
    /// earlier write whose answer was lost).
    async fn write_own(
        &mut self,
        mut base: Lease,
        transitions: i32,
        op: &'static str,
        spec_for: impl Fn(&Lease, MicroTime) -> LeaseSpec + Send,
    ) -> Result<OwnWrite, BackendError> {
        for _ in 0..2 {
            let spec = spec_for(&base, now());
            self.note_write(&spec);
            let answer = self.api.replace(&Self::with_spec(&base, spec)).await;
            if let Some(written) = self.own_written(answer, op)? {
                return Ok(written);
            }
            let current = self.read().await?;
            match self.still_ours(current, transitions) {
                Some(current) => base = current,
                None => return Ok(OwnWrite::Gone),
            }
        }
        Ok(OwnWrite::Contended)
    }

    /// Reads the Lease; notes whether it is gone.
    async fn read(&mut self) -> Result<Option<Lease>, BackendError> {
        let current = self.api.get().await;
        let current = current.map_err(|e| e.into_error("get lease"))?;
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

    /// Gives our own tenure back (a no-op when we hold none) with one write at the
    /// resourceVersion ([`rules::release_spec`]): without `to`, in client-go's
    /// `ReleaseOnCancel` form; with `to` (a switchover), handed to `to`, which takes it
    /// at once with a write of its own ([`Seen::Reserved`]); the others see a live
    /// holder and wait, client-go's candidates too; if `to` never takes it, it expires
    /// after a ttl like any record. (`preferredHolder` cannot carry this: the API server
    /// drops it without the `CoordinatedLeaderElection` gate and refuses it without
    /// `strategy` with the gate.)
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
        let ttl = self.ttl_secs();
        // Whatever the outcome, the tenure is no longer ours to release.
        let release = |lease: &Lease, at| {
            let base = lease.spec.clone().unwrap_or_default();
            rules::release_spec(base, to, ttl, transitions, at)
        };
        self.write_own(mine, transitions, "release lease", release)
            .await?;
        Ok(())
    }

    /// Why a switchover cannot name the next holder of this Lease, if it cannot
    /// ([`rules::coordinated`]).
    async fn coordinated(&mut self) -> Result<Option<String>, BackendError> {
        let Some(lease) = self.read().await? else {
            return Ok(None);
        };
        let with_candidate = self.candidate.is_some();
        match rules::coordinated(&lease, with_candidate, &self.identity) {
            Coordinated::No => Ok(None),
            Coordinated::Yes(reason) => Ok(Some(reason)),
            Coordinated::Probe(probe) => {
                let answer = self.api.probe(&probe).await;
                rules::probed(answer).map_err(|e| e.into_error("probe lease coordination"))
            }
        }
    }
}

impl Transport for KubeTransport {
    type News = Heard;
    type Look = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "kubernetes"
    }

    /// No `--mode` on a Lease (the settings refuse it).
    fn no_switchover(&self) -> Option<&'static str> {
        None
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        let found = self.current().await?;
        match self.decide(found.clone()) {
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
        let Record {
            transitions,
            acquire,
            ..
        } = Record::of(&mine);
        let (identity, ttl) = (self.identity.clone(), self.ttl_secs());
        let renew = |base: &Lease, at| {
            let us = (identity.as_str(), ttl);
            rules::tenure_spec(base.spec.as_ref(), us, acquire.clone(), transitions, at)
        };
        let written = self
            .write_own(mine, transitions, "renew lease", renew)
            .await?;
        self.renewal(written)
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
            Some(c) => c.alive().await.map_err(|e| BackendError::Store {
                op: "list leasecandidates",
                message: e.to_string(),
            }),
            None => Ok(None),
        }
    }

    /// The next event on the watch of our Lease, (re)opening it as the own-record
    /// watch says; `None` once there is nothing to watch (not leading, or 410 Gone: we
    /// cannot tell, and the next renew decides and sets a version).
    async fn own_news(&mut self) -> Option<Heard> {
        while self.phase.held().is_some() {
            match self.own_watch.step(Instant::now()) {
                OwnStep::Park => return None,
                OwnStep::Pause(t) => sleep_until(t).await,
                OwnStep::Open(from) => {
                    let answer = self.api.watch_own(&from).await;
                    self.own_opened(answer);
                }
                OwnStep::Read => {
                    let heard = self.own_events.next(None).await;
                    return Some(heard.unwrap_or(Heard::Ended));
                }
            }
        }
        None
    }

    fn on_own(&mut self, _now: Instant, heard: Heard) -> protocol::Own<Self::Look> {
        if self.own_heard(heard) {
            protocol::Own::Lost
        } else {
            protocol::Own::Quiet
        }
    }

    async fn own_look(&mut self, look: Self::Look) -> bool {
        match look {}
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

    async fn wait(&mut self, max: Duration) -> Waited {
        Waited::Wake(self.wait_for_change(max).await)
    }
}
