//! Watches: every change after the resourceVersion asked for (the current state as
//! ADDED first when none is given), then live ones, one JSON event per line, until
//! `timeoutSeconds`, a restart of the fake, or a lagging reader. With a
//! `labelSelector`, an object that comes to match is ADDED, one that stops matching is
//! DELETED, and changes of objects that do not match are not sent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;
use tokio::sync::{broadcast, mpsc, watch};

use super::api::status;
use super::store::{label_selector, labels_match, Change, Requirement, Shared};

/// The objects a watch covers: one kind in one namespace (every one when empty),
/// maybe one name.
#[derive(Clone)]
struct Scope {
    kind: &'static str,
    ns: String,
    only_name: Option<String>,
}

impl Scope {
    fn covers(&self, c: &Change) -> bool {
        self.covers_key(c.kind, &c.key.0, &c.key.1)
    }

    fn covers_key(&self, kind: &str, ns: &str, name: &str) -> bool {
        kind == self.kind
            && (self.ns.is_empty() || ns == self.ns)
            && self.only_name.as_ref().is_none_or(|n| n == name)
    }
}

/// With a label selector, as the real API: ADDED when an object comes to match,
/// DELETED when it stops matching, nothing while it does not match. `matched` holds
/// which objects matched as of the watch's start, then as of the last change sent.
struct Relabel {
    labels: Vec<Requirement>,
    matched: BTreeMap<String, bool>,
}

impl Relabel {
    /// Which objects matched as of resourceVersion `from` (or now).
    fn starting_at(
        shared: &Shared,
        scope: &Scope,
        from: Option<u64>,
        labels: Vec<Requirement>,
    ) -> Relabel {
        let store = shared.store.lock().expect("store");
        let upto = from.unwrap_or(store.version);
        let mut matched = BTreeMap::new();
        for c in store
            .history
            .iter()
            .filter(|c| c.version <= upto && scope.covers(c))
        {
            matched.insert(
                format!("{}/{}", c.key.0, c.key.1),
                c.event != "DELETED" && labels_match(&c.object, &labels),
            );
        }
        Relabel { labels, matched }
    }

    /// The change as this watch sends it, or None when it is not sent.
    fn apply(&mut self, mut c: Change) -> Option<Change> {
        if self.labels.is_empty() {
            return Some(c);
        }
        let now = c.event != "DELETED" && labels_match(&c.object, &self.labels);
        let key = format!("{}/{}", c.key.0, c.key.1);
        let was = self.matched.insert(key, now).unwrap_or(false);
        c.event = match (was, now) {
            (false, true) => "ADDED",
            (true, true) => c.event,
            (true, false) => "DELETED",
            (false, false) => return None,
        };
        Some(c)
    }
}

/// The changes to send before the live ones, and the resourceVersion they reach:
/// those after `from`, or the current state as ADDED when no `from` was given.
fn backlog(shared: &Shared, scope: &Scope, from: Option<u64>) -> (Vec<Change>, u64) {
    let store = shared.store.lock().expect("store");
    match from {
        Some(v) => (
            store
                .history
                .iter()
                .filter(|c| c.version > v && scope.covers(c))
                .cloned()
                .collect::<Vec<_>>(),
            v,
        ),
        None => {
            let current: Vec<Change> = store
                .objects
                .iter()
                .filter(|((k, n, name), _)| scope.covers_key(k, n, name))
                .map(|((k, n, name), obj)| Change {
                    version: obj["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                    kind: k,
                    key: (n.clone(), name.clone()),
                    event: "ADDED",
                    object: obj.clone(),
                    at: std::time::Instant::now(),
                })
                .collect();
            (current, store.version)
        }
    }
}

/// One watch's event stream, fed by its own task.
struct Events {
    scope: Scope,
    relabel: Relabel,
    backlog: Vec<Change>,
    last: u64,
    live: broadcast::Receiver<Change>,
    epoch: watch::Receiver<u64>,
    paused: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    timeout: Duration,
}

impl Events {
    /// Sends one event once the fake is not paused; whether the reader still listens.
    async fn send(&self, c: Change) -> bool {
        let line = Bytes::from(format!(
            "{}\n",
            json!({"type": c.event, "object": c.object})
        ));
        let mut paused = self.paused.clone();
        let _ = paused.wait_for(|p| !*p).await;
        self.tx.send(Ok(line)).await.is_ok()
    }

    /// The backlog, then live changes until the timeout, a restart or a lag.
    async fn run(mut self) {
        let end = tokio::time::Instant::now() + self.timeout;
        for c in std::mem::take(&mut self.backlog) {
            self.last = self.last.max(c.version);
            let Some(c) = self.relabel.apply(c) else {
                continue;
            };
            if !self.send(c).await {
                return;
            }
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(end) => return,
                _ = self.epoch.changed() => return,
                got = self.live.recv() => match got {
                    Ok(c) if c.version > self.last && self.scope.covers(&c) => {
                        self.last = c.version;
                        let Some(c) = self.relabel.apply(c) else { continue };
                        if !self.send(c).await {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}

/// A watch: events after `resourceVersion` (or the current state first), then live ones.
pub(super) fn watch_response(
    shared: Arc<Shared>,
    kind: &'static str,
    ns: &str,
    q: &BTreeMap<String, String>,
) -> Response {
    let only_name = q
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name="))
        .map(str::to_owned);
    let from: Option<u64> = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .filter(|v| *v > 0);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(300));
    let labels = match label_selector(q.get("labelSelector").map_or("", String::as_str)) {
        Ok(l) => l,
        Err(e) => return status(400, "BadRequest", &e),
    };
    let scope = Scope {
        kind,
        ns: ns.to_owned(),
        only_name,
    };
    // Subscribed before the history is read: no change falls in between.
    let live = shared.changes.subscribe();
    let relabel = Relabel::starting_at(&shared, &scope, from, labels);
    let (backlog, last) = backlog(&shared, &scope, from);
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let events = Events {
        scope,
        relabel,
        backlog,
        last,
        live,
        epoch: shared.epoch.subscribe(),
        paused: shared.paused.subscribe(),
        tx,
        timeout,
    };
    tokio::spawn(events.run());
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| status(500, "InternalError", "response"))
}
