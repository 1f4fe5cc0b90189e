//! Exec mode's containment (DESIGN §10): nothing that CMD started outlives the claim,
//! whatever is killed or frozen — the sidecar, its guard, both at once, a group stop,
//! an OOM kill — and nothing it leaves is left unreaped. CMD is a shell that starts
//! a background worker (`sh -c 'sleep <marker> & wait'`); the worker is found in
//! /proc by its marker, and every marker's processes are killed when a test ends,
//! passed or failed.
//!
//! Against a real redis-server at ttl 2 s: a claim ends at most 2 s after its last
//! renewal was sent, so a worker still there 2 s after its sidecar could no longer
//! renew has outlived the claim.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::harness::procs::{self, guard_of, Marker};
use common::servers::redis_server::RedisServer;
use common::{eventually, free_port, leasekeeper_bin, send_signal, Sidecar, SidecarArgs};

/// The ttl of every test here: no claim outlasts the last renewal by more.
const CLAIM: Duration = Duration::from_secs(2);

fn redis_args(redis: &RedisServer, election: &str) -> Vec<String> {
    SidecarArgs::redis(&redis.url())
        .ttl("2s")
        .election(election)
        .build()
}

/// `sh -c '<worker> & wait'`.
fn background(worker: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), format!("{worker} & wait")]
}

fn start(name: &str, dir: &Path, args: &[String], worker: &str) -> Sidecar {
    Sidecar::spawn_run(name, dir, args, &background(worker))
}

/// `s` leads and its worker runs.
fn leads_with_worker(s: &Sidecar, worker: &Marker) {
    s.settles_in("leader", Duration::from_secs(10));
    if worker.wait_running(Duration::from_secs(10)).is_none() {
        panic!(
            "{} leads but its worker never started\n{}",
            s.name,
            s.stderr()
        );
    }
}

/// `a`, started first with `a_cmd` (its worker `a_worker`), leads with its worker, and
/// `b`, with its own, follows.
fn a_leads_b_follows(
    dir: &Path,
    args: &[String],
    (a_cmd, a_worker): (&str, &Marker),
    b_worker: &Marker,
) -> (Sidecar, Sidecar) {
    let a = start("a", dir, args, a_cmd);
    leads_with_worker(&a, a_worker);
    let b = start("b", dir, args, &b_worker.sleep());
    b.settles_in("follower", Duration::from_secs(10));
    (a, b)
}

fn is_leader(s: &Sidecar) -> bool {
    s.leader().is_some_and(|v| v["is_leader"] == true)
}

/// The next leader `b` starts its worker while `a`'s is gone.
fn b_takes_over_alone(b: &Sidecar, b_worker: &Marker, a_worker: &Marker) {
    leads_with_worker(b, b_worker);
    assert!(
        a_worker.procs().is_empty(),
        "two workers at once: {:?} and {:?}",
        a_worker.procs(),
        b_worker.procs()
    );
}

/// The worker is gone within the claim (2 s) of `t0`, when `what` happened; prints
/// how long it took. `log`: the sidecar's log for the failure message.
fn gone_within_the_claim(worker: &Marker, what: &str, t0: Instant, log: impl Fn() -> String) {
    assert!(
        worker.gone_within(CLAIM),
        "the worker still runs {:?} after {what}, past the claim: {:?}\n{}",
        t0.elapsed(),
        worker.procs(),
        log()
    );
    eprintln!("the worker was gone {:?} after {what}", t0.elapsed());
}

#[test]
fn a_kill_9_of_the_sidecar_and_its_guard_at_once_leaves_no_worker_behind() {
    let (a_worker, b_worker) = (Marker::new(), Marker::new());
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = redis_args(&redis, "both");
    let mut a = start("a", dir.path(), &args, &a_worker.sleep());
    leads_with_worker(&a, &a_worker);
    let guard = guard_of(a.pid).expect("a's guard");
    let t0 = Instant::now();
    send_signal(guard, libc::SIGKILL);
    a.kill();
    gone_within_the_claim(
        &a_worker,
        "its sidecar and guard were killed",
        t0,
        String::new,
    );
    let b = start("b", dir.path(), &args, &b_worker.sleep());
    b_takes_over_alone(&b, &b_worker, &a_worker);
}

