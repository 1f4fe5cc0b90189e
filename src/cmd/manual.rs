//! The man pages (`leasekeeper man [SUB]`): clap_mangen draws NAME, SYNOPSIS,
//! DESCRIPTION and the options from the command's definition; this module adds what
//! a command line does not say: EXIT STATUS (from [`super::exit::TABLE`], the table
//! the docs are checked against), ENVIRONMENT (every flag's variable, from the same
//! definition, and the variables read without the prefix) and EXAMPLES.

use std::io::Write;

use clap::Command;

use super::exit;

/// One example: what it does, then the command lines.
pub struct Example {
    pub page: &'static str,
    pub what: &'static str,
    pub lines: &'static [&'static str],
}

/// The examples of every page.
pub const EXAMPLES: &[Example] = &[
    Example {
        page: "leasekeeper",
        what: "A candidate of the election demo on this host (the file backend), then who leads:",
        lines: &["leasekeeper --election demo &", "leasekeeper status"],
    },
    Example {
        page: "leasekeeper",
        what: "A candidate on Redis, exiting with code 3 when it loses the lease:",
        lines: &["leasekeeper --backend redis --redis-url redis://redis:6379 --election demo --exit-on-loss"],
    },
    Example {
        page: "run",
        what: super::run::EXAMPLE.0,
        lines: super::run::EXAMPLE.1,
    },
    Example {
        page: "run",
        what: "A nightly backup on whichever host holds the lease, at most one at a time:",
        lines: &["leasekeeper run --backend etcd --etcd-endpoints http://etcd:2379 \\",
            "    --election nightly-backup --kill-grace 20s -- /usr/local/bin/backup --all"],
    },
    Example {
        page: "status",
        what: "Ask the sidecar on this host (or in this Pod) who leads:",
        lines: &["leasekeeper status"],
    },
    Example {
        page: "status",
        what: "Ask five times through a Service; exit 0 only if one leader answered:",
        lines: &["leasekeeper status --url http://billing.apps.svc:4040 --samples 5"],
    },
    Example {
        page: "switchover",
        what: "Hand the lease to pod-c, from the leading Pod:",
        lines: &["kubectl exec pod-a -c leasekeeper -- leasekeeper switchover --to pod-c"],
    },
    Example {
        page: "inject",
        what: "Serve the webhook with its certificate and the chart's sidecar template:",
        lines: &["leasekeeper inject --tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key \\",
            "    --sidecar-template /etc/leasekeeper/sidecar.yaml"],
    },
    Example {
        page: "completions",
        what: "Install the completions of bash, zsh or fish:",
        lines: &[
            "leasekeeper completions bash > /etc/bash_completion.d/leasekeeper",
            "leasekeeper completions zsh > \"${fpath[1]}/_leasekeeper\"",
            "leasekeeper completions fish > ~/.config/fish/completions/leasekeeper.fish",
        ],
    },
    Example {
        page: "man",
        what: "Read a page, or write them as files:",
        lines: &["leasekeeper man | man -l -", "leasekeeper man run > leasekeeper-run.1"],
    },
];

/// Variables read without the `LEASEKEEPER_` prefix, by the sidecar and `run`.
const UNPREFIXED: &[(&str, &str)] = &[
    ("POD_NAME", "the own Pod's name (the downward API): the default of --identity and --pod-name"),
    ("POD_NAMESPACE", "the own Pod's namespace (the downward API): the default of --namespace"),
    ("KUBERNETES_SERVICE_HOST", "set in a Pod: the defaults for a Pod apply (--backend kubernetes, the Pod label, the Events)"),
    ("KUBECONFIG", "the kubeconfig without --kubeconfig (else ~/.kube/config, else the Pod's service account)"),
    ("XDG_RUNTIME_DIR", "the directory of the default --file-path (else /tmp)"),
    ("RUST_LOG", "the log level, like info (the default) or debug"),
];

/// What `run` gives CMD.
const GIVEN_TO_CMD: &[(&str, &str)] = &[
    (
        "LEASEKEEPER_FENCING_TOKEN",
        "the fencing token of the tenure CMD runs in",
    ),
    ("LEASEKEEPER_ELECTION", "the election"),
    ("LEASEKEEPER_IDENTITY", "this candidate's identity"),
    (
        "LEASEKEEPER_SLOT",
        "the slot held, 0 to LEASEKEEPER_HOLDERS - 1",
    ),
    ("LEASEKEEPER_HOLDERS", "the number of slots (--holders)"),
    ("LEASEKEEPER_MODE", "shared, exclusive or election (--mode)"),
];

/// What an --on-change command gets besides the Status JSON on its stdin.
const GIVEN_TO_HOOK: &[(&str, &str)] = &[
    (
        "LEASEKEEPER_STATE",
        "leader, follower, candidate or unknown",
    ),
    (
        "LEASEKEEPER_LEADER",
        "the leader's identity (empty when none is known)",
    ),
    ("LEASEKEEPER_FENCING_TOKEN", "the leader's fencing token"),
    ("LEASEKEEPER_ELECTION", "the election"),
    ("LEASEKEEPER_IDENTITY", "this candidate's identity"),
];

