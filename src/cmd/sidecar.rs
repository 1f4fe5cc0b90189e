//! The sidecar itself (`leasekeeper [flags]` and `leasekeeper run [flags] -- CMD`):
//! validate the settings, bind the listener (for `run`, only when `--http-addr` asks
//! for one), build the backend, start the elector and the publishers, wait for a
//! signal or the end, and step down.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::error::ErrorKind;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::backend::slots::Slots;
use crate::backend::store::{BuildContext, Serve};
use crate::backend::{Backend, SlowPaths};
use crate::config::{Cli, CliError, Settings};
use crate::elector::{
    await_shown, Elector, ElectorParts, Exit, Heartbeat, ReleaseRequest, TransitionLog,
};
use crate::publish::drain::Drain;
#[cfg(feature = "kubernetes")]
use crate::publish::events::Events;
use crate::publish::exec::{self, Ended, Supervisor};
use crate::publish::hooks::Hooks;
use crate::publish::http::{
    leadership_changes, router, ApiState, HttpSettings, Limits, HEAD_TIMEOUT,
};
#[cfg(feature = "kubernetes")]
use crate::publish::label::PodLabeler;
use crate::publish::metrics::Metrics;
use crate::status::Status;
use crate::timing::Timing;

use super::exit::{self, USAGE};

mod signals;
use signals::Signals;

/// Runs the sidecar; `args` is the whole command line (with `run` and its command).
pub fn main(args: Vec<OsString>) -> ExitCode {
    // As a container's PID 1: a parent that reaps orphans and passes signals on.
    if let Some(code) = crate::init::reap_as_pid_1() {
        return code;
    }
    // Before any thread starts, so that every thread inherits the mask.
    signals::block();
    let settings = match settings(args) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let _logging = super::init_logging(settings.log_format);
    for warning in &settings.warnings {
        tracing::warn!("{warning}");
    }
    raise_open_files();
    super::block_on(run(settings), ExitCode::from(USAGE))
}

/// The validated settings, or the exit code after printing why not (or the help).
fn settings(args: Vec<OsString>) -> Result<Settings, ExitCode> {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        ExitCode::from(USAGE)
    };
    // `run`'s flags are parsed before its command is looked for: `run --help` is help.
    let (command, args, cmd) = match super::run::split(args.clone()) {
        Some(line) => (super::run::command(), line.flags, Some(line.cmd)),
        None => (super::help::command(), args, None),
    };
    let cli = match Cli::parse_layers_with(command, args) {
        Ok(cli) => cli,
        Err(CliError::Clap(e))
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
        {
            let _ = e.print();
            return Err(ExitCode::SUCCESS);
        }
        Err(CliError::Clap(e)) => {
            if let Some(flag) = run_only_flag(&e) {
                return Err(fail(&format!(
                    "{flag} is a flag of `leasekeeper run [flags] -- CMD` only"
                )));
            }
            let text = e.to_string();
            let line = crate::settings::first_line(&text);
            return Err(fail(&line.strip_prefix("error: ").unwrap_or(&line)));
        }
        Err(CliError::Config(e)) => return Err(fail(&e)),
    };
    let cmd = match cmd {
        Some(cmd) => Some(super::run::command_of(cmd).map_err(|e| fail(&e))?),
        None => None,
    };
    let settings = Settings::from_cli(cli, cmd).map_err(|e| fail(&e))?;
    if let Some(exec) = &settings.exec {
        super::run::check_program(&exec.cmd[0]).map_err(|e| fail(&e))?;
    }
    Ok(settings)
}

/// What every backend's run shares once the input is known to be good.
struct Start {
    settings: Settings,
    /// The HTTP API's socket, when there is one.
    listener: Option<tokio::net::TcpListener>,
    log: TransitionLog,
    kube: Option<crate::kube_api::Client>,
    /// A client of its own for the Events (its own connections: an Event written at a
    /// step-down must not take the connection the release is about to use).
    events_kube: Option<crate::kube_api::Client>,
    /// A client of its own for the backend's watches (see [`BuildContext::kube_watches`]).
    watches_kube: Option<crate::kube_api::Client>,
    /// The backend's renewals that fell back to a read, for the metrics.
    slow_paths: SlowPaths,
    /// The sidecar's stop: raised by the first SIGTERM or SIGINT (listened for since
    /// the start), or by the end of exec mode's command; the elector steps down and
    /// releases on it.
    stop: (watch::Sender<bool>, watch::Receiver<bool>),
}

