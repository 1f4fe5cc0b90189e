//! Benchmarks of DESIGN §8/§9: graceful handover and crash failover latency,
//! backend requests per candidate at steady state, idle footprint, `/leader`
//! throughput and binary size. Run with `make bench` (`cargo bench --bench handover`).
//!
//! Latencies are read from the sidecars' own transition logs (CLOCK_MONOTONIC ns):
//! from the instant the signal is sent to the new leader's `claim_start`, so the
//! figures carry no polling error.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::redis_server::RedisServer;
use common::{
    etcd_args, eventually, file_args, http, kube_args, redis_args, redlock_args, zk_args, Sidecar,
};
use leasekeeper::clock::monotonic_now_ns;

const CANDIDATES: usize = 3;

fn handovers() -> usize {
    std::env::var("LK_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

struct Stats {
    min: f64,
    median: f64,
    p99: f64,
    n: usize,
}

fn stats(mut v: Vec<f64>) -> Stats {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    Stats {
        min: v[0],
        median: at(0.5),
        p99: at(0.99),
        n: v.len(),
    }
}

fn fmt_ms(s: &Stats) -> String {
    format!(
        "{:.2} / {:.2} / {:.2} ms (n={})",
        s.min, s.median, s.p99, s.n
    )
}

/// A set of sidecars with one transition log per slot.
struct Group {
    dir: tempfile::TempDir,
    args: Vec<String>,
    slots: Vec<Sidecar>,
    generation: usize,
}

impl Group {
    fn new(args: Vec<String>, n: usize) -> Group {
        let mut g = Group {
            dir: tempfile::tempdir().expect("dir"),
            args,
            slots: Vec::new(),
            generation: 0,
        };
        for slot in 0..n {
            let s = g.spawn(slot);
            g.slots.push(s);
        }
        g
    }

    fn log(&self, slot: usize) -> PathBuf {
        self.dir.path().join(format!("slot-{slot}.jsonl"))
    }

    fn spawn(&mut self, slot: usize) -> Sidecar {
        self.generation += 1;
        let mut args = self.args.clone();
        args.extend([
            "--transition-log".to_owned(),
            self.log(slot).display().to_string(),
        ]);
        let s = Sidecar::spawn(
            &format!("bench-{slot}-g{}", self.generation),
            self.dir.path(),
            &args,
        );
        assert!(s.wait_listening(Duration::from_secs(10)), "{}", s.stderr());
        s
    }

    fn respawn(&mut self, slot: usize) {
        self.slots[slot].kill();
        let s = self.spawn(slot);
        self.slots[slot] = s;
    }

    fn leader(&self, limit: Duration) -> Option<usize> {
        eventually(limit, || {
            self.slots
                .iter()
                .position(|s| s.is_running() && s.leader().is_some_and(|v| v["is_leader"] == true))
        })
    }

    /// Waits until every follower follows `leader` by name (steady state before a
    /// handover: no follower is still catching up with the previous one).
    fn settled(&self, leader: usize) -> bool {
        eventually(Duration::from_secs(20), || {
            let holder = self.slots[leader].leader()?["leader"].clone();
            self.slots
                .iter()
                .enumerate()
                .all(|(i, s)| {
                    i == leader
                        || s.leader()
                            .is_some_and(|v| v["state"] == "follower" && v["leader"] == holder)
                })
                .then_some(())
        })
        .is_some()
    }

    /// The first claim started after `after_ns` in any slot's log: (start, sent).
    fn next_claim_after(&self, after_ns: u64, limit: Duration) -> Option<(u64, Option<u64>)> {
        eventually(limit, || {
            let mut first: Option<(u64, Option<u64>)> = None;
            for slot in 0..self.slots.len() {
                let text = std::fs::read_to_string(self.log(slot)).unwrap_or_default();
                let mut claims = BTreeMap::new();
                common::checker::parse_claims(&text, &mut claims);
                for c in claims.values().filter(|c| c.start > after_ns) {
                    if first.is_none_or(|(f, _)| c.start < f) {
                        first = Some((c.start, c.sent));
                    }
                }
            }
            first
        })
    }
}

enum Stop {
    Graceful,
    Crash,
}

/// What a series of handovers measured, in milliseconds.
#[derive(Default)]
struct Handovers {
    /// Signal sent → new leader's claim.
    latency: Vec<f64>,
    /// The new leader's acquiring request: sent → answered (its acquire round trip).
    acquire: Vec<f64>,
    /// For crashes: new claim − the store's own expiry of the dead leader's lease.
    past_expiry: Vec<f64>,
}

/// Stops the leader `rounds` times. `expiry_probe` tells the remaining ttl (ms) of the
/// leader's lease in the store just before a crash.
fn handover(
    group: &mut Group,
    stop: Stop,
    rounds: usize,
    expiry_probe: Option<&dyn Fn() -> Option<u64>>,
) -> Handovers {
    let mut h = Handovers::default();
    for _ in 0..rounds {
        let leader = group.leader(Duration::from_secs(30)).expect("a leader");
        assert!(group.settled(leader), "followers never settled");
        // Let the leader renew at least once so the crash case measures a normal lease.
        std::thread::sleep(Duration::from_millis(20));
        let pttl_ms = expiry_probe.and_then(|p| p());
        let t0 = monotonic_now_ns();
        match stop {
            Stop::Graceful => group.slots[leader].signal(libc::SIGTERM),
            Stop::Crash => group.slots[leader].signal(libc::SIGKILL),
        }
        let (start, sent) = group
            .next_claim_after(t0, Duration::from_secs(60))
            .expect("a new leader");
        h.latency.push((start - t0) as f64 / 1e6);
        if let Some(sent) = sent {
            h.acquire.push(start.saturating_sub(sent) as f64 / 1e6);
        }
        if let Some(pttl) = pttl_ms {
            h.past_expiry.push((start - t0) as f64 / 1e6 - pttl as f64);
        }
        let _ = group.slots[leader].wait_exit(Duration::from_secs(5));
        group.respawn(leader);
    }
    h
}

/// Remaining ttl (ms) of the election's lock: the most any node reports (the lease
/// lives until the last majority member lets it go; for one node, that node).
fn lock_pttl(servers: &[&RedisServer], election: &str) -> Option<u64> {
    let mut ttls: Vec<u64> = servers
        .iter()
        .filter_map(|s| s.command(&format!("PTTL leasekeeper:{{{election}}}:lock")))
        .filter_map(|r| r.trim().trim_start_matches(':').parse::<i64>().ok())
        .filter(|v| *v > 0)
        .map(|v| v as u64)
        .collect();
    ttls.sort_unstable();
    // With a majority rule the lease is gone once fewer than a majority hold it:
    // the (n - quorum + 1)-th smallest expiry, i.e. the quorum-th largest.
    let quorum = servers.len() / 2 + 1;
    let idx = ttls.len().checked_sub(quorum)?;
    ttls.get(idx).copied()
}

/// Graceful and crash handovers among 3 sidecars on one backend.
fn compare_backend(
    label: &str,
    args: impl Fn(&str) -> Vec<String>,
    servers: &[&RedisServer],
    rounds: usize,
    row: &mut dyn FnMut(&str, String),
) {
    let mut g = Group::new(args("15s"), CANDIDATES);
    let graceful = handover(&mut g, Stop::Graceful, rounds, None);
    drop(g);
    row(
        &format!("{label}: graceful handover (SIGTERM → new claim)"),
        fmt_ms(&stats(graceful.latency)),
    );
    row(
        &format!("{label}: acquire round trip (request sent → claim)"),
        fmt_ms(&stats(graceful.acquire)),
    );
    let mut g = Group::new(args("1s"), CANDIDATES);
    let probe = || lock_pttl(servers, "bench");
    let crash = handover(&mut g, Stop::Crash, rounds.min(30), Some(&probe));
    drop(g);
    row(
        &format!("{label}: crash failover, ttl 1s (kill -9 → new claim)"),
        fmt_ms(&stats(crash.latency)),
    );
    row(
        &format!("{label}: crash failover past the lease's expiry in the store"),
        fmt_ms(&stats(crash.past_expiry)),
    );
}

/// Graceful handover among `CANDIDATES` `etcdctl elect` processes on the same etcd:
/// SIGINT to the leader (etcdctl resigns and exits) → the next one prints its key.
fn etcdctl_handover(endpoints: &str, rounds: usize) -> Vec<f64> {
    use std::process::{Command, Stdio};
    let spawn = |i: usize| {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                endpoints,
                "elect",
                "bench-peer",
                &format!("p{i}"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcdctl")
    };
    let stop = |c: &mut std::process::Child| common::send_signal(c.id(), libc::SIGINT);
    // etcdctl prints the key it was elected with, untimed: its arrival is the stamp.
    peer_handover(&spawn, &stop, &|_| Some(monotonic_now_ns()), rounds)
}

/// The stamp of peers that print `leader <CLOCK_MONOTONIC ns>` when elected.
fn leader_stamp(line: &str) -> Option<u64> {
    line.strip_prefix("leader ")?.trim().parse().ok()
}

/// Client requests the store has served for our sidecars: script invocations
/// (commands run inside a script are counted by Redis too, but cost no round trip).
/// Graceful handover among `CANDIDATES` peer processes: `stamp` reads the election
/// time (CLOCK_MONOTONIC ns) off the line a peer prints when elected, `stop` asks the
/// leader to give up, and the latency runs up to the next peer's stamp.
fn peer_handover(
    spawn: &dyn Fn(usize) -> std::process::Child,
    stop: &dyn Fn(&mut std::process::Child),
    stamp: &'static (dyn Fn(&str) -> Option<u64> + Sync),
    rounds: usize,
) -> Vec<f64> {
    use std::io::{BufRead, BufReader};
    use std::sync::{Arc, Mutex};
    type Seen = Arc<Mutex<Option<u64>>>;
    let start = |i: usize| -> (std::process::Child, Seen) {
        let mut child = spawn(i);
        let out = child.stdout.take().expect("stdout");
        let seen: Seen = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // Keep draining after the stamp: a closed pipe would kill the peer
                // before it could give up the election.
                if let Some(ns) = stamp(&line) {
                    let mut s = sink.lock().expect("seen");
                    if s.is_none() {
                        *s = Some(ns);
                    }
                }
            }
        });
        (child, seen)
    };
    let mut peers: Vec<(std::process::Child, Seen)> = (0..CANDIDATES).map(start).collect();
    let mut lat = Vec::new();
    for _ in 0..rounds {
        let Some(holder) = eventually(Duration::from_secs(30), || {
            peers
                .iter()
                .position(|(_, s)| s.lock().expect("seen").is_some())
        }) else {
            break;
        };
        std::thread::sleep(Duration::from_millis(150));
        let t0 = monotonic_now_ns();
        stop(&mut peers[holder].0);
        let next = eventually(Duration::from_secs(30), || {
            peers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != holder)
                .find_map(|(_, (_, s))| *s.lock().expect("seen"))
        });
        let Some(next) = next else { break };
        lat.push(next.saturating_sub(t0) as f64 / 1e6);
        let _ = peers[holder].0.wait();
        peers[holder] = start(holder);
    }
    for (mut c, _) in peers {
        let _ = c.kill();
        let _ = c.wait();
    }
    lat
}

