//! The election checker: several real sidecars compete on one backend while
//! faults are injected; invariant 1 is verified from the processes' own transition
//! logs and from outside, fencing tokens must strictly grow, and a new leader must
//! appear within a bound after each fault.
//!
//! Every later backend runs the same checker with its own server controls.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{eventually, http, Sidecar};

/// Faults of the store itself (absent for the file backend). For a store of several
/// nodes, `pause`/`resume` act on enough nodes that no majority is left, and the
/// `*_node` calls act on one node.
pub trait ServerControl {
    fn pause(&mut self);
    fn resume(&mut self);
    fn restart(&mut self);
    fn nodes(&self) -> usize {
        1
    }
    fn pause_node(&mut self, _node: usize) {}
    fn resume_node(&mut self, _node: usize) {}
    fn restart_node(&mut self, _node: usize) {}
    /// The node that currently leads the store's own consensus, if it has one.
    fn leader_node(&self) -> Option<usize> {
        None
    }
}

/// A store made of member processes the harness started (etcd members, ZooKeeper
/// servers): every fault of [`ServerControl`] follows from starting, stopping and
/// signalling them, so those stores implement only this.
pub trait Members {
    fn count(&self) -> usize;
    /// The member's pid while it runs.
    fn pid(&self, i: usize) -> Option<u32>;
    /// kill -9 and reap.
    fn kill(&mut self, i: usize);
    /// Start the member again from its own data directory.
    fn spawn(&mut self, i: usize);
    /// Wait until the member serves clients.
    fn wait_ready(&self, i: usize);
    /// The member that leads the store's own consensus, if any does.
    fn consensus_leader(&self) -> Option<usize>;
}

fn signal_member(m: &impl Members, i: usize, sig: i32) {
    if let Some(pid) = m.pid(i) {
        super::send_signal(pid, sig);
    }
}

/// Teardown for a `Drop`: wake stopped members, then kill them all.
pub fn stop_members(m: &mut impl Members) {
    for i in 0..m.count() {
        signal_member(m, i, libc::SIGCONT);
        m.kill(i);
    }
}

impl<T: Members> ServerControl for T {
    fn pause(&mut self) {
        for i in 0..self.count() / 2 + 1 {
            signal_member(self, i, libc::SIGSTOP);
        }
    }
    fn resume(&mut self) {
        for i in 0..self.count() {
            signal_member(self, i, libc::SIGCONT);
        }
    }
    fn restart(&mut self) {
        for i in 0..self.count() {
            self.kill(i);
        }
        for i in 0..self.count() {
            self.spawn(i);
        }
        for i in 0..self.count() {
            self.wait_ready(i);
        }
    }
    fn nodes(&self) -> usize {
        self.count()
    }
    fn pause_node(&mut self, node: usize) {
        signal_member(self, node, libc::SIGSTOP);
    }
    fn resume_node(&mut self, node: usize) {
        signal_member(self, node, libc::SIGCONT);
    }
    fn restart_node(&mut self, node: usize) {
        self.kill(node);
        self.spawn(node);
        self.wait_ready(node);
    }
    fn leader_node(&self) -> Option<usize> {
        self.consensus_leader()
    }
}

/// Several independent Redis servers (Redlock).
pub struct RedisCluster {
    pub nodes: Vec<super::redis_server::RedisServer>,
}

impl RedisCluster {
    pub fn start(n: usize) -> Self {
        RedisCluster {
            nodes: (0..n)
                .map(|_| super::redis_server::RedisServer::start())
                .collect(),
        }
    }

    /// Nodes that keep their data across a kill -9 (append-only file, fsync always).
    pub fn start_persistent(n: usize) -> Self {
        RedisCluster {
            nodes: (0..n)
                .map(|_| super::redis_server::RedisServer::start_persistent())
                .collect(),
        }
    }

    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Per-candidate links to every node, for a Redlock election with this ttl.
    pub fn links(&self, ttl: &'static str, election: &'static str) -> Links {
        Links {
            nodes: self
                .nodes
                .iter()
                .map(|n| std::net::SocketAddr::from(([127, 0, 0, 1], n.port)))
                .collect(),
            args: Box::new(move |proxies| {
                let urls = proxies
                    .iter()
                    .map(|a| format!("redis://{a}"))
                    .collect::<Vec<_>>()
                    .join(",");
                super::SidecarArgs::redlock(&urls)
                    .ttl(ttl)
                    .election(election)
                    .build()
            }),
        }
    }

    fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }
}

impl ServerControl for RedisCluster {
    fn pause(&mut self) {
        for n in self.nodes.iter().take(self.majority()) {
            n.pause();
        }
    }
    fn resume(&mut self) {
        for n in &self.nodes {
            n.resume();
        }
    }
    fn restart(&mut self) {
        for n in self.nodes.iter_mut() {
            n.restart();
        }
    }
    fn nodes(&self) -> usize {
        self.nodes.len()
    }
    fn pause_node(&mut self, node: usize) {
        self.nodes[node].pause();
    }
    fn resume_node(&mut self, node: usize) {
        self.nodes[node].resume();
    }
    fn restart_node(&mut self, node: usize) {
        self.nodes[node].restart();
    }
}

