//! The fake's store: every object under one global resourceVersion counter, the
//! history of changes the watches replay, the counters and switches the tests read and
//! set, and label selectors over stored objects.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use axum::http::Method;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

#[derive(Clone, Debug)]
pub(super) struct Change {
    pub(super) version: u64,
    pub(super) kind: &'static str,
    pub(super) key: (String, String),
    pub(super) event: &'static str,
    pub(super) object: Value,
    /// When the fake made the change.
    pub(super) at: std::time::Instant,
}

#[derive(Default)]
pub(super) struct Store {
    pub(super) version: u64,
    /// Lease name → the recorder fed with each write of that Lease's holder.
    pub(super) lease_recorders: Vec<(String, crate::common::harness::recorder::RecordSink)>,
    /// (kind, namespace, name) → object.
    pub(super) objects: BTreeMap<(&'static str, String, String), Value>,
    pub(super) history: Vec<Change>,
    pub(super) fail_next: Vec<u16>,
    pub(super) latency: Duration,
    /// Requests by "verb resource", and refusals.
    pub(super) requests: BTreeMap<String, usize>,
    pub(super) forbidden: Vec<String>,
    /// Updates that named no resourceVersion (unconditional writes).
    pub(super) blind_writes: usize,
    /// Label values each pod carried, in order: (pod, value).
    pub(super) label_history: Vec<(String, Option<String>)>,
    pub(super) label_key: String,
    /// The next request with this method whose path ends with this suffix waits this long.
    pub(super) hold_next: Option<(Method, String, Duration)>,
    /// Held requests: (arrived, handled with this status).
    pub(super) held: Vec<Option<u16>>,
    /// What `/version` answers: (major, minor).
    pub(super) version_info: (String, String),
}

pub(super) struct Shared {
    pub(super) store: Mutex<Store>,
    /// (resource, verb) pairs the Role grants.
    pub(super) granted: Vec<(String, String)>,
    pub(super) changes: broadcast::Sender<Change>,
    pub(super) paused: watch::Sender<bool>,
    pub(super) epoch: watch::Sender<u64>,
    pub(super) namespace: String,
    /// Whether `coordination.k8s.io/v1beta1` (LeaseCandidates) is served; off, as on
    /// clusters before 1.33 or without that API enabled, its paths answer 404.
    pub(super) lease_candidates_served: std::sync::atomic::AtomicBool,
    /// The `CoordinatedLeaderElection` feature gate (off by default up to 1.36).
    pub(super) coordinated: std::sync::atomic::AtomicBool,
    /// The coordinator met a Lease that crashes the real one (see `coordinator`).
    pub(super) coordinator_crashed: std::sync::atomic::AtomicBool,
    /// TLS connections accepted (their handshake done) on the HTTPS port.
    pub(super) tls_connections: std::sync::atomic::AtomicUsize,
}

/// Tells the Lease's recorders who holds it now: `holderIdentity` with the
/// `leaseTransitions` it carries as token (none when deleted or released).
pub(super) fn note_lease(store: &Store, name: &str, lease: Option<&Value>) {
    let holder = lease.and_then(|l| {
        let identity = l["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())?;
        Some(crate::common::harness::recorder::Tenure {
            identity: identity.to_owned(),
            token: l["spec"]["leaseTransitions"].as_u64().unwrap_or(0),
        })
    });
    for (lease_name, sink) in &store.lease_recorders {
        if lease_name == name {
            sink.note(holder.clone());
        }
    }
}

/// Stores `obj` under a new resourceVersion and tells the watchers.
pub(super) fn write(
    shared: &Shared,
    store: &mut Store,
    kind: &'static str,
    ns: &str,
    name: &str,
    mut obj: Value,
    event: &'static str,
) -> Value {
    store.version += 1;
    let version = store.version;
    obj["metadata"]["resourceVersion"] = Value::String(version.to_string());
    if !ns.is_empty() {
        obj["metadata"]["namespace"] = Value::String(ns.to_owned());
    }
    obj["metadata"]["name"] = Value::String(name.to_owned());
    if obj["metadata"]["uid"].is_null() {
        obj["metadata"]["uid"] = Value::String(format!("uid-{kind}-{name}-{version}"));
        obj["metadata"]["creationTimestamp"] = Value::String("2026-11-22T00:00:00Z".to_owned());
    }
    if kind == "leases" {
        note_lease(store, name, Some(&obj));
    }
    if kind == "pods" {
        let key = store.label_key.clone();
        let value = obj["metadata"]["labels"][&key].as_str().map(str::to_owned);
        store.label_history.push((name.to_owned(), value));
    }
    store
        .objects
        .insert((kind, ns.to_owned(), name.to_owned()), obj.clone());
    let change = Change {
        version,
        kind,
        key: (ns.to_owned(), name.to_owned()),
        event,
        object: obj.clone(),
        at: std::time::Instant::now(),
    };
    store.history.push(change.clone());
    let _ = shared.changes.send(change);
    obj
}

/// Deletes `kind/ns/name` under a new resourceVersion and tells the watchers; the
/// object as deleted, or `None` when there was none.
pub(super) fn remove(
    shared: &Shared,
    store: &mut Store,
    kind: &'static str,
    ns: &str,
    name: &str,
) -> Option<Value> {
    let mut obj = store
        .objects
        .remove(&(kind, ns.to_owned(), name.to_owned()))?;
    store.version += 1;
    let version = store.version;
    obj["metadata"]["resourceVersion"] = Value::String(version.to_string());
    if kind == "leases" {
        note_lease(store, name, None);
    }
    let change = Change {
        version,
        kind,
        key: (ns.to_owned(), name.to_owned()),
        event: "DELETED",
        object: obj.clone(),
        at: std::time::Instant::now(),
    };
    store.history.push(change.clone());
    let _ = shared.changes.send(change);
    Some(obj)
}

/// One requirement of a label selector.
pub(super) enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// Parses `k=v,k==v,k!=v,k,!k` (what the sidecar and kubectl send; set-based forms are
/// refused with 400 rather than misread).
pub(super) fn label_selector(raw: &str) -> Result<Vec<Requirement>, String> {
    let mut out = Vec::new();
    for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        };
        let req = if let Some((k, v)) = part.split_once("!=") {
            Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
        } else if let Some(k) = part.strip_prefix('!') {
            Requirement::Absent(k.trim().to_owned())
        } else {
            Requirement::Exists(part.to_owned())
        };
        let ok = match &req {
            Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => {
                valid(k) && (v.is_empty() || valid(v))
            }
            Requirement::Exists(k) | Requirement::Absent(k) => valid(k),
        };
        if !ok {
            return Err(format!("unable to parse requirement: {part:?}"));
        }
        out.push(req);
    }
    Ok(out)
}

pub(super) fn labels_match(obj: &Value, reqs: &[Requirement]) -> bool {
    let label = |k: &str| obj["metadata"]["labels"][k].as_str();
    reqs.iter().all(|r| match r {
        Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
        Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
        Requirement::Exists(k) => label(k).is_some(),
        Requirement::Absent(k) => label(k).is_none(),
    })
}