#[test]
fn a_kill_9_of_the_sidecar_alone_ends_workers_that_left_the_process_group() {
    let (a_worker, b_worker) = (Marker::new(), Marker::new());
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = redis_args(&redis, "setsid");
    let escaped = format!("setsid {}", a_worker.sleep());
    let (mut a, b) = a_leads_b_follows(dir.path(), &args, (&escaped, &a_worker), &b_worker);
    let t0 = Instant::now();
    a.kill();
    gone_within_the_claim(&a_worker, "its sidecar was killed", t0, String::new);
    b_takes_over_alone(&b, &b_worker, &a_worker);
}

/// After the guard of `a` died: its worker is gone within the claim, never two
/// workers run at once, and soon a leader runs its worker again (`a` does not go on
/// leading without one).
fn after_the_guard_died(a: &Sidecar, a_worker: &Marker, b: &Sidecar, b_worker: &Marker) {
    let t0 = Instant::now();
    gone_within_the_claim(a_worker, "its guard was killed", t0, || a.stderr());
    let working = eventually(Duration::from_secs(15), || {
        let (a_runs, b_runs) = (!a_worker.procs().is_empty(), !b_worker.procs().is_empty());
        assert!(!(a_runs && b_runs), "two workers at once");
        if is_leader(a) && a_runs {
            Some("a")
        } else if is_leader(b) && b_runs {
            Some("b")
        } else {
            None
        }
    });
    assert!(
        working.is_some(),
        "no leader runs its worker 15 s after a's guard was killed: a {:?}, b {:?}\n{}",
        a.leader(),
        b.leader(),
        a.stderr()
    );
    eprintln!(
        "after the guard's death {} leads with its worker",
        working.unwrap_or("?")
    );
}

#[test]
fn a_kill_9_of_the_guard_alone_ends_the_worker_and_the_leader_does_not_go_on_without_it() {
    let (a_worker, b_worker) = (Marker::new(), Marker::new());
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = redis_args(&redis, "guard");
    let (a, b) = a_leads_b_follows(dir.path(), &args, (&a_worker.sleep(), &a_worker), &b_worker);
    send_signal(guard_of(a.pid).expect("a's guard"), libc::SIGKILL);
    after_the_guard_died(&a, &a_worker, &b, &b_worker);
}

/// Sends `sig` to the process group `pgid` (a job, as a shell's `kill -SIG -PGID`).
fn signal_group(pgid: u32, sig: i32) {
    // SAFETY: kill(2) on a process group this test started.
    unsafe { libc::kill(-(pgid as i32), sig) };
}

/// SIGCONT to a group on drop, so a failing test leaves nothing stopped.
struct Stopped(u32);

impl Drop for Stopped {
    fn drop(&mut self) {
        signal_group(self.0, libc::SIGCONT);
    }
}

#[test]
fn a_group_stop_of_the_sidecar_does_not_leave_the_worker_running_past_the_claim() {
    let (a_worker, b_worker) = (Marker::new(), Marker::new());
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = redis_args(&redis, "tstp");
    let (a, b) = a_leads_b_follows(dir.path(), &args, (&a_worker.sleep(), &a_worker), &b_worker);
    // Ctrl-Z: the whole job (the sidecar was started as a group of its own).
    let stopped = Stopped(a.pid);
    let t0 = Instant::now();
    signal_group(a.pid, libc::SIGSTOP);
    common::wait_all_threads_stopped(a.pid);
    gone_within_the_claim(&a_worker, "a group stop of its sidecar", t0, String::new);
    b_takes_over_alone(&b, &b_worker, &a_worker);
    drop(stopped);
    let woke = eventually(Duration::from_secs(5), || {
        a.leader().filter(|v| v["is_leader"] == false)
    });
    assert!(woke.is_some(), "a woke still leading: {:?}", a.leader());
    assert!(a_worker.procs().is_empty(), "a started its worker again");
}

