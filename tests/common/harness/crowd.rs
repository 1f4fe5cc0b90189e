//! A crowd against the status port (the hostile-client test and its bench): 10,000
//! idle and slow connections, `/watch` subscribers that never read, a flood of
//! `GET /leader` and garbage, all at once against the leader of three sidecars on one
//! Redis, while fresh probes ask from another address. What was seen comes back as an
//! [`AbuseReport`]; the test judges it, the bench prints it.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::servers::redis_server::RedisServer;
use crate::common::{eventually, free_port, leasekeeper_bin, SidecarArgs};

/// A sidecar started with a given open-files limit, killed on drop.
struct Limited {
    child: Child,
    port: u16,
}

impl Limited {
    fn spawn(dir: &Path, redis: &str, name: &str, nofile: (u64, u64)) -> Limited {
        let port = free_port();
        let mut command = Command::new(leasekeeper_bin());
        command
            .args(
                SidecarArgs::redis(redis)
                    .ttl("2s")
                    .election("abuse")
                    .build(),
            )
            .args(["--identity", name, "--log-format", "json"])
            .arg("--transition-log")
            .arg(dir.join(format!("{name}.log")))
            .args(["--http-addr", &format!("127.0.0.1:{port}")])
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join(format!("{name}.stderr"))).expect("stderr"),
            ));
        let (soft, hard) = nofile;
        // SAFETY: setrlimit is async-signal-safe; it only touches the child.
        unsafe {
            command.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("spawn leasekeeper");
        Limited { child, port }
    }

    fn status_kib(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("proc status");
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("field")
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One blocking GET on a fresh connection, whole answer within `limit`.
pub fn get(port: u16, path: &str, limit: Duration) -> Option<String> {
    ask(port, path, limit).ok()
}

/// [`get`], with why it failed.
pub fn ask(port: u16, path: &str, limit: Duration) -> Result<String, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        format!("{path}: {what} after {:?}: {e}", started.elapsed())
    };
    let mut s = super::http::connect(addr, limit).map_err(|e| failed("connect", &e))?;
    // The whole head in one write, as kubelet's and curl's requests come: a head in
    // pieces (`write!` makes a write of each piece) looks, at the cap and from the
    // crowd's own address, like one of the crowd's half requests.
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes())
        .map_err(|e| failed("write", &e))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| failed("read", &e))?;
    if !out.starts_with("HTTP/1.1 200") || started.elapsed() > limit {
        return Err(failed("answer", &out.lines().next().unwrap_or("nothing")));
    }
    Ok(out)
}

/// Raises this test process's own open-files soft limit (it holds 10,000 sockets).
pub fn raise_own_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit on this process with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    lim.rlim_max
}

/// The crowd's runtime: two threads at a lower priority (nice 10) than the sidecars
/// and the probes. In a cluster the crowd runs on other machines and the sidecar's CPU
/// is its own; on one machine the crowd would otherwise take the sidecar's CPU, and on
/// a loaded machine dial faster than a starved sidecar can accept, which measures the
/// scheduler, not the sidecar. With spare CPU the crowd runs at full speed.
fn crowd_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| {
            // SAFETY: sets this very thread's nice value (a thread id is a `who` of
            // PRIO_PROCESS on Linux); no memory is touched.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
            }
        })
        .enable_all()
        .build()
        .expect("runtime")
}

/// What the attack saw.
#[derive(Default)]
struct Seen {
    held: AtomicUsize,
    dialed: AtomicUsize,
    garbage_sent: AtomicUsize,
    /// Garbage answered with anything but a 4xx or a closed connection.
    garbage_wrong: AtomicUsize,
    floods: AtomicUsize,
}

/// How long a fresh probe waits for its answer (kubelet's default probe timeout).
const SECOND: Duration = Duration::from_secs(1);

/// The crowd's own address: another Pod, as far as the sidecar can tell (the probes
/// come from 127.0.0.1, as kubelet's come from the node).
const CROWD: [u8; 4] = [127, 0, 0, 2];

/// A connection from the crowd's address.
async fn dial(addr: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(std::net::SocketAddr::from((CROWD, 0)))?;
    socket.connect(addr).await
}