impl ServerControl for super::redis_server::RedisServer {
    fn pause(&mut self) {
        super::redis_server::RedisServer::pause(self)
    }
    fn resume(&mut self) {
        super::redis_server::RedisServer::resume(self)
    }
    fn restart(&mut self) {
        super::redis_server::RedisServer::restart(self)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGTERM to the leader.
    Graceful,
    /// SIGKILL to the leader.
    Kill9,
    /// POST /release to the leader.
    Release,
    /// SIGSTOP the leader past its ttl, then SIGCONT.
    PauseLeader,
    /// SIGSTOP the store past the ttl, then SIGCONT.
    PauseServer,
    /// kill -9 the store and start it again (same port and data directory).
    RestartServer,
    /// SIGSTOP a minority of the store's nodes past the ttl: a leader must remain or
    /// appear within the crash bound; then SIGCONT.
    PauseMinority,
    /// kill -9 one node of the store and start it again (it loses its data unless the
    /// node persists): a leader must remain or appear within the crash bound.
    RestartOneNode,
    /// Cut the leader off from the store (bytes held both ways, connections kept open)
    /// past its ttl: another candidate leads within the crash bound; then heal.
    PartitionLeader,
    /// Cut a follower off from the store for a ttl: the leader stays; then heal.
    PartitionFollower,
    /// Delay every byte between the leader and the store by more than half its claim:
    /// another candidate leads within about 2 × ttl; then heal.
    SlowLeader,
    /// The leader's requests reach the store but its replies are held (a one-way
    /// partition): it must step down by its deadline and another candidate lead.
    LeaderRepliesHeld,
    /// Delete the leader's record behind its back (`Extras::tamper`).
    TamperDelete,
    /// Overwrite the leader's record with another client's (`Extras::tamper`).
    TamperOverwrite,
    /// Cut one node of a replicated store off from the others (`Extras::isolate`).
    IsolateStoreNode,
    /// Cut the leader off from a minority of the store's nodes, and one follower from
    /// another minority (their links to the rest stay up): a leader remains or appears;
    /// then the leader stops gracefully and another takes over within the crash bound,
    /// while those minorities are still cut (Redlock: quorums of the two overlap).
    MinorityCut,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::Graceful => "graceful",
            Fault::Kill9 => "kill-9",
            Fault::Release => "release",
            Fault::PauseLeader => "sigstop-leader",
            Fault::PauseServer => "pause-store",
            Fault::RestartServer => "restart-store",
            Fault::PauseMinority => "pause-minority",
            Fault::RestartOneNode => "restart-node",
            Fault::PartitionLeader => "partition-leader",
            Fault::PartitionFollower => "partition-follower",
            Fault::SlowLeader => "slow-leader",
            Fault::LeaderRepliesHeld => "replies-held",
            Fault::TamperDelete => "tamper-delete",
            Fault::TamperOverwrite => "tamper-overwrite",
            Fault::IsolateStoreNode => "isolate-node",
            Fault::MinorityCut => "minority-cut",
        }
    }
}

/// Backend flags from a sidecar's proxy addresses.
pub type LinkArgs = Box<dyn Fn(&[String]) -> Vec<String>>;

/// Per-candidate links to the store: every sidecar reaches every store node through
/// its own [`FaultProxy`], so one candidate's link can be cut or slowed alone.
pub struct Links {
    /// The store's nodes (client ports).
    pub nodes: Vec<std::net::SocketAddr>,
    /// The backend flags for a sidecar whose node addresses (`127.0.0.1:port`, in the
    /// order of `nodes`) are the given proxies.
    pub args: LinkArgs,
}

/// Optional parts of a run beyond [`ElectionSpec`].
#[derive(Default)]
pub struct Extras {
    /// Links through proxies (needed by the partition and slow-link faults).
    pub links: Option<Links>,
    /// The store's own record of holders, checked against the claims afterwards.
    pub store: Option<super::recorder::Recorder>,
    /// Changes the leader's record behind its back (`TamperDelete`/`TamperOverwrite`).
    #[allow(clippy::type_complexity)]
    pub tamper: Option<Box<dyn FnMut(Fault)>>,
    /// Cuts store node `i` off from the others (`true`) or heals it (`false`).
    #[allow(clippy::type_complexity)]
    pub isolate: Option<Box<dyn FnMut(usize, bool)>>,
    /// Nodes that `IsolateStoreNode` may pick, round robin (all when empty).
    pub isolate_nodes: Vec<usize>,
    /// Extra environment for every sidecar (the self-tests' misbehaviour switches).
    pub sidecar_env: Vec<(String, String)>,
    /// Extra flags for the sidecar of this name (`cand-<slot>-g<generation>`).
    #[allow(clippy::type_complexity)]
    pub sidecar_args: Option<Box<dyn Fn(&str) -> Vec<String>>>,
}

/// How long a tampered record may go on being claimed after another tenure began
/// (DESIGN invariant 9).
pub const TAMPER_TOLERANCE: Duration = Duration::from_millis(100);

pub struct ElectionSpec<'a> {
    /// Backend flags (`--backend …`, endpoints, `--ttl …`), without identity or listener.
    pub args: Vec<String>,
    pub ttl: Duration,
    pub candidates: usize,
    pub rounds: Vec<Fault>,
    pub server: Option<&'a mut dyn ServerControl>,
    /// Whether another candidate can lead while the leader is paused (not under flock).
    pub takeover_while_leader_paused: bool,
    /// Whether a server restart loses the lease (no persistence): then a new tenure
    /// must follow the restart, after the old claim has run out.
    pub restart_loses_data: bool,
}

#[derive(Debug, Default)]
pub struct Report {
    pub claims: usize,
    pub observations: usize,
    pub graceful_ms: Vec<f64>,
    pub crash_ms: Vec<f64>,
    pub node_faults: usize,
    /// Fault name → how long until another leader answered, in ms (for a store-wide
    /// outage, `pause-store` and `restart-store`: from the store's recovery to a leader).
    pub takeover_ms: std::collections::BTreeMap<&'static str, Vec<f64>>,
    /// Fault name → rounds run.
    pub faults: std::collections::BTreeMap<&'static str, usize>,
    /// Distinct tenures whose holder changed (claims with a new token).
    pub transitions: usize,
    /// The longest any claim ran past the store handing the lease on, in ms (negative:
    /// the smallest margin left), when a store recorder ran. Claims whose record was
    /// tampered with are left out (see `longest_past_store_tampered_ms`).
    pub longest_past_store_ms: Option<f64>,
    /// The same over the claims whose record was tampered with (allowed up to
    /// [`TAMPER_TOLERANCE`] past the next holder).
    pub longest_past_store_tampered_ms: Option<f64>,
    /// Claims the store recorder could not judge (it was reconnecting meanwhile).
    pub unjudged_by_store: usize,
    /// The first and the last tenure's fencing token (tokens grow in between).
    pub first_token: Option<u64>,
    pub last_token: Option<u64>,
}

impl Report {
    /// Notes a takeover `since` the fault (or the store's recovery).
    fn took_over(&mut self, fault: Fault, since: Instant) {
        self.takeover_ms
            .entry(fault.name())
            .or_default()
            .push(since.elapsed().as_secs_f64() * 1e3);
    }
}

/// One answer seen from outside.
#[derive(Clone, Debug)]
struct Observation {
    port: u16,
    sent: Instant,
    recv: Instant,
    leader: bool,
    /// Only `/leader` answers carry the token; `/is-leader` answers do not.
    token: Option<u64>,
}