/// The guard's own job stopped (it and CMD, never the sidecar): when the claim then
/// runs out (the store stops answering), the frozen guard cannot end CMD, so the
/// sidecar kills the guard before the claim's deadline, and CMD's namespace ends
/// with it (SIGKILL reaches stopped processes). The sidecar lives on, so the kernel's
/// SIGHUP to an orphaned stopped group cannot be what ends it.
#[test]
fn a_frozen_guard_is_killed_by_its_sidecar_before_the_claim_ends() {
    let worker = Marker::new();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = redis_args(&redis, "frozen-guard");
    let a = start("a", dir.path(), &args, &worker.sleep());
    leads_with_worker(&a, &worker);
    let guard = guard_of(a.pid).expect("a's guard");
    // The guard leads a process group of its own, CMD's too.
    let _cont = Stopped(guard);
    signal_group(guard, libc::SIGSTOP);
    common::wait_all_threads_stopped(guard);
    let t0 = Instant::now();
    redis.pause();
    gone_within_the_claim(
        &worker,
        "the store stopped answering while the guard was frozen",
        t0,
        || a.stderr(),
    );
    redis.resume();
}

#[test]
fn orphans_of_the_command_are_reaped_while_it_runs() {
    let worker = Marker::new();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = redis_args(&redis, "zombies");
    // Two orphans that exit after 200 ms, while the command itself goes on.
    let cmd = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!("(sleep 0.2 &); (sleep 0.2 &); {}", worker.sleep()),
    ];
    let a = Sidecar::spawn_run("a", dir.path(), &args, &cmd);
    leads_with_worker(&a, &worker);
    let worker_pid = worker.procs().first().map(|p| p.pid);
    // The orphans (and any fork of the shell not yet turned into one) have exited.
    let exited = eventually(Duration::from_secs(10), || {
        procs::running_below(a.pid, "sleep 0.2", worker_pid)
            .is_empty()
            .then_some(())
    });
    assert!(
        exited.is_some(),
        "the orphans still run: {:?}",
        procs::running_below(a.pid, "sleep 0.2", worker_pid)
    );
    let reaped = eventually(Duration::from_secs(10), || {
        procs::zombies_below(a.pid).is_empty().then_some(())
    });
    assert!(
        reaped.is_some(),
        "zombies below the sidecar while its command runs: {:?}",
        procs::zombies_below(a.pid)
    );
    assert!(!worker.procs().is_empty(), "the command ended");
}

/// A follower's guard, started ahead of its tenure, killed before the tenure comes:
/// the claim starts a guard of its own, and the command runs.
#[test]
fn a_spare_guard_killed_before_the_claim_is_replaced_at_the_claim() {
    let (a_worker, b_worker) = (Marker::new(), Marker::new());
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = redis_args(&redis, "spare");
    let (a, b) = a_leads_b_follows(dir.path(), &args, (&a_worker.sleep(), &a_worker), &b_worker);
    let spare = eventually(Duration::from_secs(5), || guard_of(b.pid));
    let spare = spare.expect("the follower's guard, started ahead");
    send_signal(spare, libc::SIGKILL);
    send_signal(a.pid, libc::SIGTERM);
    b_takes_over_alone(&b, &b_worker, &a_worker);
    assert_ne!(guard_of(b.pid), Some(spare), "the killed guard again");
}

/// The times `pid` has gone to sleep and woken (its voluntary context switches).
fn wakes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// A leader's guard wakes for its orders (a deadline at each renewal, three a
/// second at ttl 2 s), for CMD's processes' ends and when a deadline comes near, not
/// on a timer of its own: a guard that looked every few milliseconds would wake
/// hundreds of times a second for the whole tenure.
#[test]
fn a_guard_sleeps_between_its_orders() {
    let worker = Marker::new();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let a = start(
        "a",
        dir.path(),
        &redis_args(&redis, "sleeper"),
        &worker.sleep(),
    );
    leads_with_worker(&a, &worker);
    let guard = guard_of(a.pid).expect("a guard below the leader");
    let before = wakes(guard).expect("the guard's status");
    // Observed: two seconds of a tenure, six renewals at ttl 2 s.
    std::thread::sleep(Duration::from_secs(2));
    let woke = wakes(guard).expect("the guard's status") - before;
    assert!(
        woke < 60,
        "the guard woke {woke} times in 2 s while its command ran"
    );
    assert!(is_leader(&a), "a still leads");
}

