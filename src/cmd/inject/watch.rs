//! The watch for missed injections: a list, then a watch, of every Pod, fed to
//! `inject::missed::Missed`; the metrics follow its counts, and each Pod it notices
//! gets one Warning Event `LeasekeeperNotInjected`, written by a task of its own so
//! that a slow API never holds the watch up. The Event's name is derived from the
//! Pod's uid, so an injector that restarts and sees the Pod again gets 409 from the
//! API instead of writing a second Event.

use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::inject::metrics::InjectorMetrics;
use crate::inject::missed::{event_name, Missed, Notice, PodView, EVENT_MESSAGE, EVENT_REASON};

/// How long one watch request lasts before it is renewed (the API server's limit is
/// longer; a renewal is cheap and proves the connection).
const WATCH_SECONDS: u32 = 290;
/// One Event write's time limit.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const COMPONENT: &str = "leasekeeper-injector";

/// Runs for as long as the injector does.
pub async fn run(client: kube::Client, metrics: Arc<InjectorMetrics>) {
    let (notices, queue) = mpsc::channel(1024);
    tokio::spawn(write_events(client.clone(), queue, metrics.clone()));
    let pods: Api<Pod> = Api::all(client);
    let mut missed = Missed::default();
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        match watch_once(&pods, &mut missed, &metrics, &notices).await {
            Ok(()) => backoff.reset(),
            Err(e) => {
                let wait = backoff.next_wait();
                tracing::warn!("watching Pods for missed injections: {e}; again in {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One list and the watches that follow it, until the API says the list is too old
/// (410) or a request fails.
async fn watch_once(
    pods: &Api<Pod>,
    missed: &mut Missed,
    metrics: &InjectorMetrics,
    notices: &mpsc::Sender<Notice>,
) -> Result<(), kube::Error> {
    let list = pods.list(&ListParams::default()).await?;
    let views: Vec<PodView> = list.items.iter().map(view).collect();
    for notice in missed.relist(&views) {
        send(notices, notice, metrics);
    }
    metrics.missed(missed.current(), missed.total());
    let mut version = list.metadata.resource_version.unwrap_or_default();
    loop {
        let params = WatchParams::default().timeout(WATCH_SECONDS);
        let stream = pods.watch(&params, &version).await?;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.try_next().await? {
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                    version = pod.metadata.resource_version.clone().unwrap_or(version);
                    if let Some(notice) = missed.observe(&view(&pod)) {
                        send(notices, notice, metrics);
                    }
                }
                WatchEvent::Deleted(pod) => {
                    version = pod.metadata.resource_version.clone().unwrap_or(version);
                    missed.forget(&view(&pod));
                }
                WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                // 410 Gone: the version is too old to watch from; list again.
                WatchEvent::Error(e) if e.code == 410 => return Ok(()),
                WatchEvent::Error(e) => return Err(kube::Error::Api(e)),
            }
            metrics.missed(missed.current(), missed.total());
        }
    }
}

fn view(pod: &Pod) -> PodView {
    PodView::of(&serde_json::to_value(pod).unwrap_or_default())
}

fn send(notices: &mpsc::Sender<Notice>, notice: Notice, metrics: &InjectorMetrics) {
    tracing::warn!(pod = %format!("{}/{}", notice.namespace, notice.name), "{EVENT_MESSAGE}");
    if notices.try_send(notice).is_err() {
        metrics.missed_event(false);
    }
}

/// Writes one Warning Event per notice.
async fn write_events(
    client: kube::Client,
    mut queue: mpsc::Receiver<Notice>,
    metrics: Arc<InjectorMetrics>,
) {
    let instance = std::env::var("POD_NAME").unwrap_or_else(|_| COMPONENT.to_owned());
    while let Some(notice) = queue.recv().await {
        let events: Api<Event> = Api::namespaced(client.clone(), &notice.namespace);
        let event = warning(&notice, &instance);
        let written =
            tokio::time::timeout(WRITE_TIMEOUT, events.create(&PostParams::default(), &event))
                .await;
        match written {
            Ok(Ok(_)) => metrics.missed_event(true),
            // Written before (by an earlier run of the injector): once per Pod.
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {}
            Ok(Err(e)) => {
                metrics.missed_event(false);
                tracing::warn!(pod = %notice.name, namespace = %notice.namespace, "cannot record the Event: {e}");
            }
            Err(_) => {
                metrics.missed_event(false);
                tracing::warn!(pod = %notice.name, namespace = %notice.namespace, "cannot record the Event: no answer within {WRITE_TIMEOUT:?}");
            }
        }
    }
}

fn warning(notice: &Notice, instance: &str) -> Event {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(&notice.name, &notice.uid)),
            namespace: Some(notice.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: Some(notice.name.clone()),
            namespace: Some(notice.namespace.clone()),
            uid: Some(notice.uid.clone()),
            ..ObjectReference::default()
        },
        reason: Some(EVENT_REASON.to_owned()),
        message: Some(EVENT_MESSAGE.to_owned()),
        type_: Some("Warning".to_owned()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(EventSource {
            component: Some(COMPONENT.to_owned()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        ..Event::default()
    }
}
