//! The Kubernetes Lease as a store of `backend::stores`.

use super::settings::{Args, KubeSettings};
use super::{check_ttl, KubeBackend};
use crate::backend::store::{
    BuildContext, BuildError, Capabilities, Serve, SettingsContext, Store,
};
use crate::settings::{bad, ConfigError};

pub struct Kubernetes;

/// A `coordination.k8s.io/v1` Lease named after the election, in `namespace`.
#[derive(Clone, Debug)]
pub struct LeaseIn {
    pub namespace: String,
    pub lease: KubeSettings,
}

impl Store for Kubernetes {
    type Args = Args;
    type Settings = LeaseIn;

    fn settings(
        args: &Args,
        _name: &str,
        cx: &mut SettingsContext,
    ) -> Result<LeaseIn, ConfigError> {
        check_ttl(cx.timing.ttl)?;
        Ok(LeaseIn {
            namespace: cx.kube.namespace()?,
            lease: args.settings()?,
        })
    }

    fn name(_: &LeaseIn) -> &'static str {
        "kubernetes"
    }

    const CAPABILITIES: Capabilities = Capabilities {
        read_write_lock: Err("a Kubernetes Lease has one holder (holderIdentity), and client-go and the API server's coordinated election know no shared ones; use --backend etcd or zookeeper for a read-write lock, or leave --mode out"),
        kubernetes_client: true,
        ..Capabilities::ALL
    };

    /// Several slots where the API server would elect for each Lease (the coordinated
    /// election picks a holder per Lease among all candidates, so a candidate holding
    /// one slot could be named for another) are refused.
    fn check(settings: &LeaseIn, holders: u32) -> Result<(), ConfigError> {
        if holders > 1 && settings.lease.lease_candidate {
            return Err(bad(
                "--holders above 1 with --lease-candidate: the API server's coordinated election picks each slot's holder among all candidates, and could name one that holds another slot; use one of them",
            ));
        }
        Ok(())
    }

    fn lease_namespace(settings: &LeaseIn) -> Option<&str> {
        Some(&settings.namespace)
    }

    async fn build_and<S: Serve>(
        settings: &LeaseIn,
        cx: BuildContext,
        serve: S,
    ) -> Result<S::Output, BuildError> {
        let client = cx.kube.clone().ok_or_else(|| {
            BuildError::Input("--backend kubernetes: no Kubernetes client".to_owned())
        })?;
        let watches = cx.kube_watches.clone().unwrap_or_else(|| client.clone());
        let slots = cx.slots(|lease, _| {
            KubeBackend::new(client.clone(), &settings.namespace, lease, settings.lease)
                .watching_over(watches.clone())
                .with_slow_paths(cx.slow_paths.clone())
        });
        Ok(serve.serve(slots).await)
    }
}
