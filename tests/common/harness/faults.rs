//! Network faults for the suites: a TCP proxy on loopback that forwards to one target
//! and can hold bytes (a partition that keeps its connections open), hold one direction
//! only, delay every chunk (a long pipe) or queue them (a congested link), or reset
//! every connection.
//!
//! The tests are synchronous; each proxy runs a current-thread tokio runtime on its own
//! background thread, which `Drop` stops and joins (every socket is closed by then).
//!
//! Where it differs from a real network:
//! - A client's connect always succeeds (the proxy accepts); a target that refuses
//!   shows as an EOF right after (or after `ProxyOptions::connect_retry`).
//! - While bytes are held the proxy still reads (and so ACKs) them: a sender's writes
//!   never block on a full window, however much it sends into a partition.
//! - Held bytes are delivered on healing however long the partition lasted (real TCP
//!   gives up after ~15 min of retransmissions); a peer that closed meanwhile gets them
//!   as a write to a closed socket (RST).
//! - `reset` closes both sockets (FIN, or RST where unread bytes were pending).
//! - A client that closes (or resets) its connection: the bytes it sent before still
//!   reach the server, each when the link lets it, then a FIN (a reset arrives as a FIN).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// What a proxy does with the bytes of its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Forward both ways at once.
    Pass,
    /// Hold every byte both ways (and new connections' bytes too) while keeping every
    /// connection open; on healing the held bytes go out in order, as after a
    /// retransmission. The upstream connection of a connection accepted meanwhile is
    /// only opened on healing (its SYN "arrives late").
    Blackhole,
    /// Forward every chunk `d` after it was read, in order, without a throughput limit.
    Delay(Duration),
    /// A congested link: every chunk waits `d` after the one before it left (or after
    /// it was read, if later), so queued chunks wait longer and longer.
    Congested(Duration),
    /// Hold server→client bytes only.
    HoldReplies,
    /// Hold client→server bytes only (new connections reach the server on healing).
    HoldRequests,
}

#[derive(Clone, Copy)]
enum Dir {
    Request,
    Reply,
}

impl Link {
    /// When a chunk read at `read_at` going `dir` may leave, the chunk before it having
    /// left at `before`; `None` while it is held.
    fn release(self, dir: Dir, read_at: Instant, before: Option<Instant>) -> Option<Instant> {
        match (self, dir) {
            (Link::Pass, _)
            | (Link::HoldReplies, Dir::Request)
            | (Link::HoldRequests, Dir::Reply) => Some(read_at),
            (Link::Delay(d), _) => Some(read_at + d),
            (Link::Congested(d), _) => Some(before.map_or(read_at, |b| b.max(read_at)) + d),
            _ => None,
        }
    }
}

/// Rewrites the first bytes a client sends on each connection (a protocol's hello),
/// before any link applies. Called with the request bytes read so far: `None` = need
/// more; `Some((consumed, replacement))` = forward `replacement` instead of the first
/// `consumed` bytes, then everything else unchanged.
pub type Rewrite = fn(&[u8]) -> Option<(usize, Vec<u8>)>;

/// How a proxy treats its connections beyond the [`Link`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ProxyOptions {
    /// Each connection's first request bytes go through it (e.g. a peer's hello that
    /// names an address to call back).
    pub rewrite: Option<Rewrite>,
    /// When the target refuses a connection, keep trying (every 20 ms) this long before
    /// closing the client's. The client's connect has already succeeded at the proxy, so
    /// a refusal can only show as an immediate EOF; a protocol that retries a refused
    /// connect quickly but treats a lost connection as fatal (a ZooKeeper follower
    /// calling a leader that is still opening its port) needs this. Zero by default.
    pub connect_retry: Duration,
}

/// One open connection, as `reset` sees it.
struct Conn {
    /// Dropping it tells the connection to close both sockets.
    _kill: oneshot::Sender<()>,
    /// Disconnects once the connection's sockets are closed.
    closed: std_mpsc::Receiver<()>,
}

