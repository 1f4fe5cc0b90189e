//! An in-process fake Kubernetes API server (axum), for the parts leasekeeper uses:
//! Pods (get, list, JSON merge patch, watch), core v1 Events (create, merge patch),
//! `coordination.k8s.io/v1` Leases (get, list, create, update, merge patch, watch) and
//! `coordination.k8s.io/v1beta1` LeaseCandidates (the same verbs, with the API's
//! validation: 422 for a missing required field or a changed `leaseName`), with the
//! discovery document of that group version; [`FakeKube::serve_lease_candidates`]
//! turns it off (404, as on clusters before 1.33).
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
//!   (the chart's default render), so the tests exercise the RBAC users install
//!   ([`FakeKube::start_granting_lease_candidates`] adds the rule the chart's template
//!   adds with `leaseCandidate.enabled`). Discovery needs only the token, as the
//!   `system:discovery` ClusterRole grants it to every authenticated user.
//!   Refused requests are counted, so tests can assert none were needed.
//! - Faults: latency on every request, the next N requests failing with a status,
//!   one request held back (the next one matching a method and path, as a slow network
//!   would deliver it late; it still acts when it arrives), pause (requests and watches
//!   hang until resumed) and restart (watches cut).
//!
//! - Mutating admission webhooks are called on Pod creation as kube-apiserver calls
//!   them (`admission`): MutatingWebhookConfigurations, their selectors, the HTTPS call
//!   with its caBundle and timeout, the JSONPatch, `failurePolicy`, and a refusal
//!   passed on as the real server words it. Pods and Events can be listed and watched
//!   in every namespace (`/api/v1/pods`), Namespaces are served (the fake's own exists
//!   without being stored; others are created, and carry `kubernetes.io/metadata.name`)
//!   and `/version` answers 1.33 unless told otherwise.
//! - Three users: the sidecars ([`TOKEN`], the chart's Role, counted), the injector
//!   ([`INJECTOR_TOKEN`], its ClusterRole) and the harness ([`ADMIN_TOKEN`], anything).
//!
//! The code: `store` (the objects, the global resourceVersion, the history, label
//! selectors), `api` (the HTTP routes, users and RBAC, faults, get, list, create,
//! update and merge patch, 409 on a stale resourceVersion), `admission` (webhooks) and
//! `watch` (watches).

mod admission;
mod api;
mod coordinator;
mod lease_rules;
mod store;
mod tls;
mod watch;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::Method;
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch as signal};

use crate::common::checks::checker::ServerControl;
use api::handle;
pub(crate) use api::{chart_role, merge, role_rules};
use store::{remove, write, Shared, Store};

pub const TOKEN: &str = "leasekeeper-test-token";
/// The harness's own user: every request allowed, none counted.
pub const ADMIN_TOKEN: &str = "leasekeeper-admin-token";
/// The injector's user, with the injector's ClusterRole (Pods get, list and watch,
/// Events create, Namespaces get, in every namespace).
pub const INJECTOR_TOKEN: &str = "leasekeeper-injector-token";