/// Polls every live sidecar's `/leader` and `/is-leader`, one thread per slot.
struct Poller {
    ports: Arc<Mutex<Vec<Option<u16>>>>,
    seen: Arc<Mutex<Vec<Observation>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Poller {
    fn start(slots: usize) -> Poller {
        let ports = Arc::new(Mutex::new(vec![None; slots]));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..slots)
            .map(|slot| {
                let (ports, seen, stop) = (ports.clone(), seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut round = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        round += 1;
                        let port = ports.lock().expect("ports")[slot];
                        if let Some(port) = port {
                            let path = if round.is_multiple_of(2) {
                                "/leader"
                            } else {
                                "/is-leader"
                            };
                            let sent = Instant::now();
                            if let Some((code, body)) = http::get(port, path) {
                                let recv = Instant::now();
                                let obs = if path == "/leader" {
                                    let v: serde_json::Value =
                                        serde_json::from_str(&body).unwrap_or_default();
                                    Observation {
                                        port,
                                        sent,
                                        recv,
                                        leader: v["is_leader"].as_bool().unwrap_or(false),
                                        token: v["fencing_token"].as_u64(),
                                    }
                                } else {
                                    assert!(
                                        (code == 200 && body == "true")
                                            || (code == 503 && body == "false"),
                                        "/is-leader answered {code} {body:?}"
                                    );
                                    Observation {
                                        port,
                                        sent,
                                        recv,
                                        leader: code == 200,
                                        token: None,
                                    }
                                };
                                seen.lock().expect("seen").push(obs);
                            }
                        }
                        std::thread::sleep(Duration::from_millis(3));
                    }
                })
            })
            .collect();
        Poller {
            ports,
            seen,
            stop,
            threads,
        }
    }

    fn set(&self, slot: usize, port: Option<u16>) {
        self.ports.lock().expect("ports")[slot] = port;
    }

    /// Stops the threads and returns what they saw. A poller thread that panicked
    /// (an `/is-leader` answer that broke the contract, say) fails the test here:
    /// its assertion must not just end that slot's polling.
    fn finish(self) -> Vec<Observation> {
        self.stop.store(true, Ordering::SeqCst);
        let failures: Vec<String> = self
            .threads
            .into_iter()
            .filter_map(|t| t.join().err())
            .map(|panic| panic_message(&*panic))
            .collect();
        assert!(
            failures.is_empty(),
            "a poller thread failed: {}",
            failures.join("; ")
        );
        let seen = self.seen.lock().expect("seen");
        seen.clone()
    }
}

struct Election<'a> {
    spec: ElectionSpec<'a>,
    extras: Extras,
    /// slot → its proxies, one per store node (with `Extras::links`).
    proxies: Vec<Vec<super::faults::FaultProxy>>,
    /// CLOCK_MONOTONIC ns of each tampering.
    tampered: Vec<u64>,
    /// pid → CLOCK_MONOTONIC ns just before it was sent SIGKILL: a dead process
    /// asserts nothing, so its claim ends there at the latest.
    killed: HashMap<u64, u64>,
    dir: tempfile::TempDir,
    slots: Vec<Sidecar>,
    poller: Option<Poller>,
    generation: usize,
    /// Set by a fault of the store itself: the next handover first waits for the
    /// leader to renew (its client may still be reconnecting to the store, and a
    /// release that cannot reach the store hands over only by expiry).
    store_faulted: bool,
}

