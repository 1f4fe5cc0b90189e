//! The ZooKeeper flags, read and checked into [`ZkSettings`].

use std::path::PathBuf;

use crate::settings::{
    bad, cert_and_key, files_elsewhere, optional_pem, pem_text, read_secret_file, ConfigError,
};

/// The ZooKeeper flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "ZooKeeper backend")]
pub struct Args {
    /// ZooKeeper connect string: host:port,host:port[/chroot].
    #[arg(long, value_name = "HOSTS", env = "LEASEKEEPER_ZK_CONNECT")]
    pub zk_connect: Option<String>,
    /// ZooKeeper path under which elections live [default: /leasekeeper].
    #[arg(long, value_name = "PATH", env = "LEASEKEEPER_ZK_ROOT")]
    pub zk_root: Option<String>,
    /// File holding `user:password` for ZooKeeper digest auth.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_ZK_AUTH_FILE")]
    pub zk_auth_file: Option<PathBuf>,
    /// PEM CA bundle of the ZooKeeper servers; turns TLS on.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_ZK_CA_FILE")]
    pub zk_ca_file: Option<PathBuf>,
    /// PEM client certificate for ZooKeeper mutual TLS (with --zk-key-file).
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_ZK_CERT_FILE")]
    pub zk_cert_file: Option<PathBuf>,
    /// PEM private key of the ZooKeeper client certificate.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_ZK_KEY_FILE")]
    pub zk_key_file: Option<PathBuf>,
}

/// How to reach ZooKeeper.
#[derive(Clone)]
pub struct ZkSettings {
    pub connect: String,
    pub root: String,
    pub digest: Option<(String, String)>,
    /// TLS to the servers' secureClientPort, when a CA was given.
    pub tls: Option<ZkTls>,
}

/// PEM text of the CA and, for mutual TLS, the client certificate and key.
#[derive(Clone)]
pub struct ZkTls {
    pub ca_pem: String,
    pub identity: Option<(String, String)>,
}

impl std::fmt::Debug for ZkSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkSettings")
            .field("connect", &self.connect)
            .field("root", &self.root)
            .field("user", &self.digest.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Args {
    pub fn settings(&self) -> Result<ZkSettings, ConfigError> {
        Ok(ZkSettings {
            connect: self.connect()?,
            root: self.root()?,
            digest: self.digest()?,
            tls: self.tls()?,
        })
    }

    fn connect(&self) -> Result<String, ConfigError> {
        let raw = self.zk_connect.as_deref().map(str::trim).unwrap_or("");
        if raw.is_empty() {
            return Err(bad(
                "--zk-connect is required with --backend zookeeper; write it like 127.0.0.1:2181",
            ));
        }
        let (hosts, chroot) = match raw.find('/') {
            Some(i) => (&raw[..i], &raw[i..]),
            None => (raw, ""),
        };
        for host in hosts.split(',') {
            let ok = host
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0));
            if !ok {
                return Err(bad(format!(
                    "--zk-connect {raw:?}: {host:?} is not host:port; write it like zk1:2181,zk2:2181/chroot"
                )));
            }
        }
        if chroot.len() > 1 && chroot.ends_with('/') {
            return Err(bad(format!(
                "--zk-connect {raw:?}: the chroot must not end with '/'"
            )));
        }
        Ok(raw.to_owned())
    }

    fn root(&self) -> Result<String, ConfigError> {
        let root = self
            .zk_root
            .clone()
            .unwrap_or_else(|| "/leasekeeper".to_owned());
        if !root.starts_with('/') || root.len() < 2 || root.ends_with('/') || root.contains("//") {
            return Err(bad(format!(
                "--zk-root {root:?} must be an absolute path like /leasekeeper"
            )));
        }
        Ok(root)
    }

    fn digest(&self) -> Result<Option<(String, String)>, ConfigError> {
        let Some(p) = &self.zk_auth_file else {
            return Ok(None);
        };
        if files_elsewhere() {
            // In another container (the injector's check): read and judged at the start.
            return Ok(Some((String::new(), String::new())));
        }
        let secret = read_secret_file("--zk-auth-file", p)?;
        let (user, password) = secret.split_once(':').ok_or_else(|| {
            bad(format!(
                "--zk-auth-file {}: write user:password on one line",
                p.display()
            ))
        })?;
        Ok(Some((user.to_owned(), password.to_owned())))
    }

    /// Reads and checks the TLS material: TLS is on when a CA is given.
    fn tls(&self) -> Result<Option<ZkTls>, ConfigError> {
        let identity = cert_and_key(
            "--zk",
            self.zk_cert_file.as_deref(),
            self.zk_key_file.as_deref(),
            pem_text,
        )?;
        let Some(ca_pem) = optional_pem("--zk-ca-file", self.zk_ca_file.as_deref(), pem_text)?
        else {
            if identity.is_some() {
                return Err(bad(
                    "--zk-cert-file was given without --zk-ca-file; TLS to ZooKeeper needs the CA that signs the servers",
                ));
            }
            return Ok(None);
        };
        if files_elsewhere() {
            return Ok(Some(ZkTls { ca_pem, identity }));
        }
        // Let the client library judge the PEM now, so bad material is bad input, not a retry loop.
        let ca_path = self
            .zk_ca_file
            .as_deref()
            .unwrap_or(std::path::Path::new(""));
        let mut options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&ca_pem)
            .map_err(|e| bad(format!("--zk-ca-file {}: {e}", ca_path.display())))?;
        if let Some((cert, key)) = &identity {
            options = options.with_pem_identity(cert, key).map_err(|e| {
                bad(format!(
                    "--zk-cert-file/--zk-key-file do not make a client identity: {e}"
                ))
            })?;
        }
        drop(options);
        Ok(Some(ZkTls { ca_pem, identity }))
    }
}
