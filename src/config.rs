//! The one place where the flags, the `LEASEKEEPER_*` environment and the `--config`
//! YAML file meet, and the choice of backend.
//!
//! Every setting is declared once, by its owner, as a clap `Args` beside its code (each
//! backend, the timing, the HTTP API, the Pod label, the hooks, the drain, exec mode);
//! [`Cli`] flattens them with the few common flags. The file is read through the same
//! declarations: each YAML key is a long flag's name and is handed to clap as that flag,
//! so no setting can exist in one list and be missing from another.
//!
//! Precedence: flags over environment over file. Every value is parsed into typed
//! [`Settings`] before anything starts; a bad one becomes a [`ConfigError`] whose
//! message is one line that names the setting.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser};

use crate::backend::store::SettingsContext;
pub use crate::backend::stores::BackendSettings;
use crate::backend::{slots, stores, LockMode};
use crate::kube_api;
use crate::publish::drain::{self, DrainSettings};
use crate::publish::events;
use crate::publish::exec::{self, ExecSettings};
use crate::publish::hooks::{self, HookSettings};
use crate::publish::http::{self, HttpSettings};
use crate::publish::label::{self, PodLabelSettings};
pub use crate::settings::ConfigError;
use crate::settings::{bad, first_line, in_a_pod, parse_bool};
use crate::timing::{self, Timing};

/// The flags every sidecar has, whatever its backend and publishers.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
pub struct CommonArgs {
    /// kubernetes, etcd, redis, redlock, zookeeper, postgres, mysql or file [default: kubernetes in a Pod, else file].
    #[arg(long, env = "LEASEKEEPER_BACKEND")]
    pub backend: Option<String>,
    /// Name of the lease [default: leasekeeper].
    #[arg(long, value_name = "NAME", env = "LEASEKEEPER_ELECTION")]
    pub election: Option<String>,
    /// Candidate's unique name [default: $POD_NAME or <hostname>-<pid>].
    #[arg(long, value_name = "NAME", env = "LEASEKEEPER_IDENTITY")]
    pub identity: Option<String>,
    /// Exit with code 3 on losing leadership instead of campaigning again.
    #[arg(long, value_name = "BOOL", env = "LEASEKEEPER_EXIT_ON_LOSS", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub exit_on_loss: Option<String>,
    /// Log format: text or json [default: text].
    #[arg(long, value_name = "FORMAT", env = "LEASEKEEPER_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Append each claim's start, deadline and end here, as JSON lines.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_TRANSITION_LOG")]
    pub transition_log: Option<PathBuf>,
    /// YAML file of settings keyed by the long flags' names, like `ttl: 15s`.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_CONFIG")]
    pub config: Option<PathBuf>,
}

/// The election without `--election` (the help says so; a test holds them together).
pub const DEFAULT_ELECTION: &str = "leasekeeper";

/// The command line: the common flags and every owner's own. Every value is optional
/// here so that the file can fill gaps and so that the messages for bad values are
/// ours, one line each.
#[derive(Parser, Debug, Default)]
#[command(
    name = "leasekeeper",
    version,
    about = "Leader-election sidecar: holds a named lease, steps down the moment it cannot prove it holds it, and tells everyone who leads.",
    max_term_width = 100,
    mut_args = |a: clap::Arg| a.hide_env(true),
    after_help = "Every flag is also read from LEASEKEEPER_<FLAG> (LEASEKEEPER_RENEW_INTERVAL for --renew-interval) and from the --config file; flags win, then the environment. More: leasekeeper man."
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub timing: timing::Args,
    #[command(flatten)]
    pub slots: slots::Args,
    #[command(flatten)]
    pub http: http::Args,
    /// Every store's own flags (`backend::stores`).
    #[command(flatten)]
    pub stores: stores::Args,
    #[command(flatten)]
    pub kube: kube_api::Args,
    #[command(flatten)]
    pub label: label::Args,
    #[command(flatten)]
    pub events: events::Args,
    #[command(flatten)]
    pub hooks: hooks::Args,
    #[command(flatten)]
    pub drain: drain::Args,
    /// `run`'s own flags: declared by [`Cli::run_command`] alone, read by
    /// [`Cli::parse_layers_with`] when the command has them.
    #[arg(skip)]
    pub exec: exec::Args,
}

