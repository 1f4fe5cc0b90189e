//! The status port's connections, kept small and answerable under abuse.
//!
//! Every Pod of the cluster network can reach port 4040, so a client may open
//! thousands of connections and send nothing, half a request line, a huge header, or
//! read nothing of a stream. The server here:
//! - holds at most `max_connections`; when a new one arrives at the cap (or the
//!   process is out of file descriptors), the *oldest connection that is neither
//!   inside a request nor a `/watch` stream* is shed, taken from the peer that holds
//!   the most (a newcomer from that peer replaces one of its own), so a fresh probe
//!   always gets in (kubelet's, Prometheus's, or one from the crowd's own address)
//!   while the flood sheds itself;
//! - closes a connection that does not deliver a whole request head within
//!   `head_timeout`, also between the requests of a kept-alive connection (hyper's
//!   header-read timer starts whenever it waits for a head), so idle and slow clients
//!   leave on their own;
//! - reads heads into small buffers ([`MAX_BUF`], a head larger than that is refused)
//!   and refuses bodies (nothing it serves takes one);
//! - runs on its own thread and runtime (see `cmd::sidecar`), so no load here delays
//!   the elector's renewals;
//! - hands freed memory back to the system once a crowd has left (glibc keeps it).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tower::ServiceExt;

/// The most a connection buffers for a request head (hyper's floor).
pub const MAX_BUF: usize = 8192;

/// Limits of the status port.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    /// A whole request head must arrive within this, from the connection's start or
    /// the end of its last response.
    pub head_timeout: Duration,
}

/// One connection as the shedder sees it.
struct Conn {
    peer: IpAddr,
    opened: Instant,
    /// Requests begun on it (a client that never finished a request head has none).
    requests: Arc<AtomicUsize>,
    /// Requests being answered now (a shed would cut one off).
    busy: Arc<AtomicUsize>,
    /// A `/watch` stream: capped on its own, never shed.
    pinned: Arc<AtomicBool>,
    close: Arc<Notify>,
}

/// How long a new connection may take to send its first request head before it is
/// the first to be shed: a real client (a probe, a scrape) sends it at once.
pub const FIRST_HEAD_GRACE: Duration = Duration::from_millis(250);

impl Conn {
    fn sheddable(&self) -> bool {
        self.busy.load(Ordering::Relaxed) == 0 && !self.pinned.load(Ordering::Relaxed)
    }

    /// Past its grace without a single request: idle or slow on purpose.
    fn silent(&self, now: Instant) -> bool {
        self.requests.load(Ordering::Relaxed) == 0 && now - self.opened >= FIRST_HEAD_GRACE
    }
}

/// The live connections, oldest first (ids grow), and how many each peer holds.
#[derive(Default)]
struct Registry {
    next: u64,
    live: BTreeMap<u64, Conn>,
    per_peer: HashMap<IpAddr, usize>,
    /// The most connections held since memory was last handed back.
    peak: usize,
}

impl Registry {
    /// Closes one connection to make room, taken from the peer that holds the most
    /// (a crowd pays for itself; a probe from elsewhere is never its victim): the
    /// oldest that never sent a request head within its grace; else the oldest idle
    /// between requests; else the oldest that is neither answering nor streaming.
    /// False when every connection is answering or streaming.
    fn shed_oldest_idle(&mut self, now: Instant) -> bool {
        let heaviest = self
            .per_peer
            .iter()
            .filter(|(_, n)| **n > 1)
            .max_by_key(|(_, n)| **n)
            .map(|(ip, _)| *ip);
        let victim = heaviest
            .and_then(|ip| self.victim(now, Some(ip)))
            .or_else(|| self.victim(now, None));
        self.shed(victim)
    }

    /// Closes `victim`, if any; false when there is none.
    fn shed(&mut self, victim: Option<u64>) -> bool {
        match victim {
            Some(id) => {
                if let Some(c) = self.remove(id) {
                    c.close.notify_one();
                }
                true
            }
            None => false,
        }
    }

    /// At the cap, for a newcomer from `peer`: true once a connection was shed for it,
    /// false when the newcomer is to be refused. A newcomer from the peer that holds
    /// the most is refused (the cheapest answer to a crowd), unless it sent a whole
    /// request head at once (`whole_head`, asked only then): a probe may share the
    /// crowd's address (a client on the node itself), and only that behaviour tells
    /// it apart (refused, it got a reset). Such a newcomer takes the place of its
    /// peer's own oldest silent (else idle, else oldest) connection, never another
    /// peer's.
    fn make_room_for(
        &mut self,
        peer: IpAddr,
        now: Instant,
        whole_head: impl FnOnce() -> bool,
    ) -> bool {
        let own = self.per_peer.get(&peer).copied().unwrap_or(0);
        let most = self.per_peer.values().copied().max().unwrap_or(0);
        if own > 1 && own >= most {
            if !whole_head() {
                return false;
            }
            let victim = self.victim(now, Some(peer));
            return self.shed(victim);
        }
        self.shed_oldest_idle(now)
    }

