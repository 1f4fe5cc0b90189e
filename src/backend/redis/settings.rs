//! The Redis flags (shared by the `redis` backend and `redlock`), read and checked
//! into one [`RedisSettings`] per server.

use std::path::PathBuf;

use crate::settings::{
    bad, cert_and_key, optional_pem, read_pem, read_secret_file, redact, ConfigError,
};

/// The Redis flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Redis and Redlock backends")]
pub struct Args {
    /// redis://[user@]host:port[/db] or rediss:// (TLS); repeat or comma-separate for redlock.
    #[arg(
        long,
        value_name = "URL",
        env = "LEASEKEEPER_REDIS_URL",
        value_delimiter = ','
    )]
    pub redis_url: Vec<String>,
    /// File holding the Redis password.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,
    /// PEM CA bundle of the Redis servers [default: system roots].
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --redis-key-file).
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_REDIS_CERT_FILE")]
    pub redis_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_REDIS_KEY_FILE")]
    pub redis_key_file: Option<PathBuf>,
}

/// How to reach one Redis server (the connection info may carry a password).
#[derive(Clone)]
pub struct RedisSettings {
    pub url: String,
    pub info: redis::ConnectionInfo,
}

impl std::fmt::Debug for RedisSettings {
    // The connection info may carry a password: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact(&self.url))
            .finish()
    }
}

impl RedisSettings {
    /// Whether two settings name the same server and database.
    pub fn same_server(&self, other: &RedisSettings) -> bool {
        self.info.addr().to_string() == other.info.addr().to_string()
            && self.info.redis_settings().db() == other.info.redis_settings().db()
    }
}

impl Args {
    /// The URLs given, without empty entries.
    pub fn urls(&self) -> Vec<&str> {
        self.redis_url
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The `redis` backend: exactly one server.
    pub fn single(&self) -> Result<RedisSettings, ConfigError> {
        match self.urls().as_slice() {
            [] => Err(bad("--redis-url is required with --backend redis; write it like redis://127.0.0.1:6379")),
            [one] => self.node(one),
            many => Err(bad(format!(
                "--redis-url: the redis backend takes one server, got {}; a quorum of several is the redlock backend",
                many.len()
            ))),
        }
    }

    /// One server's settings: its URL checked, its password and TLS material read.
    pub fn node(&self, url: &str) -> Result<RedisSettings, ConfigError> {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(bad(format!(
                "--redis-url {:?} must start with redis:// or rediss://",
                redact(url)
            )));
        }
        let mut info: redis::ConnectionInfo = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| {
                bad(format!(
                    "--redis-url {:?} is not a Redis URL: {e}",
                    redact(url)
                ))
            })?;
        if info.redis_settings().password().is_some() {
            return Err(bad(format!(
                "--redis-url {:?} carries a password; put it in --redis-password-file instead (a URL shows in the process list)",
                redact(url)
            )));
        }
        if let Some(path) = &self.redis_password_file {
            let password = read_secret_file("--redis-password-file", path)?;
            let redis_info = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(redis_info);
        }
        let certs = self.tls(url)?;
        // Files in another container (the injector's check) have no contents to judge.
        if let Some(certs) = certs.filter(|_| !crate::settings::files_elsewhere()) {
            let client = redis::Client::build_with_tls(info, certs).map_err(|e| {
                bad(format!(
                    "--redis-ca-file/--redis-cert-file/--redis-key-file: {e}"
                ))
            })?;
            info = client.get_connection_info().clone();
        }
        Ok(RedisSettings {
            url: redact(url),
            info,
        })
    }

    /// The TLS material of `--redis-*-file`, if any was given.
    fn tls(&self, url: &str) -> Result<Option<redis::TlsCertificates>, ConfigError> {
        let (ca, cert, key) = (
            self.redis_ca_file.as_deref(),
            self.redis_cert_file.as_deref(),
            self.redis_key_file.as_deref(),
        );
        if ca.is_none() && cert.is_none() && key.is_none() {
            return Ok(None);
        }
        if !url.starts_with("rediss://") {
            return Err(bad(format!(
                "--redis-url {:?}: TLS files were given, but the URL is not rediss://",
                redact(url)
            )));
        }
        let root_cert = optional_pem("--redis-ca-file", ca, read_pem)?;
        let client_tls =
            cert_and_key("--redis", cert, key, read_pem)?.map(|(client_cert, client_key)| {
                redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }
            });
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}
