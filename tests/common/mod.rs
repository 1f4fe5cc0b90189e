//! Test harness: real servers and real sidecar processes on loopback.
//!
//! Everything started here is killed on drop (SIGKILL, then reaped), so a failing
//! test leaves no process or directory behind.

#![allow(dead_code)]

/// servers/: the real servers the tests start, the fake Kubernetes API, and what they share.
pub mod servers {
    pub mod curator;
    pub mod etcd_server;
    pub mod fake_kube;
    pub mod kube_node;
    pub mod kube_server;
    pub mod mariadb_server;
    pub mod pg_server;
    pub mod prometheus;
    pub mod real_kube;
    pub mod redis_server;
    pub mod server;
    pub mod shared;
    pub mod zk_server;
}

/// harness/: what drives and watches sidecars and processes: probes, faults, recorders.
pub mod harness {
    pub mod crowd;
    pub mod faults;
    pub mod http;
    pub mod injector;
    pub mod netns;
    pub mod procs;
    pub mod recorder;
    pub mod tamper;
}

/// scenarios/: the scenarios several suites and the bench run alike on their stores.
pub mod scenarios {
    pub mod backend_herd;
    pub mod backend_switchover;
    pub mod handovers;
    pub mod modes;
    pub mod slots;
    pub mod sql_modes;
    pub mod sql_suite;
    pub mod stores;
}

/// checks/: the election checker, which judges a run from its logs, outside and store.
pub mod checks {
    pub mod checker;
}

use harness::{http, procs};
use std::collections::VecDeque;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Owned command-line arguments from string slices.
pub fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A sidecar's command line: one backend's own flags, then `--ttl` and `--election`
/// when given (without identity or listener, which [`Sidecar`] adds).
///
/// `SidecarArgs::redis(&url).ttl("2s").election("x").build()`
#[derive(Clone, Debug)]
pub struct SidecarArgs {
    flags: Vec<String>,
}

impl SidecarArgs {
    /// Starts from these backend flags (`--backend …` and its endpoints).
    pub fn new(backend_flags: &[&str]) -> SidecarArgs {
        SidecarArgs {
            flags: args(backend_flags),
        }
    }

    /// The `redis` backend.
    pub fn redis(url: &str) -> SidecarArgs {
        SidecarArgs::new(&["--backend", "redis", "--redis-url", url])
    }

    /// The `redlock` backend (`urls` comma-separated).
    pub fn redlock(urls: &str) -> SidecarArgs {
        SidecarArgs::new(&["--backend", "redlock", "--redis-url", urls])
    }

    /// The `etcd` backend.
    pub fn etcd(endpoints: &str) -> SidecarArgs {
        SidecarArgs::new(&["--backend", "etcd", "--etcd-endpoints", endpoints])
    }

    /// The `zookeeper` backend.
    pub fn zookeeper(connect: &str) -> SidecarArgs {
        SidecarArgs::new(&["--backend", "zookeeper", "--zk-connect", connect])
    }

    /// A SQL backend (`postgres` or `mysql`) with its `--<backend>-url`.
    pub fn sql(backend: &str, url: &str) -> SidecarArgs {
        SidecarArgs::new(&["--backend", backend, &format!("--{backend}-url"), url])
    }

    /// The `postgres` backend.
    pub fn postgres(url: &str) -> SidecarArgs {
        SidecarArgs::sql("postgres", url)
    }

    /// The `mysql` backend.
    pub fn mysql(url: &str) -> SidecarArgs {
        SidecarArgs::sql("mysql", url)
    }

    /// The `kubernetes` backend against the fake API server's kubeconfig, in
    /// namespace `team`.
    pub fn kubernetes(kubeconfig: &str) -> SidecarArgs {
        SidecarArgs::new(&[
            "--backend",
            "kubernetes",
            "--kubeconfig",
            kubeconfig,
            "--namespace",
            "team",
        ])
    }

