//! A Pod's settings, checked by the sidecar's own code: the environment the injected
//! container will have (the template's `LEASEKEEPER_*` values, replaced by the
//! annotations') goes through the same flag definitions and the same validation as
//! at the sidecar's start ([`Settings::from_cli`]), as a sidecar in a Pod runs it
//! ([`in_another_container`]). There is no second validator to drift from the first.

use std::collections::BTreeMap;
use std::ffi::OsString;

use serde_json::{json, Value};

use super::annotations::{Flag, Refusal, Wish, PREFIX};
use crate::config::{Cli, Settings};
use crate::settings::{first_line, in_another_container};

/// Sets each annotation's value on its flag's variable in a container's `env` list,
/// in place of the variable's `value` or `valueFrom`, or as a new variable.
pub fn set_annotated(env: &mut Vec<Value>, wish: &Wish, flags: &[Flag]) {
    for (long, value) in &wish.settings {
        let Some(flag) = flags.iter().find(|f| &f.long == long) else {
            continue;
        };
        let var = json!({"name": flag.env, "value": value});
        match env.iter_mut().find(|e| e["name"] == flag.env.as_str()) {
            Some(existing) => *existing = var,
            None => env.push(var),
        }
    }
}

/// A container's environment as the kubelet will give it: the plain values, and the
/// downward API's `metadata.name` and `metadata.namespace` of `pod` (a Pod that has
/// only a `generateName` yet gets a name made from it). Other `valueFrom` sources are
/// not known here and are left out.
pub fn container_env(env: &[Value], pod: &Value) -> BTreeMap<String, String> {
    let meta = &pod["metadata"];
    let name = meta["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .or_else(|| meta["generateName"].as_str().map(|g| format!("{g}x")))
        .unwrap_or_else(|| "pod".to_owned());
    let namespace = meta["namespace"].as_str().unwrap_or("default").to_owned();
    env.iter()
        .filter_map(|e| {
            let value = match (
                e["value"].as_str(),
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            ) {
                (Some(v), _) => v.to_owned(),
                (None, Some("metadata.name")) => name.clone(),
                (None, Some("metadata.namespace")) => namespace.clone(),
                (None, _) if e["valueFrom"].is_null() => String::new(),
                _ => return None,
            };
            Some((e["name"].as_str()?.to_owned(), value))
        })
        .collect()
}

/// The settings the sidecar will run with, given its container's environment `env`
/// ([`container_env`]) and, in exec mode, the command it runs; else the refusal,
/// naming the annotation of the setting the sidecar's message names.
pub fn sidecar_settings(
    env: &BTreeMap<String, String>,
    wish: &Wish,
    flags: &[Flag],
    cmd: Option<Vec<OsString>>,
) -> Result<Settings, Refusal> {
    let blame = Blame { env, wish, flags };
    // Each variable as its flag, to a command line that reads no environment: the
    // injector's own must not leak in.
    let mut argv = vec!["leasekeeper".to_owned()];
    for flag in flags {
        if let Some(value) = env.get(&flag.env) {
            argv.push(format!("--{}={value}", flag.long));
        }
    }
    // `run`'s command: every flag a Pod may set; exec mode's own are refused without
    // `leasekeeper.io/run` by the settings, as at the start.
    let command = Cli::run_command().mut_args(|a| a.env(None));
    let matches = command
        .clone()
        .try_get_matches_from(argv)
        .map_err(|e| blame.refusal(&e.to_string()))?;
    let cli = Cli::from_matches(&command, &matches).map_err(|e| blame.refusal(&e.to_string()))?;
    in_another_container(env.clone(), || Settings::from_cli(cli, cmd))
        .map_err(|e| blame.refusal(&e.to_string()))
}

/// What a refusal is about: the settings given, by annotation and by the template.
struct Blame<'a> {
    env: &'a BTreeMap<String, String>,
    wish: &'a Wish,
    flags: &'a [Flag],
}