struct Shared {
    link: watch::Sender<Link>,
    conns: Mutex<HashMap<u64, Conn>>,
    next: AtomicU64,
}

/// A TCP proxy on `127.0.0.1:<port>` forwarding to one target; see [`Link`].
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on a free loopback port (port 0: the kernel's pick, held for the proxy's
    /// life, so parallel tests never collide) and forwards to `target`, starting in `Pass`.
    pub fn start(target: SocketAddr) -> FaultProxy {
        FaultProxy::start_with(target, ProxyOptions::default())
    }

    /// `start` with [`ProxyOptions`].
    pub fn start_with(target: SocketAddr, options: ProxyOptions) -> FaultProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("proxy listener");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("proxy addr").port();
        let (link, _) = watch::channel(Link::Pass);
        let shared = Arc::new(Shared {
            link,
            conns: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        });
        let (stop, stopped) = oneshot::channel();
        let accept_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("proxy runtime");
                rt.block_on(accept_loop(
                    listener,
                    target,
                    options,
                    accept_shared,
                    stopped,
                ));
                // Dropping the runtime drops every connection task and its sockets.
            })
            .expect("proxy thread");
        FaultProxy {
            port,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Applies `link` at once to every open connection (bytes already held or waiting
    /// included) and to new ones.
    pub fn set(&self, link: Link) {
        self.shared.link.send_replace(link);
    }

    /// The current link.
    pub fn link(&self) -> Link {
        *self.shared.link.borrow()
    }

    /// Closes every open connection, both sockets, before returning (bytes held are
    /// lost); new connections are still accepted.
    pub fn reset(&self) {
        let conns: Vec<Conn> = self
            .shared
            .conns
            .lock()
            .unwrap()
            .drain()
            .map(|(_, c)| c)
            .collect();
        let closed: Vec<_> = conns.into_iter().map(|c| c.closed).collect();
        for c in closed {
            let _ = c.recv_timeout(Duration::from_secs(5));
        }
    }

    /// Connections open right now (accepted and not yet closed).
    pub fn connections(&self) -> usize {
        self.shared.conns.lock().unwrap().len()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(
    listener: std::net::TcpListener,
    target: SocketAddr,
    options: ProxyOptions,
    shared: Arc<Shared>,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = TcpListener::from_std(listener).expect("tokio listener");
    loop {
        let client = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(_) => {
                    // Pause: before accepting again after an error.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let id = shared.next.fetch_add(1, Ordering::SeqCst);
        let (kill, killed) = oneshot::channel();
        let (closed_tx, closed) = std_mpsc::channel::<()>();
        shared.conns.lock().unwrap().insert(
            id,
            Conn {
                _kill: kill,
                closed,
            },
        );
        let link = shared.link.subscribe();
        let entry = Entry {
            shared: shared.clone(),
            id,
        };
        tokio::spawn(async move {
            // Dropped last: `reset` waits for it, after the sockets are gone.
            let _closed = closed_tx;
            let _entry = entry;
            serve(client, target, options, link, killed).await;
        });
    }
}

/// Removes a finished connection from the count.
struct Entry {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Ok(mut conns) = self.shared.conns.lock() {
            conns.remove(&self.id);
        }
    }
}

enum Chunk {
    Data(Instant, Vec<u8>),
    Eof(Instant),
}

impl Chunk {
    fn read_at(&self) -> Instant {
        match self {
            Chunk::Data(at, _) | Chunk::Eof(at) => *at,
        }
    }
}

/// One proxied connection until both directions end, one fails, or it is killed.
async fn serve(
    client: TcpStream,
    target: SocketAddr,
    options: ProxyOptions,
    link: watch::Receiver<Link>,
    mut killed: oneshot::Receiver<()>,
) {
    let _ = client.set_nodelay(true);
    let (client_r, client_w) = client.into_split();
    let (req_tx, req_rx) = mpsc::unbounded_channel();
    let (rep_tx, rep_rx) = mpsc::unbounded_channel();
    let requests_in = pump_in(client_r, req_tx, options.rewrite);
    let mut open_link = link.clone();
    let upstream = async move {
        // The connect waits while requests are held: across a partition the server
        // sees nothing, not even the SYN, until it heals.
        wait_release(&mut open_link, Dir::Request, None, None).await;
        let server = connect_upstream(target, options.connect_retry).await?;
        server.set_nodelay(true)?;
        let (server_r, server_w) = server.into_split();
        let requests = pump_out(req_rx, server_w, link.clone(), Dir::Request);
        // A client that closed its socket takes no more replies, but what it sent
        // before is on its way and still reaches the server, late or not (as on a
        // real network): a failed reply write must not drop the queued requests.
        let replies = async move {
            let _ = tokio::try_join!(
                pump_in(server_r, rep_tx, None),
                pump_out(rep_rx, client_w, link, Dir::Reply),
            );
        };
        tokio::join!(requests, replies).0
    };
    tokio::select! {
        _ = &mut killed => {}
        _ = async { tokio::try_join!(requests_in, upstream) } => {}
    }
}

/// Connects to `target`, retrying refusals for `retry`.
async fn connect_upstream(target: SocketAddr, retry: Duration) -> io::Result<TcpStream> {
    let end = Instant::now() + retry;
    loop {
        match TcpStream::connect(target).await {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && Instant::now() < end => {
                // Pause: before connecting again while the upstream refuses.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            result => return result,
        }
    }
}

/// Reads chunks as they come (never held back: the holding is on the way out), the
/// first ones through `rewrite` if given.
async fn pump_in(
    mut from: OwnedReadHalf,
    to: mpsc::UnboundedSender<Chunk>,
    mut rewrite: Option<Rewrite>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut hello = Vec::new();
    loop {
        // A reset reads as the end: what came before it is still delivered.
        let n = from.read(&mut buf).await.unwrap_or(0);
        let at = Instant::now();
        if n == 0 {
            if !hello.is_empty() {
                let _ = to.send(Chunk::Data(at, std::mem::take(&mut hello)));
            }
            let _ = to.send(Chunk::Eof(at));
            return Ok(());
        }
        let mut data = buf[..n].to_vec();
        if let Some(f) = rewrite {
            hello.extend_from_slice(&data);
            let Some((consumed, mut replacement)) = f(&hello) else {
                continue;
            };
            replacement.extend_from_slice(&hello[consumed.min(hello.len())..]);
            data = replacement;
            hello.clear();
            rewrite = None;
        }
        if !data.is_empty() && to.send(Chunk::Data(at, data)).is_err() {
            return Ok(());
        }
    }
}

/// Writes chunks in order, each when the link releases it; EOF becomes a half-close.
async fn pump_out(
    mut from: mpsc::UnboundedReceiver<Chunk>,
    mut to: OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
    dir: Dir,
) -> io::Result<()> {
    let mut before = None;
    while let Some(chunk) = from.recv().await {
        wait_release(&mut link, dir, Some(chunk.read_at()), before).await;
        before = Some(Instant::now());
        match chunk {
            Chunk::Data(_, bytes) => to.write_all(&bytes).await?,
            Chunk::Eof(_) => {
                to.shutdown().await?;
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Waits until the link lets a chunk read at `read_at` go `dir` (re-checked whenever the
/// link changes), the chunk before it having left at `before`. With `read_at` None: until
/// `dir` is not held (a delay does not count).
async fn wait_release(
    link: &mut watch::Receiver<Link>,
    dir: Dir,
    read_at: Option<Instant>,
    before: Option<Instant>,
) {
    loop {
        let now = Instant::now();
        let current = *link.borrow_and_update();
        match current.release(dir, read_at.unwrap_or(now), before) {
            Some(_) if read_at.is_none() => return,
            Some(at) if at <= now => return,
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => return,
                    changed = link.changed() => if changed.is_err() { return },
                }
            }
            None => {
                if link.changed().await.is_err() {
                    // The proxy is going away; hold forever (the task is dropped).
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}