async fn run(settings: Settings) -> anyhow::Result<ExitCode> {
    // From here on SIGTERM and SIGINT are ours: one that comes while the sidecar is
    // still starting is a graceful stop too (before the elector runs: at once).
    let stop = watch::channel(false);
    Signals::listen().raise(stop.0.clone());
    // Everything that can be bad input is checked before the backend is touched.
    let listener = match settings.http.addr {
        Some(addr) => {
            Some(listen(addr).with_context(|| format!("--http-addr {addr}: cannot listen"))?)
        }
        None => None,
    };
    let log_path = settings.transition_log.as_deref();
    let log = TransitionLog::open(log_path, &settings.identity).with_context(|| {
        format!(
            "--transition-log {}: cannot open it",
            log_path
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        )
    })?;
    // The Kubernetes API client, when the backend or the Pod label needs one.
    let needs_kube =
        settings.pod_label.is_some() || settings.backend.capabilities().kubernetes_client;
    let kubeconfig = settings.kubeconfig.as_deref();
    let kube = match needs_kube {
        true => Some(crate::kube_api::client(kubeconfig).await?),
        false => None,
    };
    let events_kube = match settings.events.is_some() {
        true => Some(crate::kube_api::client(kubeconfig).await?),
        false => None,
    };
    let watches_kube = match settings.backend.capabilities().kubernetes_client {
        true => Some(crate::kube_api::client(kubeconfig).await?),
        false => None,
    };
    with_backend(Start {
        settings,
        listener,
        log,
        kube,
        events_kube,
        watches_kube,
        slow_paths: SlowPaths::default(),
        stop,
    })
    .await
}

/// The status port's socket, with a long accept queue: a burst of connections (a
/// crowd reconnecting) must not fill it, or a probe's SYN is dropped and retried only
/// a second later.
fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// The flag of `run` that a command line without `run` gave (clap's "unexpected
/// argument"), to say where it belongs.
fn run_only_flag(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let name = arg.split('=').next()?.strip_prefix("--")?;
    exec::FLAGS.contains(&name).then(|| format!("--{name}"))
}

/// Builds the chosen backend (one per slot) and serves with it.
async fn with_backend(start: Start) -> anyhow::Result<ExitCode> {
    let s = &start.settings;
    let cx = BuildContext {
        election: s.election.clone(),
        identity: s.identity.clone(),
        timing: s.timing,
        mode: s.mode,
        holders: s.holders,
        kube: start.kube.clone(),
        kube_watches: start.watches_kube.clone(),
        slow_paths: start.slow_paths.clone(),
        stop: start.stop.1.clone(),
    };
    let backend = s.backend.clone();
    backend.build_and(cx, start).await?
}

impl Serve for Start {
    type Output = anyhow::Result<ExitCode>;

    async fn serve<B: Backend>(self, slots: Vec<B>) -> Self::Output {
        serve(slots, self).await
    }
}

/// The publishers' tasks and what the main loop and the shutdown need of them.
struct Running {
    elector: JoinHandle<Exit>,
    shutdown: watch::Sender<bool>,
    own_releases: mpsc::Sender<ReleaseRequest>,
    ended: Option<mpsc::Receiver<Ended>>,
    restart: bool,
    label_clear: Vec<watch::Receiver<bool>>,
    labeler: Option<JoinHandle<()>>,
    /// The leadership Events: ends (after its last writes) once the elector is gone.
    events: Option<JoinHandle<()>>,
    /// Tasks that may simply stop (the supervisor, the drain).
    abort: Vec<JoinHandle<()>>,
    hooks: Option<JoinHandle<()>>,
    /// The HTTP API's stop and end, when it runs.
    http: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    /// `run --wait-timeout`: resolves when no slot was taken in time.
    gave_up: Option<JoinHandle<()>>,
}

async fn serve<B: Backend>(slots: Vec<B>, start: Start) -> anyhow::Result<ExitCode> {
    let mut stop = start.stop.1.clone();
    if *stop.borrow() {
        tracing::info!("stopped before the elector started: nothing held, nothing to release");
        return Ok(ExitCode::SUCCESS);
    }
    let settings = start.settings.clone();
    let backend = Slots::new(slots, &settings.identity);
    let backend_name = backend.name();
    let mut running = spawn_all(backend, start);
    tracing::info!(
        election = %settings.election,
        identity = %settings.identity,
        backend = backend_name,
        http = %settings.http.addr.map_or("off".to_owned(), |a| a.to_string()),
        ttl = %crate::settings::fmt_d(settings.timing.ttl),
        "leasekeeper started"
    );
    let (exit, exec_code) = wait_for_the_end(&mut running, &mut stop).await;
    stop_publishers(running, &settings).await;
    exit_code(exit, exec_code)
}

