//! The annotations a Pod asks for the sidecar with: `leasekeeper.io/inject: "true"`,
//! one `leasekeeper.io/<flag>` per setting (the sidecar's long flags, without the
//! dashes), and `leasekeeper.io/run: <container>` for exec mode.

use std::collections::BTreeMap;

use crate::config::Cli;

/// The prefix of every annotation the injector reads.
pub const PREFIX: &str = "leasekeeper.io/";
/// `"true"` asks for the sidecar; anything else leaves the Pod alone.
pub const INJECT: &str = "leasekeeper.io/inject";
/// Exec mode: the container whose command `leasekeeper run --` wraps.
pub const RUN: &str = "leasekeeper.io/run";
/// Set by the injector on the Pods it changed.
pub const STATUS: &str = "leasekeeper.io/status";
/// The value of [`STATUS`].
pub const INJECTED: &str = "injected";
/// The annotation every injected Pod must carry: the election it campaigns in.
pub const ELECTION: &str = "leasekeeper.io/election";

/// Why a Pod is refused: one line that names the annotation and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// A flag of the sidecar that an annotation can set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flag {
    /// The long name without dashes (`ttl`), the annotation's suffix.
    pub long: String,
    /// The environment variable the sidecar reads it from (`LEASEKEEPER_TTL`).
    pub env: String,
}

/// Every flag of the sidecar that has an environment variable, from the one
/// definition of its command line (`run`'s, which has exec mode's flags too).
/// `--config` is left out: the file it names is read before anything else and could
/// not be checked at admission.
pub fn sidecar_flags() -> Vec<Flag> {
    Cli::run_command()
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            let env = a.get_env()?.to_str()?;
            (long != "config").then(|| Flag {
                long: long.to_owned(),
                env: env.to_owned(),
            })
        })
        .collect()
}

/// What a Pod asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    /// No sidecar (no `leasekeeper.io/inject: "true"`); the warnings say what the
    /// annotations may have meant.
    Nothing { warnings: Vec<String> },
    /// The sidecar, with these settings.
    Inject(Wish),
}

/// The settings of a Pod that asked for the sidecar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wish {
    /// Flag (long name) → value, one per `leasekeeper.io/<flag>` annotation.
    pub settings: BTreeMap<String, String>,
    /// Exec mode's container, from `leasekeeper.io/run`.
    pub run: Option<String>,
}

/// Reads the annotations: what the Pod asks for, or why it is refused.
pub fn read(annotations: &BTreeMap<String, String>, flags: &[Flag]) -> Result<Ask, Refusal> {
    let ours: Vec<(&str, &str)> = annotations
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(PREFIX)?, v.as_str())))
        .collect();
    match annotations.get(INJECT).map(String::as_str) {
        Some("true") => {}
        other => {
            return Ok(Ask::Nothing {
                warnings: unasked(other, &ours),
            })
        }
    }
    let mut wish = Wish {
        settings: BTreeMap::new(),
        run: None,
    };
    for (name, value) in ours {
        match name {
            "inject" | "status" => {}
            "run" => wish.run = Some(container_name(value)?),
            "config" => {
                return Err(Refusal(format!(
                    "{PREFIX}config: a file in the sidecar's container cannot be checked at admission; give each setting as its own annotation, like {PREFIX}ttl: 15s"
                )))
            }
            _ if flags.iter().any(|f| f.long == name) => {
                if value.trim().is_empty() {
                    return Err(Refusal(format!(
                        "{PREFIX}{name}: empty; give it a value or leave the annotation out"
                    )));
                }
                wish.settings.insert(name.to_owned(), value.to_owned());
            }
            _ => {
                return Err(Refusal(format!(
                    "{PREFIX}{name} is no setting of leasekeeper; the annotations are the flags' names without the dashes, like {PREFIX}ttl (leasekeeper --help lists them), besides {INJECT}, {RUN} and {STATUS}"
                )))
            }
        }
    }
    if !wish.settings.contains_key("election") {
        return Err(Refusal(format!(
            "{ELECTION} is required with {INJECT}: \"true\"; name the election this Pod's candidates campaign in, like {ELECTION}: my-app"
        )));
    }
    Ok(Ask::Inject(wish))
}

