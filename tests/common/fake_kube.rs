//! An in-process fake Kubernetes API server (axum), for the parts leasekeeper uses:
//! Pods (get, list, JSON merge patch, watch) and `coordination.k8s.io/v1` Leases (get,
//! list, create, update, merge patch, watch).
//!
//! It enforces what matters, the way the real API server does:
//! - `resourceVersion` is one counter over all objects; an update or patch that names a
//!   resourceVersion other than the current one is refused with 409 Conflict; create
//!   of an existing object is 409 AlreadyExists.
//! - Merge patches follow RFC 7386 (`null` deletes a key); other patch types get 415.
//! - A list answers a `…List` whose `metadata.resourceVersion` is the current value of
//!   the global counter (a consistent read), filtered by `labelSelector` (`k=v`, `k==v`,
//!   `k!=v`, `k`, `!k`, comma = and) and `fieldSelector` (`metadata.name`,
//!   `metadata.namespace`; other fields are 400, as for these kinds in the real API),
//!   at most `limit` items (then with a `continue` token, which this fake does not take).
//! - Watches send every change after the resourceVersion asked for (the ADDED state
//!   first when none is given), one JSON event per line, and end at `timeoutSeconds`;
//!   with a `labelSelector`, an object that comes to match is ADDED, one that stops
//!   matching is DELETED, and changes of objects that do not match are not sent.
//! - A bearer token is required (401), and only what the chart's Role allows is
//!   allowed (403), in one namespace: the rules are read from `manifests/02-role.yaml`
//!   (the chart's default render), so the tests exercise the RBAC users install.
//!   Refused requests are counted, so tests can assert none were needed.
//! - Faults: latency on every request, the next N requests failing with a status,
//!   one request held back (the next one matching a method and path, as a slow network
//!   would deliver it late; it still acts when it arrives), pause (requests and watches
//!   hang until resumed) and restart (watches cut).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};

use super::checker::ServerControl;

pub const TOKEN: &str = "leasekeeper-test-token";

#[derive(Clone, Debug)]
struct Change {
    version: u64,
    kind: &'static str,
    key: (String, String),
    event: &'static str,
    object: Value,
}

