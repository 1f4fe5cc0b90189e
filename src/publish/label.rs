//! The Pod labeler: keeps `leasekeeper.io/leader: "true"|"false"` (key and values
//! configurable) on the own Pod, so a Service whose selector includes the label routes
//! only to the leader (DESIGN §4).
//!
//! It reads [`Status`] and nothing else; it never talks to a backend.
//! - The value is decided with the deadline check of invariant 3 at the moment of each
//!   decision, and a timer at the local deadline flips it to the follower value even if
//!   the elector is slow to say so: it never leaves "true" standing past the deadline
//!   while it runs.
//! - Writes are JSON merge patches of the one label; failures are retried with backoff.
//! - It watches the own Pod, so someone editing the label (drift) is corrected at once,
//!   and a stale value from an earlier container is corrected at start.
//! - It tells the elector, through [`PodLabeler::clear`], when the Pod is known to show
//!   the follower value, so a graceful shutdown sets "false" *before* releasing.
//! - **One Pod carries the leader value** (invariant 12). Every candidate Pod carries
//!   `leasekeeper.io/election: <election>` (the chart sets it; we warn once if our own
//!   Pod lacks it). At the start of each tenure, before its own leader value is written,
//!   the new leader lists the Pods of its election that show the leader value and sets
//!   the follower value on every other one, with a merge patch that carries the
//!   resourceVersion it listed (so it clears only what it saw): a frozen or cut-off old
//!   leader cannot clear its own. Failures are retried with the same backoff; the
//!   elector never waits for any of it. For the rest of the tenure a watch on those Pods
//!   (from the list's version) clears any other Pod that comes to show the leader value:
//!   a "true" of an old leader that was still on its way while its Pod showed the
//!   follower value is not refused (nobody wrote that Pod since the old leader read
//!   it), so it lands, and is cleared within a round trip.
//! - **Leader-value writes are conditional**: the patch carries the resourceVersion of
//!   the Pod as last seen, so a delayed "true" from an old leader cannot land after a
//!   new leader's clear of that Pod. A 409 means the Pod changed: read it again and
//!   decide again from the current status.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use super::metrics::Metrics;
use crate::backoff::Backoff;
use crate::status::{FencingToken, Status};

mod settings;
pub use settings::{Args, PodLabelSettings};

/// The label every candidate Pod carries, with its election's name as the value.
pub const ELECTION_LABEL: &str = "leasekeeper.io/election";

/// With several slots (`--holders`): the leader's slot, beside the leader value.
pub const SLOT_LABEL: &str = "leasekeeper.io/slot";

/// What the labeler writes and reads as one value: the leader label's value, and with
/// several slots the slot label's after an `@` (no label value can hold one):
/// `true@2`, `false`.
fn shown(
    labels: &Option<std::collections::BTreeMap<String, String>>,
    s: &PodLabelSettings,
) -> Option<String> {
    let value = label_value_of(labels, &s.key)?;
    match label_value_of(labels, SLOT_LABEL).filter(|_| s.slots) {
        Some(slot) => Some(format!("{value}@{slot}")),
        None => Some(value.clone()),
    }
}

/// What the own Pod carries, as read from the API.
#[derive(Clone, Debug)]
struct Seen {
    /// The resourceVersion as sent (for conditional writes).
    rv: Option<String>,
    /// The label value.
    value: Option<String>,
    /// The value of [`ELECTION_LABEL`].
    election: Option<String>,
}

impl Seen {
    fn of(pod: &Pod, settings: &PodLabelSettings) -> Seen {
        Seen {
            rv: pod.metadata.resource_version.clone(),
            value: shown(&pod.metadata.labels, settings),
            election: label_value(pod, ELECTION_LABEL),
        }
    }

    /// The resourceVersion as a number, to order what we saw. (resourceVersions are
    /// opaque to clients by contract; every API server backed by etcd hands out
    /// increasing integers, and when one does not parse, every event counts.)
    fn version(&self) -> Option<u64> {
        self.rv.as_deref()?.parse().ok()
    }
}