fn redis_requests(server: &RedisServer) -> u64 {
    let info = server.command("INFO commandstats").unwrap_or_default();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Requests per second the store sees from the sidecars over `window`.
fn redis_rate(server: &RedisServer, window: Duration) -> f64 {
    let before = redis_requests(server);
    std::thread::sleep(window);
    let after = redis_requests(server);
    after.saturating_sub(before) as f64 / window.as_secs_f64()
}

/// Graceful handover among `CANDIDATES` redis-py `Lock` holders on the same server.
fn redis_py_handover(url: &str, rounds: usize) -> Option<Vec<f64>> {
    use std::process::{Child, Command, Stdio};
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/peers/redis_py_lock.py"
    );
    let ok = Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("redis-py is not installed (pip install redis); skipping the peer");
        return None;
    }
    let dir = tempfile::tempdir().ok()?;
    let spawn = |i: usize, gen: usize| -> (Child, PathBuf) {
        let out = dir.path().join(format!("peer-{i}-{gen}.out"));
        let child = Command::new("python3")
            .args([script, url, "bench-peer", "15"])
            .stdout(std::fs::File::create(&out).expect("out"))
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        (child, out)
    };
    let acquired = |out: &Path| -> Option<u64> {
        let text = std::fs::read_to_string(out).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("acquired ")?.trim().parse().ok())
    };
    let mut peers: Vec<(Child, PathBuf)> = (0..CANDIDATES).map(|i| spawn(i, 0)).collect();
    let mut lat = Vec::new();
    for round in 1..=rounds {
        let holder = eventually(Duration::from_secs(30), || {
            peers.iter().position(|(_, out)| acquired(out).is_some())
        })?;
        // Let the others settle into their polling loop.
        std::thread::sleep(Duration::from_millis(150));
        let t0 = monotonic_now_ns();
        common::send_signal(peers[holder].0.id(), libc::SIGTERM);
        let next = eventually(Duration::from_secs(30), || {
            peers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != holder)
                .find_map(|(_, (_, out))| acquired(out))
        })?;
        lat.push(next.saturating_sub(t0) as f64 / 1e6);
        let _ = peers[holder].0.wait();
        peers[holder] = spawn(holder, round);
    }
    for (mut c, _) in peers {
        let _ = c.kill();
        let _ = c.wait();
    }
    Some(lat)
}

