//! A real PostgreSQL 15 server on a loopback port, in its own temp dir, killed on drop.
//!
//! `initdb` and `postgres` refuse to run as root: the data directory is given to the
//! `postgres` user and both run through `runuser`. Users: `lk` (superuser, trust),
//! `secret` (password `s3cret`, scram-sha-256 over TCP), `limited` (may log in, may not
//! create tables in `public`: PostgreSQL 15's default). Database `lk`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::server::{copy_tree, template, wait_serving, ServerProcess};
use super::shared::{detached, namespace, shared, SharedServer, Started};
use crate::common::{eventually, free_port, process_state, send_signal};

const BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct PgServer {
    pub port: u16,
    /// The server's directory: its data, log and socket.
    dir: PathBuf,
    /// The tests' database: `lk`, or on the shared server one of this test's own.
    db: String,
    /// `runuser`, whose child is the postmaster.
    process: ServerProcess,
    /// More `-c` settings (TLS).
    extra: Vec<String>,
    /// Set on the shared server ([`PgServer::shared`]), which this never stops.
    shared: Option<SharedServer>,
    /// The directory of a server of its own, removed after the server is killed.
    _own: Option<tempfile::TempDir>,
}

fn data(dir: &Path) -> PathBuf {
    dir.join("data")
}

