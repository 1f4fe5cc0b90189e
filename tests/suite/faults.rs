//! The fault proxy of `tests/common/harness/faults.rs` against a loopback echo server: each
//! link mode does exactly what it says.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::eventually;
use common::harness::faults::{FaultProxy, Link, ProxyOptions};

/// Echoes every byte back; counts accepted connections and bytes received.
struct EchoServer {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    received: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EchoServer {
    fn start() -> EchoServer {
        EchoServer::start_on(0)
    }

    fn start_on(port: u16) -> EchoServer {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, r, s) = (accepted.clone(), received.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut conns: Vec<TcpStream> = Vec::new();
            let mut buf = [0u8; 4096];
            while !s.load(Ordering::SeqCst) {
                if let Ok((c, _)) = listener.accept() {
                    c.set_nonblocking(true).unwrap();
                    c.set_nodelay(true).unwrap();
                    a.fetch_add(1, Ordering::SeqCst);
                    conns.push(c);
                }
                conns.retain_mut(|c| match c.read(&mut buf) {
                    Ok(0) => false,
                    Ok(n) => {
                        r.fetch_add(n, Ordering::SeqCst);
                        c.set_nonblocking(false).unwrap();
                        let ok = c.write_all(&buf[..n]).is_ok();
                        c.set_nonblocking(true).unwrap();
                        ok
                    }
                    Err(e) => e.kind() == ErrorKind::WouldBlock,
                });
                // Pause: the echo server's non-blocking loop (1 ms: the proxy's delays are measured
                // through it).
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        EchoServer {
            addr,
            accepted,
            received,
            stop,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn connect(proxy: &FaultProxy) -> TcpStream {
    let c = TcpStream::connect(proxy.addr()).unwrap();
    c.set_nodelay(true).unwrap();
    c
}

/// Reads exactly `n` bytes within `limit`; None if they did not all come.
fn read_n(c: &mut TcpStream, n: usize, limit: Duration) -> Option<Vec<u8>> {
    let end = Instant::now() + limit;
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        let left = end.checked_duration_since(Instant::now())?;
        c.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match c.read(&mut out[got..]) {
            Ok(0) => return None,
            Ok(k) => got += k,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None
            }
            Err(_) => return None,
        }
    }
    Some(out)
}

fn echo(c: &mut TcpStream, msg: &[u8], limit: Duration) -> Option<Vec<u8>> {
    c.write_all(msg).unwrap();
    read_n(c, msg.len(), limit)
}

const QUIET: Duration = Duration::from_millis(300);
const SOON: Duration = Duration::from_secs(3);

#[test]
fn pass_forwards_both_ways_and_counts_connections() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    assert_eq!(proxy.addr(), format!("127.0.0.1:{}", proxy.port()));
    assert_eq!(proxy.connections(), 0);
    let mut a = connect(&proxy);
    let mut b = connect(&proxy);
    assert_eq!(echo(&mut a, b"hello", SOON).as_deref(), Some(&b"hello"[..]));
    assert_eq!(echo(&mut b, b"world", SOON).as_deref(), Some(&b"world"[..]));
    assert_eq!(proxy.connections(), 2);
    assert_eq!(server.accepted(), 2);
    // A big write goes through whole and in order.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let writer = {
        let mut a2 = a.try_clone().unwrap();
        let big = big.clone();
        std::thread::spawn(move || a2.write_all(&big).unwrap())
    };
    assert_eq!(read_n(&mut a, big.len(), SOON), Some(big));
    writer.join().unwrap();
    drop(a);
    assert!(eventually(SOON, || (proxy.connections() == 1).then_some(())).is_some());
    drop(b);
    assert!(eventually(SOON, || (proxy.connections() == 0).then_some(())).is_some());
}

#[test]
fn blackhole_holds_both_ways_keeps_connections_and_delivers_on_healing() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    let mut old = connect(&proxy);
    assert!(echo(&mut old, b"before", SOON).is_some());
    proxy.set(Link::Blackhole);
    assert_eq!(proxy.link(), Link::Blackhole);
    let sent = server.received();
    assert_eq!(
        echo(&mut old, b"held", QUIET),
        None,
        "a reply crossed the blackhole"
    );
    // A new connection is accepted, but its bytes (and its connect) wait too.
    let mut new = connect(&proxy);
    assert_eq!(echo(&mut new, b"new", QUIET), None);
    assert_eq!(server.received(), sent, "bytes reached the server");
    assert_eq!(server.accepted(), 1, "the server saw a connect");
    assert!(eventually(SOON, || (proxy.connections() == 2).then_some(())).is_some());
    proxy.set(Link::Pass);
    assert_eq!(read_n(&mut old, 4, SOON).as_deref(), Some(&b"held"[..]));
    assert_eq!(read_n(&mut new, 3, SOON).as_deref(), Some(&b"new"[..]));
    assert_eq!(server.accepted(), 2);
    assert_eq!(
        echo(&mut old, b"after", SOON).as_deref(),
        Some(&b"after"[..])
    );
}