fn proc_cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// (RSS MiB, CPU ms per s) of a sidecar left alone for `window`.
fn idle_footprint(s: &Sidecar, window: Duration) -> (f64, f64) {
    let before = proc_cpu_ns(s.pid);
    std::thread::sleep(window);
    let after = proc_cpu_ns(s.pid);
    let cpu_ms_per_s = after.saturating_sub(before) as f64 / 1e6 / window.as_secs_f64();
    (rss_kib(s.pid) as f64 / 1024.0, cpu_ms_per_s)
}

/// GET /leader over kept-alive connections from `clients` threads for `window`.
fn leader_throughput(port: u16, clients: usize, window: Duration) -> f64 {
    let end = Instant::now() + window;
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            std::thread::spawn(move || {
                let mut conn = http::KeepAlive::open(port).expect("connect");
                let mut n = 0u64;
                while Instant::now() < end {
                    conn.send("/leader").expect("send");
                    let (code, _) = conn.receive().expect("answer");
                    assert_eq!(code, 200);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().expect("client")).sum();
    total as f64 / window.as_secs_f64()
}

/// The SQL peers, run as this bench binary itself (`LK_SQL_PEER=postgres|mysql`): the
/// seed's way done well, a loop every 100 ms. PostgreSQL: `pg_try_advisory_lock` on the
/// peer's own session; MySQL/MariaDB: `SELECT … FOR UPDATE NOWAIT` on a lock row in an
/// open transaction. Prints `leader <CLOCK_MONOTONIC ns>` once it holds the lock, holds
/// it until SIGTERM, then gives it back and exits.
fn sql_peer(kind: &str) {
    use sqlx::Connection;
    let url = std::env::var("LK_SQL_PEER_URL").expect("LK_SQL_PEER_URL");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let leader = || println!("leader {}", monotonic_now_ns());
        let every = Duration::from_millis(100);
        if kind == "postgres" {
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
            loop {
                let got: bool =
                    sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext('bench-peer'))")
                        .fetch_one(&mut conn)
                        .await
                        .expect("try lock");
                if got {
                    leader();
                    term.recv().await;
                    let _ = sqlx::query("SELECT pg_advisory_unlock(hashtext('bench-peer'))")
                        .execute(&mut conn)
                        .await;
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = term.recv() => return,
                }
            }
        } else {
            let mut conn = sqlx::MySqlConnection::connect(&url).await.expect("connect");
            loop {
                sqlx::query("BEGIN")
                    .execute(&mut conn)
                    .await
                    .expect("begin");
                let got = sqlx::query(
                    "SELECT name FROM peer_lock WHERE name = 'bench-peer' FOR UPDATE NOWAIT",
                )
                .fetch_optional(&mut conn)
                .await;
                if matches!(got, Ok(Some(_))) {
                    leader();
                    term.recv().await;
                    let _ = sqlx::query("COMMIT").execute(&mut conn).await;
                    return;
                }
                sqlx::query("ROLLBACK")
                    .execute(&mut conn)
                    .await
                    .expect("rollback");
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = term.recv() => return,
                }
            }
        }
    });
}

