//! Every exit code of every command, in one table ([`TABLE`]). The commands return
//! these constants; `leasekeeper man` prints the table as EXIT STATUS, and a test
//! holds the table of docs/configuration.md to it ([`markdown`]).

/// Done as asked (a graceful stop of the sidecar, an answer from a leader, ...).
pub const SUCCESS: u8 = 0;
/// A failure that is not the input's: the runtime, the output, a listener.
pub const FAILURE: u8 = 1;
/// Bad input: a flag, a variable, the `--config` file, or a start that cannot go on.
pub const USAGE: u8 = 2;

/// The sidecar's and `run`'s own codes.
pub mod sidecar {
    /// The lease was lost and `--exit-on-loss` is set.
    pub const LOST: u8 = 3;
    /// `run`: CMD's guard was killed and nothing proves CMD's processes ended.
    pub const UNPROVEN: u8 = 1;
    /// `run --wait-timeout`: no slot taken in time (EX_TEMPFAIL).
    pub const GAVE_UP: u8 = crate::publish::exec::GAVE_UP;
}

/// `leasekeeper status`.
pub mod status {
    pub const LEADER: u8 = 0;
    pub const UNREACHABLE: u8 = 1;
    pub const USAGE: u8 = super::USAGE;
    pub const FOLLOWER: u8 = 3;
    pub const UNKNOWN: u8 = 4;
    pub const DISAGREE: u8 = 5;
}

/// `leasekeeper switchover`.
pub mod switchover {
    pub const SWITCHED: u8 = 0;
    pub const UNREACHABLE: u8 = 1;
    pub const USAGE: u8 = super::USAGE;
    pub const NOT_LEADER: u8 = 3;
    pub const REFUSED: u8 = 4;
    pub const NOT_TAKEN: u8 = 5;
}

/// One exit code as the table shows it.
#[derive(Clone, Copy, Debug)]
pub enum Code {
    Is(u8),
    /// Several codes that mean what they mean for another command.
    AsFor(&'static [u8]),
    /// `run`: the code CMD exited with.
    Cmds,
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Code::Is(code) => write!(f, "{code}"),
            Code::AsFor(codes) => {
                let codes: Vec<String> = codes.iter().map(u8::to_string).collect();
                write!(f, "{}", codes.join(", "))
            }
            Code::Cmds => write!(f, "CMD's code"),
        }
    }
}

/// The codes of one command (`pages`: its man pages, `leasekeeper` for the sidecar).
pub struct Group {
    pub pages: &'static [&'static str],
    /// The command as the docs' table names it (Markdown).
    pub command: &'static str,
    /// Each code and what it means (Markdown).
    pub rows: &'static [(Code, &'static str)],
}

