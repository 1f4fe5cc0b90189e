//! A real MariaDB 10.11 server on a loopback port, in its own temp dir, killed on drop.
//!
//! Users (TCP from 127.0.0.1): `lk` (no password, everything on database `lk`),
//! `secret` (password `s3cret`, the same rights), `limited` (SELECT, INSERT, UPDATE on
//! `lk`, no CREATE). `root` works over the socket for the harness itself.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{eventually, free_port, send_signal};

pub struct MariaServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// More `mariadbd` options (TLS).
    extra: Vec<String>,
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
        let install = Command::new("mariadb-install-db")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .arg(format!("--tmpdir={}", dir.path().join("tmp").display()))
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
        let mut server = MariaServer {
            port: free_port(),
            dir,
            child: None,
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
        let log = std::fs::File::create(self.dir.path().join("mariadb.log")).expect("log");
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
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
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("mariadbd");
        self.child = Some(child);
        let ready = eventually(Duration::from_secs(30), || self.try_sql("SELECT 1"));
        assert!(
            ready.is_some(),
            "mariadb on {} never got ready: {}",
            self.port,
            std::fs::read_to_string(self.dir.path().join("mariadb.log")).unwrap_or_default()
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
        self.child.as_ref().map_or(0, |c| c.id())
    }

    pub fn pause(&self) {
        send_signal(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        send_signal(self.pid(), libc::SIGCONT);
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            send_signal(child.id(), libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// kill -9 and start again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for MariaServer {
    fn drop(&mut self) {
        self.kill();
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
