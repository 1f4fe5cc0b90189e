//! What the node suite records while a scenario runs, each thing with the host's
//! CLOCK_MONOTONIC time ([`super::mono_ns`]) at which it was seen, so that the API's
//! view, the sidecars' own transition logs and the host's processes compare directly:
//!
//! - [`PodWatch`]: every Pod write of a namespace, from a list and a watch from its
//!   resourceVersion (the leader label as the API server stores it);
//! - [`TransitionLogs`]: the sidecars' `--transition-log` files (CLOCK_MONOTONIC times),
//!   read from the Pods' emptyDir volumes on the host's disk every 10 ms, kept after the
//!   Pod is gone;
//! - [`LeaderPolls`]: each Pod's `GET /leader` through its IP (the CNI bridge) at a
//!   fixed period;
//! - [`watch_exits`]: when host processes (a container's) end.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::http::Request;
use futures_util::TryStreamExt;
use kube::core::WatchEvent;
use serde_json::Value;

use super::{mono_ns, KubeNode};

/// One Pod write the watch saw.
#[derive(Clone, Debug)]
pub struct PodSeen {
    pub at_ns: u64,
    /// ADDED, MODIFIED or DELETED.
    pub event: String,
    pub name: String,
    pub object: Value,
}

impl PodSeen {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.object["metadata"]["labels"][key].as_str()
    }
}

type Seen = Arc<Mutex<Vec<PodSeen>>>;

/// Every Pod write of one namespace, in the API server's order.
pub struct PodWatch {
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    pub fn start(node: &KubeNode, namespace: &str) -> PodWatch {
        let list = node.get(&format!("/api/v1/namespaces/{namespace}/pods"));
        let at_ns = mono_ns();
        let seen: Seen = Arc::default();
        for pod in list["items"].as_array().into_iter().flatten() {
            seen.lock().expect("seen").push(PodSeen {
                at_ns,
                event: "ADDED".into(),
                name: super::name(pod),
                object: pod.clone(),
            });
        }
        let version = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .to_owned();
        let path = format!(
            "/api/v1/namespaces/{namespace}/pods?watch=true&resourceVersion={version}&timeoutSeconds=3600"
        );
        let task = node
            .runtime()
            .spawn(watch(node.client(), path, Arc::clone(&seen)));
        PodWatch { seen, task }
    }

    pub fn seen(&self) -> Vec<PodSeen> {
        self.seen.lock().expect("seen").clone()
    }

    /// Each Pod as last seen, the deleted ones left out.
    pub fn current(&self) -> BTreeMap<String, Value> {
        current(&self.seen.lock().expect("seen"))
    }

