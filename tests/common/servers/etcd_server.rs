//! Real etcd members on loopback ports, data in /dev/shm when it exists (fsync is
//! then cheap), killed with SIGKILL on drop (a SIGTERMed leader waits for its peers).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::server::{wait_serving, ServerProcess};
use crate::common::checks::checker::{stop_members, Members};
use crate::common::harness::netns::NetLab;
use crate::common::{eventually, free_port};

struct Member {
    name: String,
    /// The address it listens on (loopback, or its host in a [`NetLab`]).
    host: String,
    client: u16,
    peer: u16,
    data: PathBuf,
    process: ServerProcess,
}

pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    initial: String,
    /// Set by [`EtcdCluster::start_partitionable`]: one network namespace per member.
    /// (Dropped after the members are killed.)
    lab: Option<NetLab>,
}

/// GET on a member's client port; the body.
fn http_get(host: &str, port: u16, path: &str) -> Option<String> {
    let addr = std::net::SocketAddr::new(host.parse().ok()?, port);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out.split_once("\r\n\r\n")?.1.to_owned())
}

impl EtcdCluster {
    pub fn start(n: usize) -> EtcdCluster {
        EtcdCluster::start_in(n, None)
    }

    /// `n` members, each in its own network namespace ([`NetLab`]), so that one can be
    /// cut off from the others while its clients still reach it
    /// ([`EtcdCluster::isolate`]).
    pub fn start_partitionable(n: usize) -> EtcdCluster {
        EtcdCluster::start_in(n, Some(NetLab::new(n)))
    }

    fn start_in(n: usize, lab: Option<NetLab>) -> EtcdCluster {
        let mut dir = crate::common::store_data_dir();
        if std::env::var_os("LK_KEEP_TEST_DIRS").is_some() {
            dir.disable_cleanup(true);
            eprintln!("etcd dir: {}", dir.path().display());
        }
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("e{i}"),
                host: lab
                    .as_ref()
                    .map_or_else(|| "127.0.0.1".to_owned(), |l| l.addr(i).to_string()),
                // A namespace of its own has every port free.
                client: if lab.is_some() { 2379 } else { free_port() },
                peer: if lab.is_some() { 2380 } else { free_port() },
                data: dir.path().join(format!("e{i}")),
                process: ServerProcess::default(),
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://{}:{}", m.name, m.host, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            dir,
            members,
            initial,
            lab,
        };
        for i in 0..n {
            cluster.start_member(i);
        }
        for i in 0..n {
            cluster.wait_healthy(i);
        }
        cluster
    }

    fn start_member(&mut self, i: usize) {
        let initial = self.initial.clone();
        let log = self.dir.path().join(format!("e{i}.log"));
        let m = &mut self.members[i];
        let client = format!("http://{}:{}", m.host, m.client);
        let peer = format!("http://{}:{}", m.host, m.peer);
        let mut cmd = match &self.lab {
            Some(lab) => lab.command(i, "etcd"),
            None => Command::new("etcd"),
        };
        for (k, _) in std::env::vars() {
            if k.starts_with("ETCD_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(["--name", &m.name, "--data-dir"])
            .arg(&m.data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &initial,
                "--initial-cluster-state",
                "new",
            ])
            // Fast elections for the tests, with pre-vote: a member that restarts, or
            // misses heartbeats while the machine is busy, asks before it campaigns, so
            // it does not depose a live leader (each new raft leader gives every lease a
            // full ttl again).
            .args([
                "--heartbeat-interval",
                "10",
                "--election-timeout",
                "100",
                "--pre-vote",
                "--logger",
                "zap",
            ]);
        m.process = ServerProcess::start(
            &mut cmd,
            Some(&log),
            "etcd must be installed (make test installs it)",
        );
    }

    fn wait_healthy(&self, i: usize) {
        let m = &self.members[i];
        wait_serving(
            Duration::from_secs(20),
            || http_get(&m.host, m.client, "/health").is_some_and(|b| b.contains("true")),
            || format!("etcd member {i} never became healthy"),
        );
    }

    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://{}:{}", m.host, m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn endpoint(&self, i: usize) -> String {
        let m = &self.members[i];
        format!("http://{}:{}", m.host, m.client)
    }

    /// Cuts member `i` off from the other members; its clients still reach it.
    pub fn isolate(&self, i: usize) {
        self.lab
            .as_ref()
            .expect("a cluster from start_partitionable")
            .isolate(i);
    }

    /// Undoes [`EtcdCluster::isolate`].
    pub fn heal(&self, i: usize) {
        self.lab
            .as_ref()
            .expect("a cluster from start_partitionable")
            .heal(i);
    }

    /// Makes member `to` the raft leader (`etcdctl move-leader`); whether it took.
    pub fn move_leader(&self, to: usize) -> bool {
        if self.raft_leader() == Some(to) {
            return true;
        }
        let Some(from) = self.raft_leader() else {
            return false;
        };
        let id = self.member_id(to);
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint(from), "move-leader", &id])
            .output();
        out.is_ok_and(|o| o.status.success())
            && eventually(Duration::from_secs(5), || {
                (self.raft_leader() == Some(to)).then_some(())
            })
            .is_some()
    }

    /// Member `i`'s id, in hex as etcdctl takes it.
    fn member_id(&self, i: usize) -> String {
        self.status(i)
            .and_then(|s| s["header"]["member_id"].as_u64())
            .map(|id| format!("{id:x}"))
            .unwrap_or_default()
    }

    /// `etcdctl endpoint status` of member `i`.
    fn status(&self, i: usize) -> Option<serde_json::Value> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                &self.endpoint(i),
                "--command-timeout",
                "1s",
                "endpoint",
                "status",
                "-w",
                "json",
            ])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        Some(v[0]["Status"].clone())
    }

    /// The index of the member that is the raft leader, as a live member reports it.
    pub fn raft_leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if !m.process.is_running() {
                continue;
            }
            let Some(status) = self.status(i) else {
                continue;
            };
            let (me, leader) = (
                status["header"]["member_id"].as_u64(),
                status["leader"].as_u64(),
            );
            if me.is_some() && me == leader {
                return Some(i);
            }
        }
        None
    }

    /// Runs etcdctl against the cluster and returns its stdout.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoints()])
            .args(args)
            .output()
            .expect("etcdctl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A counter from a member's Prometheus metrics, summed over matching lines.
    pub fn metric(&self, i: usize, name: &str, label: &str) -> f64 {
        let m = &self.members[i];
        let body = http_get(&m.host, m.client, "/metrics").unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with(name) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Members for EtcdCluster {
    fn count(&self) -> usize {
        self.members.len()
    }
    fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].process.pid()
    }
    fn kill(&mut self, i: usize) {
        self.members[i].process.kill();
    }
    fn spawn(&mut self, i: usize) {
        self.start_member(i);
    }
    fn wait_ready(&self, i: usize) {
        self.wait_healthy(i);
    }
    fn consensus_leader(&self) -> Option<usize> {
        self.raft_leader()
    }
    /// Summed over the members that run and answer.
    fn leader_changes(&self) -> Option<u64> {
        let running = (0..self.members.len()).filter(|&i| self.members[i].process.is_running());
        let seen = running.map(|i| self.metric(i, "etcd_server_leader_changes_seen_total", ""));
        Some(seen.sum::<f64>() as u64)
    }
    fn cut_off(&self, i: usize, cut: bool) {
        if cut {
            self.isolate(i);
        } else {
            self.heal(i);
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        stop_members(self);
    }
}