#[test]
fn blackhole_holds_a_close_until_healing() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    let mut c = connect(&proxy);
    assert!(echo(&mut c, b"x", SOON).is_some());
    proxy.set(Link::Blackhole);
    c.shutdown(std::net::Shutdown::Write).unwrap();
    // Observed: the quiet time after the half-close, through the blackhole.
    std::thread::sleep(QUIET);
    assert_eq!(proxy.connections(), 1);
    proxy.set(Link::Pass);
    // The server sees the half-close, closes, and the client reads EOF.
    let mut buf = [0u8; 1];
    c.set_read_timeout(Some(SOON)).unwrap();
    assert_eq!(c.read(&mut buf).unwrap(), 0);
    assert!(eventually(SOON, || (proxy.connections() == 0).then_some(())).is_some());
}

/// A congested link queues: each chunk waits its delay after the one before it left,
/// so five chunks sent 50 ms apart come back one delay after another.
#[test]
fn congestion_queues_every_chunk_behind_the_one_before() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    let mut c = connect(&proxy);
    assert!(echo(&mut c, b"warm", SOON).is_some());
    proxy.set(Link::Congested(Duration::from_millis(200)));
    let t = Instant::now();
    for _ in 0..5 {
        c.write_all(b"abc").unwrap();
        // The test's input: five chunks 50 ms apart.
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = read_n(&mut c, 3, Duration::from_secs(5));
    let first_at = t.elapsed();
    assert!(first.is_some());
    assert!(read_n(&mut c, 12, Duration::from_secs(5)).is_some());
    let last_at = t.elapsed();
    // Requests leave at ~200, 400, … 1000 ms; each echo ~200 ms after the one before.
    assert!(
        first_at >= Duration::from_millis(400),
        "first after {first_at:?}"
    );
    assert!(
        last_at >= Duration::from_millis(1000) && last_at < Duration::from_secs(3),
        "last after {last_at:?} (a long pipe would give ~600 ms)"
    );
    proxy.set(Link::Pass);
    let t = Instant::now();
    assert!(echo(&mut c, b"fast", SOON).is_some());
    assert!(t.elapsed() < Duration::from_millis(400));
}

#[test]
fn delay_is_a_long_pipe_not_a_slow_one() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    let mut c = connect(&proxy);
    assert!(echo(&mut c, b"warm", SOON).is_some());
    proxy.set(Link::Delay(Duration::from_millis(200)));
    let t = Instant::now();
    assert!(echo(&mut c, b"ping", Duration::from_secs(5)).is_some());
    let rtt = t.elapsed();
    assert!(
        rtt >= Duration::from_millis(400) && rtt < Duration::from_secs(2),
        "round trip {rtt:?}"
    );
    // Five chunks 50 ms apart: each comes back ~400 ms after it left, so the last one
    // ~600 ms after the first was sent (a slow pipe would take 5 × 400 ms).
    let t = Instant::now();
    for _ in 0..5 {
        c.write_all(b"abc").unwrap();
        // The test's input: five chunks 50 ms apart.
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = read_n(&mut c, 3, Duration::from_secs(5));
    let first_at = t.elapsed();
    assert!(first.is_some());
    assert!(read_n(&mut c, 12, Duration::from_secs(5)).is_some());
    let last_at = t.elapsed();
    assert!(
        first_at >= Duration::from_millis(400),
        "first after {first_at:?}"
    );
    assert!(
        last_at >= Duration::from_millis(600) && last_at < Duration::from_millis(1500),
        "last after {last_at:?}"
    );
    // A new connection is delayed too; back to Pass, at once.
    let mut n = connect(&proxy);
    let t = Instant::now();
    assert!(echo(&mut n, b"new", Duration::from_secs(5)).is_some());
    assert!(t.elapsed() >= Duration::from_millis(400));
    proxy.set(Link::Pass);
    let t = Instant::now();
    assert!(echo(&mut n, b"fast", SOON).is_some());
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn hold_requests_holds_client_to_server_only() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    let mut c = connect(&proxy);
    assert!(echo(&mut c, b"warm", SOON).is_some());
    let before = server.received();
    proxy.set(Link::HoldRequests);
    assert_eq!(echo(&mut c, b"req", QUIET), None);
    assert_eq!(server.received(), before, "a request crossed");
    proxy.set(Link::Pass);
    assert_eq!(read_n(&mut c, 3, SOON).as_deref(), Some(&b"req"[..]));
    // Replies still flow while requests are held: an echo already on its way back.
    proxy.set(Link::HoldReplies);
    c.write_all(b"pending").unwrap();
    assert!(eventually(SOON, || (server.received() == before + 10).then_some(())).is_some());
    proxy.set(Link::HoldRequests);
    assert_eq!(read_n(&mut c, 7, SOON).as_deref(), Some(&b"pending"[..]));
}

