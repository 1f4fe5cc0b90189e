//! Wiring only: parse and validate, bind the listener, start the elector and the
//! publishers, wait for a signal.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::error::ErrorKind;
use clap::Parser;
use tokio::sync::{mpsc, watch};

use leasekeeper::backend::etcd::EtcdBackend;
use leasekeeper::backend::file::FileBackend;
use leasekeeper::backend::kubernetes::KubeBackend;
use leasekeeper::backend::redis::RedisBackend;
use leasekeeper::backend::redlock::RedlockBackend;
use leasekeeper::backend::sql::mysql::MysqlBackend;
use leasekeeper::backend::sql::postgres::PostgresBackend;
use leasekeeper::backend::sql::{Dialect, TableError};
use leasekeeper::backend::zookeeper::ZkBackend;
use leasekeeper::backend::Backend;
use leasekeeper::config::{BackendSettings, Cli, LogFormat, Settings};
use leasekeeper::elector::{
    await_shown, Elector, ElectorParts, Exit, Heartbeat, ReleaseRequest, TransitionLog,
};
use leasekeeper::publish::drain::Drain;
use leasekeeper::publish::exec::{self, Ended, ExecSettings, Supervisor};
use leasekeeper::publish::hooks::Hooks;
use leasekeeper::publish::http::{router, ApiState};
use leasekeeper::publish::label::PodLabeler;
use leasekeeper::publish::metrics::Metrics;
use leasekeeper::status::Status;

fn main() -> ExitCode {
    // rustls may see more than one crypto provider compiled in; pick ring explicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == exec::GUARD_ARG) {
        return exec::guard_main(args[2..].to_vec());
    }
    if args.get(1).is_some_and(|a| a == "status") {
        return leasekeeper::cmd::status::main(args);
    }
    let (args, run_cmd) = match leasekeeper::cmd::run::split(args.clone()) {
        Ok(Some(line)) => (line.flags, Some(line.cmd)),
        Ok(None) => (args, None),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.to_string();
            let line = text.lines().next().unwrap_or("bad command line");
            eprintln!(
                "{}",
                if line.starts_with("error:") {
                    line.to_owned()
                } else {
                    format!("error: {line}")
                }
            );
            return ExitCode::from(2);
        }
    };
    let settings = match Settings::from_cli(cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let exec = match run_cmd {
        Some(cmd) => {
            if let Err(e) = leasekeeper::cmd::run::check_program(&cmd[0]) {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            Some(ExecSettings {
                cmd,
                kill_grace: settings.kill_grace,
                restart: settings.restart,
            })
        }
        None if settings.run_only_flags => {
            eprintln!(
                "error: --kill-grace and --restart are for `leasekeeper run [flags] -- CMD` only"
            );
            return ExitCode::from(2);
        }
        None => None,
    };
    init_logging(settings.log_format);
    for warning in &settings.warnings {
        tracing::warn!("{warning}");
    }

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(settings, exec)) {
        Ok(code) => code,
        Err(e) => {
            // One line, whatever the error's own text looks like (a YAML parser's
            // caret diagram, say).
            let text = format!("{e:#}");
            let line = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("failed");
            eprintln!("error: {}", line.trim_end());
            ExitCode::from(2)
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

async fn run(settings: Settings, exec: Option<ExecSettings>) -> anyhow::Result<ExitCode> {
    // Everything that can be bad input is checked before the backend is touched.
    let listener = tokio::net::TcpListener::bind(settings.http_addr)
        .await
        .with_context(|| format!("--http-addr {}: cannot listen", settings.http_addr))?;
    let log = TransitionLog::open(settings.transition_log.as_deref(), &settings.identity)
        .with_context(|| {
            format!(
                "--transition-log {}: cannot open it",
                settings
                    .transition_log
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            )
        })?;
    let ttl = settings.timing.ttl;
    // The Kubernetes API client, when the backend or the Pod label needs one.
    let needs_kube = settings.pod_label.is_some()
        || matches!(settings.backend, BackendSettings::Kubernetes { .. });
    let kube = if needs_kube {
        Some(kube_client(settings.kubeconfig.as_deref()).await?)
    } else {
        None
    };
    match &settings.backend {
        BackendSettings::File { path } => {
            let backend = FileBackend::new(path.clone(), settings.identity.clone(), ttl);
            serve(backend, &settings, exec, listener, log, kube).await
        }
        BackendSettings::Redis(redis) => {
            let backend = RedisBackend::new(
                redis,
                &settings.election,
                &settings.identity,
                ttl,
                settings.timing.renew_interval,
                settings.timing.backend_timeout,
            )
            .context("--redis-url")?;
            serve(backend, &settings, exec, listener, log, kube).await
        }
        BackendSettings::Etcd(etcd) => {
            let backend = EtcdBackend::new(
                etcd,
                &settings.election,
                &settings.identity,
                ttl,
                settings.timing.renew_interval,
                settings.timing.backend_timeout,
            );
            serve(backend, &settings, exec, listener, log, kube).await
        }
        BackendSettings::Zookeeper(zk) => {
            let backend = ZkBackend::new(
                zk,
                &settings.election,
                &settings.identity,
                ttl,
                settings.timing.renew_interval,
            );
            serve(backend, &settings, exec, listener, log, kube).await
        }
        BackendSettings::Kubernetes { namespace } => {
            let client = kube.clone().context("kubernetes client")?;
            let backend = KubeBackend::new(
                client,
                namespace,
                &settings.election,
                &settings.identity,
                ttl,
            );
            serve(backend, &settings, exec, listener, log, kube).await
        }
        BackendSettings::Redlock(nodes) => {
            let backend = RedlockBackend::new(
                nodes,
                &settings.election,
                &settings.identity,
                ttl,
                settings.timing.renew_interval,
                settings.timing.backend_timeout,
            )
            .context("--redis-url")?;
            serve(backend, &settings, exec, listener, log, kube).await
        }
        BackendSettings::Sql(sql) => match sql.dialect() {
            Dialect::Postgres => {
                let mut backend = PostgresBackend::new(
                    sql,
                    &settings.election,
                    &settings.identity,
                    ttl,
                    settings.timing.backend_timeout,
                )
                .context("--postgres-url")?;
                check_table(backend.prepare(), &settings).await?;
                serve(backend, &settings, exec, listener, log, kube).await
            }
            Dialect::Mysql => {
                let mut backend = MysqlBackend::new(
                    sql,
                    &settings.election,
                    &settings.identity,
                    ttl,
                    &settings.timing,
                )
                .context("--mysql-url")?;
                check_table(backend.prepare(), &settings).await?;
                serve(backend, &settings, exec, listener, log, kube).await
            }
        },
    }
}

/// The lease table at start: a user who may not create a missing table is bad input;
/// a database that cannot be reached yet is not (the elector retries, and tries to
/// create the table again then).
async fn check_table(
    prepared: impl std::future::Future<Output = Result<(), TableError>>,
    settings: &Settings,
) -> anyhow::Result<()> {
    match tokio::time::timeout(settings.timing.backend_timeout, prepared).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e @ TableError::NotAllowed { .. })) => Err(e.into()),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not reach the database or prepare the lease table yet; retrying");
            Ok(())
        }
        Err(_) => {
            tracing::warn!("the database did not answer in time; retrying");
            Ok(())
        }
    }
}