/// Wires the status channel between the elector and every publisher and starts them.
fn spawn_all<B: Backend>(backend: B, start: Start) -> Running {
    let Start {
        settings,
        listener,
        log,
        kube,
        events_kube,
        watches_kube: _,
        slow_paths,
        stop: (shutdown, shutdown_rx),
    } = start;
    let t = &settings.timing;
    let mut status = Status::new(
        &settings.election,
        &settings.identity,
        backend.name(),
        t.ttl,
    );
    status.mode = settings.mode.held_as();
    let (status_tx, status_rx) = watch::channel(status);
    let (release_tx, release_rx) = mpsc::channel(1);
    let heartbeat = Heartbeat::new(t);
    let metrics = Arc::new(Metrics::new(backend.name(), &settings.election, slow_paths));
    let kube = kube_publishers(&settings, [kube, events_kube], &status_rx, &metrics);
    let label_clear = kube.label_clear.clone();
    let restart = settings.exec.as_ref().is_some_and(|e| e.restart);
    let (supervisor, must_stop, ended) = match settings.exec.clone() {
        Some(exec) => {
            let claim = t.claim_length(t.ttl);
            let (sup, stopped, ended) = Supervisor::new(
                exec,
                status_rx.clone(),
                claim,
                t.renew_interval + t.backend_timeout,
            );
            (Some(sup), vec![stopped], Some(ended))
        }
        None => (None, Vec::new(), None),
    };
    let (drain, drained) = match &settings.drain.url {
        Some(url) => {
            let (drain, done) = Drain::new(url.clone(), settings.drain.timeout, status_rx.clone());
            (Some(drain), vec![done])
        }
        None => (None, Vec::new()),
    };
    let hooks = settings
        .hooks
        .any()
        .then(|| Hooks::new(settings.hooks.clone(), status_rx.clone()));
    let elector = Elector::new(
        backend,
        ElectorParts {
            timing: *t,
            status: status_tx,
            observer: metrics.clone(),
            log,
            releases: release_rx,
            shutdown: shutdown_rx,
            heartbeat: heartbeat.clone(),
            exit_on_loss: settings.exit_on_loss,
            before_release: label_clear.clone(),
            must_stop,
            drained,
            drain_timeout: settings.drain.timeout,
        },
    );
    let releases = settings
        .http
        .enable_release_endpoint
        .then(|| release_tx.clone());
    let gave_up = (settings.exec.as_ref().and_then(|e| e.wait_timeout)).map(|wait| {
        let unanswered = t.backend_timeout * 2;
        tokio::spawn(exec::gave_up_waiting(status_rx.clone(), wait, unanswered))
    });
    let http = listener.map(|listener| {
        let api = api(&settings.http, t, status_rx, heartbeat, metrics, releases);
        serve_http(listener, api, http_limits(&settings.http))
    });
    let abort = [
        supervisor.map(|s| tokio::spawn(s.run())),
        drain.map(|d| tokio::spawn(d.run())),
    ];
    Running {
        gave_up,
        elector: tokio::spawn(elector.run()),
        shutdown,
        own_releases: release_tx,
        ended,
        restart,
        label_clear,
        labeler: kube.labeler,
        events: kube.events,
        abort: abort.into_iter().flatten().collect(),
        hooks: hooks.map(|h| tokio::spawn(h.run())),
        http,
    }
}

/// The publishers that talk to the Kubernetes API, started.
#[derive(Default)]
struct KubePublishers {
    labeler: Option<JoinHandle<()>>,
    /// The label's "not leader is shown" signals, for the elector's release.
    label_clear: Vec<watch::Receiver<bool>>,
    events: Option<JoinHandle<()>>,
}

/// The Pod labeler (when the label is on) and the Events (when recorded), each on its
/// own client (`clients`: the label's, the Events').
#[cfg(feature = "kubernetes")]
fn kube_publishers(
    settings: &Settings,
    clients: [Option<kube::Client>; 2],
    status_rx: &watch::Receiver<Status>,
    metrics: &Arc<Metrics>,
) -> KubePublishers {
    let [kube, events_kube] = clients;
    let events = match (&settings.events, events_kube) {
        (Some(subject), Some(client)) => {
            Some(Events::new(client, subject.clone(), status_rx.clone()))
        }
        _ => None,
    };
    let timeout = settings.timing.backend_timeout;
    let labeler = match (settings.pod_label.clone(), kube) {
        (Some(label), Some(client)) => Some(PodLabeler::new(
            client,
            label,
            status_rx.clone(),
            metrics.clone(),
            timeout,
        )),
        _ => None,
    };
    KubePublishers {
        label_clear: labeler.iter().map(PodLabeler::clear).collect(),
        labeler: labeler.map(|l| tokio::spawn(l.run())),
        events: events.map(|e| tokio::spawn(e.run())),
    }
}

