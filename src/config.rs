//! Flags, `LEASEKEEPER_*` environment and the `--config` YAML file, turned into
//! validated, typed [`Settings`] before anything starts.
//!
//! Precedence: flags over environment over file. Every value is parsed here; a bad
//! one becomes a [`ConfigError`] whose message is one line that names the setting.
//! Nothing past this module ever sees a raw string.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

/// What went wrong with the configuration; each message names the setting.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

pub(crate) fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// Command line. Every value is optional here so that the file can fill gaps and
/// so that the messages for bad values are ours, one line each.
#[derive(Parser, Debug, Default)]
#[command(
    name = "leasekeeper",
    version,
    about = "Leader-election sidecar: holds a named lease, steps down the moment it cannot prove it holds it, and tells everyone who leads."
)]
pub struct Cli {
    /// Backend: kubernetes, etcd, redis, redlock, zookeeper, postgres, mysql or file [default: kubernetes in a Pod, else file].
    #[arg(long, env = "LEASEKEEPER_BACKEND")]
    pub backend: Option<String>,
    /// Name of the lease (lowercase letters, digits, '-' and '.').
    #[arg(long, env = "LEASEKEEPER_ELECTION")]
    pub election: Option<String>,
    /// This candidate's unique name [default: $POD_NAME, else <hostname>-<pid>].
    #[arg(long, env = "LEASEKEEPER_IDENTITY")]
    pub identity: Option<String>,
    /// Status and metrics listener [default: 0.0.0.0:4040].
    #[arg(long, env = "LEASEKEEPER_HTTP_ADDR")]
    pub http_addr: Option<String>,
    /// Lease time to live, like 15s or 1500ms [default: 15s].
    #[arg(long, env = "LEASEKEEPER_TTL", allow_hyphen_values = true)]
    pub ttl: Option<String>,
    /// How often the leader renews [default: ttl/3].
    #[arg(long, env = "LEASEKEEPER_RENEW_INTERVAL", allow_hyphen_values = true)]
    pub renew_interval: Option<String>,
    /// Fallback re-check period for followers [default: ttl/3].
    #[arg(long, env = "LEASEKEEPER_RETRY_INTERVAL", allow_hyphen_values = true)]
    pub retry_interval: Option<String>,
    /// Timeout of every single backend call [default: ttl/5, at most 5s].
    #[arg(long, env = "LEASEKEEPER_BACKEND_TIMEOUT", allow_hyphen_values = true)]
    pub backend_timeout: Option<String>,
    /// Clock drift allowed for, as a fraction of the ttl [default: 0.01].
    #[arg(long, env = "LEASEKEEPER_CLOCK_DRIFT", allow_hyphen_values = true)]
    pub clock_drift: Option<String>,
    /// Safety margin taken off every local deadline [default: ttl/100, at least 10ms].
    #[arg(long, env = "LEASEKEEPER_SAFETY_MARGIN", allow_hyphen_values = true)]
    pub safety_margin: Option<String>,
    /// redis://[user@]host:port[/db] or rediss:// (TLS); repeat or comma-separate for redlock.
    #[arg(long, env = "LEASEKEEPER_REDIS_URL", value_delimiter = ',')]
    pub redis_url: Vec<String>,
    /// File holding the Redis password (the user may be given in the URL).
    #[arg(long, env = "LEASEKEEPER_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,
    /// PEM CA bundle that signs the Redis servers' certificates (rediss://) [default: system roots].
    #[arg(long, env = "LEASEKEEPER_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --redis-key-file).
    #[arg(long, env = "LEASEKEEPER_REDIS_CERT_FILE")]
    pub redis_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long, env = "LEASEKEEPER_REDIS_KEY_FILE")]
    pub redis_key_file: Option<PathBuf>,
    /// etcd endpoints, comma-separated: http(s)://host:port.
    #[arg(long, env = "LEASEKEEPER_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// PEM CA bundle for https:// etcd endpoints.
    #[arg(long, env = "LEASEKEEPER_ETCD_CA_FILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// PEM client certificate for etcd (with --etcd-key-file).
    #[arg(long, env = "LEASEKEEPER_ETCD_CERT_FILE")]
    pub etcd_cert_file: Option<PathBuf>,
    /// PEM private key of the etcd client certificate.
    #[arg(long, env = "LEASEKEEPER_ETCD_KEY_FILE")]
    pub etcd_key_file: Option<PathBuf>,
    /// etcd user (password from --etcd-password-file).
    #[arg(long, env = "LEASEKEEPER_ETCD_USER")]
    pub etcd_user: Option<String>,
    /// File holding the etcd user's password.
    #[arg(long, env = "LEASEKEEPER_ETCD_PASSWORD_FILE")]
    pub etcd_password_file: Option<PathBuf>,
    /// ZooKeeper connect string: host:port,host:port[/chroot].
    #[arg(long, env = "LEASEKEEPER_ZK_CONNECT")]
    pub zk_connect: Option<String>,
    /// ZooKeeper path under which elections live [default: /leasekeeper].
    #[arg(long, env = "LEASEKEEPER_ZK_ROOT")]
    pub zk_root: Option<String>,
    /// File holding `user:password` for ZooKeeper digest auth.
    #[arg(long, env = "LEASEKEEPER_ZK_AUTH_FILE")]
    pub zk_auth_file: Option<PathBuf>,
    /// PEM CA bundle that signs the ZooKeeper servers' certificates; turns TLS on (secureClientPort).
    #[arg(long, env = "LEASEKEEPER_ZK_CA_FILE")]
    pub zk_ca_file: Option<PathBuf>,
    /// PEM client certificate for ZooKeeper mutual TLS (with --zk-key-file).
    #[arg(long, env = "LEASEKEEPER_ZK_CERT_FILE")]
    pub zk_cert_file: Option<PathBuf>,
    /// PEM private key of the ZooKeeper client certificate.
    #[arg(long, env = "LEASEKEEPER_ZK_KEY_FILE")]
    pub zk_key_file: Option<PathBuf>,
    /// postgres://user@host:port/db (password from --sql-password-file).
    #[arg(long, env = "LEASEKEEPER_POSTGRES_URL")]
    pub postgres_url: Option<String>,
    /// mysql://user@host:port/db, for MySQL and MariaDB (password from --sql-password-file).
    #[arg(long, env = "LEASEKEEPER_MYSQL_URL")]
    pub mysql_url: Option<String>,
    /// Lease table of the SQL backends, table or schema.table; created if missing [default: leasekeeper_leases].
    #[arg(long, env = "LEASEKEEPER_SQL_TABLE")]
    pub sql_table: Option<String>,
    /// File holding the SQL user's password.
    #[arg(long, env = "LEASEKEEPER_SQL_PASSWORD_FILE")]
    pub sql_password_file: Option<PathBuf>,
    /// PEM CA bundle that signs the database server's certificate; turns on verified TLS.
    #[arg(long, env = "LEASEKEEPER_SQL_CA_FILE")]
    pub sql_ca_file: Option<PathBuf>,
    /// PEM client certificate for the database (with --sql-key-file).
    #[arg(long, env = "LEASEKEEPER_SQL_CERT_FILE")]
    pub sql_cert_file: Option<PathBuf>,
    /// PEM private key of the database client certificate.
    #[arg(long, env = "LEASEKEEPER_SQL_KEY_FILE")]
    pub sql_key_file: Option<PathBuf>,
    /// Lock file of the file backend [default: $XDG_RUNTIME_DIR or /tmp, leasekeeper-<election>.lock].
    #[arg(long, env = "LEASEKEEPER_FILE_PATH")]
    pub file_path: Option<PathBuf>,
    /// Namespace of the Lease and of the own Pod [default: $POD_NAMESPACE, else default].
    #[arg(long, env = "LEASEKEEPER_NAMESPACE")]
    pub namespace: Option<String>,
    /// kubeconfig file for the Kubernetes API out of a cluster [default: $KUBECONFIG, ~/.kube/config, else the Pod's service account].
    #[arg(long, env = "LEASEKEEPER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Keep the leader label on the own Pod [default: on in a Pod, off outside].
    #[arg(long, env = "LEASEKEEPER_POD_LABEL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub pod_label: Option<String>,
    /// Key of the leader label [default: leasekeeper.io/leader].
    #[arg(long, env = "LEASEKEEPER_POD_LABEL_KEY")]
    pub pod_label_key: Option<String>,
    /// Label value while this candidate leads [default: true].
    #[arg(long, env = "LEASEKEEPER_POD_LABEL_LEADER_VALUE")]
    pub pod_label_leader_value: Option<String>,
    /// Label value while it does not [default: false].
    #[arg(long, env = "LEASEKEEPER_POD_LABEL_FOLLOWER_VALUE")]
    pub pod_label_follower_value: Option<String>,
    /// Name of the own Pod, for the label [default: $POD_NAME].
    #[arg(long, env = "LEASEKEEPER_POD_NAME")]
    pub pod_name: Option<String>,
    /// Exit non-zero on losing leadership instead of campaigning again.
    #[arg(long, env = "LEASEKEEPER_EXIT_ON_LOSS", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub exit_on_loss: Option<String>,
    /// Allow POST /release from loopback.
    #[arg(long, env = "LEASEKEEPER_ENABLE_RELEASE_ENDPOINT", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub enable_release_endpoint: Option<String>,
    /// Shell command run on every change of role, leader or token (Status JSON on stdin).
    #[arg(long, env = "LEASEKEEPER_ON_CHANGE")]
    pub on_change: Option<String>,
    /// http:// URL POSTed the Status JSON on every change of role, leader or token.
    #[arg(long, env = "LEASEKEEPER_NOTIFY_URL")]
    pub notify_url: Option<String>,
    /// Longest run of an --on-change command, and of one --notify-url POST [default: 10s].
    #[arg(long, env = "LEASEKEEPER_HOOK_TIMEOUT", allow_hyphen_values = true)]
    pub hook_timeout: Option<String>,
    /// http:// URL POSTed before a graceful release; the lease is kept (and renewed) until it answers 2xx.
    #[arg(long, env = "LEASEKEEPER_DRAIN_URL")]
    pub drain_url: Option<String>,
    /// Longest wait for --drain-url, never past the claim's deadline [default: 30s].
    #[arg(long, env = "LEASEKEEPER_DRAIN_TIMEOUT", allow_hyphen_values = true)]
    pub drain_timeout: Option<String>,
    /// `run` only: longest time from SIGTERM to SIGKILL of the command; never past the claim's deadline [default: 10s].
    #[arg(long, env = "LEASEKEEPER_KILL_GRACE", allow_hyphen_values = true)]
    pub kill_grace: Option<String>,
    /// `run` only: campaign again when the command exits by itself, instead of exiting with its code.
    #[arg(long, env = "LEASEKEEPER_RESTART", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub restart: Option<String>,
    /// Log format: text or json [default: text].
    #[arg(long, env = "LEASEKEEPER_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Append every claim start, deadline and end as a JSON line (CLOCK_MONOTONIC ns) to this file.
    #[arg(long, env = "LEASEKEEPER_TRANSITION_LOG")]
    pub transition_log: Option<PathBuf>,
    /// YAML file with the same keys as the flags (flags and environment win).
    #[arg(long, env = "LEASEKEEPER_CONFIG")]
    pub config: Option<PathBuf>,
}

