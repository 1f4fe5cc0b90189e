//! `zookeeper` backend: the ephemeral-sequential queue of Apache Curator's `LeaderLatch`.
//!
//! Each candidate owns a *protected* ephemeral-sequential node
//! `/<root>/<election>/_c_<uuid>-latch-<sequence>` holding its identity, named and ordered
//! like Curator's `LeaderLatch` so Java services using Curator share the election. The
//! lowest sequence leads.
//!
//! - **Protected create**: a create whose answer was lost to a disconnect is found again
//!   by its `_c_<uuid>-` prefix instead of leaving an orphan node ahead of us.
//! - **Before claiming**, the lowest node must be ours *and* owned by the current session
//!   (Curator's double-leader bug CURATOR-1211 came from a node of an older session).
//! - **Deadline**: the session timeout the server negotiated is the ttl (the server caps
//!   what the client asks for at 20 × tickTime by default; the difference is logged). The
//!   campaign and every renew are requests of this session: their send time extends the
//!   local deadline by one session timeout, which the server cannot expire earlier.
//! - **Renew** is a light request, a `check_stat` of our own node: gone, or owned by
//!   another session, means lost.
//! - **Followers** watch only their predecessor (no herd); a vanished predecessor means
//!   list again and re-check, never "I lead" without checking.
//! - **Session expiry** ends everything at once: the next campaign opens a new session
//!   and a new node.
//! - **Fencing token**: the creation zxid (`czxid`) of the leader's node. zxids grow
//!   across the whole ensemble, so they keep growing even if the election's parent node
//!   is deleted and recreated (a sequence number would start again at 0).
//! - **Release** deletes our node, then closes the session.

use std::time::Duration;

use zookeeper_client::{
    Acls, Client, CreateMode, OneshotWatcher, SessionState, StateWatcher, TlsOptions,
};

use super::{Backend, BackendError, Campaign, Renewal, Wake};
use crate::config::ZkSettings;
use crate::status::Holder;

fn zk(op: &'static str) -> impl FnOnce(zookeeper_client::Error) -> BackendError {
    move |e| BackendError::Store {
        op,
        message: e.to_string(),
    }
}

/// The sequence number Curator and ZooKeeper append: the last 10 digits.
fn sequence_of(name: &str) -> Option<u64> {
    name.len()
        .checked_sub(10)
        .and_then(|i| name.get(i..))
        .and_then(|s| s.parse().ok())
}

pub struct ZkBackend {
    settings: ZkSettings,
    dir: String,
    identity: String,
    requested: Duration,
    ttl: Duration,
    client: Option<Client>,
    /// `_c_<uuid>-latch-`: our protection prefix for this session.
    prefix: String,
    /// Our node's name (not the path), once created.
    node: Option<String>,
    watching: Option<OneshotWatcher>,
    /// The session's state changes: expiry, disconnect and reconnect all mean "look again".
    session_events: Option<StateWatcher>,
}

impl ZkBackend {
    /// Nodes we create: open to anyone, or, with digest auth, only to that identity
    /// (so a client without the credentials can neither join nor delete our nodes).
    fn acls(&self) -> Acls<'static> {
        if self.settings.digest.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }

    pub fn new(settings: &ZkSettings, election: &str, identity: &str, ttl: Duration) -> Self {
        ZkBackend {
            settings: settings.clone(),
            dir: format!("{}/{election}", settings.root.trim_end_matches('/')),
            identity: identity.to_owned(),
            requested: ttl,
            ttl,
            client: None,
            prefix: new_prefix(),
            node: None,
            watching: None,
            session_events: None,
        }
    }

    /// The session's client, opening a new session (and forgetting our node) when the
    /// old one expired or was closed.
    async fn client(&mut self) -> Result<Client, BackendError> {
        if let Some(c) = &self.client {
            if matches!(
                c.state(),
                SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
            ) {
                tracing::warn!("zookeeper session ended; opening a new one");
                self.forget();
            }
        }
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let mut connector = Client::connector().with_session_timeout(self.requested);
        if let Some((user, password)) = &self.settings.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let client = match &self.settings.tls {
            Some(tls) => {
                let mut options = TlsOptions::new()
                    .with_pem_ca(&tls.ca_pem)
                    .map_err(zk("connect"))?;
                if let Some((cert, key)) = &tls.identity {
                    options = options
                        .with_pem_identity(cert, key)
                        .map_err(zk("connect"))?;
                }
                connector
                    .with_tls(options)
                    .secure_connect(&self.settings.connect)
                    .await
            }
            None => connector.connect(&self.settings.connect).await,
        }
        .map_err(zk("connect"))?;
        let negotiated = client.session_timeout();
        if negotiated != self.requested {
            tracing::warn!(
                requested = %humantime::format_duration(self.requested),
                negotiated = %humantime::format_duration(negotiated),
                "zookeeper negotiated another session timeout; it is the ttl now"
            );
        }
        self.ttl = negotiated.min(self.requested);
        let options = CreateMode::Persistent.with_acls(self.acls());
        match client.mkdir(&self.dir, &options).await {
            Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => return Err(zk("connect")(e)),
        }
        self.session_events = Some(client.state_watcher());
        self.client = Some(client.clone());
        Ok(client)
    }

    fn forget(&mut self) {
        self.client = None;
        self.node = None;
        self.watching = None;
        self.session_events = None;
        self.prefix = new_prefix();
    }

    /// Our node, created if needed; a lost create answer is found by its prefix.
    async fn ensure_node(&mut self, client: &Client) -> Result<String, BackendError> {
        if let Some(n) = &self.node {
            return Ok(n.clone());
        }
        let children = client
            .list_children(&self.dir)
            .await
            .map_err(zk("campaign"))?;
        if let Some(found) = children.iter().find(|c| c.starts_with(&self.prefix)) {
            self.node = Some(found.clone());
            return Ok(found.clone());
        }
        let options = CreateMode::EphemeralSequential.with_acls(self.acls());
        let path = format!("{}/{}", self.dir, self.prefix);
        let (_, sequence) = client
            .create(&path, self.identity.as_bytes(), &options)
            .await
            .map_err(zk("campaign"))?;
        let name = format!("{}{sequence}", self.prefix);
        self.node = Some(name.clone());
        Ok(name)
    }
}

