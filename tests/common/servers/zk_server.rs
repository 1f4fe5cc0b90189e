//! Real ZooKeeper servers (Debian's `zookeeper` package) on loopback, started without
//! their init scripts, killed on drop. tickTime is 200 ms, so session timeouts can be
//! short (the server caps them at 20 × tickTime = 4 s). Data in /dev/shm when it exists,
//! as etcd's ([`crate::common::store_data_dir`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use super::server::{wait_serving, ServerProcess};
use super::shared::{detached, namespace, shared, SharedServer, Started};
use crate::common::checks::checker::{stop_members, Members};
use crate::common::free_port;
use crate::common::harness::faults::{FaultProxy, Link, ProxyOptions};

struct Server {
    client: u16,
    /// Its real quorum and election ports (only used in an ensemble).
    quorum: u16,
    election: u16,
    secure: Option<u16>,
    cfg: PathBuf,
    log: PathBuf,
    process: ServerProcess,
}

/// Rewrites a ZooKeeper election connection's hello to the old form without the
/// caller's address. ZooKeeper 3.8's hello (QuorumCnxManager, protocol V1/V2) is
/// `i64 version (< 0), i64 sid, i32 len, len bytes "host:port"`, the sender's *own*
/// election address; a receiver with the larger id drops the connection and calls back
/// at that address, which is the sender's real port, so the call-back would bypass the
/// proxies. The old hello (just `i64 sid`, still accepted) makes it call back through
/// its own `zoo.cfg`, i.e. through its proxy.
fn election_hello(hello: &[u8]) -> Option<(usize, Vec<u8>)> {
    let word = |at: usize| -> Option<[u8; 8]> { hello.get(at..at + 8)?.try_into().ok() };
    let version = i64::from_be_bytes(word(0)?);
    if version >= 0 {
        return Some((0, Vec::new()));
    }
    let sid = word(8)?;
    let len: [u8; 4] = hello.get(16..20)?.try_into().ok()?;
    let len = i32::from_be_bytes(len);
    if !(0..=4096).contains(&len) {
        return Some((0, Vec::new()));
    }
    let end = 20 + len as usize;
    (hello.len() >= end).then(|| (end, sid.to_vec()))
}

/// The proxies server `from` reaches server `to` through (partitionable ensembles).
struct PeerLink {
    from: usize,
    to: usize,
    quorum: FaultProxy,
    election: FaultProxy,
}

pub struct ZkEnsemble {
    _dir: tempfile::TempDir,
    servers: Vec<Server>,
    /// Empty unless started by `start_partitionable`; dropped after the servers.
    links: Vec<PeerLink>,
    isolated: Mutex<Vec<bool>>,
    /// The JVM's heap options ([`TEST_HEAP`] or [`ROOMY_HEAP`]).
    heap: &'static [&'static str],
}

/// A test server's heap: small, with a young generation of about 80 MiB that the
/// serial collector empties in a stop of about 17 ms (about once in a bench's section).
const TEST_HEAP: &[&str] = &["-Xmx256m"];

/// A bench server's heap ([`ZkEnsemble::start_roomy`]): a young generation of 768 MiB,
/// which a bench's section does not fill, so that no collection stops the server while
/// it is timed.
const ROOMY_HEAP: &[&str] = &["-Xms1g", "-Xmx1g", "-Xmn768m"];

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

/// Waits up to 30 s until the server on client port `port` answers `isro` with `rw`
/// (an `imok` to `ruok` does not yet mean it serves); panics naming `who` if it never
/// does.
fn wait_until_read_write(port: u16, who: &str) {
    wait_serving(
        Duration::from_secs(30),
        || four_letters(port, "isro").is_some_and(|r| r.trim() == "rw"),
        || format!("{who} never served"),
    );
}

/// A server's `zoo.cfg` (before the ensemble's and TLS's lines).
fn config(data: &std::path::Path, client_port: u16) -> String {
    format!(
        "tickTime=200\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={client_port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n4lw.commands.whitelist=ruok,srvr,stat,mntr,isro,wchp,cons\n",
        data.display(),
    )
}

/// The JVM of a ZooKeeper server with the configuration `cfg`.
fn java(cfg: &std::path::Path, tls: bool, heap: &[&str]) -> Command {
    let mut cmd = Command::new("java");
    cmd.args(heap);
    cmd.args([
        "-XX:+UseSerialGC",
        // A server for tests: the client compiler only, on one thread, and no perf data
        // file, for about half the CPU time of a start.
        "-XX:TieredStopAtLevel=1",
        "-XX:CICompilerCount=1",
        "-XX:-UsePerfData",
        "-cp",
        &classpath(tls),
    ])
    .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
    .arg(cfg);
    cmd
}