/// Without the `kubernetes` feature there is no client (the settings refused the
/// label and the Events), so nothing to start.
#[cfg(not(feature = "kubernetes"))]
fn kube_publishers(
    _settings: &Settings,
    _clients: [Option<crate::kube_api::Client>; 2],
    _status_rx: &watch::Receiver<Status>,
    _metrics: &Arc<Metrics>,
) -> KubePublishers {
    KubePublishers::default()
}

/// The HTTP API's routes over what they read.
fn api(
    http: &HttpSettings,
    timing: &Timing,
    status: watch::Receiver<Status>,
    heartbeat: Arc<Heartbeat>,
    metrics: Arc<Metrics>,
    releases: Option<mpsc::Sender<ReleaseRequest>>,
) -> axum::Router {
    router(ApiState {
        changes: leadership_changes(status.clone()),
        status,
        heartbeat,
        metrics,
        releases,
        watchers: Arc::new(tokio::sync::Semaphore::new(http.max_watchers)),
        // A /watch subscriber hears from a live sidecar more often than once a ttl: a
        // silence longer than that means the sidecar (or the link to it) is gone.
        keep_alive: (timing.ttl / 3).min(Duration::from_secs(15)),
    })
}

/// The status port's limits: the connection cap, kept below the open-files limit
/// (the backend's connections and the process's own files need some).
fn http_limits(http: &HttpSettings) -> Limits {
    let files = open_files_limit();
    let room = usize::try_from(files.saturating_sub(64))
        .unwrap_or(usize::MAX)
        .max(16);
    if room < http.max_connections {
        tracing::warn!(
            max_connections = http.max_connections,
            open_files = files,
            used = room,
            "--http-max-connections is above what the open-files limit allows; using less"
        );
    }
    Limits {
        max_connections: http.max_connections.min(room),
        head_timeout: HEAD_TIMEOUT,
    }
}

/// The HTTP API on a thread and runtime of its own, so that no load on the status
/// port delays the elector's renewals. Resolves when the server has stopped.
fn serve_http(
    listener: tokio::net::TcpListener,
    api: axum::Router,
    limits: Limits,
) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let (done_tx, done) = oneshot::channel::<()>();
    let listener = listener.into_std();
    let thread = std::thread::Builder::new()
        .name("http".to_owned())
        .spawn(move || {
            let runtime = match super::runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the HTTP runtime");
                    return;
                }
            };
            runtime.block_on(async move {
                match listener.and_then(tokio::net::TcpListener::from_std) {
                    Ok(listener) => {
                        crate::publish::http::serve(listener, api, limits, stopped).await
                    }
                    Err(e) => tracing::error!(error = %e, "cannot serve the status port"),
                }
            });
            let _ = done_tx.send(());
        });
    if let Err(e) = thread {
        tracing::error!(error = %e, "cannot start the HTTP thread");
    }
    (
        stop,
        tokio::spawn(async move {
            let _ = done.await;
        }),
    )
}

/// Raises the open-files soft limit to the hard limit (a crowd of clients on the
/// status port must not starve the backend of descriptors).
fn raise_open_files() {
    let Some(mut lim) = open_files() else {
        return;
    };
    let before = lim.rlim_cur;
    if before >= lim.rlim_max {
        return;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit on this process with a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        tracing::info!(
            from = before,
            to = lim.rlim_cur,
            "raised the open-files limit"
        );
    } else {
        tracing::warn!(limit = before, "could not raise the open-files limit");
    }
}

/// The open-files soft limit now (1024 when it cannot be read).
fn open_files_limit() -> u64 {
    open_files().map_or(1024, |lim| lim.rlim_cur)
}

fn open_files() -> Option<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit on this process with a valid struct.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim)
}

