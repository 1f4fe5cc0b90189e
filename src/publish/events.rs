//! Kubernetes Events on each change of leadership, as client-go's leader election
//! records them: type `Normal`, reason `LeaderElection`, message `<identity> became
//! leader` or `<identity> stopped leading`, about the Lease (Lease backend) or the
//! sidecar's own Pod (every other backend, when it runs in a Pod). Runbooks find them
//! with `kubectl get events --field-selector reason=LeaderElection`.
//!
//! A publisher like the others: it reads `Status` only. Two tasks keep the elector
//! free of the API: a watcher turns changes of `Status` into counts of changes (from
//! `own_tenures`, so a tenure too short to be seen is still counted), kept in two
//! counters, a queue of constant size that never makes it wait, and a writer sends
//! them. Like client-go's event correlator, a repeat of the same message within ten
//! minutes is not a new Event but a patch of the earlier one's `count` and
//! `lastTimestamp` (a series), and every write takes a token from a bucket (burst 10,
//! then one per 10 s): a flapping election costs the API a handful of requests, and
//! the counts catch up with the next write. The writer flushes what is pending when the
//! elector ends, without waiting for tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::watch;
use tokio::time::{timeout, Instant};

use crate::status::{Role, Status};

mod settings;
pub use settings::{Args, Subject};

impl Subject {
    fn reference(&self, uid: Option<String>) -> ObjectReference {
        let (api_version, kind) = match self {
            Subject::Lease { .. } => ("coordination.k8s.io/v1", "Lease"),
            Subject::Pod { .. } => ("v1", "Pod"),
        };
        ObjectReference {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
            name: Some(self.name().to_owned()),
            namespace: Some(self.namespace().to_owned()),
            uid,
            ..ObjectReference::default()
        }
    }
}

/// A change of leadership to record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Change {
    BecameLeader,
    StoppedLeading,
}

impl Change {
    fn message(self, identity: &str) -> String {
        match self {
            Change::BecameLeader => format!("{identity} became leader"),
            Change::StoppedLeading => format!("{identity} stopped leading"),
        }
    }
}

const REASON: &str = "LeaderElection";
const COMPONENT: &str = "leasekeeper";
/// A repeat within this long patches the earlier Event (client-go's correlator: 10 min).
const SERIES_WINDOW: Duration = Duration::from_secs(600);
/// Writes allowed at once, then one per `REFILL`.
const BURST: u32 = 10;
const REFILL: Duration = Duration::from_secs(10);
/// One request's time limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The changes of leadership in a stream of `Status` values: the watcher's state.
#[derive(Default)]
struct Leadership {
    leading: bool,
    tenures: u64,
}

/// Changes counted but not yet taken by the writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    became: u32,
    stopped: u32,
}

impl Leadership {
    /// The changes from the last status seen to `status`.
    fn step(&mut self, status: &Status) -> Counts {
        let leading = status.role == Role::Leader && status.claim.is_some();
        let began =
            u32::try_from(status.own_tenures.saturating_sub(self.tenures)).unwrap_or(u32::MAX);
        // Every tenure begun ended, but the one we may lead in now.
        let ended = began
            .saturating_add(u32::from(self.leading))
            .saturating_sub(u32::from(leading));
        self.leading = leading;
        self.tenures = status.own_tenures;
        Counts {
            became: began,
            stopped: ended,
        }
    }
}

/// One Event of a series, as last written.
struct Series {
    name: String,
    count: i32,
    first: Time,
    last: Time,
    started: Instant,
    /// The Event exists at the API.
    created: bool,
    /// Counted but not yet written.
    dirty: bool,
}

/// The writer: the API, the series so far and the token bucket.
struct Writer {
    events: Api<Event>,
    client: kube::Client,
    subject: Subject,
    identity: String,
    uid: Option<String>,
    series: HashMap<Change, Series>,
    tokens: u32,
    refilled: Instant,
}

pub struct Events {
    status: watch::Receiver<Status>,
    writer: Writer,
}

