//! A real MariaDB 10.11 server on a loopback port, in its own temp dir, killed on drop.
//!
//! Users (TCP from 127.0.0.1): `lk` (no password, everything on database `lk`),
//! `secret` (password `s3cret`, the same rights), `limited` (SELECT, INSERT, UPDATE on
//! `lk`, no CREATE). `root` works over the socket for the harness itself.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::server::{copy_tree, template, wait_serving, ServerProcess};
use super::shared::{detached, namespace, shared, SharedServer, Started};
use crate::common::free_port;

pub struct MariaServer {
    pub port: u16,
    /// Declared before `_own`: on drop the server is killed before its directory goes.
    process: ServerProcess,
    /// The server's directory: data, tmp, socket and log.
    dir: PathBuf,
    /// The tests' database: `lk`, or on the shared server one of this test's own.
    db: String,
    /// More `mariadbd` options (TLS).
    extra: Vec<String>,
    /// Set on the shared server ([`MariaServer::shared`]), which this never stops.
    shared: Option<SharedServer>,
    /// The directory of a server of its own, removed after the server is killed.
    _own: Option<tempfile::TempDir>,
}

/// The harness's users, and their rights on database `db`.
fn grants(db: &str) -> String {
    format!(
        "GRANT ALL ON {db}.* TO 'lk'@'127.0.0.1';
         GRANT ALL ON {db}.* TO 'secret'@'127.0.0.1';
         GRANT SELECT, INSERT, UPDATE ON {db}.* TO 'limited'@'127.0.0.1';"
    )
}

const USERS: &str = "CREATE USER 'lk'@'127.0.0.1';
     CREATE USER 'secret'@'127.0.0.1' IDENTIFIED BY 's3cret';
     CREATE USER 'limited'@'127.0.0.1';";

