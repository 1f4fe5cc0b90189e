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
//!   what the client asks for at 20 × tickTime by default; the difference is logged),
//!   less one renew interval (see `lease_ttl`: in an ensemble, touches reach the
//!   ZooKeeper leader only with the follower server's pings). The
//!   campaign and every renew are requests of this session: their send time extends the
//!   local deadline by one session timeout, which the server cannot expire earlier.
//! - **Proof goes through the ZooKeeper leader** (invariant 8). A read is answered by
//!   whichever server we are connected to, and a server cut off from the quorum goes
//!   on serving reads for up to syncLimit × tickTime while the quorum expires our
//!   session and lets another candidate lead. So both the acquisition and every renew
//!   are a `multi` holding one `check` of our node at version 0 (we never write it):
//!   a transaction, forwarded to the ensemble's leader, which verifies our session
//!   is alive there and our node exists unchanged. Its send time extends the
//!   deadline. It changes nothing, so no watch fires on it (a `setData` would wake
//!   our successor at every renew). Gone, changed, or an expired session means lost.
//!   A read of the node's stat goes right behind that check on the same session (so
//!   it is answered from a state at least as new): the node must be owned by this
//!   very session (a node deleted and created again under our name by another
//!   client has version 0 too).
//!   This is also the claim's check that the lowest node belongs to the current
//!   session. The decisions themselves are plain functions: the queue's (our place,
//!   what a follower watches, how it hears of a new holder, the switchover's named
//!   node and the reservation's ask) in `super::queue`, which etcd and SQL follow too;
//!   ZooKeeper's own (node names, ownership, what ends a claim) in `rules`.
//!   A *claim* does not wait for the check's disk write (every server logs and syncs
//!   a transaction before it answers): it is made on a `sync` (passed to the
//!   ensemble's leader, which checks our session there) and the stat read behind it,
//!   with the `multi` sent right after them in the same round trip. Its answer is the
//!   claim's confirmation: a failed check, or a connection dropped before it answered,
//!   ends the claim (`record_lost`), as a renew proven by the ensemble's leader
//!   replaces it. A `sync` proves less than a transaction only when the server that
//!   answers it is a leader cut off from its quorum; it steps down within about
//!   syncLimit × tickTime and drops its connections, which fails the check, before a
//!   new leader can expire our session (a session timeout after the new one starts).
//! - **The leader watches its own node** (invariant 9): the acquisition sets a watch
//!   on it, and a delete or data change by another client, or the session's expiry,
//!   ends the claim at once.
//! - **Followers** watch their predecessor (their turn); a vanished predecessor means
//!   list again and re-check, never "I lead" without checking. For `/leader` they also
//!   need news of a new holder, without a herd at a handover (`queue::holder_news`):
//!   the next in line watches the head anyway (its predecessor); a follower further
//!   back watches the *announcement* `/<root>/<election>.leader` (a persistent node
//!   beside the election's, never listed by Curator) and the next in line's node, and
//!   reads the head without a watch. A leasekeeper candidate writes its node's name
//!   to the announcement right after it claims (in the background), so a handover
//!   wakes the next in line alone, and the others look once the claim is made. Only
//!   a leasekeeper candidate announces: our nodes carry a tag as the first group of
//!   their Curator-shaped uuid (`rules::OUR_TAG`). Behind a next in line without it
//!   (a Curator `LeaderLatch`), or while the announcement does not name the holder
//!   (none written yet, or ACLs that refuse it), followers watch the head itself,
//!   and look 50 to 500 ms after it changes (`super::stagger`), so that the
//!   successor goes first.
//! - **Session expiry** ends everything at once: the next campaign opens a new session
//!   and a new node.
//! - **Fencing token**: the creation zxid (`czxid`) of the leader's node. zxids grow
//!   across the whole ensemble, so they keep growing even if the election's parent node
//!   is deleted and recreated (a sequence number would start again at 0).
//! - **Release** forgets the node, then closes the session, which deletes our
//!   ephemeral node in the close's own transaction (one transaction and no read, so
//!   the successor's first requests do not queue behind a second one): a release cut short (its answer never came, the
//!   elector gave up on it) must not leave the node for the next campaign to find by
//!   its prefix and claim again with the same czxid — two tenures never share a
//!   token. The next campaign opens a new session with a new prefix.
//! - **Switchover** (`release_to(to)`): forgotten first, as a release. The leader finds
//!   the latch node of lowest sequence whose data is `to`, and in one `multi` checks
//!   that node exists, creates (or rewrites, at the version read) the *reservation*
//!   `/<root>/<election>.switchover` — a persistent node beside the election's node,
//!   so Curator's `LeaderLatch` never lists it — holding that node's name, and
//!   deletes our own node; then it closes the session as a release does. No such
//!   node: a plain release, with a warning (the leader has stepped down already).
//!   A campaign reads the reservation with the list of the queue (and beside the
//!   next-in-line proof). A candidate whose node is ahead of the named node (first,
//!   or not), while that node is still listed, deletes its node and creates a new
//!   one, at the end of the queue, and never claims in that round: its successor's
//!   watch fires, and so the queue moves on until the named node is first and claims
//!   as usual (protected create, session check, czxid token, watches on the
//!   predecessor, all unchanged). The reservation needs no clock: it asks nothing
//!   once the named node is gone (its session ended). The named candidate deletes it
//!   when it leads (best effort; one naming a gone node may stay, void, until the
//!   next switchover rewrites it). Curator candidates in the same election do not
//!   read it: the first of them in the queue leads as after a plain release.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use zookeeper_client::{
    Acls, Client, CreateMode, EventType, SessionState, StateWatcher, TlsOptions, WatchedEvent,
};

