//! The Kubernetes API as two owners share it: the Lease backend and the Pod-label
//! publisher both speak to it, in the same namespace, through one client built at start.

use std::path::{Path, PathBuf};

use crate::settings::{bad, ConfigError};

/// Where the Kubernetes API and the namespace are.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Kubernetes API (the kubernetes backend and the Pod label)")]
pub struct Args {
    /// Namespace of the Lease and of the own Pod [default: $POD_NAMESPACE, else default].
    #[arg(long, env = "LEASEKEEPER_NAMESPACE")]
    pub namespace: Option<String>,
    /// kubeconfig file for the Kubernetes API out of a cluster [default: $KUBECONFIG, ~/.kube/config, else the Pod's service account].
    #[arg(long, env = "LEASEKEEPER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl Args {
    /// `--namespace`, else the Pod's own (downward API), else `default`.
    pub fn namespace(&self) -> Result<String, ConfigError> {
        let ns = self
            .namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let ok = ns.len() <= 63
            && ns
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && ns.starts_with(|c: char| c.is_ascii_alphanumeric())
            && ns.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(bad(format!(
                "--namespace {ns:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
            )));
        }
        Ok(ns)
    }

    /// An explicit kubeconfig, read once so that a missing one is bad input.
    pub fn kubeconfig(&self) -> Result<Option<PathBuf>, ConfigError> {
        match &self.kubeconfig {
            Some(p) => {
                std::fs::read(p).map_err(|e| {
                    bad(format!("--kubeconfig {}: cannot read it: {e}", p.display()))
                })?;
                Ok(Some(p.clone()))
            }
            None => Ok(None),
        }
    }
}

/// Why no API client could be built (bad input: the sidecar does not start).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClientError(String);

/// The API client, built once at start.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let fail = |e: &dyn std::fmt::Display| ClientError(format!("--kubeconfig {}: {e}", path.display()));
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| fail(&e))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| fail(&e))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            ClientError(format!(
                "kubernetes: no usable API configuration (neither a service account in a Pod nor KUBECONFIG): {e}"
            ))
        })?,
    };
    kube::Client::try_from(config)
        .map_err(|e| ClientError(format!("kubernetes: cannot build the API client: {e}")))
}
