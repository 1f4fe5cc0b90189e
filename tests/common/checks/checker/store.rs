//! The store's side of a run: the faults of the store itself ([`ServerControl`], and
//! [`Members`] for stores made of member processes), several Redis servers as one
//! Redlock store, and per-candidate links to the store through fault proxies.

use crate::common::servers::redis_server::RedisServer;
use crate::common::SidecarArgs;

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
    /// Cuts node `node` off from the store's other nodes (`cut`) or heals it; its
    /// clients still reach it. Only stores of several nodes in network namespaces.
    fn isolate_node(&mut self, _node: usize, _cut: bool) {
        panic!("this store cannot cut a node off from the others");
    }
    /// The node that currently leads the store's own consensus, if it has one.
    fn leader_node(&self) -> Option<usize> {
        None
    }
    /// How many changes of its own consensus leader the store's nodes have seen, on a
    /// store that counts them and whose leases restart on such a change (etcd's lessor
    /// gives every lease a full ttl again when a new raft leader takes over).
    fn leader_changes(&self) -> Option<u64> {
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
    /// Cuts member `i` off from the others (`cut`) or heals it (a partitionable store).
    fn cut_off(&self, i: usize, cut: bool);
    /// See [`ServerControl::leader_changes`].
    fn leader_changes(&self) -> Option<u64> {
        None
    }
}

fn signal_member(m: &impl Members, i: usize, sig: i32) {
    if let Some(pid) = m.pid(i) {
        crate::common::send_signal(pid, sig);
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
    fn leader_changes(&self) -> Option<u64> {
        Members::leader_changes(self)
    }
    fn isolate_node(&mut self, node: usize, cut: bool) {
        self.cut_off(node, cut);
    }
}

/// Several independent Redis servers (Redlock).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(n: usize) -> Self {
        RedisCluster {
            nodes: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    /// Nodes that keep their data across a kill -9 (append-only file, fsync always).
    pub fn start_persistent(n: usize) -> Self {
        RedisCluster {
            nodes: (0..n).map(|_| RedisServer::start_persistent()).collect(),
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
                SidecarArgs::redlock(&urls)
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

impl ServerControl for RedisServer {
    fn pause(&mut self) {
        RedisServer::pause(self)
    }
    fn resume(&mut self) {
        RedisServer::resume(self)
    }
    fn restart(&mut self) {
        RedisServer::restart(self)
    }
}

/// Backend flags from a sidecar's proxy addresses.
pub type LinkArgs = Box<dyn Fn(&[String]) -> Vec<String>>;

/// Per-candidate links to the store: every sidecar reaches every store node through
/// its own [`FaultProxy`](crate::common::harness::faults::FaultProxy), so one candidate's link can be cut or slowed alone.
pub struct Links {
    /// The store's nodes (client ports).
    pub nodes: Vec<std::net::SocketAddr>,
    /// The backend flags for a sidecar whose node addresses (`127.0.0.1:port`, in the
    /// order of `nodes`) are the given proxies.
    pub args: LinkArgs,
}