/// Why the command line could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// clap's own answer (also `--help` and `--version`, which are not failures).
    #[error(transparent)]
    Clap(#[from] clap::Error),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl Cli {
    /// Reads the flags and the environment (clap), then fills what both left empty
    /// from the `--config` file, read as the same flags.
    pub fn parse_layers<I, T>(args: I) -> Result<Cli, CliError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Cli::parse_layers_with(Cli::command(), args)
    }

    /// `leasekeeper run`'s flags: the sidecar's and exec mode's own (`--kill-grace`,
    /// `--restart`, `--wait-timeout`).
    pub fn run_command() -> clap::Command {
        <exec::Args as clap::Args>::augment_args(Cli::command())
    }

    /// The settings `matches` holds, parsed by `command` ([`Cli::command`] or
    /// [`Cli::run_command`]: `run`'s own flags are read when the command has them).
    pub fn from_matches(command: &clap::Command, matches: &ArgMatches) -> Result<Cli, clap::Error> {
        let mut cli = Cli::from_arg_matches(matches)?;
        if exec::Args::declared_in(command) {
            cli.exec = exec::Args::from_arg_matches(matches)?;
        }
        Ok(cli)
    }

    /// [`Cli::parse_layers`] with a command built on [`Cli`]'s or on
    /// [`Cli::run_command`] (the same flags, with the subcommands listed in its help,
    /// or `run`'s own flags and help).
    pub fn parse_layers_with<I, T>(command: clap::Command, args: I) -> Result<Cli, CliError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let run = exec::Args::declared_in(&command);
        let matches = command.clone().try_get_matches_from(args)?;
        let mut cli = Cli::from_matches(&command, &matches)?;
        if let Some(path) = cli.common.config.clone() {
            let from_file = file_as_flags(&path, &command, &matches)?;
            // The file's values alone: without the environment, which must not
            // overwrite a flag that the file does not mention.
            let file_matches = command
                .mut_args(|a| a.env(None))
                .no_binary_name(true)
                .try_get_matches_from(from_file)?;
            cli.update_from_arg_matches(&file_matches)?;
            if run {
                cli.exec.update_from_arg_matches(&file_matches)?;
            }
        }
        Ok(cli)
    }
}

/// The file's keys as `--key=value` arguments, for every key that neither a flag nor
/// the environment set. An unknown key is an error.
fn file_as_flags(
    path: &Path,
    command: &clap::Command,
    given: &ArgMatches,
) -> Result<Vec<String>, ConfigError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("--config {shown}: cannot read it: {e}")))?;
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let file: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(&text)
        .map_err(|e| bad(format!("--config {shown}: {}", first_line(&e.to_string()))))?;
    let mut flags = Vec::new();
    for (key, value) in file {
        let key =
            yaml_key(&key).ok_or_else(|| bad(format!("--config {shown}: a key is not a name")))?;
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && !["config", "help", "version"].contains(&key.as_str()))
            .ok_or_else(|| match exec::FLAGS.contains(&key.as_str()) {
                true => bad(format!(
                    "--config {shown}: {key} is a key of `leasekeeper run [flags] -- CMD` only"
                )),
                false => bad(format!(
                    "--config {shown}: unknown key {key:?}; the keys are the long flags' names, like ttl: 15s"
                )),
            })?;
        let set_already = matches!(
            given.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if set_already {
            continue;
        }
        let many = matches!(arg.get_action(), ArgAction::Append);
        for v in yaml_values(&value, many)
            .map_err(|why| bad(format!("--config {shown}: {key}: {why}")))?
        {
            flags.push(format!("--{key}={v}"));
        }
    }
    Ok(flags)
}

fn yaml_key(key: &serde_yaml_ng::Value) -> Option<String> {
    key.as_str().map(str::to_owned)
}

