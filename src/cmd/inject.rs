//! `leasekeeper inject [flags]`: the mutating admission webhook that adds the sidecar
//! to the Pods that ask for it by annotation (`leasekeeper.io/inject: "true"`).
//!
//! - `POST /mutate` answers AdmissionReview `admission.k8s.io/v1` with the decision of
//!   `inject::decide` (a JSONPatch, or a refusal with status 400 whose message names
//!   the annotation), over HTTPS; `GET /healthz` answers there too.
//! - The serving certificate and key are read again whenever their files change (a
//!   mounted Secret is updated in place by the kubelet): new handshakes get the new
//!   certificate, without a restart.
//! - `--native-sidecars auto` asks the API server's `/version` at start: native
//!   sidecars (init containers with `restartPolicy: Always`) from 1.29 on.
//! - With `--watch-missed` (the default), a watch of every Pod finds those that asked
//!   for the sidecar and run without it, counts them (`/metrics`) and records one
//!   Warning Event `LeasekeeperNotInjected` on each.
//! - `/metrics`, `/healthz` and `/readyz` are served in plain HTTP on `--metrics-addr`.
//!
//! Exit codes: 0 stopped by SIGTERM or SIGINT, 1 a failure at run time, 2 bad input.

mod serve;
mod tls;
mod watch;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

use crate::config::LogFormat;
use crate::inject::metrics::InjectorMetrics;
use crate::inject::mutate::Injector;
use crate::inject::Template;
use crate::settings::{bad, parse_bool, ConfigError};

use super::exit::USAGE;

#[derive(Debug, Parser)]
#[command(
    name = "leasekeeper inject",
    about = "Serve the admission webhook that adds the sidecar to Pods that ask for it",
    long_about = "Serve the mutating admission webhook that adds the leasekeeper sidecar to every Pod annotated leasekeeper.io/inject: \"true\", with one leasekeeper.io/<flag> annotation per setting.",
    max_term_width = 100
)]
pub struct InjectCli {
    /// Where the webhook listens (HTTPS).
    #[arg(
        long,
        env = "LEASEKEEPER_INJECT_LISTEN_ADDR",
        default_value = "0.0.0.0:8443"
    )]
    pub listen_addr: String,
    /// The serving certificate chain (PEM), read again when the file changes (required).
    #[arg(long, env = "LEASEKEEPER_INJECT_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The serving certificate's private key (PEM), read again when the file changes (required).
    #[arg(long, env = "LEASEKEEPER_INJECT_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// YAML file holding the sidecar container the chart renders, named leasekeeper (required).
    #[arg(long, env = "LEASEKEEPER_INJECT_SIDECAR_TEMPLATE")]
    pub sidecar_template: Option<PathBuf>,
    /// Inject native sidecars (init containers with restartPolicy Always): auto (from the API server's version, 1.29 and later), true or false.
    #[arg(
        long,
        env = "LEASEKEEPER_INJECT_NATIVE_SIDECARS",
        default_value = "auto"
    )]
    pub native_sidecars: String,
    /// Where /metrics, /healthz and /readyz are served (plain HTTP).
    #[arg(
        long,
        env = "LEASEKEEPER_INJECT_METRICS_ADDR",
        default_value = "0.0.0.0:4041"
    )]
    pub metrics_addr: String,
    /// Watch for Pods that asked for the sidecar and run without it: count them and record a Warning Event on each.
    #[arg(long, env = "LEASEKEEPER_INJECT_WATCH_MISSED", default_value = "true")]
    pub watch_missed: String,
    /// kubeconfig file for the Kubernetes API out of a cluster [default: $KUBECONFIG, ~/.kube/config, else the Pod's service account].
    #[arg(long, env = "LEASEKEEPER_INJECT_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Log format: text or json.
    #[arg(long, env = "LEASEKEEPER_INJECT_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
    /// Exec mode's copy step (the init container the injector adds): copy this binary into DIR and exit.
    #[arg(long = "copy-binary-to", value_name = "DIR")]
    pub copy_binary_to: Option<PathBuf>,
}

/// `--native-sidecars`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeSidecars {
    Auto,
    On,
    Off,
}

/// The validated flags.
#[derive(Debug)]
pub struct InjectSettings {
    pub listen: SocketAddr,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub template: Template,
    pub native: NativeSidecars,
    pub metrics: SocketAddr,
    pub watch_missed: bool,
    pub kubeconfig: Option<PathBuf>,
    pub log_format: LogFormat,
}

impl InjectCli {
    /// Every flag checked; the certificate and the template read once.
    pub fn settings(&self) -> Result<InjectSettings, ConfigError> {
        let required = |setting: &str, v: &Option<PathBuf>| {
            v.clone()
                .ok_or_else(|| bad(format!("{setting} is required")))
        };
        let cert_file = required("--tls-cert-file", &self.tls_cert_file)?;
        let key_file = required("--tls-key-file", &self.tls_key_file)?;
        tls::Serving::read(&cert_file, &key_file)?;
        let template = Template::read(
            "--sidecar-template",
            &required("--sidecar-template", &self.sidecar_template)?,
        )?;
        let native = match self.native_sidecars.trim() {
            "auto" => NativeSidecars::Auto,
            "true" => NativeSidecars::On,
            "false" => NativeSidecars::Off,
            other => {
                return Err(bad(format!(
                    "--native-sidecars {other:?} is unknown; choose auto, true or false"
                )))
            }
        };
        let log_format = match self.log_format.trim() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(bad(format!(
                    "--log-format {other:?} is unknown; choose text or json"
                )))
            }
        };
        if let Some(p) = &self.kubeconfig {
            std::fs::read(p)
                .map_err(|e| bad(format!("--kubeconfig {}: cannot read it: {e}", p.display())))?;
        }
        Ok(InjectSettings {
            listen: address("--listen-addr", &self.listen_addr)?,
            cert_file,
            key_file,
            template,
            native,
            metrics: address("--metrics-addr", &self.metrics_addr)?,
            watch_missed: parse_bool("--watch-missed", Some(&self.watch_missed))?,
            kubeconfig: self.kubeconfig.clone(),
            log_format,
        })
    }
}

