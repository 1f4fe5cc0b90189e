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
//!   the successor's first requests do not queue behind a second one; no request
//!   goes ahead of it either: our watch on our node goes with the session, and the
//!   relay sends no second close once the server answered ours): a release cut
//!   short (its answer never came, the elector gave up on it) must not leave the
//!   node for the next campaign to find by its prefix and claim again with the same
//!   czxid — two tenures never share a token. The next campaign opens a new session
//!   with a new prefix.
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
//!
//! The campaign's state is one explicit phase (`core::Phase`: unqueued, queued, next
//! in line, first after the head's delete, following, staggering, leading), and its
//! decisions (what to do after the listing, whom to watch, when to claim, what a
//! watch event means, how a wait goes on) are `core`'s plain functions of `now` and
//! the store's answers. This file does the I/O around them, with the requests in
//! `requests`, the watches in `watches`, the session in `session` and its relay in
//! `transport`.

use std::time::Duration;

use tokio::time::Instant;

use zookeeper_client::{Client, CreateMode, SessionState, StateWatcher};

use super::protocol::{Own, Protocol, Transport, Waited, Waits};
use super::queue;
use super::{BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::status::{Holder, Mode};

mod core;
pub mod driven;
pub mod entry;
mod requests;
mod rules;
mod session;
mod settings;
mod transport;
mod watches;
use self::core::{Claimed, Follow, Heard, Listed, Next, Phase, Renew, Round, WaitFor, Woke};
use requests::{Paths, Reservation};
pub use settings::{Args, ZkSettings, ZkTls};
use transport::Relay;
use watches::ZkPhase;

pub struct ZkTransport {
    settings: ZkSettings,
    /// The election's node, the reservation's and the announcement's.
    paths: Paths,
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
    /// Our node's name (not the path), once created; `None` exactly while the phase
    /// is [`Phase::Unqueued`].
    node: Option<String>,
    /// The session's state changes: expiry, disconnect and reconnect all mean "look again".
    session_events: Option<StateWatcher>,
    /// Where we stand, and what we watch (kept across the elector's waits and polls).
    phase: ZkPhase,
}

/// The ZooKeeper store as a [`super::Backend`].
pub type ZkBackend = Protocol<ZkTransport>;

impl ZkBackend {
    pub fn new(settings: &ZkSettings, lease: &Candidacy) -> Self {
        Protocol::over(ZkTransport::new(settings, lease))
    }
}

impl ZkTransport {
    pub fn new(settings: &ZkSettings, lease: &Candidacy) -> Self {
        let ttl = lease.timing.ttl;
        ZkTransport {
            renew_interval: lease.timing.renew_interval,
            settings: settings.clone(),
            paths: Paths::new(&settings.root, lease.election),
            identity: lease.identity.to_owned(),
            requested: ttl,
            ttl,
            client: None,
            prefix: session::new_prefix(lease.mode),
            mode: lease.mode,
            observed: None,
            head_mode: None,
            node: None,
            session_events: None,
            phase: Phase::Unqueued,
            relay: None,
        }
    }

    /// The session's client, opening a new session (and forgetting our node) when the
    /// old one expired or was closed.
    /// Whether the session of our client ended (expired, closed, refused).
    fn session_ended(&self) -> bool {
        (self.client.as_ref()).is_some_and(|c| session::ended(c.state()))
    }

    async fn client(&mut self) -> Result<Client, BackendError> {
        if self.session_ended() {
            tracing::warn!("zookeeper session ended; opening a new one");
            self.forget();
        }
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let client = session::connect(&self.settings, self.requested, &mut self.relay).await?;
        self.ttl = session::negotiated_ttl(self.requested, client.session_timeout());
        session::ensure_dir(&client, &self.paths.dir, &self.settings).await?;
        self.session_events = Some(client.state_watcher());
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Moves the phase on by `f`.
    fn step(&mut self, f: impl FnOnce(ZkPhase) -> ZkPhase) {
        self.phase = f(std::mem::take(&mut self.phase));
    }

    fn forget(&mut self) {
        self.client = None;
        self.relay = None;
        self.node = None;
        self.session_events = None;
        self.phase = Phase::Unqueued;
        self.prefix = session::new_prefix(self.mode);
    }

    /// Forgets the session and our node before a release (if the release is dropped
    /// at an await, the next campaign must not find this node again: see the module
    /// doc): what the release still needs of them, when we hold a node.
    fn leave(&mut self, to: Option<&str>) -> Option<(Client, String, Leftovers)> {
        let (client, node) = (self.client.clone(), self.node.clone());
        let leftovers = Leftovers {
            relay: self.relay.take(),
            events: self.session_events.take(),
            watches: std::mem::take(&mut self.phase),
        };
        self.forget();
        match (client, node) {
            (Some(client), Some(node)) => Some((client, node, leftovers)),
            _ => {
                if let Some(to) = to {
                    tracing::warn!(to, "switchover: we hold no node to hand over");
                }
                None
            }
        }
    }

    /// Release, after a switchover's reservation for the candidate `to` when one is
    /// named (see the module doc).
    async fn release_to_next(&mut self, to: Option<&str>) -> Result<(), BackendError> {
        let Some((client, node, left)) = self.leave(to) else {
            return Ok(());
        };
        if let Some(to) = to {
            let options = self.create_options();
            let at = (
                self.paths.dir.as_str(),
                self.paths.reservation.as_str(),
                &options,
            );
            let reserved = requests::reserve(&client, at, to, &node).await;
            super::log_reservation(to, reserved);
        }
        // Closing the session deletes our ephemeral node in the close's own
        // transaction: one transaction on the server where a delete and then a close
        // were two (the successor's first requests queued behind the second), and no
        // read before it. The library closes the session once its last handle is gone.
        // The watches go once the session is closed: a watch dropped while the session
        // still has a handle (ours, or a claim's background write still on its way)
        // sends a removeWatches, which the server answers before it reads the close.
        // (When this future is dropped before the close is answered, the relay's drop
        // ends the connection, and the node goes with the session's expiry.)
        drop(client);
        let closed = match left.events {
            Some(mut events) => session::closed(&mut events).await,
            None => false,
        };
        drop(left.watches);
        if let Some(relay) = left.relay {
            relay.close_after(closed);
        }
        session::close_answer(closed)
    }

    /// How we create persistent nodes (the reservation, the announcement).
    fn create_options(&self) -> zookeeper_client::CreateOptions<'static> {
        CreateMode::Persistent.with_acls(session::acls(&self.settings))
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
        node: &String,
    ) -> Result<Option<Campaign>, BackendError> {
        let path = self.paths.node(node);
        let reserved = client.get_data(&self.paths.reservation);
        let proof = requests::sync_prove_and_watch(client, &self.paths.dir, &path);
        let (reserved, proof) = tokio::join!(reserved, proof);
        let reserved = requests::reservation_of(reserved)?;
        let named = reserved.as_ref().map(|r| &r.node);
        let Some(proof) = core::after_shortcut(named, node, proof)? else {
            return Ok(None);
        };
        Ok(Some(self.lead(client, node, proof, reserved)))
    }

    /// We lead on `proof` (our node's stat, its watch, the claim's check on its way):
    /// the reservation that named us goes, and the followers hear of it.
    fn lead(
        &mut self,
        client: &Client,
        ours: &str,
        (stat, own, confirming): (
            zookeeper_client::Stat,
            watches::NodeWatch,
            watches::Confirmation,
        ),
        reserved: Option<Reservation>,
    ) -> Campaign {
        self.phase = Phase::claimed(own, confirming);
        requests::spend_reservation(client, &self.paths.reservation, reserved);
        if self.mode != LockMode::Shared {
            let options = self.create_options();
            requests::announce(client, &self.paths.announcement, ours, options);
        }
        Campaign::Acquired {
            token: rules::token_of(stat.czxid),
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
        let listing = requests::list(client, &self.paths).await?;
        let next = self.after_list(&listing, &ours, may_requeue);
        match next {
            // Our node is gone (the session expired meanwhile): start over.
            Next::StartOver => {
                self.forget();
                Ok(Some(Campaign::Held(None)))
            }
            Next::Requeue => self.requeue(client, &ours).await.map(|()| None),
            Next::Claim { spend } => {
                let reserved = listing.reserved.filter(|_| spend);
                self.claim_first(client, &ours, reserved).await.map(Some)
            }
            Next::Follow(follow) => self.follow(client, follow).await.map(Some),
        }
    }

    /// What to do after `listing` (see `core::after_list`), noting how the head holds.
    fn after_list(
        &mut self,
        listing: &requests::Listing,
        ours: &String,
        may_requeue: bool,
    ) -> Next<String> {
        let listed = Listed {
            queue: &listing.queue,
            ours,
            reserved: listing.reserved.as_ref().map(|r| &r.node),
            announced: listing.announced.as_ref().map(|(n, z)| (n, *z)),
            may_requeue,
            reader: self.mode == LockMode::Shared,
            flaws: core::Flaws::default(),
        };
        self.observe(&listing.queue);
        core::after_list(listed, |e| rules::announces(&e.name))
    }

    /// Our node, created if needed; a lost create answer is found by its prefix.
    async fn ensure_node(&mut self, client: &Client) -> Result<String, BackendError> {
        if let Some(n) = &self.node {
            return Ok(n.clone());
        }
        let options = CreateMode::EphemeralSequential.with_acls(session::acls(&self.settings));
        let ours = (self.prefix.as_str(), self.identity.as_str());
        let name = requests::ensure_node(client, &self.paths.dir, ours, &options).await?;
        self.node = Some(name.clone());
        self.step(Phase::queued);
        Ok(name)
    }

    /// Notes how the head holds (`--mode` only, for `/leader`'s holders), by its
    /// node's name; the campaign's answer names the holder (`observed`).
    fn observe(&mut self, queue: &[queue::Entry<String>]) {
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
        let path = self.paths.node(ours);
        let proof = requests::sync_prove_and_watch(client, &self.paths.dir, &path).await?;
        match core::after_claim(proof) {
            Claimed::Lead(proof) => Ok(self.lead(client, ours, proof, reserved)),
            Claimed::StartOver => {
                self.forget();
                Ok(Campaign::Held(None))
            }
        }
    }

    /// A follower's reads and watches (see [`Follow`]), sent together: the phase they
    /// make, and the holder the head names.
    async fn follow(
        &mut self,
        client: &Client,
        follow: Follow<String>,
    ) -> Result<Campaign, BackendError> {
        let announcement = self.paths.announcement.as_str();
        let (holder, phase) = match self.paths.of(follow) {
            Follow::Head {
                head,
                predecessor,
                seen,
            } => {
                let predecessor = predecessor.as_deref();
                watches::follow_head(client, &head, predecessor, (announcement, seen)).await?
            }
            Follow::Announcement {
                head,
                predecessor,
                next,
                seen,
            } => {
                let at = (head.as_str(), predecessor.as_str(), next.as_deref());
                watches::follow_announcement(client, at, (announcement, seen)).await?
            }
        };
        self.phase = phase;
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
        self.phase = Phase::Unqueued;
        tracing::info!(
            node = ours,
            "switchover: queueing again behind the named candidate"
        );
        requests::delete_node(client, &self.paths.node(ours)).await
    }

    /// The campaign's rounds: the next in line's one-round-trip claim, else a full
    /// round (twice when it queued again behind a switchover's named candidate).
    async fn campaign_rounds(&mut self) -> Result<Campaign, BackendError> {
        let (phase, round) = std::mem::take(&mut self.phase).begin();
        self.phase = phase;
        let client = self.client().await?;
        if let (Round::Shortcut, Some(node)) = (round, self.node.clone()) {
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

    /// Whether the session is connected now (its pings are the keep-alive).
    fn connected(&self) -> bool {
        (self.client.as_ref()).is_some_and(|c| c.state() == SessionState::SyncConnected)
    }

    /// What ended a wait, as the core takes it.
    fn hear(&mut self, woke: Woke) -> Heard {
        let phase = std::mem::take(&mut self.phase);
        let (phase, heard) = phase.on_wake(woke, tokio::time::Instant::now(), super::stagger);
        self.phase = phase;
        heard
    }

    /// What ended the leader's watch on its own node, or its claim's check, as the
    /// core takes it; `true`: the claim is lost.
    fn lost_on(&mut self, news: ClaimNews) -> bool {
        let phase = std::mem::take(&mut self.phase);
        let (phase, lost) = match news {
            ClaimNews::Own(ref event) => phase.on_own(watches::own_event(event)),
            ClaimNews::Confirmed(ran) => phase.on_confirmation(ran),
        };
        self.phase = phase;
        if lost && matches!(news, ClaimNews::Confirmed(_)) {
            tracing::warn!("the claim's check through the ZooKeeper ensemble's leader failed");
        }
        lost
    }

    /// The session and the path of the node a renew proves, while the session lives.
    fn renewing(&self) -> Option<(Client, String)> {
        let (client, node) = (self.client.clone()?, self.node.as_ref()?);
        let ended = matches!(client.state(), SessionState::Expired | SessionState::Closed);
        (!ended).then(|| (client.clone(), self.paths.node(node)))
    }
}

/// What a release still closes once the session is forgotten.
struct Leftovers {
    /// The session's relay.
    relay: Option<Relay>,
    /// The session's state changes.
    events: Option<StateWatcher>,
    /// The phase the session left, with its watches: dropped once the session is
    /// closed, so that none of them sends a removeWatches ahead of the close.
    watches: ZkPhase,
}

/// What ended the leader's wait on its claim.
pub enum ClaimNews {
    /// An event on the watch on our own node.
    Own(zookeeper_client::WatchedEvent),
    /// The claim's `multi` check answered (`true`: it ran).
    Confirmed(bool),
}

/// The answer of `f`, or never when there is none.
async fn when<F: std::future::Future + Unpin>(f: Option<&mut F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// What ended the leader's wait on its claim: the watch on our own node, or the
/// claim's check.
async fn claim_news(
    (own, confirming): (
        Option<&mut watches::NodeWatch>,
        Option<&mut watches::Confirmation>,
    ),
) -> ClaimNews {
    tokio::select! {
        event = when(own) => ClaimNews::Own(event),
        ran = when(confirming) => ClaimNews::Confirmed(ran),
    }
}

/// What ended a follower's wait: one of its watches, its session's state (an expired
/// session, a disconnect, a reconnect: each means look again), or the time (`None`).
async fn woken(
    (turn, news): (Option<&mut watches::NodeWatch>, Option<&mut watches::News>),
    session_events: Option<&mut StateWatcher>,
    max: Duration,
) -> Option<Woke> {
    let session_changed = async {
        match session_events {
            Some(events) => events.changed().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        event = when(turn) => Some(Woke::Turn(watches::node_event(&event))),
        announced = when(news) => Some(Woke::News(announced)),
        _ = session_changed => Some(Woke::Session),
        _ = tokio::time::sleep(max) => None,
    }
}

impl Transport for ZkTransport {
    type News = ClaimNews;
    type Look = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn no_switchover(&self) -> Option<&'static str> {
        self.mode.flag()
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
        let client = self.client().await?;
        let queue = requests::read_candidates(&client, &self.paths.dir, "candidates").await?;
        Ok(Some(queue.into_iter().map(|e| e.identity).collect()))
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let Some((client, path)) = self.renewing() else {
            return Ok(Renewal::Lost);
        };
        let own = match self.phase.renewal() {
            Renew::Prove => {
                (requests::prove_own_node(&client, &path, "renew").await?).then_some(None)
            }
            // The watch on our node ended without news (a disconnect): set it again in
            // the same round trip as the proof.
            Renew::ProveAndWatch => (requests::prove_and_watch(&client, &path, "renew").await?)
                .map(|(_, watch)| Some(watch)),
        };
        let Some(own) = own else {
            return Ok(Renewal::Lost);
        };
        // Proven through the ensemble's leader after the claim: it confirms it.
        self.step(|phase| phase.renewed(own));
        Ok(Renewal::Renewed)
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.release_to_next(None).await
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.release_to_next(Some(to)).await
    }

    fn waits(&mut self) -> Waits {
        match self.phase.wait() {
            WaitFor::Now => Waits::Now,
            WaitFor::Stagger => Waits::Stagger,
            WaitFor::Watches => Waits::Store,
        }
    }

    /// A follower wakes when its predecessor's node or the holder's changes (one event
    /// each per handover, no herd on every change) or its session's state does. While
    /// both watches stand and the session is connected (its pings are the keep-alive),
    /// the observation is current: the wait ends `Quiet`, with no request.
    async fn wait(&mut self, max: Duration) -> Waited {
        let woke = woken(self.phase.watches_mut(), self.session_events.as_mut(), max).await;
        let woke = woke.unwrap_or(Woke::Timeout {
            connected: self.connected(),
        });
        match self.hear(woke) {
            Heard::Look => Waited::Wake(Wake::Changed),
            Heard::Quiet => Waited::Wake(Wake::Quiet),
            Heard::Stagger => Waited::Stagger,
        }
    }

    fn stagger_until(&mut self) -> Option<Instant> {
        self.phase.staggering_mut().map(|(until, _)| until)
    }

    /// Our turn's watch fired.
    async fn turn_comes(&mut self) {
        let turn = self.phase.staggering_mut().and_then(|(_, turn)| turn);
        when(turn).await;
    }

    fn stagger_over(&mut self) {
        self.step(Phase::looked);
    }

    async fn own_news(&mut self) -> Option<ClaimNews> {
        Some(claim_news(self.phase.claim_mut()).await)
    }

    fn on_own(&mut self, _now: Instant, news: ClaimNews) -> Own<Self::Look> {
        if self.lost_on(news) {
            Own::Lost
        } else {
            Own::Quiet
        }
    }

    async fn own_look(&mut self, look: Self::Look) -> bool {
        match look {}
    }
}