/// Runs one ZooKeeper client call from the (synchronous) test.
pub fn with_zk<T>(connect: &str, f: impl AsyncFnOnce(zookeeper_client::Client) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = zookeeper_client::Client::connect(connect)
            .await
            .expect("connect to zookeeper");
        f(client).await
    })
}

/// Creates the persistent node `chroot` on the server at `address`.
fn create_chroot(address: &str, chroot: &str) {
    with_zk(address, async |client| {
        let mode = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        client
            .create(chroot, b"", &mode)
            .await
            .expect("create the test's chroot");
    });
}

/// A test's view of the shared ZooKeeper server: its own chroot ([`ZkEnsemble::shared`]).
pub struct SharedZk {
    server: SharedServer,
    chroot: String,
}

impl SharedZk {
    /// The server's address with the test's chroot: `127.0.0.1:PORT/test-…`.
    pub fn connect_string(&self) -> String {
        format!("{}{}", self.server.address, self.chroot)
    }

    /// The server's own address (for a proxy in front of it).
    pub fn address(&self) -> SocketAddr {
        self.server
            .address
            .parse()
            .expect("the shared server's address")
    }

    /// The test's chroot, to follow another address (a proxy's): `/test-…`.
    pub fn chroot(&self) -> &str {
        &self.chroot
    }
}

impl ZkEnsemble {
    pub fn start(n: usize) -> ZkEnsemble {
        ZkEnsemble::start_with(n, None, false, "", TEST_HEAP)
    }

    /// `n` servers with a heap that a bench's section does not fill ([`ROOMY_HEAP`]):
    /// no young collection stops them while they are timed.
    pub fn start_roomy(n: usize) -> ZkEnsemble {
        ZkEnsemble::start_with(n, None, false, "", ROOMY_HEAP)
    }

    /// `n` servers whose quorum and election traffic between each other all goes
    /// through [`FaultProxy`]s, so that a test can cut one server off from the others
    /// ([`ZkEnsemble::isolate`]) while its client connections (direct, never proxied)
    /// stay open. Server i's own `zoo.cfg` lists itself at its real quorum/election
    /// ports and every other server j at the ports of the proxies "i → j" (one for
    /// quorum, one for election), which forward to j's real ports. Every TCP
    /// connection between two servers is opened by one of them through its own proxy to
    /// the other, so blackholing the proxies i → * and * → i cuts i off completely.
    ///
    /// ZooKeeper 3.8 election hellos name the caller's own election address, and the
    /// callee may call back there; the election proxies rewrite that hello (see
    /// [`election_hello`]) so call-backs go through the proxies too. The proxies retry
    /// a refused upstream connect for 2 s (see `ProxyOptions::connect_retry`), else a
    /// follower that calls a new leader before its port listens gives up and forces
    /// another election round (+2–3 s).
    ///
    /// tickTime=200, initLimit=10, syncLimit=5 as in [`ZkEnsemble::start`]. Measured
    /// here (tests/suite/zk_partition.rs, 2 busy cores): an isolated *follower* keeps serving
    /// its clients' reads for syncLimit × tickTime = 1 s after the cut (last read
    /// answered 0.98–1.00 s after it, first failed read 0.99–1.02 s: it waits that long
    /// for a packet from its leader, then closes its client connections and goes
    /// LOOKING; `isro` stops answering `rw` at 1.0–1.3 s). A session that has a write
    /// pending (forwarded to the leader, never answered) gets no reads at all from the
    /// cut on: a session's reads wait behind its own writes; that write then fails
    /// with the connection and is never applied. The other two keep their leader and
    /// take writes. After `heal` the follower serves again within 0.05–0.4 s.
    ///
    /// An isolated *leader* serves its clients' reads for 1.0–1.2 s after the cut
    /// (it steps down when no quorum acked within syncLimit × tickTime); the other two
    /// have a new leader 1.4–1.5 s after the cut (their followers time out after 1 s,
    /// then elect). In the runs here the old leader had stopped before the new one was
    /// up (gap 0.25–0.45 s), but the margin is only a few hundred ms.
    pub fn start_partitionable(n: usize) -> ZkEnsemble {
        assert!(n >= 2, "a partition needs an ensemble");
        ZkEnsemble::start_with(n, None, true, "", TEST_HEAP)
    }

    /// One server that also serves TLS on a secureClientPort, with the certificates of
    /// `make_certs` in `certs` (PEM keystores; client certificates required).
    pub fn start_tls(certs: &std::path::Path) -> ZkEnsemble {
        ZkEnsemble::start_with(1, Some(certs), false, "", TEST_HEAP)
    }

    /// The TLS client port of server 0.
    pub fn secure_connect_string(&self) -> String {
        format!(
            "127.0.0.1:{}",
            self.servers[0].secure.expect("a TLS server")
        )
    }

