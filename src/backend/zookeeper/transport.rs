//! The backend's own transport to ZooKeeper: one relay per session, between the client
//! library and the servers (plaintext only), so that a session the elector gave up on
//! ends at the server as soon as the network allows.
//!
//! Without it, a session on a slow link outlives the claim by far: the library declares a connection dead when no answer came within two
//! fifths of the session timeout, and reconnects with the old session id for up to
//! 7/5 of the session timeout; every ConnectRequest that arrives touches the session,
//! and so keeps our node, the head of the queue, alive at the server while nobody
//! leads. Dropping the library's client does not stop it either.
//!
//! So the library connects to a loopback listener per server, and each connection is
//! relayed to its server. [`Relay::close`] ends the session's transport:
//! - every relayed connection is cut at once and no new one is let through, so the
//!   library's reconnects never reach a server again;
//! - when the session is known (read from the server's ConnectResponse as it passes),
//!   a fresh connection carries a ConnectRequest for that session immediately followed
//!   by a CloseSession: the server ends the session, and deletes our node, the moment
//!   those bytes arrive, instead of one session timeout after the last byte that did.
//!
//! With TLS the relay cannot read or write the protocol; the library connects directly
//! and the session then lives until one session timeout after the library's last
//! reconnect reached the server (docs/safety.md, "Slow links").

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The session, as the server's ConnectResponse gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Session {
    /// The server (`host:port`) that answered.
    server: String,
    timeout_ms: i32,
    id: i64,
    password: Vec<u8>,
}

struct Shared {
    closed: watch::Sender<bool>,
    session: Mutex<Option<Session>>,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            closed: watch::channel(false).0,
            session: Mutex::new(None),
        }
    }

    /// Notes the session that the server `server` gave in its first frame `reply`
    /// (nothing when it is not an established session's ConnectResponse).
    fn note_session(&self, server: &str, reply: &[u8]) {
        let Some(session) = Session::from_reply(server, reply) else {
            return;
        };
        if let Ok(mut s) = self.session.lock() {
            *s = Some(session);
        }
    }
}

impl Session {
    /// The session of a server's ConnectResponse `reply`, if it established one.
    fn from_reply(server: &str, reply: &[u8]) -> Option<Session> {
        let (timeout_ms, id, password) = parse_connect_response(reply)?;
        Some(Session {
            server: server.to_owned(),
            timeout_ms,
            id,
            password,
        })
    }

    /// How long a close waits for the server to hang up: two session timeouts.
    fn close_limit(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.timeout_ms).unwrap_or(0) * 2)
    }
}

/// The servers (`host:port`) of a connect string (`host:port,…[/chroot]`), and its
/// chroot (empty without one).
fn servers_of(connect: &str) -> (Vec<&str>, &str) {
    let (hosts, chroot) = match connect.find('/') {
        Some(i) => connect.split_at(i),
        None => (connect, ""),
    };
    let servers = hosts.split(',').map(str::trim).filter(|h| !h.is_empty());
    (servers.collect(), chroot)
}

/// The connect string the library is given: our `listeners`, and the `chroot`.
fn relayed_connect(listeners: &[String], chroot: &str) -> String {
    format!("{}{chroot}", listeners.join(","))
}

/// Loopback listeners relaying to the servers of one connect string (see the module doc).
pub struct Relay {
    /// The connect string to give the library: our listeners, and the chroot.
    pub connect: String,
    shared: Arc<Shared>,
    accepts: Vec<JoinHandle<()>>,
}

impl Relay {
    /// Listens on a loopback port for each server of `connect` (`host:port,…[/chroot]`).
    pub async fn open(connect: &str) -> io::Result<Relay> {
        let (servers, chroot) = servers_of(connect);
        let shared = Arc::new(Shared::new());
        let mut listeners = Vec::new();
        let mut accepts = Vec::new();
        for server in servers {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            listeners.push(listener.local_addr()?.to_string());
            let accept = accept_loop(listener, server.to_owned(), shared.clone());
            accepts.push(tokio::spawn(accept));
        }
        Ok(Relay {
            connect: relayed_connect(&listeners, chroot),
            shared,
            accepts,
        })
    }

    /// Ends the session's transport after the library's own close of the session. When
    /// the server answered that close (`answered`), the session is gone there, and no
    /// second close goes out (a fresh connection and a ConnectRequest for a dead
    /// session, reaching the server as the successor claims); otherwise as
    /// [`Relay::close`].
    pub fn close_after(&self, answered: bool) {
        if answered {
            if let Ok(mut s) = self.shared.session.lock() {
                *s = None;
            }
        }
        self.close();
    }

