//! The Lease at the floor, on the fake API server, with the `kubernetes` backend's API
//! client: the holder's release (a replace emptying the holder, `leaseDurationSeconds:
//! 1`), the waiting candidate's watch event, and its take (a replace naming it, at the
//! event's resourceVersion, `leaseTransitions` the token).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

use super::{block_on, Round, SETTLE};

const NAME: &str = "bench-floor";

/// `rounds` handovers between two API clients of the fake API server that `kubeconfig`
/// names (namespace `namespace`). The waiting client wakes when its watch yields the
/// event of the released Lease.
pub fn handovers(kubeconfig: &str, namespace: &str, rounds: usize) -> anyhow::Result<Vec<Round>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    block_on(async {
        let a = Member::connect(kubeconfig, namespace, "floor-a").await?;
        let b = Member::connect(kubeconfig, namespace, "floor-b").await?;
        let spec = LeaseSpec {
            holder_identity: Some(a.identity.to_owned()),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(1),
            ..LeaseSpec::default()
        };
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(NAME.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        };
        let mut last = match a.api.create(&PostParams::default(), &lease).await {
            Ok(created) => created,
            // A series before this one left it: named ours at its resourceVersion.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let mut lease = lease;
                let left = a.api.get(NAME).await?;
                lease.metadata.resource_version = left.metadata.resource_version;
                (lease.spec.as_mut().context("no spec")?).lease_transitions =
                    left.spec.and_then(|s| s.lease_transitions);
                a.api.replace(NAME, &PostParams::default(), &lease).await?
            }
            Err(e) => return Err(e.into()),
        };
        let mut took = Vec::new();
        for round in 0..rounds {
            let (holder, waiter) = match round % 2 {
                0 => (&a, &b),
                _ => (&b, &a),
            };
            let (round, written) = handover(holder, waiter, last).await?;
            took.push(round);
            last = written;
        }
        Ok(took)
    })
}

/// The holder releases `lease` (its last write); the waiter, watching, takes.
async fn handover(
    holder: &Member,
    waiter: &Member,
    lease: Lease,
) -> anyhow::Result<(Round, Lease)> {
    let version = lease
        .metadata
        .resource_version
        .clone()
        .context("no resourceVersion")?;
    let params = WatchParams::default()
        .fields(&format!("metadata.name={NAME}"))
        .disable_bookmarks();
    let mut events = waiter.api.watch(&params, &version).await?.boxed();
    // The watch holds one connection; the take goes over another, opened now, as a
    // follower's requests go beside its watch.
    waiter.api.get(NAME).await?;
    let api = waiter.api.clone();
    let identity = waiter.identity;
    let wait = tokio::spawn(async move {
        let free = loop {
            match events.next().await.context("the watch ended")?? {
                WatchEvent::Modified(l) if holder_of(&l).is_empty() => break l,
                WatchEvent::Error(e) => bail!("the watch: {e}"),
                _ => {}
            }
        };
        let woke = Instant::now();
        let taken = api
            .replace(NAME, &PostParams::default(), &named(free, identity, 15))
            .await?;
        anyhow::Ok((taken, woke, Instant::now()))
    });
    tokio::time::sleep(SETTLE).await;
    let t0 = Instant::now();
    let released = named(lease, "", 1);
    holder
        .api
        .replace(NAME, &PostParams::default(), &released)
        .await?;
    let answered = Instant::now();
    let (taken, woke, t1) = wait.await??;
    Ok((Round::new(t0, answered, woke, t1), taken))
}

fn holder_of(lease: &Lease) -> &str {
    let spec = lease.spec.as_ref();
    spec.and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

/// `lease` naming `identity` (empty: released) for `seconds`; a take counts a
/// transition, the token.
fn named(mut lease: Lease, identity: &str, seconds: i32) -> Lease {
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if identity.is_empty() {
        spec.holder_identity = None;
    } else {
        spec.holder_identity = Some(identity.to_owned());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.lease_duration_seconds = Some(seconds);
    lease
}

/// One candidate: an API client of its own.
struct Member {
    api: Api<Lease>,
    identity: &'static str,
}

impl Member {
    async fn connect(
        kubeconfig: &str,
        namespace: &str,
        identity: &'static str,
    ) -> anyhow::Result<Member> {
        let client = leasekeeper::kube_api::client(Some(Path::new(kubeconfig))).await?;
        Ok(Member {
            api: Api::namespaced(client, namespace),
            identity,
        })
    }
}