fn new_prefix() -> String {
    let n: u128 = rand::random();
    let hex = format!("{n:032x}");
    // Curator: _c_<uuid>-latch- (the uuid in its usual 8-4-4-4-12 form).
    format!(
        "_c_{}-{}-{}-{}-{}-latch-",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

impl Backend for ZkBackend {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        self.watching = None;
        let client = self.client().await?;
        let ours = self.ensure_node(&client).await?;
        let mut queue: Vec<(u64, String)> = client
            .list_children(&self.dir)
            .await
            .map_err(zk("campaign"))?
            .into_iter()
            .filter_map(|c| sequence_of(&c).map(|s| (s, c)))
            .collect();
        queue.sort();
        let Some(position) = queue.iter().position(|(_, c)| *c == ours) else {
            // Our node is gone (the session expired meanwhile): start over.
            self.forget();
            return Ok(Campaign::Held(None));
        };
        let (_, first) = queue[0].clone();
        let first_path = format!("{}/{first}", self.dir);
        if position == 0 {
            // Ours, and owned by this very session (CURATOR-1211).
            let stat = client
                .check_stat(&first_path)
                .await
                .map_err(zk("campaign"))?;
            return match stat {
                Some(s) if s.ephemeral_owner == client.session_id().0 => Ok(Campaign::Acquired {
                    token: u64::try_from(s.czxid).unwrap_or(0),
                }),
                _ => {
                    self.forget();
                    Ok(Campaign::Held(None))
                }
            };
        }
        let holder = match client.get_data(&first_path).await {
            Ok((data, stat)) => Some(Holder {
                identity: String::from_utf8_lossy(&data).into_owned(),
                token: u64::try_from(stat.czxid).ok(),
            }),
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => return Err(zk("campaign")(e)),
        };
        let predecessor = format!("{}/{}", self.dir, queue[position - 1].1);
        let (stat, watcher) = client
            .check_and_watch_stat(&predecessor)
            .await
            .map_err(zk("campaign"))?;
        if stat.is_some() {
            self.watching = Some(watcher);
        }
        Ok(Campaign::Held(holder))
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let (Some(client), Some(node)) = (self.client.clone(), self.node.clone()) else {
            return Ok(Renewal::Lost);
        };
        if matches!(client.state(), SessionState::Expired | SessionState::Closed) {
            return Ok(Renewal::Lost);
        }
        let stat = client
            .check_stat(&format!("{}/{node}", self.dir))
            .await
            .map_err(zk("renew"))?;
        Ok(match stat {
            Some(s) if s.ephemeral_owner == client.session_id().0 => Renewal::Renewed,
            _ => Renewal::Lost,
        })
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.watching = None;
        let (Some(client), Some(node)) = (self.client.clone(), self.node.take()) else {
            self.forget();
            return Ok(());
        };
        let deleted = client.delete(&format!("{}/{node}", self.dir), None).await;
        // Closing the session removes any node of ours the delete may have missed.
        self.forget();
        drop(client);
        match deleted {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
            Err(e) => Err(zk("release")(e)),
        }
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        if self.node.is_none() {
            return Wake::Changed;
        }
        let watcher = self.watching.take();
        let predecessor_gone = async {
            match watcher {
                Some(w) => {
                    w.changed().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        // An expired session (our node is gone), a disconnect, or a reconnect within the
        // session: each means the queue must be looked at again.
        let session_changed = async {
            match self.session_events.as_mut() {
                Some(events) => {
                    events.changed().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = predecessor_gone => {}
            _ = session_changed => {}
            _ = tokio::time::sleep(max) => {}
        }
        Wake::Changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_names_and_sequences() {
        let p = new_prefix();
        assert!(p.starts_with("_c_") && p.ends_with("-latch-"), "{p}");
        assert_eq!(p.len(), "_c_".len() + 36 + "-latch-".len());
        assert_eq!(
            sequence_of("_c_0b1e2d3c-1111-2222-3333-444455556666-latch-0000000042"),
            Some(42)
        );
        assert_eq!(sequence_of("short"), None);
    }
}
