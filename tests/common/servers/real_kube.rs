//! A real kube-apiserver on loopback, for the Kubernetes suites when the developer gives
//! one: `LK_KUBE_APISERVER=/path/to/kube-apiserver` (docs/development.md says how to
//! build one here). Each [`RealKube`] is its own etcd (the harness's) and its own API
//! server with:
//! - a static token file: `admin` (system:masters) for the harness, the user
//!   `leasekeeper` the sidecars run as, bound to the chart's Role in the test's
//!   namespace only (the Role read from `manifests/02-role.yaml`, plus the
//!   `leaseCandidate.enabled` rule when asked), and the user `leasekeeper-injector`
//!   (bound to the injector's ClusterRole by [`KubeApi::injector_kubeconfig`]), with
//!   `--authorization-mode=RBAC`;
//! - an audit log of every request the `leasekeeper` user makes (level Request), from
//!   which [`KubeApi::requests`], [`KubeApi::forbidden`] and [`KubeApi::blind_writes`]
//!   are counted, as the fake counts them;
//! - a watch of the namespace's Leases, Pods, Events and LeaseCandidates from the start,
//!   which records every write ([`KubeApi::lease_writes`], [`KubeApi::label_history`]).
//!
//! Flavours ([`Flavor`]): the `CoordinatedLeaderElection` gate off (the default of
//! every release up to 1.36) with `coordination.k8s.io/v1beta1` served, or the gate on
//! (the API server's coordinator runs), or v1beta1 not served at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{Method, Request};
use futures_util::TryStreamExt;
use kube::core::WatchEvent;
use serde_json::{json, Value};

use super::etcd_server::EtcdCluster;
use super::kube_server::{Flavor, KubeApi};
use super::server::{wait_serving, ServerProcess};

const ADMIN_TOKEN: &str = "leasekeeper-admin-token";

/// One write seen by the harness's watch: when, which kind and name, the object.
#[derive(Clone)]
struct Seen {
    at: Instant,
    kind: &'static str,
    name: String,
    event: String,
    object: Value,
}

pub struct RealKube {
    namespace: String,
    dir: tempfile::TempDir,
    _etcd: EtcdCluster,
    server: ServerProcess,
    port: u16,
    rt: Option<tokio::runtime::Runtime>,
    admin: kube::Client,
    seen: Arc<Mutex<Vec<Seen>>>,
    granted: Vec<(String, String)>,
    kubeconfig: PathBuf,
    flavor: Flavor,
}

