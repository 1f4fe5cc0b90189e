//! The Kubernetes Lease backend's own flags, read and checked into [`KubeSettings`]
//! (`--namespace` and `--kubeconfig` are shared with the Pod label: `kube_api`).

use crate::settings::{parse_bool, ConfigError};

/// The Lease backend's flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Kubernetes Lease backend")]
pub struct Args {
    /// Take Leases that spec.strategy hands to others [default: off].
    #[arg(long, value_name = "BOOL", env = "LEASEKEEPER_LEASE_STRATEGY_MIXED", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub lease_strategy_mixed: Option<String>,
    /// Publish a LeaseCandidate for the Lease [default: off].
    #[arg(long, value_name = "BOOL", env = "LEASEKEEPER_LEASE_CANDIDATE", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub lease_candidate: Option<String>,
}

/// How this candidate treats a coordinated Lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KubeSettings {
    /// `--lease-strategy-mixed`.
    pub strategy_mixed: bool,
    /// `--lease-candidate`.
    pub lease_candidate: bool,
}

impl Args {
    pub fn settings(&self) -> Result<KubeSettings, ConfigError> {
        Ok(KubeSettings {
            strategy_mixed: parse_bool(
                "--lease-strategy-mixed",
                self.lease_strategy_mixed.as_deref(),
            )?,
            lease_candidate: parse_bool("--lease-candidate", self.lease_candidate.as_deref())?,
        })
    }
}
