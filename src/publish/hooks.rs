//! Role-change hooks (DESIGN §10, "be told"): `--on-change CMD` runs `sh -c CMD` with
//! the Status JSON on stdin, and `--notify-url URL` gets it as a POST, on every change
//! of role, leader or token.
//!
//! A hook never holds up the elector: each kind has one runner that takes the newest
//! change when it is free (changes that came while it was busy collapse into the
//! newest), a command that runs past `--hook-timeout` is killed with every process of
//! its process group (each hook runs in a group of its own), and a POST is retried
//! a few times with backoff, given up for a newer change.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio::time::{sleep, timeout, timeout_at, Instant};

use crate::backoff::Backoff;
use crate::settings::{bad, duration_or, fmt_d, parse_http_url, ConfigError};
use crate::status::{Role, Status};

/// The hook flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Hooks")]
pub struct Args {
    /// Command run (sh -c) on each change, the Status JSON on its stdin.
    #[arg(long, value_name = "COMMAND", env = "LEASEKEEPER_ON_CHANGE")]
    pub on_change: Option<String>,
    /// http:// URL POSTed the Status JSON on each such change.
    #[arg(long, value_name = "URL", env = "LEASEKEEPER_NOTIFY_URL")]
    pub notify_url: Option<String>,
    /// Longest --on-change run, and --notify-url POST [default: 10s].
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEKEEPER_HOOK_TIMEOUT",
        allow_hyphen_values = true
    )]
    pub hook_timeout: Option<String>,
}

impl Args {
    pub fn settings(&self) -> Result<HookSettings, ConfigError> {
        Ok(HookSettings {
            on_change: match self.on_change.as_deref().map(str::trim) {
                Some("") => return Err(bad("--on-change is empty; give a shell command")),
                other => other.map(str::to_owned),
            },
            notify_url: self
                .notify_url
                .as_deref()
                .map(|u| parse_http_url("--notify-url", u))
                .transpose()?,
            timeout: duration_or(
                "--hook-timeout",
                self.hook_timeout.as_deref(),
                Duration::from_secs(10),
            )?,
        })
    }
}

/// Where role changes go.
#[derive(Clone, Debug, Default)]
pub struct HookSettings {
    /// Run through `sh -c` on every change.
    pub on_change: Option<String>,
    /// POSTed the Status JSON on every change (http:// only).
    pub notify_url: Option<hyper::Uri>,
    /// The longest a hook command may run, and a POST attempt may take.
    pub timeout: Duration,
}

impl HookSettings {
    /// Whether any hook is set.
    pub fn any(&self) -> bool {
        self.on_change.is_some() || self.notify_url.is_some()
    }
}

/// One change, as the hooks see it.
#[derive(Clone, Debug)]
struct Change {
    json: String,
    state: &'static str,
    leader: String,
    token: String,
    election: String,
    identity: String,
}

/// POST attempts per change, the first retry after 100 ms, doubling.
const POST_ATTEMPTS: u32 = 5;

pub struct Hooks {
    settings: HookSettings,
    status: watch::Receiver<Status>,
}

impl Hooks {
    pub fn new(settings: HookSettings, status: watch::Receiver<Status>) -> Hooks {
        Hooks { settings, status }
    }

    /// Runs until the status channel closes.
    pub async fn run(mut self) {
        let (tx, _) = watch::channel::<Option<Change>>(None);
        let mut runners = Vec::new();
        if let Some(cmd) = self.settings.on_change.clone() {
            runners.push(tokio::spawn(run_commands(
                cmd,
                self.settings.timeout,
                tx.subscribe(),
            )));
        }
        if let Some(url) = self.settings.notify_url.clone() {
            runners.push(tokio::spawn(post_changes(
                url,
                self.settings.timeout,
                tx.subscribe(),
            )));
        }
        let mut last = None;
        loop {
            let change = {
                let s = self.status.borrow_and_update();
                let now = Instant::now();
                let view = s.view_at(now);
                let key = (
                    view.state,
                    view.leader.clone(),
                    view.fencing_token.map(|t| t.to_string()),
                );
                if last.as_ref() == Some(&key) {
                    None
                } else {
                    last = Some(key);
                    Some(Change {
                        json: serde_json::to_string(&view).unwrap_or_default(),
                        state: view.state.as_str(),
                        leader: view.leader.clone().unwrap_or_default(),
                        token: view
                            .fencing_token
                            .map(|t| t.to_string())
                            .unwrap_or_default(),
                        election: view.election.clone(),
                        identity: view.identity.clone(),
                    })
                }
            };
            if let Some(change) = change {
                // Nobody knows yet who leads: not worth telling.
                if change.state != Role::Unknown.as_str() {
                    tx.send_replace(Some(change));
                }
            }
            if self.status.changed().await.is_err() {
                // The runners finish what they have (the last change included) and stop.
                drop(tx);
                for runner in runners {
                    let _ = runner.await;
                }
                return;
            }
        }
    }
}