/// A label update that did not take.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("patching the pod: {0}")]
    Api(#[from] kube::Error),
    #[error("patching the pod timed out")]
    Timeout,
    #[error("the API accepted the patch, but the label reads {0:?}")]
    NotApplied(Option<String>),
    /// A conditional write found the Pod changed since it was read (409).
    #[error("the pod changed since it was read")]
    Conflict,
    #[error("reading the pod: {0}")]
    Read(#[source] kube::Error),
    #[error("listing the pods of the election: {0}")]
    List(#[source] kube::Error),
    #[error("clearing the leader label of pod {pod}: {source}")]
    Clear {
        pod: String,
        #[source]
        source: kube::Error,
    },
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}

/// What the labeler knows between its steps.
struct Known {
    /// The value the Pod carries as far as we know, and the version that showed it
    /// (the one a leader-value write is conditional on).
    applied: Option<String>,
    applied_rv: Option<String>,
    /// The tenure (token) for which the other Pods' leader labels were cleared.
    cleared_for: Option<FencingToken>,
    /// While leading (after the first clearing): the watch that clears any other Pod
    /// of the election that comes to show the leader value later.
    guard: Option<(FencingToken, AbortOnDrop)>,
    election_checked: bool,
    backoff: Backoff,
    retry_at: Option<Instant>,
}

impl Default for Known {
    fn default() -> Self {
        Known {
            applied: None,
            applied_rv: None,
            cleared_for: None,
            guard: None,
            election_checked: false,
            backoff: backoff(),
            retry_at: None,
        }
    }
}

/// One decision to write: the value, whether to patch it and clear the others.
struct Wanted {
    value: String,
    /// The tenure's slot (several slots only).
    slot: Option<u32>,
    patch: bool,
    clear: bool,
    leading: bool,
    deadline: Option<Instant>,
    token: Option<FencingToken>,
}

pub struct PodLabeler {
    api: Api<Pod>,
    settings: PodLabelSettings,
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    clear: watch::Sender<bool>,
    call_timeout: Duration,
}

/// Backoff for failed patches and watches: 100 ms, doubling up to 5 s.
fn backoff() -> Backoff {
    Backoff::new(Duration::from_millis(100), Duration::from_secs(5))
}

/// The value of label `key` on `pod`.
fn label_value(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata.labels.as_ref()?.get(key).cloned()
}

impl PodLabeler {
    pub fn new(
        client: kube::Client,
        settings: PodLabelSettings,
        status: watch::Receiver<Status>,
        metrics: Arc<Metrics>,
        call_timeout: Duration,
    ) -> Self {
        PodLabeler {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            status,
            metrics,
            clear: watch::channel(false).0,
            call_timeout,
        }
    }

    /// `true` while the Pod is known to carry the follower value.
    pub fn clear(&self) -> watch::Receiver<bool> {
        self.clear.subscribe()
    }

    fn label_of(&self, pod: &Pod) -> Option<String> {
        shown(&pod.metadata.labels, &self.settings)
    }

    /// Runs until the status sender is gone.
    pub async fn run(mut self) {
        let (seen_tx, mut seen_rx) = mpsc::channel::<Seen>(16);
        let watcher = tokio::spawn(watch_pod(self.api.clone(), self.settings.clone(), seen_tx));
        let _abort = AbortOnDrop(watcher);
        let mut st = Known::default();
        loop {
            let now = Instant::now();
            let (leading, deadline, token, slot) = {
                let s = self.status.borrow_and_update();
                let leading = s.is_leader_at(now);
                let claim = s.claim.filter(|_| leading);
                let slot = s.slot_at(now);
                (
                    leading,
                    claim.map(|c| c.deadline),
                    claim.map(|c| c.token),
                    slot,
                )
            };
            let desired = match slot.filter(|_| self.settings.slots) {
                Some(slot) => format!("{}@{slot}", self.settings.leader_value),
                None if leading => self.settings.leader_value.clone(),
                None => self.settings.follower_value.clone(),
            };
            let needs_patch = st.applied.as_ref() != Some(&desired);
            // A new tenure clears the others' stale leader labels before its own; a
            // shared holder's does not (other shared holders lead beside it).
            let needs_clear = token.is_some() && st.cleared_for != token && !self.settings.shared;
            if st.guard.as_ref().is_some_and(|(t, _)| Some(*t) != token) {
                st.guard = None;
            }
            // "Clear" only while the Pod is known to carry the follower value and no
            // write is about to change that.
            self.clear.send_replace(!leading && !needs_patch);
            let live = if (needs_patch || needs_clear) && st.retry_at.is_none_or(|t| now >= t) {
                let want = Wanted {
                    value: desired,
                    slot: slot.filter(|_| self.settings.slots),
                    patch: needs_patch,
                    clear: needs_clear,
                    leading,
                    deadline,
                    token,
                };
                self.write_and_learn(&mut st, want).await
            } else {
                self.wait_for_news(&mut st, deadline, &mut seen_rx).await
            };
            if !live {
                return;
            }
        }
    }

    /// One write of the label (and the others' clearing), bounded by the claim's
    /// deadline and the lead; false when the status sender is gone.
    async fn write_and_learn(&self, st: &mut Known, want: Wanted) -> bool {
        // A "true" that has not landed by the deadline must not land later
        // unnoticed: give up on it then (or when the lead is lost before).
        let far = Instant::now() + Duration::from_secs(3600);
        let mut moved_on = self.status.clone();
        let write = self.write(&want, st.applied_rv.clone());
        let outcome = tokio::select! {
            r = write => Some(r),
            () = sleep_until(want.deadline.unwrap_or(far)) => None,
            // (Renewals change the status too; only losing the lead counts.)
            gone = moved_on.wait_for(|s| !s.is_leader_at(Instant::now())), if want.leading => {
                if gone.is_err() {
                    return false;
                }
                None
            }
        };
        match outcome {
            None => {
                // The write may or may not land: the value is unknown now, so the
                // follower value is written next (and the watch reports whatever the
                // Pod carries in the end).
                st.applied = None;
                st.applied_rv = None;
            }
            Some(Ok((written, listed))) => self.written(st, &want, written, listed),
            Some(Err(LabelError::Conflict)) => self.reread_after_conflict(st).await,
            Some(Err(e)) => {
                self.metrics.pod_label_patched("error");
                let wait = st.backoff.next_wait();
                tracing::warn!(
                    error = %e,
                    pod = %self.settings.pod,
                    retry_in_ms = wait.as_millis() as u64,
                    "the pod label update failed"
                );
                st.retry_at = Some(Instant::now() + wait);
            }
        }
        true
    }

    /// A write that went through: the others are cleared for this tenure, a guard
    /// keeps them so, and the Pod shows what was written.
    fn written(&self, st: &mut Known, want: &Wanted, written: Option<Pod>, listed: Option<String>) {
        if want.clear {
            st.cleared_for = want.token;
        }
        if let (Some(t), Some(from)) = (want.token, listed) {
            let task = tokio::spawn(self.clearer(want.slot).guard(from));
            st.guard = Some((t, AbortOnDrop(task)));
        }
        if let Some(pod) = written {
            self.metrics.pod_label_patched("ok");
            tracing::info!(
                pod = %self.settings.pod,
                key = %self.settings.key,
                value = %want.value,
                "labelled the pod"
            );
            let seen = Seen::of(&pod, &self.settings);
            st.applied = seen.value;
            st.applied_rv = seen.rv;
        }
        st.backoff.reset();
        st.retry_at = None;
    }

    /// The Pod changed since we read it (a new leader may have cleared it): read it
    /// again and decide again from the status.
    async fn reread_after_conflict(&self, st: &mut Known) {
        self.metrics.pod_label_patched("conflict");
        tracing::info!(
            pod = %self.settings.pod,
            "the pod changed since it was read; reading it again"
        );
        match self.read().await {
            Ok(pod) => {
                let seen = Seen::of(&pod, &self.settings);
                st.applied = seen.value;
                st.applied_rv = seen.rv;
            }
            Err(e) => {
                let wait = st.backoff.next_wait();
                tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "reading the own pod failed");
                st.retry_at = Some(Instant::now() + wait);
            }
        }
    }

    /// Nothing to write: waits for a status change, the deadline, a retry, or news
    /// of the Pod; false when the status sender is gone.
    async fn wait_for_news(
        &mut self,
        st: &mut Known,
        deadline: Option<Instant>,
        seen_rx: &mut mpsc::Receiver<Seen>,
    ) -> bool {
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            changed = self.status.changed() => return changed.is_ok(),
            () = sleep_until(deadline.unwrap_or(far)) => {}
            () = sleep_until(st.retry_at.unwrap_or(far)) => {
                st.retry_at = None;
            }
            Some(seen) = seen_rx.recv() => self.learn(st, seen),
        }
        true
    }

    /// What the watch of the own Pod reported.
    fn learn(&self, st: &mut Known, seen: Seen) {
        if !st.election_checked {
            st.election_checked = true;
            self.check_election(&seen);
        }
        // An event older than our own last write tells nothing new.
        let mine = st.applied_rv.as_deref().and_then(|v| v.parse::<u64>().ok());
        let newer = match (seen.version(), mine) {
            (Some(v), Some(mine)) => v > mine,
            _ => true,
        };
        if newer {
            if seen.value != st.applied {
                tracing::info!(
                    found = seen.value.as_deref().unwrap_or("<none>"),
                    "the pod label was changed by someone else; correcting it"
                );
            }
            st.applied = seen.value;
            st.applied_rv = seen.rv;
        }
    }

    /// Warns (once) when the own Pod does not carry its election's name: a later leader
    /// could then not find a stale leader label this Pod leaves behind.
    fn check_election(&self, seen: &Seen) {
        let want = &self.settings.election;
        if seen.election.as_deref() != Some(want.as_str()) {
            tracing::warn!(
                pod = %self.settings.pod,
                label = ELECTION_LABEL,
                expected = %want,
                found = seen.election.as_deref().unwrap_or("<none>"),
                "the pod does not carry its election's label; a new leader cannot clear a leader label this pod leaves behind (the chart sets it)"
            );
        }
    }

    /// One label update: for a new tenure, the other Pods' leader labels cleared first;
    /// then our own value, if `patch` (the leader value only over version `rv`). The
    /// Pod as written, when it was, and the version of the list the clearing read.
    async fn write(
        &self,
        want: &Wanted,
        rv: Option<String>,
    ) -> Result<(Option<Pod>, Option<String>), LabelError> {
        let value = want.value.as_str();
        let listed = if want.clear {
            Some(self.clearer(want.slot).clear_listed().await?)
        } else {
            None
        };
        if !want.patch {
            return Ok((None, listed));
        }
        if value.split('@').next() != Some(self.settings.leader_value.as_str()) {
            return Ok((Some(self.patch(value, None).await?), listed));
        }
        let rv = match rv {
            Some(rv) => rv,
            None => self
                .read()
                .await?
                .metadata
                .resource_version
                .ok_or(LabelError::Conflict)?,
        };
        Ok((Some(self.patch(value, Some(&rv)).await?), listed))
    }

    fn clearer(&self, slot: Option<u32>) -> Clearer {
        Clearer {
            slot,
            api: self.api.clone(),
            settings: self.settings.clone(),
            metrics: self.metrics.clone(),
            status: self.status.clone(),
            call_timeout: self.call_timeout,
        }
    }

    async fn read(&self) -> Result<Pod, LabelError> {
        timeout(self.call_timeout, self.api.get(&self.settings.pod))
            .await
            .map_err(|_| LabelError::Timeout)?
            .map_err(LabelError::Read)
    }

    /// A merge patch of our label; with `rv`, only over that version of the Pod.
    async fn patch(&self, value: &str, rv: Option<&str>) -> Result<Pod, LabelError> {
        let (label, slot) = match value.split_once('@') {
            Some((label, slot)) => (label, Some(slot)),
            None => (value, None),
        };
        let mut body = serde_json::json!({
            "metadata": { "labels": { self.settings.key.as_str(): label } }
        });
        if self.settings.slots {
            body["metadata"]["labels"][SLOT_LABEL] =
                slot.map_or(serde_json::Value::Null, Into::into);
        }
        if let Some(rv) = rv {
            body["metadata"]["resourceVersion"] = serde_json::Value::String(rv.to_owned());
        }
        let params = PatchParams::default();
        let patch = Patch::Merge(&body);
        let call = self.api.patch(&self.settings.pod, &params, &patch);
        let pod = match timeout(self.call_timeout, call).await {
            Err(_) => return Err(LabelError::Timeout),
            Ok(Err(e)) if is_conflict(&e) => return Err(LabelError::Conflict),
            Ok(r) => r?,
        };
        // A mutating webhook or policy may strip the label: that is a failure (with
        // backoff), not a success to repeat at once.
        match self.label_of(&pod) {
            Some(v) if v == value => Ok(pod),
            other => Err(LabelError::NotApplied(other)),
        }
    }
}