/// Every command's exit codes.
pub const TABLE: &[Group] = &[
    Group {
        pages: &["leasekeeper"],
        command: "`leasekeeper` (the sidecar)",
        rows: &[
            (Code::Is(SUCCESS), "stopped gracefully (SIGTERM or SIGINT): stepped down and released"),
            (Code::Is(FAILURE), "the runtime could not start"),
            (Code::Is(USAGE), "bad input, or a start that cannot go on: a setting, an address that cannot be bound, a lock file that cannot be created or opened, a transition log that cannot be opened, an unusable kubeconfig; one line on stderr, `error: <setting> ...`"),
            (Code::Is(sidecar::LOST), "the lease was lost and `--exit-on-loss` is set"),
        ],
    },
    Group {
        pages: &["run"],
        command: "`leasekeeper run -- CMD`",
        rows: &[
            (Code::Cmds, "CMD exited by itself (128 + the signal when a signal ended it); the lease was released first"),
            (Code::Is(SUCCESS), "stopped gracefully (SIGTERM or SIGINT)"),
            (Code::Is(sidecar::UNPROVEN), "CMD's guard was killed and nothing proves that CMD's processes ended with it: the sidecar stepped down without releasing (the lease expires by itself)"),
            (Code::AsFor(&[USAGE, sidecar::LOST]), "as for the sidecar"),
            (Code::Is(sidecar::GAVE_UP), "`--wait-timeout` passed with no slot taken (`EX_TEMPFAIL`; CMD never ran)"),
        ],
    },
    Group {
        pages: &["status"],
        command: "`leasekeeper status`",
        rows: &[
            (Code::Is(status::LEADER), "the answering sidecar leads (`state` `leader` and `is_leader` true)"),
            (Code::Is(status::UNREACHABLE), "no answer: refused, timed out, not 2xx, or not a leasekeeper `Status`"),
            (Code::Is(status::USAGE), "bad command line"),
            (Code::Is(status::FOLLOWER), "it follows"),
            (Code::Is(status::UNKNOWN), "its state is `unknown` (also `candidate`, and a leader past its deadline)"),
            (Code::Is(status::DISAGREE), "with `--samples`: the answers disagree about who leads"),
        ],
    },
    Group {
        pages: &["switchover"],
        command: "`leasekeeper switchover`",
        rows: &[
            (Code::Is(switchover::SWITCHED), "ID leads"),
            (Code::Is(switchover::UNREACHABLE), "no answer from the sidecar"),
            (Code::Is(switchover::USAGE), "bad command line, or the release endpoint is off"),
            (Code::Is(switchover::NOT_LEADER), "the sidecar asked does not lead"),
            (Code::Is(switchover::REFUSED), "refused, nothing released: ID is not a live candidate, ID is the leader itself, the store could not list its candidates, or the store elects the next holder itself"),
            (Code::Is(switchover::NOT_TAKEN), "released, but ID was not seen leading within `--timeout`"),
        ],
    },
    Group {
        pages: &["inject"],
        command: "`leasekeeper inject`",
        rows: &[
            (Code::Is(SUCCESS), "stopped by a signal, or `--copy-binary-to` copied the binary"),
            (Code::Is(FAILURE), "a failure at run time: a listener that cannot bind, an API server whose version cannot be read, a copy that failed"),
            (Code::Is(USAGE), "bad input; one line on stderr"),
        ],
    },
    Group {
        pages: &["help", "completions", "man"],
        command: "`help`, `completions`, `man`",
        rows: &[
            (Code::Is(SUCCESS), "printed"),
            (Code::Is(FAILURE), "the output could not be written"),
            (Code::Is(USAGE), "bad command line"),
        ],
    },
];

/// The groups a man page lists: all of them on `leasekeeper`'s own page, else the
/// page's command's.
pub fn groups_of(page: &str) -> Vec<&'static Group> {
    TABLE
        .iter()
        .filter(|g| page == "leasekeeper" || g.pages.contains(&page))
        .collect()
}

/// The table as docs/configuration.md shows it under "Exit codes".
pub fn markdown() -> String {
    let mut out = String::from("| command | code | meaning |\n|---|---|---|\n");
    for group in TABLE {
        for (i, (code, meaning)) in group.rows.iter().enumerate() {
            let command = if i == 0 { group.command } else { "" };
            let command = if command.is_empty() {
                "| |".to_owned()
            } else {
                format!("| {command} |")
            };
            out.push_str(&format!("{command} {code} | {meaning} |\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/configuration.md's exit codes are this table, row for row.
    #[test]
    fn the_docs_table_is_this_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
        let docs = std::fs::read_to_string(path).expect("docs/configuration.md");
        let section = docs
            .split("\n## ")
            .find(|s| s.starts_with("Exit codes"))
            .expect("an Exit codes section");
        let table: String = section
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            table,
            markdown(),
            "docs/configuration.md's exit codes differ from cmd::exit::TABLE"
        );
    }

    /// Every subcommand's codes are in the table, and every page the table names is
    /// a subcommand.
    #[test]
    fn every_command_has_its_codes() {
        let top = super::super::help::command();
        let mut names: Vec<&str> = top.get_subcommands().map(|c| c.get_name()).collect();
        names.extend(["leasekeeper", "help"]);
        for name in &names {
            assert!(
                TABLE.iter().any(|g| g.pages.contains(name)),
                "{name} has no exit codes in the table"
            );
        }
        for group in TABLE {
            for page in group.pages {
                let built = *page != "inject" || cfg!(feature = "kubernetes");
                assert!(!built || names.contains(page), "{page} is no subcommand");
            }
        }
    }
}