pub struct FakeKube {
    shared: Arc<Shared>,
    /// Plain HTTP, for the tests' own raw requests (and the client-go peer of the bench).
    pub port: u16,
    /// HTTPS, as a real API server serves it: the port the kubeconfig names.
    pub tls_port: u16,
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeKube {
    /// Serves namespace `namespace` on a free loopback port, with the Role of the chart's
    /// default values.
    pub fn start(namespace: &str) -> FakeKube {
        FakeKube::start_with(namespace, false, false)
    }

    /// As [`FakeKube::start_granting_lease_candidates`], on an API server with the
    /// `CoordinatedLeaderElection` feature gate on: Leases keep `strategy` and
    /// `preferredHolder` (the latter only with the former: 422), and the API server's
    /// coordinator ([`coordinator`]) elects holders among the LeaseCandidates.
    pub fn start_coordinated(namespace: &str) -> FakeKube {
        FakeKube::start_with(namespace, true, true)
    }

    /// Whether the coordinator met a Lease with `strategy` and no `holderIdentity`, which
    /// crashes kube-apiserver 1.33.3.
    pub fn coordinator_crashed(&self) -> bool {
        self.shared
            .coordinator_crashed
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// As [`FakeKube::start`], with the chart's Role as `leaseCandidate.enabled` renders
    /// it (the leasecandidates rule too).
    pub fn start_granting_lease_candidates(namespace: &str) -> FakeKube {
        FakeKube::start_with(namespace, true, false)
    }

    fn start_with(namespace: &str, lease_candidates: bool, coordinated: bool) -> FakeKube {
        let (changes, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store {
                lease_recorders: Vec::new(),
                label_key: "leasekeeper.io/leader".to_owned(),
                version_info: ("1".to_owned(), "33".to_owned()),
                ..Store::default()
            }),
            changes,
            paused: signal::channel(false).0,
            epoch: signal::channel(0).0,
            namespace: namespace.to_owned(),
            granted: role_rules(lease_candidates),
            lease_candidates_served: std::sync::atomic::AtomicBool::new(true),
            coordinated: std::sync::atomic::AtomicBool::new(coordinated),
            coordinator_crashed: std::sync::atomic::AtomicBool::new(false),
            tls_connections: std::sync::atomic::AtomicUsize::new(0),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let tls_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        tls_listener.set_nonblocking(true).expect("nonblocking");
        let tls_port = tls_listener.local_addr().expect("addr").port();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let state_for_coordinator = shared.clone();
        let state_for_tls = shared.clone();
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
                let tls_listener =
                    tokio::net::TcpListener::from_std(tls_listener).expect("listener");
                let tls_listener = tls::TlsListener::new(tls_listener, state_for_tls);
                let tls = axum::serve(tls_listener, app.clone());
                let plain = axum::serve(listener, app);
                if coordinated {
                    tokio::spawn(coordinator::run(state_for_coordinator));
                }
                tokio::select! {
                    _ = tls.into_future() => {}
                    _ = plain.into_future() => {}
                    _ = stop_rx => {}
                }
            });
            rt.shutdown_timeout(Duration::from_millis(100));
        });
        let dir = tempfile::tempdir().expect("dir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: https://127.0.0.1:{tls_port}\n    certificate-authority: {}\nusers:\n- name: leasekeeper\n  user:\n    token: {TOKEN}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: leasekeeper\n    namespace: {namespace}\ncurrent-context: fake\n",
                tls::ca_file().display()
            ),
        )
        .expect("kubeconfig");
        FakeKube {
            shared,
            port,
            tls_port,
            _dir: dir,
            kubeconfig,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn kubeconfig(&self) -> String {
        self.kubeconfig.display().to_string()
    }

    /// A kubeconfig for the injector's user ([`INJECTOR_TOKEN`]).
    pub fn injector_kubeconfig(&self) -> String {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let path = self.kubeconfig.with_file_name("kubeconfig-injector");
        std::fs::write(&path, text.replace(TOKEN, INJECTOR_TOKEN)).expect("kubeconfig");
        path.display().to_string()
    }

    /// What `/version` answers from now on (1.33 at start).
    pub fn set_version(&self, major: &str, minor: &str) {
        self.store().version_info = (major.to_owned(), minor.to_owned());
    }

    /// The API's HTTPS address (the one the kubeconfig names).
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.tls_port))
    }

    /// A kubeconfig like [`FakeKube::kubeconfig`] that reaches the API through
    /// `endpoint` (a fault proxy).
    pub fn kubeconfig_via(&self, endpoint: &str) -> String {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let path = self
            .kubeconfig
            .with_file_name(format!("kubeconfig-{}", endpoint.replace(':', "-")));
        let text = text.replace(&format!("127.0.0.1:{}", self.tls_port), endpoint);
        std::fs::write(&path, text).expect("kubeconfig via a proxy");
        path.display().to_string()
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

    /// Writes a Lease spec as another client (client-go, say) would, through the store
    /// and the API server's admission of Leases (a refusal panics: a test's mistake).
    pub fn put_lease_spec(&self, name: &str, spec: Value) {
        let ns = self.shared.namespace.clone();
        let mut store = self.store();
        let old = store
            .objects
            .get(&("leases", ns.clone(), name.to_owned()))
            .cloned();
        let (mut obj, event) = match old.clone() {
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
        self.admit(name, old.as_ref(), &mut obj);
        write(&self.shared, &mut store, "leases", &ns, name, obj, event);
    }

    /// The API server's admission of a Lease write (fields dropped without the feature
    /// gate, validation); panics on a 422.
    fn admit(&self, name: &str, old: Option<&Value>, obj: &mut Value) {
        let coordinated = self
            .shared
            .coordinated
            .load(std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = lease_rules::admit_lease(coordinated, name, old, obj) {
            panic!("the API server refuses this Lease write: {e}");
        }
    }

    /// Merges `patch` into a Lease's spec as another client would (a coordinator
    /// setting `preferredHolder`, say).
    pub fn patch_lease_spec(&self, name: &str, patch: Value) {
        self.modify_lease(name, |obj, _| merge(&mut obj["spec"], &patch));
    }

    /// Writes a Lease again with its spec unchanged (a label added, say): a new
    /// resourceVersion, so a write that names the old one gets 409.
    pub fn touch_lease(&self, name: &str) {
        self.modify_lease(name, |obj, version| {
            obj["metadata"]["labels"]["touched"] = Value::String(version.to_string())
        });
    }

    /// Changes a Lease as another client would (`change` gets the object and the
    /// store's current resourceVersion); a missing Lease stays missing.
    fn modify_lease(&self, name: &str, change: impl FnOnce(&mut Value, u64)) {
        let ns = self.shared.namespace.clone();
        let mut store = self.store();
        let Some(mut obj) = store
            .objects
            .get(&("leases", ns.clone(), name.to_owned()))
            .cloned()
        else {
            return;
        };
        let old = obj.clone();
        change(&mut obj, store.version);
        self.admit(name, Some(&old), &mut obj);
        write(
            &self.shared,
            &mut store,
            "leases",
            &ns,
            name,
            obj,
            "MODIFIED",
        );
    }

    /// Whether `coordination.k8s.io/v1beta1` LeaseCandidates are served (on at start);
    /// off, discovery and their paths answer 404, as on a cluster before 1.33.
    pub fn serve_lease_candidates(&self, served: bool) {
        self.shared
            .lease_candidates_served
            .store(served, std::sync::atomic::Ordering::Relaxed);
    }

    /// The LeaseCandidate named `name`, as stored.
    pub fn lease_candidate(&self, name: &str) -> Option<Value> {
        self.store()
            .objects
            .get(&(
                "leasecandidates",
                self.shared.namespace.clone(),
                name.to_owned(),
            ))
            .cloned()
    }

    /// Writes a LeaseCandidate's spec as another client would: creates it with `spec`
    /// when missing, else merges `spec` into its spec (the coordinator's `pingTime`).
    pub fn put_lease_candidate(&self, name: &str, spec: Value) {
        let ns = self.shared.namespace.clone();
        let mut store = self.store();
        let key = ("leasecandidates", ns.clone(), name.to_owned());
        let (obj, event) = match store.objects.get(&key).cloned() {
            Some(mut obj) => {
                merge(&mut obj["spec"], &spec);
                (obj, "MODIFIED")
            }
            None => (
                json!({
                    "apiVersion": "coordination.k8s.io/v1beta1",
                    "kind": "LeaseCandidate",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": spec,
                }),
                "ADDED",
            ),
        };
        write(
            &self.shared,
            &mut store,
            "leasecandidates",
            &ns,
            name,
            obj,
            event,
        );
    }

    /// Deletes a Lease as an administrator would (`kubectl delete lease`).
    pub fn delete_lease(&self, name: &str) {
        let ns = self.shared.namespace.clone();
        let mut store = self.store();
        remove(&self.shared, &mut store, "leases", &ns, name);
    }

    /// A store recorder for Lease `name`: every write of it, noted as it is made.
    pub fn lease_recorder(&self, name: &str) -> crate::common::harness::recorder::Recorder {
        let (recorder, sink) = crate::common::harness::recorder::Recorder::fed();
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

    /// Every write of Lease `name` so far, in order: when the fake made it, and the spec.
    pub fn lease_writes(&self, name: &str) -> Vec<(std::time::Instant, Value)> {
        self.store()
            .history
            .iter()
            .filter(|c| c.kind == "leases" && c.key.1 == name)
            .map(|c| (c.at, c.object["spec"].clone()))
            .collect()
    }

    /// Every Event as stored now, in order of creation.
    pub fn events(&self) -> Vec<Value> {
        let store = self.store();
        let mut events: Vec<Value> = store
            .objects
            .iter()
            .filter(|((kind, _, _), _)| *kind == "events")
            .map(|(_, obj)| obj.clone())
            .collect();
        events.sort_by_key(|e| e["metadata"]["name"].as_str().map(str::to_owned));
        events
    }

    /// TLS connections accepted on the HTTPS port so far (each a handshake).
    pub fn tls_connections(&self) -> usize {
        self.shared
            .tls_connections
            .load(std::sync::atomic::Ordering::Relaxed)
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