/// What clears stale leader labels of the other Pods of the election (invariant 12);
/// with several slots, of the other Pods showing the same slot.
struct Clearer {
    slot: Option<u32>,
    api: Api<Pod>,
    settings: PodLabelSettings,
    metrics: Arc<Metrics>,
    status: watch::Receiver<Status>,
    call_timeout: Duration,
}

impl Clearer {
    /// The Pods of the election that show the leader value.
    fn selector(&self) -> String {
        let s = &self.settings;
        let slot = self.slot.map(|i| format!(",{SLOT_LABEL}={i}"));
        format!(
            "{ELECTION_LABEL}={},{}={}{}",
            s.election,
            s.key,
            s.leader_value,
            slot.unwrap_or_default()
        )
    }

    /// Lists the Pods of the election that show the leader value and sets the follower
    /// value on every other one, each only at the version it was listed with. The
    /// list's version (to watch from).
    async fn clear_listed(&self) -> Result<String, LabelError> {
        let params = ListParams::default().labels(&self.selector());
        let pods = timeout(self.call_timeout, self.api.list(&params))
            .await
            .map_err(|_| LabelError::Timeout)?
            .map_err(LabelError::List)?;
        for pod in pods.items {
            self.clear(pod).await?;
        }
        Ok(pods.metadata.resource_version.unwrap_or_default())
    }

