//! A real Prometheus server (Debian's `prometheus`, 2.42 here) on loopback, scraping
//! given targets every second, asked through its HTTP query API.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use super::server::{wait_serving, ServerProcess};
use crate::common::free_port;

pub struct Prometheus {
    pub port: u16,
    /// Declared before `_dir`: on drop the server is killed before its directory goes.
    process: ServerProcess,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `127.0.0.1:<port>` for each of `targets` (job
    /// `leasekeeper`, label `election`), every second; returns once it answers queries.
    pub fn start(targets: &[u16], election: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("temp dir");
        let list: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: leasekeeper\n    static_configs:\n      - targets: [{}]\n        labels:\n          election: {election}\n",
            list.join(", ")
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write config");
        let port = free_port();
        let process = ServerProcess::start(
            Command::new("prometheus")
                .arg(format!("--config.file={}", config_path.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}")),
            Some(&dir.path().join("prometheus.log")),
            "start prometheus (apt-get install prometheus)",
        );
        let p = Prometheus {
            port,
            process,
            _dir: dir,
        };
        wait_serving(
            Duration::from_secs(30),
            || p.query("up").is_some(),
            || format!("prometheus did not answer: {}", p.log()),
        );
        p
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    fn get(&self, path: &str) -> Option<serde_json::Value> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        // HTTP/1.0: the whole body, never chunked.
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).ok()?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n")?;
        if head.split_whitespace().nth(1) != Some("200") {
            return None;
        }
        let value: serde_json::Value = serde_json::from_str(body).ok()?;
        (value["status"] == "success").then(|| value["data"]["result"].clone())
    }

    /// An instant query (now, or at unix time `at`): the result vector.
    pub fn query_at(&self, q: &str, at: Option<f64>) -> Option<serde_json::Value> {
        let time = at.map(|t| format!("&time={t:.3}")).unwrap_or_default();
        self.get(&format!("/api/v1/query?query={}{time}", encode(q)))
    }

    pub fn query(&self, q: &str) -> Option<serde_json::Value> {
        self.query_at(q, None)
    }

    /// The single value of an instant query whose result is one series (None when empty).
    pub fn scalar_at(&self, q: &str, at: Option<f64>) -> Option<f64> {
        let result = self.query_at(q, at)?;
        let series = result.as_array()?;
        assert!(series.len() <= 1, "{q}: more than one series: {result}");
        series.first()?["value"][1].as_str()?.parse().ok()
    }

    /// A range query over one series: (unix time, value) at every `step` seconds.
    pub fn range(&self, q: &str, start: f64, end: f64, step: f64) -> Vec<(f64, f64)> {
        let result = self
            .get(&format!(
                "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
                encode(q)
            ))
            .unwrap_or_else(|| panic!("range query {q} failed: {}", self.log()));
        let series = result.as_array().expect("a matrix");
        assert_eq!(series.len(), 1, "{q}: not one series: {result}");
        series[0]["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|v| {
                (
                    v[0].as_f64().expect("time"),
                    v[1].as_str().and_then(|s| s.parse().ok()).expect("value"),
                )
            })
            .collect()
    }
}

/// Percent-encoding of a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Seconds since the Unix epoch, as Prometheus counts them.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
