//! The etcd flags, read and checked into [`EtcdSettings`].

use std::path::PathBuf;

use crate::settings::{bad, cert_and_key, optional_pem, read_pem, read_secret_file, ConfigError};

/// The etcd flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "etcd backend")]
pub struct Args {
    /// etcd endpoints, comma-separated: http(s)://host:port.
    #[arg(
        long,
        value_name = "URL",
        env = "LEASEKEEPER_ETCD_ENDPOINTS",
        value_delimiter = ','
    )]
    pub etcd_endpoints: Vec<String>,
    /// PEM CA bundle for https:// etcd endpoints.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_ETCD_CA_FILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// PEM client certificate for etcd (with --etcd-key-file).
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_ETCD_CERT_FILE")]
    pub etcd_cert_file: Option<PathBuf>,
    /// PEM private key of the etcd client certificate.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_ETCD_KEY_FILE")]
    pub etcd_key_file: Option<PathBuf>,
    /// etcd user (password from --etcd-password-file).
    #[arg(long, value_name = "USER", env = "LEASEKEEPER_ETCD_USER")]
    pub etcd_user: Option<String>,
    /// File holding the etcd user's password.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_ETCD_PASSWORD_FILE")]
    pub etcd_password_file: Option<PathBuf>,
}

/// How to reach etcd: endpoints, TLS material and credentials, all read already.
#[derive(Clone)]
pub struct EtcdSettings {
    pub endpoints: Vec<String>,
    pub ca_pem: Option<Vec<u8>>,
    pub client_pem: Option<(Vec<u8>, Vec<u8>)>,
    pub user: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdSettings {
    // Never print the password or the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.ca_pem.is_some())
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl Args {
    pub fn settings(&self) -> Result<EtcdSettings, ConfigError> {
        let endpoints = self
            .etcd_endpoints
            .iter()
            .filter(|e| !e.trim().is_empty())
            .map(|e| endpoint(e))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(bad(
                "--etcd-endpoints is required with --backend etcd; write it like http://127.0.0.1:2379",
            ));
        }
        let https = endpoints
            .iter()
            .filter(|e| e.starts_with("https://"))
            .count();
        if https != 0 && https != endpoints.len() {
            return Err(bad(
                "--etcd-endpoints mixes http:// and https://; use one scheme",
            ));
        }
        let ca_pem = optional_pem("--etcd-ca-file", self.etcd_ca_file.as_deref(), read_pem)?;
        let client_pem = cert_and_key(
            "--etcd",
            self.etcd_cert_file.as_deref(),
            self.etcd_key_file.as_deref(),
            read_pem,
        )?;
        if https > 0 && ca_pem.is_none() {
            return Err(bad(
                "--etcd-endpoints are https://, so --etcd-ca-file must name the CA that signs them",
            ));
        }
        if https == 0 && (ca_pem.is_some() || client_pem.is_some()) {
            return Err(bad(
                "--etcd-ca-file/--etcd-cert-file were given, but the endpoints are http://",
            ));
        }
        Ok(EtcdSettings {
            endpoints,
            ca_pem,
            client_pem,
            user: self.user()?,
        })
    }

    fn user(&self) -> Result<Option<(String, String)>, ConfigError> {
        match (&self.etcd_user, &self.etcd_password_file) {
            (Some(u), Some(p)) => Ok(Some((
                u.clone(),
                read_secret_file("--etcd-password-file", p)?,
            ))),
            (None, None) => Ok(None),
            (Some(_), None) => Err(bad("--etcd-user needs --etcd-password-file")),
            (None, Some(_)) => Err(bad("--etcd-password-file needs --etcd-user")),
        }
    }
}

/// Checks one etcd endpoint: `http(s)://host:port`.
fn endpoint(raw: &str) -> Result<String, ConfigError> {
    let e = raw.trim();
    let rest = e
        .strip_prefix("http://")
        .or_else(|| e.strip_prefix("https://"))
        .ok_or_else(|| {
            bad(format!(
                "--etcd-endpoints {e:?} must start with http:// or https://, like http://127.0.0.1:2379"
            ))
        })?;
    let rest = rest.trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| {
        bad(format!(
            "--etcd-endpoints {e:?} needs a port, like http://127.0.0.1:2379"
        ))
    })?;
    if host.is_empty() || host.contains('/') || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad(format!(
            "--etcd-endpoints {e:?} is not host:port, like http://127.0.0.1:2379"
        )));
    }
    Ok(e.trim_end_matches('/').to_owned())
}