    /// One server that grants sessions up to 60 s (the others cap them at 4 s): for a
    /// test that tells a candidate's own leaving from its session's expiry by time.
    pub fn start_long_sessions() -> ZkEnsemble {
        ZkEnsemble::start_with(1, None, false, "maxSessionTimeout=60000\n", TEST_HEAP)
    }

    /// `n` servers; `certs`: TLS too; `partitionable`: peers through proxies; `extra`:
    /// lines added to each server's `zoo.cfg`; `heap`: the JVM's heap options.
    fn start_with(
        n: usize,
        certs: Option<&std::path::Path>,
        partitionable: bool,
        extra: &str,
        heap: &'static [&'static str],
    ) -> ZkEnsemble {
        let dir = crate::common::store_data_dir();
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let mut links = Vec::new();
        if partitionable {
            for from in 0..n {
                for (to, &(_, quorum, election)) in ports.iter().enumerate() {
                    if from != to {
                        let target = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
                        // A follower calls the new leader's quorum port as soon as the
                        // election ends, maybe before that port listens: it retries a
                        // refused connect but gives up on a closed one (see
                        // ProxyOptions::connect_retry); 2 s = initLimit × tickTime.
                        let retry = ProxyOptions {
                            connect_retry: Duration::from_secs(2),
                            ..ProxyOptions::default()
                        };
                        links.push(PeerLink {
                            from,
                            to,
                            quorum: FaultProxy::start_with(target(quorum), retry),
                            election: FaultProxy::start_with(
                                target(election),
                                ProxyOptions {
                                    rewrite: Some(election_hello),
                                    ..retry
                                },
                            ),
                        });
                    }
                }
            }
        }
        let servers = (0..n)
            .map(|i| {
                let data = dir.path().join(format!("zk{i}"));
                std::fs::create_dir_all(&data).expect("data dir");
                let mut cfg = config(&data, ports[i].0);
                cfg.push_str(extra);
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
                    for (j, &(_, quorum, election)) in ports.iter().enumerate() {
                        let (quorum, election) = match links.iter().find(|l| l.from == i && l.to == j) {
                            Some(l) => (l.quorum.port(), l.election.port()),
                            None => (quorum, election),
                        };
                        cfg.push_str(&format!("server.{}=127.0.0.1:{quorum}:{election}\n", j + 1));
                    }
                }
                let path = dir.path().join(format!("zoo{i}.cfg"));
                std::fs::write(&path, cfg).expect("cfg");
                Server { client: ports[i].0, quorum: ports[i].1, election: ports[i].2, secure, cfg: path, log: dir.path().join(format!("zk{i}.log")), process: ServerProcess::default() }
            })
            .collect();
        let mut e = ZkEnsemble {
            _dir: dir,
            servers,
            links,
            isolated: Mutex::new(vec![false; n]),
            heap,
        };
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
        s.process = ServerProcess::start(
            &mut java(&s.cfg, s.secure.is_some(), self.heap),
            Some(&s.log),
            "java and zookeeper must be installed (make test installs them)",
        );
    }

    /// One server shared with the other test processes of the run ([`super::shared`]),
    /// seen through a chroot of this test's own: for a test that neither stops the
    /// server nor reads its server-wide numbers.
    pub fn shared() -> SharedZk {
        let server = shared("zookeeper", |data| {
            let port = free_port();
            let cfg = data.join("zoo.cfg");
            std::fs::write(&cfg, config(data, port)).expect("cfg");
            let process = ServerProcess::start(
                detached(&mut java(&cfg, false, TEST_HEAP)),
                Some(&data.join("zk.log")),
                "java and zookeeper must be installed (make test installs them)",
            );
            wait_until_read_write(port, "the shared zookeeper server");
            Started {
                address: format!("127.0.0.1:{port}"),
                pids: process.detach().into_iter().collect(),
            }
        });
        let chroot = format!("/test-{}", namespace());
        create_chroot(&server.address, &chroot);
        SharedZk { server, chroot }
    }

    fn wait_serving(&self, i: usize) {
        wait_until_read_write(self.servers[i].client, &format!("zookeeper server {i}"));
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

    /// The first server's last committed zxid (`srvr`): one more per transaction.
    pub fn last_zxid(&self) -> u64 {
        let text = four_letters(self.servers[0].client, "srvr").unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("Zxid: 0x"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .expect("srvr names the zxid")
    }

    /// Requests received so far per client session on the first server (`cons`),
    /// pings included: session id → count.
    pub fn received_by_session(&self) -> std::collections::BTreeMap<String, u64> {
        let text = four_letters(self.servers[0].client, "cons").unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let field = |name: &str| {
                    l.split([',', '(', ')'])
                        .find_map(|f| f.trim().strip_prefix(name).map(str::to_owned))
                };
                Some((field("sid=")?, field("recved=")?.parse().ok()?))
            })
            .collect()
    }

    /// The client port of server `i` alone (for a client that must stay on it).
    pub fn connect_string_for(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.servers[i].client)
    }

    /// Server `i`'s `Mode:` from `srvr` ("leader", "follower", "standalone"); None
    /// while it does not serve (LOOKING: "not currently serving requests") or is down.
    pub fn server_mode(&self, i: usize) -> Option<String> {
        self.servers[i].process.pid()?;
        let reply = four_letters(self.servers[i].client, "srvr")?;
        reply
            .lines()
            .find_map(|l| l.strip_prefix("Mode:"))
            .map(|m| m.trim().to_owned())
    }

    /// Server `i`'s answer to `isro`: "rw" while it serves, "null" while it does not
    /// (LOOKING), None if it does not answer.
    pub fn isro(&self, i: usize) -> Option<String> {
        four_letters(self.servers[i].client, "isro").map(|r| r.trim().to_owned())
    }

    /// Cuts server `i` off from every other server (partitionable ensembles): every
    /// byte between it and them, both ways, on quorum and election links, is held from
    /// now on; the connections stay open and new ones are accepted but pass nothing.
    /// Its clients stay connected to it.
    pub fn isolate(&self, i: usize) {
        self.isolated.lock().unwrap()[i] = true;
        self.apply_links();
    }

    /// Undoes `isolate(i)`: held bytes are delivered and links pass again, except to
    /// servers that are themselves still isolated.
    pub fn heal(&self, i: usize) {
        self.isolated.lock().unwrap()[i] = false;
        self.apply_links();
    }

    /// Sets both proxies (quorum and election) of both directions between servers `a`
    /// and `b` (e.g. a delay between two servers); `isolate`/`heal` overwrite it.
    pub fn set_link(&self, a: usize, b: usize, link: Link) {
        for l in self
            .links
            .iter()
            .filter(|l| (l.from, l.to) == (a, b) || (l.from, l.to) == (b, a))
        {
            l.quorum.set(link);
            l.election.set(link);
        }
    }

    /// The open connections between servers `a` and `b` (both directions, both kinds).
    pub fn peer_connections(&self, a: usize, b: usize) -> usize {
        self.links
            .iter()
            .filter(|l| (l.from, l.to) == (a, b) || (l.from, l.to) == (b, a))
            .map(|l| l.quorum.connections() + l.election.connections())
            .sum()
    }

    fn apply_links(&self) {
        assert!(!self.links.is_empty(), "not a partitionable ensemble");
        let isolated = self.isolated.lock().unwrap();
        for l in &self.links {
            let link = if isolated[l.from] || isolated[l.to] {
                Link::Blackhole
            } else {
                Link::Pass
            };
            l.quorum.set(link);
            l.election.set(link);
        }
    }

    /// Server `i`'s log (stderr) so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.servers[i].log).unwrap_or_default()
    }

    /// Established connections to a server's real quorum or election port that this
    /// process (its proxies) did not open: server-to-server traffic a partition would
    /// not cut. Empty when every link goes through the proxies.
    pub fn bypassing_connections(&self) -> Vec<String> {
        let real: std::collections::HashSet<u16> = self
            .servers
            .iter()
            .flat_map(|s| [s.quorum, s.election])
            .collect();
        let ours: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
            .map(|d| {
                d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter_map(|l| {
                        let l = l.to_string_lossy().into_owned();
                        Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
        let mut out = Vec::new();
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let text = std::fs::read_to_string(table).unwrap_or_default();
            for row in text.lines().skip(1) {
                let cols: Vec<&str> = row.split_whitespace().collect();
                let (Some(local), Some(remote)) = (
                    cols.get(1).and_then(|a| port(a)),
                    cols.get(2).and_then(|a| port(a)),
                ) else {
                    continue;
                };
                let established = cols.get(3) == Some(&"01");
                let inode = cols.get(9).copied().unwrap_or_default();
                if established && real.contains(&remote) && !ours.contains(inode) {
                    out.push(format!("127.0.0.1:{local} -> 127.0.0.1:{remote}"));
                }
            }
        }
        out
    }

    /// The index of the ensemble's leader.
    fn ensemble_leader(&self) -> Option<usize> {
        (0..self.servers.len()).find(|&i| {
            self.servers[i].process.is_running()
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
        self.servers[i].process.pid()
    }
    fn kill(&mut self, i: usize) {
        self.servers[i].process.kill();
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
    fn cut_off(&self, i: usize, cut: bool) {
        if cut {
            self.isolate(i);
        } else {
            self.heal(i);
        }
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        stop_members(self);
    }
}