/// The crowd: idle and slow connections, silent subscribers, a flood and garbage,
/// until `stop`.
async fn attack(port: u16, idle: usize, stop: Arc<AtomicBool>, seen: Arc<Seen>) {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            // A subscriber that never reads.
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = dial(addr).await {
                    let _ = s.write_all(b"GET /watch HTTP/1.1\r\nHost: x\r\n\r\n").await;
                    while !stop.load(Ordering::Relaxed) {
                        // Pause: the subscriber holds its connection, reading nothing, until stopped.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        }));
    }
    for _ in 0..6 {
        let (stop, seen) = (stop.clone(), seen.clone());
        tasks.push(tokio::spawn(flood(addr, stop, seen)));
    }
    tasks.push(tokio::spawn(garbage(addr, stop.clone(), seen.clone())));
    for i in 0..idle {
        let (stop, seen) = (stop.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            // Half a request line, then nothing; again whenever the server lets go.
            while !stop.load(Ordering::Relaxed) {
                let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(2), dial(addr)).await
                else {
                    // Pause: before dialling again.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                seen.dialed.fetch_add(1, Ordering::Relaxed);
                let line: &[u8] = if i % 2 == 0 { b"GET /lea" } else { b"" };
                let _ = s.write_all(line).await;
                seen.held.fetch_add(1, Ordering::Relaxed);
                let mut buf = [0u8; 64];
                let _ = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await;
                seen.held.fetch_sub(1, Ordering::Relaxed);
                // Let go by the server: dial again a moment later, as a pool would.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
        if i % 500 == 499 {
            tokio::task::yield_now().await;
        }
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Kept-alive `GET /leader` as fast as answers come.
async fn flood(addr: std::net::SocketAddr, stop: Arc<AtomicBool>, seen: Arc<Seen>) {
    let mut buf = vec![0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = dial(addr).await else {
            // Pause: before dialling again.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            if s.write_all(b"GET /leader HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .is_err()
            {
                break;
            }
            match tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {
                    seen.floods.fetch_add(1, Ordering::Relaxed);
                }
                _ => break,
            }
        }
    }
}

/// Oversized and malformed requests; each must get a 4xx or a closed connection.
async fn garbage(addr: std::net::SocketAddr, stop: Arc<AtomicBool>, seen: Arc<Seen>) {
    let big_header = format!(
        "GET /leader HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(2 << 20)
    );
    let big_body = format!(
        "POST /release HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{}",
        10 << 20,
        "b".repeat(10 << 20)
    );
    let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "c".repeat(64 << 10));
    let junk: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    let cases: [&[u8]; 4] = [
        big_header.as_bytes(),
        big_body.as_bytes(),
        long_line.as_bytes(),
        &junk,
    ];
    while !stop.load(Ordering::Relaxed) {
        for case in cases {
            let Ok(mut s) = dial(addr).await else {
                continue;
            };
            seen.garbage_sent.fetch_add(1, Ordering::Relaxed);
            // The server may close before all of it is sent: that is an answer too.
            let _ = tokio::time::timeout(Duration::from_secs(5), s.write_all(case)).await;
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(6), s.read_to_end(&mut answer)).await;
            let text = String::from_utf8_lossy(&answer);
            let four_xx = text.starts_with("HTTP/1.1 4");
            if !(answer.is_empty() || four_xx) {
                seen.garbage_wrong.fetch_add(1, Ordering::Relaxed);
                eprintln!("garbage answered with {:?}", text.lines().next());
            }
        }
    }
}

fn claim_starts(dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{name}.log")))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"claim_start\""))
        .count()
}

/// What one run under the crowd saw.
#[derive(Debug, Default)]
pub struct AbuseReport {
    pub crowd: usize,
    /// Connections the crowd opened in all (each client dials again a second after
    /// the sidecar closes it).
    pub dialed: usize,
    /// Crowd connections open (as the crowd sees them) near the end.
    pub held: usize,
    pub probes: usize,
    pub answered: usize,
    /// Probes of the leader missed while the same probe of an unabused follower, sent
    /// beside it, missed too: the machine stalled, not the leader.
    pub stalled: usize,
    pub scrapes: usize,
    pub scraped: usize,
    pub floods: usize,
    pub garbage_sent: usize,
    pub garbage_wrong: usize,
    pub idle_kib: u64,
    pub peak_kib: u64,
    pub after_kib: u64,
    /// How long after the crowd left the RSS was under the settle limit (`None`: not
    /// within 10 s).
    pub settled_in: Option<Duration>,
    pub leader_claims: usize,
    pub follower_claims: usize,
    pub still_leads: bool,
    /// Why probes failed.
    pub failures: Vec<String>,
    /// Whether the leader's log shows a panic.
    pub panicked: bool,
}