/// A YAML value that may be written as one string or a list of them.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// A scalar in the YAML file; numbers and booleans are accepted where strings are.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    fn into_string(self) -> String {
        match self {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Str(s) => s,
        }
    }
}

#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct FileConfig {
    backend: Option<Scalar>,
    election: Option<Scalar>,
    identity: Option<Scalar>,
    http_addr: Option<Scalar>,
    ttl: Option<Scalar>,
    renew_interval: Option<Scalar>,
    retry_interval: Option<Scalar>,
    backend_timeout: Option<Scalar>,
    clock_drift: Option<Scalar>,
    safety_margin: Option<Scalar>,
    redis_url: Option<OneOrMany>,
    redis_password_file: Option<PathBuf>,
    redis_ca_file: Option<PathBuf>,
    redis_cert_file: Option<PathBuf>,
    redis_key_file: Option<PathBuf>,
    file_path: Option<PathBuf>,
    zk_connect: Option<Scalar>,
    zk_root: Option<Scalar>,
    zk_auth_file: Option<PathBuf>,
    zk_ca_file: Option<PathBuf>,
    zk_cert_file: Option<PathBuf>,
    zk_key_file: Option<PathBuf>,
    etcd_endpoints: Option<OneOrMany>,
    etcd_ca_file: Option<PathBuf>,
    etcd_cert_file: Option<PathBuf>,
    etcd_key_file: Option<PathBuf>,
    etcd_user: Option<Scalar>,
    etcd_password_file: Option<PathBuf>,
    postgres_url: Option<Scalar>,
    mysql_url: Option<Scalar>,
    sql_table: Option<Scalar>,
    sql_password_file: Option<PathBuf>,
    sql_ca_file: Option<PathBuf>,
    sql_cert_file: Option<PathBuf>,
    sql_key_file: Option<PathBuf>,
    namespace: Option<Scalar>,
    kubeconfig: Option<PathBuf>,
    pod_label: Option<Scalar>,
    pod_label_key: Option<Scalar>,
    pod_label_leader_value: Option<Scalar>,
    pod_label_follower_value: Option<Scalar>,
    pod_name: Option<Scalar>,
    exit_on_loss: Option<Scalar>,
    enable_release_endpoint: Option<Scalar>,
    log_format: Option<Scalar>,
    transition_log: Option<PathBuf>,
}