    /// Ends the session's transport (see the module doc). Idempotent; never waits.
    pub fn close(&self) {
        if self.shared.closed.send_replace(true) {
            return;
        }
        for accept in &self.accepts {
            accept.abort();
        }
        let session = self.shared.session.lock().ok().and_then(|s| s.clone());
        // Dropped outside a runtime (the process is ending): the session expires instead.
        if let (Some(session), Ok(runtime)) = (session, tokio::runtime::Handle::try_current()) {
            runtime.spawn(close_session(session));
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.close();
    }
}

async fn accept_loop(listener: TcpListener, server: String, shared: Arc<Shared>) {
    loop {
        let Ok((client, library)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if let Ok(relay_end) = client.local_addr() {
            nodelay_on_library_end(library, relay_end);
        }
        let mut closed = shared.closed.subscribe();
        if *closed.borrow() {
            return;
        }
        let (server, shared) = (server.clone(), shared.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = closed.wait_for(|c| *c) => {}
                _ = relay(client, &server, &shared) => {}
            }
        });
    }
}

/// One connection, both ways, noting the session from the server's first frame.
async fn relay(client: TcpStream, server: &str, shared: &Shared) -> io::Result<()> {
    let upstream = TcpStream::connect(server).await?;
    let _ = upstream.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (mut client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = upstream.into_split();
    let requests = async {
        tokio::io::copy(&mut client_r, &mut server_w).await?;
        server_w.shutdown().await
    };
    let replies = async {
        let first = read_frame(&mut server_r).await?;
        shared.note_session(server, &first);
        client_w.write_all(&frame(&first)).await?;
        tokio::io::copy(&mut server_r, &mut client_w).await?;
        client_w.shutdown().await
    };
    tokio::try_join!(requests, replies).map(|_| ())
}

/// Sets `TCP_NODELAY` on the client library's end of a relayed connection: the socket
/// of this process connected from `library` to `relay_end` (found among our open file
/// descriptors by both addresses). zookeeper-client leaves Nagle's algorithm on, so a
/// request written while another is unanswered waited for that answer's ACK: the
/// requests we send together (the claim's reads and proof, the release's unwatch and
/// delete) went out one round trip apart. A descriptor reused meanwhile matches
/// neither address and is left alone.
fn nodelay_on_library_end(library: SocketAddr, relay_end: SocketAddr) {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for fd in fds.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        if socket_addr(fd, libc::getsockname) == Some(library)
            && socket_addr(fd, libc::getpeername) == Some(relay_end)
        {
            let on: libc::c_int = 1;
            // SAFETY: a plain setsockopt on a descriptor of this process with a valid
            // pointer to an int of the size given.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    std::ptr::addr_of!(on).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
            return;
        }
    }
}

type NameFn =
    unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// The IPv4 address `name` (getsockname or getpeername) gives for `fd`, if it is one.
fn socket_addr(fd: i32, name: NameFn) -> Option<SocketAddr> {
    // SAFETY: sockaddr_in is plain data; the length passed is its size, and the call
    // writes at most that much.
    let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let got = unsafe { name(fd, std::ptr::addr_of_mut!(sin).cast(), &mut len) };
    if got != 0 || i32::from(sin.sin_family) != libc::AF_INET {
        return None;
    }
    let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
    Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
}

