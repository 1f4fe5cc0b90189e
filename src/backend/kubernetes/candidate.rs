//! `--lease-candidate`: a `coordination.k8s.io/v1beta1` LeaseCandidate for the election's
//! Lease, published and renewed as client-go's `leaderelection.NewCandidate` does
//! (KEP-4355, coordinated leader election), by a background task the Kubernetes backend
//! owns (it ends when the backend is dropped). The elector never waits on it.
//!
//! As client-go (`tools/leaderelection/leasecandidate.go`):
//! - the LeaseCandidate is named after the candidate's identity (kube-scheduler and
//!   kube-controller-manager pass their lock identity), lives in the Lease's namespace,
//!   and is created when missing with `leaseName`, `binaryVersion`, `emulationVersion`,
//!   `strategy` and `renewTime` = now;
//! - it is renewed (`renewTime` = now, everything else as found, with the
//!   resourceVersion it was read at) every 5 minutes, and at once when the coordinator
//!   pings it: a `pingTime` later than `renewTime`, seen on a watch of the one object
//!   (`fieldSelector=metadata.name=<identity>`);
//! - unlike client-go's, it is deleted on a graceful shutdown ([`Candidate::withdraw`]):
//!   the coordinator pings every candidate it knows before it elects and waits 5 s for
//!   one that does not answer, which made a SIGTERM'd leader's handover on a
//!   coordinated Lease take 10-13 s on kube-apiserver 1.33.3 (a killed candidate's is
//!   removed by the API server's garbage collector after 30 minutes).
//!
//! Where leasecandidate differs: the version is ours, `binaryVersion` =
//! `emulationVersion` = this crate's version (the components pass their Kubernetes
//! version), strategy `OldestEmulationVersion` (theirs too); the object is read by a LIST
//! of the one name before each write instead of from an informer's cache; a deleted
//! LeaseCandidate is created again at once instead of at the next 5-minute round; and
//! when the API server does not serve `coordination.k8s.io/v1beta1` leasecandidates
//! (discovery) it says so once and does nothing, where client-go's informer would retry.
//!
//! The live candidates ([`Candidate::alive`]): the LeaseCandidates for the Lease renewed
//! within [`ALIVE_FOR`] by our clock, by name (= identity, which is what the coordinator
//! writes into `holderIdentity` and `preferredHolder`).

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, timeout_at, Instant};

/// The group version that serves LeaseCandidates (beta from Kubernetes 1.33).
const GROUP_VERSION: &str = "coordination.k8s.io/v1beta1";

/// client-go's `requeueInterval`: a LeaseCandidate is renewed this often unpinged.
pub const RENEW_EVERY: Duration = Duration::from_secs(5 * 60);

/// A LeaseCandidate renewed this recently counts as alive: two renewal periods, so one
/// late or failed renewal does not drop a live candidate. (The coordinator counts a
/// candidate for 30 minutes, `leaseCandidateValidDuration`, and pings them all before
/// it elects, waiting 5 s for their renewals.)
pub const ALIVE_FOR: Duration = Duration::from_secs(2 * 5 * 60);

/// The one strategy client-go's components publish.
const STRATEGY: &str = "OldestEmulationVersion";

/// How long the API server keeps the watch for pings open (kube refuses 295 s or more).
const WATCH_SECS: u32 = 290;

/// The first wait after a failed write, doubled up to [`RENEW_EVERY`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// A ping is answered twice: at once, and again this long after. The coordinator
/// (kube-apiserver 1.33, `reconcileElectionStep`) votes 5 s after its ping round
/// *finished* and counts only candidates that renewed within the last 5 s; an answer
/// written a few ms after the ping, before that round's own requests returned, falls
/// just outside, and with no candidate left it logs "no available candidates" and
/// waits for the next change (our next renewal: 5 minutes). The second answer is
/// inside the window, and its write wakes the coordinator too.
const ACK_AGAIN: Duration = Duration::from_secs(1);

/// Not before this after a watch that ended at once.
const SETTLE: Duration = Duration::from_millis(500);

/// Whether the API server serves LeaseCandidates, as discovery told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    Unknown,
    Yes,
    No,
}

