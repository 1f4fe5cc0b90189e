//! Parses the first word and dispatches: the exec guard, `status`, `switchover`,
//! `inject`, `help`, `completions`, `man`, or the sidecar (plain or `run -- CMD`),
//! each a module of `leasekeeper::cmd` or the exec publisher.
//! The one definition of the whole command line is `leasekeeper::cmd::help::command`.

use std::ffi::OsString;
use std::process::ExitCode;

use leasekeeper::cmd;
use leasekeeper::publish::exec;

fn main() -> ExitCode {
    // rustls may see more than one crypto provider compiled in; pick ring explicitly.
    // (No TLS in a build with only the file backend.)
    #[cfg(any(
        feature = "redis",
        feature = "etcd",
        feature = "zookeeper",
        feature = "kubernetes",
        feature = "sql"
    ))]
    let _ = rustls::crypto::ring::default_provider().install_default();

    let args: Vec<OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|a| a.to_str()) {
        Some(exec::GUARD_ARG) => exec::guard_main(args[2..].to_vec()),
        Some("status") => cmd::status::main(args),
        Some("switchover") => cmd::switchover::main(args),
        Some("inject") => cmd::inject::main(args),
        Some("help" | "completions" | "man") => cmd::help::main(args),
        _ => cmd::sidecar::main(args),
    }
}