impl Blame<'_> {
    /// The sidecar's message, prefixed with the annotation of the flag it is about:
    /// of the flags it names, the first one an annotation set, else the first one the
    /// template set, else the first one (a setting that is missing).
    fn refusal(&self, message: &str) -> Refusal {
        let line = first_line(message);
        let line = line.strip_prefix("error: ").unwrap_or(&line).to_owned();
        let named: Vec<&Flag> = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter_map(|w| w.strip_prefix("--"))
            .filter_map(|w| self.flags.iter().find(|f| f.long == w))
            .collect();
        let by_annotation = named
            .iter()
            .find(|f| self.wish.settings.contains_key(&f.long));
        let by_template = named.iter().find(|f| self.env.contains_key(&f.env));
        match by_annotation.or(by_template).or(named.first()) {
            Some(flag) => Refusal(format!("{PREFIX}{}: {line}", flag.long)),
            None => Refusal(format!("{PREFIX}* settings: {line}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::annotations::sidecar_flags;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// `pairs` with the downward API's variables, as in the chart's template.
    fn in_pod(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut e = env(pairs);
        e.insert("POD_NAME".to_owned(), "web-1".to_owned());
        e.insert("POD_NAMESPACE".to_owned(), "team".to_owned());
        e
    }

    fn no_wish() -> Wish {
        Wish {
            settings: BTreeMap::new(),
            run: None,
        }
    }

    #[test]
    fn an_annotation_is_blamed_before_the_template() {
        let flags = sidecar_flags();
        let wish = Wish {
            settings: [("renew-interval".to_owned(), "5s".to_owned())].into(),
            run: None,
        };
        let env = in_pod(&[
            ("LEASEKEEPER_TTL", "1s"),
            ("LEASEKEEPER_RENEW_INTERVAL", "5s"),
        ]);
        let err = sidecar_settings(&env, &wish, &flags, None).expect_err("refused");
        assert!(
            err.0.starts_with("leasekeeper.io/renew-interval: "),
            "{err}"
        );
    }

    #[test]
    fn annotations_replace_the_templates_values() {
        let flags = sidecar_flags();
        let wish = Wish {
            settings: [
                ("ttl".to_owned(), "20s".to_owned()),
                ("election".to_owned(), "web".to_owned()),
            ]
            .into(),
            run: None,
        };
        let mut list = vec![
            json!({"name": "LEASEKEEPER_TTL", "value": "15s"}),
            json!({"name": "LEASEKEEPER_BACKEND", "value": "kubernetes"}),
            json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
            json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
            json!({"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
        ];
        set_annotated(&mut list, &wish, &flags);
        assert_eq!(list.len(), 6);
        let pod = json!({"metadata": {"generateName": "web-7d9f-", "namespace": "team"}});
        assert_eq!(
            container_env(&list, &pod),
            env(&[
                ("LEASEKEEPER_TTL", "20s"),
                ("LEASEKEEPER_BACKEND", "kubernetes"),
                ("POD_NAME", "web-7d9f-x"),
                ("POD_NAMESPACE", "team"),
                ("LEASEKEEPER_ELECTION", "web"),
            ])
        );
    }

    #[test]
    fn the_pod_label_needs_the_downward_api() {
        let flags = sidecar_flags();
        let labelled = env(&[("LEASEKEEPER_POD_LABEL", "true")]);
        let err = sidecar_settings(&labelled, &no_wish(), &flags, None).expect_err("no POD_NAME");
        assert!(
            err.0
                .starts_with("leasekeeper.io/pod-label: --pod-label needs the Pod's name"),
            "{err}"
        );
        let mut with_name = labelled.clone();
        with_name.insert("POD_NAME".to_owned(), "web-1".to_owned());
        let settings = sidecar_settings(&with_name, &no_wish(), &flags, None).expect("valid");
        assert_eq!(settings.pod_label.map(|l| l.pod).as_deref(), Some("web-1"));
    }

    #[test]
    fn the_sidecars_own_messages_name_the_annotation() {
        let flags = sidecar_flags();
        for (pairs, want) in [
            (
                &[("LEASEKEEPER_TTL", "fast")][..],
                "leasekeeper.io/ttl: --ttl \"fast\" is not a duration",
            ),
            (
                &[("LEASEKEEPER_BACKEND", "redis")][..],
                "leasekeeper.io/backend: --redis-url is required",
            ),
            (
                &[
                    ("LEASEKEEPER_BACKEND", "kubernetes"),
                    ("LEASEKEEPER_TTL", "1500ms"),
                ][..],
                "leasekeeper.io/ttl:",
            ),
            (
                &[("LEASEKEEPER_ELECTION", "Bad Name")][..],
                "leasekeeper.io/election:",
            ),
            (
                &[("LEASEKEEPER_RESTART", "true")][..],
                "leasekeeper.io/restart: --kill-grace, --restart",
            ),
        ] {
            let err =
                sidecar_settings(&in_pod(pairs), &no_wish(), &flags, None).expect_err("refused");
            assert!(err.0.starts_with(want), "{pairs:?}: {err}");
            assert!(!err.0.contains('\n'), "{err}");
        }
    }

    #[test]
    fn files_in_the_sidecars_container_are_not_read_here() {
        let flags = sidecar_flags();
        let got = sidecar_settings(
            &in_pod(&[
                ("LEASEKEEPER_BACKEND", "etcd"),
                ("LEASEKEEPER_ETCD_ENDPOINTS", "https://etcd:2379"),
                (
                    "LEASEKEEPER_ETCD_CA_FILE",
                    "/etc/leasekeeper/etcd-tls/ca.crt",
                ),
                ("LEASEKEEPER_ELECTION", "web"),
            ]),
            &no_wish(),
            &flags,
            None,
        );
        assert!(got.is_ok(), "{got:?}");
    }

    #[test]
    fn exec_mode_takes_its_own_flags() {
        let flags = sidecar_flags();
        let cmd = Some(vec![OsString::from("/app")]);
        let env = in_pod(&[("LEASEKEEPER_KILL_GRACE", "5s")]);
        let got = sidecar_settings(&env, &no_wish(), &flags, cmd);
        assert!(got.is_ok_and(|s| s.exec.is_some()));
    }
}