#[derive(Default)]
struct Store {
    version: u64,
    /// Lease name → the recorder fed with each write of that Lease's holder.
    lease_recorders: Vec<(String, super::recorder::RecordSink)>,
    /// (kind, namespace, name) → object.
    objects: BTreeMap<(&'static str, String, String), Value>,
    history: Vec<Change>,
    fail_next: Vec<u16>,
    latency: Duration,
    /// Requests by "verb resource", and refusals.
    requests: BTreeMap<String, usize>,
    forbidden: Vec<String>,
    /// Updates that named no resourceVersion (unconditional writes).
    blind_writes: usize,
    /// Label values each pod carried, in order: (pod, value).
    label_history: Vec<(String, Option<String>)>,
    label_key: String,
    /// The next request with this method whose path ends with this suffix waits this long.
    hold_next: Option<(Method, String, Duration)>,
    /// Held requests: (arrived, handled with this status).
    held: Vec<Option<u16>>,
}

struct Shared {
    store: Mutex<Store>,
    /// (resource, verb) pairs the Role grants.
    granted: Vec<(String, String)>,
    changes: broadcast::Sender<Change>,
    paused: watch::Sender<bool>,
    epoch: watch::Sender<u64>,
    namespace: String,
}

pub struct FakeKube {
    shared: Arc<Shared>,
    pub port: u16,
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeKube {
    /// Serves namespace `namespace` on a free loopback port.
    pub fn start(namespace: &str) -> FakeKube {
        let (changes, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store {
                lease_recorders: Vec::new(),
                label_key: "leasekeeper.io/leader".to_owned(),
                ..Store::default()
            }),
            changes,
            paused: watch::channel(false).0,
            epoch: watch::channel(0).0,
            namespace: namespace.to_owned(),
            granted: role_rules(),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                // Like Go's net package (the real API server), no Nagle delays.
                let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                let app = axum::Router::new().fallback(move |m, u, h, b| {
                    let state = state.clone();
                    async move { handle(state, m, u, h, b).await }
                });
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
            rt.shutdown_timeout(Duration::from_millis(100));
        });
        let dir = tempfile::tempdir().expect("dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: leasekeeper\n  user:\n    token: {TOKEN}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: leasekeeper\n    namespace: {namespace}\ncurrent-context: fake\n"
            ),
        )
        .expect("kubeconfig");
        FakeKube {
            shared,
            port,
            _dir: dir,
            kubeconfig,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn kubeconfig(&self) -> String {
        self.kubeconfig.display().to_string()
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.shared.store.lock().expect("store")
    }

    /// Creates a Pod with these labels.
    pub fn add_pod(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect();
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.shared.namespace, "labels": labels},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]},
        });
        let mut store = self.store();
        let ns = self.shared.namespace.clone();
        write(&self.shared, &mut store, "pods", &ns, name, pod, "ADDED");
    }

    /// The current value of a Pod's label.
    pub fn pod_label(&self, pod: &str, key: &str) -> Option<String> {
        let store = self.store();
        let obj = store
            .objects
            .get(&("pods", self.shared.namespace.clone(), pod.to_owned()))?;
        obj["metadata"]["labels"][key].as_str().map(str::to_owned)
    }

    /// Sets a Pod's label as another client would (a merge patch of its own).
    pub fn set_pod_label(&self, pod: &str, key: &str, value: &str) {
        let ns = self.shared.namespace.clone();
        let mut store = self.store();
        let mut obj = store
            .objects
            .get(&("pods", ns.clone(), pod.to_owned()))
            .cloned()
            .expect("pod");
        merge(&mut obj, &json!({"metadata": {"labels": {key: value}}}));
        write(&self.shared, &mut store, "pods", &ns, pod, obj, "MODIFIED");
    }

    /// Every label value each Pod carried, in order.
    pub fn label_history(&self) -> Vec<(String, Option<String>)> {
        self.store().label_history.clone()
    }

    /// The Lease named `name`, as stored.
    pub fn lease(&self, name: &str) -> Option<Value> {
        self.store()
            .objects
            .get(&("leases", self.shared.namespace.clone(), name.to_owned()))
            .cloned()
    }

    /// Writes a Lease spec as another client (client-go, say) would, through the store.
    pub fn put_lease_spec(&self, name: &str, spec: Value) {
        let ns = self.shared.namespace.clone();
        let mut store = self.store();
        let (obj, event) = match store
            .objects
            .get(&("leases", ns.clone(), name.to_owned()))
            .cloned()
        {
            Some(mut obj) => {
                obj["spec"] = spec;
                (obj, "MODIFIED")
            }
            None => (
                json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": spec,
                }),
                "ADDED",
            ),
        };
        write(&self.shared, &mut store, "leases", &ns, name, obj, event);
    }

    /// Deletes a Lease as an administrator would (`kubectl delete lease`).
    pub fn delete_lease(&self, name: &str) {
        let ns = self.shared.namespace.clone();
        let mut store = self.store();
        let Some(mut obj) = store
            .objects
            .remove(&("leases", ns.clone(), name.to_owned()))
        else {
            return;
        };
        store.version += 1;
        let version = store.version;
        obj["metadata"]["resourceVersion"] = Value::String(version.to_string());
        note_lease(&store, name, None);
        let change = Change {
            version,
            kind: "leases",
            key: (ns, name.to_owned()),
            event: "DELETED",
            object: obj,
        };
        store.history.push(change.clone());
        let _ = self.shared.changes.send(change);
    }

    /// A store recorder for Lease `name`: every write of it, noted as it is made.
    pub fn lease_recorder(&self, name: &str) -> super::recorder::Recorder {
        let (recorder, sink) = super::recorder::Recorder::fed();
        self.store().lease_recorders.push((name.to_owned(), sink));
        recorder
    }

    /// Every write so far, in order: (resourceVersion, kind, name, object).
    pub fn changes(&self) -> Vec<(u64, &'static str, String, Value)> {
        self.store()
            .history
            .iter()
            .map(|c| (c.version, c.kind, c.key.1.clone(), c.object.clone()))
            .collect()
    }

    /// Every request served so far, by "verb resource".
    pub fn requests(&self) -> BTreeMap<String, usize> {
        self.store().requests.clone()
    }

    /// The (resource, verb) pairs the Role grants.
    pub fn granted(&self) -> Vec<(String, String)> {
        self.shared.granted.clone()
    }

    /// Requests refused with 403.
    pub fn forbidden(&self) -> Vec<String> {
        self.store().forbidden.clone()
    }

    /// Updates that named no resourceVersion.
    pub fn blind_writes(&self) -> usize {
        self.store().blind_writes
    }

    /// Every request waits this long before it is handled.
    pub fn set_latency(&self, latency: Duration) {
        self.store().latency = latency;
    }

    /// The next requests fail with these status codes, one each.
    pub fn fail_next(&self, codes: &[u16]) {
        self.store().fail_next.extend_from_slice(codes);
    }

    /// The next request with `method` whose path ends with `path_suffix` is held back for
    /// `delay` after it arrived (a slow network), then acted on as any other request.
    pub fn hold_next(&self, method: &str, path_suffix: &str, delay: Duration) {
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        self.store().hold_next = Some((method, path_suffix.to_owned(), delay));
    }

    /// Requests held back so far: `None` while one is still waiting, else its status.
    pub fn held(&self) -> Vec<Option<u16>> {
        self.store().held.clone()
    }
}

