//! Subcommands (DESIGN §1): one module each; `main.rs` only dispatches.

pub mod run;
pub mod sidecar;
pub mod status;
pub mod switchover;

/// The runtime every subcommand runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
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
            let text = e.to_string();
            eprintln!("{}", text.lines().next().unwrap_or("bad command line"));
            Err(std::process::ExitCode::from(usage))
        }
    }
}
