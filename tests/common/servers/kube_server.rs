//! The Kubernetes API the suites run against: a real kube-apiserver when the developer
//! gives one (`LK_KUBE_APISERVER`, see [`super::real_kube`]), else the in-process fake
//! ([`super::fake_kube`]), which CI runs. Both answer through [`KubeApi`], so one test
//! body runs on both; a test that needs what only the fake can do (injected failures,
//! held requests, latency) starts [`FakeKube`] itself and says so.
//!
//! The real server is the reference (DESIGN §2, invariant 14): where the two disagree,
//! the fake is wrong first.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;

use super::fake_kube::FakeKube;
use super::real_kube::{self, RealKube};

/// Which API server: the `CoordinatedLeaderElection` feature gate and whether
/// `coordination.k8s.io/v1beta1` (LeaseCandidates) is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// The gate off (the default up to 1.36), v1beta1 served
    /// (`--runtime-config=coordination.k8s.io/v1beta1=true`), the chart's default Role.
    GateOff,
    /// As `GateOff`, with the Role's `leaseCandidate.enabled` rule.
    GateOffWithCandidates,
    /// The gate on: the API server's coordinator runs; the Role with LeaseCandidates.
    Coordinated,
}

impl Flavor {
    pub fn coordinated(self) -> bool {
        self == Flavor::Coordinated
    }

    pub fn lease_candidates(self) -> bool {
        self != Flavor::GateOff
    }
}

/// What the suites ask of an API server besides serving the sidecars.
pub trait KubeApi: Send + Sync {
    fn is_real(&self) -> bool;
    fn kubeconfig(&self) -> String;
    /// A kubeconfig that reaches the API through `endpoint` (a fault proxy).
    fn kubeconfig_via(&self, endpoint: &str) -> String;
    /// The HTTPS address the kubeconfig names.
    fn addr(&self) -> std::net::SocketAddr;
    fn lease(&self, name: &str) -> Option<Value>;
    /// Writes a Lease's spec as another client would (created when missing).
    fn put_lease_spec(&self, name: &str, spec: Value);
    /// Merges `patch` into a Lease's spec as another client would (a missing Lease stays
    /// missing).
    fn patch_lease_spec(&self, name: &str, patch: Value);
    /// Writes a Lease again with its spec unchanged (a new resourceVersion).
    fn touch_lease(&self, name: &str);
    fn delete_lease(&self, name: &str);
    fn lease_candidate(&self, name: &str) -> Option<Value>;
    /// Creates a LeaseCandidate with `spec`, or merges `spec` into its spec.
    fn put_lease_candidate(&self, name: &str, spec: Value);
    fn add_pod(&self, name: &str, labels: &[(&str, &str)]);
    fn pod_label(&self, pod: &str, key: &str) -> Option<String>;
    fn set_pod_label(&self, pod: &str, key: &str, value: &str);
    /// Every value of label `key` each Pod carried, in order of writes.
    fn label_history(&self, key: &str) -> Vec<(String, Option<String>)>;
    /// Every write of Lease `name`, in order: when it was seen, and the spec.
    fn lease_writes(&self, name: &str) -> Vec<(Instant, Value)>;
    /// Every Event of the namespace, by name.
    fn events(&self) -> Vec<Value>;
    /// The sidecars' requests so far, by "verb resource".
    fn requests(&self) -> BTreeMap<String, usize>;
    /// The (resource, verb) pairs the chart's Role grants.
    fn granted(&self) -> Vec<(String, String)>;
    /// The sidecars' requests refused with 403: "verb resource in namespace".
    fn forbidden(&self) -> Vec<String>;
    /// The sidecars' updates that named no resourceVersion.
    fn blind_writes(&self) -> usize;
    /// Whether the coordinator met a Lease that crashes kube-apiserver 1.33.3.
    fn coordinator_crashed(&self) -> bool;
    /// Every write seen so far, in order: (resourceVersion, kind, name, object).
    fn changes(&self) -> Vec<(u64, &'static str, String, Value)>;
    /// One request with the sidecars' credentials: (status, JSON body).
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value);
    /// One request as the harness's administrator (anything allowed, nothing counted),
    /// with up to 40 s for an answer (an admission webhook may take its time).
    fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value);
    /// A kubeconfig for the injector's user, bound to the injector's ClusterRole
    /// (Pods get, list and watch, Events create, Namespaces get).
    fn injector_kubeconfig(&self) -> String;
}