/// leasekeeper on one SQL server, then the 100 ms polling peer on the same server.
fn sql_section(kind: &str, rounds: usize, row: &mut dyn FnMut(&str, String)) {
    use common::sql_suite::{db_args, SqlDb};
    let db: Box<dyn SqlDb> = if kind == "postgres" {
        Box::new(common::pg_server::PgServer::start())
    } else {
        Box::new(common::mariadb_server::MariaServer::start())
    };
    let remaining = if kind == "postgres" {
        "SELECT GREATEST(0, CEIL(EXTRACT(EPOCH FROM expires_at - now()) * 1000))::bigint FROM leasekeeper_leases WHERE election = 'bench'"
    } else {
        "SELECT CAST(GREATEST(0, CEILING(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000)) AS SIGNED) FROM leasekeeper_leases WHERE election = 'bench'"
    };
    let mut g = Group::new(db_args(&*db, "lk", "15s", "bench"), CANDIDATES);
    let graceful = handover(&mut g, Stop::Graceful, rounds, None);
    drop(g);
    row(
        &format!("{kind}: graceful handover (SIGTERM → new claim)"),
        fmt_ms(&stats(graceful.latency)),
    );
    row(
        &format!("{kind}: acquire round trip (request sent → claim)"),
        fmt_ms(&stats(graceful.acquire)),
    );
    let mut g = Group::new(db_args(&*db, "lk", "1s", "bench"), CANDIDATES);
    let probe = || db.admin(remaining).trim().parse::<u64>().ok();
    let crash = handover(&mut g, Stop::Crash, rounds.min(30), Some(&probe));
    drop(g);
    row(
        &format!("{kind}: crash failover, ttl 1s (kill -9 → new claim)"),
        fmt_ms(&stats(crash.latency)),
    );
    row(
        &format!("{kind}: crash failover past the row's expiry"),
        fmt_ms(&stats(crash.past_expiry)),
    );

    if kind == "mysql" {
        db.admin("CREATE TABLE peer_lock (name VARCHAR(64) PRIMARY KEY); INSERT INTO peer_lock VALUES ('bench-peer')");
    }
    let url = db.url_for("lk");
    let exe = std::env::current_exe().expect("bench binary");
    let spawn = |_: usize| {
        std::process::Command::new(&exe)
            .env("LK_SQL_PEER", kind)
            .env("LK_SQL_PEER_URL", &url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("peer")
    };
    let peer = if kind == "postgres" {
        "pg_try_advisory_lock every 100 ms"
    } else {
        "SELECT … FOR UPDATE NOWAIT every 100 ms"
    };
    let term = |c: &mut std::process::Child| common::send_signal(c.id(), libc::SIGTERM);
    let lat = peer_handover(&spawn, &term, &leader_stamp, rounds);
    if !lat.is_empty() {
        row(
            &format!("peer, same server: {peer}, graceful handover"),
            fmt_ms(&stats(lat)),
        );
    }
    let kill = |c: &mut std::process::Child| common::send_signal(c.id(), libc::SIGKILL);
    let lat = peer_handover(&spawn, &kill, &leader_stamp, rounds.min(30));
    if !lat.is_empty() {
        row(
            &format!("peer, same server: {peer}, crash failover (kill -9 → next holder)"),
            fmt_ms(&stats(lat)),
        );
    }
}

fn main() {
    if let Ok(kind) = std::env::var("LK_SQL_PEER") {
        return sql_peer(&kind);
    }
    // `cargo bench` passes --bench; nothing else to parse.
    let rounds = handovers();
    let mut out = String::new();
    let mut row = |name: &str, value: String| {
        println!("| {name} | {value} |");
        out.push_str(&format!("| {name} | {value} |\n"));
    };
    println!("| measurement | min / median / p99, or value |\n|---|---|");

    // LK_BENCH_ONLY=etcd (or file, redis, steady, postgres, mysql) runs one section.
    let only = std::env::var("LK_BENCH_ONLY").ok();
    let wants = |section: &str| only.as_deref().is_none_or(|o| o == section);

    for kind in ["postgres", "mysql"] {
        if wants(kind) {
            sql_section(kind, rounds, &mut row);
        }
    }
    if wants("file") {
        // file backend
        let dir = tempfile::tempdir().expect("dir");
        let mut g = Group::new(file_args(dir.path(), "15s"), CANDIDATES);
        let h = handover(&mut g, Stop::Graceful, rounds, None);
        row(
            "file: graceful handover (SIGTERM → new claim)",
            fmt_ms(&stats(h.latency)),
        );
        let h = handover(&mut g, Stop::Crash, rounds, None);
        row(
            "file: crash failover (kill -9 → new claim)",
            fmt_ms(&stats(h.latency)),
        );
        drop(g);
    }
    if wants("redis") {
        // redis, then the peer on the same server, then redlock over 3 and 5 servers.
        let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
        let url = servers[0].url();
        compare_backend(
            "redis",
            |ttl| redis_args(&url, ttl, "bench"),
            &[&servers[0]],
            rounds,
            &mut row,
        );
        if let Some(lat) = redis_py_handover(&url, rounds) {
            row(
                "peer, same server: redis-py Lock graceful handover",
                fmt_ms(&stats(lat)),
            );
        }
        for n in [3, 5] {
            let urls = servers[..n]
                .iter()
                .map(|s| s.url())
                .collect::<Vec<_>>()
                .join(",");
            let refs: Vec<&RedisServer> = servers[..n].iter().collect();
            compare_backend(
                &format!("redlock({n})"),
                |ttl| redlock_args(&urls, ttl, "bench"),
                &refs,
                rounds,
                &mut row,
            );
        }
        drop(servers);
    }
    if wants("etcd") {
        // etcd: leasekeeper and etcdctl elect on the same member.
        let etcd = common::etcd_server::EtcdCluster::start(1);
        let endpoints = etcd.endpoints();
        let mut g = Group::new(etcd_args(&endpoints, "15s", "bench"), CANDIDATES);
        let h = handover(&mut g, Stop::Graceful, rounds, None);
        row(
            "etcd: graceful handover (SIGTERM → new claim)",
            fmt_ms(&stats(h.latency)),
        );
        row(
            "etcd: acquire round trip (request sent → claim)",
            fmt_ms(&stats(h.acquire)),
        );
        // Steady state: reads and writes vs keep-alives per second, 3 candidates, ttl 15s.
        let unary = |e: &common::etcd_server::EtcdCluster| {
            e.metric(0, "grpc_server_handled_total", "grpc_method=\"Range\"")
                + e.metric(0, "grpc_server_handled_total", "grpc_method=\"Txn\"")
        };
        let keepalives = |e: &common::etcd_server::EtcdCluster| {
            e.metric(
                0,
                "grpc_server_msg_received_total",
                "grpc_method=\"LeaseKeepAlive\"",
            )
        };
        let window = Duration::from_secs(10);
        let (u0, k0) = (unary(&etcd), keepalives(&etcd));
        std::thread::sleep(window);
        let (u1, k1) = (unary(&etcd), keepalives(&etcd));
        row(
            "etcd, ttl 15s, 3 candidates: reads+writes/s at steady state (all)",
            format!("{:.2}", (u1 - u0) / window.as_secs_f64()),
        );
        row(
            "etcd, ttl 15s, 3 candidates: lease keep-alives/s (all)",
            format!("{:.2}", (k1 - k0) / window.as_secs_f64()),
        );
        drop(g);
        let peer = etcdctl_handover(&endpoints, rounds);
        if !peer.is_empty() {
            row(
                "peer, same etcd: etcdctl elect graceful handover (SIGINT → next elected)",
                fmt_ms(&stats(peer)),
            );
        }
        let mut g = Group::new(etcd_args(&endpoints, "1s", "bench"), CANDIDATES);
        let h = handover(&mut g, Stop::Crash, rounds.min(30), None);
        row(
            "etcd: crash failover, ttl 1s (kill -9 → new claim)",
            fmt_ms(&stats(h.latency)),
        );
        drop(g);
        drop(etcd);
    }
    if only.as_deref() == Some("scale") {
        scale(&mut row);
    }
    if wants("exec") {
        // Exec mode next to `etcdctl lock NAME CMD` on one etcd: the same command (it
        // prints `leader <CLOCK_MONOTONIC ns>` when it starts, python startup included
        // on both sides), SIGTERM/SIGINT to the holder → the next command's stamp. For
        // leasekeeper the old command's group is gone before the lease is released.
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let etcd = common::etcd_server::EtcdCluster::start(1);
        let endpoints = etcd.endpoints();
        let cmd = [
            "python3",
            "-c",
            "import signal, sys, time\n\
             print('leader', time.monotonic_ns(), flush=True)\n\
             signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n\
             time.sleep(3600)",
        ];
        let dir = tempfile::tempdir().expect("dir");
        let lk = |i: usize| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_leasekeeper"));
            c.arg("run")
                .args(etcd_args(&endpoints, "15s", "bench-exec"))
                .args([
                    "--identity",
                    &format!("x{i}"),
                    "--http-addr",
                    "127.0.0.1:0",
                    "--transition-log",
                    &dir.path().join(format!("x{i}.jsonl")).display().to_string(),
                ])
                .arg("--")
                .args(cmd)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("leasekeeper run")
        };
        let term = |c: &mut std::process::Child| common::send_signal(c.id(), libc::SIGTERM);
        let ours = peer_handover(&lk, &term, &leader_stamp, rounds);
        row(
            "exec mode, etcd: leasekeeper run handover (SIGTERM → next command started)",
            fmt_ms(&stats(ours)),
        );
        let lock = |_: usize| {
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &endpoints, "lock", "bench-lock", "--"])
                .args(cmd)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("etcdctl lock")
        };
        // etcdctl waits for its command and does not pass a signal on: stop them as a
        // Ctrl-C at the terminal would, the whole process group (the command exits,
        // then etcdctl unlocks).
        let int = |c: &mut std::process::Child| {
            // SAFETY: kill(2) on the process group of our own child.
            unsafe { libc::kill(-(c.id() as libc::pid_t), libc::SIGINT) };
        };
        let theirs = peer_handover(&lock, &int, &leader_stamp, rounds);
        if !theirs.is_empty() {
            row(
                "peer, same etcd: etcdctl lock NAME CMD handover (SIGINT → next command started)",
                fmt_ms(&stats(theirs)),
            );
        }
        drop(etcd);
    }
    if wants("kubernetes") {
        // kubernetes Lease on the in-process fake API server (the client side of the
        // path: watch event → GET → PUT; a real API server adds its own etcd write).
        let api = common::fake_kube::FakeKube::start("team");
        let kubeconfig = api.kubeconfig();
        let mut g = Group::new(kube_args(&kubeconfig, "15s", "bench"), CANDIDATES);
        let h = handover(&mut g, Stop::Graceful, rounds, None);
        row(
            "kubernetes (fake API): graceful handover (SIGTERM → new claim)",
            fmt_ms(&stats(h.latency)),
        );
        row(
            "kubernetes (fake API): acquire round trip (request sent → claim)",
            fmt_ms(&stats(h.acquire)),
        );
        // Steady state: API requests per second per candidate at ttl 15s.
        let total = |api: &common::fake_kube::FakeKube| -> usize { api.requests().values().sum() };
        let before = total(&api);
        let window = Duration::from_secs(30);
        std::thread::sleep(window);
        let per_candidate =
            (total(&api) - before) as f64 / window.as_secs_f64() / CANDIDATES as f64;
        row(
            "kubernetes (fake API): API requests/s per candidate, steady, ttl 15s",
            format!("{per_candidate:.2}"),
        );
        drop(g);
        // client-go's request pattern at its defaults (LeaseDuration 15s, RetryPeriod
        // 2s), 4 replicas of one election, on the same fake.
        let replicas = 4;
        let before = total(&api);
        let window = Duration::from_secs(30);
        client_go_peer(api.port, "team", "bench-client-go", replicas, window);
        row(
            "peer, same fake: client-go leaderelection (defaults) API requests/s per candidate, steady",
            format!(
                "{:.2}",
                (total(&api) - before) as f64 / window.as_secs_f64() / replicas as f64
            ),
        );
        let mut g = Group::new(kube_args(&kubeconfig, "2s", "bench-crash"), CANDIDATES);
        let h = handover(&mut g, Stop::Crash, rounds.min(20), None);
        row(
            "kubernetes (fake API): crash failover, ttl 2s (kill -9 → new claim)",
            fmt_ms(&stats(h.latency)),
        );
        drop(g);
    }
    if wants("zookeeper") {
        use std::process::{Command, Stdio};
        let zk = common::zk_server::ZkEnsemble::start(1);
        let connect = zk.connect_string();
        let mut g = Group::new(zk_args(&connect, "4s", "bench"), CANDIDATES);
        let h = handover(&mut g, Stop::Graceful, rounds, None);
        row(
            "zookeeper: graceful handover (SIGTERM → new claim)",
            fmt_ms(&stats(h.latency)),
        );
        row(
            "zookeeper: acquire round trip (request sent → claim)",
            fmt_ms(&stats(h.acquire)),
        );
        let packets = |z: &common::zk_server::ZkEnsemble| z.mntr("zk_packets_received");
        let window = Duration::from_secs(10);
        let p0 = packets(&zk);
        std::thread::sleep(window);
        let p1 = packets(&zk);
        row(
            "zookeeper, ttl 4s: requests/s per candidate at steady state (pings included)",
            format!(
                "{:.2}",
                (p1 - p0) / window.as_secs_f64() / CANDIDATES as f64
            ),
        );
        drop(g);
        let kazoo = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/peers/kazoo_election.py"
        );
        let has_kazoo = Command::new("python3")
            .args(["-c", "import kazoo"])
            .status()
            .is_ok_and(|s| s.success());
        if has_kazoo {
            let spawn = |i: usize| {
                Command::new("python3")
                    .args([kazoo, &connect, "/bench-kazoo", &format!("k{i}")])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("python3")
            };
            let stop = |c: &mut std::process::Child| common::send_signal(c.id(), libc::SIGTERM);
            let lat = peer_handover(&spawn, &stop, &leader_stamp, rounds);
            if !lat.is_empty() {
                row(
                    "peer, same server: kazoo Election graceful handover",
                    fmt_ms(&stats(lat)),
                );
            }
        }
        let classes = tempfile::tempdir().expect("dir");
        let cp = "/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/guava.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar";
        let source = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/CuratorLatch.java"
        );
        let built = Command::new("javac")
            .args(["-cp", cp, "-d"])
            .arg(classes.path())
            .arg(source)
            .status()
            .is_ok_and(|s| s.success());
        if built {
            let full_cp = format!("{}:{cp}", classes.path().display());
            let spawn = |i: usize| {
                Command::new("java")
                    .args([
                        "-cp",
                        &full_cp,
                        "CuratorLatch",
                        &connect,
                        "/bench-curator",
                        &format!("c{i}"),
                    ])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("java")
            };
            let stop = |c: &mut std::process::Child| {
                use std::io::Write;
                if let Some(stdin) = c.stdin.as_mut() {
                    let _ = writeln!(stdin, "close");
                    let _ = stdin.flush();
                }
            };
            let lat = peer_handover(&spawn, &stop, &leader_stamp, rounds);
            if !lat.is_empty() {
                row(
                    "peer, same server: Curator LeaderLatch graceful handover (close)",
                    fmt_ms(&stats(lat)),
                );
            }
        }
        let mut g = Group::new(zk_args(&connect, "2s", "bench-crash"), CANDIDATES);
        let h = handover(&mut g, Stop::Crash, rounds.min(30), None);
        row(
            "zookeeper: crash failover, session timeout 2s (kill -9 → new claim)",
            fmt_ms(&stats(h.latency)),
        );
        drop(g);
    }

    if wants("steady") {
        // Steady state with the default ttl (15s): one leader alone, then with followers.
        let server2 = RedisServer::start();
        let window = Duration::from_secs(
            std::env::var("LK_BENCH_WINDOW_S")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(20),
        );
        let mut g = Group::new(redis_args(&server2.url(), "15s", "bench"), 1);
        g.leader(Duration::from_secs(10)).expect("leader");
        let leader_rate = redis_rate(&server2, window);
        for slot in 1..CANDIDATES {
            let s = g.spawn(slot);
            g.slots.push(s);
        }
        assert!(g.settled(0));
        let all_rate = redis_rate(&server2, window);
        row(
            "redis, ttl 15s: leader requests/s at steady state (script calls)",
            format!("{leader_rate:.2}"),
        );
        row(
            "redis, ttl 15s: follower requests/s at steady state, each (script calls)",
            format!(
                "{:.2}",
                (all_rate - leader_rate).max(0.0) / (CANDIDATES - 1) as f64
            ),
        );

        let (rss, cpu) = idle_footprint(&g.slots[0], Duration::from_secs(10));
        row(
            "redis leader idle: RSS / CPU",
            format!("{rss:.1} MiB / {cpu:.3} ms/s"),
        );
        let (rss, cpu) = idle_footprint(&g.slots[1], Duration::from_secs(10));
        row(
            "redis follower idle: RSS / CPU",
            format!("{rss:.1} MiB / {cpu:.3} ms/s"),
        );
        let rps = leader_throughput(g.slots[0].port, 4, Duration::from_secs(3));
        row(
            "GET /leader, 4 kept-alive clients on the same 2 cores",
            format!("{rps:.0} req/s"),
        );
        drop(g);
    }
    let size = std::fs::metadata(env!("CARGO_BIN_EXE_leasekeeper"))
        .map(|m| m.len())
        .unwrap_or(0);
    row(
        "release binary size (stripped)",
        format!("{:.1} MiB", size as f64 / 1048576.0),
    );

    let _ = std::fs::write("target/bench-results.md", out);
}