async fn run_commands(cmd: String, limit: Duration, mut changes: watch::Receiver<Option<Change>>) {
    while changes.changed().await.is_ok() {
        let Some(change) = changes.borrow_and_update().clone() else {
            continue;
        };
        let spawned = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .env("LEASEKEEPER_STATE", change.state)
            .env("LEASEKEEPER_LEADER", &change.leader)
            .env("LEASEKEEPER_FENCING_TOKEN", &change.token)
            .env("LEASEKEEPER_ELECTION", &change.election)
            .env("LEASEKEEPER_IDENTITY", &change.identity)
            .stdin(std::process::Stdio::piped())
            // A group of its own, so a hook that runs too long is killed with every
            // process it started (a `sh -c 'worker & wait'` leaves `worker` else).
            .process_group(0)
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "--on-change: cannot run the hook");
                continue;
            }
        };
        if let Some(mut stdin) = child.stdin.take() {
            let json = change.json.clone();
            // A hook that does not read its stdin must not block us.
            tokio::spawn(async move {
                let _ = stdin.write_all(json.as_bytes()).await;
            });
        }
        match timeout(limit, child.wait()).await {
            Ok(Ok(status)) if status.success() => {
                tracing::debug!(state = change.state, "--on-change hook ran");
            }
            Ok(Ok(status)) => {
                tracing::warn!(state = change.state, %status, "--on-change hook failed");
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "--on-change hook: cannot wait for it"),
            Err(_) => {
                tracing::warn!(
                    state = change.state,
                    timeout = %fmt_d(limit),
                    "--on-change hook ran too long; killed"
                );
                kill_group(&child);
                let _ = child.kill().await;
            }
        }
    }
}

/// SIGKILL to the hook's process group (its id is the hook's pid).
fn kill_group(child: &tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) on the process group of a child we started and not yet
        // reaped, so the group id cannot have been reused.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

async fn post_changes(
    url: hyper::Uri,
    limit: Duration,
    mut changes: watch::Receiver<Option<Change>>,
) {
    let client = http_client();
    // Whether a newer change arrived during the retries of the last one.
    let mut newer = false;
    loop {
        if !newer && changes.changed().await.is_err() {
            return;
        }
        newer = false;
        let Some(change) = changes.borrow_and_update().clone() else {
            continue;
        };
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(60));
        for attempt in 1..=POST_ATTEMPTS {
            match post_json(&client, &url, &change.json, Instant::now() + limit).await {
                Ok(()) => break,
                Err(error) => {
                    tracing::warn!(
                        attempt,
                        error,
                        state = change.state,
                        "--notify-url: POST failed"
                    );
                }
            }
            if attempt == POST_ATTEMPTS {
                break;
            }
            // A newer change replaces this one.
            tokio::select! {
                _ = sleep(backoff.next_wait()) => {}
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    newer = true;
                    break;
                }
            }
        }
    }
}

/// The plain-HTTP client of the hooks and the drain.
pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// A client for [`post_json`].
pub fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// POSTs `json` to `url`; `Ok` for a 2xx answer by `until`, else what went wrong.
pub async fn post_json(
    client: &HttpClient,
    url: &hyper::Uri,
    json: &str,
    until: Instant,
) -> Result<(), String> {
    let request = hyper::Request::post(url.clone())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(json.to_owned())))
        .map_err(|e| e.to_string())?;
    let answer = timeout_at(until, async {
        let response = client.request(request).await?;
        let status = response.status();
        // Read the answer to the end so the connection can be reused.
        let _ = response.into_body().collect().await;
        Ok::<_, hyper_util::client::legacy::Error>(status)
    })
    .await;
    match answer {
        Ok(Ok(status)) if status.is_success() => Ok(()),
        Ok(Ok(status)) => Err(format!("answered {status}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in time".to_owned()),
    }
}