impl Election<'_> {
    fn log_path(&self, slot: usize) -> PathBuf {
        self.dir.path().join(format!("slot-{slot}.jsonl"))
    }

    fn spawn(&mut self, slot: usize) -> Sidecar {
        self.generation += 1;
        let mut args = self.spec.args.clone();
        if let Some(links) = &self.extras.links {
            while self.proxies.len() <= slot {
                self.proxies.push(
                    links
                        .nodes
                        .iter()
                        .map(|n| super::faults::FaultProxy::start(*n))
                        .collect(),
                );
            }
            let addrs: Vec<String> = self.proxies[slot].iter().map(|p| p.addr()).collect();
            args = (links.args)(&addrs);
        }
        args.extend([
            "--transition-log".to_owned(),
            self.log_path(slot).display().to_string(),
            "--enable-release-endpoint".to_owned(),
        ]);
        let name = format!("cand-{slot}-g{}", self.generation);
        if let Some(extra) = &self.extras.sidecar_args {
            args.extend(extra(&name));
        }
        let sidecar =
            Sidecar::spawn_with_env(&name, self.dir.path(), &args, &self.extras.sidecar_env);
        assert!(
            sidecar.wait_listening(Duration::from_secs(10)),
            "{name} never listened:\n{}",
            sidecar.stderr()
        );
        if let Some(p) = &self.poller {
            p.set(slot, Some(sidecar.port));
        }
        sidecar
    }

    fn respawn(&mut self, slot: usize) {
        if let Some(p) = &self.poller {
            p.set(slot, None);
        }
        self.slots[slot].kill();
        let fresh = self.spawn(slot);
        self.slots[slot] = fresh;
    }

    /// The first live sidecar (other than `except`) that says it leads, within `limit`.
    fn find_leader(&self, except: Option<u16>, limit: Duration) -> Option<(usize, u64)> {
        eventually(limit, || {
            self.slots.iter().enumerate().find_map(|(i, s)| {
                if !s.is_running() || Some(s.port) == except {
                    return None;
                }
                let v = s.leader()?;
                (v["is_leader"] == true).then(|| (i, v["fencing_token"].as_u64().unwrap_or(0)))
            })
        })
    }

    /// A leader, once every other running candidate reports it follows that leader.
    fn settled(&self, limit: Duration) -> Option<(usize, u64)> {
        eventually(limit, || {
            let views: Vec<_> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.is_running())
                .map(|(i, s)| Some((i, s.leader()?)))
                .collect::<Option<_>>()?;
            let (li, lv) = views.iter().find(|(_, v)| v["is_leader"] == true)?;
            let all_follow = views.iter().all(|(i, v)| {
                i == li || (v["state"] == "follower" && v["leader"] == lv["identity"])
            });
            all_follow.then(|| (*li, lv["fencing_token"].as_u64().unwrap_or(0)))
        })
    }

    /// [`Self::settled`], once the leader's remaining claim was seen to grow (a renew
    /// answered by the store).
    fn renewed(&self, limit: Duration) -> Option<(usize, u64)> {
        let mut last: Option<(usize, u64, u64)> = None;
        eventually(limit, || {
            let (li, token) = self.settled(Duration::ZERO)?;
            let left = self.slots[li].leader()?["lease_expires_in_ms"].as_u64()?;
            match last.replace((li, token, left)) {
                Some((i, t, before)) if (i, t) == (li, token) && left > before => Some((li, token)),
                _ => None,
            }
        })
    }

    fn nobody_leads(&self) -> Result<(), String> {
        for s in self.slots.iter().filter(|s| s.is_running()) {
            if let Some((200, _)) = http::get(s.port, "/is-leader") {
                return Err(format!("{} says it leads", s.name));
            }
        }
        Ok(())
    }

    /// Sets every link of one slot.
    fn links(&self, slot: usize, link: impl Fn() -> super::faults::Link) {
        for p in self.proxies.get(slot).into_iter().flatten() {
            p.set(link());
        }
    }

    /// Waits for a leader other than the one on `old_port`, and records how long it took.
    fn takeover(
        &self,
        fault: Fault,
        old_port: u16,
        limit: Duration,
        report: &mut Report,
    ) -> Option<(usize, u64)> {
        let t0 = Instant::now();
        let new = self.find_leader(Some(old_port), limit);
        if new.is_some() {
            report
                .takeover_ms
                .entry(fault.name())
                .or_default()
                .push(t0.elapsed().as_secs_f64() * 1e3);
        }
        new
    }

    fn round(&mut self, fault: Fault, report: &mut Report) {
        *report.faults.entry(fault.name()).or_default() += 1;
        let ttl = self.spec.ttl;
        let crash_bound = ttl + Duration::from_secs(1);
        let (li, token) = if matches!(fault, Fault::Graceful | Fault::Release) {
            // A handover in milliseconds is promised to followers that follow: after a
            // store fault a candidate may still be backing off or sitting out, and the
            // leader that released would then (rightly) take its lease back.
            let limit = ttl * 3 + Duration::from_secs(2);
            if std::mem::take(&mut self.store_faulted) {
                self.renewed(limit).unwrap_or_else(|| {
                    panic!("no leader followed by every other candidate renewed its claim before {fault:?} (after a fault of the store)")
                })
            } else {
                self.settled(limit).unwrap_or_else(|| {
                    panic!("no leader with every other candidate following it before {fault:?}")
                })
            }
        } else {
            self.find_leader(None, ttl * 3 + Duration::from_secs(2))
                .unwrap_or_else(|| panic!("no leader before {fault:?}"))
        };
        let old_port = self.slots[li].port;
        self.store_faulted |= matches!(
            fault,
            Fault::PauseServer
                | Fault::RestartServer
                | Fault::PauseMinority
                | Fault::RestartOneNode
                | Fault::IsolateStoreNode
        );
        match fault {
            Fault::Graceful => {
                let t0 = Instant::now();
                self.slots[li].signal(libc::SIGTERM);
                let new = self.find_leader(Some(old_port), Duration::from_secs(1));
                assert!(new.is_some(), "no new leader within 1 s of a graceful stop");
                report.graceful_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                report.took_over(fault, t0);
                let status = self.slots[li].wait_exit(Duration::from_secs(5));
                assert!(
                    status.is_some_and(|s| s.success()),
                    "graceful stop exited with {status:?}"
                );
                self.respawn(li);
            }
            Fault::Kill9 => {
                let t0 = Instant::now();
                self.killed.insert(
                    u64::from(self.slots[li].pid),
                    leasekeeper::clock::monotonic_now_ns(),
                );
                self.slots[li].kill();
                if let Some(p) = &self.poller {
                    p.set(li, None);
                }
                let new = self.find_leader(Some(old_port), crash_bound);
                assert!(new.is_some(), "no new leader within ttl + 1 s of kill -9");
                report.crash_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                report.took_over(fault, t0);
                self.respawn(li);
            }
            Fault::Release => {
                let t0 = Instant::now();
                let answer = http::post(old_port, "/release");
                assert!(
                    matches!(answer, Some((200, _))),
                    "POST /release answered {answer:?}"
                );
                let new = self.find_leader(Some(old_port), Duration::from_secs(1));
                assert!(new.is_some(), "no new leader within 1 s of a release");
                report.took_over(fault, t0);
            }
            Fault::PauseLeader => {
                // A connection the leader has already accepted: the question asked on it
                // while the process is stopped is the first thing it answers on waking,
                // before any of its timers (the elector's included) have run.
                let mut early = http::KeepAlive::open(old_port).expect("connect to the leader");
                early.send("/leader").expect("send");
                let warm = early
                    .receive()
                    .expect("the leader answers before the pause");
                assert_eq!(warm.0, 200);
                self.slots[li].signal(libc::SIGSTOP);
                let t0 = Instant::now();
                early.send("/leader").expect("send while paused");
                if self.spec.takeover_while_leader_paused {
                    let new = self.find_leader(Some(old_port), crash_bound);
                    assert!(
                        new.is_some(),
                        "no new leader within ttl + 1 s of pausing the leader"
                    );
                    report.took_over(fault, t0);
                }
                let rest = (ttl + Duration::from_millis(300)).saturating_sub(t0.elapsed());
                std::thread::sleep(rest);
                self.slots[li].signal(libc::SIGCONT);
                // Its first answer after waking must not claim the old tenure.
                let (code, body) = early.receive().expect("the woken leader answers");
                assert_eq!(code, 200);
                let first: serde_json::Value = serde_json::from_str(&body).expect("json");
                // Where nobody else can take the lease meanwhile (a flock held by the
                // stopped process), a leader that renewed on waking, before this answer,
                // rightly goes on with its tenure: its answer then shows a deadline
                // from that renewal. The old claim itself has run out by now, so an
                // answer from it shows no time left.
                let renewed_on_waking = !self.spec.takeover_while_leader_paused
                    && first["lease_expires_in_ms"]
                        .as_u64()
                        .is_some_and(|ms| ms > 0);
                let stale = first["is_leader"] == true
                    && first["fencing_token"].as_u64() == Some(token)
                    && !renewed_on_waking;
                assert!(
                    !stale,
                    "a leader paused past its ttl answered as leader of its old tenure: {first}"
                );
                if self.spec.takeover_while_leader_paused {
                    assert_eq!(
                        first["is_leader"], false,
                        "the woken leader answered as leader: {first}"
                    );
                }
            }
            Fault::PauseServer => {
                let server = self.spec.server.as_mut().expect("a server to pause");
                server.pause();
                std::thread::sleep(ttl + Duration::from_millis(300));
                let quiet = self.nobody_leads();
                let server = self.spec.server.as_mut().expect("a server to resume");
                server.resume();
                let t0 = Instant::now();
                quiet.unwrap_or_else(|e| panic!("with the store paused past the ttl, {e}"));
                let back = self.find_leader(None, crash_bound + ttl);
                assert!(
                    back.is_some(),
                    "no leader within 2 ttl + 1 s after the store resumed"
                );
                report.took_over(fault, t0);
            }
            Fault::RestartServer => {
                if self.spec.restart_loses_data {
                    // Data loss is detected by candidates that saw a token before it
                    // (a sidecar started since has seen none: a documented limit), so
                    // every sidecar must have seen the holder first.
                    let all_saw = eventually(ttl * 3, || {
                        self.slots
                            .iter()
                            .filter(|s| s.is_running())
                            .all(|s| s.leader().is_some_and(|v| v["fencing_token"].is_u64()))
                            .then_some(())
                    });
                    assert!(all_saw.is_some(), "not every sidecar saw the holder");
                }
                let server = self.spec.server.as_mut().expect("a server to restart");
                server.restart();
                let t0 = Instant::now();
                let bound = crash_bound + ttl;
                let back = if self.spec.restart_loses_data {
                    eventually(bound, || {
                        self.find_leader(None, Duration::ZERO)
                            .filter(|(_, t)| *t > token)
                    })
                } else {
                    self.find_leader(None, bound)
                };
                assert!(
                    back.is_some(),
                    "no leader within 2 ttl + 1 s after the store restarted"
                );
                report.took_over(fault, t0);
            }
            Fault::PauseMinority => {
                let server = self.spec.server.as_mut().expect("a store of several nodes");
                let n = server.nodes();
                let minority = (n - 1) / 2;
                let first = report.node_faults % n;
                // Not the store's own consensus leader: etcd 3.4 before 3.4.28 revokes
                // live leases when a paused raft leader resumes (etcd-io/etcd#12528),
                // which this checker reports as two leaders at once. Killing that
                // leader is tested (RestartOneNode); pausing it is the server's bug.
                let avoid = server.leader_node();
                let paused: Vec<usize> = (0..n)
                    .map(|k| (first + k) % n)
                    .filter(|i| Some(*i) != avoid)
                    .take(minority)
                    .collect();
                for &i in &paused {
                    server.pause_node(i);
                }
                report.node_faults += 1;
                // An acquisition while those nodes hang: the majority must decide alone.
                let t0 = Instant::now();
                self.slots[li].signal(libc::SIGTERM);
                // A client may have been talking to a hanging node and has to notice it:
                // bounded like a crash, not like a clean handover.
                let new = self.find_leader(Some(old_port), crash_bound);
                if new.is_some() {
                    report.took_over(fault, t0);
                }
                let stopped = self.slots[li].wait_exit(Duration::from_secs(5));
                std::thread::sleep(ttl + Duration::from_millis(300));
                let during = self.find_leader(None, crash_bound);
                let server = self.spec.server.as_mut().expect("a store of several nodes");
                for &i in &paused {
                    server.resume_node(i);
                }
                assert!(new.is_some(), "no new leader within ttl + 1 s of a graceful stop with {minority} of {n} nodes hanging");
                assert!(
                    stopped.is_some_and(|s| s.success()),
                    "graceful stop exited with {stopped:?}"
                );
                assert!(
                    during.is_some(),
                    "no leader while only a minority of nodes was paused"
                );
                self.respawn(li);
            }
            Fault::RestartOneNode => {
                let server = self.spec.server.as_mut().expect("a store of several nodes");
                // The store's own leader when it has one: the harshest member to lose.
                let node = server
                    .leader_node()
                    .unwrap_or(report.node_faults % server.nodes());
                server.restart_node(node);
                report.node_faults += 1;
                let after = self.find_leader(None, crash_bound);
                assert!(
                    after.is_some(),
                    "no leader within ttl + 1 s after one node restarted"
                );
            }
            Fault::PartitionLeader | Fault::LeaderRepliesHeld => {
                use super::faults::Link;
                assert!(!self.proxies.is_empty(), "{fault:?} needs Extras::links");
                self.links(li, || {
                    if fault == Fault::PartitionLeader {
                        Link::Blackhole
                    } else {
                        Link::HoldReplies
                    }
                });
                // Its held requests (renewals included) may still reach the store after
                // the cut ends: a one-way cut can keep the lease alive at the store
                // until the leader gives up and its release lands.
                let new = self.takeover(fault, old_port, crash_bound + ttl, report);
                self.links(li, || Link::Pass);
                assert!(
                    new.is_some(),
                    "no new leader within 2 ttl + 1 s of {fault:?} of the leader"
                );
            }
            Fault::SlowLeader => {
                use super::faults::Link;
                assert!(!self.proxies.is_empty(), "SlowLeader needs Extras::links");
                // Each way more than a third of the ttl: a round trip longer than the
                // backend timeout, and proof that always comes too late.
                let delay = ttl.mul_f64(0.4);
                self.links(li, || Link::Delay(delay));
                // About 2 ttl; ZooKeeper's client keeps its session alive with late
                // reconnects for one session timeout more (see the zookeeper suite).
                let new = self.takeover(fault, old_port, ttl * 3 + Duration::from_secs(2), report);
                std::thread::sleep(delay * 2);
                self.links(li, || Link::Pass);
                assert!(
                    new.is_some(),
                    "no new leader within 3 ttl + 2 s of slowing the leader's link"
                );
            }
            Fault::MinorityCut => {
                use super::faults::Link;
                let n = self.proxies.get(li).map_or(0, Vec::len);
                let minority = n.saturating_sub(1) / 2;
                assert!(
                    minority > 0,
                    "MinorityCut needs Extras::links to 3 or more nodes"
                );
                let first = report.node_faults % n;
                report.node_faults += 1;
                let for_leader: Vec<usize> = (0..minority).map(|k| (first + k) % n).collect();
                let for_follower: Vec<usize> =
                    (0..minority).map(|k| (first + minority + k) % n).collect();
                let fi = (li + 1) % self.slots.len();
                let set = |e: &Self, slot: usize, nodes: &[usize], link: fn() -> Link| {
                    for &node in nodes {
                        if let Some(p) = e.proxies.get(slot).and_then(|ps| ps.get(node)) {
                            p.set(link());
                        }
                    }
                };
                set(self, li, &for_leader, || Link::Blackhole);
                set(self, fi, &for_follower, || Link::Blackhole);
                std::thread::sleep(ttl + Duration::from_millis(300));
                let during = self.find_leader(None, crash_bound);
                // The leader leaves; its release reaches only the nodes it still sees.
                self.slots[li].signal(libc::SIGTERM);
                let new = self.takeover(fault, old_port, crash_bound, report);
                let stopped = self.slots[li].wait_exit(Duration::from_secs(5));
                set(self, li, &for_leader, || Link::Pass);
                set(self, fi, &for_follower, || Link::Pass);
                assert!(
                    during.is_some(),
                    "no leader while only minorities were cut from two candidates"
                );
                assert!(
                    new.is_some(),
                    "no new leader within ttl + 1 s of a graceful stop with {minority} of {n} nodes cut off from the leader"
                );
                assert!(
                    stopped.is_some_and(|s| s.success()),
                    "graceful stop exited with {stopped:?}"
                );
                self.respawn(li);
            }
            Fault::PartitionFollower => {
                use super::faults::Link;
                assert!(
                    !self.proxies.is_empty(),
                    "PartitionFollower needs Extras::links"
                );
                let fi = (li + 1) % self.slots.len();
                self.links(fi, || Link::Blackhole);
                std::thread::sleep(ttl + Duration::from_millis(300));
                let still = self.find_leader(None, crash_bound);
                self.links(fi, || Link::Pass);
                assert!(
                    still.is_some(),
                    "no leader while only a follower was cut off"
                );
            }
            Fault::TamperDelete | Fault::TamperOverwrite => {
                let tamper = self
                    .extras
                    .tamper
                    .as_mut()
                    .unwrap_or_else(|| panic!("{fault:?} needs Extras::tamper"));
                self.tampered.push(leasekeeper::clock::monotonic_now_ns());
                tamper(fault);
                let bound = crash_bound + ttl;
                let t0 = Instant::now();
                let back = eventually(bound, || {
                    self.find_leader(None, Duration::ZERO)
                        .filter(|(_, t)| *t > token)
                });
                assert!(
                    back.is_some(),
                    "no leader with a token above {token} within 2 ttl + 1 s of {fault:?}"
                );
                report
                    .takeover_ms
                    .entry(fault.name())
                    .or_default()
                    .push(t0.elapsed().as_secs_f64() * 1e3);
            }
            Fault::IsolateStoreNode => {
                let n = self.extras.isolate_nodes.len();
                let node = if n == 0 {
                    report.node_faults % self.spec.server.as_ref().map_or(1, |s| s.nodes())
                } else {
                    self.extras.isolate_nodes[report.node_faults % n]
                };
                report.node_faults += 1;
                let isolate = self
                    .extras
                    .isolate
                    .as_mut()
                    .expect("IsolateStoreNode needs Extras::isolate");
                isolate(node, true);
                // The majority goes on: a leader remains or appears within the bound,
                // wherever the sidecars were connected.
                std::thread::sleep(ttl + Duration::from_millis(300));
                let during = self.find_leader(None, crash_bound + ttl);
                let isolate = self.extras.isolate.as_mut().expect("isolate");
                isolate(node, false);
                assert!(
                    during.is_some(),
                    "no leader while store node {node} was cut off from the others"
                );
            }
        }
    }
}