/// The API server binary the developer gave, if any.
pub fn binary() -> Option<PathBuf> {
    std::env::var_os("LK_KUBE_APISERVER")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

impl RealKube {
    pub fn start(binary: &Path, namespace: &str, flavor: Flavor) -> RealKube {
        let dir = tempfile::tempdir().expect("dir");
        let etcd = EtcdCluster::start(1);
        write_files(dir.path());
        let (server, port) = launch(binary, dir.path(), &etcd.endpoints(), flavor);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let admin_config = kubeconfig(dir.path(), port, ADMIN_TOKEN, namespace, "admin");
        let kubeconfig = kubeconfig(dir.path(), port, super::fake_kube::TOKEN, namespace, "user");
        let admin = on_own_thread(&rt, async {
            let _ = rustls::crypto::ring::default_provider().install_default();
            leasekeeper::kube_api::client(Some(&admin_config))
                .await
                .expect("admin client")
        });
        let mut real = RealKube {
            namespace: namespace.to_owned(),
            dir,
            _etcd: etcd,
            server,
            port,
            rt: Some(rt),
            admin,
            seen: Arc::default(),
            granted: Vec::new(),
            kubeconfig,
            flavor,
        };
        real.wait_ready();
        real.granted = super::fake_kube::role_rules(flavor.lease_candidates());
        real.set_up_namespace(flavor.lease_candidates());
        real.start_recording();
        real
    }

    fn wait_ready(&self) {
        let log = self.dir.path().join("apiserver.log");
        wait_serving(
            Duration::from_secs(60),
            || {
                self.call_as_admin(Method::GET, "/readyz", None)
                    .is_ok_and(|(code, _)| code == 200)
            },
            || format!("kube-apiserver never became ready:\n{}", tail(&log)),
        );
    }

    /// The namespace, the ServiceAccount Pods need (no controller-manager creates
    /// it), the chart's Role and its binding to the user `leasekeeper`.
    fn set_up_namespace(&self, lease_candidates: bool) {
        let ns = &self.namespace;
        self.must(
            Method::POST,
            "/api/v1/namespaces",
            json!({"metadata": {"name": ns}}),
        );
        self.must(
            Method::POST,
            &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            json!({"metadata": {"name": "default"}}),
        );
        let mut role = super::fake_kube::chart_role(lease_candidates);
        role["metadata"] = json!({"name": "leasekeeper", "namespace": ns});
        self.must(
            Method::POST,
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
            role,
        );
        self.must(
            Method::POST,
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
            json!({
                "metadata": {"name": "leasekeeper"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leasekeeper"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "leasekeeper"}],
            }),
        );
    }

    /// An admin request that must succeed.
    fn must(&self, method: Method, path: &str, body: Value) -> Value {
        let (code, answer) = self
            .call_as_admin(method.clone(), path, Some(body))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        assert!(code < 300, "{method} {path}: {code} {answer}");
        answer
    }

    /// One request as `admin`: (status, JSON body) — an error status is an answer too.
    pub fn call_as_admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        self.call_with(self.admin.clone(), method, path, body)
    }

    /// One request with `client`: (status, JSON body), or why there is none within 10 s.
    fn call_with(
        &self,
        client: kube::Client,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        self.call_within(Duration::from_secs(10), client, method, path, body)
    }

    /// [`RealKube::call_with`] with its own limit on the wait.
    fn call_within(
        &self,
        limit: Duration,
        client: kube::Client,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let content_type = if method == Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(bytes)
            .map_err(|e| e.to_string())?;
        let answer = self.block_on(async move {
            tokio::time::timeout(limit, client.request_text(request)).await
        });
        match answer {
            Err(_) => Err(format!("no answer within {limit:?}")),
            Ok(Ok(text)) => Ok((
                200,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )),
            Ok(Err(kube::Error::Api(status))) => Ok((
                status.code,
                serde_json::to_value(&status).unwrap_or(Value::Null),
            )),
            Ok(Err(e)) => Err(e.to_string()),
        }
    }

    fn path(&self, kind: &str, name: Option<&str>) -> String {
        let ns = &self.namespace;
        let base = match kind {
            "leases" => format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            "leasecandidates" => {
                format!("/apis/coordination.k8s.io/v1beta1/namespaces/{ns}/leasecandidates")
            }
            other => format!("/api/v1/namespaces/{ns}/{other}"),
        };
        match name {
            Some(n) => format!("{base}/{n}"),
            None => base,
        }
    }

    fn get(&self, kind: &str, name: &str) -> Option<Value> {
        match self.call_as_admin(Method::GET, &self.path(kind, Some(name)), None) {
            Ok((200, v)) => Some(v),
            Ok((404, _)) => None,
            other => panic!("get {kind} {name}: {other:?}"),
        }
    }

    /// Creates the object, or replaces its `spec` (a read, then a write at that
    /// resourceVersion, again on a conflict).
    fn put_spec(&self, kind: &str, api_version: &str, name: &str, spec: Value, merge: bool) {
        for _ in 0..10 {
            let Some(mut current) = self.get(kind, name) else {
                let obj = json!({
                    "apiVersion": api_version, "kind": kind_name(kind),
                    "metadata": {"name": name}, "spec": spec,
                });
                match self.call_as_admin(Method::POST, &self.path(kind, None), Some(obj)) {
                    Ok((code, _)) if code < 300 => return,
                    Ok((409, _)) => continue,
                    other => panic!("create {kind} {name}: {other:?}"),
                }
            };
            if merge {
                super::fake_kube::merge(&mut current["spec"], &spec);
            } else {
                current["spec"] = spec.clone();
            }
            match self.call_as_admin(Method::PUT, &self.path(kind, Some(name)), Some(current)) {
                Ok((code, _)) if code < 300 => return,
                Ok((409, _)) => continue,
                other => panic!("update {kind} {name}: {other:?}"),
            }
        }
        panic!("{kind} {name} kept changing under the harness's write");
    }

    /// Watches the namespace's kinds from now on, recording every change.
    fn start_recording(&self) {
        for kind in ["leases", "pods", "events", "leasecandidates"] {
            let list = self.call_as_admin(Method::GET, &self.path(kind, None), None);
            let Ok((200, list)) = list else {
                continue; // not served (v1beta1 off)
            };
            let version = list["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("0")
                .to_owned();
            let path = format!(
                "{}?watch=true&resourceVersion={version}&allowWatchBookmarks=false&timeoutSeconds=3600",
                self.path(kind, None)
            );
            let (admin, seen) = (self.admin.clone(), self.seen.clone());
            if let Some(rt) = &self.rt {
                rt.spawn(record(admin, path, kind, seen));
            }
        }
    }

    /// Waits until the recording has seen `kind/name` as it is now.
    fn caught_up(&self, kind: &str, name: &str) {
        let now = self.get(kind, name);
        let want = now
            .as_ref()
            .map(|o| o["metadata"]["resourceVersion"].clone());
        let seen = || {
            let seen = self.seen.lock().expect("seen");
            let last = seen.iter().rev().find(|s| s.kind == kind && s.name == name);
            match (&want, last) {
                (Some(v), Some(s)) => s.object["metadata"]["resourceVersion"] == *v,
                (None, Some(s)) => s.event == "DELETED",
                (None, None) => true,
                (Some(_), None) => false,
            }
        };
        let _ = crate::common::eventually(Duration::from_secs(5), || seen().then_some(()));
    }

    /// The audit log's entries for requests of the user `leasekeeper`, one per request.
    fn audited(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["user"]["username"] == "leasekeeper")
            .filter(|e| {
                let watch = e["verb"] == "watch";
                (watch && e["stage"] == "ResponseStarted")
                    || (!watch && e["stage"] == "ResponseComplete")
            })
            .collect()
    }
}

/// Runs `f` to completion on `rt` from a thread of its own, so that the harness works
/// from synchronous tests and from `#[tokio::test]` bodies alike.
fn on_own_thread<F>(rt: &tokio::runtime::Runtime, f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| s.spawn(|| rt.block_on(f)).join().expect("harness thread"))
}

