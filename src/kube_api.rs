//! The Kubernetes API as two owners share it: the Lease backend and the Pod-label
//! publisher both speak to it, in the same namespace, through one client built at start.

use std::path::{Path, PathBuf};

use crate::settings::{bad, ConfigError};

/// Where the Kubernetes API and the namespace are.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "Kubernetes API (the kubernetes backend and the Pod label)")]
pub struct Args {
    /// Namespace of the Lease and own Pod [default: $POD_NAMESPACE, else default].
    #[arg(long, value_name = "NAME", env = "LEASEKEEPER_NAMESPACE")]
    pub namespace: Option<String>,
    /// kubeconfig out of a cluster [default: $KUBECONFIG, ~/.kube/config, else the service account].
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl Args {
    /// `--namespace`, else the Pod's own (downward API), else `default`.
    pub fn namespace(&self) -> Result<String, ConfigError> {
        let ns = self
            .namespace
            .clone()
            .or_else(|| crate::settings::env_var("POD_NAMESPACE"))
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
            Some(p) if crate::settings::files_elsewhere() => Ok(Some(p.clone())),
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

/// The API client (with the `kubernetes` feature).
#[cfg(feature = "kubernetes")]
pub type Client = kube::Client;

/// No API client in a build without the `kubernetes` feature: nothing can hold one
/// (the settings refuse whatever would need it).
#[cfg(not(feature = "kubernetes"))]
#[derive(Clone, Debug)]
pub enum Client {}

/// Without the `kubernetes` feature: the reason there is no client.
#[cfg(not(feature = "kubernetes"))]
pub async fn client(_kubeconfig: Option<&Path>) -> Result<Client, ClientError> {
    Err(ClientError(
        "kubernetes: this leasekeeper was built without the Kubernetes API client; build with `cargo build --features kubernetes`".to_owned(),
    ))
}

/// The API client, built once at start.
#[cfg(feature = "kubernetes")]
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
    build(config).map_err(|e| ClientError(format!("kubernetes: cannot build the API client: {e}")))
}

/// kube's own client stack (base URI, retries of 429/503/504, credentials, extra
/// headers, connect and write timeouts) over a connector that sets `TCP_NODELAY`.
///
/// kube's builder leaves Nagle's algorithm on. The first request on a new TLS
/// connection follows the client's last handshake flight at once, and a Go API server
/// that has nothing to send after that flight delays its ACK (40 ms on Linux); with
/// Nagle on, the request waits for it: ~50 ms from a release to the successor's write
/// whenever the successor's take goes over a new connection (one its pool dropped
/// idle, say; `the_successor_takes_a_released_lease_within_a_few_ms`). The Lease's
/// watches go over a client of their own (`BuildContext::kube_watches`),
/// so that a watch never holds the connection the writes go over.
#[cfg(feature = "kubernetes")]
fn build(config: kube::Config) -> Result<kube::Client, kube::Error> {
    use hyper_util::client::legacy::connect::HttpConnector;
    use kube::client::ConfigExt;
    use tower::ServiceBuilder;

    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    // The layers above (retries, credentials) speak in boxed errors, as kube's own stack.
    let client = tower::ServiceExt::map_err(client, |e| {
        Box::new(e) as Box<dyn std::error::Error + Send + Sync>
    });
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace))
}