    /// Sets the follower value on `pod` (not our own), only over the version seen.
    async fn clear(&self, pod: Pod) -> Result<(), LabelError> {
        let s = &self.settings;
        let (Some(name), Some(rv)) = (pod.metadata.name, pod.metadata.resource_version) else {
            return Ok(());
        };
        if name == s.pod || label_value_of(&pod.metadata.labels, &s.key) != Some(&s.leader_value) {
            return Ok(());
        }
        let mut body = serde_json::json!({
            "metadata": {
                "resourceVersion": rv,
                "labels": { s.key.as_str(): s.follower_value.as_str() },
            }
        });
        if s.slots {
            body["metadata"]["labels"][SLOT_LABEL] = serde_json::Value::Null;
        }
        let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
        let call = self.api.patch(&name, &params, &patch);
        match timeout(self.call_timeout, call)
            .await
            .map_err(|_| LabelError::Timeout)?
        {
            Ok(_) => {
                self.metrics.pod_label_patched("ok");
                tracing::info!(
                    pod = %name,
                    key = %s.key,
                    value = %s.follower_value,
                    "cleared the stale leader label of another pod of the election"
                );
                Ok(())
            }
            // Gone: nothing to clear.
            Err(e) if is_not_found(&e) => Ok(()),
            // Changed since seen (409) or failed: look again.
            Err(e) => Err(LabelError::Clear {
                pod: name,
                source: e,
            }),
        }
    }