impl RealKube {
    fn block_on<F>(&self, f: F) -> F::Output
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        on_own_thread(self.rt.as_ref().expect("runtime"), f)
    }
}

impl Drop for RealKube {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The last lines of a log.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn kind_name(kind: &str) -> &'static str {
    match kind {
        "leases" => "Lease",
        "leasecandidates" => "LeaseCandidate",
        "pods" => "Pod",
        _ => "Event",
    }
}

async fn record(
    admin: kube::Client,
    path: String,
    kind: &'static str,
    seen: Arc<Mutex<Vec<Seen>>>,
) {
    let Ok(request) = Request::builder().uri(path).body(Vec::new()) else {
        return;
    };
    let Ok(events) = admin.request_events::<Value>(request).await else {
        return;
    };
    let mut events = std::pin::pin!(events);
    while let Ok(Some(event)) = events.try_next().await {
        let (name, object) = match event {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) | WatchEvent::Error(_) => continue,
        };
        let entry = Seen {
            at: Instant::now(),
            kind,
            name: object["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            event: name.to_owned(),
            object,
        };
        seen.lock().expect("seen").push(entry);
    }
}

/// The service-account keys, the token file and the audit policy.
fn write_files(dir: &Path) {
    let key = dir.join("sa.key");
    let ok = Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&key)
        .arg("2048")
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "openssl genrsa");
    let ok = Command::new("openssl")
        .args(["rsa", "-pubout", "-in"])
        .arg(&key)
        .arg("-out")
        .arg(dir.join("sa.pub"))
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "openssl rsa -pubout");
    let tokens = format!(
        "{ADMIN_TOKEN},admin,admin-uid,system:masters\n{},leasekeeper,leasekeeper-uid\n{},leasekeeper-injector,leasekeeper-injector-uid\n",
        super::fake_kube::TOKEN,
        super::fake_kube::INJECTOR_TOKEN,
    );
    std::fs::write(dir.join("tokens.csv"), tokens).expect("tokens");
    let policy = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Request\n  users: [leasekeeper]\n- level: None\n";
    std::fs::write(dir.join("audit-policy.yaml"), policy).expect("audit policy");
}

/// Starts the API server on a free port, again on another one when a process that
/// took the port meanwhile makes it fail to bind; returns once its certificate exists.
fn launch(binary: &Path, dir: &Path, etcd: &str, flavor: Flavor) -> (ServerProcess, u16) {
    let log = dir.join("apiserver.log");
    let cert = dir.join("certs").join("apiserver.crt");
    for _ in 0..5 {
        let port = crate::common::free_port();
        let mut server = start_server(binary, dir, etcd, port, flavor);
        let bind_failed = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("address already in use")
        };
        let started = crate::common::eventually(Duration::from_secs(60), || {
            if bind_failed() {
                Some(false)
            } else {
                cert.exists().then_some(true)
            }
        });
        match started {
            Some(true) => return (server, port),
            Some(false) => server.kill(),
            None => panic!(
                "kube-apiserver wrote no serving certificate: {}",
                tail(&log)
            ),
        }
    }
    panic!("kube-apiserver found no free port: {}", tail(&log));
}