/// A YAML value as flag values: a scalar is one; a list is many, where the flag may
/// be repeated; null is none.
fn yaml_values(value: &serde_yaml_ng::Value, many: bool) -> Result<Vec<String>, &'static str> {
    use serde_yaml_ng::Value;
    let scalar = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err("not a string, number or boolean"),
    };
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Sequence(items) if many => items.iter().map(scalar).collect(),
        Value::Sequence(_) => Err("takes one value, not a list"),
        other => Ok(vec![scalar(other)?]),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    pub election: String,
    pub identity: String,
    pub timing: Timing,
    /// `--holders`: the number of slots (1: one leader).
    pub holders: u32,
    /// `--mode`: the election, or a side of its read-write lock.
    pub mode: LockMode,
    pub backend: BackendSettings,
    pub exit_on_loss: bool,
    pub http: HttpSettings,
    pub hooks: HookSettings,
    pub drain: DrainSettings,
    /// `run` only (see `publish::exec`).
    pub exec: Option<ExecSettings>,
    pub log_format: LogFormat,
    pub transition_log: Option<PathBuf>,
    /// The leader label on the own Pod, when on.
    pub pod_label: Option<PodLabelSettings>,
    /// An explicit kubeconfig (read already, so it is known to be there).
    pub kubeconfig: Option<PathBuf>,
    /// What the leadership Events are about, when they are recorded.
    pub events: Option<events::Subject>,
    /// Accepted but questionable choices, logged once logging is up.
    pub warnings: Vec<String>,
}

impl Settings {
    /// Parses a command line (with the process's environment and config file); for
    /// tests and tools. `--help` is an error here.
    pub fn from_args<I, T>(args: I) -> Result<Settings, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cli = Cli::parse_layers(args).map_err(|e| match e {
            CliError::Clap(e) => bad(first_line(&e.to_string())),
            CliError::Config(e) => e,
        })?;
        Settings::from_cli(cli, None)
    }

    /// Validates everything; `cmd` is the command of `leasekeeper run`.
    pub fn from_cli(cli: Cli, cmd: Option<Vec<OsString>>) -> Result<Settings, ConfigError> {
        let common = &cli.common;
        let election = common
            .election
            .clone()
            .unwrap_or_else(|| DEFAULT_ELECTION.to_owned());
        validate_election(&election)?;
        let identity = common.identity.clone().unwrap_or_else(default_identity);
        validate_identity(&identity)?;
        let timing = cli.timing.timing()?;
        let mut warnings = Vec::new();
        let holders = cli.slots.count()?;
        let backend = backend_settings(&cli, &election, &timing, holders, &mut warnings)?;
        let mode = cli.slots.mode()?;
        check_mode(mode, holders, &backend)?;
        let mut pod_label = cli.label.settings(&cli.kube, &election)?;
        if let Some(label) = pod_label.as_mut() {
            label.slots = holders > 1;
            label.shared = mode == LockMode::Shared;
        }
        let events = event_subject(&cli, &backend, &election)?;
        check_kube_built(&pod_label, &events)?;
        Ok(Settings {
            http: cli.http.settings(cmd.is_some())?,
            exit_on_loss: parse_bool("--exit-on-loss", common.exit_on_loss.as_deref())?,
            hooks: cli.hooks.settings()?,
            drain: cli.drain.settings()?,
            exec: cli.exec.settings(cmd)?,
            log_format: log_format(common.log_format.as_deref())?,
            pod_label,
            kubeconfig: cli.kube.kubeconfig()?,
            events,
            transition_log: common.transition_log.clone(),
            election,
            identity,
            timing,
            holders,
            mode,
            backend,
            warnings,
        })
    }
}

/// `--mode` where the store declares a read-write lock, with one slot; elsewhere
/// refused, naming why.
fn check_mode(mode: LockMode, holders: u32, backend: &BackendSettings) -> Result<(), ConfigError> {
    let Some(flag) = mode.flag() else {
        return Ok(());
    };
    if holders > 1 {
        return Err(bad(format!(
            "--mode {flag} with --holders above 1: a read-write lock has one slot; use one of them"
        )));
    }
    backend
        .capabilities()
        .read_write_lock
        .map_err(|why| bad(format!("--mode {flag}: {why}")))
}

