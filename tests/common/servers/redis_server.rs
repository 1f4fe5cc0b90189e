//! A real `redis-server` on a loopback port, in its own temp dir, killed on drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use super::server::{wait_serving, ServerProcess};
use crate::common::free_port;

pub struct RedisServer {
    pub port: u16,
    /// Declared before `dir`: on drop the server is killed before its directory goes.
    process: ServerProcess,
    dir: tempfile::TempDir,
    /// Append-only file with fsync on every write: data survives a kill -9.
    persistent: bool,
    /// More `redis-server` arguments (TLS, for example).
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(false)
    }

    pub fn start_persistent() -> RedisServer {
        Self::start_with(true)
    }

    /// Starts on a given port (a sidecar may already be waiting for it).
    pub fn start_on(port: u16) -> RedisServer {
        Self::start_at(port, false)
    }

    fn start_with(persistent: bool) -> RedisServer {
        Self::start_at(free_port(), persistent)
    }

    fn start_at(port: u16, persistent: bool) -> RedisServer {
        let dir = tempfile::tempdir().expect("redis temp dir");
        let mut server = RedisServer {
            port,
            process: ServerProcess::default(),
            dir,
            persistent,
            extra: Vec::new(),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let dir = self.dir.path().to_str().expect("utf8 dir").to_owned();
        let port = self.port.to_string();
        let mut args = vec![
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir,
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            "",
        ];
        if self.persistent {
            args.extend(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            args.extend(["--appendonly", "no"]);
        }
        self.process = ServerProcess::start(
            Command::new("redis-server").args(&args).args(&self.extra),
            None,
            "redis-server must be installed (make test installs it)",
        );
        wait_serving(
            Duration::from_secs(10),
            || self.ping(),
            || format!("redis-server on {} did not answer PING", self.port),
        );
    }

    /// A server that also listens with TLS on `tls_port`, with a certificate for
    /// 127.0.0.1 signed by `ca.pem` in `certs`, requiring client certificates.
    pub fn start_tls(certs: &std::path::Path, tls_port: u16) -> RedisServer {
        let dir = tempfile::tempdir().expect("redis temp dir");
        let cert = |name: &str| certs.join(name).display().to_string();
        let mut server = RedisServer {
            port: free_port(),
            process: ServerProcess::default(),
            dir,
            persistent: false,
            extra: vec![
                "--tls-port".into(),
                tls_port.to_string(),
                "--tls-cert-file".into(),
                cert("server.pem"),
                "--tls-key-file".into(),
                cert("server.key"),
                "--tls-ca-cert-file".into(),
                cert("ca.pem"),
                "--tls-auth-clients".into(),
                "yes".into(),
            ],
        };
        server.spawn();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's address (for a fault proxy in front of it).
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> u32 {
        self.process.pid().unwrap_or(0)
    }

    pub fn ping(&self) -> bool {
        self.command("PING").is_some_and(|r| r.starts_with("+PONG"))
    }

    /// Sends one inline command and returns the raw reply.
    pub fn command(&self, cmd: &str) -> Option<String> {
        command_at(self.port, cmd)
    }

    /// Calls of `cmd` so far, from the server's own command statistics.
    pub fn calls(&self, cmd: &str) -> u64 {
        let info = self.command("INFO commandstats").unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
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

    /// kill -9 and start again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A backup of the data files as they are now. On a persistent server (append-only
    /// file, fsync on every write) it holds every write acknowledged so far.
    pub fn snapshot(&self) -> tempfile::TempDir {
        let backup = tempfile::tempdir().expect("snapshot dir");
        copy_tree(self.dir.path(), backup.path());
        backup
    }

    /// kill -9, put the data files of an earlier `snapshot` back in place of the
    /// current ones, and start again: a node restored from an older backup.
    pub fn restore(&mut self, snapshot: &std::path::Path) {
        self.kill();
        for entry in std::fs::read_dir(self.dir.path()).expect("read redis dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("remove data dir");
            } else {
                std::fs::remove_file(&path).expect("remove data file");
            }
        }
        copy_tree(snapshot, self.dir.path());
        self.spawn();
    }

    /// Kills the one tracking connection (flag `t`) at the server; its client id.
    pub fn kill_the_tracking_connection(&self) -> u64 {
        let clients = self.command("CLIENT LIST").unwrap_or_default();
        let tracking = clients
            .lines()
            .find(|l| client_field(l, "flags").is_some_and(|f| f.contains('t')))
            .and_then(|l| client_field(l, "id")?.parse::<u64>().ok())
            .expect("the tracking connection");
        self.command(&format!("CLIENT KILL ID {tracking}"));
        tracking
    }

    /// `INFO server`'s `run_id`: a new one every time the process starts.
    pub fn run_id(&self) -> Option<String> {
        let info = self.command("INFO server")?;
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_owned())
    }
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target).expect("create dir");
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy data file");
        }
    }
}

/// `key=value` of one `CLIENT LIST` line.
pub fn client_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// Sends one inline command to the server on `port` and returns the raw reply.
pub fn command_at(port: u16, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(300))).ok()?;
    s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The local ports of process `pid`'s TCP connections to 127.0.0.1:`server_port`
/// (from `ss`), so that a server's per-client view can be told apart per process.
pub fn client_ports(pid: u32, server_port: u16) -> Vec<u16> {
    let out = std::process::Command::new("ss")
        .args(["-tnpH", "state", "established"])
        .output()
        .expect("ss");
    let marker = format!("pid={pid},");
    let peer = format!("127.0.0.1:{server_port}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&marker))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // Recv-Q Send-Q Local Peer Process
            let (local, remote) = (cols.get(2)?, cols.get(3)?);
            (*remote == peer).then(|| local.rsplit(':').next()?.parse().ok())?
        })
        .collect()
}

impl RedisServer {
    /// Waits until the processes `pids` send the server nothing for a second (a
    /// candidate that has just joined sends its last commands of the join late on a
    /// busy machine), at most `limit`; whether they did.
    pub fn goes_quiet(&self, pids: &[u32], limit: Duration) -> bool {
        let end = std::time::Instant::now() + limit;
        while std::time::Instant::now() < end {
            let ports: Vec<u16> = (pids.iter())
                .flat_map(|&pid| client_ports(pid, self.port))
                .collect();
            let seen = self.monitor(Duration::from_secs(1));
            if !seen.iter().any(|(p, _)| ports.contains(p)) {
                return true;
            }
        }
        false
    }

    /// Every command the server executes for `window` (MONITOR), as (client port, the
    /// command line); commands run inside scripts are left out (they are the script's).
    pub fn monitor(&self, window: Duration) -> Vec<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("monitor");
        s.write_all(b"MONITOR\r\n").expect("monitor");
        s.set_read_timeout(Some(Duration::from_millis(100))).ok();
        let end = std::time::Instant::now() + window;
        let mut raw = Vec::new();
        let mut buf = [0u8; 65536];
        while std::time::Instant::now() < end {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
        String::from_utf8_lossy(&raw)
            .lines()
            .filter_map(|l| {
                // +1700000000.123456 [0 127.0.0.1:54321] "EVALSHA" …
                let inner = l.split_once('[')?.1.split_once(']')?;
                let port = inner.0.rsplit(':').next()?.parse().ok()?;
                Some((port, inner.1.trim().to_owned()))
            })
            .collect()
    }
}
