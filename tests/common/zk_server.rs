//! Real ZooKeeper servers (Debian's `zookeeper` package) on loopback, started without
//! their init scripts, killed on drop. tickTime is 200 ms, so session timeouts can be
//! short (the server caps them at 20 × tickTime = 4 s).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::checker::{stop_members, Members};
use super::{eventually, free_port};

struct Server {
    client: u16,
    secure: Option<u16>,
    cfg: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

pub struct ZkEnsemble {
    _dir: tempfile::TempDir,
    servers: Vec<Server>,
}

/// A four-letter-word command; the reply.
fn four_letters(port: u16, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// ZooKeeper's jars; with TLS also Netty's (Debian's libnetty-java, a dependency of
/// libzookeeper-java), which the TLS listener runs on.
fn classpath(tls: bool) -> String {
    let mut jars = vec!["zookeeper", "zookeeper-jute", "slf4j-simple"];
    if tls {
        jars.extend([
            "netty-common",
            "netty-buffer",
            "netty-codec",
            "netty-handler",
            "netty-transport",
            "netty-resolver",
            "netty-transport-native-epoll",
            "netty-transport-native-unix-common",
        ]);
    }
    jars.iter()
        .map(|j| format!("/usr/share/java/{j}.jar"))
        .collect::<Vec<_>>()
        .join(":")
}

impl ZkEnsemble {
    pub fn start(n: usize) -> ZkEnsemble {
        ZkEnsemble::start_with(n, None)
    }

    /// One server that also serves TLS on a secureClientPort, with the certificates of
    /// `make_certs` in `certs` (PEM keystores; client certificates required).
    pub fn start_tls(certs: &std::path::Path) -> ZkEnsemble {
        ZkEnsemble::start_with(1, Some(certs))
    }

    /// The TLS client port of server 0.
    pub fn secure_connect_string(&self) -> String {
        format!(
            "127.0.0.1:{}",
            self.servers[0].secure.expect("a TLS server")
        )
    }

    fn start_with(n: usize, certs: Option<&std::path::Path>) -> ZkEnsemble {
        let dir = tempfile::tempdir().expect("zk dir");
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let servers = (0..n)
            .map(|i| {
                let data = dir.path().join(format!("zk{i}"));
                std::fs::create_dir_all(&data).expect("data dir");
                let mut cfg = format!(
                    "tickTime=200\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr,isro,wchp\n",
                    data.display(),
                    ports[i].0
                );
                let secure = certs.map(|certs| {
                    let keystore = dir.path().join("server-keystore.pem");
                    let key = std::fs::read_to_string(certs.join("server.key")).expect("key");
                    let pem = std::fs::read_to_string(certs.join("server.pem")).expect("pem");
                    std::fs::write(&keystore, format!("{key}{pem}")).expect("keystore");
                    let port = free_port();
                    cfg.push_str(&format!(
                        "secureClientPort={port}\nserverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\nssl.keyStore.location={}\nssl.keyStore.type=PEM\nssl.trustStore.location={}\nssl.trustStore.type=PEM\nssl.clientAuth=need\n",
                        keystore.display(),
                        certs.join("ca.pem").display()
                    ));
                    port
                });
                if n > 1 {
                    std::fs::write(data.join("myid"), format!("{}\n", i + 1)).expect("myid");
                    for (j, (_, quorum, election)) in ports.iter().enumerate() {
                        cfg.push_str(&format!("server.{}=127.0.0.1:{quorum}:{election}\n", j + 1));
                    }
                }
                let path = dir.path().join(format!("zoo{i}.cfg"));
                std::fs::write(&path, cfg).expect("cfg");
                Server { client: ports[i].0, secure, cfg: path, log: dir.path().join(format!("zk{i}.log")), child: None }
            })
            .collect();
        let mut e = ZkEnsemble { _dir: dir, servers };
        for i in 0..n {
            e.start_member(i);
        }
        for i in 0..n {
            e.wait_serving(i);
        }
        e
    }

    fn start_member(&mut self, i: usize) {
        let s = &mut self.servers[i];
        let log = std::fs::File::create(&s.log).expect("log");
        let child = Command::new("java")
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-cp",
                &classpath(s.secure.is_some()),
            ])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&s.cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("java and zookeeper must be installed (make test installs them)");
        s.child = Some(child);
    }

    fn wait_serving(&self, i: usize) {
        let port = self.servers[i].client;
        let ok = eventually(Duration::from_secs(30), || {
            four_letters(port, "isro")
                .filter(|r| r.trim() == "rw")
                .map(|_| ())
        });
        assert!(ok.is_some(), "zookeeper server {i} never served");
    }

    pub fn connect_string(&self) -> String {
        self.servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Watches by path (`wchp`) on the first server: path → number of watching sessions.
    pub fn watchers_by_path(&self) -> std::collections::BTreeMap<String, usize> {
        let text = four_letters(self.servers[0].client, "wchp").unwrap_or_default();
        let mut out = std::collections::BTreeMap::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            if line.starts_with('/') {
                current = Some(line.trim().to_owned());
                out.entry(line.trim().to_owned()).or_insert(0);
            } else if line.trim().starts_with("0x") {
                if let Some(p) = &current {
                    *out.entry(p.clone()).or_insert(0) += 1;
                }
            }
        }
        out
    }

    /// A number from the first server's `mntr` output.
    pub fn mntr(&self, key: &str) -> f64 {
        let text = four_letters(self.servers[0].client, "mntr").unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    }

    /// The index of the ensemble's leader.
    fn ensemble_leader(&self) -> Option<usize> {
        (0..self.servers.len()).find(|&i| {
            self.servers[i].child.is_some()
                && four_letters(self.servers[i].client, "srvr")
                    .is_some_and(|r| r.contains("Mode: leader"))
        })
    }
}

impl Members for ZkEnsemble {
    fn count(&self) -> usize {
        self.servers.len()
    }
    fn pid(&self, i: usize) -> Option<u32> {
        self.servers[i].child.as_ref().map(|c| c.id())
    }
    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.servers[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    fn spawn(&mut self, i: usize) {
        self.start_member(i);
    }
    fn wait_ready(&self, i: usize) {
        self.wait_serving(i);
    }
    fn consensus_leader(&self) -> Option<usize> {
        self.ensemble_leader()
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        stop_members(self);
    }
}