    /// A function that names the Pods and their IPs as last seen (for [`LeaderPolls`]).
    pub fn ips(&self) -> impl Fn() -> Vec<(String, IpAddr)> + Send + 'static {
        let seen = Arc::clone(&self.seen);
        move || {
            current(&seen.lock().expect("seen"))
                .into_iter()
                .filter_map(|(name, pod)| {
                    Some((name, pod["status"]["podIP"].as_str()?.parse().ok()?))
                })
                .collect()
        }
    }

    /// After every write, the Pods that carry `key=value`: (time, names).
    pub fn label_timeline(&self, key: &str, value: &str) -> Vec<(u64, Vec<String>)> {
        let mut labels: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut out = Vec::new();
        for s in self.seen() {
            if s.event == "DELETED" {
                labels.remove(&s.name);
            } else {
                labels.insert(s.name.clone(), s.label(key).map(str::to_owned));
            }
            let with: Vec<String> = labels
                .iter()
                .filter(|(_, v)| v.as_deref() == Some(value))
                .map(|(n, _)| n.clone())
                .collect();
            out.push((s.at_ns, with));
        }
        out
    }

    /// The first write after `after_ns` that shows a Pod other than `except` with
    /// `key=value`, within `limit`: its time and the Pod.
    pub fn wait_label(
        &self,
        key: &str,
        value: &str,
        after_ns: u64,
        except: &str,
        limit: Duration,
    ) -> Option<(u64, String)> {
        crate::common::eventually(limit, || {
            self.seen().into_iter().find_map(|s| {
                (s.at_ns >= after_ns
                    && s.name != except
                    && s.event != "DELETED"
                    && s.label(key) == Some(value))
                .then(|| (s.at_ns, s.name.clone()))
            })
        })
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn current(seen: &[PodSeen]) -> BTreeMap<String, Value> {
    let mut pods = BTreeMap::new();
    for s in seen {
        if s.event == "DELETED" {
            pods.remove(&s.name);
        } else {
            pods.insert(s.name.clone(), s.object.clone());
        }
    }
    pods
}

async fn watch(client: kube::Client, path: String, seen: Seen) {
    let Ok(request) = Request::builder().uri(path).body(Vec::new()) else {
        return;
    };
    let Ok(events) = client.request_events::<Value>(request).await else {
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
        let entry = PodSeen {
            at_ns: mono_ns(),
            event: name.to_owned(),
            name: super::name(&object),
            object,
        };
        seen.lock().expect("seen").push(entry);
    }
}

/// One line of a sidecar's transition log.
#[derive(Clone, Debug)]
pub struct Transition {
    /// claim_start, deadline or claim_end.
    pub event: String,
    pub identity: String,
    pub pid: u64,
    pub token: u64,
    pub at_ns: u64,
    pub deadline_ns: Option<u64>,
    pub reason: Option<String>,
}

/// One tenure: from a claim_start to its claim_end, or to the last deadline it
/// promised when its process died without one (kill -9).
#[derive(Clone, Debug)]
pub struct Claim {
    pub identity: String,
    pub pid: u64,
    pub token: u64,
    pub start_ns: u64,
    /// claim_end's time; None while it leads (or when its process died).
    pub end_ns: Option<u64>,
    /// The latest deadline the claim announced.
    pub deadline_ns: u64,
    pub reason: Option<String>,
}

/// The transition logs of every Pod of the node, read from the host every 10 ms.
pub struct TransitionLogs {
    files: Arc<Mutex<BTreeMap<PathBuf, String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TransitionLogs {
    /// Reads `<kubelet>/pods/*/volumes/kubernetes.io~empty-dir/*/<file>`.
    pub fn start(node: &KubeNode, file: &str) -> TransitionLogs {
        let pods = node.state_dir().join("kubelet").join("pods");
        let files: Arc<Mutex<BTreeMap<PathBuf, String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s, file) = (Arc::clone(&files), Arc::clone(&stop), file.to_owned());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                for path in logs_under(&pods, &file) {
                    if let Ok(text) = std::fs::read_to_string(&path) {
                        let mut f = f.lock().expect("files");
                        let kept = f.entry(path).or_default();
                        if text.len() > kept.len() {
                            *kept = text;
                        }
                    }
                }
                // Pause: between reads of the transition logs.
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        TransitionLogs {
            files,
            stop,
            thread: Some(thread),
        }
    }

    /// Every line read so far, in time order.
    pub fn transitions(&self) -> Vec<Transition> {
        let files = self.files.lock().expect("files");
        let mut all: Vec<Transition> = files
            .values()
            .flat_map(|text| text.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| parse_transition(&v))
            .collect();
        all.sort_by_key(|t| t.at_ns);
        all
    }

    /// The tenures, in order of their start.
    pub fn claims(&self) -> Vec<Claim> {
        let mut claims: Vec<Claim> = Vec::new();
        for t in self.transitions() {
            let open = claims.iter_mut().rev().find(|c| {
                c.identity == t.identity
                    && c.pid == t.pid
                    && c.token == t.token
                    && c.end_ns.is_none()
            });
            match (t.event.as_str(), open) {
                ("claim_start", _) => claims.push(Claim {
                    identity: t.identity,
                    pid: t.pid,
                    token: t.token,
                    start_ns: t.at_ns,
                    end_ns: None,
                    deadline_ns: t.deadline_ns.unwrap_or(u64::MAX),
                    reason: None,
                }),
                ("deadline", Some(c)) => c.deadline_ns = t.deadline_ns.unwrap_or(c.deadline_ns),
                ("claim_end", Some(c)) => {
                    c.end_ns = Some(t.at_ns);
                    c.reason = t.reason;
                }
                _ => {}
            }
        }
        claims
    }

    /// Waits until `accept` holds for the transitions read so far.
    pub fn wait_for<T>(
        &self,
        limit: Duration,
        accept: impl Fn(&[Transition]) -> Option<T>,
    ) -> Option<T> {
        crate::common::eventually(limit, || accept(&self.transitions()))
    }
}

impl Drop for TransitionLogs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn logs_under(pods: &Path, file: &str) -> Vec<PathBuf> {
    let Ok(uids) = std::fs::read_dir(pods) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for uid in uids.flatten() {
        let volumes = uid.path().join("volumes").join("kubernetes.io~empty-dir");
        let Ok(dirs) = std::fs::read_dir(volumes) else {
            continue;
        };
        out.extend(dirs.flatten().map(|d| d.path().join(file)));
    }
    out
}

fn parse_transition(v: &Value) -> Option<Transition> {
    Some(Transition {
        event: v["event"].as_str()?.to_owned(),
        identity: v["identity"].as_str()?.to_owned(),
        pid: v["pid"].as_u64()?,
        token: v["token"].as_u64()?,
        at_ns: v["at_ns"].as_u64()?,
        deadline_ns: v["deadline_ns"].as_u64(),
        reason: v["reason"].as_str().map(str::to_owned),
    })
}

/// One round of `GET /leader` over every Pod with an IP.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub at_ns: u64,
    pub done_ns: u64,
    /// (Pod, its answer) for each Pod that answered.
    pub answers: Vec<(String, Value)>,
}