#[test]
fn hold_replies_holds_server_to_client_only() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    let mut c = connect(&proxy);
    assert!(echo(&mut c, b"warm", SOON).is_some());
    let before = server.received();
    proxy.set(Link::HoldReplies);
    assert_eq!(echo(&mut c, b"req", QUIET), None, "a reply crossed");
    assert!(
        eventually(SOON, || (server.received() == before + 3).then_some(())).is_some(),
        "the request did not reach the server"
    );
    // New connections reach the server (their replies wait).
    let mut n = connect(&proxy);
    assert_eq!(echo(&mut n, b"new", QUIET), None);
    assert_eq!(server.accepted(), 2);
    proxy.set(Link::Pass);
    assert_eq!(read_n(&mut c, 3, SOON).as_deref(), Some(&b"req"[..]));
    assert_eq!(read_n(&mut n, 3, SOON).as_deref(), Some(&b"new"[..]));
}

#[test]
fn reset_closes_every_connection_and_keeps_accepting() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    let mut a = connect(&proxy);
    let mut b = connect(&proxy);
    assert!(echo(&mut a, b"a", SOON).is_some());
    assert!(echo(&mut b, b"b", SOON).is_some());
    // Also one whose bytes are held.
    proxy.set(Link::Blackhole);
    b.write_all(b"lost").unwrap();
    proxy.reset();
    assert_eq!(proxy.connections(), 0);
    for c in [&mut a, &mut b] {
        c.set_read_timeout(Some(SOON)).unwrap();
        let mut buf = [0u8; 8];
        match c.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => panic!("read {n} bytes after reset"),
            Err(e) => assert!(
                !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "no EOF or error after reset: {e}"
            ),
        }
    }
    proxy.set(Link::Pass);
    let mut n = connect(&proxy);
    assert_eq!(echo(&mut n, b"again", SOON).as_deref(), Some(&b"again"[..]));
    assert!(eventually(SOON, || (proxy.connections() == 1).then_some(())).is_some());
}

#[test]
fn dropping_the_proxy_closes_everything() {
    let server = EchoServer::start();
    let proxy = FaultProxy::start(server.addr);
    let port = proxy.port();
    let mut c = connect(&proxy);
    assert!(echo(&mut c, b"x", SOON).is_some());
    drop(proxy);
    c.set_read_timeout(Some(SOON)).unwrap();
    let mut buf = [0u8; 1];
    assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn a_rewrite_replaces_the_first_request_bytes_even_when_split() {
    fn hello(buf: &[u8]) -> Option<(usize, Vec<u8>)> {
        if buf.len() < 4 {
            return None;
        }
        Some(if buf.starts_with(b"HELO") {
            (4, b"hi".to_vec())
        } else {
            (0, Vec::new())
        })
    }
    let server = EchoServer::start();
    let proxy = FaultProxy::start_with(
        server.addr,
        ProxyOptions {
            rewrite: Some(hello),
            ..ProxyOptions::default()
        },
    );
    let mut c = connect(&proxy);
    c.write_all(b"HE").unwrap();
    // The test's input: the hello split in two writes 50 ms apart.
    std::thread::sleep(Duration::from_millis(50));
    c.write_all(b"LOrest").unwrap();
    assert_eq!(read_n(&mut c, 6, SOON).as_deref(), Some(&b"hirest"[..]));
    // Only the first bytes: a later HELO passes.
    assert_eq!(echo(&mut c, b"HELO", SOON).as_deref(), Some(&b"HELO"[..]));
    // A connection that does not start with it is left alone.
    let mut d = connect(&proxy);
    assert_eq!(echo(&mut d, b"HEY!", SOON).as_deref(), Some(&b"HEY!"[..]));
}

#[test]
fn a_refused_upstream_closes_the_client_unless_retried() {
    let port = common::free_port();
    let target = SocketAddr::from(([127, 0, 0, 1], port));
    let plain = FaultProxy::start(target);
    let mut c = connect(&plain);
    c.set_read_timeout(Some(SOON)).unwrap();
    let mut buf = [0u8; 1];
    let t = Instant::now();
    assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

    let patient = FaultProxy::start_with(
        target,
        ProxyOptions {
            connect_retry: Duration::from_secs(3),
            ..ProxyOptions::default()
        },
    );
    let mut c = connect(&patient);
    c.write_all(b"early").unwrap();
    // The test's input: the upstream comes 300 ms after the client's first bytes.
    std::thread::sleep(Duration::from_millis(300));
    let _server = EchoServer::start_on(port);
    assert_eq!(read_n(&mut c, 5, SOON).as_deref(), Some(&b"early"[..]));
}
