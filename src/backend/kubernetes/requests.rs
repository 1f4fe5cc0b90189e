//! The Lease's requests: a get, a create, a replace at the resourceVersion it carries
//! (and its dry run), the LIST of the one Lease for the API server's current version,
//! and the leader's and a follower's watches. Their answers go to the cores as plain
//! values ([`Refusal`], and [`super::watches`] for the events).

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams, WatchParams};

use super::answers::Refusal;
use super::follow::FOLLOW_WATCH_SECS;
use super::watches::LeaseEvents;

/// How long the API server keeps the leader's watch open (kube refuses 295 s or more).
const OWN_WATCH_SECS: u32 = 290;

/// The one Lease of an election.
pub(super) struct LeaseApi {
    api: Api<Lease>,
    /// The watches' (by default the same client as `api`'s).
    watches: Api<Lease>,
    name: String,
    namespace: String,
}

fn refusal(e: kube::Error) -> Refusal {
    let code = match &e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    };
    Refusal {
        code,
        message: e.to_string(),
    }
}

impl LeaseApi {
    pub(super) fn new(client: kube::Client, namespace: &str, name: &str) -> LeaseApi {
        LeaseApi {
            api: Api::namespaced(client.clone(), namespace),
            watches: Api::namespaced(client, namespace),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// Opens the watches over `client`, so that they never hold a connection of the
    /// requests' client.
    pub(super) fn watch_over(&mut self, client: kube::Client) {
        self.watches = Api::namespaced(client, &self.namespace);
    }

    /// `metadata.name=<election>`: the one Lease.
    fn field_selector(&self) -> String {
        format!("metadata.name={}", self.name)
    }

    pub(super) async fn get(&self) -> Result<Option<Lease>, Refusal> {
        self.api.get_opt(&self.name).await.map_err(refusal)
    }

    /// Creates the Lease with `spec`.
    pub(super) async fn create(&self, spec: LeaseSpec) -> Result<Lease, Refusal> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        };
        let created = self.api.create(&PostParams::default(), &lease).await;
        created.map_err(refusal)
    }

    /// Replaces the Lease with `lease` (which carries the resourceVersion it was read at).
    pub(super) async fn replace(&self, lease: &Lease) -> Result<Lease, Refusal> {
        let params = PostParams::default();
        let replaced = self.api.replace(&self.name, &params, lease).await;
        replaced.map_err(refusal)
    }

    /// The replace of `lease` as a dry run: whether the API server would take it.
    pub(super) async fn probe(&self, lease: &Lease) -> Result<(), Refusal> {
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let probed = self.api.replace(&self.name, &params, lease).await;
        probed.map(|_| ()).map_err(refusal)
    }

    /// The API server's current resourceVersion: a consistent LIST of our one Lease.
    /// (No resourceVersion is sent, so the API server answers at least as fresh as
    /// etcd's current revision; `resourceVersion=0` would allow a stale cache.)
    pub(super) async fn list_version(&self) -> Result<Option<String>, Refusal> {
        let params = ListParams::default()
            .fields(&self.field_selector())
            .limit(1);
        let list = self.api.list(&params).await.map_err(refusal)?;
        Ok(list.metadata.resource_version)
    }

    /// The leader's watch on its own Lease, from `version`.
    pub(super) async fn watch_own(&self, version: &str) -> Result<LeaseEvents, Refusal> {
        let params = WatchParams::default()
            .fields(&self.field_selector())
            .timeout(OWN_WATCH_SECS);
        let stream = self
            .watches
            .watch(&params, version)
            .await
            .map_err(refusal)?;
        Ok(stream.boxed())
    }

    /// A follower's watch on the Lease, from `version`.
    pub(super) async fn watch_follow(&self, version: &str) -> Result<LeaseEvents, Refusal> {
        let params = WatchParams::default()
            .fields(&self.field_selector())
            .timeout(FOLLOW_WATCH_SECS)
            .disable_bookmarks();
        let stream = self
            .watches
            .watch(&params, version)
            .await
            .map_err(refusal)?;
        Ok(stream.boxed())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http_body_util::Full;
    use hyper::body::Bytes;

    use super::*;

    type Seen = Arc<Mutex<Vec<String>>>;

    const LEASE: &str = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"e","namespace":"team","resourceVersion":"7"},"spec":{}}"#;

    /// A client named `tag` whose API notes each request it is sent in `seen`
    /// ("<tag> watch" or "<tag> <method>"): a watch's stream is empty, anything else
    /// answers the Lease.
    fn client(tag: &'static str, seen: Seen) -> kube::Client {
        let api = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
                let what = match watch {
                    true => "watch".to_owned(),
                    false => req.method().to_string(),
                };
                if let Ok(mut seen) = seen.lock() {
                    seen.push(format!("{tag} {what}"));
                }
                let body = if watch { "" } else { LEASE };
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(
                    body,
                ))))
            }
        });
        kube::Client::new(api, "team")
    }

    #[tokio::test]
    async fn the_watches_go_over_their_own_client_and_the_requests_never_do() {
        let seen = Seen::default();
        let mut api = LeaseApi::new(client("requests", seen.clone()), "team", "e");
        api.watch_over(client("watches", seen.clone()));
        let lease = api.get().await.expect("get").expect("a lease");
        drop(api.watch_follow("7").await.expect("watch"));
        api.replace(&lease).await.expect("replace");
        drop(api.watch_own("7").await.expect("watch"));
        let seen = seen.lock().expect("seen").clone();
        assert_eq!(
            seen,
            [
                "requests GET",
                "watches watch",
                "requests PUT",
                "watches watch"
            ]
        );
    }
}