/// The guard run by hand (`leasekeeper __exec-guard <grace> <budget> <warn> -- CMD`),
/// with the sidecar's end of its socket; killed on drop.
struct HandGuard {
    child: Child,
    ours: UnixStream,
}

impl HandGuard {
    fn spawn(cmd: &[String], uid: Option<u32>) -> HandGuard {
        let (ours, theirs) = UnixStream::pair().expect("socket pair");
        let mut command = Command::new(leasekeeper_bin());
        command
            .args(["__exec-guard", "1000", "20", "100", "--"])
            .args(cmd)
            .env("RUST_LOG", "info")
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null());
        if let Some(uid) = uid {
            std::os::unix::process::CommandExt::uid(&mut command, uid);
            std::os::unix::process::CommandExt::gid(&mut command, uid);
        }
        HandGuard {
            child: command.spawn().expect("spawn the guard"),
            ours,
        }
    }

    /// Tells the guard its claim ends `within` from now.
    fn deadline(&mut self, within: Duration) {
        let at = monotonic_ns() + within.as_nanos() as u64;
        writeln!(self.ours, "D {at}").expect("write to the guard");
    }

    /// The guard's lines up to and with its verdict (`exited …`, `stopped`, `deadline`).
    fn verdict(&mut self) -> String {
        let mut lines = BufReader::new(self.ours.try_clone().expect("clone"));
        let mut line = String::new();
        loop {
            line.clear();
            if lines.read_line(&mut line).unwrap_or(0) == 0 {
                return String::new();
            }
            let l = line.trim_matches(|c: char| c.is_whitespace() || c.is_control());
            if l.starts_with("exited") || l == "stopped" || l == "deadline" {
                return l.to_owned();
            }
        }
    }
}

impl Drop for HandGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec; CLOCK_MONOTONIC exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn the_command_does_not_start_before_its_guard_holds_a_deadline() {
    let worker = Marker::new();
    let mut guard = HandGuard::spawn(&background(&worker.sleep()), None);
    // Observed: for 700 ms without a deadline, the command must not start.
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        worker.procs().is_empty(),
        "the command started before its guard was told any deadline: {:?}",
        worker.procs()
    );
    guard.deadline(Duration::from_secs(30));
    assert!(worker.wait_running(Duration::from_secs(5)).is_some());
    writeln!(guard.ours, "T").expect("stop");
    assert_eq!(guard.verdict(), "stopped");
    assert!(
        worker.procs().is_empty(),
        "the verdict came before the worker was gone"
    );
}

/// A guard told that the lease's descriptor comes (`H`) but given none never starts
/// the command: on a store whose lease is that descriptor, CMD would run on a lease
/// that its guard could not keep.
#[test]
fn a_guard_told_of_a_lease_descriptor_it_never_got_does_not_start_the_command() {
    let worker = Marker::new();
    let mut guard = HandGuard::spawn(&background(&worker.sleep()), None);
    writeln!(guard.ours, "H").expect("write to the guard");
    guard.deadline(Duration::from_secs(30));
    assert_eq!(guard.verdict(), "exited 127");
    assert!(
        worker.procs().is_empty(),
        "the command started: {:?}",
        worker.procs()
    );
}

/// The guard as an unprivileged user (no capabilities; a user namespace is how it
/// gets a PID namespace then): a kill -9 of the guard still ends the worker.
#[test]
fn an_unprivileged_guard_killed_with_9_takes_the_worker_with_it() {
    let worker = Marker::new();
    let mut guard = HandGuard::spawn(&background(&worker.sleep()), Some(65534));
    guard.deadline(Duration::from_secs(30));
    let running = worker.wait_running(Duration::from_secs(5));
    assert!(running.is_some(), "the worker never started");
    let t0 = Instant::now();
    let _ = guard.child.kill();
    let _ = guard.child.wait();
    gone_within_the_claim(
        &worker,
        "its unprivileged guard was killed",
        t0,
        String::new,
    );
}

