//! The fake's HTTPS port, as a real API server serves it: TLS 1.3 from a Go server.
//!
//! What matters for latency is what the server sends after the client's last
//! handshake flight. Go's `crypto/tls` sends its TLS 1.3 session tickets in its *first*
//! flight, together with its Finished, whenever it does not wait for a client
//! certificate (a client that authenticates with a bearer token, as a sidecar in a Pod
//! does), so nothing follows the client's Finished: the server's kernel delays the ACK
//! of that flight (40 ms on Linux). A client that leaves Nagle's algorithm on
//! (kube-rs's connector does) holds its first request back until that ACK arrives, so
//! the first request on every new connection waits ~40 ms. rustls sends its tickets
//! *after* the client's Finished, which would hide this; the fake sends none, so that
//! nothing follows the client's Finished here either. Like Go's net package, it sets
//! `TCP_NODELAY` on every connection it accepts.
//!
//! Handshakes run on tasks of their own, so a slow client (a fault proxy) does not
//! hold up the others.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::store::Shared;

/// A CA and a server certificate for 127.0.0.1, made once per test process.
struct Certs {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn certs() -> &'static Certs {
    static CERTS: OnceLock<Certs> = OnceLock::new();
    CERTS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("cert dir");
        crate::common::make_certs(dir.path());
        Certs {
            path: dir.path().to_owned(),
            _dir: dir,
        }
    })
}

/// The CA file a kubeconfig names to trust the fake.
pub(super) fn ca_file() -> PathBuf {
    certs().path.join("ca.pem")
}

fn server_config(dir: &Path) -> rustls::ServerConfig {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .expect("server.pem")
        .collect::<Result<_, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("server.key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server certificate");
    // Go sends its tickets before the client's Finished; nothing comes after it.
    config.send_tls13_tickets = 0;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// An axum listener that hands out connections once their TLS handshake is done.
pub(super) struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, std::net::SocketAddr)>,
    addr: std::net::SocketAddr,
}

impl TlsListener {
    /// Counts each connection accepted in `shared`.
    pub(super) fn new(listener: TcpListener, shared: Arc<Shared>) -> TlsListener {
        let addr = listener.local_addr().expect("addr");
        let acceptor = TlsAcceptor::from(Arc::new(server_config(&certs().path)));
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let Ok((tcp, peer)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        shared
                            .tls_connections
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let _ = tx.send((tls, peer)).await;
                    }
                });
            }
        });
        TlsListener { ready, addr }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop is gone only when the runtime stops.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
