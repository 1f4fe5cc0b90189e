//! A real MariaDB 10.11 server on a loopback port, in its own temp dir, killed on drop.
//!
//! Users (TCP from 127.0.0.1): `lk` (no password, everything on database `lk`),
//! `secret` (password `s3cret`, the same rights), `limited` (SELECT, INSERT, UPDATE on
//! `lk`, no CREATE). `root` works over the socket for the harness itself.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::free_port;
use super::server::{copy_tree, template, wait_serving, ServerProcess};

pub struct MariaServer {
    pub port: u16,
    /// Declared before `dir`: on drop the server is killed before its directory goes.
    process: ServerProcess,
    dir: tempfile::TempDir,
    /// More `mariadbd` options (TLS).
    extra: Vec<String>,
}

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

    fn start_with(extra: Vec<String>) -> MariaServer {
        let dir = tempfile::tempdir().expect("mariadb temp dir");
        // Its own tmpdir: two bootstrap servers sharing /tmp collide on temporary table
        // files (seen: "Could not remove temporary table '/tmp/#sql-temptable-…'").
        std::fs::create_dir(dir.path().join("tmp")).expect("tmp dir");
        copy_tree(&data_template().join("data"), &dir.path().join("data"));
        let mut server = MariaServer {
            port: free_port(),
            process: ServerProcess::default(),
            dir,
            extra,
        };
        server.spawn();
        server.sql(
            "CREATE DATABASE lk;
             CREATE USER 'lk'@'127.0.0.1'; GRANT ALL ON lk.* TO 'lk'@'127.0.0.1';
             CREATE USER 'secret'@'127.0.0.1' IDENTIFIED BY 's3cret'; GRANT ALL ON lk.* TO 'secret'@'127.0.0.1';
             CREATE USER 'limited'@'127.0.0.1'; GRANT SELECT, INSERT, UPDATE ON lk.* TO 'limited'@'127.0.0.1';",
        );
        server
    }

    fn socket(&self) -> String {
        self.dir.path().join("sock").display().to_string()
    }

    fn spawn(&mut self) {
        let log = self.dir.path().join("mariadb.log");
        let mut cmd = Command::new("mariadbd");
        cmd.arg("--no-defaults")
            .arg(format!(
                "--datadir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", self.socket()))
            .arg(format!(
                "--tmpdir={}",
                self.dir.path().join("tmp").display()
            ))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-log-bin",
                "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=2",
                "--innodb-buffer-pool-size=32M",
            ])
            .args(&self.extra);
        self.process = ServerProcess::start(&mut cmd, Some(&log), "mariadbd");
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
        format!("mysql://{user}@127.0.0.1:{}/lk", self.port)
    }

    pub fn url(&self) -> String {
        self.url_for("lk")
    }

    fn try_sql(&self, sql: &str) -> Option<String> {
        let out = Command::new("mariadb")
            .arg(format!("--socket={}", self.socket()))
            .args(["-uroot", "-N", "-B", "-e", sql])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
    }

    /// Runs SQL as root; the tab-separated output without headers.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|| panic!("mariadb {sql:?} failed"))
    }

    pub fn pid(&self) -> u32 {
        self.process.pid().unwrap_or(0)
    }

    pub fn pause(&self) {
        self.process.pause();
    }

    pub fn resume(&self) {
        self.process.resume();
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// kill -9 and start again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl super::checker::ServerControl for MariaServer {
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