/// A memory cgroup of the test's own (v1 here; v2 where that is the one with the
/// memory controller), removed on drop with whatever is still in it.
struct MemoryCgroup(PathBuf);

impl MemoryCgroup {
    fn new(limit: u64) -> MemoryCgroup {
        let own = std::fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup");
        let (base, limit_file) = match own.lines().find_map(v1_memory_path) {
            Some(path) => (
                Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')),
                "memory.limit_in_bytes",
            ),
            None => (PathBuf::from("/sys/fs/cgroup"), "memory.max"),
        };
        let dir = base.join(format!("lk-oom-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("no memory cgroup at {}: {e}", dir.display()));
        let cg = MemoryCgroup(dir);
        std::fs::write(cg.0.join(limit_file), limit.to_string()).expect("memory limit");
        let swap = cg.0.join("memory.memsw.limit_in_bytes");
        if swap.exists() {
            let _ = std::fs::write(swap, limit.to_string());
        }
        cg
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).expect("join the cgroup");
    }

    /// How many processes the kernel killed in it for want of memory.
    fn oom_kills(&self) -> u64 {
        ["memory.oom_control", "memory.events"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.0.join(f)).ok())
            .flat_map(|t| t.lines().map(str::to_owned).collect::<Vec<_>>())
            .find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

/// The path of a v1 `N:memory:/path` line of /proc/self/cgroup.
fn v1_memory_path(line: &str) -> Option<&str> {
    let mut parts = line.splitn(3, ':');
    let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
    controllers
        .split(',')
        .any(|c| c == "memory")
        .then_some(path)
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse().ok()) {
                send_signal(pid, libc::SIGKILL);
            }
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            // Pause: before the next sweep of the cgroup.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn an_oom_kill_of_the_guard_ends_the_worker() {
    let (a_worker, b_worker) = (Marker::new(), Marker::new());
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = redis_args(&redis, "oom");
    let (a, b) = a_leads_b_follows(dir.path(), &args, (&a_worker.sleep(), &a_worker), &b_worker);
    // The guard and a memory hog share a 64 MiB cgroup; the guard is the OOM
    // killer's first choice.
    let guard = guard_of(a.pid).expect("a's guard");
    let cgroup = MemoryCgroup::new(64 << 20);
    std::fs::write(format!("/proc/{guard}/oom_score_adj"), "1000").expect("oom_score_adj");
    cgroup.add(guard);
    let hog = format!(
        "echo $$ > {}/cgroup.procs && exec python3 -c 'x = b\"x\" * (512 << 20)'",
        cgroup.0.display()
    );
    let mut hog = Command::new("sh")
        .args(["-c", &hog])
        .stderr(Stdio::null())
        .spawn()
        .expect("hog");
    let _ = hog.wait();
    assert!(cgroup.oom_kills() >= 1, "no OOM kill in the cgroup");
    assert!(
        eventually(Duration::from_secs(5), || {
            (procs::all().iter().all(|p| p.pid != guard)).then_some(())
        })
        .is_some(),
        "the guard survived the OOM"
    );
    after_the_guard_died(&a, &a_worker, &b, &b_worker);
}

/// A child killed and reaped on drop (`unshare --kill-child`: its namespace too).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where no PID namespace can be had (here: a user namespace without a mapping,
/// where the sidecar has no capabilities), the sidecar says so in one warning line
/// at start; a guard that vanishes then proves nothing, and the sidecar stops
/// leading and exits 1 instead of leading on beside processes CMD may have left.
/// CMD itself, the guard's child, dies with the guard (its parent-death signal).
#[test]
fn without_a_pid_namespace_the_start_warns_once_and_a_lost_guard_ends_the_sidecar() {
    let worker = Marker::new();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let port = free_port();
    let log = dir.path().join("a.stderr");
    let mut command = Command::new("unshare");
    command
        .arg("--user")
        .arg(leasekeeper_bin())
        .arg("run")
        .args(redis_args(&redis, "plain"))
        .args([
            "--identity",
            "a",
            "--http-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .args(["--log-format", "json", "--", "sh", "-c"])
        .arg(format!("exec {}", worker.sleep()))
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")));
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut a = KillOnDrop(command.spawn().expect("unshare"));
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    let leads = eventually(Duration::from_secs(10), || {
        let (_, body) = common::harness::http::get(port, "/is-leader")?;
        (body.trim() == "true").then_some(())
    });
    assert!(leads.is_some(), "never led\n{}", stderr());
    assert!(worker.wait_running(Duration::from_secs(10)).is_some());
    let warnings: Vec<String> = stderr()
        .lines()
        .filter(|l| l.contains("\"WARN\"") && l.contains("no PID namespace"))
        .map(str::to_owned)
        .collect();
    assert_eq!(warnings.len(), 1, "{}", stderr());
    // `unshare --user` execs the sidecar: same pid.
    send_signal(guard_of(a.0.id()).expect("the guard"), libc::SIGKILL);
    let code = eventually(CLAIM + Duration::from_secs(5), || {
        a.0.try_wait().ok().flatten()
    });
    assert_eq!(code.and_then(|c| c.code()), Some(1), "{}", stderr());
    assert!(
        worker.gone_within(Duration::from_secs(5)),
        "CMD outlived its guard"
    );
    // The lease is left to expire: a release would let the next leader start while
    // processes of this command may still run.
    assert!(
        stderr().contains("nothing proves the command's processes ended with it; stepping down and exiting without releasing"),
        "{}",
        stderr()
    );
}

// The file backend. Its lease is the lock itself, which the kernel frees the instant
// the last descriptor of it closes: nothing outlives a dead holder by a ttl, so the
// next candidate may take the lock while the old CMD still runs unless the lock
// outlives every process of CMD. The workers here ignore SIGTERM (an app that takes
// its time to stop) and so end only by SIGKILL, `--kill-grace` after the stop.

fn file_args(dir: &Path, election: &str) -> Vec<String> {
    SidecarArgs::file(dir)
        .ttl("2s")
        .election(election)
        .flag("--kill-grace", "400ms")
        .build()
}

/// `sh -c "trap '' TERM; <worker> & wait"`: the shell and its worker ignore SIGTERM.
fn stubborn(worker: &Marker) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("trap '' TERM; {} & wait", worker.sleep()),
    ]
}

/// A candidate and its worker's marker.
struct Candidate {
    sidecar: Sidecar,
    worker: Marker,
}

impl Candidate {
    fn start(name: &str, dir: &Path, args: &[String], overlaps: &Overlaps) -> Candidate {
        let worker = Marker::new();
        overlaps.watch(&worker);
        let sidecar = Sidecar::spawn_run(name, dir, args, &stubborn(&worker));
        Candidate { sidecar, worker }
    }