impl Sweep {
    /// The Pods whose sidecar said it leads.
    pub fn leaders(&self) -> Vec<&str> {
        self.answers
            .iter()
            .filter(|(_, v)| v["is_leader"] == true)
            .map(|(p, _)| p.as_str())
            .collect()
    }
}

/// `GET /leader` of every Pod through its IP, every `period`.
pub struct LeaderPolls {
    sweeps: Arc<Mutex<Vec<Sweep>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LeaderPolls {
    pub fn start(
        targets: impl Fn() -> Vec<(String, IpAddr)> + Send + 'static,
        port: u16,
        period: Duration,
    ) -> LeaderPolls {
        let sweeps: Arc<Mutex<Vec<Sweep>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (out, s) = (Arc::clone(&sweeps), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut next = Instant::now();
            while !s.load(Ordering::SeqCst) {
                let at_ns = mono_ns();
                let answers = targets()
                    .into_iter()
                    .filter_map(|(pod, ip)| {
                        let (code, body) = crate::common::harness::http::get_from(
                            SocketAddr::new(ip, port),
                            "/leader",
                        )?;
                        (code == 200).then(|| Some((pod, serde_json::from_str(&body).ok()?)))?
                    })
                    .collect();
                let sweep = Sweep {
                    at_ns,
                    done_ns: mono_ns(),
                    answers,
                };
                out.lock().expect("sweeps").push(sweep);
                next += period;
                // Pause: until the next sweep of the period.
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        LeaderPolls {
            sweeps,
            stop,
            thread: Some(thread),
        }
    }

    pub fn sweeps(&self) -> Vec<Sweep> {
        self.sweeps.lock().expect("sweeps").clone()
    }
}

impl Drop for LeaderPolls {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls every millisecond (up to `limit`) until each of `pids` is gone or a zombie:
/// the time each one ended, None for one that outlived `limit`.
pub fn watch_exits(pids: Vec<u32>, limit: Duration) -> JoinHandle<Vec<Option<u64>>> {
    std::thread::spawn(move || {
        let end = Instant::now() + limit;
        let mut gone: Vec<Option<u64>> = vec![None; pids.len()];
        while Instant::now() < end && gone.iter().any(Option::is_none) {
            for (i, pid) in pids.iter().enumerate() {
                if gone[i].is_none()
                    && matches!(crate::common::process_state(*pid), None | Some('Z'))
                {
                    gone[i] = Some(mono_ns());
                }
            }
            // Pause: 1 ms, the resolution of the exit times measured.
            std::thread::sleep(Duration::from_millis(1));
        }
        gone
    })
}

/// The longest stretch within [`from_ns`, `to_ns`] that no claim covers (a claim
/// without an end covers up to its last deadline), and the most claims at once.
pub fn claim_gaps(claims: &[Claim], from_ns: u64, to_ns: u64) -> (u64, usize) {
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for c in claims {
        let end = c.end_ns.unwrap_or(c.deadline_ns).min(to_ns);
        if end > from_ns && c.start_ns < to_ns {
            edges.push((c.start_ns.max(from_ns), 1));
            edges.push((end, -1));
        }
    }
    // At one instant an end comes before a start: touching tenures do not overlap.
    edges.sort();
    let (mut open, mut most, mut longest, mut idle_since) = (0i32, 0usize, 0u64, Some(from_ns));
    for (at, step) in edges {
        if open == 0 {
            if let Some(since) = idle_since.take() {
                longest = longest.max(at.saturating_sub(since));
            }
        }
        open += step;
        most = most.max(open.max(0) as usize);
        if open == 0 {
            idle_since = Some(at);
        }
    }
    if let Some(since) = idle_since {
        longest = longest.max(to_ns.saturating_sub(since));
    }
    (longest, most)
}
