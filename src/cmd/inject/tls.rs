//! The webhook's serving certificate, swapped when its files change: every handshake
//! asks [`Serving`] for the current one, and [`keep_reloading`] reads the files every
//! few seconds. A pair that does not parse or does not match (the kubelet writes a
//! Secret's keys one after the other only through a symlink swap, but a hand-edited
//! file can be caught half way) is logged and skipped: the last good one stays.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::inject::metrics::InjectorMetrics;
use crate::settings::{bad, ConfigError};

/// How often the files are looked at.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);
/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate every new handshake presents.
#[derive(Debug)]
pub struct Serving {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' bytes as last read (a change is a difference from them).
    last: Mutex<(Vec<u8>, Vec<u8>)>,
}

/// What one look at the files found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Reloaded,
    /// Changed, but not a usable pair; the message says why.
    Refused(String),
}

impl Serving {
    /// Reads and checks the pair (`--tls-cert-file`, `--tls-key-file`).
    pub fn read(
        cert_file: &Path,
        key_file: &Path,
    ) -> Result<(Vec<u8>, Vec<u8>, CertifiedKey), ConfigError> {
        let read = |setting: &str, p: &Path| {
            std::fs::read(p)
                .map_err(|e| bad(format!("{setting} {}: cannot read it: {e}", p.display())))
        };
        let (cert, key) = (
            read("--tls-cert-file", cert_file)?,
            read("--tls-key-file", key_file)?,
        );
        let certified = certified_key(&cert, &key).map_err(|e| {
            bad(format!(
                "--tls-cert-file {} / --tls-key-file {}: {e}",
                cert_file.display(),
                key_file.display()
            ))
        })?;
        Ok((cert, key, certified))
    }

    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Serving, ConfigError> {
        let (cert, key, certified) = Serving::read(cert_file, key_file)?;
        Ok(Serving {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            current: RwLock::new(Arc::new(certified)),
            last: Mutex::new((cert, key)),
        })
    }

    /// Reads the files; takes the pair when it changed and is usable.
    pub fn reload_if_changed(&self) -> Reload {
        let (Ok(cert), Ok(key)) = (
            std::fs::read(&self.cert_file),
            std::fs::read(&self.key_file),
        ) else {
            return Reload::Refused("cannot read the files".to_owned());
        };
        let Ok(mut last) = self.last.lock() else {
            return Reload::Unchanged;
        };
        if last.0 == cert && last.1 == key {
            return Reload::Unchanged;
        }
        match certified_key(&cert, &key) {
            Ok(certified) => {
                if let Ok(mut current) = self.current.write() {
                    *current = Arc::new(certified);
                }
                *last = (cert, key);
                Reload::Reloaded
            }
            Err(why) => Reload::Refused(why),
        }
    }

    /// The rustls configuration that asks this for each handshake's certificate.
    pub fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for Serving {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.clone())
    }
}

/// A certificate chain and its key, both PEM, checked to belong together.
fn certified_key(cert: &[u8], key: &[u8]) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate is not PEM: {e}"))?;
    if chain.is_empty() {
        return Err("the certificate file holds no certificate".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("the key is not a PEM private key: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("the key is not usable: {e}"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| format!("the key does not belong to the certificate: {e}"))?;
    Ok(certified)
}

/// Looks at the files every [`RELOAD_EVERY`], for as long as the injector runs.
pub async fn keep_reloading(serving: Arc<Serving>, metrics: Arc<InjectorMetrics>) {
    let mut refused_last: Option<String> = None;
    loop {
        tokio::time::sleep(RELOAD_EVERY).await;
        match serving.reload_if_changed() {
            Reload::Unchanged => {}
            Reload::Reloaded => {
                refused_last = None;
                metrics.cert_reloaded(true);
                tracing::info!(cert = %serving.cert_file.display(), "serving certificate reloaded");
            }
            Reload::Refused(why) => {
                // Once per distinct reason: a pair caught half way is retried quietly.
                if refused_last.as_ref() != Some(&why) {
                    metrics.cert_reloaded(false);
                    tracing::warn!(cert = %serving.cert_file.display(), "serving certificate not reloaded, the last one stays: {why}");
                    refused_last = Some(why);
                }
            }
        }
    }
}

/// An axum listener that hands out connections once their TLS handshake is done;
/// each handshake runs on its own task, so a slow client holds up no other.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, std::net::SocketAddr)>,
    addr: std::net::SocketAddr,
}

impl TlsListener {
    pub fn new(
        listener: TcpListener,
        config: rustls::ServerConfig,
    ) -> std::io::Result<TlsListener> {
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake: {e}"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task ends only with the runtime.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
