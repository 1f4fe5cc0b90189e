//! A real single-node Kubernetes for the node suite (tests/suite/kube_node.rs), when the
//! developer gives its binaries: `LK_KUBE_NODE=<folder>` with kube-apiserver,
//! kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and a static
//! `pause`, built elsewhere from one Kubernetes release (docs/development.md, "The node
//! suite"). Without it every test of the suite says it is skipped, and why, and passes.
//!
//! [`KubeNode::start`] runs `tests/kube_node/node.sh up` in a fresh state folder,
//! imports the leasekeeper image (`scripts/image-archive` of the binary under test) with
//! `ctr -n k8s.io images import`, and stops the node again on drop (`node.sh down
//! --purge`), also when the test fails. One node runs on a host at a time: a lock file
//! serializes the tests of every process, and a node a killed test process left behind
//! is stopped before the next one starts.
//!
//! Besides kubectl and Helm (`tests/kube_node/helm.py`, Helm's engine through
//! helm-sdkpy), the node shows what only a node can: the API server's audit of every
//! service-account request, the containers' host processes, and the Pods' emptyDir
//! volumes on the host's disk ([`observe`]).

pub mod observe;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::http::{Method, Request};
use serde_json::Value;

/// The leasekeeper image's reference: the chart's default, so its values find it.
pub const IMAGE_TAG: &str = "ghcr.io/leasekeeper/leasekeeper:0.1.0";
/// The app image node.sh builds (static busybox).
pub const BUSYBOX: &str = "localhost/busybox:1.35";

const LOCK: &str = "/tmp/leasekeeper-kube-node.lock";
/// The state folder of the node that runs now, so that the next start can stop a node
/// whose test process was killed before its drop ran.
const CURRENT: &str = "/tmp/leasekeeper-kube-node.current";