    /// The `file` backend with its lock file in `dir`.
    pub fn file(dir: &Path) -> SidecarArgs {
        let lock = dir.join("election.lock").display().to_string();
        SidecarArgs::new(&["--backend", "file", "--file-path", &lock])
    }

    /// `--ttl`.
    pub fn ttl(self, ttl: &str) -> SidecarArgs {
        self.flag("--ttl", ttl)
    }

    /// `--election`.
    pub fn election(self, election: &str) -> SidecarArgs {
        self.flag("--election", election)
    }

    /// Any other flag with its value.
    pub fn flag(mut self, name: &str, value: &str) -> SidecarArgs {
        self.flags.extend([name.to_owned(), value.to_owned()]);
        self
    }

    pub fn build(self) -> Vec<String> {
        self.flags
    }
}

/// The `leasekeeper` binary under test: `LK_TEST_BIN` when set (a copy taken right
/// after the build, for a shared target directory that other builds may overwrite
/// meanwhile), else the one cargo built for this test.
pub fn leasekeeper_bin() -> PathBuf {
    std::env::var_os("LK_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_leasekeeper")))
}

/// A data directory for a store server: in /dev/shm when it exists (fsync there is
/// about 300 times cheaper than on this machine's disk), so etcd and ZooKeeper pay
/// the same for their writes.
pub fn store_data_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

/// A loopback port that was free a moment ago, below the ephemeral range (which
/// starts at 32768 here) so that outgoing connections never take it meanwhile, and
/// that no other test process of the run holds (see [`reserve_port`]).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Spread test processes over the range by pid; then walk.
    let _ = NEXT.compare_exchange(
        0,
        20_000 + (std::process::id() % 400) as u16 * 30,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let mut port = NEXT.fetch_add(1, Ordering::SeqCst);
        if port >= 32_000 {
            NEXT.store(20_000, Ordering::SeqCst);
            port = 20_000;
        }
        if reserve_port(port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Test processes run side by side (one per test under `cargo nextest`), and a port
/// handed out is bound by its server only later: each process claims its ports with
/// an exclusive `flock` on `<tmp>/leasekeeper-ports/<port>`, which it keeps for its
/// latest [`PORTS_HELD`] ports (the kernel drops it when the process ends). Whether
/// this process has `port` now.
fn reserve_port(port: u16) -> bool {
    static HELD: Mutex<VecDeque<File>> = Mutex::new(VecDeque::new());
    let dir = std::env::temp_dir().join("leasekeeper-ports");
    let _ = std::fs::create_dir_all(&dir);
    let Ok(file) = File::create(dir.join(port.to_string())) else {
        return false;
    };
    if file.try_lock().is_err() {
        return false;
    }
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    held.push_back(file);
    if held.len() > PORTS_HELD {
        held.pop_front();
    }
    true
}

/// How many of its latest ports a test process keeps claimed: far more than a test
/// takes between choosing its ports and starting what binds them.
const PORTS_HELD: usize = 128;

pub fn send_signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) on a pid we started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Reads a child's state from /proc (PID 1 may reap late, so `kill -0` lies).
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rfind(')')?;
    stat[after + 1..].trim_start().chars().next()
}

/// Waits (up to 2 s) until every thread of `pid` shows the stopped state.
pub fn wait_all_threads_stopped(pid: u32) {
    let stopped = || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let after = stat.rfind(')')?;
            let state = stat[after + 1..].trim_start().chars().next()?;
            if !matches!(state, 'T' | 't') {
                return None;
            }
        }
        Some(())
    };
    let _ = eventually(Duration::from_secs(2), stopped);
}

/// Polls `f` until it returns `Some` or `limit` passes: at once, then after 1, 2, 4
/// and 8 ms, then every [`POLL_EVERY`]. A condition that holds soon is seen within a
/// few milliseconds; a long wait leaves the CPU to the sidecars and servers under test.
pub fn eventually<T>(limit: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    polled(limit, Duration::from_millis(1), f)
}

