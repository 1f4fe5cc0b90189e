//! The whole command line as one clap definition: the sidecar's flags at the top and
//! the subcommands under it. `--help`, `leasekeeper help [SUB]`, the shell completions
//! (`leasekeeper completions SHELL`) and the man page (`leasekeeper man [SUB]`) are all
//! drawn from it, so none can list what the others do not.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Arg, ArgMatches, Command, CommandFactory};

use super::status::StatusCli;
use super::switchover::SwitchoverCli;
use crate::config::Cli;

use super::exit::USAGE;

/// The subcommands with a man page of their own.
#[cfg(feature = "kubernetes")]
const PAGES: [&str; 5] = ["run", "status", "switchover", "inject", "completions"];
#[cfg(not(feature = "kubernetes"))]
const PAGES: [&str; 4] = ["run", "status", "switchover", "completions"];

/// Every subcommand, each with its one line for the list in `--help`.
pub fn command() -> Command {
    let top = Cli::command()
        .subcommand(super::run::command())
        .subcommand(
            StatusCli::command()
                .name("status")
                .bin_name("leasekeeper status"),
        )
        .subcommand(
            SwitchoverCli::command()
                .name("switchover")
                .bin_name("leasekeeper switchover"),
        );
    #[cfg(feature = "kubernetes")]
    let top = top.subcommand(
        super::inject::InjectCli::command()
            .name("inject")
            .bin_name("leasekeeper inject"),
    );
    top.subcommand(
            Command::new("completions")
                .about("Print a shell completion script (bash, zsh, fish, elvish, powershell)")
                .after_help(
                    "bash: leasekeeper completions bash > /etc/bash_completion.d/leasekeeper\n\
                     zsh:  leasekeeper completions zsh > \"${fpath[1]}/_leasekeeper\"\n\
                     fish: leasekeeper completions fish > ~/.config/fish/completions/leasekeeper.fish",
                )
                .arg(
                    Arg::new("shell")
                        .value_name("SHELL")
                        .required(true)
                        .value_parser(clap::value_parser!(clap_complete::Shell)),
                ),
        )
        .subcommand(
            Command::new("man")
                .about("Print the man page (roff), of leasekeeper or of one subcommand")
                .after_help("Read it with: leasekeeper man | man -l -")
                .arg(
                    Arg::new("subcommand")
                        .value_name("SUBCOMMAND")
                        .value_parser(PAGES),
                ),
        )
}

/// `leasekeeper help [SUB]`, `leasekeeper completions SHELL` and `leasekeeper man
/// [SUB]`; `args` is the whole command line.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let matches = match command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => return clap_exit(e),
    };
    let mut out = std::io::stdout().lock();
    let written = match matches.subcommand() {
        Some(("completions", m)) => completions(m, &mut out),
        Some(("man", m)) => man(m, &mut out),
        _ => {
            let _ = command().print_help();
            Ok(())
        }
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is no failure worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Help and version print and exit 0; anything else is one line and exit 2.
fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    eprintln!("{}", super::one_line(&e));
    ExitCode::from(USAGE)
}

fn completions(m: &ArgMatches, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let Some(shell) = m.get_one::<clap_complete::Shell>("shell").copied() else {
        return Ok(());
    };
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut command(), "leasekeeper", &mut buf);
    out.write_all(&buf)
}

fn man(m: &ArgMatches, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut top = command();
    top.build();
    let page = match m.get_one::<String>("subcommand") {
        Some(sub) => top
            .find_subcommand(sub)
            .cloned()
            .map(|c| c.display_name(format!("leasekeeper-{sub}")))
            .unwrap_or(top),
        None => top,
    };
    super::manual::render(page, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn man_knows_every_other_subcommand() {
        let top = command();
        let man = top.find_subcommand("man").expect("man");
        let arg = man
            .get_arguments()
            .find(|a| a.get_id() == "subcommand")
            .expect("arg");
        let pages: Vec<String> = arg
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_owned())
            .collect();
        let subs: Vec<String> = top
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .filter(|n| n != "man")
            .collect();
        assert_eq!(pages, subs);
    }

    #[test]
    fn every_subcommand_has_a_one_line_about() {
        let top = command();
        let names: Vec<&str> = top.get_subcommands().map(|c| c.get_name()).collect();
        for want in ["run", "status", "switchover", "completions", "man"] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        for sub in top.get_subcommands() {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            assert!(
                !about.is_empty() && !about.contains('\n'),
                "{}: {about:?}",
                sub.get_name()
            );
        }
    }
}