/// `mariadb-install-db`'s data directory, made once ([`template`]) and copied for
/// every server.
fn data_template() -> std::path::PathBuf {
    template("mariadb", "/usr/bin/mariadb-install-db", |fresh| {
        std::fs::create_dir(fresh.join("tmp")).expect("tmp dir");
        let install = Command::new("mariadb-install-db")
            .arg(format!("--datadir={}", fresh.join("data").display()))
            .arg(format!("--tmpdir={}", fresh.join("tmp").display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--user=root",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("mariadb-install-db (make test installs mariadb-server)");
        assert!(
            install.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&install.stderr)
        );
    })
}

impl MariaServer {
    pub fn start() -> MariaServer {
        Self::start_with(Vec::new())
    }

    /// A server that speaks TLS with `server.pem`/`server.key` of `certs` (see
    /// `make_certs`); user `client` must present a certificate signed by `ca.pem`.
    pub fn start_tls(certs: &std::path::Path) -> MariaServer {
        let at = |n: &str| certs.join(n).display().to_string();
        let server = Self::start_with(vec![
            format!("--ssl-ca={}", at("ca.pem")),
            format!("--ssl-cert={}", at("server.pem")),
            format!("--ssl-key={}", at("server.key")),
        ]);
        server.sql(
            "CREATE USER 'client'@'127.0.0.1' REQUIRE X509; GRANT ALL ON lk.* TO 'client'@'127.0.0.1';",
        );
        server
    }

    /// A database of this test's own on a server shared with the other test processes
    /// of the run ([`super::shared`]), with the same users and rights: for a test that
    /// neither stops the server nor reads its server-wide state (the general log).
    pub fn shared() -> MariaServer {
        let server = shared("mariadb", |dir| {
            let mut server = MariaServer::unstarted(dir.to_owned(), Vec::new());
            server.spawn_detached();
            server.sql(USERS);
            Started {
                address: server.port.to_string(),
                pids: std::mem::take(&mut server.process)
                    .detach()
                    .into_iter()
                    .collect(),
            }
        });
        let port = server.address.parse().expect("the shared server's port");
        let mut db = MariaServer::at(server.dir.clone(), port, Vec::new());
        db.db = format!("t{}", namespace());
        db.sql(&format!("CREATE DATABASE {}; {}", db.db, grants(&db.db)));
        db.shared = Some(server);
        db
    }

    fn start_with(extra: Vec<String>) -> MariaServer {
        let own = tempfile::tempdir().expect("mariadb temp dir");
        let mut server = MariaServer::unstarted(own.path().to_owned(), extra);
        server._own = Some(own);
        server.spawn();
        server.sql(&format!("CREATE DATABASE lk; {USERS} {}", grants("lk")));
        server
    }

    /// A server in `dir` (its data copied from the template), not started yet.
    fn unstarted(dir: PathBuf, extra: Vec<String>) -> MariaServer {
        // Its own tmpdir: two bootstrap servers sharing /tmp collide on temporary table
        // files (seen: "Could not remove temporary table '/tmp/#sql-temptable-…'").
        std::fs::create_dir(dir.join("tmp")).expect("tmp dir");
        copy_tree(&data_template().join("data"), &dir.join("data"));
        MariaServer::at(dir, free_port(), extra)
    }

    /// The server of `dir` on `port`.
    fn at(dir: PathBuf, port: u16, extra: Vec<String>) -> MariaServer {
        MariaServer {
            port,
            process: ServerProcess::default(),
            dir,
            db: "lk".to_owned(),
            extra,
            shared: None,
            _own: None,
        }
    }

    fn socket(&self) -> String {
        self.dir.join("sock").display().to_string()
    }

    fn spawn(&mut self) {
        let mut cmd = self.spawn_command();
        self.start_and_wait(&mut cmd);
    }

    /// Like `spawn`, in a process group of its own (the shared server).
    fn spawn_detached(&mut self) {
        let mut cmd = self.spawn_command();
        self.start_and_wait(detached(&mut cmd));
    }

    fn spawn_command(&self) -> Command {
        let mut cmd = Command::new("mariadbd");
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", self.socket()))
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-log-bin",
                "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=2",
                "--innodb-buffer-pool-size=32M",
            ])
            .args(&self.extra);
        cmd
    }

    fn start_and_wait(&mut self, cmd: &mut Command) {
        let log = self.dir.join("mariadb.log");
        self.process = ServerProcess::start(cmd, Some(&log), "mariadbd");
        wait_serving(
            Duration::from_secs(30),
            || self.try_sql("SELECT 1").is_some(),
            || {
                format!(
                    "mariadb on {} never got ready: {}",
                    self.port,
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            },
        );
    }

    pub fn url_for(&self, user: &str) -> String {
        format!("mysql://{user}@127.0.0.1:{}/{}", self.port, self.db)
    }

    /// The tests' database: `lk`, or this test's own on the shared server.
    pub fn database(&self) -> &str {
        &self.db
    }

    /// Panics on the shared server, which no test may stop.
    fn own(&self, what: &str) {
        assert!(self.shared.is_none(), "{what} of the shared mariadb server");
    }

    pub fn url(&self) -> String {
        self.url_for("lk")
    }

    /// Runs SQL as root: the tab-separated output without headers, or the client's
    /// error.
    pub fn run_sql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new("mariadb")
            .arg(format!("--socket={}", self.socket()))
            .args(["-uroot", "-N", "-B", "-e", sql])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim_end().to_owned())
        }
    }

    fn try_sql(&self, sql: &str) -> Option<String> {
        self.run_sql(sql).ok()
    }

    /// Runs SQL as root; the tab-separated output without headers.
    pub fn sql(&self, sql: &str) -> String {
        self.run_sql(sql)
            .unwrap_or_else(|e| panic!("mariadb {sql:?} failed: {e}"))
    }

    pub fn pid(&self) -> u32 {
        self.process.pid().unwrap_or(0)
    }

    pub fn pause(&self) {
        self.own("a pause");
        self.process.pause();
    }

    pub fn resume(&self) {
        self.process.resume();
    }

    pub fn kill(&mut self) {
        self.own("a kill");
        self.process.kill();
    }

    /// kill -9 and start again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl crate::common::checks::checker::ServerControl for MariaServer {
    fn pause(&mut self) {
        MariaServer::pause(self)
    }
    fn resume(&mut self) {
        MariaServer::resume(self)
    }
    fn restart(&mut self) {
        MariaServer::restart(self)
    }
}