/// Polls `f` until it returns `Some` or `limit` passes: at once, then after `pause`,
/// each pause twice the last, up to [`POLL_EVERY`] ([`eventually`] starts at 1 ms).
pub fn polled<T>(
    limit: Duration,
    mut pause: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        let now = Instant::now();
        if now >= end {
            return None;
        }
        // Pause: the back-off between looks.
        std::thread::sleep(pause.min(end - now));
        pause = (pause * 2).min(POLL_EVERY);
    }
}

/// Waits until `count` stays the same for `still`, at most `limit`. When it did, a
/// time before the last change it counted: the sample before the count last changed,
/// or `since` (a time before it, known from earlier) when the count did not change;
/// `None` when it kept changing.
pub fn settled(
    limit: Duration,
    still: Duration,
    since: Instant,
    count: impl Fn() -> usize,
) -> Option<Instant> {
    let end = Instant::now() + limit;
    let (mut since, mut at, mut last) = (since, Instant::now(), count());
    while Instant::now() < end {
        // Observed: the window the count must stay still for.
        std::thread::sleep(still);
        let (now_at, now) = (Instant::now(), count());
        if now == last {
            return Some(since);
        }
        (since, at, last) = (at, now_at, now);
    }
    None
}

/// Nanoseconds since the Unix epoch: with the pid, a name no other test process of the
/// run takes (a database or chroot on a shared server).
pub fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// The longest pause between two looks of [`eventually`].
pub const POLL_EVERY: Duration = Duration::from_millis(10);

/// A real `leasekeeper` process.
pub struct Sidecar {
    pub name: String,
    pub port: u16,
    pub stderr_path: PathBuf,
    child: Option<Child>,
    pub pid: u32,
}

impl Sidecar {
    /// Starts `leasekeeper` with `args` plus its identity, listener and JSON logs.
    pub fn spawn(name: &str, dir: &Path, args: &[String]) -> Sidecar {
        Sidecar::spawn_with_env(name, dir, args, &[])
    }

    /// [`Sidecar::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        name: &str,
        dir: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Sidecar {
        Sidecar::start(name, dir, args, env, None)
    }

    /// [`Sidecar::spawn_with_env`] listening on `port` (a restart behind the same
    /// scrape target).
    pub fn spawn_on(
        name: &str,
        dir: &Path,
        args: &[String],
        env: &[(String, String)],
        port: u16,
    ) -> Sidecar {
        Sidecar::start_on(name, dir, args, env, None, port)
    }

    /// `leasekeeper run ARGS… -- CMD…` (exec mode), in a process group of its own;
    /// CMD's stdout goes to `<name>.stdout`.
    pub fn spawn_run(name: &str, dir: &Path, args: &[String], cmd: &[String]) -> Sidecar {
        Sidecar::start(name, dir, args, &[], Some(cmd))
    }

    fn start(
        name: &str,
        dir: &Path,
        args: &[String],
        env: &[(String, String)],
        cmd: Option<&[String]>,
    ) -> Sidecar {
        Sidecar::start_on(name, dir, args, env, cmd, free_port())
    }

    fn start_on(
        name: &str,
        dir: &Path,
        args: &[String],
        env: &[(String, String)],
        cmd: Option<&[String]>,
        port: u16,
    ) -> Sidecar {
        let stderr_path = dir.join(format!("{name}-{port}.stderr"));
        let stderr = File::create(&stderr_path).expect("stderr file");
        Sidecar::launch(
            name,
            dir,
            args,
            env,
            cmd,
            port,
            (stderr_path, stderr.into()),
        )
    }

    /// [`Sidecar::spawn`] with its stderr going to `stderr` (a pipe, say) instead of a
    /// file: [`Sidecar::stderr`] reads nothing then.
    pub fn spawn_with_stderr(name: &str, dir: &Path, args: &[String], stderr: Stdio) -> Sidecar {
        let unread = dir.join(format!("{name}.stderr-elsewhere"));
        Sidecar::launch(name, dir, args, &[], None, free_port(), (unread, stderr))
    }