    /// While we lead: watches the Pods of the election that show the leader value from
    /// version `from` and clears every other one that comes to show it (a "true" of an
    /// old leader that landed after our clearing). Runs until aborted.
    async fn guard(self, mut from: String) {
        let mut backoff = backoff();
        loop {
            let params = WatchParams::default().labels(&self.selector()).timeout(290);
            let opened = Instant::now();
            let mut events = 0usize;
            match self.api.watch(&params, &from).await {
                Ok(stream) => {
                    let mut stream = std::pin::pin!(stream);
                    while let Some(event) = stream.next().await {
                        events += 1;
                        match event {
                            Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => {
                                from = pod.metadata.resource_version.clone().unwrap_or(from);
                                // Only while the claim lasts: a Pod that shows the leader
                                // value after it is the next leader's.
                                if !self.status.borrow().is_leader_at(Instant::now()) {
                                    continue;
                                }
                                if let Err(e) = self.clear(pod).await {
                                    tracing::warn!(error = %e, "clearing a stale leader label failed; listing again");
                                    break;
                                }
                            }
                            Ok(WatchEvent::Deleted(pod)) => {
                                from = pod.metadata.resource_version.clone().unwrap_or(from);
                            }
                            Ok(WatchEvent::Bookmark(b)) => from = b.metadata.resource_version,
                            Ok(WatchEvent::Error(_)) | Err(_) => break,
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "watching the pods of the election failed"),
            }
            // Ended: quiet ones are reopened at once; otherwise list (and clear) again,
            // which also covers a version too old to watch from (410).
            if events == 0 && opened.elapsed() < Duration::from_secs(10) {
                sleep(backoff.next_wait()).await;
            } else if events > 0 {
                backoff.reset();
            }
            if !self.status.borrow().is_leader_at(Instant::now()) {
                return;
            }
            match self.clear_listed().await {
                Ok(version) => from = version,
                Err(e) => {
                    tracing::warn!(error = %e, "listing the pods of the election failed");
                    sleep(backoff.next_wait()).await;
                }
            }
        }
    }
}

fn label_value_of<'a>(
    labels: &'a Option<std::collections::BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a String> {
    labels.as_ref()?.get(key)
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads the own Pod and watches it, reporting every label value it carries.
async fn watch_pod(api: Api<Pod>, settings: PodLabelSettings, seen: mpsc::Sender<Seen>) {
    let seen_of = |pod: &Pod| Seen::of(pod, &settings);
    let mut backoff = backoff();
    loop {
        let pod = match api.get(&settings.pod).await {
            Ok(pod) => pod,
            Err(e) => {
                tracing::warn!(error = %e, pod = %settings.pod, "reading the own pod failed");
                sleep(backoff.next_wait()).await;
                continue;
            }
        };
        if seen.send(seen_of(&pod)).await.is_err() {
            return;
        }
        let mut version = pod.metadata.resource_version.clone().unwrap_or_default();
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", settings.pod))
            .timeout(290)
            .disable_bookmarks();
        let stream = match api.watch(&params, &version).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, pod = %settings.pod, "watching the own pod failed");
                sleep(backoff.next_wait()).await;
                continue;
            }
        };
        let opened = Instant::now();
        let mut events = 0usize;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => {
                    events += 1;
                    version = pod.metadata.resource_version.clone().unwrap_or_default();
                    if seen.send(seen_of(&pod)).await.is_err() {
                        return;
                    }
                }
                Ok(WatchEvent::Bookmark(_) | WatchEvent::Deleted(_)) => {}
                Ok(WatchEvent::Error(_)) | Err(_) => break,
            }
        }
        tracing::debug!(%version, "the pod watch ended; reading the pod again");
        // A watch that served is a success; one that ended at once without a word
        // (a proxy, a failing server) is retried with backoff, not in a loop.
        if events > 0 || opened.elapsed() >= Duration::from_secs(10) {
            backoff.reset();
        } else {
            sleep(backoff.next_wait()).await;
        }
    }
}