    /// Leads now, with its worker running: its fencing token.
    fn leading_token(&self) -> Option<u64> {
        let status = self.sidecar.leader()?;
        let token = status["fencing_token"].as_u64()?;
        (status["is_leader"] == true && !self.worker.procs().is_empty()).then_some(token)
    }
}

/// Watches /proc every 2 ms, from outside every sidecar, for the workers of the
/// markers it is given, and notes every moment two of them run at once.
struct Overlaps {
    markers: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    watcher: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Overlaps {
    fn start() -> Overlaps {
        let markers = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (m, s) = (markers.clone(), stop.clone());
        let watcher = std::thread::spawn(move || {
            let mut found = Vec::new();
            let t0 = Instant::now();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let watched = m.lock().map(|m| m.clone()).unwrap_or_default();
                let procs = procs::all();
                let running: Vec<&String> = watched
                    .iter()
                    .filter(|w| procs.iter().any(|p| p.args.iter().any(|a| a == *w)))
                    .collect();
                if running.len() > 1 {
                    found.push(format!("{:?}: {running:?}", t0.elapsed()));
                }
                // Pause: 2 ms, the resolution at which two running workers are caught.
                std::thread::sleep(Duration::from_millis(2));
            }
            found
        });
        Overlaps {
            markers,
            stop,
            watcher: Some(watcher),
        }
    }