    /// Starts the sidecar on `port`; `stderr`: where its log goes, and the file
    /// [`Sidecar::stderr`] reads.
    fn launch(
        name: &str,
        dir: &Path,
        args: &[String],
        env: &[(String, String)],
        cmd: Option<&[String]>,
        port: u16,
        (stderr_path, stderr): (PathBuf, Stdio),
    ) -> Sidecar {
        let stdout = match cmd {
            Some(_) => {
                Stdio::from(File::create(dir.join(format!("{name}.stdout"))).expect("stdout file"))
            }
            None => Stdio::null(),
        };
        let mut command = Command::new(leasekeeper_bin());
        if cmd.is_some() {
            command.arg("run");
        }
        command.args(args).args([
            "--identity",
            name,
            "--http-addr",
            &format!("127.0.0.1:{port}"),
            "--log-format",
            "json",
        ]);
        if let Some(cmd) = cmd {
            command.arg("--").args(cmd);
            // A process group of its own, as a job of a shell: a group stop
            // (`kill -STOP -PGID`) of it must not stop the test.
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
        }
        let child = command
            .env(
                "RUST_LOG",
                std::env::var("LK_SIDECAR_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("spawn leasekeeper");
        let pid = child.id();
        Sidecar {
            name: name.to_owned(),
            port,
            stderr_path,
            child: Some(child),
            pid,
        }
    }

    /// Sends `sig`. A SIGSTOP returns only once every thread of the sidecar has
    /// stopped: the HTTP server has a thread of its own, which could otherwise answer
    /// a request sent right after the signal before the group stop reaches it.
    pub fn signal(&self, sig: i32) {
        if self.child.is_some() {
            send_signal(self.pid, sig);
            if sig == libc::SIGSTOP {
                wait_all_threads_stopped(self.pid);
            }
        }
    }

    /// Waits until the HTTP listener answers.
    pub fn wait_listening(&self, limit: Duration) -> bool {
        eventually(limit, || http::get(self.port, "/healthz").map(|_| ())).is_some()
    }

    /// SIGTERM, then wait for the exit status.
    pub fn terminate(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.signal(libc::SIGTERM);
        self.wait_exit(limit)
    }

    /// Waits for the exit status, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let status = eventually(limit, || child.try_wait().ok().flatten())?;
        self.child = None;
        Some(status)
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Waits until the sidecar's log holds `text`; whether it did within `limit`.
    pub fn logged(&self, text: &str, limit: Duration) -> bool {
        eventually(limit, || self.stderr().contains(text).then_some(())).is_some()
    }

    /// Waits until `/leader` reports `state`; that status (a panic with the log if never).
    pub fn settles_in(&self, state: &str, limit: Duration) -> serde_json::Value {
        eventually(limit, || self.leader().filter(|v| v["state"] == state)).unwrap_or_else(|| {
            panic!(
                "{} never {state}: {:?}\n{}",
                self.name,
                self.leader(),
                self.stderr()
            )
        })
    }

    /// GET /leader as JSON.
    pub fn leader(&self) -> Option<serde_json::Value> {
        let (code, body) = http::get(self.port, "/leader")?;
        (code == 200)
            .then(|| serde_json::from_str(&body).ok())
            .flatten()
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        // Its children first (an exec guard, a hook), while they are still its own:
        // a stopped guard would not notice the sidecar is gone.
        if self.child.is_some() {
            for p in procs::descendants(self.pid) {
                send_signal(p.pid, libc::SIGKILL);
            }
        }
        self.kill();
    }
}

/// Runs `leasekeeper` to completion (for bad-input checks).
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = Command::new(leasekeeper_bin())
        .args(args)
        .envs(env.iter().copied())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .output()
        .expect("run leasekeeper");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, by openssl.
pub fn make_certs(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=leasekeeper-test-ca",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("ext");
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").expect("ext");
    for (name, ext) in [("server", "server.ext"), ("client", "client.ext")] {
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let pem = format!("{name}.pem");
        run(&[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        ]
        .concat());
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "1",
            "-extfile",
            ext,
        ]);
    }
}