/// Waits for the elector to end, a signal, or CMD's end (exec mode). Returns how the
/// elector ended and CMD's own exit code when `run` ends because CMD did.
async fn wait_for_the_end(
    r: &mut Running,
    stop: &mut watch::Receiver<bool>,
) -> (Result<Exit, tokio::task::JoinError>, Option<i32>) {
    let shutdown = stop.wait_for(|stopped| *stopped);
    tokio::pin!(shutdown);
    loop {
        let command_ended = async {
            match r.ended.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let gave_up = async {
            match r.gave_up.as_mut() {
                Some(task) => task.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            exit = &mut r.elector => return (exit, None),
            Ok(()) = gave_up => {
                tracing::warn!("no slot was taken within --wait-timeout; exiting {}", exit::sidecar::GAVE_UP);
                let _ = r.shutdown.send(true);
                return ((&mut r.elector).await, Some(i32::from(exit::sidecar::GAVE_UP)));
            }
            // The lines of a stop come once the elector has ended: written while the
            // successor takes over, they would delay it (see the elector's `LINGER`).
            _ = &mut shutdown => {
                let exit = (&mut r.elector).await;
                tracing::info!("shut down on a stop signal: stepped down and left the election");
                return (exit, None);
            }
            Some(how) = command_ended => match how {
                Ended::ByItself(code) if !r.restart => {
                    let _ = r.shutdown.send(true);
                    let exit = (&mut r.elector).await;
                    tracing::info!(code, "the command exited; left the election, exiting with its code");
                    return (exit, Some(code));
                }
                Ended::ByItself(code) => {
                    tracing::info!(code, "the command exited; releasing and campaigning again (--restart)");
                    request_release(&r.own_releases).await;
                }
                Ended::Deadline => {
                    tracing::warn!("the command was stopped as the claim's deadline came near; releasing");
                    request_release(&r.own_releases).await;
                }
                Ended::GuardLost { proven: true } => {
                    tracing::warn!("the command's guard was killed; the command's PID namespace ended with it; releasing");
                    request_release(&r.own_releases).await;
                }
                Ended::GuardLost { proven: false } => {
                    tracing::error!("the command's guard was killed and nothing proves the command's processes ended with it; stepping down and exiting without releasing");
                    return (leave_unproven(r).await, Some(i32::from(exit::sidecar::UNPROVEN)));
                }
            },
        }
    }
}

/// The command's processes may run on: step down ("not leader" is published at
/// once) but neither release nor wait for the claim's deadline. The lease expires by
/// itself; as a container's PID 1, this process's end ends those processes.
async fn leave_unproven(r: &mut Running) -> Result<Exit, tokio::task::JoinError> {
    let _ = r.shutdown.send(true);
    match tokio::time::timeout(Duration::from_secs(1), &mut r.elector).await {
        Ok(exit) => exit,
        Err(_) => {
            // Waiting in vain for the command's end (no release comes from there).
            r.elector.abort();
            Ok(Exit::Shutdown)
        }
    }
}

/// After the elector ended: let the last change reach the hooks and the label, then
/// stop the API.
async fn stop_publishers(mut r: Running, settings: &Settings) {
    for task in r.abort {
        task.abort();
    }
    if let Some(task) = r.hooks {
        // The last change (this candidate gone) may still be on its way; not for long.
        let _ = tokio::time::timeout(Duration::from_millis(500), task).await;
    }
    let http = r.http.map(|(stop, task)| {
        let _ = stop.send(());
        task
    });
    if let Some(task) = r.events {
        // "stopped leading" may still be on its way; within the backend timeout.
        let _ = tokio::time::timeout(settings.timing.backend_timeout, task).await;
    }
    if let Some(task) = r.labeler {
        // Leaving for any reason (a loss with --exit-on-loss too): let the label show
        // "not leader" before the labeler goes, within the backend timeout.
        await_shown(&mut r.label_clear, settings.timing.backend_timeout).await;
        task.abort();
    }
    // Open /watch streams would hold a graceful HTTP stop forever; do not wait long.
    if let Some(task) = http {
        let _ = tokio::time::timeout(Duration::from_millis(200), task).await;
    }
}

fn exit_code(
    exit: Result<Exit, tokio::task::JoinError>,
    exec_code: Option<i32>,
) -> anyhow::Result<ExitCode> {
    match exit {
        Ok(Exit::Shutdown) if exec_code.is_some() => Ok(ExitCode::from(
            exec_code.and_then(|c| u8::try_from(c).ok()).unwrap_or(1),
        )),
        Ok(Exit::Shutdown) => {
            tracing::info!("stopped");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Exit::LostLeadership) => {
            tracing::warn!("exiting because leadership was lost (--exit-on-loss)");
            Ok(ExitCode::from(exit::sidecar::LOST))
        }
        Err(e) => Err(anyhow::anyhow!("the elector task failed: {e}")),
    }
}

/// Asks the elector to release, as `POST /release` does (the answer is not awaited).
async fn request_release(releases: &mpsc::Sender<ReleaseRequest>) {
    let (reply, _answer) = oneshot::channel();
    let _ = releases
        .send(ReleaseRequest {
            reply,
            cooldown: None,
            to: None,
        })
        .await;
}