fn start_server(binary: &Path, dir: &Path, etcd: &str, port: u16, flavor: Flavor) -> ServerProcess {
    let d = |f: &str| dir.join(f).display().to_string();
    let mut cmd = Command::new(binary);
    cmd.args([
        format!("--etcd-servers={etcd}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", d("certs")),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", d("sa.pub")),
        format!("--service-account-signing-key-file={}", d("sa.key")),
        format!("--token-auth-file={}", d("tokens.csv")),
        "--authorization-mode=RBAC".into(),
        "--endpoint-reconciler-type=none".into(),
        format!("--audit-policy-file={}", d("audit-policy.yaml")),
        format!("--audit-log-path={}", d("audit.log")),
        "--audit-log-mode=blocking".into(),
    ]);
    // Every flavour serves LeaseCandidates (v1beta1 is off by default in 1.33).
    cmd.arg("--runtime-config=coordination.k8s.io/v1beta1=true");
    if flavor.coordinated() {
        cmd.arg("--feature-gates=CoordinatedLeaderElection=true");
    }
    let log = dir.join("apiserver.log");
    ServerProcess::start(&mut cmd, Some(&log), "kube-apiserver (LK_KUBE_APISERVER)")
}

fn kubeconfig(dir: &Path, port: u16, token: &str, namespace: &str, name: &str) -> PathBuf {
    let path = dir.join(format!("kubeconfig-{name}"));
    let ca = dir.join("certs").join("apiserver.crt");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: real\n  context:\n    cluster: real\n    user: u\n    namespace: {namespace}\ncurrent-context: real\n",
            ca.display()
        ),
    )
    .expect("kubeconfig");
    path
}

impl KubeApi for RealKube {
    fn is_real(&self) -> bool {
        true
    }

    fn kubeconfig(&self) -> String {
        self.kubeconfig.display().to_string()
    }

    fn kubeconfig_via(&self, endpoint: &str) -> String {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let path = self
            .kubeconfig
            .with_file_name(format!("kubeconfig-{}", endpoint.replace(':', "-")));
        let text = text.replace(&format!("127.0.0.1:{}", self.port), endpoint);
        std::fs::write(&path, text).expect("kubeconfig via a proxy");
        path.display().to_string()
    }

    fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn lease(&self, name: &str) -> Option<Value> {
        self.get("leases", name)
    }

    fn put_lease_spec(&self, name: &str, spec: Value) {
        self.put_spec("leases", "coordination.k8s.io/v1", name, spec, false);
    }

    fn patch_lease_spec(&self, name: &str, patch: Value) {
        if self.get("leases", name).is_some() {
            self.put_spec("leases", "coordination.k8s.io/v1", name, patch, true);
        }
    }

    fn touch_lease(&self, name: &str) {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let patch = json!({"metadata": {"labels": {"touched": stamp.to_string()}}});
        let answer =
            self.call_as_admin(Method::PATCH, &self.path("leases", Some(name)), Some(patch));
        assert!(
            matches!(answer, Ok((200, _)) | Ok((404, _))),
            "touch lease {name}: {answer:?}"
        );
    }

    fn delete_lease(&self, name: &str) {
        let _ = self.call_as_admin(Method::DELETE, &self.path("leases", Some(name)), None);
    }

    fn lease_candidate(&self, name: &str) -> Option<Value> {
        self.get("leasecandidates", name)
    }

    fn put_lease_candidate(&self, name: &str, spec: Value) {
        self.put_spec(
            "leasecandidates",
            "coordination.k8s.io/v1beta1",
            name,
            spec,
            true,
        );
    }