    /// The connection to shed, among those of `peer` (or all).
    fn victim(&self, now: Instant, peer: Option<IpAddr>) -> Option<u64> {
        let sheddable = || {
            self.live
                .iter()
                .filter(|(_, c)| c.sheddable() && peer.is_none_or(|p| c.peer == p))
        };
        sheddable()
            .find(|(_, c)| c.silent(now))
            .or_else(|| sheddable().find(|(_, c)| c.requests.load(Ordering::Relaxed) > 0))
            .or_else(|| sheddable().next())
            .map(|(id, _)| *id)
    }

    fn remove(&mut self, id: u64) -> Option<Conn> {
        let conn = self.live.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&conn.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&conn.peer);
            }
        }
        Some(conn)
    }
}

/// Marks the connection that carries a request as a `/watch` stream.
#[derive(Clone)]
pub struct StreamMark(Arc<AtomicBool>);

impl StreamMark {
    pub fn pin(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Serves `app` on `listener` until `stop` fires.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    mut stop: oneshot::Receiver<()>,
) {
    let registry = Arc::new(Mutex::new(Registry::default()));
    let waiting = Arc::new(AtomicUsize::new(0));
    defer_accept(&listener);
    tokio::spawn(hand_back_memory(registry.clone()));
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors (EMFILE, ENFILE) or a connection reset before we
                // took it: make room and go on at once.
                let shed = lock(&registry).shed_oldest_idle(Instant::now());
                tracing::debug!(error = %e, shed, "accept failed");
                tokio::time::sleep(Duration::from_millis(if shed { 1 } else { 10 })).await;
                continue;
            }
        };
        let Some(conn) = admit_if_room(&registry, &stream, peer, limits) else {
            // Refused: it may still be a probe whose head is a moment behind its
            // connect (see `HEAD_WAIT`); else dropped at once, the cheapest answer to
            // a crowd, which must not starve the accept loop that a probe waits on.
            if waiting.load(Ordering::Relaxed) < MAX_WAITING {
                let waited = Waiting::new(waiting.clone());
                let registry = registry.clone();
                tokio::spawn(admit_after_head_wait(
                    stream,
                    peer,
                    app.clone(),
                    limits,
                    registry,
                    waited,
                ));
            }
            continue;
        };
        tokio::spawn(connection(
            stream,
            peer,
            app.clone(),
            limits,
            conn,
            registry.clone(),
        ));
    }
}

/// A newcomer refused at the cap gets this long for its whole request head to come:
/// the kernel may hand a connection over before its first bytes (when SYN cookies
/// bypass `TCP_DEFER_ACCEPT`), and a probe's head follows its connect within
/// microseconds.
const HEAD_WAIT: Duration = Duration::from_millis(3);

/// At most this many refused newcomers wait so at once; more are dropped at once.
const MAX_WAITING: usize = 128;

/// Counts a newcomer waiting for its head while it lives.
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn new(count: Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Admits `stream` when there is room, or room can be made for it (see
/// `Registry::make_room_for`).
fn admit_if_room(
    registry: &Mutex<Registry>,
    stream: &tokio::net::TcpStream,
    peer: SocketAddr,
    limits: Limits,
) -> Option<Admitted> {
    let mut r = lock(registry);
    let room = r.live.len() < limits.max_connections
        || r.make_room_for(peer.ip(), Instant::now(), || head_arrived(stream));
    room.then(|| admit(&mut r, peer.ip()))
}

/// A refused newcomer, looked at again after [`HEAD_WAIT`]: served if room can be
/// made for it now, else dropped.
async fn admit_after_head_wait(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: Limits,
    registry: Arc<Mutex<Registry>>,
    waited: Waiting,
) {
    tokio::time::sleep(HEAD_WAIT).await;
    drop(waited);
    if let Some(conn) = admit_if_room(&registry, &stream, peer, limits) {
        connection(stream, peer, app, limits, conn, registry).await;
    }
}

/// Asks the kernel to hand over a new connection only once its first bytes arrived
/// (`TCP_DEFER_ACCEPT`, up to [`DEFER_ACCEPT_SECS`]; a silent one comes after that):
/// so at the cap a probe's request head is there to be seen (see `make_room_for`),
/// and a crowd that sends nothing costs no descriptor meanwhile. Best effort.
fn defer_accept(listener: &TcpListener) {
    use std::os::fd::AsRawFd;
    let secs: libc::c_int = DEFER_ACCEPT_SECS;
    // SAFETY: setsockopt on a socket we own, with a c_int option value of its size.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&secs as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "no TCP_DEFER_ACCEPT");
    }
}

/// How long the kernel holds a new connection that sent nothing yet.
const DEFER_ACCEPT_SECS: libc::c_int = 1;

/// Whether a whole request head has arrived on `stream` already (looked at, not
/// taken: hyper reads it as usual).
fn head_arrived(stream: &tokio::net::TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 2048];
    // SAFETY: a non-blocking peek into a buffer of ours, on a socket we own; it takes
    // nothing off the socket.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).is_ok_and(|n| whole_head(&buf[..n]))
}