/// `initdb`'s data directory with the harness's `pg_hba.conf`, made once
/// ([`template`]) and copied for every server.
fn data_template() -> PathBuf {
    template("pg15", &format!("{BIN}/initdb"), |fresh| {
        let chown = Command::new("chown")
            .arg("postgres")
            .arg(fresh)
            .status()
            .expect("chown");
        assert!(chown.success());
        let init = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(format!("{BIN}/initdb"))
            .arg("-D")
            .arg(data(fresh))
            .args(["-U", "lk", "--auth=trust", "-E", "UTF8"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("initdb (make test installs postgresql-15)");
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        std::fs::write(
            data(fresh).join("pg_hba.conf"),
            "local all all trust\nhostssl all client 127.0.0.1/32 cert\nhost all client 127.0.0.1/32 reject\nhost all secret 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 trust\n",
        )
        .expect("pg_hba.conf");
    })
}

impl PgServer {
    pub fn start() -> PgServer {
        Self::start_with(None, free_port())
    }

    /// Starts on a given port (a sidecar may already be waiting for it).
    pub fn start_on(port: u16) -> PgServer {
        Self::start_with(None, port)
    }

    /// A server that speaks TLS with `server.pem`/`server.key` of `certs` (see
    /// `make_certs`), and lets user `client` in only with a client certificate
    /// signed by `ca.pem` (`hostssl … cert`).
    pub fn start_tls(certs: &Path) -> PgServer {
        Self::start_with(Some(certs), free_port())
    }

    /// A database of this test's own on a server shared with the other test processes
    /// of the run ([`super::shared`]), with the same users: for a test that neither
    /// stops the server nor reads its log.
    pub fn shared() -> PgServer {
        let server = shared("postgres", |dir| {
            prepare(dir);
            let port = free_port();
            let process = spawn(dir, port, &[], true);
            roles(port);
            let postmaster = postmaster(dir).expect("the shared postmaster's pid");
            Started {
                address: port.to_string(),
                pids: process.detach().into_iter().chain([postmaster]).collect(),
            }
        });
        let port: u16 = server.address.parse().expect("the shared server's port");
        let db = format!("t{}", namespace());
        psql_at(port, "postgres", &format!("CREATE DATABASE {db}"));
        PgServer {
            port,
            dir: PathBuf::new(),
            db,
            process: ServerProcess::default(),
            extra: Vec::new(),
            shared: Some(server),
            _own: None,
        }
    }

    fn start_with(certs: Option<&Path>, port: u16) -> PgServer {
        let dir = tempfile::tempdir().expect("postgres temp dir");
        prepare(dir.path());
        let mut extra = Vec::new();
        if let Some(certs) = certs {
            // The key must belong to the server's user and be private to it.
            for name in ["server.pem", "server.key", "ca.pem"] {
                let to = dir.path().join(name);
                std::fs::copy(certs.join(name), &to).expect("copy cert");
                Command::new("chown")
                    .arg("postgres")
                    .arg(&to)
                    .status()
                    .expect("chown");
                Command::new("chmod")
                    .arg("600")
                    .arg(&to)
                    .status()
                    .expect("chmod");
            }
            let at = |n: &str| dir.path().join(n).display().to_string();
            extra = vec![
                "ssl=on".to_owned(),
                format!("ssl_cert_file={}", at("server.pem")),
                format!("ssl_key_file={}", at("server.key")),
                format!("ssl_ca_file={}", at("ca.pem")),
            ];
        }
        let mut server = PgServer {
            port,
            dir: dir.path().to_owned(),
            db: "lk".to_owned(),
            process: ServerProcess::default(),
            extra,
            shared: None,
            _own: Some(dir),
        };
        server.spawn();
        psql_at(port, "postgres", "CREATE DATABASE lk");
        roles(port);
        server
    }

    fn spawn(&mut self) {
        self.process = spawn(&self.dir, self.port, &self.extra, false);
    }

    /// Panics on the shared server, which no test may stop or read the log of.
    fn own(&self, what: &str) {
        assert!(
            self.shared.is_none(),
            "{what} of the shared postgres server"
        );
    }

    /// `postgres://<user>@127.0.0.1:<port>/<database>`.
    pub fn url_for(&self, user: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{}", self.port, self.db)
    }

    pub fn url(&self) -> String {
        self.url_for("lk")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.own("the log");
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }

    /// Runs SQL as the superuser in the tests' database; the output of `psql -At`.
    pub fn psql(&self, sql: &str) -> String {
        psql_at(self.port, &self.db, sql)
    }

    fn postmaster(&self) -> Option<u32> {
        postmaster(&self.dir)
    }

    /// The postmaster and every process it forked (backends, background workers).
    fn server_pids(&self) -> Vec<u32> {
        let Some(pm) = self.postmaster() else {
            return Vec::new();
        };
        let mut pids = vec![pm];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some(after) = stat.rfind(')') else {
                continue;
            };
            let ppid = stat[after + 1..].split_whitespace().nth(1);
            if ppid.and_then(|p| p.parse::<u32>().ok()) == Some(pm) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Stops the postmaster first and its children only once it has stopped: a backend
    /// forked for a new connection between listing the children and stopping the
    /// postmaster would otherwise go on serving that connection (seen in CI: a
    /// candidate that connected just then renewed through the "paused" server).
    pub fn pause(&self) {
        self.own("a pause");
        if self.postmaster().is_some() {
            assert!(self.stop_postmaster(), "the postmaster did not stop");
        }
        for pid in self.server_pids() {
            send_signal(pid, libc::SIGSTOP);
        }
    }

    /// SIGSTOP of the postmaster, and whether it stopped within 2 s (`false` also
    /// without one): from then on it forks no backend, so a listing of its children
    /// is complete.
    fn stop_postmaster(&self) -> bool {
        let Some(pm) = self.postmaster() else {
            return false;
        };
        send_signal(pm, libc::SIGSTOP);
        let stopped = eventually(Duration::from_secs(2), || {
            (process_state(pm) == Some('T')).then_some(())
        });
        stopped.is_some()
    }

    pub fn resume(&self) {
        // runuser stops itself when its child stops (job control, as su does), and
        // would then never reap the postmaster: wake it first.
        self.process.resume();
        for pid in self.server_pids() {
            send_signal(pid, libc::SIGCONT);
        }
    }

    pub fn kill(&mut self) {
        self.own("a kill");
        // Its children listed only once it forks no more (see `pause`): a backend
        // forked after the listing would outlive the kill, attached to the shared
        // memory, and the restart would refuse to start ("pre-existing shared memory
        // block is still in use", seen in make test).
        self.stop_postmaster();
        let pids = self.server_pids();
        for &pid in pids.iter().rev() {
            send_signal(pid, libc::SIGCONT);
            send_signal(pid, libc::SIGKILL);
        }
        // runuser reaps the postmaster and exits: then its pid is free for good (a
        // zombie reparented to PID 1 may linger, and postgres would take it for a
        // running postmaster).
        self.process.resume();
        if !self.process.wait_exit(Duration::from_secs(10)) {
            self.process.kill();
        }
        // Orphaned backends are reaped by PID 1, sometimes late: wait until none runs.
        eventually(Duration::from_secs(10), || {
            pids.iter()
                .all(|&p| matches!(process_state(p), None | Some('Z') | Some('X')))
                .then_some(())
        });
        // Their lock files too: postgres checks the pids in them with kill(pid, 0).
        let _ = std::fs::remove_file(data(&self.dir).join("postmaster.pid"));
        let socket = self.dir.join(format!(".s.PGSQL.{}", self.port));
        let _ = std::fs::remove_file(socket.with_extension(format!("{}.lock", self.port)));
        let _ = std::fs::remove_file(&socket);
    }

    /// kill -9 of every server process, and start again on the same port and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.shared.is_none() {
            self.kill();
        }
    }
}

/// Gives `dir` to the `postgres` user and copies the template's data into it.
fn prepare(dir: &Path) {
    let chown = Command::new("chown")
        .args(["-R", "postgres"])
        .arg(dir)
        .status()
        .expect("chown");
    assert!(chown.success());
    copy_tree(&data_template().join("data"), &data(dir));
}

/// Starts the postmaster of `dir` on `port` (through `runuser`; in a process group of
/// its own when `detach`) and waits until it serves.
fn spawn(dir: &Path, port: u16, extra: &[String], detach: bool) -> ServerProcess {
    let log = dir.join("postgres.log");
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "postgres", "--"])
        .arg(format!("{BIN}/postgres"))
        .arg("-D")
        .arg(data(dir))
        .args(["-p", &port.to_string()])
        .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
        .args(extra.iter().flat_map(|e| ["-c", e.as_str()]))
        .arg("-k")
        .arg(dir);
    if detach {
        detached(&mut cmd);
    }
    let process = ServerProcess::start(&mut cmd, Some(&log), "postgres");
    wait_serving(
        Duration::from_secs(20),
        || {
            Command::new("pg_isready")
                .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        },
        || {
            format!(
                "postgres on {port} never got ready: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        },
    );
    process
}

/// The harness's users on a fresh server.
fn roles(port: u16) {
    psql_at(
        port,
        "postgres",
        "CREATE ROLE secret LOGIN SUPERUSER PASSWORD 's3cret'; CREATE ROLE limited LOGIN; CREATE ROLE client LOGIN SUPERUSER",
    );
}

/// The postmaster's pid: the first line of `postmaster.pid`.
fn postmaster(dir: &Path) -> Option<u32> {
    let pidfile = std::fs::read_to_string(data(dir).join("postmaster.pid")).ok()?;
    pidfile.lines().next()?.trim().parse().ok()
}

/// Runs SQL as the superuser in database `db`; the output of `psql -At`.
fn psql_at(port: u16, db: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "lk"])
        .args(["-d", db, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl crate::common::checks::checker::ServerControl for PgServer {
    fn pause(&mut self) {
        PgServer::pause(self)
    }
    fn resume(&mut self) {
        PgServer::resume(self)
    }
    fn restart(&mut self) {
        PgServer::restart(self)
    }
}