    fn watch(&self, worker: &Marker) {
        if let Ok(mut m) = self.markers.lock() {
            m.push(worker.0.clone());
        }
    }

    /// Every moment two workers ran at once.
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.watcher
            .take()
            .and_then(|w| w.join().ok())
            .unwrap_or_default()
    }
}

/// The candidate among `pool` that leads with its worker, within 15 s, and its token.
fn leader_of(pool: &[Candidate]) -> (usize, u64) {
    let found = eventually(Duration::from_secs(15), || {
        pool.iter()
            .enumerate()
            .find_map(|(i, c)| c.leading_token().map(|t| (i, t)))
    });
    found.unwrap_or_else(|| {
        let logs: Vec<String> = pool.iter().map(|c| c.sidecar.stderr()).collect();
        panic!("no candidate leads with its worker\n{}", logs.join("\n"))
    })
}

/// Asserts that no two workers ever ran at once.
fn never_two_workers(overlaps: Overlaps) {
    let found = overlaps.finish();
    assert!(
        found.is_empty(),
        "two candidates' workers ran at once ({} looks): {:?}",
        found.len(),
        &found[..found.len().min(5)]
    );
}

/// Kill -9 of the leading sidecar, round after round, three candidates sharing one
/// lock: the next leader's worker never starts while the killed one's still runs.
#[test]
fn file_a_killed_leaders_command_is_gone_before_the_next_one_starts() {
    let dir = tempfile::tempdir().expect("dir");
    let args = file_args(dir.path(), "kill9");
    let overlaps = Overlaps::start();
    let mut pool: Vec<Candidate> = (0..3)
        .map(|i| Candidate::start(&format!("c{i}"), dir.path(), &args, &overlaps))
        .collect();
    // Killed candidates stay until the end: their markers' drop would kill workers.
    let mut killed = Vec::new();
    let mut last = 0;
    for round in 0..4 {
        let (i, token) = leader_of(&pool);
        assert!(token > last, "token {token} after {last}");
        last = token;
        let mut gone = pool.remove(i);
        let t0 = Instant::now();
        gone.sidecar.kill();
        let name = format!("r{round}");
        pool.push(Candidate::start(&name, dir.path(), &args, &overlaps));
        gone_within_the_claim(&gone.worker, "its sidecar was killed", t0, String::new);
        killed.push(gone);
    }
    leader_of(&pool);
    never_two_workers(overlaps);
}

/// Kill -9 of the leader's sidecar and its guard at once, and of the guard alone.
#[test]
fn file_a_killed_guard_with_or_without_its_sidecar_leaves_no_worker_beside_the_next() {
    let dir = tempfile::tempdir().expect("dir");
    let args = file_args(dir.path(), "guards");
    let overlaps = Overlaps::start();
    let mut pool: Vec<Candidate> = (0..2)
        .map(|i| Candidate::start(&format!("c{i}"), dir.path(), &args, &overlaps))
        .collect();
    let (i, _) = leader_of(&pool);
    let mut a = pool.remove(i);
    let t0 = Instant::now();
    send_signal(guard_of(a.sidecar.pid).expect("a's guard"), libc::SIGKILL);
    a.sidecar.kill();
    gone_within_the_claim(
        &a.worker,
        "its sidecar and guard were killed",
        t0,
        String::new,
    );
    pool.push(Candidate::start("c2", dir.path(), &args, &overlaps));
    let (i, _) = leader_of(&pool);
    let t0 = Instant::now();
    let b = &pool[i];
    send_signal(guard_of(b.sidecar.pid).expect("b's guard"), libc::SIGKILL);
    gone_within_the_claim(&b.worker, "its guard was killed", t0, || b.sidecar.stderr());
    leader_of(&pool);
    never_two_workers(overlaps);
}