/// Runs the rounds, then checks invariant 1 from inside and outside and token order.
pub fn run(spec: ElectionSpec<'_>) -> Report {
    run_with(spec, Extras::default())
}

/// The short link-and-store fault run the backend suites share: `candidates` = 3,
/// every sidecar reaching the one store `node` through its own proxy.
pub fn run_link_faults(
    ttl: Duration,
    rounds: Vec<Fault>,
    node: std::net::SocketAddr,
    args: impl Fn(&str) -> Vec<String> + 'static,
    store: super::recorder::Recorder,
    tamper: impl FnMut(Fault) + 'static,
) -> Report {
    run_with(
        ElectionSpec {
            args: Vec::new(),
            ttl,
            candidates: 3,
            rounds,
            server: None,
            takeover_while_leader_paused: true,
            restart_loses_data: false,
        },
        Extras {
            links: Some(Links {
                nodes: vec![node],
                args: Box::new(move |addrs| args(&addrs[0])),
            }),
            store: Some(store),
            tamper: Some(Box::new(tamper)),
            ..Extras::default()
        },
    )
}

/// [`run`] with links, a store recorder and store faults.
pub fn run_with(spec: ElectionSpec<'_>, extras: Extras) -> Report {
    let candidates = spec.candidates;
    let rounds = spec.rounds.clone();
    let mut dir = tempfile::tempdir().expect("temp dir");
    if std::env::var_os("LK_KEEP_TEST_DIRS").is_some() {
        // Kept even when a round panics, for the post-mortem.
        dir.disable_cleanup(true);
        eprintln!("test dir: {}", dir.path().display());
    }
    let mut e = Election {
        spec,
        extras,
        proxies: Vec::new(),
        tampered: Vec::new(),
        dir,
        slots: Vec::new(),
        poller: None,
        generation: 0,
        store_faulted: false,
        killed: HashMap::new(),
    };
    e.poller = Some(Poller::start(candidates));
    for slot in 0..candidates {
        let s = e.spawn(slot);
        e.slots.push(s);
    }
    let mut report = Report::default();
    for (i, fault) in rounds.iter().enumerate() {
        let started = Instant::now();
        e.round(*fault, &mut report);
        eprintln!("round {i} {fault:?}: {:?}", started.elapsed());
    }
    let observations = e.poller.take().map(Poller::finish).unwrap_or_default();
    for s in e.slots.iter_mut() {
        let status = s.terminate(Duration::from_secs(5));
        assert!(
            status.is_some_and(|st| st.success()),
            "{} did not stop cleanly: {status:?}",
            s.name
        );
    }

    if std::env::var_os("LK_KEEP_TEST_DIRS").is_some() {
        let claims = read_claims(e.dir.path(), candidates, &e.killed);
        for c in &claims {
            eprintln!("{c:?}");
        }
    }
    let claims = read_claims(e.dir.path(), candidates, &e.killed);
    let tolerance = TAMPER_TOLERANCE.as_nanos() as u64;
    check_claims_never_overlap_but(&claims, &e.tampered, tolerance);
    check_tokens_strictly_grow(&claims);
    check_outside_view_but(&observations, &e.tampered, TAMPER_TOLERANCE);
    check_no_panics(e.dir.path());
    // A fault moves the lease once or twice; many more tenures than that is a leader
    // that loses its lease without any fault (a flapping leader never overlaps, so the
    // checks above would not see it).
    let bound = 2 * rounds.len() + 2 * candidates;
    assert!(
        claims.len() <= bound,
        "{} tenures in {} rounds: the leader flaps without faults",
        claims.len(),
        rounds.len()
    );
    if let Some(store) = e.extras.store.take() {
        let changes = store.changes();
        drop(store);
        let past =
            super::recorder::check_claims_against_store(&claims, &changes, &e.tampered, tolerance);
        report.longest_past_store_ms = past.untampered.map(|ns| ns as f64 / 1e6);
        report.longest_past_store_tampered_ms = past.tampered.map(|ns| ns as f64 / 1e6);
        report.unjudged_by_store = past.unjudged;
    }
    report.first_token = claims.first().map(|c| c.token);
    report.last_token = claims.last().map(|c| c.token);
    report.claims = claims.len();
    report.transitions = claims.len();
    report.observations = observations.len();
    report
}