/// The man page of `page` (the whole command, or one subcommand displayed as
/// `leasekeeper-SUB`).
pub fn render(page: Command, out: &mut impl Write) -> std::io::Result<()> {
    let name = page.get_name().to_owned();
    let page = match (name.as_str(), page.get_about().map(|a| a.to_string())) {
        ("run", Some(about)) => page.long_about(format!("{about}.\n\n{}", super::run::DETAILS)),
        _ => page,
    };
    let man = clap_mangen::Man::new(page.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    if page.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(out)?;
    }
    if page.has_subcommands() {
        man.render_subcommands_section(out)?;
    }
    let mut roff = String::new();
    exit_status(&name, &mut roff);
    environment(&name, &page, &mut roff);
    examples(&name, &mut roff);
    out.write_all(roff.as_bytes())?;
    if page.get_version().is_some() {
        man.render_version_section(out)?;
    }
    Ok(())
}

fn exit_status(page: &str, roff: &mut String) {
    let groups = exit::groups_of(page);
    if groups.is_empty() {
        return;
    }
    roff.push_str(".SH \"EXIT STATUS\"\n");
    for group in groups {
        if page == "leasekeeper" {
            roff.push_str(&format!(".SS \"{}\"\n", text(group.command)));
        }
        for (code, meaning) in group.rows {
            item(roff, &code.to_string(), meaning);
        }
    }
}

fn environment(page: &str, cmd: &Command, roff: &mut String) {
    let own: Vec<(String, String)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let env = a.get_env()?.to_str()?.to_owned();
            Some((env, format!("--{}", a.get_long()?)))
        })
        .collect();
    let sidecar = matches!(page, "leasekeeper" | "run");
    if own.is_empty() && !sidecar {
        return;
    }
    roff.push_str(".SH ENVIRONMENT\n");
    if sidecar {
        roff.push_str(".PP\nEvery flag is also read from LEASEKEEPER_<FLAG>, the flag's name in capitals with _ for \\-; a flag given wins over the variable, the variable over the \\-\\-config file.\n");
    }
    // Each flag's variable, a line each: the variable, then its flag.
    let width = own.iter().map(|(env, _)| env.len()).max().unwrap_or(0) + 2;
    roff.push_str(".PP\n.RS 4\n.nf\n");
    for (env, flag) in &own {
        roff.push_str(&format!("{}\n", text(&format!("{env:width$}{flag}"))));
    }
    roff.push_str(".fi\n.RE\n");
    if !sidecar {
        return;
    }
    roff.push_str(".SS \"Read without the prefix\"\n");
    for (env, what) in UNPREFIXED {
        item(roff, env, what);
    }
    let (heading, given) = match page {
        "run" => ("Given to CMD", GIVEN_TO_CMD),
        _ => ("Given to an \\-\\-on\\-change command", GIVEN_TO_HOOK),
    };
    roff.push_str(&format!(".SS \"{heading}\"\n"));
    for (env, what) in given {
        item(roff, env, what);
    }
}

fn examples(page: &str, roff: &mut String) {
    let mine: Vec<&Example> = EXAMPLES
        .iter()
        .filter(|e| e.page == page || (page == "leasekeeper" && e.page == "run"))
        .collect();
    if mine.is_empty() {
        return;
    }
    roff.push_str(".SH EXAMPLES\n");
    for example in mine {
        roff.push_str(&format!(".PP\n{}\n.PP\n.RS 4\n.nf\n", text(example.what)));
        for line in example.lines {
            roff.push_str(&format!("{}\n", text(line)));
        }
        roff.push_str(".fi\n.RE\n");
    }
}

/// A tagged paragraph: `tag` in bold, then `body`.
fn item(roff: &mut String, tag: &str, body: &str) {
    roff.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", text(tag), text(body)));
}

/// Markdown-ish text as roff: no backticks, backslashes and dashes escaped, and a
/// line that would start with a control character guarded.
fn text(s: &str) -> String {
    let escaped = s.replace('\\', "\\e").replace('`', "").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_has_examples_and_every_example_a_page() {
        let top = super::super::help::command();
        let mut pages: Vec<&str> = top
            .get_subcommands()
            .map(|c| c.get_name())
            .filter(|n| *n != "help")
            .collect();
        pages.push("leasekeeper");
        for page in &pages {
            assert!(
                EXAMPLES.iter().any(|e| e.page == *page),
                "{page}: no example"
            );
        }
        for e in EXAMPLES {
            let built = e.page != "inject" || cfg!(feature = "kubernetes");
            assert!(
                !built || pages.contains(&e.page),
                "{}: no such page",
                e.page
            );
        }
    }

    #[test]
    fn text_is_escaped_for_roff() {
        assert_eq!(text("`--ttl` 1s"), "\\-\\-ttl 1s");
        assert_eq!(text(".hidden"), "\\&.hidden");
        assert_eq!(text("a\\b"), "a\\eb");
    }
}