/// SIGSTOP of the leader's whole job: its worker ends by the claim's deadline while
/// the frozen sidecar keeps the lock, and after SIGCONT one candidate leads again.
#[test]
fn file_a_group_stop_of_the_leader_leaves_no_worker_beside_the_next() {
    let dir = tempfile::tempdir().expect("dir");
    let args = file_args(dir.path(), "tstp");
    let overlaps = Overlaps::start();
    let pool: Vec<Candidate> = (0..2)
        .map(|i| Candidate::start(&format!("c{i}"), dir.path(), &args, &overlaps))
        .collect();
    let (i, _) = leader_of(&pool);
    let a = &pool[i];
    let stopped = Stopped(a.sidecar.pid);
    let t0 = Instant::now();
    signal_group(a.sidecar.pid, libc::SIGSTOP);
    common::wait_all_threads_stopped(a.sidecar.pid);
    gone_within_the_claim(&a.worker, "a group stop of its sidecar", t0, String::new);
    drop(stopped);
    leader_of(&pool);
    never_two_workers(overlaps);
}

/// Whether a process with this pid exists (a zombie or one still exiting included).
fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The pids of the worker's processes whose resident size reached `bytes`.
fn fat(worker: &Marker, bytes: u64) -> Option<Vec<u32>> {
    let procs = worker.procs();
    let grown = procs.iter().any(|p| {
        let statm = std::fs::read_to_string(format!("/proc/{}/statm", p.pid)).unwrap_or_default();
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        pages * 4096 >= bytes
    });
    grown.then(|| procs.iter().map(|p| p.pid).collect())
}

/// Waits on the lock file (a blocking flock: the kernel wakes the waiter the moment
/// the last holder lets go), for up to 20 s; at that moment, the processes of `pids`
/// that still exist.
fn left_when_the_lock_frees(lock: &Path, pids: &[u32]) -> Vec<u32> {
    let (lock, pids) = (lock.to_owned(), pids.to_vec());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&lock).expect("lock file");
        file.lock().expect("flock");
        let left: Vec<u32> = pids.iter().copied().filter(|p| exists(*p)).collect();
        let _ = tx.send(left);
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("the lock never came free"))
}

/// The file lock comes free only once every process of CMD has ended, not merely been
/// sent SIGKILL: CMD's worker holds half a GiB, so its exit takes a while, and the
/// lock is tried from outside at once and often. Once with the sidecar and its guard
/// killed together (CMD's init alone holds the lock then), once with the sidecar
/// alone (the guard holds it until its init was reaped).
#[test]
fn file_the_lock_comes_free_only_once_every_process_of_the_command_is_gone() {
    let dir = tempfile::tempdir().expect("dir");
    let lock = dir.path().join("election.lock");
    let args = file_args(dir.path(), "fat");
    for (round, guard_too) in [(0, true), (1, false)] {
        let worker = Marker::new();
        // The marker only in the worker's own argv (not in the sidecar's, the guard's
        // or the init's, which carry the shell's one string).
        let script = "import time; b = b'x' * (512 << 20); time.sleep(1e9)";
        let exec = format!("exec python3 -c \"{script}\" {}", worker.0);
        let cmd = vec!["sh".to_owned(), "-c".to_owned(), exec];
        let mut a = Sidecar::spawn_run(&format!("fat{round}"), dir.path(), &args, &cmd);
        a.settles_in("leader", Duration::from_secs(10));
        let pids = eventually(Duration::from_secs(20), || fat(&worker, 400 << 20))
            .unwrap_or_else(|| panic!("the worker never grew\n{}", a.stderr()));
        if guard_too {
            send_signal(guard_of(a.pid).expect("a's guard"), libc::SIGKILL);
        }
        a.kill();
        let left = left_when_the_lock_frees(&lock, &pids);
        assert!(
            left.is_empty(),
            "the lock was free while {left:?} of the command still existed"
        );
    }
}