/// The backend's handle on the publishing task: aborts it when dropped.
pub struct Candidate {
    api: Api<LeaseCandidate>,
    name: String,
    lease: String,
    served: watch::Receiver<Served>,
    task: tokio::task::AbortHandle,
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Now, in whole microseconds (as the API stores MicroTime).
fn now() -> MicroTime {
    use k8s_openapi::jiff::Timestamp;
    let t = Timestamp::now();
    MicroTime(Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t))
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

impl Candidate {
    /// Starts publishing the LeaseCandidate `identity` for Lease `lease` in `namespace`;
    /// `None` (and a warning) outside a tokio runtime.
    pub fn start(
        client: kube::Client,
        namespace: &str,
        identity: &str,
        lease: &str,
    ) -> Option<Candidate> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("--lease-candidate: no async runtime to publish the LeaseCandidate in; going on without it");
            return None;
        };
        let api: Api<LeaseCandidate> = Api::namespaced(client.clone(), namespace);
        let (served, seen) = watch::channel(Served::Unknown);
        let publisher = Publisher {
            client,
            api: api.clone(),
            name: identity.to_owned(),
            lease: lease.to_owned(),
            served,
            failing: false,
        };
        let task = runtime.spawn(publisher.run()).abort_handle();
        Some(Candidate {
            api,
            name: identity.to_owned(),
            lease: lease.to_owned(),
            served: seen,
            task,
        })
    }

    /// Leaves the election for good (a graceful shutdown): stops publishing and deletes
    /// the LeaseCandidate, so that the API server's coordinator does not ping a candidate
    /// that is gone and wait 5 s for its answer before it elects the next holder.
    pub async fn withdraw(&self) {
        self.task.abort();
        match self.api.delete(&self.name, &Default::default()).await {
            Ok(_) => tracing::debug!(name = %self.name, "LeaseCandidate deleted"),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => tracing::warn!(
                error = %e,
                "could not delete the LeaseCandidate; the API server's coordinator waits 5 s for it at the next election"
            ),
        }
    }

    /// The names (= identities) of the LeaseCandidates for our Lease renewed within
    /// [`ALIVE_FOR`], sorted; `None` when the API server does not serve them. Waits for
    /// the publisher's discovery when it has not answered yet.
    pub async fn alive(&self) -> Result<Option<Vec<String>>, kube::Error> {
        let mut served = self.served.clone();
        let known = served
            .wait_for(|s| *s != Served::Unknown)
            .await
            .map(|s| *s)
            .unwrap_or(Served::No);
        if known == Served::No {
            return Ok(None);
        }
        let list = self.api.list(&ListParams::default()).await?;
        let since = now().0 - ALIVE_FOR;
        let mut names: Vec<String> = list
            .items
            .into_iter()
            .filter(|c| c.spec.lease_name == self.lease)
            .filter(|c| c.spec.renew_time.as_ref().is_some_and(|t| t.0 >= since))
            .filter_map(|c| c.metadata.name)
            .collect();
        names.sort();
        Ok(Some(names))
    }
}

/// The publishing task.
struct Publisher {
    client: kube::Client,
    api: Api<LeaseCandidate>,
    name: String,
    lease: String,
    served: watch::Sender<Served>,
    /// The last write failed (its warning is logged; the next ones only at debug).
    failing: bool,
}