/// The API client, built once at start (a missing configuration is bad input).
async fn kube_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("--kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("--kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!(
                "kubernetes: no usable API configuration (neither a service account in a Pod nor KUBECONFIG): {e}"
            )
        })?,
    };
    kube::Client::try_from(config).context("kubernetes: cannot build the API client")
}

async fn serve<B: Backend>(
    backend: B,
    settings: &Settings,
    exec: Option<ExecSettings>,
    listener: tokio::net::TcpListener,
    log: TransitionLog,
    kube: Option<kube::Client>,
) -> anyhow::Result<ExitCode> {
    let backend_name = backend.name();
    let (status_tx, status_rx) = watch::channel(Status::new(
        &settings.election,
        &settings.identity,
        backend_name,
        settings.timing.ttl,
    ));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (release_tx, release_rx) = mpsc::channel(1);
    let heartbeat = Heartbeat::new(&settings.timing);
    let metrics = Arc::new(Metrics::new(backend_name));

    let labeler = match (&settings.pod_label, kube) {
        (Some(label), Some(client)) => Some(PodLabeler::new(
            client,
            label.clone(),
            status_rx.clone(),
            metrics.clone(),
            settings.timing.backend_timeout,
        )),
        _ => None,
    };
    let mut label_clear: Vec<watch::Receiver<bool>> =
        labeler.iter().map(PodLabeler::clear).collect();
    let before_release = label_clear.clone();
    let restart = exec.as_ref().is_some_and(|e| e.restart);
    let (supervisor, must_stop, mut ended) = match exec {
        Some(exec) => {
            let t = &settings.timing;
            let (supervisor, stopped, ended) = Supervisor::new(
                exec,
                status_rx.clone(),
                t.claim_length(t.ttl),
                t.renew_interval + t.backend_timeout,
            );
            (Some(supervisor), vec![stopped], Some(ended))
        }
        None => (None, Vec::new(), None),
    };
    let own_releases = release_tx.clone();
    let (drain, drained) = match &settings.drain_url {
        Some(url) => {
            let (drain, done) = Drain::new(url.clone(), settings.drain_timeout, status_rx.clone());
            (Some(drain), vec![done])
        }
        None => (None, Vec::new()),
    };
    let hooks = (settings.hooks.on_change.is_some() || settings.hooks.notify_url.is_some())
        .then(|| Hooks::new(settings.hooks.clone(), status_rx.clone()));

    let elector = Elector::new(
        backend,
        ElectorParts {
            timing: settings.timing,
            status: status_tx,
            observer: metrics.clone(),
            log,
            releases: release_rx,
            shutdown: shutdown_rx,
            heartbeat: heartbeat.clone(),
            exit_on_loss: settings.exit_on_loss,
            before_release,
            must_stop,
            drained,
            drain_timeout: settings.drain_timeout,
        },
    );

    let api = router(ApiState {
        status: status_rx,
        heartbeat,
        metrics,
        releases: settings.enable_release_endpoint.then_some(release_tx),
    });
    let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(async move {
        axum::serve(
            listener,
            api.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async {
            let _ = http_stop_rx.await;
        })
        .await
    });

    tracing::info!(
        election = %settings.election,
        identity = %settings.identity,
        backend = backend_name,
        http = %settings.http_addr,
        ttl = %humantime::format_duration(settings.timing.ttl),
        "leasekeeper started"
    );

    let labeler_task = labeler.map(|l| tokio::spawn(l.run()));
    let supervisor_task = supervisor.map(|s| tokio::spawn(s.run()));
    let drain_task = drain.map(|d| tokio::spawn(d.run()));
    let hooks_task = hooks.map(|h| tokio::spawn(h.run()));
    let mut elector_task = tokio::spawn(elector.run());
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    // The command's own exit code, when `run` ends because the command ended.
    let mut exec_code = None;
    let exit = loop {
        let command_ended = async {
            match ended.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            exit = &mut elector_task => break exit,
            () = &mut shutdown => {
                tracing::info!("shutting down: stepping down and releasing");
                let _ = shutdown_tx.send(true);
                break elector_task.await;
            }
            Some(how) = command_ended => match how {
                Ended::ByItself(code) if !restart => {
                    tracing::info!(code, "the command exited; releasing and exiting with its code");
                    exec_code = Some(code);
                    let _ = shutdown_tx.send(true);
                    break elector_task.await;
                }
                Ended::ByItself(code) => {
                    tracing::info!(code, "the command exited; releasing and campaigning again (--restart)");
                    request_release(&own_releases).await;
                }
                Ended::Deadline => {
                    tracing::warn!("the command was stopped as the claim's deadline came near; releasing");
                    request_release(&own_releases).await;
                }
            },
        }
    };
    for task in [supervisor_task, drain_task].into_iter().flatten() {
        task.abort();
    }
    if let Some(task) = hooks_task {
        // The last change (this candidate gone) may still be on its way; not for long.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(500), task).await;
    }
    let _ = http_stop_tx.send(());
    if let Some(task) = labeler_task {
        // Leaving for any reason (a loss with --exit-on-loss too): let the label show
        // "not leader" before the labeler goes, within the backend timeout.
        await_shown(&mut label_clear, settings.timing.backend_timeout).await;
        task.abort();
    }
    // Open /watch streams would hold a graceful HTTP stop forever; do not wait long.
    let _ = tokio::time::timeout(std::time::Duration::from_millis(200), http).await;

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
            Ok(ExitCode::from(3))
        }
        Err(e) => Err(anyhow::anyhow!("the elector task failed: {e}")),
    }
}

/// Asks the elector to release, as `POST /release` does (the answer is not awaited).
async fn request_release(releases: &mpsc::Sender<ReleaseRequest>) {
    let (reply, _answer) = tokio::sync::oneshot::channel();
    let _ = releases
        .send(ReleaseRequest {
            reply,
            cooldown: None,
        })
        .await;
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            // Without signal handlers we can still stop on Ctrl-C.
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