/// Whether `bytes` hold a whole request head (its blank line).
fn whole_head(bytes: &[u8]) -> bool {
    bytes.windows(4).any(|w| w == b"\r\n\r\n")
}

fn lock(registry: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    registry
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a connection task needs of its registry entry.
struct Admitted {
    id: u64,
    requests: Arc<AtomicUsize>,
    busy: Arc<AtomicUsize>,
    pinned: Arc<AtomicBool>,
    close: Arc<Notify>,
}

fn admit(r: &mut Registry, peer: IpAddr) -> Admitted {
    let id = r.next;
    r.next += 1;
    *r.per_peer.entry(peer).or_insert(0) += 1;
    let conn = Conn {
        peer,
        opened: Instant::now(),
        requests: Arc::new(AtomicUsize::new(0)),
        busy: Arc::new(AtomicUsize::new(0)),
        pinned: Arc::new(AtomicBool::new(false)),
        close: Arc::new(Notify::new()),
    };
    let admitted = Admitted {
        id,
        requests: conn.requests.clone(),
        busy: conn.busy.clone(),
        pinned: conn.pinned.clone(),
        close: conn.close.clone(),
    };
    r.live.insert(id, conn);
    r.peak = r.peak.max(r.live.len());
    admitted
}

/// Counts a request as busy until its response head is ready.
struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: Limits,
    conn: Admitted,
    registry: Arc<Mutex<Registry>>,
) {
    let _ = stream.set_nodelay(true);
    let (busy, mark) = (conn.busy.clone(), StreamMark(conn.pinned.clone()));
    let requests = conn.requests.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        requests.fetch_add(1, Ordering::Relaxed);
        busy.fetch_add(1, Ordering::Relaxed);
        let guard = Busy(busy.clone());
        req.extensions_mut().insert(ConnectInfo(peer));
        req.extensions_mut().insert(mark.clone());
        let app = app.clone();
        async move {
            let response = app.oneshot(req.map(axum::body::Body::new)).await;
            drop(guard);
            response
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(MAX_BUF)
        .max_headers(64)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = served => {}
        _ = conn.close.notified() => {}
    }
    lock(&registry).remove(conn.id);
}