/// One tenure as its own process logged it, in CLOCK_MONOTONIC nanoseconds.
#[derive(Clone, Debug)]
pub struct LoggedClaim {
    pub pid: u64,
    pub identity: String,
    pub token: u64,
    pub start: u64,
    /// When the acquiring request was sent.
    pub sent: Option<u64>,
    pub deadline: u64,
    pub end: Option<u64>,
}

impl LoggedClaim {
    /// The claim ends at its logged end or its last deadline, whichever is first.
    pub fn until(&self) -> u64 {
        self.end.map_or(self.deadline, |e| e.min(self.deadline))
    }
}

/// Text of a panic payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Parses transition-log lines into claims keyed by (pid, start): every
/// `claim_start` opens a tenure of its own, and `deadline`/`claim_end` lines belong to
/// that process's latest tenure, so two tenures that carry one token stay two claims
/// (and the token check sees them), instead of the second overwriting the first.
pub fn parse_claims(text: &str, out: &mut BTreeMap<(u64, u64), LoggedClaim>) {
    let mut open: HashMap<u64, (u64, u64)> = HashMap::new();
    for line in text.lines() {
        // A process killed mid-write leaves a torn last line; it never published it.
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(pid), Some(token), Some(at)) =
            (v["pid"].as_u64(), v["token"].as_u64(), v["at_ns"].as_u64())
        else {
            continue;
        };
        match v["event"].as_str() {
            Some("claim_start") => {
                let key = (pid, at);
                open.insert(pid, key);
                let deadline = v["deadline_ns"]
                    .as_u64()
                    .expect("claim_start has a deadline");
                out.insert(
                    key,
                    LoggedClaim {
                        pid,
                        identity: v["identity"].as_str().unwrap_or("").to_owned(),
                        token,
                        start: at,
                        sent: v["sent_ns"].as_u64(),
                        deadline,
                        end: None,
                    },
                );
            }
            Some("deadline") => {
                let c = open
                    .get(&pid)
                    .and_then(|k| out.get_mut(k))
                    .expect("deadline after claim_start");
                assert_eq!(c.token, token, "a deadline line of another tenure: {line}");
                let d = v["deadline_ns"].as_u64().expect("deadline value");
                assert!(d > c.deadline, "a deadline moved backwards: {line}");
                c.deadline = d;
            }
            Some("claim_end") => {
                let c = open
                    .get(&pid)
                    .and_then(|k| out.get_mut(k))
                    .expect("claim_end after claim_start");
                assert_eq!(c.token, token, "a claim_end line of another tenure: {line}");
                c.end = Some(at);
            }
            _ => {}
        }
    }
}