/// Claims of every slot's transition log (dead processes' included), by start.
fn all_claims(g: &Group) -> Vec<common::checker::LoggedClaim> {
    let mut claims = BTreeMap::new();
    for slot in 0..g.slots.len() {
        let text = std::fs::read_to_string(g.log(slot)).unwrap_or_default();
        common::checker::parse_claims(&text, &mut claims);
    }
    let mut claims: Vec<_> = claims.into_values().collect();
    claims.sort_by_key(|c| c.start);
    claims
}

/// `LK_BENCH_ONLY=scale`: `LK_BENCH_CANDIDATES` (100) candidates on one election per
/// backend, ttl 15 s: store requests/s at steady state, sidecar RSS and CPU per
/// candidate, then `LK_BENCH_SCALE_ROUNDS` (10) graceful handovers: latency and store
/// requests per handover (the steady rate subtracted; the stopped candidate's restart,
/// as a follower that joins, included), and the outside observer's overlap check on
/// every claim of the run.
fn scale(row: &mut impl FnMut(&str, String)) {
    use common::etcd_server::EtcdCluster;
    use common::fake_kube::FakeKube;
    use common::zk_server::ZkEnsemble;
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("LK_BENCH_CANDIDATES", 100);
    let rounds = env("LK_BENCH_SCALE_ROUNDS", 10);
    let redis_all = |s: &RedisServer| -> f64 {
        let info = s.command("INFO commandstats").unwrap_or_default();
        info.lines()
            .filter(|l| l.starts_with("cmdstat_"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .sum()
    };
    let dir = tempfile::tempdir().expect("dir");
    let redis = RedisServer::start();
    let redlock: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let etcd = EtcdCluster::start(1);
    let zk = ZkEnsemble::start(1);
    let api = FakeKube::start("team");
    let kubeconfig = api.kubeconfig();
    let redlock_urls = redlock
        .iter()
        .map(|s| s.url())
        .collect::<Vec<_>>()
        .join(",");
    type Count<'a> = Box<dyn Fn() -> f64 + 'a>;
    let cases: Vec<(&str, Vec<String>, Option<Count>)> = vec![
        ("file", file_args(dir.path(), "15s"), None),
        (
            "redis",
            redis_args(&redis.url(), "15s", "scale"),
            Some(Box::new(|| redis_all(&redis))),
        ),
        (
            "redlock(3)",
            redlock_args(&redlock_urls, "15s", "scale"),
            Some(Box::new(|| redlock.iter().map(redis_all).sum())),
        ),
        (
            "etcd",
            etcd_args(&etcd.endpoints(), "15s", "scale"),
            Some(Box::new(|| {
                etcd.metric(0, "grpc_server_handled_total", "grpc_type=\"unary\"")
                    + etcd.metric(
                        0,
                        "grpc_server_msg_received_total",
                        "grpc_type=\"bidi_stream\"",
                    )
            })),
        ),
        (
            "zookeeper",
            zk_args(&zk.connect_string(), "15s", "scale"),
            Some(Box::new(|| zk.mntr("zk_packets_received"))),
        ),
        (
            "kubernetes (fake API)",
            kube_args(&kubeconfig, "15s", "scale"),
            Some(Box::new(|| api.requests().values().sum::<usize>() as f64)),
        ),
    ];
    let only_backend = std::env::var("LK_BENCH_SCALE_BACKEND").ok();
    for (name, args, count) in cases {
        if only_backend
            .as_deref()
            .is_some_and(|b| !name.starts_with(b))
        {
            continue;
        }
        let started = Instant::now();
        let mut g = Group::new(args, n);
        let leader = g.leader(Duration::from_secs(60)).expect("a leader");
        assert!(g.settled(leader), "{name}: {n} candidates never settled");
        // Steady state: a window after every follower has settled.
        std::thread::sleep(Duration::from_secs(3));
        let window = Duration::from_secs(15);
        let cpu0: u64 = g.slots.iter().map(|s| proc_cpu_ns(s.pid)).sum();
        let r0 = count.as_ref().map(|c| c());
        std::thread::sleep(window);
        let r1 = count.as_ref().map(|c| c());
        let cpu1: u64 = g.slots.iter().map(|s| proc_cpu_ns(s.pid)).sum();
        let rss: u64 = g.slots.iter().map(|s| rss_kib(s.pid)).sum();
        let steady = match (r0, r1) {
            (Some(a), Some(b)) => Some((b - a) / window.as_secs_f64()),
            _ => None,
        };
        let t0 = Instant::now();
        let h0 = count.as_ref().map(|c| c());
        let h = handover(&mut g, Stop::Graceful, rounds, None);
        // Count the last handover's requests in full: every follower has caught up.
        let last = g.leader(Duration::from_secs(30)).expect("a leader");
        assert!(g.settled(last), "{name}: followers never caught up");
        let h1 = count.as_ref().map(|c| c());
        let spent = t0.elapsed().as_secs_f64();
        let claims = all_claims(&g);
        common::checker::check_claims_never_overlap(&claims);
        common::checker::check_tokens_strictly_grow(&claims);
        let label = format!("scale, {name}, {n} candidates, ttl 15s");
        row(
            &format!("{label}: graceful handover"),
            fmt_ms(&stats(h.latency)),
        );
        match (steady, h0, h1) {
            (Some(rate), Some(a), Some(b)) => {
                row(
                    &format!(
                        "{label}: store requests/s at steady state (all candidates; per candidate)"
                    ),
                    format!("{rate:.1}; {:.3}", rate / n as f64),
                );
                let per = ((b - a) - rate * spent).max(0.0) / rounds as f64;
                row(
                    &format!("{label}: store requests per handover (restart of the stopped candidate included; per waiting candidate)"),
                    format!("{per:.0}; {:.2}", per / (n - 1) as f64),
                );
            }
            _ => row(
                &format!("{label}: store requests"),
                "none (the kernel holds the lock)".to_owned(),
            ),
        }
        row(
            &format!(
                "{label}: sidecar RSS per candidate, MiB; CPU per candidate at steady state, ms/s"
            ),
            format!(
                "{:.1}; {:.3}",
                rss as f64 / 1024.0 / n as f64,
                cpu1.saturating_sub(cpu0) as f64 / 1e6 / window.as_secs_f64() / n as f64
            ),
        );
        row(
            &format!("{label}: overlaps seen by the outside observer"),
            format!(
                "0 over {} claims ({:.0} s)",
                claims.len(),
                started.elapsed().as_secs_f64()
            ),
        );
        drop(g);
    }
}

/// One request to the fake API (plain HTTP, its bearer token): (status, body).
fn kube_call(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Option<(u16, serde_json::Value)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        common::fake_kube::TOKEN,
        body.len()
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        code,
        serde_json::from_str(rest).unwrap_or(serde_json::Value::Null),
    ))
}