/// Once the connections are far fewer than at their peak, asks the allocator to
/// return what it freed (glibc keeps freed heap for reuse otherwise, and the Pod's
/// memory limit counts it).
async fn hand_back_memory(registry: Arc<Mutex<Registry>>) {
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let trim = {
            let mut r = lock(&registry);
            let crowd_left = r.peak >= 64 && r.live.len() * 4 <= r.peak;
            if crowd_left {
                r.peak = r.live.len();
            }
            crowd_left
        };
        if trim {
            trim_heap();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim only releases free memory of glibc's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections as (requests begun, busy, pinned), oldest first.
    fn registry_of(states: &[(usize, usize, bool)]) -> Registry {
        let mut r = Registry::default();
        for &(requests, busy, pinned) in states {
            let a = admit(&mut r, IpAddr::from([10, 0, 0, 1]));
            a.requests.store(requests, Ordering::Relaxed);
            a.busy.store(busy, Ordering::Relaxed);
            a.pinned.store(pinned, Ordering::Relaxed);
        }
        r
    }

    fn ids(r: &Registry) -> Vec<u64> {
        r.live.keys().copied().collect()
    }

    #[test]
    fn silent_connections_go_first_then_idle_ones_then_fresh_ones() {
        let mut r = registry_of(&[
            (1, 1, false), // answering
            (1, 0, true),  // a /watch stream
            (3, 0, false), // between requests
            (0, 0, false), // never sent a head
            (0, 0, false), // never sent a head
        ]);
        // Within their grace the silent ones are fresh: the idle one goes first.
        assert!(r.shed_oldest_idle(Instant::now()));
        assert_eq!(ids(&r), vec![0, 1, 3, 4]);
        // Past it, the oldest silent one.
        let mut r = registry_of(&[
            (1, 1, false),
            (1, 0, true),
            (3, 0, false),
            (0, 0, false),
            (0, 0, false),
        ]);
        let later = Instant::now() + FIRST_HEAD_GRACE;
        assert!(r.shed_oldest_idle(later));
        assert_eq!(ids(&r), vec![0, 1, 2, 4]);
        assert!(r.shed_oldest_idle(later));
        assert_eq!(ids(&r), vec![0, 1, 2]);
        assert!(r.shed_oldest_idle(later));
        assert_eq!(ids(&r), vec![0, 1]);
        // A request in progress and a stream are never cut off.
        assert!(!r.shed_oldest_idle(later));
        assert_eq!(r.live.len(), 2);
    }

    #[test]
    fn the_peer_holding_the_most_pays_first() {
        let mut r = Registry::default();
        let (crowd, probe) = (IpAddr::from([10, 0, 0, 9]), IpAddr::from([10, 0, 0, 1]));
        admit(&mut r, probe); // the oldest, silent
        for _ in 0..3 {
            admit(&mut r, crowd);
        }
        let later = Instant::now() + FIRST_HEAD_GRACE;
        assert!(r.shed_oldest_idle(later));
        assert_eq!(ids(&r), vec![0, 2, 3]);
        assert_eq!(r.per_peer.get(&crowd), Some(&2));
        // Every peer holds one: the oldest silent one of all goes.
        let mut r = Registry::default();
        admit(&mut r, probe);
        admit(&mut r, crowd).requests.store(1, Ordering::Relaxed);
        let later = Instant::now() + FIRST_HEAD_GRACE;
        assert!(r.shed_oldest_idle(later));
        assert_eq!(ids(&r), vec![1]);
        assert_eq!(r.per_peer.get(&probe), None);
    }

    #[test]
    fn at_the_cap_the_heaviest_peer_pays_for_its_own_newcomers_and_others_get_in() {
        let mut r = Registry::default();
        let (crowd, probe) = (IpAddr::from([10, 0, 0, 9]), IpAddr::from([10, 0, 0, 1]));
        admit(&mut r, probe); // the oldest, silent: never the crowd's victim
        for _ in 0..3 {
            admit(&mut r, crowd);
        }
        let now = Instant::now();
        // A crowd's newcomer without a whole head is refused, and nothing is shed.
        assert!(!r.make_room_for(crowd, now, || false));
        assert_eq!(ids(&r), vec![0, 1, 2, 3]);
        // With one (a probe from the crowd's address), it replaces the crowd's
        // oldest, never the other peer's.
        assert!(r.make_room_for(crowd, now, || true));
        assert_eq!(ids(&r), vec![0, 2, 3]);
        let later = now + FIRST_HEAD_GRACE;
        assert!(r.make_room_for(crowd, later, || true));
        assert_eq!(ids(&r), vec![0, 3]);
        // Refused when none of its own can go (answering, streaming).
        r.live[&3].busy.store(1, Ordering::Relaxed);
        admit(&mut r, crowd).pinned.store(true, Ordering::Relaxed);
        assert!(!r.make_room_for(crowd, later, || true));
        assert_eq!(ids(&r), vec![0, 3, 4]);
        // Another peer's newcomer makes room from the crowd, head or not.
        let mut r = Registry::default();
        for _ in 0..3 {
            admit(&mut r, crowd);
        }
        assert!(r.make_room_for(probe, now, || false));
        assert_eq!(r.per_peer.get(&crowd), Some(&2));
        // A peer with one connection is not a crowd.
        let mut r = Registry::default();
        admit(&mut r, crowd);
        assert!(r.make_room_for(crowd, now, || false));
        assert!(r.live.is_empty());
    }

    #[test]
    fn a_whole_head_is_one_up_to_its_blank_line() {
        assert!(whole_head(b"GET /leader HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(whole_head(b"GET / HTTP/1.1\r\n\r\nGET"));
        assert!(!whole_head(b"GET /lea"));
        assert!(!whole_head(b"GET /leader HTTP/1.1\r\nHost: x\r\n"));
        assert!(!whole_head(b""));
    }

    #[test]
    fn fresh_connections_are_shed_only_when_nothing_else_can_be() {
        let mut r = registry_of(&[(0, 0, false), (0, 1, false)]);
        assert!(r.shed_oldest_idle(Instant::now()));
        assert_eq!(ids(&r), vec![1]);
        // A fresh connection older than an idle one stays: the idle one goes.
        let mut r = registry_of(&[(0, 0, false), (2, 0, false), (0, 0, false)]);
        assert!(r.shed_oldest_idle(Instant::now()));
        assert_eq!(ids(&r), vec![0, 2]);
    }
}