fn read_claims(dir: &Path, slots: usize, killed: &HashMap<u64, u64>) -> Vec<LoggedClaim> {
    let mut all = BTreeMap::new();
    for slot in 0..slots {
        let text =
            std::fs::read_to_string(dir.join(format!("slot-{slot}.jsonl"))).unwrap_or_default();
        parse_claims(&text, &mut all);
    }
    for c in all.values_mut() {
        if let Some(&at) = killed.get(&c.pid) {
            if c.start < at {
                c.end = Some(c.end.map_or(at, |e| e.min(at)));
            }
        }
    }
    let mut claims: Vec<LoggedClaim> = all.into_values().collect();
    claims.sort_by_key(|c| c.start);
    claims
}

/// (a) No two claims overlap on the host's monotonic clock.
pub fn check_claims_never_overlap(claims: &[LoggedClaim]) {
    check_claims_never_overlap_but(claims, &[], 0);
}

/// (a), except that a claim whose record was tampered with (a time in `tampered`
/// falls inside it) may overlap the next by up to `tolerance_ns`.
pub fn check_claims_never_overlap_but(claims: &[LoggedClaim], tampered: &[u64], tolerance_ns: u64) {
    let mut latest: Option<&LoggedClaim> = None;
    for c in claims {
        assert!(
            c.start < c.deadline,
            "a claim started at or after its own deadline: {c:?}"
        );
        if let Some(prev) = latest {
            let excused = if tampered
                .iter()
                .any(|&t| prev.start <= t && t <= prev.until())
            {
                tolerance_ns
            } else {
                0
            };
            assert!(
                c.start + excused >= prev.until(),
                "two leaders at once: {prev:?} held until {} but {c:?} started at {} ({} µs overlap)",
                prev.until(),
                c.start,
                (prev.until() - c.start) / 1000
            );
        }
        if latest.is_none_or(|p| c.until() > p.until()) {
            latest = Some(c);
        }
    }
}