/// client-go's `leaderelection` loop (k8s.io/client-go/tools/leaderelection,
/// tryAcquireOrRenew) at its defaults, one thread per replica for `window`: every
/// RetryPeriod (2 s) a follower GETs the Lease and writes only when it is free or
/// expired (observed unchanged for LeaseDuration, 15 s); the leader renews with an
/// optimistic UPDATE from the record it last wrote (the fast path of client-go 1.24+),
/// falling back to GET on a conflict.
fn client_go_peer(port: u16, namespace: &str, name: &str, replicas: usize, window: Duration) {
    let end = Instant::now() + window;
    let base = format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases");
    let now = || {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let secs = t.as_secs();
        // RFC 3339 with microseconds, UTC (days from the epoch by the civil calendar).
        let (z, rem) = ((secs / 86400) as i64 + 719_468, secs % 86400);
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            t.subsec_micros()
        )
    };
    let threads: Vec<_> = (0..replicas)
        .map(|i| {
            let (base, name) = (base.clone(), name.to_owned());
            std::thread::spawn(move || {
                let me = format!("client-go-{i}");
                let path = format!("{base}/{name}");
                let mut mine: Option<serde_json::Value> = None;
                // (record, when we saw it change) for the expiry rule.
                let mut observed: Option<(serde_json::Value, Instant)> = None;
                while Instant::now() < end {
                    let spec_of = |holder: &str, lease: Option<&serde_json::Value>| {
                        let old = lease.map(|l| l["spec"].clone()).unwrap_or_default();
                        let same = old["holderIdentity"] == holder;
                        serde_json::json!({
                            "holderIdentity": holder,
                            "leaseDurationSeconds": 15,
                            "acquireTime": if same { old["acquireTime"].clone() } else { serde_json::json!(now()) },
                            "renewTime": now(),
                            "leaseTransitions": old["leaseTransitions"].as_i64().unwrap_or(0) + i64::from(!same && lease.is_some()),
                        })
                    };
                    if let Some(lease) = mine.take() {
                        let mut next = lease.clone();
                        next["spec"] = spec_of(&me, Some(&lease));
                        if let Some((200, written)) = kube_call(port, "PUT", &path, Some(&next)) {
                            mine = Some(written);
                        }
                    } else {
                        match kube_call(port, "GET", &path, None) {
                            Some((404, _)) => {
                                let lease = serde_json::json!({
                                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                    "metadata": {"name": name, "namespace": "team"},
                                    "spec": spec_of(&me, None),
                                });
                                if let Some((201, written)) = kube_call(port, "POST", &base, Some(&lease)) {
                                    mine = Some(written);
                                }
                            }
                            Some((200, lease)) => {
                                let spec = lease["spec"].clone();
                                let changed = observed.as_ref().is_none_or(|(o, _)| *o != spec);
                                if changed {
                                    observed = Some((spec.clone(), Instant::now()));
                                }
                                let since = observed.as_ref().map(|(_, t)| t.elapsed()).unwrap_or_default();
                                let free = spec["holderIdentity"].as_str().unwrap_or("").is_empty()
                                    || spec["holderIdentity"] == me.as_str()
                                    || since > Duration::from_secs(15);
                                if free {
                                    let mut next = lease.clone();
                                    next["spec"] = spec_of(&me, Some(&lease));
                                    if let Some((200, written)) = kube_call(port, "PUT", &path, Some(&next)) {
                                        mine = Some(written);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                    std::thread::sleep(Duration::from_secs(2));
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}
