//! client-go's `leaderelection` loop (k8s.io/client-go/tools/leaderelection,
//! tryAcquireOrRenew) at its defaults, as a peer on the fake API server.

use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::common::servers::fake_kube::TOKEN;

/// LeaseDuration, client-go's default.
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// RetryPeriod, client-go's default.
const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// `replicas` client-go candidates of the Lease `namespace/name`, one thread each, for
/// `window`: every RetryPeriod (2 s) a follower GETs the Lease and writes only when it
/// is free or expired (observed unchanged for LeaseDuration, 15 s); the leader renews
/// with an optimistic UPDATE from the record it last wrote (the fast path of client-go
/// 1.24+), falling back to GET on a conflict.
pub fn client_go_replicas(
    port: u16,
    namespace: &str,
    name: &str,
    replicas: usize,
    window: Duration,
) {
    let end = Instant::now() + window;
    let threads: Vec<_> = (0..replicas)
        .map(|i| {
            let replica = Replica::new(port, namespace, name, i);
            std::thread::spawn(move || replica.run_until(end))
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

struct Replica {
    port: u16,
    namespace: String,
    name: String,
    /// The collection's path, to create the Lease.
    base: String,
    /// The Lease's path.
    path: String,
    me: String,
    /// The Lease as we last wrote it, while we hold it.
    mine: Option<Value>,
    /// (record, when we saw it change) for the expiry rule.
    observed: Option<(Value, Instant)>,
}

impl Replica {
    fn new(port: u16, namespace: &str, name: &str, i: usize) -> Replica {
        let base = format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases");
        Replica {
            port,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            path: format!("{base}/{name}"),
            base,
            me: format!("client-go-{i}"),
            mine: None,
            observed: None,
        }
    }

    fn run_until(mut self, end: Instant) {
        while Instant::now() < end {
            self.try_acquire_or_renew();
            std::thread::sleep(RETRY_PERIOD);
        }
    }

    fn try_acquire_or_renew(&mut self) {
        if let Some(lease) = self.mine.take() {
            self.write_ours(&lease);
            return;
        }
        match kube_call(self.port, "GET", &self.path, None) {
            Some((404, _)) => self.create(),
            Some((200, lease)) => self.take_if_free(&lease),
            _ => {}
        }
    }

    fn create(&mut self) {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self.spec(None),
        });
        if let Some((201, written)) = kube_call(self.port, "POST", &self.base, Some(&lease)) {
            self.mine = Some(written);
        }
    }

    /// Writes our claim over `lease` when its holder is none, us, or expired.
    fn take_if_free(&mut self, lease: &Value) {
        let spec = lease["spec"].clone();
        let changed = self.observed.as_ref().is_none_or(|(o, _)| *o != spec);
        if changed {
            self.observed = Some((spec.clone(), Instant::now()));
        }
        let since = self
            .observed
            .as_ref()
            .map(|(_, t)| t.elapsed())
            .unwrap_or_default();
        let free = spec["holderIdentity"].as_str().unwrap_or("").is_empty()
            || spec["holderIdentity"] == self.me.as_str()
            || since > LEASE_DURATION;
        if free {
            self.write_ours(lease);
        }
    }

    /// PUTs `lease` with our spec; on success it is ours as written.
    fn write_ours(&mut self, lease: &Value) {
        let mut next = lease.clone();
        next["spec"] = self.spec(Some(lease));
        if let Some((200, written)) = kube_call(self.port, "PUT", &self.path, Some(&next)) {
            self.mine = Some(written);
        }
    }

    /// Our spec over `lease` (if any): acquireTime and leaseTransitions carry on while
    /// the holder stays the same.
    fn spec(&self, lease: Option<&Value>) -> Value {
        let old = lease.map(|l| l["spec"].clone()).unwrap_or_default();
        let same = old["holderIdentity"] == self.me.as_str();
        json!({
            "holderIdentity": self.me,
            "leaseDurationSeconds": LEASE_DURATION.as_secs(),
            "acquireTime": if same { old["acquireTime"].clone() } else { json!(micro_time(SystemTime::now())) },
            "renewTime": micro_time(SystemTime::now()),
            "leaseTransitions": old["leaseTransitions"].as_i64().unwrap_or(0) + i64::from(!same && lease.is_some()),
        })
    }
}

/// A Kubernetes MicroTime: RFC 3339, UTC, with microseconds.
fn micro_time(t: SystemTime) -> String {
    let format = time::format_description::parse_borrowed::<2>(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z",
    )
    .expect("format");
    time::OffsetDateTime::from(t)
        .format(&format)
        .expect("a time")
}

/// One request to the fake API (plain HTTP, its bearer token): (status, body).
fn kube_call(port: u16, method: &str, path: &str, body: Option<&Value>) -> Option<(u16, Value)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, serde_json::from_str(rest).unwrap_or(Value::Null)))
}