impl Cli {
    /// Fills every value the command line and environment left empty from the file.
    fn merge_file(mut self, file: FileConfig) -> Self {
        fn fill(slot: &mut Option<String>, v: Option<Scalar>) {
            if slot.is_none() {
                *slot = v.map(Scalar::into_string);
            }
        }
        fill(&mut self.backend, file.backend);
        fill(&mut self.election, file.election);
        fill(&mut self.identity, file.identity);
        fill(&mut self.http_addr, file.http_addr);
        fill(&mut self.ttl, file.ttl);
        fill(&mut self.renew_interval, file.renew_interval);
        fill(&mut self.retry_interval, file.retry_interval);
        fill(&mut self.backend_timeout, file.backend_timeout);
        fill(&mut self.clock_drift, file.clock_drift);
        fill(&mut self.safety_margin, file.safety_margin);
        fill(&mut self.exit_on_loss, file.exit_on_loss);
        fill(&mut self.namespace, file.namespace);
        self.kubeconfig = self.kubeconfig.or(file.kubeconfig);
        fill(&mut self.pod_label, file.pod_label);
        fill(&mut self.pod_label_key, file.pod_label_key);
        fill(
            &mut self.pod_label_leader_value,
            file.pod_label_leader_value,
        );
        fill(
            &mut self.pod_label_follower_value,
            file.pod_label_follower_value,
        );
        fill(&mut self.pod_name, file.pod_name);
        fill(
            &mut self.enable_release_endpoint,
            file.enable_release_endpoint,
        );
        fill(&mut self.log_format, file.log_format);
        if self.redis_url.is_empty() {
            self.redis_url = match file.redis_url {
                Some(OneOrMany::One(s)) => s.split(',').map(str::to_owned).collect(),
                Some(OneOrMany::Many(v)) => v,
                None => Vec::new(),
            };
        }
        self.redis_password_file = self.redis_password_file.or(file.redis_password_file);
        self.redis_ca_file = self.redis_ca_file.or(file.redis_ca_file);
        self.redis_cert_file = self.redis_cert_file.or(file.redis_cert_file);
        self.redis_key_file = self.redis_key_file.or(file.redis_key_file);
        self.file_path = self.file_path.or(file.file_path);
        fill(&mut self.zk_connect, file.zk_connect);
        fill(&mut self.zk_root, file.zk_root);
        self.zk_auth_file = self.zk_auth_file.or(file.zk_auth_file);
        self.zk_ca_file = self.zk_ca_file.or(file.zk_ca_file);
        self.zk_cert_file = self.zk_cert_file.or(file.zk_cert_file);
        self.zk_key_file = self.zk_key_file.or(file.zk_key_file);
        if self.etcd_endpoints.is_empty() {
            self.etcd_endpoints = match file.etcd_endpoints {
                Some(OneOrMany::One(s)) => s.split(',').map(str::to_owned).collect(),
                Some(OneOrMany::Many(v)) => v,
                None => Vec::new(),
            };
        }
        self.etcd_ca_file = self.etcd_ca_file.or(file.etcd_ca_file);
        self.etcd_cert_file = self.etcd_cert_file.or(file.etcd_cert_file);
        self.etcd_key_file = self.etcd_key_file.or(file.etcd_key_file);
        fill(&mut self.etcd_user, file.etcd_user);
        self.etcd_password_file = self.etcd_password_file.or(file.etcd_password_file);
        fill(&mut self.postgres_url, file.postgres_url);
        fill(&mut self.mysql_url, file.mysql_url);
        fill(&mut self.sql_table, file.sql_table);
        self.sql_password_file = self.sql_password_file.or(file.sql_password_file);
        self.sql_ca_file = self.sql_ca_file.or(file.sql_ca_file);
        self.sql_cert_file = self.sql_cert_file.or(file.sql_cert_file);
        self.sql_key_file = self.sql_key_file.or(file.sql_key_file);
        self.transition_log = self.transition_log.or(file.transition_log);
        self
    }
}

/// Which store holds the lease, with what it needs to reach it.
#[derive(Clone, Debug)]
pub enum BackendSettings {
    File {
        path: PathBuf,
    },
    Redis(Box<RedisSettings>),
    Redlock(Vec<RedisSettings>),
    Etcd(Box<EtcdSettings>),
    Zookeeper(Box<ZkSettings>),
    /// A lease row in PostgreSQL or MySQL/MariaDB (see `backend::sql`).
    Sql(Box<crate::backend::sql::SqlSettings>),
    /// A `coordination.k8s.io/v1` Lease named after the election, in this namespace.
    Kubernetes {
        namespace: String,
    },
}

/// The leader label kept on the own Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLabelSettings {
    pub namespace: String,
    pub pod: String,
    /// The election's name: every candidate Pod carries it as `leasekeeper.io/election`.
    pub election: String,
    pub key: String,
    pub leader_value: String,
    pub follower_value: String,
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

impl BackendSettings {
    pub fn name(&self) -> &'static str {
        match self {
            BackendSettings::File { .. } => "file",
            BackendSettings::Redis(_) => "redis",
            BackendSettings::Redlock(_) => "redlock",
            BackendSettings::Etcd(_) => "etcd",
            BackendSettings::Zookeeper(_) => "zookeeper",
            BackendSettings::Sql(sql) => match sql.dialect() {
                crate::backend::sql::Dialect::Postgres => "postgres",
                crate::backend::sql::Dialect::Mysql => "mysql",
            },
            BackendSettings::Kubernetes { .. } => "kubernetes",
        }
    }
}

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