/// Without the `kubernetes` feature there is no API client: the Pod label and the
/// Events are refused when they would be on (by a flag, or by default in a Pod).
fn check_kube_built(
    label: &Option<PodLabelSettings>,
    events: &Option<events::Subject>,
) -> Result<(), ConfigError> {
    let why = "this leasekeeper was built without the Kubernetes API client; build with `cargo build --features kubernetes`";
    match (cfg!(feature = "kubernetes"), label, events) {
        (true, _, _) => Ok(()),
        (false, Some(_), _) => Err(bad(format!("--pod-label: {why}, or set --pod-label=false"))),
        (false, None, Some(_)) => Err(bad(format!("--events: {why}, or set --events=false"))),
        (false, None, None) => Ok(()),
    }
}

/// What the leadership Events are about: the Lease with the Kubernetes backend, else
/// the own Pod when its name is known and the sidecar runs in a Pod (or `--events` asks
/// for them); nothing where the sidecar cannot name an object.
fn event_subject(
    cli: &Cli,
    backend: &BackendSettings,
    election: &str,
) -> Result<Option<events::Subject>, ConfigError> {
    let wanted = cli.events.wanted()?;
    if wanted == Some(false) {
        return Ok(None);
    }
    let subject = match backend.lease_namespace() {
        Some(namespace) => Some(events::Subject::Lease {
            name: election.to_owned(),
            namespace: namespace.to_owned(),
        }),
        None => match cli.label.own_pod() {
            Some(pod) if in_a_pod() || wanted == Some(true) => Some(events::Subject::Pod {
                name: pod,
                namespace: cli.kube.namespace()?,
            }),
            _ => None,
        },
    };
    if wanted == Some(true) && subject.is_none() {
        return Err(bad(
            "--events needs an object to record them about: --backend kubernetes (the Lease), or the own Pod's name (POD_NAME from the downward API, or --pod-name)",
        ));
    }
    Ok(subject)
}

/// `--backend` and the chosen backend's own settings.
fn backend_settings(
    cli: &Cli,
    election: &str,
    timing: &Timing,
    holders: u32,
    warnings: &mut Vec<String>,
) -> Result<BackendSettings, ConfigError> {
    let name = cli
        .common
        .backend
        .clone()
        .unwrap_or_else(|| if in_a_pod() { "kubernetes" } else { "file" }.to_owned());
    let mut cx = SettingsContext {
        election,
        timing,
        kube: &cli.kube,
        warnings,
    };
    cli.stores.settings(name.trim(), holders, &mut cx)
}

fn log_format(raw: Option<&str>) -> Result<LogFormat, ConfigError> {
    match raw.map(str::trim) {
        None | Some("text") => Ok(LogFormat::Text),
        Some("json") => Ok(LogFormat::Json),
        Some(other) => Err(bad(format!(
            "--log-format {other:?} is unknown; choose text or json"
        ))),
    }
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
    if !crate::status::identity_is_usable(identity) {
        return Err(bad(format!(
            "--identity {identity:?} is not usable; give 1 to 253 characters without control characters or '|'"
        )));
    }
    Ok(())
}