/// (c) Later tenures carry greater tokens.
pub fn check_tokens_strictly_grow(claims: &[LoggedClaim]) {
    for pair in claims.windows(2) {
        assert!(
            pair[1].token > pair[0].token,
            "fencing token did not grow: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
}

/// (b) No process answered "leader" while another held an unbroken tenure: for each
/// process, two "leader" answers with the same token and no other answer between
/// them prove it led from the first reply to the second request; nobody else may
/// have answered "leader" entirely inside that span.
fn check_outside_view(observations: &[Observation]) {
    check_outside_view_but(observations, &[], Duration::ZERO);
}

/// The outside view, leaving out answers given within `tolerance` after a tampering
/// (`tampered`, CLOCK_MONOTONIC ns), when two leaders may briefly answer.
fn check_outside_view_but(observations: &[Observation], tampered: &[u64], tolerance: Duration) {
    let excused = |o: &Observation| {
        let at = leasekeeper::clock::to_monotonic_ns(tokio::time::Instant::from_std(o.sent));
        let tol = tolerance.as_nanos() as u64;
        tampered.iter().any(|&t| t <= at + tol && at <= t + tol * 2)
    };
    let kept: Vec<Observation> = observations
        .iter()
        .filter(|o| !excused(o))
        .cloned()
        .collect();
    let observations = &kept[..];
    let mut by_port: HashMap<u16, Vec<&Observation>> = HashMap::new();
    for o in observations {
        by_port.entry(o.port).or_default().push(o);
    }
    let mut certain: Vec<(u16, Instant, Instant, u64)> = Vec::new();
    for (port, obs) in by_port.iter_mut() {
        obs.sort_by_key(|o| o.sent);
        let mut run: Vec<&Observation> = Vec::new();
        let flush = |run: &mut Vec<&Observation>,
                     certain: &mut Vec<(u16, Instant, Instant, u64)>| {
            let mut spans: HashMap<u64, (Instant, Instant)> = HashMap::new();
            for o in run.iter() {
                if let Some(t) = o.token {
                    let span = spans.entry(t).or_insert((o.recv, o.sent));
                    span.0 = span.0.min(o.recv);
                    span.1 = span.1.max(o.sent);
                }
            }
            for (t, (from, to)) in spans {
                if from < to {
                    certain.push((*port, from, to, t));
                }
            }
            run.clear();
        };
        for o in obs.iter() {
            if o.leader {
                run.push(o);
            } else {
                flush(&mut run, &mut certain);
            }
        }
        flush(&mut run, &mut certain);
    }
    for o in observations.iter().filter(|o| o.leader) {
        for (port, from, to, token) in &certain {
            if *port != o.port && *from <= o.sent && o.recv <= *to {
                panic!("seen from outside: port {} answered leader while port {port} held token {token} without a break", o.port);
            }
        }
    }
}

fn check_no_panics(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "stderr") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                !text.contains("panicked"),
                "{} panicked:\n{text}",
                path.display()
            );
        }
    }
}

#[cfg(test)]
mod self_test {
    use super::*;

    fn claim(pid: u64, token: u64, start: u64, deadline: u64, end: Option<u64>) -> LoggedClaim {
        LoggedClaim {
            pid,
            identity: String::new(),
            token,
            start,
            sent: None,
            deadline,
            end,
        }
    }

    #[test]
    #[should_panic(expected = "two leaders at once")]
    fn the_checker_catches_overlapping_claims() {
        check_claims_never_overlap(&[claim(1, 1, 0, 100, None), claim(2, 2, 99, 200, None)]);
    }

    #[test]
    fn a_claim_ends_at_its_end_or_its_deadline() {
        check_claims_never_overlap(&[claim(1, 1, 0, 100, Some(50)), claim(2, 2, 60, 200, None)]);
        check_claims_never_overlap(&[claim(1, 1, 0, 100, Some(150)), claim(2, 2, 101, 200, None)]);
    }

    #[test]
    #[should_panic(expected = "fencing token did not grow")]
    fn the_checker_catches_tokens_that_do_not_grow() {
        check_tokens_strictly_grow(&[claim(1, 5, 0, 10, None), claim(2, 5, 20, 30, None)]);
    }

    #[test]
    #[should_panic(expected = "fencing token did not grow")]
    fn two_tenures_of_one_process_with_one_token_are_two_claims() {
        // Before claims were keyed by (pid, start), the second tenure replaced the
        // first and the repeated token went unseen.
        let log = [
            r#"{"event":"claim_start","pid":7,"token":4,"at_ns":100,"deadline_ns":200}"#,
            r#"{"event":"claim_end","pid":7,"token":4,"at_ns":150}"#,
            r#"{"event":"claim_start","pid":7,"token":4,"at_ns":300,"deadline_ns":400}"#,
            r#"{"event":"claim_end","pid":7,"token":4,"at_ns":350}"#,
        ]
        .join("\n");
        let mut claims = BTreeMap::new();
        parse_claims(&log, &mut claims);
        assert_eq!(claims.len(), 2, "both tenures are kept");
        let claims: Vec<LoggedClaim> = claims.into_values().collect();
        check_tokens_strictly_grow(&claims);
    }

    #[test]
    #[should_panic(expected = "a poller thread failed")]
    fn a_failed_assertion_in_a_poller_thread_fails_the_test() {
        // A listener that answers /is-leader with a body the contract forbids.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for conn in listener.incoming().flatten().take(50) {
                let mut conn = conn;
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nmaybe",
                );
            }
        });
        let poller = Poller::start(1);
        poller.set(0, Some(port));
        std::thread::sleep(Duration::from_millis(300));
        poller.finish();
    }

    #[test]
    #[should_panic(expected = "seen from outside")]
    fn the_checker_catches_two_leaders_seen_from_outside() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let obs = vec![
            Observation {
                port: 1,
                sent: ms(0),
                recv: ms(1),
                leader: true,
                token: Some(3),
            },
            Observation {
                port: 1,
                sent: ms(10),
                recv: ms(11),
                leader: true,
                token: Some(3),
            },
            Observation {
                port: 2,
                sent: ms(4),
                recv: ms(5),
                leader: true,
                token: None,
            },
        ];
        check_outside_view(&obs);
    }
}