use super::queue::{self, Entry as Queued, HolderNews, Stand};
use super::{Backend, BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::settings::fmt_d;
use crate::status::{Holder, Mode};

pub mod entry;
mod rules;
mod settings;
mod transport;
pub use settings::{Args, ZkSettings, ZkTls};
use transport::Relay;

fn zk(op: &'static str) -> impl FnOnce(zookeeper_client::Error) -> BackendError {
    move |e| BackendError::Store {
        op,
        message: e.to_string(),
    }
}

pub struct ZkBackend {
    settings: ZkSettings,
    dir: String,
    /// `<dir>.switchover`: the switchover's reservation (see the module doc).
    reservation: String,
    /// `<dir>.leader`: the announcement a new leader writes (see the module doc).
    announcement: String,
    identity: String,
    requested: Duration,
    /// The negotiated session timeout.
    ttl: Duration,
    renew_interval: Duration,
    client: Option<Client>,
    /// The session's own transport (plaintext only): dropped, the session ends at the
    /// server and the library can no longer reach it (see `transport`).
    relay: Option<Relay>,
    /// `_c_<uuid>-latch-`: our protection prefix for this session (`__READ__` or
    /// `__WRIT__` for `--mode`, as Curator's `InterProcessReadWriteLock` names them).
    prefix: String,
    mode: LockMode,
    /// The head's holder and how it holds, as last found (`--mode` only).
    observed: Option<(Holder, Mode)>,
    /// How the head of the queue holds, by its name, as last listed.
    head_mode: Option<Mode>,
    /// Our node's name (not the path), once created.
    node: Option<String>,
    /// While following: the watch on our predecessor in the queue (our turn may come
    /// when it goes) and, unless the predecessor is the head, on the head of the queue
    /// (the holder; a follower's `/leader` names it). Kept across the elector's waits.
    watching: Option<OwnWatch>,
    holder_watch: Option<News>,
    /// Both watches are set: nothing about the holder or our turn can change unseen.
    watched: bool,
    /// Our predecessor is the head of the queue (one watch serves both).
    head_is_predecessor: bool,
    /// The head, our only predecessor, was deleted: we are first in the queue now,
    /// since sequence numbers only grow (see `campaign`).
    next_in_line: bool,
    /// The session's state changes: expiry, disconnect and reconnect all mean "look again".
    session_events: Option<StateWatcher>,
    /// While leading: the watch on our own node, kept across the elector's polls.
    own_watch: Option<OwnWatch>,
    /// After a claim: its `multi` check, still on its way (see `sync_prove_and_watch`).
    confirming: Option<Confirmation>,
    /// The head changed and we are not next in line: look once this passes (or our
    /// turn comes). Kept in the struct so that a wait dropped meanwhile resumes it.
    stagger_until: Option<tokio::time::Instant>,
}

/// A pending watch on our own node (pinned, so polling it again loses nothing).
type OwnWatch = Pin<Box<dyn Future<Output = WatchedEvent> + Send>>;

/// A follower's pending news of a new holder (see `queue::holder_news`): `true` when
/// it says to look at once (an announcement: the claim is made), `false` when the
/// head changed (the successor may not have claimed yet).
type News = Pin<Box<dyn Future<Output = bool> + Send>>;

/// A claim's `multi` check on its way: `true` once the ensemble's leader ran it.
type Confirmation = Pin<Box<dyn Future<Output = bool> + Send>>;

/// Our node is created once and never written: its version stays 0.
const OWN_VERSION: i32 = 0;

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

    pub fn new(settings: &ZkSettings, lease: &Candidacy) -> Self {
        let (election, identity, ttl) = (lease.election, lease.identity, lease.timing.ttl);
        let dir = format!("{}/{election}", settings.root.trim_end_matches('/'));
        ZkBackend {
            renew_interval: lease.timing.renew_interval,
            settings: settings.clone(),
            reservation: format!("{dir}.switchover"),
            announcement: format!("{dir}.leader"),
            dir,
            identity: identity.to_owned(),
            requested: ttl,
            ttl,
            client: None,
            prefix: new_prefix(lease.mode),
            mode: lease.mode,
            observed: None,
            head_mode: None,
            node: None,
            watching: None,
            holder_watch: None,
            watched: false,
            head_is_predecessor: false,
            next_in_line: false,
            stagger_until: None,
            session_events: None,
            own_watch: None,
            confirming: None,
            relay: None,
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
            None => {
                // Kept before the connect is awaited: a campaign dropped meanwhile
                // leaves it for `forget` to close.
                let relay =
                    Relay::open(&self.settings.connect)
                        .await
                        .map_err(|e| BackendError::Store {
                            op: "connect",
                            message: format!("no loopback relay for the session: {e}"),
                        })?;
                let connect = relay.connect.clone();
                self.relay = Some(relay);
                connector.connect(&connect).await
            }
        }
        .map_err(zk("connect"))?;
        let negotiated = client.session_timeout();
        if negotiated != self.requested {
            tracing::warn!(
                requested = %fmt_d(self.requested),
                negotiated = %fmt_d(negotiated),
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

    fn unwatch(&mut self) {
        self.watching = None;
        self.holder_watch = None;
        self.watched = false;
        self.head_is_predecessor = false;
    }

    /// The rest of a follower's stagger (see `wait_for_change`): until it passes or
    /// our own turn comes, then a look. Cancel-safe: dropped, the next wait resumes it.
    async fn finish_stagger(&mut self) -> Wake {
        if let Some(until) = self.stagger_until {
            match self.watching.as_mut() {
                Some(w) => {
                    tokio::select! {
                        _ = w => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
                None => tokio::time::sleep_until(until).await,
            }
        }
        self.stagger_until = None;
        self.unwatch();
        Wake::Changed
    }

    fn forget(&mut self) {
        self.client = None;
        self.relay = None;
        self.node = None;
        self.unwatch();
        self.session_events = None;
        self.own_watch = None;
        self.confirming = None;
        self.prefix = new_prefix(self.mode);
    }

    /// Release, after a switchover's reservation for the candidate `to` when one is
    /// named (see the module doc).
    async fn release_to_next(&mut self, to: Option<&str>) -> Result<(), BackendError> {
        // Forget first: if this future is dropped at an await below, the next
        // campaign must not find this node again (see the module doc).
        let (client, node, relay) = (self.client.clone(), self.node.clone(), self.relay.take());
        let events = self.session_events.take();
        self.forget();
        let (Some(client), Some(node)) = (client, node) else {
            if let Some(to) = to {
                tracing::warn!(to, "switchover: we hold no node to hand over");
            }
            return Ok(());
        };
        if let Some(to) = to {
            let (dir, reservation) = (self.dir.as_str(), self.reservation.as_str());
            let options = CreateMode::Persistent.with_acls(self.acls());
            let reserved = Self::reserve(&client, (dir, reservation, &options), to, &node).await;
            super::log_reservation(to, reserved);
        }
        // Closing the session deletes our ephemeral node in the close's own
        // transaction: one transaction on the server where a delete and then a close
        // were two (the successor's first requests queued behind the second), and no
        // read before it. The library closes the session once its last handle is gone.
        // (When this future is dropped before the close is answered, the relay's drop
        // ends the connection, and the node goes with the session's expiry.)
        drop(client);
        let closed = match events {
            Some(mut events) => session_closed(&mut events).await,
            None => false,
        };
        drop(relay);
        if closed {
            Ok(())
        } else {
            Err(BackendError::Store {
                op: "release",
                message: "the session ended without closing; our node goes with its expiry".into(),
            })
        }
    }

    /// The switchover's reservation for the first live candidate named `to`: one
    /// `multi` that checks the named node is there, creates or rewrites the
    /// reservation to name it, and deletes our own node, so that no follower sees
    /// our node gone and no reservation. The named node, or `None` when `to` is not
    /// queued (or it, or our node, went meanwhile): nothing is written then.
    /// (`at`: the election's node, the reservation's, and how to create the latter.)
    async fn reserve(
        client: &Client,
        at: (&str, &str, &zookeeper_client::CreateOptions<'_>),
        to: &str,
        ours: &str,
    ) -> Result<Option<String>, BackendError> {
        let (dir, reservation, options) = at;
        let queue = read_candidates(client, dir, "release").await?;
        let entries = queue
            .iter()
            .map(|e| (e.name.as_str(), e.identity.as_bytes()));
        let Some(named) = queue::named_entry(entries, to, &ours).map(|i| &queue[i]) else {
            return Ok(None);
        };
        // Another switchover may write the reservation between our read of it and our
        // multi (its version check fails then): read it again and retry.
        for _ in 0..3 {
            let existing = client
                .check_stat(reservation)
                .await
                .map_err(zk("release"))?;
            let mut multi = client.new_multi_writer();
            let path = |name: &str| format!("{dir}/{name}");
            multi
                .add_check_version(&path(&named.name), -1)
                .map_err(zk("release"))?;
            match existing {
                Some(stat) => {
                    multi.add_set_data(reservation, named.name.as_bytes(), Some(stat.version))
                }
                None => multi.add_create(reservation, named.name.as_bytes(), options),
            }
            .map_err(zk("release"))?;
            multi.add_delete(&path(ours), None).map_err(zk("release"))?;
            match multi.commit().await {
                Ok(_) => return Ok(Some(named.name.clone())),
                Err(zookeeper_client::MultiWriteError::OperationFailed { index: 1, .. }) => {}
                Err(zookeeper_client::MultiWriteError::OperationFailed { .. }) => return Ok(None),
                Err(e) => return Err(zk("release")(e.into())),
            }
        }
        Ok(None)
    }

    /// Our only predecessor was the head, and it is gone. No node can come before
    /// ours later: sequence numbers only grow, and every node created before ours was
    /// in the list we read after our own create (a session reads its own writes). So
    /// we are first, and the usual proof (our node, of this session, checked through
    /// the ensemble's leader) is all that is left: one round trip, not a list first,
    /// with the switchover's reservation read beside it. `None`: the full round
    /// decides (the proof failed, or a reservation names another node).
    async fn claim_next_in_line(
        &mut self,
        client: &Client,
        node: &str,
    ) -> Result<Option<Campaign>, BackendError> {
        let path = format!("{}/{node}", self.dir);
        let reserved = client.get_data(&self.reservation);
        let proof = Self::sync_prove_and_watch(client, &self.dir, &path);
        let (reserved, proof) = tokio::join!(reserved, proof);
        let reserved = reservation_of(reserved)?;
        if queue::reserved_for_another(reserved.as_ref().map(|r| r.node.as_str()).as_ref(), &node) {
            return Ok(None);
        }
        match proof? {
            Some((s, watch, confirmation)) => {
                self.own_watch = Some(watch);
                self.confirming = Some(confirmation);
                self.spend_reservation(client, reserved);
                if self.mode != LockMode::Shared {
                    self.announce(client, node);
                }
                Ok(Some(Campaign::Acquired {
                    token: rules::token_of(s.czxid),
                }))
            }
            _ => Ok(None),
        }
    }

    /// One full campaign round: our node (created if needed), the queue, the
    /// switchover's reservation and the leader's announcement (read together), then a
    /// claim if we are first, or the watches of a follower. `None` when the round gave
    /// our place up to a switchover's named candidate (only when `may_requeue`): look
    /// again at once.
    async fn campaign_round(
        &mut self,
        client: &Client,
        may_requeue: bool,
    ) -> Result<Option<Campaign>, BackendError> {
        let ours = self.ensure_node(client).await?;
        // Both go out now, the reservation first; a session's requests are served in
        // order, so a named node that died after the reservation was read is missing
        // from the list (the reservation is void then).
        let reserved = client.get_data(&self.reservation);
        let listed = client.list_children(&self.dir);
        let announced = client.get_data(&self.announcement);
        let (reserved, listed, announced) = tokio::join!(reserved, listed, announced);
        let reserved = reservation_of(reserved)?;
        let queue = rules::queue_of(listed.map_err(zk("campaign"))?);
        let announced = match announced {
            Ok((data, stat)) => Some((String::from_utf8_lossy(&data).into_owned(), stat.mzxid)),
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => return Err(zk("campaign")(e)),
        };
        let stand = queue::stand(&queue, &ours);
        if stand == Stand::Gone {
            // Our node is gone (the session expired meanwhile): start over.
            self.forget();
            return Ok(Some(Campaign::Held(None)));
        }
        let named = reserved.as_ref().map(|r| &r.node);
        if may_requeue && queue::lets_pass(&queue, &ours, named) {
            self.requeue(client, &ours).await?;
            return Ok(None);
        }
        self.observe(&queue);
        let Stand::Behind { turn, head } = stand else {
            return self.claim_first(client, &ours, reserved).await.map(Some);
        };
        let (head, turn) = self.watched(turn, head);
        if self.mode == LockMode::Shared {
            // A reader watches the last writer's node ahead (its turn may come when
            // that goes), and the head for news.
            return self.follow_head(client, &head, turn, None).await.map(Some);
        }
        self.follow(client, (&queue, &ours), (head.as_str(), turn), announced)
            .await
            .map(Some)
    }

    /// The paths a follower watches, for the node it waits for (`turn`) and the head
    /// when that is another: the head's, and the other one's (`None`: the head is the
    /// one it waits for, and one watch serves both).
    fn watched(
        &self,
        turn: &Queued<String>,
        head: Option<&Queued<String>>,
    ) -> (String, Option<String>) {
        let path = |e: &Queued<String>| format!("{}/{}", self.dir, e.name);
        match head {
            Some(h) => (path(h), Some(path(turn))),
            None => (path(turn), None),
        }
    }

    /// Notes how the head holds (`--mode` only, for `/leader`'s holders), by its
    /// node's name; the campaign's answer names the holder (`observed`).
    fn observe(&mut self, queue: &[Queued<String>]) {
        self.head_mode = queue.first().map(|head| match head.shared {
            true => Mode::Shared,
            false => Mode::Exclusive,
        });
    }

    /// What a campaign found, for `/leader`'s holders (`--mode` only).
    fn observed(&mut self, found: &Campaign) {
        if self.mode == LockMode::Election {
            return;
        }
        self.observed = match found {
            Campaign::Acquired { token } => Some((
                Holder {
                    identity: self.identity.clone(),
                    token: Some(*token),
                },
                self.mode.held_as(),
            )),
            Campaign::Held(h) => h.clone().zip(self.head_mode),
        };
    }

    /// Our node is the first: ours, owned by this very session (CURATOR-1211), and
    /// proven where the session would expire; the two requests go out together.
    async fn claim_first(
        &mut self,
        client: &Client,
        ours: &str,
        reserved: Option<Reservation>,
    ) -> Result<Campaign, BackendError> {
        let path = format!("{}/{ours}", self.dir);
        match Self::sync_prove_and_watch(client, &self.dir, &path).await? {
            Some((s, watch, confirmation)) => {
                self.own_watch = Some(watch);
                self.confirming = Some(confirmation);
                self.spend_reservation(client, reserved.filter(|r| r.node == ours));
                if self.mode != LockMode::Shared {
                    self.announce(client, ours);
                }
                Ok(Campaign::Acquired {
                    token: rules::token_of(s.czxid),
                })
            }
            _ => {
                self.forget();
                Ok(Campaign::Held(None))
            }
        }
    }

    /// A follower's watches, sent together with the read of the holder (the head):
    /// our predecessor (our turn may come when it goes) and the news of a new holder
    /// (`queue::holder_news`): the head's data itself (its deletion — a release, an
    /// expired session — or a rewrite reaches each such follower once), or the
    /// election's announcement and the next in line's node.
    /// (`(queue, ours)`: the queue and our node; `(head, predecessor)`: the paths of
    /// [`Self::watched`].)
    async fn follow(
        &mut self,
        client: &Client,
        (queue, ours): (&[Queued<String>], &String),
        (head, predecessor): (&str, Option<String>),
        announced: Option<(String, i64)>,
    ) -> Result<Campaign, BackendError> {
        let seen = announced.as_ref().map(|a| a.1);
        let announces = |e: &Queued<String>| rules::announces(&e.name);
        match queue::holder_news(queue, ours, announced.as_ref().map(|a| &a.0), announces) {
            HolderNews::Head => self.follow_head(client, head, predecessor, seen).await,
            HolderNews::Announcement => {
                let next = format!("{}/{}", self.dir, queue[1].name);
                let predecessor = predecessor.unwrap_or_else(|| next.clone());
                self.follow_announcement(client, (head, &next, &predecessor), seen)
                    .await
            }
        }
    }

    /// Watches on the head's data and our predecessor (`None`: the head is our
    /// predecessor, and one watch serves both), and, behind the next in line, on the
    /// announcement (once it names the holder, we may leave the head alone).
    /// (`seen`: the announcement's mzxid as the campaign read it.)
    async fn follow_head(
        &mut self,
        client: &Client,
        head: &str,
        predecessor: Option<String>,
        seen: Option<i64>,
    ) -> Result<Campaign, BackendError> {
        let head_read = client.get_and_watch_data(head);
        let turn = predecessor
            .as_deref()
            .map(|p| client.check_and_watch_stat(p));
        let announced = turn
            .as_ref()
            .map(|_| client.check_and_watch_stat(&self.announcement));
        let (holder, head_watch) = match head_read.await {
            Ok((data, stat, watcher)) => (
                holder_of(&data, &stat),
                Some(Box::pin(watcher.changed()) as OwnWatch),
            ),
            Err(zookeeper_client::Error::NoNode) => (None, None),
            Err(e) => return Err(zk("campaign")(e)),
        };
        let Some(turn) = turn else {
            self.watched = head_watch.is_some();
            self.head_is_predecessor = head_watch.is_some();
            self.watching = head_watch;
            return Ok(Campaign::Held(holder));
        };
        let (stat, watcher) = turn.await.map_err(zk("campaign"))?;
        if stat.is_some() {
            self.watching = Some(Box::pin(watcher.changed()));
        }
        let announced = match announced {
            Some(a) => Some(announcement_watch(a.await.map_err(zk("campaign"))?, seen)),
            None => None,
        };
        self.watched = self.watching.is_some() && head_watch.is_some();
        self.holder_watch = head_watch.map(|head| {
            Box::pin(async move {
                match announced {
                    Some(a) => tokio::select! {
                        _ = head => false,
                        _ = a => true,
                    },
                    None => {
                        head.await;
                        false
                    }
                }
            }) as News
        });
        Ok(Campaign::Held(holder))
    }

    /// Behind a next in line that announces its claims: watches on our predecessor,
    /// the announcement and the next in line's node (one watch when it is our
    /// predecessor), and a plain read of the head. The head's deletion wakes the next
    /// in line alone; we hear of the new holder from its announcement.
    /// (`at`: the head, the next in line, our predecessor; `seen`: the
    /// announcement's mzxid as the campaign read it.)
    async fn follow_announcement(
        &mut self,
        client: &Client,
        at: (&str, &str, &str),
        seen: Option<i64>,
    ) -> Result<Campaign, BackendError> {
        let (head, next, predecessor) = at;
        let head_read = client.get_data(head);
        let announced = client.check_and_watch_stat(&self.announcement);
        let turn = client.check_and_watch_stat(predecessor);
        let next_watch = (next != predecessor).then(|| client.check_and_watch_stat(next));
        let holder = match head_read.await {
            Ok((data, stat)) => holder_of(&data, &stat),
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => return Err(zk("campaign")(e)),
        };
        let announced = announcement_watch(announced.await.map_err(zk("campaign"))?, seen);
        let (stat, watcher) = turn.await.map_err(zk("campaign"))?;
        if stat.is_some() {
            self.watching = Some(Box::pin(watcher.changed()));
        }
        let next_watch: Option<Pin<Box<dyn Future<Output = ()> + Send>>> = match next_watch {
            None => None,
            Some(w) => Some(match w.await.map_err(zk("campaign"))? {
                (Some(_), watcher) => Box::pin(async move {
                    watcher.changed().await;
                }),
                // Gone already: look again at once.
                (None, _) => Box::pin(std::future::ready(())),
            }),
        };
        let news: News = Box::pin(async move {
            match next_watch {
                Some(next) => tokio::select! {
                    _ = announced => {}
                    _ = next => {}
                },
                None => announced.await,
            }
            true
        });
        self.watched = self.watching.is_some();
        self.holder_watch = Some(news);
        Ok(Campaign::Held(holder))
    }

    /// Gives our place up to a switchover's named candidate queued behind us: our node
    /// goes and the next round creates a new one, at the end of the queue. Never a
    /// claim: the new node's sequence and czxid come after the named candidate's.
    /// The delete wakes our successor, which does the same unless it is the named one.
    async fn requeue(&mut self, client: &Client, ours: &str) -> Result<(), BackendError> {
        // Forgotten first: a requeue cut short leaves the next round to find the node
        // again by its prefix (when the delete never ran) or to create a new one.
        self.node = None;
        tracing::info!(
            node = ours,
            "switchover: queueing again behind the named candidate"
        );
        match client.delete(&format!("{}/{ours}", self.dir), None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
            Err(e) => Err(zk("campaign")(e)),
        }
    }

    /// Deletes the reservation that named us, now that we lead, unless it was written
    /// again since it was read. In the background: it is only tidying (a reservation
    /// naming the leader changes nothing, and it is void once our node goes).
    fn spend_reservation(&self, client: &Client, reserved: Option<Reservation>) {
        let Some(r) = reserved else {
            return;
        };
        let (client, path) = (client.clone(), self.reservation.clone());
        tokio::spawn(async move {
            if let Err(e) = client.delete(&path, Some(r.version)).await {
                tracing::debug!(error = %e, "switchover: the spent reservation stays");
            }
        });
    }

    /// Tells the followers behind the next in line that we lead now: our node's name
    /// written to the announcement (`queue::HolderNews`). In the background, after the
    /// claim: their looks follow this write, so they never compete with a claim.
    fn announce(&self, client: &Client, ours: &str) {
        let (client, path, data) = (
            client.clone(),
            self.announcement.clone(),
            ours.as_bytes().to_vec(),
        );
        let acls = self.acls();
        tokio::spawn(async move {
            let options = CreateMode::Persistent.with_acls(acls);
            // Created by the first leader of the election, rewritten by every next one.
            for _ in 0..2 {
                let done = match client.set_data(&path, &data, None).await {
                    Err(zookeeper_client::Error::NoNode) => {
                        client.create(&path, &data, &options).await.map(|_| ())
                    }
                    written => written.map(|_| ()),
                };
                match done {
                    Err(zookeeper_client::Error::NodeExists) => continue,
                    Err(e) => tracing::debug!(error = %e, "the leader's announcement failed"),
                    Ok(()) => {}
                }
                return;
            }
        });
    }

    /// A claim's proof, in one round trip without waiting for a disk write: a `sync`
    /// (the server we are connected to passes it to the ensemble's leader, which checks
    /// our session, and answers once it has applied what that leader committed before
    /// it), then our node's stat with a watch, read behind it on the same session: there,
    /// unwritten, and owned by this very session. The `multi` check of `prove_own_node`
    /// goes out right behind them, and its answer (a disk write later) is the
    /// confirmation: `record_lost` ends the claim when it fails or its connection
    /// drops. That covers the one case where a `sync` proves less than a transaction:
    /// a ZooKeeper leader cut off from its quorum answers syncs until it steps down,
    /// and it closes its client connections when it does, before a new leader can
    /// expire our session (that takes a session timeout from the new leader's start).
    async fn sync_prove_and_watch(
        client: &Client,
        dir: &str,
        path: &str,
    ) -> Result<Option<(zookeeper_client::Stat, OwnWatch, Confirmation)>, BackendError> {
        let synced = client.sync(dir);
        let watched = client.check_and_watch_stat(path);
        // Sent after the two above (the session's requests are served in order, so
        // their answers never wait for this one's disk write).
        let (confirming, check) = (client.clone(), path.to_owned());
        let confirmation = tokio::spawn(async move {
            let mut multi = confirming.new_multi_writer();
            if multi.add_check_version(&check, OWN_VERSION).is_err() {
                return false;
            }
            multi.commit().await.is_ok()
        });
        let confirmation: Confirmation =
            Box::pin(async move { confirmation.await.unwrap_or(false) });
        let (synced, watched) = tokio::join!(synced, watched);
        match synced {
            Ok(()) => {}
            Err(zookeeper_client::Error::SessionExpired) => return Ok(None),
            Err(e) => return Err(zk("campaign")(e)),
        }
        let (stat, watcher) = watched.map_err(zk("campaign"))?;
        let session = client.session_id().0;
        Ok(stat
            .filter(|s| {
                rules::seen_node(Some(s.ephemeral_owner), session).still_ours()
                    && s.version == OWN_VERSION
            })
            .map(|s| (s, Box::pin(watcher.changed()) as OwnWatch, confirmation)))
    }

    /// The proof below and a watch on our node, sent together (one round trip): the
    /// node's stat and the watch when the proof holds and the node is there.
    async fn prove_and_watch(
        client: &Client,
        path: &str,
        op: &'static str,
    ) -> Result<Option<(zookeeper_client::Stat, OwnWatch)>, BackendError> {
        let proof = Self::prove_own_node(client, path, op);
        let watched = client.check_and_watch_stat(path);
        let (proof, watched) = tokio::join!(proof, watched);
        let (stat, watcher) = watched.map_err(zk(op))?;
        Ok(match stat {
            Some(s) if proof? => Some((s, Box::pin(watcher.changed()) as OwnWatch)),
            _ => None,
        })
    }

    /// One transaction through the ensemble's leader that checks our node is there,
    /// unchanged (see the module doc), and a read of its stat sent right behind it on
    /// the same session (so answered from a state at least as new as the check's):
    /// owned by this very session (a node deleted and created again under our name
    /// by another client has version 0 too). `Ok(false)`: it is gone or not ours.
    async fn prove_own_node(
        client: &Client,
        path: &str,
        op: &'static str,
    ) -> Result<bool, BackendError> {
        let mut multi = client.new_multi_writer();
        multi.add_check_version(path, OWN_VERSION).map_err(zk(op))?;
        let checked = multi.commit();
        let stat = client.check_stat(path);
        match checked.await {
            Ok(_) => {}
            Err(e) => {
                return match zookeeper_client::Error::from(e) {
                    zookeeper_client::Error::NoNode
                    | zookeeper_client::Error::BadVersion
                    | zookeeper_client::Error::SessionExpired => Ok(false),
                    other => Err(zk(op)(other)),
                }
            }
        }
        let found = stat.await.map_err(zk(op))?;
        let owner = found.map(|s| s.ephemeral_owner);
        Ok(rules::seen_node(owner, client.session_id().0).still_ours())
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

/// The watch on the announcement as an exists-watch set it (its stat, the watcher):
/// resolves when the announcement changes, or at once when it changed already since
/// the campaign's read found it at `seen` (its mzxid; `None`: not there).
fn announcement_watch(
    (stat, watcher): (
        Option<zookeeper_client::Stat>,
        zookeeper_client::OneshotWatcher,
    ),
    seen: Option<i64>,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    if stat.map(|s| s.mzxid) != seen {
        return Box::pin(std::future::ready(()));
    }
    Box::pin(async move {
        watcher.changed().await;
    })
}

/// What an event on our own node's watch says (see `rules::ends_claim`).
fn own_event(event: &WatchedEvent) -> rules::OwnEvent {
    match event.event_type {
        EventType::NodeDeleted | EventType::NodeDataChanged => rules::OwnEvent::Changed,
        EventType::Session => rules::OwnEvent::Session {
            ended: event.session_state.is_terminated(),
        },
        EventType::NodeCreated | EventType::NodeChildrenChanged => rules::OwnEvent::Other,
    }
}

/// The holder a latch node names: its data (the identity), its czxid (the token).
fn holder_of(data: &[u8], stat: &zookeeper_client::Stat) -> Option<Holder> {
    Some(Holder {
        identity: String::from_utf8_lossy(data).into_owned(),
        token: u64::try_from(stat.czxid).ok(),
    })
}

/// Release's delete, compare-and-act (invariant 5): the node at `path` only when this
/// session owns it, and only at the version read (a node deleted and created again
/// under our name by another client is left alone, even with version 0 like ours).
/// Waits for the session to end; `true` when the library closed it (the server
/// answered the close), `false` when it ended otherwise (expired, or refused).
async fn session_closed(events: &mut StateWatcher) -> bool {
    let mut state = events.peek_state();
    loop {
        match state {
            SessionState::Closed => return true,
            SessionState::Expired | SessionState::AuthFailed => return false,
            _ => state = events.changed().await,
        }
    }
}

/// A switchover's reservation: the name of the latch node it leaves the lease to, and
/// its version (it is deleted only as it was read).
struct Reservation {
    node: String,
    version: i32,
}

/// The reservation as a `get_data` of it found it.
fn reservation_of(
    read: Result<(Vec<u8>, zookeeper_client::Stat), zookeeper_client::Error>,
) -> Result<Option<Reservation>, BackendError> {
    match read {
        Ok((data, stat)) => Ok(Some(Reservation {
            node: String::from_utf8_lossy(&data).into_owned(),
            version: stat.version,
        })),
        Err(zookeeper_client::Error::NoNode) => Ok(None),
        Err(e) => Err(zk("campaign")(e)),
    }
}

/// One latch node of the queue: its name and the identity it holds.
struct Entry {
    name: String,
    identity: String,
}

/// The latch nodes under `dir` with their identities, lowest sequence first. The data
/// requests all go out before the first answer is awaited (one round trip's wait); a
/// node gone in between is left out.
async fn read_candidates(
    client: &Client,
    dir: &str,
    op: &'static str,
) -> Result<Vec<Entry>, BackendError> {
    let names = rules::queue_of(client.list_children(dir).await.map_err(zk(op))?);
    let reads: Vec<_> = names
        .iter()
        .map(|e| client.get_data(&format!("{dir}/{}", e.name)))
        .collect();
    let mut entries = Vec::with_capacity(names.len());
    for (Queued { name, .. }, read) in names.into_iter().zip(reads) {
        match read.await {
            Ok((data, _)) => entries.push(Entry {
                name,
                identity: String::from_utf8_lossy(&data).into_owned(),
            }),
            Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => return Err(zk(op)(e)),
        }
    }
    Ok(entries)
}

fn new_prefix(mode: LockMode) -> String {
    let kind = match mode {
        LockMode::Election => "latch-",
        LockMode::Exclusive => rules::WRITE,
        LockMode::Shared => rules::READ,
    };
    let n: u128 = rand::random();
    let hex = format!("{n:032x}");
    // Curator: _c_<uuid>-latch- (the uuid in its usual 8-4-4-4-12 form), ours with
    // our tag as the first group (96 random bits left).
    format!(
        "_c_{}-{}-{}-{}-{}-{kind}",
        rules::OUR_TAG,
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

impl ZkBackend {
    /// The campaign's rounds: the next in line's one-round-trip claim, else a full
    /// round (twice when it queued again behind a switchover's named candidate).
    async fn campaign_rounds(&mut self) -> Result<Campaign, BackendError> {
        let next_in_line = std::mem::take(&mut self.next_in_line);

        self.stagger_until = None;
        self.unwatch();
        let client = self.client().await?;
        if let (true, Some(node)) = (next_in_line, self.node.clone()) {
            if let Some(acquired) = self.claim_next_in_line(&client, &node).await? {
                return Ok(acquired);
            }
        }
        if let Some(found) = self.campaign_round(&client, true).await? {
            return Ok(found);
        }
        // We queued again behind a switchover's named candidate: one more round finds
        // our new place (and never queues again).
        let found = self.campaign_round(&client, false).await?;
        Ok(found.unwrap_or(Campaign::Held(None)))
    }

    async fn candidates_now(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        let client = self.client().await?;
        let queue = read_candidates(&client, &self.dir, "candidates").await?;
        Ok(Some(queue.into_iter().map(|e| e.identity).collect()))
    }
}

impl Backend for ZkBackend {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    /// The session timeout less one renew interval (at most a third of it). A request
    /// the ensemble's leader runs does not itself touch our session there: touches
    /// reach the leader with the follower server's pings, so what the quorum is sure
    /// of may be our previous request, up to one renew interval before this one was
    /// sent. Measuring the claim from the send time needs that much off.
    fn lease_ttl(&self) -> Duration {
        rules::claim_ttl(self.ttl, self.renew_interval)
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        let found = self.campaign_rounds().await;
        if let Ok(found) = &found {
            self.observed(found);
        }
        found
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        Some(crate::status::Slots::one_lock([self.observed.clone()?]))
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        if let Some(flag) = self.mode.flag() {
            return Err(super::no_switchover_with(flag));
        }
        self.candidates_now().await
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let (Some(client), Some(node)) = (self.client.clone(), self.node.clone()) else {
            return Ok(Renewal::Lost);
        };
        if matches!(client.state(), SessionState::Expired | SessionState::Closed) {
            return Ok(Renewal::Lost);
        }
        let path = format!("{}/{node}", self.dir);
        if self.own_watch.is_some() {
            let proven = Self::prove_own_node(&client, &path, "renew").await?;
            if proven {
                // Proven through the ensemble's leader after the claim: it confirms it.
                self.confirming = None;
            }
            return Ok(if proven {
                Renewal::Renewed
            } else {
                Renewal::Lost
            });
        }
        // The watch on our node ended without news (a disconnect): set it again in
        // the same round trip as the proof.
        let Some((_, watch)) = Self::prove_and_watch(&client, &path, "renew").await? else {
            return Ok(Renewal::Lost);
        };
        self.own_watch = Some(watch);
        self.confirming = None;
        Ok(Renewal::Renewed)
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.release_to_next(None).await
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.release_to_next(Some(to)).await
    }

    /// A follower wakes when its predecessor's node or the holder's changes (one event
    /// each per handover, no herd on every change) or its session's state does. While
    /// both watches stand and the session is connected (its pings are the keep-alive),
    /// the observation is current: the wait ends `Quiet`, with no request.
    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        if self.node.is_none() {
            return Wake::Changed;
        }
        if self.stagger_until.is_some() {
            return self.finish_stagger().await;
        }
        let Self {
            watching,
            holder_watch,
            session_events,
            ..
        } = self;
        let turn = async {
            match watching.as_mut() {
                Some(w) => w.await,
                None => std::future::pending().await,
            }
        };
        let holder = async {
            match holder_watch.as_mut() {
                Some(w) => w.await,
                None => std::future::pending::<bool>().await,
            }
        };
        // An expired session (our node is gone), a disconnect, or a reconnect within the
        // session: each means the queue must be looked at again.
        let session_changed = async {
            match session_events.as_mut() {
                Some(events) => {
                    events.changed().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            event = turn => {
                if event.event_type == EventType::NodeDeleted && self.head_is_predecessor {
                    self.next_in_line = true;
                }
            }
            now = holder => {
                // Announced: the new holder has claimed already; look now.
                if now {
                    self.unwatch();
                    return Wake::Changed;
                }
                // The head changed, and we are not next in line (the head is not our
                // predecessor): let the successor go first, unless our own turn comes.
                // The spent watch goes first: a wait dropped during the stagger must
                // not poll it again.
                self.holder_watch = None;
                self.watched = false;
                self.stagger_until =
                    Some(tokio::time::Instant::now() + super::stagger());
                return self.finish_stagger().await;
            }
            _ = session_changed => {}
            _ = tokio::time::sleep(max) => {
                let connected = self
                    .client
                    .as_ref()
                    .is_some_and(|c| c.state() == SessionState::SyncConnected);
                if self.watched && connected {
                    return Wake::Quiet;
                }
            }
        }
        // A watch that fired is spent; the campaign sets both again.
        self.unwatch();
        Wake::Changed
    }

    async fn record_lost(&mut self) {
        loop {
            let Self {
                own_watch,
                confirming,
                ..
            } = self;
            let changed = async {
                match own_watch.as_mut() {
                    Some(w) => w.await,
                    None => std::future::pending().await,
                }
            };
            let confirmed = async {
                match confirming.as_mut() {
                    Some(c) => c.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = changed => {
                    self.own_watch = None;
                    if rules::ends_claim(own_event(&event)) {
                        return;
                    }
                }
                confirmed = confirmed => {
                    self.confirming = None;
                    if !confirmed {
                        tracing::warn!("the claim's check through the ZooKeeper ensemble's leader failed");
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_names_and_sequences() {
        let p = new_prefix(LockMode::Election);
        assert!(p.starts_with("_c_") && p.ends_with("-latch-"), "{p}");
        assert!(rules::announces(&format!("{p}0000000042")), "{p}");
        assert_eq!(p.len(), "_c_".len() + 36 + "-latch-".len());
        assert_eq!(rules::sequence_of(&format!("{p}0000000042")), Some(42));
    }
}