fn now_time() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl Events {
    pub fn new(client: kube::Client, subject: Subject, status: watch::Receiver<Status>) -> Self {
        let identity = status.borrow().identity.clone();
        Events {
            status,
            writer: Writer {
                events: Api::namespaced(client.clone(), subject.namespace()),
                client,
                subject,
                identity,
                uid: None,
                series: HashMap::new(),
                tokens: BURST,
                refilled: Instant::now(),
            },
        }
    }

    /// Runs until the elector is gone (its `Status` sender dropped), then flushes.
    pub async fn run(self) {
        let Events { mut status, writer } = self;
        let counts = Arc::new(Mutex::new(Counts::default()));
        let (wake, woken) = watch::channel(false);
        let writing = tokio::spawn(writer.run(counts.clone(), woken));
        let mut leadership = Leadership::default();
        loop {
            let step = leadership.step(&status.borrow_and_update());
            if step != Counts::default() {
                if let Ok(mut c) = counts.lock() {
                    c.became = c.became.saturating_add(step.became);
                    c.stopped = c.stopped.saturating_add(step.stopped);
                }
                wake.send_replace(true);
            }
            if status.changed().await.is_err() {
                break;
            }
        }
        drop(wake);
        let _ = writing.await;
    }
}

impl Writer {
    async fn run(mut self, counts: Arc<Mutex<Counts>>, mut woken: watch::Receiver<bool>) {
        loop {
            let next = self.next_token_at();
            let pending = self.series.values().any(|s| s.dirty);
            let ended = tokio::select! {
                changed = woken.changed() => changed.is_err(),
                _ = tokio::time::sleep_until(next), if pending => false,
            };
            self.take(&counts);
            if ended {
                break;
            }
            self.write_pending(false).await;
        }
        self.write_pending(true).await;
    }

    /// Moves the watcher's counts into the series.
    fn take(&mut self, counts: &Mutex<Counts>) {
        let taken = match counts.lock() {
            Ok(mut c) => std::mem::take(&mut *c),
            Err(_) => return,
        };
        // A tenure's end comes before the next one's start; only the order within a
        // message matters for its count.
        self.note(Change::StoppedLeading, taken.stopped);
        self.note(Change::BecameLeader, taken.became);
    }

    /// Counts `n` changes in their series (a new series after the window).
    fn note(&mut self, change: Change, n: u32) {
        if n == 0 {
            return;
        }
        let n = i32::try_from(n).unwrap_or(i32::MAX);
        let now = now_time();
        match self.series.get_mut(&change) {
            Some(s) if s.started.elapsed() < SERIES_WINDOW => {
                s.count = s.count.saturating_add(n);
                s.last = now;
                s.dirty = true;
            }
            _ => {
                let name = format!(
                    "{}.{:x}",
                    self.subject.name(),
                    k8s_openapi::jiff::Timestamp::now().as_nanosecond()
                );
                let series = Series {
                    name,
                    count: n,
                    first: now.clone(),
                    last: now,
                    started: Instant::now(),
                    created: false,
                    dirty: true,
                };
                self.series.insert(change, series);
            }
        }
    }

    fn next_token_at(&self) -> Instant {
        self.refilled + REFILL
    }