/// Serves namespace `namespace`: the real API server when `LK_KUBE_APISERVER` names
/// one, else the fake. `LK_KUBE_GATE=on` runs the tests written for the default (the
/// gate off) on a server with the gate on instead (with the LeaseCandidates rule).
pub fn start(namespace: &str, flavor: Flavor) -> Box<dyn KubeApi> {
    let gate_on = std::env::var("LK_KUBE_GATE").is_ok_and(|g| g == "on");
    start_exact(
        namespace,
        if gate_on { Flavor::Coordinated } else { flavor },
    )
}

/// As [`start`], whatever `LK_KUBE_GATE` says (for tests of one flavour's rules).
pub fn start_exact(namespace: &str, flavor: Flavor) -> Box<dyn KubeApi> {
    if let Some(binary) = real_kube::binary() {
        return Box::new(RealKube::start(&binary, namespace, flavor));
    }
    Box::new(match flavor {
        Flavor::GateOff => FakeKube::start(namespace),
        Flavor::GateOffWithCandidates => FakeKube::start_granting_lease_candidates(namespace),
        Flavor::Coordinated => FakeKube::start_coordinated(namespace),
    })
}

impl KubeApi for FakeKube {
    fn is_real(&self) -> bool {
        false
    }

    fn kubeconfig(&self) -> String {
        FakeKube::kubeconfig(self)
    }

    fn kubeconfig_via(&self, endpoint: &str) -> String {
        FakeKube::kubeconfig_via(self, endpoint)
    }

    fn addr(&self) -> std::net::SocketAddr {
        FakeKube::addr(self)
    }

    fn lease(&self, name: &str) -> Option<Value> {
        FakeKube::lease(self, name)
    }

    fn put_lease_spec(&self, name: &str, spec: Value) {
        FakeKube::put_lease_spec(self, name, spec)
    }

    fn patch_lease_spec(&self, name: &str, patch: Value) {
        FakeKube::patch_lease_spec(self, name, patch)
    }

    fn touch_lease(&self, name: &str) {
        FakeKube::touch_lease(self, name)
    }

    fn delete_lease(&self, name: &str) {
        FakeKube::delete_lease(self, name)
    }

    fn lease_candidate(&self, name: &str) -> Option<Value> {
        FakeKube::lease_candidate(self, name)
    }

    fn put_lease_candidate(&self, name: &str, spec: Value) {
        FakeKube::put_lease_candidate(self, name, spec)
    }

    fn add_pod(&self, name: &str, labels: &[(&str, &str)]) {
        FakeKube::add_pod(self, name, labels)
    }

    fn pod_label(&self, pod: &str, key: &str) -> Option<String> {
        FakeKube::pod_label(self, pod, key)
    }

    fn set_pod_label(&self, pod: &str, key: &str, value: &str) {
        FakeKube::set_pod_label(self, pod, key, value)
    }

    fn label_history(&self, _key: &str) -> Vec<(String, Option<String>)> {
        FakeKube::label_history(self)
    }

    fn lease_writes(&self, name: &str) -> Vec<(Instant, Value)> {
        FakeKube::lease_writes(self, name)
    }

    fn events(&self) -> Vec<Value> {
        FakeKube::events(self)
    }

    fn requests(&self) -> BTreeMap<String, usize> {
        FakeKube::requests(self)
    }

    fn granted(&self) -> Vec<(String, String)> {
        FakeKube::granted(self)
    }

    fn forbidden(&self) -> Vec<String> {
        FakeKube::forbidden(self)
    }

    fn blind_writes(&self) -> usize {
        FakeKube::blind_writes(self)
    }

    fn coordinator_crashed(&self) -> bool {
        FakeKube::coordinator_crashed(self)
    }

    fn changes(&self) -> Vec<(u64, &'static str, String, Value)> {
        FakeKube::changes(self)
    }

    fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let content_type = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        raw_call_within(
            std::time::Duration::from_secs(40),
            self.port,
            method,
            path,
            Some(super::fake_kube::ADMIN_TOKEN),
            content_type,
            &body,
        )
    }

    fn injector_kubeconfig(&self) -> String {
        FakeKube::injector_kubeconfig(self)
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let content_type = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        raw_call(
            self.port,
            method,
            path,
            Some(super::fake_kube::TOKEN),
            content_type,
            &body,
        )
    }
}

/// One raw HTTP request to the fake's plain port: (status, JSON body).
pub fn raw_call(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: &str,
    body: &str,
) -> (u16, Value) {
    let five = std::time::Duration::from_secs(5);
    raw_call_within(five, port, method, path, token, content_type, body)
}

/// [`raw_call`] with its own limit on the wait for the answer.
pub fn raw_call_within(
    limit: std::time::Duration,
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: &str,
    body: &str,
) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(limit)).expect("timeout");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let code = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}