/// Drops the password from a URL for logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme_end + 3], user, &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Lease timing; every duration the elector uses comes from here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub ttl: Duration,
    pub renew_interval: Duration,
    pub retry_interval: Duration,
    pub backend_timeout: Duration,
    pub clock_drift: f64,
    pub safety_margin: Duration,
}

impl Timing {
    /// The defaults of DESIGN §6 for a given ttl.
    pub fn for_ttl(ttl: Duration) -> Self {
        Timing {
            ttl,
            renew_interval: ttl / 3,
            retry_interval: ttl / 3,
            backend_timeout: (ttl / 5).min(Duration::from_secs(5)),
            clock_drift: 0.01,
            safety_margin: (ttl / 100).max(Duration::from_millis(10)),
        }
    }

    /// How long a claim may be asserted after the request that established it was sent.
    pub fn claim_length(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(1.0 - self.clock_drift)
            .saturating_sub(self.safety_margin)
    }
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    pub election: String,
    pub identity: String,
    pub http_addr: SocketAddr,
    pub timing: Timing,
    pub backend: BackendSettings,
    pub exit_on_loss: bool,
    /// `run` only (see `publish::exec`).
    pub kill_grace: Duration,
    pub restart: bool,
    /// Whether a `run`-only flag was given (an error without `run`).
    pub run_only_flags: bool,
    pub hooks: crate::publish::hooks::HookSettings,
    /// POSTed before a graceful release (see `publish::drain`).
    pub drain_url: Option<hyper::Uri>,
    pub drain_timeout: Duration,
    pub enable_release_endpoint: bool,
    pub log_format: LogFormat,
    pub transition_log: Option<PathBuf>,
    /// The leader label on the own Pod, when on.
    pub pod_label: Option<PodLabelSettings>,
    /// An explicit kubeconfig (read already, so it is known to be there).
    pub kubeconfig: Option<PathBuf>,
    /// Accepted but questionable choices, logged once logging is up.
    pub warnings: Vec<String>,
}

/// Parses durations like `15s`, `500ms`, `2m`.
/// An `http://host[:port]/path` URL (the hooks speak plain HTTP).
fn parse_http_url(setting: &str, raw: &str) -> Result<hyper::Uri, ConfigError> {
    let uri: hyper::Uri = raw.trim().parse().map_err(|_| {
        bad(format!(
            "{setting} {raw:?} is not a URL; write it like http://127.0.0.1:8080/drain"
        ))
    })?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(bad(format!(
            "{setting} {raw:?} must be an http:// URL with a host, like http://127.0.0.1:8080/drain"
        )));
    }
    Ok(uri)
}

pub fn parse_duration(setting: &str, raw: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(raw.trim()).map_err(|_| {
        bad(format!(
            "{setting} {raw:?} is not a duration; write it like 15s, 500ms or 2m"
        ))
    })?;
    if d.is_zero() {
        return Err(bad(format!("{setting} {raw} must be longer than zero")));
    }
    Ok(d)
}

fn parse_bool(setting: &str, raw: Option<&str>) -> Result<bool, ConfigError> {
    match raw.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("false" | "0" | "no" | "off") => Ok(false),
        Some("true" | "1" | "yes" | "on" | "") => Ok(true),
        Some(other) => Err(bad(format!("{setting} {other:?} is not true or false"))),
    }
}

fn fmt_d(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn validate_election(name: &str) -> Result<(), ConfigError> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > 253 || !ok_chars || !ok_ends {
        return Err(bad(format!(
            "--election {name:?} is not a valid name; use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (at most 253)"
        )));
    }
    Ok(())
}

fn validate_identity(identity: &str) -> Result<(), ConfigError> {
    if identity.is_empty()
        || identity.len() > 253
        || identity.chars().any(|c| c.is_control() || c == '|')
    {
        return Err(bad(format!(
            "--identity {identity:?} is not usable; give 1 to 253 characters without control characters or '|'"
        )));
    }
    Ok(())
}

fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        if !pod.is_empty() {
            return pod;
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}-{}", std::process::id())
}

fn parse_http_addr(raw: &str) -> Result<SocketAddr, ConfigError> {
    let candidate = if raw.starts_with(':') {
        format!("0.0.0.0{raw}")
    } else {
        raw.to_owned()
    };
    candidate.parse().map_err(|_| {
        bad(format!(
            "--http-addr {raw:?} is not an address; write it like 0.0.0.0:4040 or 127.0.0.1:8080"
        ))
    })
}

pub(crate) fn read_secret_file(setting: &str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("{setting} {}: cannot read it: {e}", path.display())))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_owned();
    if secret.is_empty() {
        return Err(bad(format!(
            "{setting} {}: the file is empty",
            path.display()
        )));
    }
    Ok(secret)
}

fn redis_urls(cli: &Cli) -> Vec<&str> {
    cli.redis_url
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect()
}

fn redis_settings(cli: &Cli) -> Result<RedisSettings, ConfigError> {
    match redis_urls(cli).as_slice() {
        [] => Err(bad("--redis-url is required with --backend redis; write it like redis://127.0.0.1:6379")),
        [one] => redis_node(one, cli),
        many => Err(bad(format!(
            "--redis-url: the redis backend takes one server, got {}; a quorum of several is the redlock backend",
            many.len()
        ))),
    }
}

/// Redlock: at least three distinct, independent masters.
fn redlock_settings(cli: &Cli) -> Result<(Vec<RedisSettings>, Vec<String>), ConfigError> {
    let urls = redis_urls(cli);
    if urls.len() < 3 {
        return Err(bad(format!(
            "--redis-url: redlock needs at least 3 independent Redis masters, got {}; repeat --redis-url or separate URLs with commas",
            urls.len()
        )));
    }
    let mut nodes: Vec<RedisSettings> = Vec::with_capacity(urls.len());
    for url in urls {
        let node = redis_node(url, cli)?;
        let same = |other: &RedisSettings| {
            other.info.addr().to_string() == node.info.addr().to_string()
                && other.info.redis_settings().db() == node.info.redis_settings().db()
        };
        if nodes.iter().any(same) {
            return Err(bad(format!(
                "--redis-url {:?} is given twice; redlock needs distinct servers",
                redact(url)
            )));
        }
        nodes.push(node);
    }
    let mut warnings = Vec::new();
    if nodes.len().is_multiple_of(2) {
        warnings.push(format!(
            "redlock over {} nodes: an even count tolerates no more failures than {} nodes",
            nodes.len(),
            nodes.len() - 1
        ));
    }
    Ok((nodes, warnings))
}