fn address(setting: &str, raw: &str) -> Result<SocketAddr, ConfigError> {
    raw.trim().parse().map_err(|_| {
        bad(format!(
            "{setting} {raw:?} is not an address; write it like 0.0.0.0:8443"
        ))
    })
}

/// Runs the injector; `args` is the whole command line (`leasekeeper inject …`).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli: InjectCli = match super::parse_cli("leasekeeper inject", args, USAGE) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    if let Some(dir) = &cli.copy_binary_to {
        return match copy_binary(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: --copy-binary-to {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        };
    }
    let settings = match cli.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(USAGE);
        }
    };
    let _logging = super::init_logging(settings.log_format);
    super::block_on(run(settings), ExitCode::FAILURE)
}

/// Exec mode's copy step: this very binary into `dir`, executable by every user,
/// written under another name first so that no one runs half a file.
fn copy_binary(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let exe = std::env::current_exe()?;
    let partial = dir.join(".leasekeeper.partial");
    std::fs::copy(&exe, &partial)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&partial, dir.join("leasekeeper"))
}

async fn run(s: InjectSettings) -> anyhow::Result<ExitCode> {
    let metrics = Arc::new(InjectorMetrics::default());
    let serving = Arc::new(tls::Serving::load(&s.cert_file, &s.key_file)?);
    let listener = tokio::net::TcpListener::bind(s.listen)
        .await
        .with_context(|| format!("--listen-addr {}: cannot listen", s.listen))?;
    let metrics_listener = tokio::net::TcpListener::bind(s.metrics)
        .await
        .with_context(|| format!("--metrics-addr {}: cannot listen", s.metrics))?;
    let needs_api = s.watch_missed || s.native == NativeSidecars::Auto;
    let client = match needs_api {
        true => Some(crate::kube_api::client(s.kubeconfig.as_deref()).await?),
        false => None,
    };
    let native = match (s.native, &client) {
        (NativeSidecars::On, _) => true,
        (NativeSidecars::Off, _) => false,
        (NativeSidecars::Auto, Some(client)) => native_sidecars_served(client).await?,
        (NativeSidecars::Auto, None) => false,
    };
    tracing::info!(
        listen = %s.listen,
        metrics = %s.metrics,
        native_sidecars = native,
        watch_missed = s.watch_missed,
        "leasekeeper injector serving"
    );
    tokio::spawn(tls::keep_reloading(serving.clone(), metrics.clone()));
    if let (true, Some(client)) = (s.watch_missed, client) {
        tokio::spawn(watch::run(client, metrics.clone()));
    }
    let injector = Arc::new(Injector::new(s.template, native));
    serve::serve(listener, metrics_listener, serving, injector, metrics).await?;
    Ok(ExitCode::SUCCESS)
}

/// Whether the API server runs native sidecars (1.29 and later), from `/version`;
/// asked a few times before giving up, so that a start beside a restarting API
/// server does not fail at once.
async fn native_sidecars_served(client: &kube::Client) -> anyhow::Result<bool> {
    let mut last = None;
    for attempt in 0..5u32 {
        match client.apiserver_version().await {
            Ok(info) => {
                let native = version_has_native_sidecars(&info.major, &info.minor);
                tracing::info!(version = %info.git_version, native, "API server version");
                return Ok(native);
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
    }
    let why = last.map(|e| e.to_string()).unwrap_or_default();
    anyhow::bail!(
        "--native-sidecars auto: cannot read the API server's version (/version): {why}; set --native-sidecars true or false"
    )
}

/// `major.minor` at 1.29 or later (a minor like `29+`, as some distributions give it,
/// counts as 29).
fn version_has_native_sidecars(major: &str, minor: &str) -> bool {
    let number = |s: &str| -> u32 {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(0)
    };
    (number(major), number(minor)) >= (1, 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_sidecars_come_with_1_29() {
        for (major, minor, want) in [
            ("1", "28", false),
            ("1", "29", true),
            ("1", "29+", true),
            ("1", "33", true),
            ("2", "0", true),
            ("", "", false),
        ] {
            assert_eq!(
                version_has_native_sidecars(major, minor),
                want,
                "{major}.{minor}"
            );
        }
    }

    #[test]
    fn the_copy_step_is_a_flag_of_inject() {
        let flag = crate::inject::mutate::COPY_FLAG;
        let cli = InjectCli::try_parse_from(["inject", flag, "/leasekeeper/bin"]).expect("parses");
        assert_eq!(cli.copy_binary_to, Some(PathBuf::from("/leasekeeper/bin")));
    }

    #[test]
    fn bad_flags_name_themselves() {
        let parse = |args: &[&str]| {
            let cli =
                InjectCli::try_parse_from(std::iter::once("inject").chain(args.iter().copied()))
                    .expect("clap");
            cli.settings().expect_err("bad").to_string()
        };
        assert_eq!(parse(&[]), "--tls-cert-file is required");
        let e = parse(&[
            "--tls-cert-file",
            "/nonexistent/c",
            "--tls-key-file",
            "/nonexistent/k",
        ]);
        assert!(
            e.starts_with("--tls-cert-file /nonexistent/c: cannot read it"),
            "{e}"
        );
    }
}