/// Reads one length-prefixed frame's payload.
async fn read_frame(from: &mut (impl AsyncReadExt + Unpin)) -> io::Result<Vec<u8>> {
    let len = from.read_i32().await?;
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l <= 1 << 20)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad frame length"))?;
    let mut payload = vec![0; len];
    from.read_exact(&mut payload).await?;
    Ok(payload)
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&(payload.len() as i32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A ConnectResponse: protocolVersion, timeOut, sessionId, passwd (and readOnly).
/// Returns (timeOut, sessionId, passwd) of an established session (id ≠ 0).
fn parse_connect_response(payload: &[u8]) -> Option<(i32, i64, Vec<u8>)> {
    let int = |at: usize| {
        Some(i32::from_be_bytes(
            payload.get(at..at + 4)?.try_into().ok()?,
        ))
    };
    let long = |at: usize| {
        Some(i64::from_be_bytes(
            payload.get(at..at + 8)?.try_into().ok()?,
        ))
    };
    let timeout = int(4)?;
    let id = long(8)?;
    let len = usize::try_from(int(16)?).ok()?;
    let password = payload.get(20..20 + len)?.to_vec();
    (id != 0).then_some((timeout, id, password))
}

/// A ConnectRequest for `session` followed by a CloseSession, in one write.
fn close_request(session: &Session) -> Vec<u8> {
    let mut connect = Vec::new();
    connect.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
    connect.extend_from_slice(&0i64.to_be_bytes()); // lastZxidSeen: never ahead of the server
    connect.extend_from_slice(&session.timeout_ms.to_be_bytes());
    connect.extend_from_slice(&session.id.to_be_bytes());
    connect.extend_from_slice(&(session.password.len() as i32).to_be_bytes());
    connect.extend_from_slice(&session.password);
    connect.push(0); // readOnly: false
    let mut close = Vec::new();
    close.extend_from_slice(&1i32.to_be_bytes()); // xid
    close.extend_from_slice(&CLOSE_SESSION.to_be_bytes());
    let mut out = frame(&connect);
    out.extend_from_slice(&frame(&close));
    out
}

/// ZooKeeper's opcode for closeSession.
const CLOSE_SESSION: i32 = -11;

/// Sends [`close_request`] on a fresh connection and waits (at most two session
/// timeouts) for the server to hang up; errors only mean the session will expire by
/// itself instead.
async fn close_session(session: Session) {
    let attempt = async {
        let mut conn = TcpStream::connect(&session.server).await?;
        let _ = conn.set_nodelay(true);
        conn.write_all(&close_request(&session)).await?;
        let mut sink = Vec::new();
        conn.read_to_end(&mut sink).await?;
        Ok::<_, io::Error>(())
    };
    let outcome = tokio::time::timeout(session.close_limit(), attempt).await;
    log_close(session.id, outcome.ok());
}

/// Logs how a close of the session `id` ended (`None`: timed out).
fn log_close(id: i64, outcome: Option<io::Result<()>>) {
    match outcome {
        Some(Ok(())) => tracing::debug!(session = id, "zookeeper session closed"),
        Some(Err(e)) => tracing::debug!(error = %e, "closing the zookeeper session failed"),
        None => tracing::debug!("closing the zookeeper session timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_end_of_a_relayed_connection_gets_nodelay() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let library =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (accepted, from) = listener.accept().expect("accept");
        let other =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        assert!(!library.nodelay().expect("nodelay"), "off by default");
        nodelay_on_library_end(from, accepted.local_addr().expect("addr"));
        assert!(library.nodelay().expect("nodelay"));
        assert!(!other.nodelay().expect("nodelay"), "only that connection");
    }

    /// A ConnectResponse: protocol 0, timeout 3000 ms, `session`, `password`.
    fn connect_response(session: i64, password: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&0i32.to_be_bytes());
        p.extend_from_slice(&3000i32.to_be_bytes());
        p.extend_from_slice(&session.to_be_bytes());
        p.extend_from_slice(&(password.len() as i32).to_be_bytes());
        p.extend_from_slice(password);
        p
    }

    #[test]
    fn a_connect_response_gives_the_session() {
        let mut p = connect_response(0x1234_5678_9abc, b"pwd");
        p.push(0);
        assert_eq!(
            parse_connect_response(&p),
            Some((3000, 0x1234_5678_9abc, b"pwd".to_vec()))
        );
        let session = Session::from_reply("zk:2181", &p).expect("a session");
        assert_eq!(session.server, "zk:2181");
        assert_eq!(session.close_limit(), Duration::from_secs(6));
        // A refused session (id 0) or a short frame gives none.
        let mut refused = p.clone();
        refused[8..16].copy_from_slice(&0i64.to_be_bytes());
        assert_eq!(parse_connect_response(&refused), None);
        assert_eq!(parse_connect_response(&p[..18]), None);
    }

    /// A relay for the "server" `server` whose session the server's ConnectResponse
    /// gave; closed after the library's close was answered or not; whether a
    /// connection with the relay's own close then reaches the server.
    async fn second_close(answered: bool) -> bool {
        let server = TcpListener::bind("127.0.0.1:0").await.expect("listen");
        let at = server.local_addr().expect("addr").to_string();
        let relay = Relay::open(&at).await.expect("relay");
        relay.shared.note_session(&at, &connect_response(7, b"pw"));
        relay.close_after(answered);
        let accepted = tokio::time::timeout(Duration::from_millis(300), server.accept()).await;
        let Ok(Ok((mut conn, _))) = accepted else {
            return false;
        };
        let mut close = vec![0; 47];
        conn.read_exact(&mut close).await.expect("the close");
        assert_eq!(&close[43..47], &CLOSE_SESSION.to_be_bytes());
        true
    }

    #[tokio::test]
    async fn a_close_the_server_answered_is_not_sent_again() {
        assert!(!second_close(true).await, "a second close went out");
        assert!(
            second_close(false).await,
            "an unanswered close is sent by the relay"
        );
    }

    #[test]
    fn a_connect_string_gives_its_servers_and_chroot() {
        assert_eq!(
            servers_of("a:1, b:2,,c:3/app/x"),
            (vec!["a:1", "b:2", "c:3"], "/app/x")
        );
        assert_eq!(servers_of("a:1"), (vec!["a:1"], ""));
        let listeners = ["127.0.0.1:5".to_owned(), "127.0.0.1:6".to_owned()];
        assert_eq!(
            relayed_connect(&listeners, "/app"),
            "127.0.0.1:5,127.0.0.1:6/app"
        );
    }

    #[test]
    fn the_close_is_a_connect_then_a_close_session() {
        let s = Session {
            server: "x:1".into(),
            timeout_ms: 3000,
            id: 7,
            password: b"pw".to_vec(),
        };
        let out = close_request(&s);
        // connect: 4 + 8 + 4 + 8 + 4 + 2 + 1 = 31 bytes, then the close header (8).
        assert_eq!(&out[..4], &31i32.to_be_bytes());
        assert_eq!(&out[4 + 16..4 + 24], &7i64.to_be_bytes());
        assert_eq!(&out[35..39], &8i32.to_be_bytes());
        assert_eq!(&out[43..47], &CLOSE_SESSION.to_be_bytes());
        assert_eq!(out.len(), 47);
    }
}