    fn add_pod(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        self.must(
            Method::POST,
            &self.path("pods", None),
            json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"automountServiceAccountToken": false,
                         "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]},
            }),
        );
    }

    fn pod_label(&self, pod: &str, key: &str) -> Option<String> {
        let pod = self.get("pods", pod)?;
        pod["metadata"]["labels"][key].as_str().map(str::to_owned)
    }

    fn set_pod_label(&self, pod: &str, key: &str, value: &str) {
        let patch = json!({"metadata": {"labels": {key: value}}});
        self.must(Method::PATCH, &self.path("pods", Some(pod)), patch);
    }

    fn label_history(&self, key: &str) -> Vec<(String, Option<String>)> {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|s| s.kind == "pods" && s.event != "DELETED")
            .map(|s| {
                let value = s.object["metadata"]["labels"][key]
                    .as_str()
                    .map(str::to_owned);
                (s.name.clone(), value)
            })
            .collect()
    }

    fn lease_writes(&self, name: &str) -> Vec<(Instant, Value)> {
        self.caught_up("leases", name);
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|s| s.kind == "leases" && s.name == name && s.event != "DELETED")
            .map(|s| (s.at, s.object["spec"].clone()))
            .collect()
    }

    fn events(&self) -> Vec<Value> {
        let (_, list) = self
            .call_as_admin(Method::GET, &self.path("events", None), None)
            .expect("events");
        let mut events = list["items"].as_array().cloned().unwrap_or_default();
        events.sort_by_key(|e| e["metadata"]["name"].as_str().map(str::to_owned));
        events
    }

    fn requests(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for e in self.audited() {
            let key = format!(
                "{} {}",
                e["verb"].as_str().unwrap_or(""),
                e["objectRef"]["resource"].as_str().unwrap_or("")
            );
            *out.entry(key).or_default() += 1;
        }
        out
    }

    fn granted(&self) -> Vec<(String, String)> {
        self.granted.clone()
    }

    fn forbidden(&self) -> Vec<String> {
        self.audited()
            .iter()
            .filter(|e| e["responseStatus"]["code"] == 403)
            .map(|e| {
                format!(
                    "{} {} in {}",
                    e["verb"].as_str().unwrap_or(""),
                    e["objectRef"]["resource"].as_str().unwrap_or(""),
                    e["objectRef"]["namespace"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    fn blind_writes(&self) -> usize {
        self.audited()
            .iter()
            .filter(|e| e["verb"] == "update")
            .filter(|e| {
                e["requestObject"]["metadata"]["resourceVersion"]
                    .as_str()
                    .is_none_or(str::is_empty)
            })
            .count()
    }

    fn coordinator_crashed(&self) -> bool {
        let log =
            std::fs::read_to_string(self.dir.path().join("apiserver.log")).unwrap_or_default();
        log.contains("invalid memory address or nil pointer dereference")
    }

    fn changes(&self) -> Vec<(u64, &'static str, String, Value)> {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .map(|s| {
                let version = s.object["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                (version, s.kind, s.name.clone(), s.object.clone())
            })
            .collect()
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        self.call_as_user(method, path, body)
    }

    fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        self.call_within(
            Duration::from_secs(40),
            self.admin.clone(),
            method,
            path,
            body,
        )
        .unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The injector's ClusterRole and its binding to the user `leasekeeper-injector`
    /// (made once; 409 when they exist), and a kubeconfig for that user.
    fn injector_kubeconfig(&self) -> String {
        let rbac = "/apis/rbac.authorization.k8s.io/v1";
        let role = json!({
            "metadata": {"name": "leasekeeper-injector"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
            ],
        });
        let binding = json!({
            "metadata": {"name": "leasekeeper-injector"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "leasekeeper-injector"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "leasekeeper-injector"}],
        });
        for (path, body) in [("clusterroles", role), ("clusterrolebindings", binding)] {
            let (code, answer) =
                KubeApi::admin(self, "POST", &format!("{rbac}/{path}"), Some(body));
            assert!(code < 300 || code == 409, "{path}: {code} {answer}");
        }
        let path = kubeconfig(
            self.dir.path(),
            self.port,
            super::fake_kube::INJECTOR_TOKEN,
            &self.namespace,
            "injector",
        );
        path.display().to_string()
    }
}

impl RealKube {
    /// One request as the user `leasekeeper` (the sidecars' RBAC).
    fn call_as_user(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let kubeconfig = self.kubeconfig.clone();
        let client = self.block_on(async move {
            leasekeeper::kube_api::client(Some(&kubeconfig))
                .await
                .expect("user client")
        });
        self.call_with(client, method, path, body)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    }
}

impl crate::common::checks::checker::ServerControl for RealKube {
    fn pause(&mut self) {
        self.server.pause();
    }

    fn resume(&mut self) {
        self.server.resume();
    }

    /// The API server restarts: etcd keeps the objects, every watch is cut.
    fn restart(&mut self) {
        self.server.kill();
        std::thread::sleep(Duration::from_millis(200));
        let binary = binary().expect("LK_KUBE_APISERVER");
        let flavor = self.flavor;
        self.server = start_server(
            &binary,
            self.dir.path(),
            &self._etcd.endpoints(),
            self.port,
            flavor,
        );
        self.wait_ready();
    }
}