pub(crate) fn read_pem(setting: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    let bytes = std::fs::read(path)
        .map_err(|e| bad(format!("{setting} {}: cannot read it: {e}", path.display())))?;
    if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
        return Err(bad(format!("{setting} {}: not a PEM file", path.display())));
    }
    Ok(bytes)
}

/// The TLS material of `--redis-*-file`, if any was given.
fn redis_tls(url: &str, cli: &Cli) -> Result<Option<redis::TlsCertificates>, ConfigError> {
    if cli.redis_ca_file.is_none() && cli.redis_cert_file.is_none() && cli.redis_key_file.is_none()
    {
        return Ok(None);
    }
    if !url.starts_with("rediss://") {
        return Err(bad(format!(
            "--redis-url {:?}: TLS files were given, but the URL is not rediss://",
            redact(url)
        )));
    }
    let root_cert = match &cli.redis_ca_file {
        Some(p) => Some(read_pem("--redis-ca-file", p)?),
        None => None,
    };
    let client_tls = match (&cli.redis_cert_file, &cli.redis_key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read_pem("--redis-cert-file", cert)?,
            client_key: read_pem("--redis-key-file", key)?,
        }),
        (None, None) => None,
        (Some(_), None) => return Err(bad("--redis-cert-file needs --redis-key-file too")),
        (None, Some(_)) => return Err(bad("--redis-key-file needs --redis-cert-file too")),
    };
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