/// The runs hold thousands of sockets each: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Three sidecars (their open-files limits `nofile`) on one Redis; the crowd against
/// the leader until it has gathered (every client dialed, the flood answered, garbage
/// sent; at most 60 s), then for `load_for` while probes ask; then 10 s for the RSS to
/// come back under `settle_limit(idle KiB)`.
pub fn under_abuse(
    nofile: (u64, u64),
    load_for: Duration,
    settle_limit: impl Fn(u64) -> u64,
) -> AbuseReport {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // 10,000 clients, or as many as this process may hold with room to spare.
    let crowd = usize::try_from(raise_own_limit().saturating_sub(2_000))
        .unwrap_or(10_000)
        .min(10_000);
    let dir = tempfile::tempdir().expect("dir");
    let redis = RedisServer::start();
    let leader = Limited::spawn(dir.path(), &redis.url(), "a", nofile);
    let ready = eventually(Duration::from_secs(20), || {
        get(leader.port, "/leader", Duration::from_secs(1))
            .filter(|b| b.contains("\"is_leader\":true"))
    });
    assert!(ready.is_some(), "the first sidecar did not lead");
    let followers = [
        Limited::spawn(dir.path(), &redis.url(), "b", nofile),
        Limited::spawn(dir.path(), &redis.url(), "c", nofile),
    ];
    for f in &followers {
        let up = eventually(Duration::from_secs(20), || {
            get(f.port, "/readyz", Duration::from_secs(1))
        });
        assert!(up.is_some(), "a follower did not start");
    }
    let mut r = AbuseReport {
        crowd,
        idle_kib: leader.status_kib("VmRSS:"),
        ..AbuseReport::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let runtime = crowd_runtime();
    let crowd_thread = {
        let (stop, seen, port) = (stop.clone(), seen.clone(), leader.port);
        std::thread::spawn(move || runtime.block_on(attack(port, crowd, stop, seen)))
    };
    let gathered = eventually(Duration::from_secs(60), || {
        let dialed = seen.dialed.load(Ordering::Relaxed);
        let floods = seen.floods.load(Ordering::Relaxed);
        let garbage = seen.garbage_sent.load(Ordering::Relaxed);
        (dialed >= crowd && floods > 0 && garbage > 0).then_some(())
    });
    if gathered.is_some() {
        probe_while_loaded(&leader, &followers[0], load_for, &mut r);
    }
    r.held = seen.held.load(Ordering::Relaxed);
    r.dialed = seen.dialed.load(Ordering::Relaxed);
    r.peak_kib = leader.status_kib("VmHWM:");
    stop.store(true, Ordering::Relaxed);
    let _ = crowd_thread.join();
    let left = Instant::now();
    let settled = eventually(Duration::from_secs(10), || {
        (leader.status_kib("VmRSS:") < settle_limit(r.idle_kib)).then_some(())
    });
    r.settled_in = settled.map(|()| left.elapsed());
    r.after_kib = leader.status_kib("VmRSS:");
    r.floods = seen.floods.load(Ordering::Relaxed);
    r.garbage_sent = seen.garbage_sent.load(Ordering::Relaxed);
    r.garbage_wrong = seen.garbage_wrong.load(Ordering::Relaxed);
    let view = get(leader.port, "/leader", Duration::from_secs(1)).unwrap_or_default();
    r.still_leads = view.contains("\"is_leader\":true");
    r.leader_claims = claim_starts(dir.path(), "a");
    r.follower_claims = claim_starts(dir.path(), "b") + claim_starts(dir.path(), "c");
    r.panicked = std::fs::read_to_string(dir.path().join("a.stderr"))
        .unwrap_or_default()
        .contains("panicked");
    drop(followers);
    r
}

/// Every 500 ms for `load_for` once the crowd gathered: a fresh probe of `/leader`,
/// `/healthz` and `/readyz` (1 s each) and a scrape of `/metrics` (2 s). Each probe
/// of the leader goes with the same probe of `control`, a follower the crowd leaves
/// alone: when both miss, the machine stalled (a build beside the suite), and the
/// miss counts as `stalled`, not against the leader.
fn probe_while_loaded(
    leader: &Limited,
    control: &Limited,
    load_for: Duration,
    r: &mut AbuseReport,
) {
    let started = Instant::now();
    while started.elapsed() < load_for {
        // Pause: a probe every 500 ms while the crowd is loaded.
        std::thread::sleep(Duration::from_millis(500));
        for path in ["/leader", "/healthz", "/readyz"] {
            r.probes += 1;
            let (asked, beside) = ask_beside((leader.port, control.port), path);
            match asked {
                Ok(_) => r.answered += 1,
                Err(why) if !beside => {
                    r.stalled += 1;
                    r.failures
                        .push(format!("{why} (the unabused follower missed too)"));
                }
                Err(why) => r.failures.push(why),
            }
        }
        r.scrapes += 1;
        r.scraped += usize::from(get(leader.port, "/metrics", Duration::from_secs(2)).is_some());
    }
}

/// A fresh probe of `path` (1 s) on the first of `ports`, and the same probe of the
/// second (a sidecar the crowd leaves alone) beside it: the first's answer, and
/// whether the second was answered.
fn ask_beside(ports: (u16, u16), path: &str) -> (Result<String, String>, bool) {
    std::thread::scope(|s| {
        let beside = s.spawn(|| ask(ports.1, path, SECOND));
        let asked = ask(ports.0, path, SECOND);
        (asked, beside.join().is_ok_and(|b| b.is_ok()))
    })
}

/// What fresh probes saw while a burst was being opened: for each probe, when it
/// started (from the burst's start) and whether it was answered within 1 s.
#[derive(Debug, Default)]
pub struct BurstReport {
    pub slow: usize,
    /// Connections the burst opened in all (it dials again at once whenever the
    /// sidecar lets one go).
    pub dialed: usize,
    /// Each probe: when it started, whether the sidecar answered it within 1 s, and
    /// whether the same probe of a follower the burst leaves alone was answered.
    pub probes: Vec<(Duration, bool, bool)>,
    /// Why probes failed.
    pub failures: Vec<String>,
    /// Whether the sidecar's log shows a panic.
    pub panicked: bool,
}

impl BurstReport {
    /// Probes answered within 1 s, per window of `width` from the burst's start:
    /// (window start, answered, missed by the unabused follower too, asked).
    pub fn windows(&self, width: Duration) -> Vec<(Duration, usize, usize, usize)> {
        let mut out: Vec<(Duration, usize, usize, usize)> = Vec::new();
        for &(at, ok, beside) in &self.probes {
            let i = (at.as_millis() / width.as_millis()) as usize;
            while out.len() <= i {
                out.push((width * out.len() as u32, 0, 0, 0));
            }
            out[i].1 += usize::from(ok);
            out[i].2 += usize::from(!ok && !beside);
            out[i].3 += 1;
        }
        out
    }
}

/// Slow connections from `from`: each sends half a request line (or nothing) and
/// never finishes it; let go by the sidecar, it dials again at once.
async fn slow_client(
    addr: std::net::SocketAddr,
    from: [u8; 4],
    i: usize,
    stop: Arc<AtomicBool>,
    seen: Arc<Seen>,
) {
    while !stop.load(Ordering::Relaxed) {
        let socket = match tokio::net::TcpSocket::new_v4() {
            Ok(s) => s,
            Err(_) => {
                // Pause: before trying for a socket again.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Never from another address than `from` (out of ports there: wait).
        if socket.bind(std::net::SocketAddr::from((from, 0))).is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(2), socket.connect(addr)).await
        else {
            // Pause: before dialling again.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        seen.dialed.fetch_add(1, Ordering::Relaxed);
        let line: &[u8] = if i.is_multiple_of(2) {
            b"GET /lea"
        } else {
            b""
        };
        let _ = s.write_all(line).await;
        let mut buf = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            let read = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await;
            if let Ok(Ok(0) | Err(_)) = read {
                break;
            }
        }
    }
}

/// The burst: `slow` slow connections opened at once, one `/watch` that is never
/// read, a kept-alive `GET /leader` flood and garbage, all from `from`, until `stop`.
async fn burst(port: u16, from: [u8; 4], slow: usize, stop: Arc<AtomicBool>, seen: Arc<Seen>) {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut tasks = Vec::new();
    for i in 0..slow {
        tasks.push(tokio::spawn(slow_client(
            addr,
            from,
            i,
            stop.clone(),
            seen.clone(),
        )));
    }
    {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut held = None;
            while !stop.load(Ordering::Relaxed) {
                if held.is_none() {
                    if let Ok(mut s) = dial(addr).await {
                        let _ = s.write_all(b"GET /watch HTTP/1.1\r\nHost: x\r\n\r\n").await;
                        held = Some(s);
                    }
                }
                // Pause: the watchers hold their connections, reading nothing, until stopped.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }));
    }
    for _ in 0..4 {
        tasks.push(tokio::spawn(flood(addr, stop.clone(), seen.clone())));
    }
    tasks.push(tokio::spawn(garbage(addr, stop.clone(), seen.clone())));
    for t in tasks {
        let _ = t.await;
    }
}

/// One sidecar (open-files limit `nofile`) on Redis; `slow` slow connections opened
/// at once against it from `from` (the crowd's own address, or the probes' own,
/// 127.0.0.1), with the rest of the burst, on the crowd's runtime (below the
/// sidecars' priority); a fresh `GET /leader` every 100 ms from the burst's first
/// moment for `probe_for`, each on a new connection, answered within 1 s or failed,
/// each beside the same probe of a follower the burst leaves alone (when both miss,
/// the machine stalled).
pub fn under_burst(
    nofile: (u64, u64),
    slow: usize,
    from: [u8; 4],
    probe_for: Duration,
) -> BurstReport {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    raise_own_limit();
    let dir = tempfile::tempdir().expect("dir");
    let redis = RedisServer::start();
    let leader = Limited::spawn(dir.path(), &redis.url(), "a", nofile);
    let ready = eventually(Duration::from_secs(20), || {
        get(leader.port, "/leader", Duration::from_secs(1))
            .filter(|b| b.contains("\"is_leader\":true"))
    });
    assert!(ready.is_some(), "the sidecar did not lead");
    let control = Limited::spawn(dir.path(), &redis.url(), "b", nofile);
    let up = eventually(Duration::from_secs(20), || {
        get(control.port, "/readyz", Duration::from_secs(1))
    });
    assert!(up.is_some(), "the follower did not start");
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let runtime = crowd_runtime();
    let started = Instant::now();
    let burst_thread = {
        let (stop, seen, port) = (stop.clone(), seen.clone(), leader.port);
        std::thread::spawn(move || runtime.block_on(burst(port, from, slow, stop, seen)))
    };
    let mut probes = Vec::new();
    let mut n = 0u32;
    // Probes start at 0, 100 ms, … up to but not at `probe_for`: every 2 s window
    // the judge counts holds 20 of them (a last window of one probe would allow it no
    // miss at all).
    loop {
        let at = Duration::from_millis(100) * n;
        if at >= probe_for {
            break;
        }
        n += 1;
        if let Some(wait) = at.checked_sub(started.elapsed()) {
            // Pause: probes at a fixed rate, one every 100 ms.
            std::thread::sleep(wait);
        }
        let ports = (leader.port, control.port);
        probes.push((at, std::thread::spawn(move || ask_beside(ports, "/leader"))));
    }
    let mut r = BurstReport {
        slow,
        ..BurstReport::default()
    };
    for (at, probe) in probes {
        let (answer, beside) = probe
            .join()
            .unwrap_or_else(|_| (Err("probe panicked".into()), false));
        r.probes.push((at, answer.is_ok(), beside));
        if let Err(why) = answer {
            let both = if beside {
                ""
            } else {
                " (the follower missed too)"
            };
            r.failures.push(format!("at {at:?}: {why}{both}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = burst_thread.join();
    r.dialed = seen.dialed.load(Ordering::Relaxed);
    r.panicked = std::fs::read_to_string(dir.path().join("a.stderr"))
        .unwrap_or_default()
        .contains("panicked");
    r
}