/// The folder of the Kubernetes binaries, if the developer gave one.
pub fn binaries() -> Option<PathBuf> {
    std::env::var_os("LK_KUBE_NODE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// A node for `test`, or `None` (after saying that the test is skipped and why) when
/// LK_KUBE_NODE is not set.
pub fn node_or_skip(test: &str) -> Option<KubeNode> {
    match binaries() {
        Some(bin) => Some(KubeNode::start(&bin)),
        None => {
            eprintln!(
                "{test}: skipped: LK_KUBE_NODE is not set (a folder with kube-apiserver, \
                 kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and pause \
                 of Kubernetes 1.33, built outside this repository; docs/development.md, \
                 \"The node suite\")"
            );
            None
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the sidecars' transition logs, shared
/// by every process on the host, containers included.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds between two [`mono_ns`] readings (negative when `to` comes first).
pub fn ms(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1e6
}

pub struct KubeNode {
    state: tempfile::TempDir,
    bin: PathBuf,
    env: BTreeMap<String, String>,
    rt: Option<tokio::runtime::Runtime>,
    client: kube::Client,
    _lock: std::fs::File,
}

impl KubeNode {
    /// Starts the node (Ready), with the leasekeeper image imported.
    pub fn start(bin: &Path) -> KubeNode {
        let lock = take_lock();
        stop_leftover(bin);
        let state = tempfile::Builder::new()
            .prefix("lk-node-")
            .tempdir_in("/tmp")
            .expect("state dir");
        std::fs::write(CURRENT, state.path().display().to_string()).expect("current node");
        let began = Instant::now();
        let up = node_sh(bin, &["up", &state.path().display().to_string()]);
        if !up.status.success() {
            node_sh(
                bin,
                &["down", &state.path().display().to_string(), "--purge"],
            );
            let _ = std::fs::remove_file(CURRENT);
            panic!(
                "node.sh up failed:\n{}{}",
                String::from_utf8_lossy(&up.stdout),
                String::from_utf8_lossy(&up.stderr)
            );
        }
        eprintln!(
            "node: up in {:.1} s\n{}",
            began.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&up.stdout).trim_end()
        );
        let env = read_env(&state.path().join("env"));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let kubeconfig = token_kubeconfig(state.path(), &env);
        let client = on_own_thread(&rt, async {
            let _ = rustls::crypto::ring::default_provider().install_default();
            leasekeeper::kube_api::client(Some(&kubeconfig))
                .await
                .expect("admin client")
        });
        let node = KubeNode {
            state,
            bin: bin.to_owned(),
            env,
            rt: Some(rt),
            client,
            _lock: lock,
        };
        node.import_image(leasekeeper_image());
        node
    }

    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("runtime")
    }

    /// `ctr -n k8s.io images import ARCHIVE` into the node's containerd.
    pub fn import_image(&self, archive: &Path) {
        let began = Instant::now();
        let out = Command::new("ctr")
            .args(["--address", &self.env["KUBE_CONTAINERD_ADDRESS"]])
            .args(["-n", "k8s.io", "images", "import"])
            .arg(archive)
            .output()
            .expect("ctr");
        assert!(
            out.status.success(),
            "ctr images import {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "node: imported {} in {:.1} s",
            archive.display(),
            began.elapsed().as_secs_f64()
        );
    }

    /// kubectl with the node's admin kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(self.bin.join("kubectl"))
            .args(args)
            .env("KUBECONFIG", &self.env["KUBECONFIG"])
            .env("KUBECACHEDIR", &self.env["KUBECACHEDIR"])
            .stdin(Stdio::null())
            .output()
            .expect("kubectl")
    }

    /// kubectl that must succeed: its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `tests/kube_node/helm.py ACTION RELEASE [CHART]` in `namespace` with `values`: the
    /// release's name, revision and status; a panic with Helm's error when it fails.
    pub fn helm(
        &self,
        action: &str,
        release: &str,
        chart: Option<&Path>,
        namespace: &str,
        values: &Value,
    ) -> Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kube_node/helm.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script).args([action, release]);
        if let Some(chart) = chart {
            cmd.arg(chart);
        }
        let out = cmd
            .args(["--kubeconfig", &self.env["KUBECONFIG"]])
            .args(["--namespace", namespace])
            .args(["--values", &values.to_string(), "--timeout", "240"])
            .env("KUBECACHEDIR", &self.env["KUBECACHEDIR"])
            .stdin(Stdio::null())
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "helm {action} {release}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).unwrap_or(Value::Null)
    }

    /// One API request as the admin: its status code and JSON body.
    pub fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let client = self.client.clone();
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let content_type = if method == Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(bytes)
            .expect("request");
        on_own_thread(self.runtime(), async move {
            match client.request_text(request).await {
                Ok(text) => (200, serde_json::from_str(&text).unwrap_or(Value::Null)),
                Err(kube::Error::Api(e)) => (e.code, Value::String(e.message)),
                Err(e) => panic!("API request {path}: {e}"),
            }
        })
    }

    /// GET that must succeed.
    pub fn get(&self, path: &str) -> Value {
        let (code, body) = self.call(Method::GET, path, None);
        assert_eq!(code, 200, "GET {path}: {body}");
        body
    }

    /// The Pods of `namespace` that match `selector` (a label selector, "" for all).
    pub fn pods(&self, namespace: &str, selector: &str) -> Vec<Value> {
        let path = format!(
            "/api/v1/namespaces/{namespace}/pods?labelSelector={}",
            selector.replace('=', "%3D").replace(',', "%2C")
        );
        self.get(&path)["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until exactly `n` Pods match, every one Running and Ready and none being
    /// deleted, and `accept` holds for them; those Pods.
    pub fn wait_ready(
        &self,
        namespace: &str,
        selector: &str,
        n: usize,
        limit: Duration,
        accept: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let end = Instant::now() + limit;
        loop {
            let pods = self.pods(namespace, selector);
            if pods.len() == n && pods.iter().all(running_and_ready) && accept(&pods) {
                return pods;
            }
            if Instant::now() > end {
                let phases: Vec<String> = pods.iter().map(describe).collect();
                panic!("{n} Pods ({selector}) never all Running and Ready: {phases:#?}");
            }
            // Pause: between looks at the Pods.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `kubectl exec POD -c leasekeeper -- leasekeeper ARGS…`: its exit code and stdout.
    pub fn exec_leasekeeper(&self, namespace: &str, pod: &str, args: &[&str]) -> (i32, String) {
        let mut all = vec!["-n", namespace, "exec", pod, "-c", "leasekeeper", "--"];
        all.push("leasekeeper");
        all.extend_from_slice(args);
        let out = self.kubectl(&all);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code().unwrap_or(-1), stdout)
    }

    /// The host pid of a container's first process (`containerd://ID` or `ID`), from
    /// `ctr tasks ls`.
    pub fn container_pid(&self, container_id: &str) -> Option<u32> {
        let id = container_id.trim_start_matches("containerd://");
        let out = Command::new("ctr")
            .args(["--address", &self.env["KUBE_CONTAINERD_ADDRESS"]])
            .args(["-n", "k8s.io", "tasks", "ls"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let mut cols = l.split_whitespace();
            (cols.next()? == id).then(|| cols.next()?.parse().ok())?
        })
    }

    /// Every event of the API server's audit log (service accounts outside kube-system).
    pub fn audit(&self) -> Vec<Value> {
        let log = self.state.path().join("logs").join("audit.log");
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The last lines of a component's log (kubelet, kube-apiserver, …).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let path = self
            .state
            .path()
            .join("logs")
            .join(format!("{component}.log"));
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for KubeNode {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
        let began = Instant::now();
        let out = node_sh(
            &self.bin,
            &["down", &self.state.path().display().to_string(), "--purge"],
        );
        let _ = std::fs::remove_file(CURRENT);
        eprintln!(
            "node: down in {:.1} s {}",
            began.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stdout).trim_end()
        );
    }
}

/// A Pod's phase is Running, its Ready condition True, and it is not being deleted.
pub fn running_and_ready(pod: &Value) -> bool {
    let ready = pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    pod["status"]["phase"] == "Running" && ready && pod["metadata"]["deletionTimestamp"].is_null()
}

fn describe(pod: &Value) -> String {
    format!(
        "{} {} ready={} deleting={}",
        pod["metadata"]["name"].as_str().unwrap_or("?"),
        pod["status"]["phase"].as_str().unwrap_or("?"),
        running_and_ready(pod),
        !pod["metadata"]["deletionTimestamp"].is_null()
    )
}

/// A Pod's name.
pub fn name(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap_or("").to_owned()
}

/// A Pod's label `key`.
pub fn label(pod: &Value, key: &str) -> Option<String> {
    pod["metadata"]["labels"][key].as_str().map(str::to_owned)
}

/// The status of a Pod's container `name`, among its containers or init containers.
pub fn container_status(pod: &Value, name: &str) -> Value {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|k| pod["status"][k].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

fn node_sh(bin: &Path, args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kube_node/node.sh");
    Command::new("bash")
        .arg(script)
        .args(args)
        .env("LK_KUBE_NODE", bin)
        .stdin(Stdio::null())
        .output()
        .expect("bash")
}

/// The host-wide lock of the node (flock: also between two opens in one process).
fn take_lock() -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK)
        .expect("node lock file");
    // SAFETY: flock(2) on a descriptor we own; it is released when the file closes.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {LOCK}");
    file
}

/// Stops the node a killed test process left running (we hold the lock: nobody else
/// uses it).
fn stop_leftover(bin: &Path) {
    let Ok(dir) = std::fs::read_to_string(CURRENT) else {
        return;
    };
    if Path::new(dir.trim()).is_dir() {
        eprintln!("node: stopping the node left in {}", dir.trim());
        node_sh(bin, &["down", dir.trim(), "--purge"]);
    }
    let _ = std::fs::remove_file(CURRENT);
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).expect("node env");
    text.lines()
        .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A kubeconfig with the static admin token (the harness's API client).
fn token_kubeconfig(dir: &Path, env: &BTreeMap<String, String>) -> PathBuf {
    let path = dir.join("token.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: {}\ncontexts:\n- name: node\n  context:\n    cluster: node\n    user: admin\ncurrent-context: node\n",
            env["KUBE_API_URL"], env["KUBE_CA"], env["KUBE_TOKEN"]
        ),
    )
    .expect("token kubeconfig");
    path
}

/// The leasekeeper image archive of the binary under test, built once per test
/// process (under the node's lock, so into one fixed place): the binary without its debug sections (`strip --strip-debug`), then
/// `scripts/image-archive`.
pub fn leasekeeper_image() -> &'static Path {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kube-node");
        std::fs::create_dir_all(&dir).expect("image dir");
        let binary = dir.join("leasekeeper");
        let archive = dir.join("leasekeeper-image.tar");
        let began = Instant::now();
        let ok = Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&binary)
            .arg(crate::common::leasekeeper_bin())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "strip --strip-debug of the leasekeeper binary");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/image-archive");
        let out = Command::new("python3")
            .arg(script)
            .arg("--binary")
            .arg(&binary)
            .arg("--output")
            .arg(&archive)
            .args(["--tag", IMAGE_TAG])
            .output()
            .expect("python3");
        let _ = std::fs::remove_file(&binary);
        assert!(
            out.status.success(),
            "scripts/image-archive: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "node: image archive {} in {:.1} s",
            archive.display(),
            began.elapsed().as_secs_f64()
        );
        archive
    })
}

/// Runs `f` on `rt` from a thread of its own (the tests are synchronous).
pub fn on_own_thread<F>(rt: &tokio::runtime::Runtime, f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| s.spawn(|| rt.block_on(f)).join().expect("harness thread"))
}