fn redis_node(url: &str, cli: &Cli) -> Result<RedisSettings, ConfigError> {
    let password_file = cli.redis_password_file.as_deref();
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
    if let Some(path) = password_file {
        let password = read_secret_file("--redis-password-file", path)?;
        let redis_info = info.redis_settings().clone().set_password(password);
        info = info.set_redis_settings(redis_info);
    }
    if let Some(certs) = redis_tls(url, cli)? {
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

/// Checks one etcd endpoint: `http(s)://host:port`.
fn etcd_endpoint(raw: &str) -> Result<String, ConfigError> {
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

fn etcd_settings(cli: &Cli) -> Result<EtcdSettings, ConfigError> {
    let endpoints = cli
        .etcd_endpoints
        .iter()
        .filter(|e| !e.trim().is_empty())
        .map(|e| etcd_endpoint(e))
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
    let ca_pem = match &cli.etcd_ca_file {
        Some(p) => Some(read_pem("--etcd-ca-file", p)?),
        None => None,
    };
    let client_pem = match (&cli.etcd_cert_file, &cli.etcd_key_file) {
        (Some(c), Some(k)) => Some((
            read_pem("--etcd-cert-file", c)?,
            read_pem("--etcd-key-file", k)?,
        )),
        (None, None) => None,
        (Some(_), None) => return Err(bad("--etcd-cert-file needs --etcd-key-file too")),
        (None, Some(_)) => return Err(bad("--etcd-key-file needs --etcd-cert-file too")),
    };
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
    let user = match (&cli.etcd_user, &cli.etcd_password_file) {
        (Some(u), Some(p)) => Some((u.clone(), read_secret_file("--etcd-password-file", p)?)),
        (None, None) => None,
        (Some(_), None) => return Err(bad("--etcd-user needs --etcd-password-file")),
        (None, Some(_)) => return Err(bad("--etcd-password-file needs --etcd-user")),
    };
    Ok(EtcdSettings {
        endpoints,
        ca_pem,
        client_pem,
        user,
    })
}

fn zk_settings(cli: &Cli) -> Result<ZkSettings, ConfigError> {
    let raw = cli.zk_connect.as_deref().map(str::trim).unwrap_or("");
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
    let root = cli
        .zk_root
        .clone()
        .unwrap_or_else(|| "/leasekeeper".to_owned());
    if !root.starts_with('/') || root.len() < 2 || root.ends_with('/') || root.contains("//") {
        return Err(bad(format!(
            "--zk-root {root:?} must be an absolute path like /leasekeeper"
        )));
    }
    let digest = match &cli.zk_auth_file {
        Some(p) => {
            let secret = read_secret_file("--zk-auth-file", p)?;
            let (user, password) = secret.split_once(':').ok_or_else(|| {
                bad(format!(
                    "--zk-auth-file {}: write user:password on one line",
                    p.display()
                ))
            })?;
            Some((user.to_owned(), password.to_owned()))
        }
        None => None,
    };
    Ok(ZkSettings {
        connect: raw.to_owned(),
        root,
        digest,
        tls: zk_tls(cli)?,
    })
}

/// Reads and checks the ZooKeeper TLS material: TLS is on when a CA is given.
fn zk_tls(cli: &Cli) -> Result<Option<ZkTls>, ConfigError> {
    let identity = match (&cli.zk_cert_file, &cli.zk_key_file) {
        (Some(c), Some(k)) => Some((
            pem_text("--zk-cert-file", c)?,
            pem_text("--zk-key-file", k)?,
        )),
        (None, None) => None,
        (Some(_), None) => return Err(bad("--zk-cert-file needs --zk-key-file too")),
        (None, Some(_)) => return Err(bad("--zk-key-file needs --zk-cert-file too")),
    };
    let Some(ca_path) = &cli.zk_ca_file else {
        if identity.is_some() {
            return Err(bad(
                "--zk-cert-file was given without --zk-ca-file; TLS to ZooKeeper needs the CA that signs the servers",
            ));
        }
        return Ok(None);
    };
    let ca_pem = pem_text("--zk-ca-file", ca_path)?;
    // Let the client library judge the PEM now, so bad material is bad input, not a retry loop.
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

fn pem_text(setting: &str, path: &std::path::Path) -> Result<String, ConfigError> {
    String::from_utf8(read_pem(setting, path)?)
        .map_err(|_| bad(format!("{setting} {}: not a PEM text file", path.display())))
}

/// `--namespace`, else the Pod's own (downward API), else `default`.
fn namespace(cli: &Cli) -> Result<String, ConfigError> {
    let ns = cli
        .namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let ok = ns.len() <= 63
        && ns
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && ns.starts_with(|c: char| c.is_ascii_alphanumeric())
        && ns.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok {
        return Err(bad(format!(
            "--namespace {ns:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
        )));
    }
    Ok(ns)
}

/// A label name or value segment: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends.
fn label_segment_ok(s: &str, may_be_empty: bool) -> bool {
    if s.is_empty() {
        return may_be_empty;
    }
    s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn pod_label_settings(cli: &Cli, election: &str) -> Result<Option<PodLabelSettings>, ConfigError> {
    let on = match cli.pod_label.as_deref() {
        None => in_a_pod(),
        raw => parse_bool("--pod-label", raw)?,
    };
    if !on {
        return Ok(None);
    }
    let key = cli
        .pod_label_key
        .clone()
        .unwrap_or_else(|| "leasekeeper.io/leader".to_owned());
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key.as_str()),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    if !prefix_ok || !label_segment_ok(name, false) {
        return Err(bad(format!(
            "--pod-label-key {key:?} is not a label key; write it like leasekeeper.io/leader"
        )));
    }
    let value = |setting: &str, raw: &Option<String>, default: &str| {
        let v = raw.clone().unwrap_or_else(|| default.to_owned());
        if label_segment_ok(&v, true) {
            Ok(v)
        } else {
            Err(bad(format!(
                "{setting} {v:?} is not a label value (at most 63 of letters, digits, '-', '_', '.')"
            )))
        }
    };
    let leader_value = value(
        "--pod-label-leader-value",
        &cli.pod_label_leader_value,
        "true",
    )?;
    let follower_value = value(
        "--pod-label-follower-value",
        &cli.pod_label_follower_value,
        "false",
    )?;
    if leader_value == follower_value {
        return Err(bad(
            "--pod-label-leader-value and --pod-label-follower-value must differ",
        ));
    }
    let pod = cli
        .pod_name
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok())
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            bad("--pod-label needs the Pod's name: set POD_NAME from the downward API (fieldRef metadata.name) or --pod-name")
        })?;
    Ok(Some(PodLabelSettings {
        namespace: namespace(cli)?,
        pod: pod.trim().to_owned(),
        election: election.to_owned(),
        key,
        leader_value,
        follower_value,
    }))
}

fn in_a_pod() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

impl Settings {
    /// Parses the process's own command line, environment and config file.
    pub fn from_args<I, T>(args: I) -> Result<Settings, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cli = Cli::try_parse_from(args).map_err(|e| bad(first_line(&e.to_string())))?;
        Settings::from_cli(cli)
    }

    /// Merges the file named by `--config` and validates everything.
    pub fn from_cli(cli: Cli) -> Result<Settings, ConfigError> {
        let cli = match cli.config.clone() {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    bad(format!("--config {}: cannot read it: {e}", path.display()))
                })?;
                let file: FileConfig = if text.trim().is_empty() {
                    FileConfig::default()
                } else {
                    serde_yaml_ng::from_str(&text).map_err(|e| {
                        bad(format!(
                            "--config {}: {}",
                            path.display(),
                            first_line(&e.to_string())
                        ))
                    })?
                };
                cli.merge_file(file)
            }
            None => cli,
        };
        Settings::validate(cli)
    }

    fn validate(cli: Cli) -> Result<Settings, ConfigError> {
        let election = cli
            .election
            .clone()
            .unwrap_or_else(|| "leasekeeper".to_owned());
        validate_election(&election)?;
        let identity = cli.identity.clone().unwrap_or_else(default_identity);
        validate_identity(&identity)?;
        let http_addr = parse_http_addr(cli.http_addr.as_deref().unwrap_or("0.0.0.0:4040"))?;
        let timing = timing(&cli)?;

        let backend_name = cli
            .backend
            .clone()
            .unwrap_or_else(|| if in_a_pod() { "kubernetes" } else { "file" }.to_owned());
        let mut warnings = Vec::new();
        let backend = match backend_name.trim() {
            "file" => BackendSettings::File {
                path: cli.file_path.clone().unwrap_or_else(|| default_lock_path(&election)),
            },
            "redis" => BackendSettings::Redis(Box::new(redis_settings(&cli)?)),
            "redlock" => {
                let (nodes, node_warnings) = redlock_settings(&cli)?;
                warnings.extend(node_warnings);
                BackendSettings::Redlock(nodes)
            }
            "etcd" => BackendSettings::Etcd(Box::new(etcd_settings(&cli)?)),
            "zookeeper" => BackendSettings::Zookeeper(Box::new(zk_settings(&cli)?)),
            "postgres" => BackendSettings::Sql(Box::new(crate::backend::sql::settings(
                &cli,
                crate::backend::sql::Dialect::Postgres,
            )?)),
            "mysql" => BackendSettings::Sql(Box::new(crate::backend::sql::settings(
                &cli,
                crate::backend::sql::Dialect::Mysql,
            )?)),
            "kubernetes" => {
                if timing.ttl.subsec_nanos() != 0 {
                    return Err(bad(format!(
                        "--ttl {} must be whole seconds with --backend kubernetes (the Lease counts leaseDurationSeconds)",
                        fmt_d(timing.ttl)
                    )));
                }
                BackendSettings::Kubernetes {
                    namespace: namespace(&cli)?,
                }
            }
            other => {
                return Err(bad(format!(
                    "--backend {other:?} is unknown; choose one of file, redis, redlock, etcd, zookeeper, kubernetes, postgres, mysql"
                )))
            }
        };

        let log_format = match cli.log_format.as_deref().map(str::trim) {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(bad(format!(
                    "--log-format {other:?} is unknown; choose text or json"
                )))
            }
        };

        let pod_label = pod_label_settings(&cli, &election)?;
        Ok(Settings {
            election,
            identity,
            http_addr,
            timing,
            backend,
            exit_on_loss: parse_bool("--exit-on-loss", cli.exit_on_loss.as_deref())?,
            kill_grace: match cli.kill_grace.as_deref() {
                Some(raw) => parse_duration("--kill-grace", raw)?,
                None => Duration::from_secs(10),
            },
            restart: parse_bool("--restart", cli.restart.as_deref())?,
            hooks: crate::publish::hooks::HookSettings {
                on_change: match cli.on_change.as_deref().map(str::trim) {
                    Some("") => return Err(bad("--on-change is empty; give a shell command")),
                    other => other.map(str::to_owned),
                },
                notify_url: cli
                    .notify_url
                    .as_deref()
                    .map(|u| parse_http_url("--notify-url", u))
                    .transpose()?,
                timeout: match cli.hook_timeout.as_deref() {
                    Some(raw) => parse_duration("--hook-timeout", raw)?,
                    None => Duration::from_secs(10),
                },
            },
            drain_url: cli
                .drain_url
                .as_deref()
                .map(|u| parse_http_url("--drain-url", u))
                .transpose()?,
            drain_timeout: match cli.drain_timeout.as_deref() {
                Some(raw) => parse_duration("--drain-timeout", raw)?,
                None => Duration::from_secs(30),
            },
            run_only_flags: cli.kill_grace.is_some() || cli.restart.is_some(),
            enable_release_endpoint: parse_bool(
                "--enable-release-endpoint",
                cli.enable_release_endpoint.as_deref(),
            )?,
            log_format,
            pod_label,
            kubeconfig: match &cli.kubeconfig {
                Some(p) => {
                    std::fs::read(p).map_err(|e| {
                        bad(format!("--kubeconfig {}: cannot read it: {e}", p.display()))
                    })?;
                    Some(p.clone())
                }
                None => None,
            },
            transition_log: cli.transition_log,
            warnings,
        })
    }
}