    /// Takes a token, unless `flush` (the last writes at the end).
    fn take_token(&mut self, flush: bool) -> bool {
        let refills = self.refilled.elapsed().as_secs() / REFILL.as_secs();
        if refills > 0 {
            let refills = u32::try_from(refills).unwrap_or(BURST);
            self.tokens = self.tokens.saturating_add(refills).min(BURST);
            self.refilled = Instant::now();
        }
        if flush {
            return true;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    async fn write_pending(&mut self, flush: bool) {
        let dirty: Vec<Change> = self
            .series
            .iter()
            .filter(|(_, s)| s.dirty)
            .map(|(c, _)| *c)
            .collect();
        for change in dirty {
            if !self.take_token(flush) {
                return;
            }
            self.write(change).await;
        }
    }

    /// Creates the series' Event or patches its count.
    async fn write(&mut self, change: Change) {
        if self.uid.is_none() {
            self.uid = self.subject_uid().await;
        }
        let message = change.message(&self.identity);
        let Some(s) = self.series.get_mut(&change) else {
            return;
        };
        s.dirty = false;
        let result = if !s.created {
            s.created = true;
            let event = Event {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    namespace: Some(self.subject.namespace().to_owned()),
                    ..ObjectMeta::default()
                },
                involved_object: self.subject.reference(self.uid.clone()),
                reason: Some(REASON.to_owned()),
                message: Some(message),
                type_: Some("Normal".to_owned()),
                source: Some(EventSource {
                    component: Some(COMPONENT.to_owned()),
                    host: None,
                }),
                first_timestamp: Some(s.first.clone()),
                last_timestamp: Some(s.last.clone()),
                count: Some(s.count),
                reporting_component: Some(COMPONENT.to_owned()),
                reporting_instance: Some(self.identity.clone()),
                ..Event::default()
            };
            timeout(
                REQUEST_TIMEOUT,
                self.events.create(&PostParams::default(), &event),
            )
            .await
            .map(|r| r.map(|_| ()))
        } else {
            let patch = serde_json::json!({
                "count": s.count,
                "lastTimestamp": s.last,
                "message": message,
            });
            timeout(
                REQUEST_TIMEOUT,
                self.events
                    .patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await
            .map(|r| r.map(|_| ()))
        };
        match result {
            Ok(Ok(())) => {}
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                // The Event expired (the API keeps them about an hour): a new series.
                let count = self.series.remove(&change).map_or(1, |s| s.count);
                self.note(change, u32::try_from(count).unwrap_or(1));
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "recording a leadership event failed"),
            Err(_) => tracing::debug!("recording a leadership event timed out"),
        }
    }

    /// The subject's uid, so that `kubectl describe` shows the Events (best effort).
    async fn subject_uid(&self) -> Option<String> {
        let (client, ns, name) = (
            self.client.clone(),
            self.subject.namespace(),
            self.subject.name(),
        );
        match &self.subject {
            Subject::Lease { .. } => uid_of::<Lease>(client, ns, name).await,
            Subject::Pod { .. } => uid_of::<Pod>(client, ns, name).await,
        }
    }
}

/// The uid of a namespaced object, if it can be read in time.
async fn uid_of<K>(client: kube::Client, ns: &str, name: &str) -> Option<String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client, ns);
    timeout(REQUEST_TIMEOUT, api.get_opt(name))
        .await
        .ok()?
        .ok()??
        .meta()
        .uid
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Claim;
    use std::time::SystemTime;

    fn status(role: Role, token: Option<u64>, tenures: u64) -> Status {
        let mut s = Status::new("e", "me", "kubernetes", Duration::from_secs(15));
        s.role = role;
        s.own_tenures = tenures;
        s.claim = token.map(|token| Claim {
            deadline: Instant::now() + Duration::from_secs(5),
            token,
            since: SystemTime::now(),
        });
        s
    }

    #[tokio::test(start_paused = true)]
    async fn each_tenure_is_one_became_and_one_stopped_even_unseen() {
        let mut l = Leadership::default();
        let counts = |became, stopped| Counts { became, stopped };
        assert_eq!(l.step(&status(Role::Follower, None, 0)), counts(0, 0));
        assert_eq!(l.step(&status(Role::Leader, Some(3), 1)), counts(1, 0));
        assert_eq!(l.step(&status(Role::Leader, Some(3), 1)), counts(0, 0));
        // Two tenures later, leading in the last: the one between was never seen.
        assert_eq!(l.step(&status(Role::Leader, Some(7), 3)), counts(2, 2));
        assert_eq!(l.step(&status(Role::Candidate, None, 3)), counts(0, 1));
        // A tenure that began and ended between two looks.
        assert_eq!(l.step(&status(Role::Follower, None, 4)), counts(1, 1));
        assert_eq!(Change::BecameLeader.message("pod-a"), "pod-a became leader");
        assert_eq!(
            Change::StoppedLeading.message("pod-a"),
            "pod-a stopped leading"
        );
    }
}
