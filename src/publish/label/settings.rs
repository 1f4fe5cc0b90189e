//! The Pod-label flags, read and checked into [`PodLabelSettings`].

use crate::kube_api;
use crate::settings::{bad, in_a_pod, parse_bool, ConfigError};

/// The Pod-label flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Pod label")]
pub struct Args {
    /// Label the own Pod as leader or not [default: in a Pod].
    #[arg(long, value_name = "BOOL", env = "LEASEKEEPER_POD_LABEL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub pod_label: Option<String>,
    /// Label key [default: leasekeeper.io/leader].
    #[arg(long, value_name = "KEY", env = "LEASEKEEPER_POD_LABEL_KEY")]
    pub pod_label_key: Option<String>,
    /// Label value while this candidate leads [default: true].
    #[arg(long, value_name = "VALUE", env = "LEASEKEEPER_POD_LABEL_LEADER_VALUE")]
    pub pod_label_leader_value: Option<String>,
    /// Label value while it does not [default: false].
    #[arg(
        long,
        value_name = "VALUE",
        env = "LEASEKEEPER_POD_LABEL_FOLLOWER_VALUE"
    )]
    pub pod_label_follower_value: Option<String>,
    /// Name of the own Pod [default: $POD_NAME].
    #[arg(long, value_name = "NAME", env = "LEASEKEEPER_POD_NAME")]
    pub pod_name: Option<String>,
}

/// The leader label kept on the own Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodLabelSettings {
    pub namespace: String,
    pub pod: String,
    /// The election's name: every candidate Pod carries it as `leasekeeper.io/election`.
    pub election: String,
    pub key: String,
    pub leader_value: String,
    pub follower_value: String,
    /// An election of several slots (`--holders` above 1): the leader also carries
    /// `leasekeeper.io/slot: <slot>`, and a new tenure clears only its own slot's
    /// stale leader labels.
    pub slots: bool,
    /// A shared holder (`--mode shared`): other Pods may show the leader value
    /// beside it by right, so its tenure clears no other Pod's label.
    pub shared: bool,
}

impl Args {
    /// The label's settings, or `None` when it is off.
    pub fn settings(
        &self,
        kube: &kube_api::Args,
        election: &str,
    ) -> Result<Option<PodLabelSettings>, ConfigError> {
        let on = match self.pod_label.as_deref() {
            None => in_a_pod(),
            raw => parse_bool("--pod-label", raw)?,
        };
        if !on {
            return Ok(None);
        }
        let key = self.key()?;
        let leader_value = value(
            "--pod-label-leader-value",
            &self.pod_label_leader_value,
            "true",
        )?;
        let follower_value = value(
            "--pod-label-follower-value",
            &self.pod_label_follower_value,
            "false",
        )?;
        if leader_value == follower_value {
            return Err(bad(
                "--pod-label-leader-value and --pod-label-follower-value must differ",
            ));
        }
        Ok(Some(PodLabelSettings {
            namespace: kube.namespace()?,
            pod: self.pod()?,
            election: election.to_owned(),
            key,
            leader_value,
            slots: false,
            shared: false,
            follower_value,
        }))
    }

    fn key(&self) -> Result<String, ConfigError> {
        let key = self
            .pod_label_key
            .clone()
            .unwrap_or_else(|| "leasekeeper.io/leader".to_owned());
        let (prefix, name) = match key.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, key.as_str()),
        };
        let prefix_ok = prefix.is_none_or(|p| {
            !p.is_empty()
                && p.len() <= 253
                && p.split('.').all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                })
        });
        if !prefix_ok || !label_segment_ok(name, false) {
            return Err(bad(format!(
                "--pod-label-key {key:?} is not a label key; write it like leasekeeper.io/leader"
            )));
        }
        Ok(key)
    }

    /// The own Pod's name: `--pod-name`, else `$POD_NAME` (the downward API).
    pub fn own_pod(&self) -> Option<String> {
        self.pod_name
            .clone()
            .or_else(|| crate::settings::env_var("POD_NAME"))
            .filter(|p| !p.trim().is_empty())
            .map(|p| p.trim().to_owned())
    }

    fn pod(&self) -> Result<String, ConfigError> {
        self.own_pod().ok_or_else(|| {
                bad("--pod-label needs the Pod's name: set POD_NAME from the downward API (fieldRef metadata.name) or --pod-name")
            })
    }
}

fn value(setting: &str, raw: &Option<String>, default: &str) -> Result<String, ConfigError> {
    let v = raw.clone().unwrap_or_else(|| default.to_owned());
    if label_segment_ok(&v, true) {
        Ok(v)
    } else {
        Err(bad(format!(
            "{setting} {v:?} is not a label value (at most 63 of letters, digits, '-', '_', '.')"
        )))
    }
}

/// A label name or value segment: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends.
fn label_segment_ok(s: &str, may_be_empty: bool) -> bool {
    if s.is_empty() {
        return may_be_empty;
    }
    s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}