fn default_lock_path(election: &str) -> PathBuf {
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    dir.join(format!("leasekeeper-{election}.lock"))
}

fn timing(cli: &Cli) -> Result<Timing, ConfigError> {
    let ttl = match &cli.ttl {
        Some(raw) => parse_duration("--ttl", raw)?,
        None => Duration::from_secs(15),
    };
    let mut t = Timing::for_ttl(ttl);
    if let Some(raw) = &cli.renew_interval {
        t.renew_interval = parse_duration("--renew-interval", raw)?;
    }
    if let Some(raw) = &cli.retry_interval {
        t.retry_interval = parse_duration("--retry-interval", raw)?;
    }
    if let Some(raw) = &cli.backend_timeout {
        t.backend_timeout = parse_duration("--backend-timeout", raw)?;
    }
    if let Some(raw) = &cli.safety_margin {
        t.safety_margin = humantime::parse_duration(raw.trim()).map_err(|_| {
            bad(format!(
                "--safety-margin {raw:?} is not a duration; write it like 50ms"
            ))
        })?;
    }
    if let Some(raw) = &cli.clock_drift {
        t.clock_drift = raw
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|d| (0.0..0.5).contains(d))
            .ok_or_else(|| {
                bad(format!(
                    "--clock-drift {raw:?} must be a fraction from 0 up to 0.5, like 0.01"
                ))
            })?;
    }
    if ttl < Duration::from_millis(100) {
        return Err(bad(format!(
            "--ttl {} is too short; use at least 100ms",
            fmt_d(ttl)
        )));
    }
    if t.renew_interval >= ttl {
        return Err(bad(format!(
            "--ttl {} is not longer than --renew-interval {}; the leader could never renew in time",
            fmt_d(ttl),
            fmt_d(t.renew_interval)
        )));
    }
    if t.retry_interval >= ttl {
        return Err(bad(format!(
            "--retry-interval {} is not shorter than --ttl {}; followers would report a stale leader between checks",
            fmt_d(t.retry_interval),
            fmt_d(ttl)
        )));
    }
    if t.backend_timeout >= ttl {
        return Err(bad(format!(
            "--backend-timeout {} is not shorter than --ttl {}; a hung call would outlive the lease",
            fmt_d(t.backend_timeout),
            fmt_d(ttl)
        )));
    }
    let claim = t.claim_length(ttl);
    if t.renew_interval + t.backend_timeout >= claim {
        return Err(bad(format!(
            "--ttl {} leaves a claim of {} after drift and margin, not more than --renew-interval {} plus --backend-timeout {}; the leader could lose every lease it renews",
            fmt_d(ttl),
            fmt_d(claim),
            fmt_d(t.renew_interval),
            fmt_d(t.backend_timeout)
        )));
    }
    Ok(t)
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Settings, ConfigError> {
        Settings::from_args(std::iter::once("leasekeeper").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_use_the_file_backend_and_a_ttl_of_fifteen_seconds() {
        let s = parse(&["--election", "demo"]).expect("valid");
        assert_eq!(s.timing.ttl, Duration::from_secs(15));
        assert_eq!(s.timing.renew_interval, Duration::from_secs(5));
        assert_eq!(s.http_addr.port(), 4040);
        match s.backend {
            BackendSettings::File { path } => assert!(path.ends_with("leasekeeper-demo.lock")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_bad_input_names_its_setting_on_one_line() {
        let cases: &[(&[&str], &str)] = &[
            (&["--ttl", "soon"], "--ttl"),
            (
                &["--ttl", "1s", "--renew-interval", "5s"],
                "--renew-interval 5s",
            ),
            (
                &["--ttl", "1s", "--renew-interval", "900ms"],
                "--ttl 1s leaves a claim",
            ),
            (
                &["--ttl", "2s", "--retry-interval", "3s"],
                "--retry-interval 3s",
            ),
            (&["--backend", "consul"], "--backend \"consul\" is unknown"),
            (&["--backend", "redis"], "--redis-url is required"),
            (
                &["--backend", "redis", "--redis-url", "http://x"],
                "must start with redis://",
            ),
            (
                &[
                    "--backend",
                    "redis",
                    "--redis-url",
                    "redis://a:1,redis://b:2",
                ],
                "redlock",
            ),
            (&["--http-addr", "nowhere"], "--http-addr"),
            (&["--election", "Bad Name"], "--election"),
            (&["--log-format", "xml"], "--log-format"),
            (&["--exit-on-loss=maybe"], "--exit-on-loss"),
            (&["--clock-drift", "2"], "--clock-drift"),
            (
                &["--config", "/nonexistent/lk.yaml"],
                "--config /nonexistent/lk.yaml",
            ),
            (
                &[
                    "--backend",
                    "redis",
                    "--redis-url",
                    "redis://h:1",
                    "--redis-password-file",
                    "/nonexistent/pw",
                ],
                "--redis-password-file",
            ),
            (&["--no-such-flag"], "--no-such-flag"),
            (&["--backend", "zookeeper"], "--zk-connect is required"),
            (
                &["--backend", "zookeeper", "--zk-connect", "zk1"],
                "is not host:port",
            ),
            (
                &[
                    "--backend",
                    "zookeeper",
                    "--zk-connect",
                    "zk1:2181,zk2:x/app",
                ],
                "\"zk2:x\" is not host:port",
            ),
            (
                &[
                    "--backend",
                    "zookeeper",
                    "--zk-connect",
                    "zk1:2181",
                    "--zk-auth-file",
                    "/nonexistent/auth",
                ],
                "--zk-auth-file",
            ),
            (
                &[
                    "--backend",
                    "zookeeper",
                    "--zk-connect",
                    "zk1:2181",
                    "--zk-root",
                    "relative",
                ],
                "--zk-root",
            ),
            (
                &[
                    "--backend",
                    "zookeeper",
                    "--zk-connect",
                    "zk1:2281",
                    "--zk-ca-file",
                    "/nonexistent/ca.pem",
                ],
                "--zk-ca-file /nonexistent/ca.pem: cannot read it",
            ),
            (
                &[
                    "--backend",
                    "zookeeper",
                    "--zk-connect",
                    "zk1:2281",
                    "--zk-cert-file",
                    "/nonexistent/c.pem",
                ],
                "--zk-cert-file needs --zk-key-file",
            ),
            (
                &[
                    "--backend",
                    "zookeeper",
                    "--zk-connect",
                    "zk1:2281",
                    "--zk-ca-file",
                    "/proc/self/status",
                ],
                "not a PEM file",
            ),
            (
                &["--backend", "kubernetes", "--ttl", "1500ms"],
                "must be whole seconds with --backend kubernetes",
            ),
            (
                &["--backend", "kubernetes", "--namespace", "Team_A"],
                "--namespace \"Team_A\" is not a namespace name",
            ),
            (
                &["--kubeconfig", "/nonexistent/kubeconfig"],
                "--kubeconfig /nonexistent/kubeconfig: cannot read it",
            ),
            (
                &[
                    "--pod-label",
                    "--pod-name",
                    "p",
                    "--pod-label-key",
                    "not a key",
                ],
                "--pod-label-key \"not a key\" is not a label key",
            ),
            (
                &[
                    "--pod-label",
                    "--pod-name",
                    "p",
                    "--pod-label-leader-value",
                    "yes",
                    "--pod-label-follower-value",
                    "yes",
                ],
                "must differ",
            ),
            (
                &["--pod-label=maybe"],
                "--pod-label \"maybe\" is not true or false",
            ),
            (&["--backend", "etcd"], "--etcd-endpoints is required"),
            (
                &["--backend", "etcd", "--etcd-endpoints", "127.0.0.1:2379"],
                "must start with http://",
            ),
            (
                &["--backend", "etcd", "--etcd-endpoints", "http://127.0.0.1"],
                "needs a port",
            ),
            (
                &["--backend", "etcd", "--etcd-endpoints", "http://h:99999"],
                "is not host:port",
            ),
            (
                &["--backend", "etcd", "--etcd-endpoints", "https://h:1"],
                "--etcd-ca-file must name",
            ),
            (
                &[
                    "--backend",
                    "etcd",
                    "--etcd-endpoints",
                    "https://h:1",
                    "--etcd-ca-file",
                    "/nonexistent/ca",
                ],
                "--etcd-ca-file /nonexistent/ca",
            ),
            (
                &[
                    "--backend",
                    "etcd",
                    "--etcd-endpoints",
                    "http://h:1",
                    "--etcd-user",
                    "root",
                ],
                "--etcd-password-file",
            ),
            (
                &[
                    "--backend",
                    "redis",
                    "--redis-url",
                    "redis://h:1",
                    "--redis-ca-file",
                    "/nonexistent/ca.pem",
                ],
                "TLS files were given",
            ),
            (
                &[
                    "--backend",
                    "redis",
                    "--redis-url",
                    "rediss://h:1",
                    "--redis-ca-file",
                    "/nonexistent/ca.pem",
                ],
                "--redis-ca-file /nonexistent/ca.pem",
            ),
            (
                &[
                    "--backend",
                    "redis",
                    "--redis-url",
                    "rediss://h:1",
                    "--redis-cert-file",
                    "/nonexistent/c.pem",
                ],
                "--redis-cert-file needs --redis-key-file",
            ),
            (
                &[
                    "--backend",
                    "redlock",
                    "--redis-url",
                    "redis://a:1,redis://b:1",
                ],
                "at least 3",
            ),
            (
                &[
                    "--backend",
                    "redlock",
                    "--redis-url",
                    "redis://a:1,redis://b:1,redis://a:1",
                ],
                "given twice",
            ),
        ];
        for (args, want) in cases {
            let err = parse(args)
                .expect_err(&format!("{args:?} must fail"))
                .to_string();
            assert!(
                err.contains(want),
                "{args:?}: {err:?} does not mention {want:?}"
            );
            assert!(!err.contains('\n'), "{args:?}: not one line: {err:?}");
        }
    }

    #[test]
    fn the_file_fills_what_flags_leave_and_flags_win() {
        let dir = std::env::temp_dir().join(format!("lk-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("lk.yaml");
        std::fs::write(
            &path,
            "ttl: 3s\nelection: from-file\nretry-interval: 250ms\nexit-on-loss: true\n",
        )
        .expect("write");
        let p = path.to_str().expect("utf8");
        let s = parse(&["--config", p, "--election", "from-flag"]).expect("valid");
        assert_eq!(s.election, "from-flag");
        assert_eq!(s.timing.ttl, Duration::from_secs(3));
        assert_eq!(s.timing.retry_interval, Duration::from_millis(250));
        assert!(s.exit_on_loss);
        std::fs::write(&path, "ttl: 3s\nbogus: 1\n").expect("write");
        let err = parse(&["--config", p])
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("bogus"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn passwords_stay_off_the_command_line() {
        let err = parse(&["--backend", "redis", "--redis-url", "redis://u:secret@h:1"])
            .expect_err("password in URL")
            .to_string();
        assert!(
            err.contains("--redis-password-file") && !err.contains("secret"),
            "{err}"
        );
    }

    #[test]
    fn redis_passwords_never_reach_logs() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
