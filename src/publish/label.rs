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

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep, sleep_until, timeout, Instant};

use crate::backoff::Backoff;
use crate::config::PodLabelSettings;
use crate::publish::metrics::Metrics;
use crate::status::Status;

/// What the Pod carries, as read from the API: its resourceVersion and the label value.
/// (resourceVersions are opaque to clients by contract; every API server backed by etcd
/// hands out increasing integers, and when one does not parse, every event counts.)
type Seen = (Option<u64>, Option<String>);

/// A label update that did not take.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("patching the pod: {0}")]
    Api(#[from] kube::Error),
    #[error("patching the pod timed out")]
    Timeout,
    #[error("the API accepted the patch, but the label reads {0:?}")]
    NotApplied(Option<String>),
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

fn version_of(pod: &Pod) -> Option<u64> {
    pod.metadata.resource_version.as_deref()?.parse().ok()
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
        label_value(pod, &self.settings.key)
    }

    /// Runs until the status sender is gone.
    pub async fn run(mut self) {
        let (seen_tx, mut seen_rx) = mpsc::channel::<Seen>(16);
        let watcher = tokio::spawn(watch_pod(self.api.clone(), self.settings.clone(), seen_tx));
        let _abort = AbortOnDrop(watcher);
        // The value the Pod carries as far as we know, and the version that showed it.
        let mut applied: Option<String> = None;
        let mut applied_version: Option<u64> = None;
        let mut backoff = backoff();
        let mut retry_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let (leading, deadline) = {
                let s = self.status.borrow_and_update();
                let leading = s.is_leader_at(now);
                (leading, s.claim.filter(|_| leading).map(|c| c.deadline))
            };
            let desired = if leading {
                self.settings.leader_value.clone()
            } else {
                self.settings.follower_value.clone()
            };
            let needs_patch = applied.as_ref() != Some(&desired);
            // "Clear" only while the Pod is known to carry the follower value and no
            // write is about to change that.
            self.clear.send_replace(!leading && !needs_patch);
            if needs_patch && retry_at.is_none_or(|t| now >= t) {
                // A "true" that has not landed by the deadline must not land later
                // unnoticed: give up on it then (or when the lead is lost before).
                let far = now + Duration::from_secs(3600);
                let mut moved_on = self.status.clone();
                let outcome = tokio::select! {
                    r = self.patch(&desired) => Some(r),
                    () = sleep_until(deadline.unwrap_or(far)) => None,
                    // (Renewals change the status too; only losing the lead counts.)
                    gone = moved_on.wait_for(|s| !s.is_leader_at(Instant::now())), if leading => {
                        if gone.is_err() {
                            return;
                        }
                        None
                    }
                };
                match outcome {
                    None => {
                        // The write may or may not land: the value is unknown now, so
                        // the follower value is written next (and the watch reports
                        // whatever the Pod carries in the end).
                        applied = None;
                        applied_version = None;
                    }
                    Some(Ok(pod)) => {
                        self.metrics.pod_label_patched("ok");
                        tracing::info!(
                            pod = %self.settings.pod,
                            key = %self.settings.key,
                            value = %desired,
                            "labelled the pod"
                        );
                        applied_version = version_of(&pod);
                        applied = self.label_of(&pod);
                        backoff.reset();
                        retry_at = None;
                    }
                    Some(Err(e)) => {
                        self.metrics.pod_label_patched("error");
                        let wait = backoff.next_wait();
                        tracing::warn!(
                            error = %e,
                            pod = %self.settings.pod,
                            retry_in_ms = wait.as_millis() as u64,
                            "the pod label update failed"
                        );
                        retry_at = Some(Instant::now() + wait);
                    }
                }
                continue;
            }
            let far = now + Duration::from_secs(3600);
            tokio::select! {
                changed = self.status.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = sleep_until(deadline.unwrap_or(far)) => {}
                () = sleep_until(retry_at.unwrap_or(far)) => {
                    retry_at = None;
                }
                Some((version, value)) = seen_rx.recv() => {
                    // An event older than our own last write tells nothing new.
                    let newer = match (version, applied_version) {
                        (Some(v), Some(mine)) => v > mine,
                        _ => true,
                    };
                    if newer {
                        if value != applied {
                            tracing::info!(
                                found = value.as_deref().unwrap_or("<none>"),
                                "the pod label was changed by someone else; correcting it"
                            );
                        }
                        applied = value;
                        applied_version = version;
                    }
                }
            }
        }
    }

    async fn patch(&self, value: &str) -> Result<Pod, LabelError> {
        let body = serde_json::json!({
            "metadata": { "labels": { self.settings.key.as_str(): value } }
        });
        let params = PatchParams::default();
        let patch = Patch::Merge(&body);
        let call = self.api.patch(&self.settings.pod, &params, &patch);
        let pod = timeout(self.call_timeout, call)
            .await
            .map_err(|_| LabelError::Timeout)??;
        // A mutating webhook or policy may strip the label: that is a failure (with
        // backoff), not a success to repeat at once.
        match self.label_of(&pod) {
            Some(v) if v == value => Ok(pod),
            other => Err(LabelError::NotApplied(other)),
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads the own Pod and watches it, reporting every label value it carries.
async fn watch_pod(api: Api<Pod>, settings: PodLabelSettings, seen: mpsc::Sender<Seen>) {
    let label = |pod: &Pod| label_value(pod, &settings.key);
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
        if seen.send((version_of(&pod), label(&pod))).await.is_err() {
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
                    if seen.send((version_of(&pod), label(&pod))).await.is_err() {
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