/// Warnings for a Pod that did not ask for the sidecar but carries our annotations.
fn unasked(inject: Option<&str>, ours: &[(&str, &str)]) -> Vec<String> {
    match inject {
        Some("false") => Vec::new(),
        Some(other) => vec![format!(
            "{INJECT}: {other:?} is neither \"true\" nor \"false\"; no leasekeeper sidecar was added"
        )],
        None if ours.iter().any(|(n, _)| *n != "status") => vec![format!(
            "{PREFIX}* annotations without {INJECT}: \"true\"; no leasekeeper sidecar was added"
        )],
        None => Vec::new(),
    }
}

/// A container name as `leasekeeper.io/run` gives it.
fn container_name(raw: &str) -> Result<String, Refusal> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(Refusal(format!(
            "{RUN}: empty; name the container whose command leasekeeper runs"
        )));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_flag_is_read_from_its_own_environment_variable() {
        let flags = sidecar_flags();
        assert!(flags.len() >= 50, "only {} flags", flags.len());
        for f in &flags {
            let want = format!("LEASEKEEPER_{}", f.long.to_uppercase().replace('-', "_"));
            assert_eq!(f.env, want, "--{}", f.long);
        }
        assert!(!flags.iter().any(|f| f.long == "config"));
    }

    #[test]
    fn settings_come_from_the_annotations() {
        let got = read(
            &annotations(&[
                (INJECT, "true"),
                (ELECTION, "web"),
                ("leasekeeper.io/ttl", "15s"),
                (RUN, "app"),
                ("other.io/x", "y"),
            ]),
            &sidecar_flags(),
        );
        let Ok(Ask::Inject(wish)) = got else {
            panic!("{got:?}")
        };
        assert_eq!(wish.run.as_deref(), Some("app"));
        assert_eq!(wish.settings.len(), 2);
        assert_eq!(wish.settings["ttl"], "15s");
    }

    #[test]
    fn unknown_empty_and_missing_annotations_are_refused_by_name() {
        let flags = sidecar_flags();
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[
                    (INJECT, "true"),
                    (ELECTION, "web"),
                    ("leasekeeper.io/tll", "1s"),
                ],
                "leasekeeper.io/tll is no setting",
            ),
            (
                &[
                    (INJECT, "true"),
                    (ELECTION, "web"),
                    ("leasekeeper.io/ttl", " "),
                ],
                "leasekeeper.io/ttl: empty",
            ),
            (
                &[
                    (INJECT, "true"),
                    (ELECTION, "web"),
                    ("leasekeeper.io/config", "/x"),
                ],
                "leasekeeper.io/config:",
            ),
            (&[(INJECT, "true")], "leasekeeper.io/election is required"),
            (
                &[(INJECT, "true"), (ELECTION, "web"), (RUN, "")],
                "leasekeeper.io/run: empty",
            ),
        ];
        for (pairs, want) in cases {
            let err = read(&annotations(pairs), &flags).expect_err("refused");
            assert!(err.0.contains(want), "{pairs:?}: {err}");
            assert!(!err.0.contains('\n'));
        }
    }

    #[test]
    fn without_inject_true_nothing_is_asked() {
        let flags = sidecar_flags();
        for (pairs, warned) in [
            (
                &[(INJECT, "false"), ("leasekeeper.io/bogus", "x")][..],
                false,
            ),
            (&[(INJECT, "yes")][..], true),
            (&[("leasekeeper.io/ttl", "1s")][..], true),
            (&[("app", "x")][..], false),
        ] {
            let Ok(Ask::Nothing { warnings }) = read(&annotations(pairs), &flags) else {
                panic!("{pairs:?}")
            };
            assert_eq!(!warnings.is_empty(), warned, "{pairs:?}: {warnings:?}");
        }
    }
}
