//! Subcommands (DESIGN §1): one module each; `main.rs` only dispatches.

use crate::config::LogFormat;

pub mod exit;
pub mod help;
#[cfg(feature = "kubernetes")]
pub mod inject;
#[cfg(not(feature = "kubernetes"))]
pub mod inject {
    //! Without the `kubernetes` feature there is no injector.
    pub fn main(_args: Vec<std::ffi::OsString>) -> std::process::ExitCode {
        eprintln!("error: inject: this leasekeeper was built without the Kubernetes API client; build with `cargo build --features kubernetes`");
        std::process::ExitCode::from(super::exit::USAGE)
    }
}
pub mod manual;
pub mod run;
pub mod sidecar;
pub mod status;
pub mod switchover;

/// How many log lines wait for a stderr that is not read before lines are dropped.
/// The buffer's slots are allocated up front (32 bytes a line): 4,096 lines cost
/// 128 KiB, where tracing-appender's default of 128,000 would cost 4 MiB of an idle
/// sidecar's memory. A sidecar logs a few lines per change of leader.
const LOG_BUFFER_LINES: usize = 4_096;

/// Logs to stderr in `format`, at `RUST_LOG`'s levels (info by default). A worker
/// thread writes the lines: a stderr that nobody reads (a container runtime's log
/// copier that stalls) never stalls the sidecar; lines wait in a bounded buffer
/// ([`LOG_BUFFER_LINES`]) and are dropped once it is full. Keep the guard while the
/// process logs: dropping it writes out what is buffered, waiting a second at most.
#[must_use = "dropping the guard stops the logging"]
pub fn init_logging(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_BUFFER_LINES)
        .lossy(true)
        .finish(std::io::stderr());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
    guard
}

/// The runtime every subcommand runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Runs a subcommand's `main` future to its exit code on [`runtime`]: a runtime that
/// cannot start exits 1, and an error ends the run with its first line and `failed`.
pub fn block_on<E: std::fmt::Display>(
    main: impl std::future::Future<Output = Result<std::process::ExitCode, E>>,
    failed: std::process::ExitCode,
) -> std::process::ExitCode {
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main) {
        Ok(code) => code,
        Err(e) => {
            // One line, whatever the error's own text looks like.
            let text = format!("{e:#}");
            eprintln!("error: {}", crate::settings::first_line(&text));
            failed
        }
    }
}

/// A subcommand's command line (`args` is the whole one: `leasekeeper WORD …`), or
/// the exit code once help was printed (0) or the first line of a usage error (`usage`).
pub fn parse_cli<T: clap::Parser>(
    name: &str,
    args: Vec<std::ffi::OsString>,
    usage: u8,
) -> Result<T, std::process::ExitCode> {
    let mut argv = vec![std::ffi::OsString::from(name)];
    argv.extend(args.into_iter().skip(2));
    match T::try_parse_from(argv) {
        Ok(cli) => Ok(cli),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            let _ = e.print();
            Err(std::process::ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{}", one_line(&e));
            Err(std::process::ExitCode::from(usage))
        }
    }
}

/// A clap error as one line: its first line, and the next one when the first ends in
/// a colon ("the following required arguments were not provided:" names the argument
/// on the next line).
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    match (lines.next(), lines.next()) {
        (Some(first), Some(next)) if first.ends_with(':') => format!("{first} {next}"),
        (Some(first), _) => first.to_owned(),
        (None, _) => "error: bad command line".to_owned(),
    }
}
