//! `leasekeeper run [flags] -- CMD ARGS…`: the command line of exec mode. The flags
//! are the sidecar's usual ones and `run`'s own ([`crate::config::Cli::run_command`],
//! with [`crate::publish::exec::Args`]); everything after the first `--` is the command.

use std::ffi::OsString;

/// What `run` does beyond its one line (its help's closing text, and its man page's
/// description).
pub const DETAILS: &str = "CMD gets LEASEKEEPER_FENCING_TOKEN, LEASEKEEPER_ELECTION and \
     LEASEKEEPER_IDENTITY; on loss or shutdown it is stopped before the claim's deadline, and \
     nothing it started outlives the sidecar. No HTTP API unless --http-addr asks for one. Every \
     flag is also read from LEASEKEEPER_<FLAG> and the --config file.";

/// `run`'s example in its help (and first in its man page's EXAMPLES): what it does,
/// and the command line.
pub const EXAMPLE: (&str, &[&str]) = (
    "Run the backup now if no other host runs it, else exit 75 at once:",
    &["leasekeeper run --election nightly --wait-timeout 0 -- /usr/bin/backup --all"],
);

/// `run`'s own definition, for its help, the completions and the man page: the
/// sidecar's flags and the command after `--` (which [`split`] takes off before the
/// flags are parsed, so it is optional here).
pub fn command() -> clap::Command {
    crate::config::Cli::run_command()
        .name("run")
        .bin_name("leasekeeper run")
        .about("Run CMD only while this candidate leads (exec mode)")
        .override_usage("leasekeeper run [OPTIONS] -- CMD [ARGS]...")
        .after_help(format!("{DETAILS}\nExample: {}", EXAMPLE.1.join("\n")))
        .mut_args(|a| a.hide_env(true))
        .arg(
            clap::Arg::new("command")
                .value_name("CMD")
                .help("The command to run while leading, and its arguments (after `--`)")
                .num_args(1..)
                .last(true),
        )
}

/// The command line split for exec mode.
#[derive(Debug, PartialEq, Eq)]
pub struct RunLine {
    /// Program name plus the usual flags, for the ordinary parser.
    pub flags: Vec<OsString>,
    /// CMD and its arguments (`None` without a `--`).
    pub cmd: Option<Vec<OsString>>,
}

/// `None` when the first argument is not `run`; else the flags and what follows the
/// first `--`. The flags are parsed first (so `run --help` is help), then
/// [`command_of`] says what is missing.
pub fn split(args: Vec<OsString>) -> Option<RunLine> {
    if args.get(1).and_then(|a| a.to_str()) != Some("run") {
        return None;
    }
    let mut flags = vec![args[0].clone()];
    let mut rest = args.into_iter().skip(2);
    let mut cmd = None;
    for arg in rest.by_ref() {
        if arg == "--" {
            cmd = Some(rest.by_ref().collect::<Vec<_>>());
            break;
        }
        flags.push(arg);
    }
    Some(RunLine { flags, cmd })
}

/// The command of a `run` line, or a one-line error naming what is missing.
pub fn command_of(cmd: Option<Vec<OsString>>) -> Result<Vec<OsString>, String> {
    match cmd {
        None => Err("run: no command; put it after `--`, like `leasekeeper run --election nightly -- /usr/bin/backup --all`".to_owned()),
        Some(cmd) if cmd.is_empty() || cmd[0].is_empty() => {
            Err("run: no command after `--`".to_owned())
        }
        Some(cmd) => Ok(cmd),
    }
}

/// Whether `program` can be run: a path to an executable file, or a name found in
/// `$PATH` (one line naming it otherwise, before anything starts).
pub fn check_program(program: &std::ffi::OsStr) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = std::path::Path::new(program);
    let found = if program.to_string_lossy().contains('/') {
        runnable(path)
    } else {
        std::env::var_os("PATH")
            .is_some_and(|dirs| std::env::split_paths(&dirs).any(|d| runnable(&d.join(path))))
    };
    if found {
        Ok(())
    } else {
        Err(format!(
            "run: command {:?} not found or not executable",
            program.to_string_lossy()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn splits_flags_from_the_command() {
        let line = split(os(&[
            "lk", "run", "--ttl", "2s", "--", "sh", "-c", "x -- y",
        ]))
        .unwrap();
        assert_eq!(line.flags, os(&["lk", "--ttl", "2s"]));
        assert_eq!(line.cmd, Some(os(&["sh", "-c", "x -- y"])));
    }

    #[test]
    fn not_run_is_left_alone() {
        assert_eq!(split(os(&["lk", "--ttl", "2s"])), None);
        assert_eq!(split(os(&["lk"])), None);
    }

    #[test]
    fn a_missing_command_is_named() {
        let cmd = |args: &[&str]| command_of(split(os(args)).unwrap().cmd);
        assert!(cmd(&["lk", "run", "--ttl", "2s"])
            .unwrap_err()
            .contains("--"));
        assert!(cmd(&["lk", "run", "--"])
            .unwrap_err()
            .contains("no command"));
        assert_eq!(cmd(&["lk", "run", "--", "true"]).unwrap(), os(&["true"]));
    }

    #[test]
    fn programs_are_looked_up() {
        assert!(check_program("sh".as_ref()).is_ok());
        assert!(check_program("/bin/sh".as_ref()).is_ok());
        assert!(check_program("no-such-program-here".as_ref()).is_err());
        assert!(check_program("/etc/passwd".as_ref()).is_err());
    }
}