impl ServerControl for FakeKube {
    fn pause(&mut self) {
        self.shared.paused.send_replace(true);
    }

    fn resume(&mut self) {
        self.shared.paused.send_replace(false);
    }

    /// The API server restarts: its store (etcd) keeps the objects, every watch is cut.
    fn restart(&mut self) {
        self.shared.epoch.send_modify(|e| *e += 1);
        self.shared.paused.send_replace(false);
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.shared.paused.send_replace(false);
        self.shared.epoch.send_modify(|e| *e += 1);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The (resource, verb) pairs of the chart's Role, as `kubectl apply -f manifests/` (and
/// `helm install` with default values) creates it.
fn role_rules() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/02-role.yaml");
    let text = std::fs::read_to_string(path).expect("manifests/02-role.yaml");
    let role: Value = serde_yaml_ng::from_str(&text).expect("the Role is YAML");
    assert_eq!(role["kind"], "Role", "manifests/02-role.yaml is not a Role");
    let mut granted = Vec::new();
    for rule in role["rules"].as_array().expect("rules") {
        let group = rule["apiGroups"][0].as_str().unwrap_or("");
        for resource in rule["resources"].as_array().expect("resources") {
            let resource = resource.as_str().expect("resource");
            // This fake serves pods in the core group and leases in coordination.k8s.io.
            let served = matches!(
                (group, resource),
                ("", "pods") | ("coordination.k8s.io", "leases")
            );
            if !served {
                continue;
            }
            for verb in rule["verbs"].as_array().expect("verbs") {
                granted.push((resource.to_owned(), verb.as_str().expect("verb").to_owned()));
            }
        }
    }
    granted
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            let Some(t) = target.as_object_mut() else {
                return;
            };
            for (k, v) in fields {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Tells the Lease's recorders who holds it now: `holderIdentity` with the
/// `leaseTransitions` it carries as token (none when deleted or released).
fn note_lease(store: &Store, name: &str, lease: Option<&Value>) {
    let holder = lease.and_then(|l| {
        let identity = l["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())?;
        Some(super::recorder::Tenure {
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
fn write(
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
    obj["metadata"]["namespace"] = Value::String(ns.to_owned());
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
    };
    store.history.push(change.clone());
    let _ = shared.changes.send(change);
    obj
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(obj: &Value, code: StatusCode) -> Response {
    (
        code,
        [("content-type", "application/json")],
        obj.to_string(),
    )
        .into_response()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

async fn handle(
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // A paused server answers nothing until resumed.
    let mut paused = shared.paused.subscribe();
    let _ = paused.wait_for(|p| !*p).await;
    let latency = shared.store.lock().expect("store").latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let authorized = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {TOKEN}"));
    if !authorized {
        return status(401, "Unauthorized", "no valid bearer token");
    }
    let segments: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let (kind, ns, name): (&'static str, &str, Option<&str>) = match segments.as_slice() {
        ["api", "v1", "namespaces", ns, "pods"] => ("pods", ns, None),
        ["api", "v1", "namespaces", ns, "pods", name] => ("pods", ns, Some(name)),
        ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases"] => ("leases", ns, None),
        ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", name] => {
            ("leases", ns, Some(name))
        }
        _ => return status(404, "NotFound", &format!("no route {}", uri.path())),
    };
    let q = query(&uri);
    let watching = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (&method, name, watching) {
        (&Method::GET, Some(_), _) => "get",
        (&Method::GET, None, true) => "watch",
        (&Method::GET, None, false) => "list",
        (&Method::POST, None, _) => "create",
        (&Method::PUT, Some(_), _) => "update",
        (&Method::PATCH, Some(_), _) => "patch",
        (&Method::DELETE, _, _) => "delete",
        _ => return status(405, "MethodNotAllowed", "method not allowed"),
    };
    // The chart's Role, and nothing else.
    let allowed = ns == shared.namespace
        && shared
            .granted
            .iter()
            .any(|(resource, granted)| resource == kind && granted == verb);
    {
        let mut store = shared.store.lock().expect("store");
        *store.requests.entry(format!("{verb} {kind}")).or_default() += 1;
        if !allowed {
            store.forbidden.push(format!("{verb} {kind} in {ns}"));
            drop(store);
            return status(
                403,
                "Forbidden",
                &format!("{verb} {kind} in namespace {ns} is not allowed"),
            );
        }
        if !store.fail_next.is_empty() {
            let code = store.fail_next.remove(0);
            return status(code, "InternalError", "injected failure");
        }
    }
    if verb == "watch" {
        return watch_response(shared, kind, ns, &q);
    }
    let hold = {
        let mut store = shared.store.lock().expect("store");
        let hit = store
            .hold_next
            .as_ref()
            .is_some_and(|(m, suffix, _)| *m == method && uri.path().ends_with(suffix.as_str()));
        match store.hold_next.take() {
            Some((_, _, delay)) if hit => {
                store.held.push(None);
                Some((store.held.len() - 1, delay))
            }
            other => {
                store.hold_next = other;
                None
            }
        }
    };
    if let Some((index, delay)) = hold {
        // Acted on even if the client gives up meanwhile: the request is on the wire.
        let shared = shared.clone();
        let (ns, name) = (ns.to_owned(), name.map(str::to_owned));
        let task = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let response = serve(
                &shared,
                kind,
                &ns,
                name.as_deref(),
                verb,
                &q,
                &headers,
                &body,
            );
            let code = response.status().as_u16();
            shared.store.lock().expect("store").held[index] = Some(code);
            response
        });
        return task
            .await
            .unwrap_or_else(|_| status(500, "InternalError", "held request"));
    }
    serve(&shared, kind, ns, name, verb, &q, &headers, &body)
}

/// Acts on one request that passed the checks.
#[allow(clippy::too_many_arguments)]
fn serve(
    shared: &Shared,
    kind: &'static str,
    ns: &str,
    name: Option<&str>,
    verb: &'static str,
    q: &BTreeMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let parsed: Option<Value> = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice(body) {
            Ok(v) => Some(v),
            Err(e) => return status(400, "BadRequest", &format!("bad JSON: {e}")),
        }
    };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut store = shared.store.lock().expect("store");
    let name_of = |v: &Value| v["metadata"]["name"].as_str().map(str::to_owned);
    match verb {
        "list" => list(&store, kind, ns, q),
        "get" => {
            let name = name.unwrap_or_default();
            match store.objects.get(&(kind, ns.to_owned(), name.to_owned())) {
                Some(obj) => ok(obj, StatusCode::OK),
                None => status(404, "NotFound", &format!("{kind} {name:?} not found")),
            }
        }
        "create" => {
            let Some(obj) = parsed else {
                return status(400, "BadRequest", "no body");
            };
            let Some(name) = name_of(&obj) else {
                return status(422, "Invalid", "metadata.name is required");
            };
            if store
                .objects
                .contains_key(&(kind, ns.to_owned(), name.clone()))
            {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("{kind} {name:?} already exists"),
                );
            }
            let stored = write(shared, &mut store, kind, ns, &name, obj, "ADDED");
            ok(&stored, StatusCode::CREATED)
        }
        "update" => {
            let name = name.unwrap_or_default().to_owned();
            let Some(obj) = parsed else {
                return status(400, "BadRequest", "no body");
            };
            let Some(current) = store
                .objects
                .get(&(kind, ns.to_owned(), name.clone()))
                .cloned()
            else {
                return status(404, "NotFound", &format!("{kind} {name:?} not found"));
            };
            match obj["metadata"]["resourceVersion"].as_str() {
                None | Some("") => store.blind_writes += 1,
                Some(v) if Some(v) != current["metadata"]["resourceVersion"].as_str() => {
                    return status(
                        409,
                        "Conflict",
                        &format!(
                            "Operation cannot be fulfilled on {kind} {name:?}: the object has been modified; please apply your changes to the latest version and try again"
                        ),
                    )
                }
                Some(_) => {}
            }
            let mut obj = obj;
            obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
            obj["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"].clone();
            let stored = write(shared, &mut store, kind, ns, &name, obj, "MODIFIED");
            ok(&stored, StatusCode::OK)
        }
        "patch" => {
            let name = name.unwrap_or_default().to_owned();
            if !content_type.starts_with("application/merge-patch+json") {
                return status(
                    415,
                    "UnsupportedMediaType",
                    &format!("only merge patches here, not {content_type:?}"),
                );
            }
            let Some(patch) = parsed else {
                return status(400, "BadRequest", "no body");
            };
            let Some(mut current) = store
                .objects
                .get(&(kind, ns.to_owned(), name.clone()))
                .cloned()
            else {
                return status(404, "NotFound", &format!("{kind} {name:?} not found"));
            };
            if let Some(v) = patch["metadata"]["resourceVersion"].as_str() {
                if Some(v) != current["metadata"]["resourceVersion"].as_str() {
                    return status(409, "Conflict", "the object has been modified");
                }
            }
            merge(&mut current, &patch);
            let stored = write(shared, &mut store, kind, ns, &name, current, "MODIFIED");
            ok(&stored, StatusCode::OK)
        }
        _ => status(405, "MethodNotAllowed", "not supported"),
    }
}

/// One requirement of a label selector.
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// Parses `k=v,k==v,k!=v,k,!k` (what the sidecar and kubectl send; set-based forms are
/// refused with 400 rather than misread).
fn label_selector(raw: &str) -> Result<Vec<Requirement>, String> {
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

fn labels_match(obj: &Value, reqs: &[Requirement]) -> bool {
    let label = |k: &str| obj["metadata"]["labels"][k].as_str();
    reqs.iter().all(|r| match r {
        Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
        Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
        Requirement::Exists(k) => label(k).is_some(),
        Requirement::Absent(k) => label(k).is_none(),
    })
}

/// A list: the matching objects, at the current global resourceVersion.
fn list(store: &Store, kind: &'static str, ns: &str, q: &BTreeMap<String, String>) -> Response {
    let labels = match label_selector(q.get("labelSelector").map_or("", String::as_str)) {
        Ok(l) => l,
        Err(e) => return status(400, "BadRequest", &e),
    };
    let mut fields = Vec::new();
    for part in q
        .get("fieldSelector")
        .map_or("", String::as_str)
        .split(',')
        .filter(|p| !p.is_empty())
    {
        match part.split_once('=') {
            Some((f @ ("metadata.name" | "metadata.namespace"), v)) => {
                fields.push((f.to_owned(), v.to_owned()));
            }
            _ => {
                return status(
                    400,
                    "BadRequest",
                    &format!("field label not supported: {part}"),
                )
            }
        }
    }
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => usize::MAX,
        Some(Ok(0)) => usize::MAX,
        Some(Ok(l)) => l,
        Some(Err(_)) => return status(400, "BadRequest", "limit is not a number"),
    };
    if q.get("continue").is_some_and(|c| !c.is_empty()) {
        return status(400, "BadRequest", "this fake does not continue lists");
    }
    let matching: Vec<Value> = store
        .objects
        .iter()
        .filter(|((k, n, _), _)| *k == kind && n == ns)
        .map(|(_, obj)| obj)
        .filter(|obj| labels_match(obj, &labels))
        .filter(|obj| {
            fields
                .iter()
                .all(|(f, v)| obj["metadata"][&f["metadata.".len()..]].as_str() == Some(v.as_str()))
        })
        .cloned()
        .collect();
    let more = matching.len() > limit;
    let items: Vec<Value> = matching.into_iter().take(limit).collect();
    let (api_version, list_kind) = match kind {
        "pods" => ("v1", "PodList"),
        _ => ("coordination.k8s.io/v1", "LeaseList"),
    };
    let mut metadata = json!({"resourceVersion": store.version.to_string()});
    if more {
        metadata["continue"] = Value::String(format!("fake-continue-{}", store.version));
    }
    ok(
        &json!({"apiVersion": api_version, "kind": list_kind, "metadata": metadata, "items": items}),
        StatusCode::OK,
    )
}

/// A watch: events after `resourceVersion` (or the current state first), then live ones.
fn watch_response(
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
    let ns = ns.to_owned();
    let matches = move |c: &Change| {
        c.kind == kind && c.key.0 == ns && only_name.as_ref().is_none_or(|n| *n == c.key.1)
    };
    let mut live = shared.changes.subscribe();
    // With a label selector, as the real API: ADDED when an object comes to match,
    // DELETED when it stops matching, nothing while it does not match. `matched` holds
    // which objects matched as of the watch's start.
    let mut matched: BTreeMap<String, bool> = {
        let store = shared.store.lock().expect("store");
        let upto = from.unwrap_or(store.version);
        let mut m = BTreeMap::new();
        for c in store
            .history
            .iter()
            .filter(|c| c.version <= upto && matches(c))
        {
            m.insert(
                c.key.1.clone(),
                c.event != "DELETED" && labels_match(&c.object, &labels),
            );
        }
        m
    };
    let filtered = !labels.is_empty();
    let mut relabel = move |mut c: Change| -> Option<Change> {
        if !filtered {
            return Some(c);
        }
        let now = c.event != "DELETED" && labels_match(&c.object, &labels);
        let was = matched.insert(c.key.1.clone(), now).unwrap_or(false);
        c.event = match (was, now) {
            (false, true) => "ADDED",
            (true, true) => c.event,
            (true, false) => "DELETED",
            (false, false) => return None,
        };
        Some(c)
    };
    let (backlog, mut last) = {
        let store = shared.store.lock().expect("store");
        match from {
            Some(v) => (
                store
                    .history
                    .iter()
                    .filter(|c| c.version > v && matches(c))
                    .cloned()
                    .collect::<Vec<_>>(),
                v,
            ),
            None => {
                let current: Vec<Change> = store
                    .objects
                    .iter()
                    .filter(|((k, n, name), _)| {
                        let c = Change {
                            version: 0,
                            kind: k,
                            key: (n.clone(), name.clone()),
                            event: "ADDED",
                            object: Value::Null,
                        };
                        matches(&c)
                    })
                    .map(|((k, n, name), obj)| Change {
                        version: obj["metadata"]["resourceVersion"]
                            .as_str()
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0),
                        kind: k,
                        key: (n.clone(), name.clone()),
                        event: "ADDED",
                        object: obj.clone(),
                    })
                    .collect();
                (current, store.version)
            }
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let mut epoch = shared.epoch.subscribe();
    let paused = shared.paused.subscribe();
    tokio::spawn(async move {
        let end = tokio::time::Instant::now() + timeout;
        let line = |c: &Change| {
            Bytes::from(format!(
                "{}\n",
                json!({"type": c.event, "object": c.object})
            ))
        };
        let send = |c: Change| {
            let tx = tx.clone();
            let mut paused = paused.clone();
            async move {
                let _ = paused.wait_for(|p| !*p).await;
                tx.send(Ok(line(&c))).await.is_ok()
            }
        };
        for c in backlog {
            last = last.max(c.version);
            let Some(c) = relabel(c) else { continue };
            if !send(c).await {
                return;
            }
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(end) => return,
                _ = epoch.changed() => return,
                got = live.recv() => match got {
                    Ok(c) if c.version > last && matches(&c) => {
                        last = c.version;
                        let Some(c) = relabel(c) else { continue };
                        if !send(c).await {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| status(500, "InternalError", "response"))
}
