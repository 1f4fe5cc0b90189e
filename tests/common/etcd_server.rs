//! Real etcd members on loopback ports, data in /dev/shm when it exists (fsync is
//! then cheap), killed with SIGKILL on drop (a SIGTERMed leader waits for its peers).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::checker::{stop_members, Members};
use super::{eventually, free_port};

struct Member {
    name: String,
    client: u16,
    peer: u16,
    data: PathBuf,
    child: Option<Child>,
}

pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    initial: String,
}

fn temp_dir() -> tempfile::TempDir {
    if std::path::Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

/// GET on a member's client port; the body.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out.split_once("\r\n\r\n")?.1.to_owned())
}

impl EtcdCluster {
    pub fn start(n: usize) -> EtcdCluster {
        let mut dir = temp_dir();
        if std::env::var_os("LK_KEEP_TEST_DIRS").is_some() {
            dir.disable_cleanup(true);
            eprintln!("etcd dir: {}", dir.path().display());
        }
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("e{i}"),
                client: free_port(),
                peer: free_port(),
                data: dir.path().join(format!("e{i}")),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            dir,
            members,
            initial,
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
        let log = std::fs::File::create(self.dir.path().join(format!("e{i}.log"))).expect("log");
        let m = &mut self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let mut cmd = Command::new("etcd");
        for (k, _) in std::env::vars() {
            if k.starts_with("ETCD_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .args(["--name", &m.name, "--data-dir"])
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
            .args([
                "--heartbeat-interval",
                "10",
                "--election-timeout",
                "100",
                "--logger",
                "zap",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd must be installed (make test installs it)");
        m.child = Some(child);
    }

    fn wait_healthy(&self, i: usize) {
        let port = self.members[i].client;
        let ok = eventually(Duration::from_secs(20), || {
            http_get(port, "/health")
                .filter(|b| b.contains("true"))
                .map(|_| ())
        });
        assert!(ok.is_some(), "etcd member {i} never became healthy");
    }

    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client)
    }

    /// The index of the member that is the raft leader, as a live member reports it.
    fn raft_leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if m.child.is_none() {
                continue;
            }
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
            let status = &v[0]["Status"];
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
        let body = http_get(self.members[i].client, "/metrics").unwrap_or_default();
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
        self.members[i].child.as_ref().map(|c| c.id())
    }
    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
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
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        stop_members(self);
    }
}