fn default_identity() -> String {
    if let Some(pod) = crate::settings::env_var("POD_NAME") {
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

/// Bad inputs and a piece of the message each must give (one line, naming the setting).
#[cfg(test)]
const BAD_INPUTS: &[(&[&str], &str)] = &[
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
        &["--ttl", "1001ms", "--renew-interval", "900ms"],
        "--ttl 1s 1ms leaves a claim of 981ms after drift and margin",
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
        &["--backend", "kubernetes", "--events=maybe"],
        "--events \"maybe\" is not true or false",
    ),
    (
        &["--backend", "file", "--events"],
        "--events needs an object to record them about",
    ),
    (
        &[
            "--backend",
            "kubernetes",
            "--lease-strategy-mixed=sometimes",
        ],
        "--lease-strategy-mixed \"sometimes\" is not true or false",
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse(args: &[&str]) -> Result<Settings, ConfigError> {
        Settings::from_args(std::iter::once("leasekeeper").chain(args.iter().copied()))
    }

    /// The election an SQL statement readied ahead of its use names must be one no
    /// candidate can have, so that no row of any election matches it.
    #[cfg(feature = "sql")]
    #[test]
    fn no_candidate_has_the_election_a_readied_statement_names() {
        assert!(validate_election(crate::backend::sql::NO_ELECTION).is_err());
    }

    #[test]
    fn defaults_use_the_file_backend_and_a_ttl_of_fifteen_seconds() {
        let s = parse(&["--election", "demo"]).expect("valid");
        assert_eq!(s.timing.ttl, Duration::from_secs(15));
        assert_eq!(s.timing.renew_interval, Duration::from_secs(5));
        assert_eq!(s.http.addr.map(|a| a.port()), Some(4040));
        match s.backend {
            BackendSettings::File(path) => assert!(path.ends_with("leasekeeper-demo.lock")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_bad_input_names_its_setting_on_one_line() {
        for (args, want) in BAD_INPUTS {
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

    fn temp_yaml(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lk-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("lk.yaml");
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn the_file_fills_what_flags_leave_and_flags_win() {
        let path = temp_yaml(
            "fills",
            "ttl: 3s\nelection: from-file\nretry-interval: 250ms\nexit-on-loss: true\non-change: echo hi\nredis-url: [redis://a:1, redis://b:2]\n",
        );
        let p = path.to_str().expect("utf8");
        let s = parse(&["--config", p, "--election", "from-flag"]).expect("valid");
        assert_eq!(s.election, "from-flag");
        assert_eq!(s.timing.ttl, Duration::from_secs(3));
        assert_eq!(s.timing.retry_interval, Duration::from_millis(250));
        assert!(s.exit_on_loss);
        assert_eq!(s.hooks.on_change.as_deref(), Some("echo hi"));
        std::fs::write(&path, "ttl: 3s\nbogus: 1\n").expect("write");
        let err = parse(&["--config", p])
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("bogus") && !err.contains('\n'), "{err}");
        std::fs::write(&path, "ttl: [3s, 4s]\n").expect("write");
        let err = parse(&["--config", p]).expect_err("a list").to_string();
        assert!(err.contains("ttl: takes one value"), "{err}");
    }

    /// Every long flag that `--help` lists is a key of the file, and reaches the same
    /// field as the flag would.
    #[test]
    fn every_flag_of_the_help_is_a_key_of_the_file() {
        let help = Cli::command().render_long_help().to_string();
        let flags: Vec<&str> = help
            .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == '=')
            .filter_map(|w| w.strip_prefix("--"))
            .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .filter(|w| !["help", "version", "config"].contains(w))
            .collect();
        assert!(flags.len() >= 50, "only {} flags in --help", flags.len());
        for flag in flags {
            let value = format!("from-file-{flag}");
            let path = temp_yaml(flag, &format!("{flag}: {value}\n"));
            let by_file =
                Cli::parse_layers(["leasekeeper", "--config", path.to_str().expect("utf8")])
                    .unwrap_or_else(|e| panic!("{flag} as a key: {e}"));
            let by_flag =
                Cli::parse_layers(["leasekeeper".to_owned(), format!("--{flag}={value}")])
                    .unwrap_or_else(|e| panic!("--{flag}: {e}"));
            let (mut by_file, by_flag) = (format!("{by_file:?}"), format!("{by_flag:?}"));
            by_file = by_file.replace(&format!("Some({:?})", path), "None");
            assert_eq!(by_file, by_flag, "{flag}: the file and the flag disagree");
        }
    }

    /// `--help` shows the election's default, the name the code uses without the flag.
    #[test]
    fn the_help_shows_the_default_election() {
        let help = Cli::command().render_help().to_string();
        let shown = format!("[default: {DEFAULT_ELECTION}]");
        let line = help
            .lines()
            .skip_while(|l| !l.contains("--election"))
            .take(2);
        assert!(line.collect::<String>().contains(&shown), "{help}");
        assert_eq!(parse(&[]).expect("valid").election, DEFAULT_ELECTION);
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
}