/// A pingTime later than the renewTime: the coordinator asks for a renewal.
fn pinged(candidate: &LeaseCandidate) -> bool {
    let spec = &candidate.spec;
    match (&spec.ping_time, &spec.renew_time) {
        (Some(ping), Some(renew)) => ping.0 > renew.0,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

impl Publisher {
    async fn run(mut self) {
        if !self.discover().await {
            return;
        }
        let mut backoff = FIRST_BACKOFF;
        let mut answer_again = false;
        loop {
            match self.ensure().await {
                Ok(written) => {
                    if self.failing {
                        self.failing = false;
                        tracing::info!(name = %self.name, "--lease-candidate: the LeaseCandidate is published again");
                    }
                    backoff = FIRST_BACKOFF;
                    if std::mem::take(&mut answer_again) {
                        sleep(ACK_AGAIN).await;
                        continue;
                    }
                    answer_again = self.wait_for_ping(&written).await;
                }
                Err((op, e)) => {
                    self.failed(op, &e);
                    sleep(backoff).await;
                    backoff = (backoff * 2).min(RENEW_EVERY);
                }
            }
        }
    }

    /// Asks discovery whether `coordination.k8s.io/v1beta1` serves leasecandidates,
    /// until it answers; notes and returns the answer.
    async fn discover(&mut self) -> bool {
        let mut backoff = FIRST_BACKOFF;
        let mut warned = false;
        let served = loop {
            match self.client.list_api_group_resources(GROUP_VERSION).await {
                Ok(list) => break list.resources.iter().any(|r| r.name == "leasecandidates"),
                Err(e) if status_code(&e) == Some(404) => break false,
                Err(e) => {
                    if !warned {
                        warned = true;
                        tracing::warn!(error = %e, "--lease-candidate: cannot ask the API server whether it serves LeaseCandidates yet; retrying");
                    }
                    sleep(backoff).await;
                    backoff = (backoff * 2).min(RENEW_EVERY);
                }
            }
        };
        if !served {
            tracing::warn!(
                "--lease-candidate: the API server does not serve {GROUP_VERSION} leasecandidates \
                 (Kubernetes 1.33 or later, with that API enabled); going on without a LeaseCandidate"
            );
        }
        self.served
            .send_replace(if served { Served::Yes } else { Served::No });
        served
    }

    /// A new LeaseCandidate, renewed now.
    fn fresh(&self) -> LeaseCandidate {
        let version = env!("CARGO_PKG_VERSION").to_owned();
        LeaseCandidate {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: LeaseCandidateSpec {
                lease_name: self.lease.clone(),
                binary_version: version.clone(),
                emulation_version: Some(version),
                strategy: STRATEGY.to_owned(),
                renew_time: Some(now()),
                ping_time: None,
            },
        }
    }

    /// Creates our LeaseCandidate when missing, else renews it: the object written.
    async fn ensure(&self) -> Result<LeaseCandidate, (&'static str, kube::Error)> {
        let params = ListParams::default().fields(&format!("metadata.name={}", self.name));
        let list = self.api.list(&params).await.map_err(|e| ("list", e))?;
        let post = PostParams::default();
        match list.items.into_iter().next() {
            None => {
                let created = self.api.create(&post, &self.fresh()).await;
                let created = created.map_err(|e| ("create", e))?;
                tracing::info!(name = %self.name, lease = %self.lease, "--lease-candidate: created the LeaseCandidate");
                Ok(created)
            }
            Some(mut current) => {
                current.spec.renew_time = Some(now());
                let renewed = self.api.replace(&self.name, &post, &current).await;
                let renewed = renewed.map_err(|e| ("update", e))?;
                tracing::debug!(name = %self.name, "--lease-candidate: renewed the LeaseCandidate");
                Ok(renewed)
            }
        }
    }

    /// Logs a failed write: a warning for the first of a series, with what to do.
    fn failed(&mut self, op: &str, e: &kube::Error) {
        let first = !self.failing;
        self.failing = true;
        let hint = match status_code(e) {
            Some(403) => "the Role must allow leasecandidates (coordination.k8s.io) list, watch, create and update; chart value leaseCandidate.enabled",
            Some(422) => "the LeaseCandidate is named after --identity, which must be a DNS subdomain name",
            Some(409) => "it changed meanwhile; trying again",
            _ => "trying again",
        };
        if first {
            tracing::warn!(error = %e, name = %self.name, "--lease-candidate: cannot {op} the LeaseCandidate ({hint}); the election goes on without it");
        } else {
            tracing::debug!(error = %e, name = %self.name, "--lease-candidate: cannot {op} the LeaseCandidate");
        }
    }

    /// Waits until a renewal is due: [`RENEW_EVERY`] after `written`, or a ping (or a
    /// deletion, or a watch too old to follow) seen on the watch of the one object;
    /// `true` for a ping.
    async fn wait_for_ping(&self, written: &LeaseCandidate) -> bool {
        let until = Instant::now() + RENEW_EVERY;
        let mut from = written.metadata.resource_version.clone();
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(WATCH_SECS);
        loop {
            let Some(version) = from.clone() else {
                return false;
            };
            let opened = Instant::now();
            let stream = match timeout_at(until, self.api.watch(&params, &version)).await {
                Err(_) => return false,
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "--lease-candidate: watching the LeaseCandidate failed");
                    sleep_until(until.min(Instant::now() + SETTLE)).await;
                    continue;
                }
            };
            let mut stream = stream.boxed();
            loop {
                let event = match timeout_at(until, stream.next()).await {
                    Err(_) => return false,
                    Ok(Some(Ok(event))) => event,
                    Ok(Some(Err(_)) | None) => break,
                };
                match event {
                    WatchEvent::Added(c) | WatchEvent::Modified(c) => {
                        if pinged(&c) {
                            return true;
                        }
                        from = c.metadata.resource_version;
                    }
                    WatchEvent::Bookmark(b) => from = Some(b.metadata.resource_version),
                    WatchEvent::Deleted(_) | WatchEvent::Error(_) => return false,
                }
            }
            // A watch that ends at once is not reopened in a tight loop.
            sleep_until(until.min(opened + SETTLE)).await;
        }
    }
}
