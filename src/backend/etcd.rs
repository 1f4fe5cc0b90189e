//! `etcd` backend: the key layout and queue of etcd's own `concurrency.Election`.
//!
//! Every candidate holds a lease of `--ttl` (whole seconds, rounded up) and a key
//! `<election>/<lease id in hex>` = identity, attached to that lease and created only
//! if absent. The key with the lowest create revision under `<election>/` leads, so a
//! Go service using `concurrency.Election`, `etcdctl elect <election>` and leasekeeper
//! take part in one election, and `etcdctl elect -l <election>` shows who leads.
//!
//! - **Fencing token**: the create revision of the leader's key (etcd revisions only
//!   grow, so every later tenure has a greater one).
//! - **Followers** watch only the key just ahead of theirs for a delete, from the
//!   revision of the read that found it (no missed events, no herd), and news of a
//!   new holder (to keep `/leader` current; `queue::holder_news`): the next in line
//!   watches the leader's key anyway (its predecessor); a follower further back
//!   watches the *announcement* `<election>.leader` (outside the prefix, so
//!   `concurrency.Election` never counts it) and the next in line's key. A
//!   leasekeeper candidate puts its key there right after it claims (in the
//!   background), so a handover wakes the next in line alone, and the others look
//!   once the claim is made. Only a leasekeeper candidate announces: it asks for a
//!   lease id with a tag in its upper bits (`rules::LEASE_TAG`; etcd's own ids start
//!   with bits of the member's id). Behind a next in line without it (`etcdctl
//!   elect`, a Go elector), or while the announcement does not name the leader's key
//!   (none put yet, or a role that may not write it), followers watch the leader's
//!   key itself, and look 50 to 500 ms after it goes (`super::stagger`). A
//!   follower's only periodic request is the lease keep-alive, which every candidate
//!   needs to keep its place in the queue.
//! - **Acquire**: when our key is the first, one keep-alive round trip is made before
//!   claiming. The lease is then guaranteed for a ttl from a moment after the
//!   campaign was sent, which is what the elector's deadline assumes; without it a
//!   follower that moved to the front could claim on a lease last refreshed long ago.
//!   The next in line (its predecessor leads) sends that keep-alive beside the read
//!   of the queue, and has watched its own key since it became the next in line: its
//!   claim after a release is one round trip, the read, as `concurrency.Election`'s.
//! - **Renew** is a keep-alive (answered by the etcd leader, so it proves the lease
//!   where it would expire); an answer with TTL 0 means the lease (and our key) is
//!   gone: step down at once, and the next campaign grants a new lease.
//! - **The leader watches its own key** from the revision of the read that made it
//!   leader: a delete (`etcdctl del`, a revoked lease) or a put by anyone else
//!   (the key detached from our lease, another value) ends the claim at once, as fast
//!   as the followers' watches tell them the queue moved. When that watch is not open
//!   (it broke with its connection, or was compacted), the next renew reads the key
//!   in the same round and opens the watch again, so a renew never vouches for a key
//!   it has not seen since the last event; and a renew first takes the events that
//!   watch has delivered already (without waiting), so it never vouches for a key
//!   whose loss the store has told us of while nobody looked at the watch.
//! - **Decisions** are plain functions: the queue's (our place, what a follower
//!   watches, how it hears of a new holder, the switchover's named key and the
//!   reservation's ask) in `super::queue`, which ZooKeeper and SQL follow too, over the
//!   keys one read found (create revision first); etcd's own (what ends our claim,
//!   when a keep-alive may go out, the lease's seconds) in `rules`; the campaign's
//!   state machine in `core`: one `Phase` (no lease, queued, following, next in line,
//!   staggering, leading, each with what it watches), what a campaign sends beside
//!   and after its read (the refresh before claiming a step of its own on both paths
//!   to the front), and how each answer moves the phase. The backend does the I/O
//!   and asks the core.
//! - **Release** revokes the lease, which deletes the key and wakes the next candidate.
//! - **Switchover** (`release_to(to)`): the leader finds the first key (lowest create
//!   revision) whose value is `to` and, in one transaction that holds only while that
//!   key and ours are still the ones it read, puts the *reservation*
//!   `<election>.switchover` = that key's name, attached to that key's lease, and
//!   deletes our key; then it revokes the lease as a release does. The reservation
//!   lies outside the prefix `<election>/`, so `concurrency.Election` and
//!   `etcdctl elect` never count it as a candidate (with etcd auth, the role needs
//!   write access to it too, else the switchover is a plain release). No such key:
//!   a plain release, with a warning (the leader has stepped down already).
//!   A campaign reads the reservation with the queue. A candidate whose key is
//!   ahead of the named key (first, or not), while that key still exists and is not
//!   ours, deletes its key and puts it again, at the end of the queue, and never
//!   claims in that round: its successor's watch fires, and so the queue moves on
//!   until the named key is first and claims as usual (the refresh before claiming,
//!   the token, the watches, all unchanged). The reservation needs no clock: it
//!   asks nothing once the named key is gone, and it goes with the named lease.
//!   The named candidate deletes it when it leads (best effort). Go and etcdctl
//!   candidates in the same election do not read it: the first of them in the
//!   queue leads as after a plain release.

use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Identity,
    LeaseGrantOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, SortOrder, SortTarget,
    TlsOptions, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchStream,
};
use tokio::time::{sleep_until, Instant};

use super::{Backend, BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::status::{Holder, Mode};

mod core;
pub mod entry;
mod rules;
mod settings;
use self::core::{Found, Heard, Next, OwnNews, Phase, Source, WaitFor, WatchNews, Watches};
use super::queue::{self, Entry};
use rules::{Before, InFlight};
pub use settings::{Args, EtcdSettings};

fn etcd(op: &'static str) -> impl FnOnce(etcd_client::Error) -> BackendError {
    move |e| BackendError::Store {
        op,
        message: e.to_string(),
    }
}

fn failed(op: &'static str, message: impl Into<String>) -> BackendError {
    BackendError::Store {
        op,
        message: message.into(),
    }
}

/// Our place in the queue: a lease, its keep-alive stream and (once put) our key.
struct Session {
    lease: i64,
    /// The keep-alive stream; reopened after it broke with its connection.
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    key: String,
    /// Create revision of our key; 0 until it is put.
    revision: i64,
    /// When the next follower keep-alive is due.
    next_keepalive: Instant,
    /// A keep-alive sent and not answered yet (see `keep_alive`).
    pending: Option<InFlight>,
}

pub struct EtcdBackend {
    endpoints: Vec<String>,
    options: ConnectOptions,
    client: Option<Client>,
    /// The endpoint in use: one at a time, so that a member that accepts connections
    /// but never answers (SIGSTOPped, partitioned) is left for the next one.
    current: usize,
    /// Set while an operation runs; still set at the next one when the elector
    /// cancelled it on its timeout, which counts as a failure of this endpoint.
    in_flight: bool,
    op_timeout: Duration,
    prefix: String,
    /// Where our key goes: the prefix (the election), or its `write/` or `read/`
    /// directory (`--mode`, the layout of etcd's `recipes.RWMutex`).
    key_dir: String,
    mode: LockMode,
    /// The holders at the head of the queue and how they hold, as last read
    /// (`--mode` only): the first key's, or the readers' keys before any other.
    observed: Vec<(Holder, Mode)>,
    /// `<election>.switchover`: the switchover's reservation (see the module doc).
    reservation: String,
    /// `<election>.leader`: the announcement a new leader puts (see the module doc).
    announcement: String,
    identity: String,
    ttl: Duration,
    ttl_secs: i64,
    keepalive_every: Duration,
    /// Our lease and key; `None` exactly while the phase is [`Phase::Unqueued`].
    session: Option<Session>,
    /// Where we stand in the queue, and what we watch (see `core`).
    phase: Phase<WatchStream>,
}

impl EtcdBackend {
    pub fn new(settings: &EtcdSettings, lease: &Candidacy) -> Self {
        let (election, identity) = (lease.election, lease.identity);
        let (ttl, renew_interval, op_timeout) = (
            lease.timing.ttl,
            lease.timing.renew_interval,
            lease.timing.backend_timeout,
        );
        let mut options = ConnectOptions::new()
            .with_timeout(op_timeout)
            .with_connect_timeout(op_timeout)
            .with_keep_alive(renew_interval, op_timeout);
        if let Some((user, password)) = &settings.user {
            options = options.with_user(user.clone(), password.clone());
        }
        if let Some(ca) = &settings.ca_pem {
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
            if let Some((cert, key)) = &settings.client_pem {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        // etcd leases are whole seconds; rounding up only lengthens the real lease,
        // while the local deadline keeps using the configured ttl.
        let ttl_secs = rules::lease_seconds(ttl);
        EtcdBackend {
            endpoints: settings.endpoints.clone(),
            options,
            client: None,
            current: 0,
            in_flight: false,
            op_timeout,
            prefix: format!("{election}/"),
            key_dir: match lease.mode {
                LockMode::Election => format!("{election}/"),
                LockMode::Exclusive => format!("{election}/write/"),
                LockMode::Shared => format!("{election}/read/"),
            },
            mode: lease.mode,
            observed: Vec::new(),
            reservation: format!("{election}.switchover"),
            announcement: format!("{election}.leader"),
            identity: identity.to_owned(),
            ttl,
            ttl_secs,
            keepalive_every: renew_interval,
            session: None,
            phase: Phase::Unqueued,
        }
    }

    /// The client, connecting lazily (an unreachable cluster is retried by the elector).
    async fn client(&mut self) -> Result<Client, BackendError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoint = self.endpoints[self.current % self.endpoints.len()].clone();
        let client = Client::connect([endpoint], Some(self.options.clone()))
            .await
            .map_err(etcd("connect"))?;
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Leaves the current endpoint: the next call connects to the next one. The lease
    /// lives on in the cluster; only this connection's streams are gone.
    fn next_endpoint(&mut self) {
        self.client = None;
        self.step(Phase::connection_lost);
        if let Some(s) = self.session.as_mut() {
            s.stream = None;
            if let Some(p) = s.pending.as_mut() {
                p.on_stream = false;
            }
        }
        self.current = (self.current + 1) % self.endpoints.len();
    }

    /// Starts an operation; a previous one that never finished was cancelled on a timeout.
    fn begin(&mut self) {
        if self.in_flight {
            self.next_endpoint();
        }
        self.in_flight = true;
    }

    /// Ends an operation; a failed one moves us to the next endpoint.
    fn end<T>(&mut self, result: Result<T, BackendError>) -> Result<T, BackendError> {
        self.in_flight = false;
        if result.is_err() {
            self.next_endpoint();
        }
        result
    }

    /// A granted lease with its keep-alive stream, and our key name.
    async fn session(&mut self) -> Result<&mut Session, BackendError> {
        if self.session.is_none() {
            let mut client = self.client().await?;
            // A tagged id (see `rules::announces`); taken already (1 in 2^40), or
            // refused: one that etcd picks.
            let tagged = LeaseGrantOptions::new().with_id(rules::tagged_lease_id(rand::random()));
            let granted = match client.lease_grant(self.ttl_secs, Some(tagged)).await {
                Ok(g) => g,
                Err(_) => client
                    .lease_grant(self.ttl_secs, None)
                    .await
                    .map_err(etcd("campaign"))?,
            };
            if granted.ttl() != self.ttl_secs {
                tracing::warn!(
                    requested = self.ttl_secs,
                    granted = granted.ttl(),
                    "etcd granted another lease ttl"
                );
            }
            // A shorter grant is what the store will hold us to: the deadline must use
            // it (a longer one changes nothing, the claim keeps the configured ttl).
            self.ttl = rules::granted_ttl(self.ttl, granted.ttl());
            let lease = granted.id();
            let stream = client
                .lease_keep_alive(lease)
                .await
                .map_err(etcd("campaign"))?;
            self.session = Some(Session {
                lease,
                stream: Some(stream),
                key: format!("{}{lease:x}", self.key_dir),
                revision: 0,
                next_keepalive: Instant::now() + self.keepalive_every,
                pending: None,
            });
            self.step(Phase::queued);
        }
        self.session
            .as_mut()
            .ok_or_else(|| failed("campaign", "no session"))
    }

    /// One keep-alive round trip; `false` when the lease is gone.
    ///
    /// At most one keep-alive is on its way: when the last one's answer did not come in
    /// time, the next call first waits for that answer on the same stream instead of
    /// sending another; if that stream broke meanwhile (a timeout moves us to a new
    /// connection), a leader's renew sends no other, and opens no new stream (opening
    /// one sends one), until a ttl after it was sent. A follower's keep-alive or the
    /// refresh before claiming is not held back: a late one only keeps that candidate
    /// in the queue (holding it back would make the first claim after a cut-off store
    /// member healed wait a ttl). On a slow link every keep-alive sent arrives in the end
    /// and extends the lease by a ttl from its arrival: were each retry to open a new
    /// connection and stream with a keep-alive of its own, the last of them could keep a
    /// stepped-down leader's key alive for several ttl. A late answer proves nothing about this call's send time (the lease may
    /// run out a ttl after that old keep-alive arrived), so a new keep-alive follows it
    /// and only its answer counts. A stream that died with its connection (not by our
    /// own timeout) forgets what it carried.
    async fn keep_alive(&mut self, op: &'static str) -> Result<bool, BackendError> {
        let every = self.keepalive_every;
        if self.session.as_ref().is_some_and(|s| s.stream.is_none()) {
            self.open_stream(op).await?;
        }
        let Some(s) = self.session.as_mut() else {
            return Ok(false);
        };
        let Some((keeper, answers)) = s.stream.as_mut() else {
            return Ok(false);
        };
        let until = tokio::time::Instant::now() + self.op_timeout;
        let ttl = self.ttl;
        let answer = async {
            match rules::before_keep_alive(s.pending, op == "renew", Instant::now(), ttl) {
                // Its answer clears the way; it proves nothing about this call.
                Before::Drain => {
                    tokio::time::timeout_at(until, answers.message())
                        .await
                        .map_err(|_| None)?
                        .map_err(Some)?;
                }
                // Sent on a stream that broke since: it may still reach the server
                // and extend the lease from there, so no other goes out meanwhile.
                Before::HoldBack => return Err(None),
                Before::Send => {}
            }
            s.pending = None;
            keeper.keep_alive().await.map_err(Some)?;
            s.pending = Some(InFlight {
                sent: Instant::now(),
                on_stream: true,
            });
            let answer = tokio::time::timeout_at(until, answers.message())
                .await
                .map_err(|_| None)?
                .map_err(Some)?;
            s.pending = None;
            Ok(answer)
        }
        .await;
        let answer = match answer {
            Ok(a) => a,
            Err(None) => return Err(failed(op, "no keep-alive answer in time")),
            Err(Some(e)) => {
                // The stream died (with its connection, or cancelled by our own
                // timeout: then its keep-alive may still arrive): a new one next time.
                s.stream = None;
                if !cancelled(&e) {
                    s.pending = None;
                }
                return Err(self.after_error(op, e));
            }
        };
        let alive = rules::lease_alive(answer.map(|a| a.ttl()));
        if alive {
            s.next_keepalive = Instant::now() + every;
        } else {
            // The lease expired: our key went with it. Start over with a new one.
            self.session = None;
        }
        self.step(|p| p.kept_alive(alive));
        Ok(alive)
    }

    /// Opens the keep-alive stream. Opening it sends a keep-alive and waits for its
    /// answer, so a leader's renew does not open one while an unanswered one sent less
    /// than a ttl ago may still reach the server (see `keep_alive`); until the open is
    /// answered, its own is on its way.
    async fn open_stream(&mut self, op: &'static str) -> Result<(), BackendError> {
        let ttl = self.ttl;
        if let Some(p) = self.session.as_ref().and_then(|s| s.pending) {
            if op == "renew" && Instant::now() < p.sent + ttl {
                return Err(failed(op, "an earlier keep-alive may still be on its way"));
            }
        }
        let mut client = self.client().await?;
        let Some(s) = self.session.as_mut() else {
            return Ok(());
        };
        let lease = s.lease;
        s.pending = Some(InFlight {
            sent: Instant::now(),
            on_stream: false,
        });
        match client.lease_keep_alive(lease).await {
            Ok(stream) => {
                if let Some(s) = self.session.as_mut() {
                    s.stream = Some(stream);
                    s.pending = None;
                }
                Ok(())
            }
            Err(e) => {
                if !cancelled(&e) {
                    if let Some(s) = self.session.as_mut() {
                        s.pending = None;
                    }
                }
                Err(self.after_error(op, e))
            }
        }
    }

    /// Turns an etcd error into ours; a lease the server no longer knows ends the session.
    fn after_error(&mut self, op: &'static str, e: etcd_client::Error) -> BackendError {
        if rules::lease_not_found(&e) {
            self.forget();
        }
        etcd(op)(e)
    }

    /// One campaign round (see the module doc); `None` when it gave up our place to a
    /// switchover's named candidate (only when `may_requeue`): look again at once.
    async fn campaign_once(&mut self, may_requeue: bool) -> Result<Option<Campaign>, BackendError> {
        // Our own key's watch, when we were the next in line: we are likely first now.
        let (phase, round) = std::mem::take(&mut self.phase).begin();
        self.phase = phase;
        let mut client = self.client().await?;
        let (key, revision) = self.placed_key(&mut client).await?;
        let (at, mode) = (self.queue_keys(), self.mode);
        let read = read_queue(&mut client, (&at.0, &at.1, &at.2), (&key, revision, mode));
        // The next in line refreshes its lease with the read, not after it: sent after
        // the campaign began either way, which is all the claim's deadline assumes.
        let (refreshed, queue) = match round.refresh_beside_read {
            true => {
                let (alive, queue) = tokio::join!(self.keep_alive("campaign"), read);
                (Some(alive?), queue?)
            }
            false => (None, read.await?),
        };
        self.observe(&queue);
        let lets_pass = match (&queue.reserved, may_requeue && queue.ours) {
            (Some(reserved), true) => {
                ahead_of_reserved(&mut client, reserved, &key, revision).await?
            }
            _ => false,
        };
        let entries = queue.entries(&self.prefix, (key.as_bytes(), revision));
        let asked = (lets_pass, refreshed);
        let next = match self.after_read(&queue, &entries, key.as_bytes(), asked) {
            // We are first. Refresh the lease before claiming (see the module doc).
            Next::RefreshThenClaim => {
                let alive = self.keep_alive("campaign").await?;
                self::core::after_refresh(alive)
            }
            next => next,
        };
        let leader = queue.leader.as_ref().map(holder_of);
        match next {
            Next::StartOver { show_leader } => {
                // Our key is gone (lease expired between calls): start over.
                self.forget();
                Ok(Some(Campaign::Held(leader.filter(|_| show_leader))))
            }
            Next::Requeue => {
                self.requeue(&mut client, &key, revision).await?;
                Ok(None)
            }
            Next::RefreshThenClaim => Err(failed("campaign", "no refresh before the claim")),
            Next::Claim => {
                let from = queue.at + 1;
                let claimed = self.claim(client, &key, (revision, from), round.own, &queue);
                claimed.await.map(Some)
            }
            Next::Follow(follow) => {
                let news = News {
                    leader: follow.leader.map(<[u8]>::to_vec),
                    announcement: (follow.announcement)
                        .then(|| self.announcement.clone().into_bytes()),
                    next: follow.next.map(<[u8]>::to_vec),
                    own: follow.own.then(|| key.clone().into_bytes()),
                };
                let predecessor = follow.predecessor.to_vec();
                let opened = follower_watches(&client, queue.at + 1, predecessor, news).await?;
                self.step(|p| p.follow(opened.0, opened.1));
                Ok(Some(Campaign::Held(leader)))
            }
        }
    }

    /// Our session's key and its create revision, placing the key when it is not yet.
    async fn placed_key(&mut self, client: &mut Client) -> Result<(String, i64), BackendError> {
        let session = self.session().await?;
        let (key, lease, placed) = (session.key.clone(), session.lease, session.revision);
        if placed == 0 {
            let revision = self.place_key(client, &key, lease).await?;
            if let Some(s) = self.session.as_mut() {
                s.revision = revision;
            }
        }
        let revision = self.session.as_ref().map_or(0, |s| s.revision);
        Ok((key, revision))
    }

    /// What the core makes of one read of the queue (`entries`: its keys, ours among
    /// them; `asked`: whether a reservation asks us to let its named key pass, and
    /// the answer of the keep-alive sent beside the read, if any).
    fn after_read<'q>(
        &self,
        queue: &'q Queue,
        entries: &'q [Entry<&'q [u8]>],
        ours: &'q [u8],
        asked: (bool, Option<bool>),
    ) -> Next<&'q [u8]> {
        let announced = queue.announced.as_ref().map(|a| a.value());
        let announces = |e: &Entry<&[u8]>| rules::announces(e.name, &self.prefix);
        self::core::after_read(Found {
            ours: queue.ours,
            lets_pass: asked.0,
            stand: queue::stand(entries, &ours),
            news: queue::holder_news(entries, &ours, announced.as_ref(), announces),
            next: queue.next.as_ref().map(|n| n.key()),
            refreshed: asked.1,
        })
    }

    /// The claim, once the core says so: the watch on our own key (the next in line's
    /// `early`, or one from revision `at.1`, after the read that found us first), the
    /// announcement and the spent reservation (`at.0`: our key's create revision).
    async fn claim(
        &mut self,
        mut client: Client,
        key: &str,
        at: (i64, i64),
        early: Option<WatchStream>,
        queue: &Queue,
    ) -> Result<Campaign, BackendError> {
        let (revision, from) = at;
        // Every event on our key since the read that found us first (or since the
        // earlier read that made us the next in line).
        let own = match early {
            Some(own) => own,
            None => {
                let from = Some(WatchOptions::new().with_start_revision(from));
                let own = client.watch(key.as_bytes().to_vec(), from).await;
                own.map_err(etcd("campaign"))?
            }
        };
        self.phase = Phase::claimed(own);
        if self.mode != LockMode::Shared {
            self.announce(client.clone(), key);
        }
        if let Some(r) = queue
            .reserved
            .as_ref()
            .filter(|r| r.value() == key.as_bytes())
        {
            self.spend_reservation(client, r.mod_revision());
        }
        Ok(Campaign::Acquired {
            token: rules::token_of(revision),
        })
    }

    /// What a campaign reads beside the queue: the prefix, the reservation and the
    /// announcement (owned, so the read may run beside a keep-alive).
    fn queue_keys(&self) -> (String, String, String) {
        let at = (&self.prefix, &self.reservation, &self.announcement);
        (at.0.clone(), at.1.clone(), at.2.clone())
    }

    /// Gives our place up to a switchover's named candidate queued behind us: our key
    /// goes (if it is still the one we placed) and the next round puts it again, at
    /// the end of the queue. Never a claim: the lease stays ours, the key's new create
    /// revision (a later token) comes after the named candidate's. The delete wakes
    /// our successor, which does the same unless it is the named one.
    async fn requeue(
        &mut self,
        client: &mut Client,
        key: &str,
        revision: i64,
    ) -> Result<(), BackendError> {
        // Placed again by the next round; a round cut short before the delete was
        // answered finds the key again (create-if-absent) wherever it stands.
        if let Some(s) = self.session.as_mut() {
            s.revision = 0;
        }
        tracing::info!(key, "switchover: queueing again behind the named candidate");
        let delete = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, revision)])
            .and_then([TxnOp::delete(key, None)]);
        client.txn(delete).await.map_err(etcd("campaign"))?;
        Ok(())
    }

    /// Deletes the reservation that named us, now that we lead, unless it was written
    /// again since it was read. In the background: it is only tidying (a reservation
    /// naming the leader changes nothing, and it goes with our lease anyway).
    fn spend_reservation(&self, mut client: Client, mod_revision: i64) {
        let key = self.reservation.clone();
        tokio::spawn(async move {
            let delete = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    mod_revision,
                )])
                .and_then([TxnOp::delete(key.as_str(), None)]);
            if let Err(e) = client.txn(delete).await {
                tracing::debug!(error = %e, "switchover: the spent reservation stays");
            }
        });
    }

    /// Tells the followers behind the next in line that we lead now: our key put in
    /// the announcement (`queue::HolderNews`), with no lease (its delete would wake
    /// them at the next release). In the background, after the claim: their looks
    /// follow it, so they never compete with a claim.
    fn announce(&self, mut client: Client, ours: &str) {
        let (at, ours) = (self.announcement.clone(), ours.to_owned());
        tokio::spawn(async move {
            if let Err(e) = client.put(at, ours, None).await {
                tracing::debug!(error = %e, "the leader's announcement failed");
            }
        });
    }

    /// Puts our key only if absent (a put whose answer was lost is found again);
    /// its create revision, our place in the queue.
    async fn place_key(
        &mut self,
        client: &mut Client,
        key: &str,
        lease: i64,
    ) -> Result<i64, BackendError> {
        let put = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                self.identity.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key, None)]);
        let answer = match client.txn(put).await {
            Ok(a) => a,
            Err(e) => return Err(self.after_error("campaign", e)),
        };
        let revision = if answer.succeeded() {
            answer.header().map(|h| h.revision()).unwrap_or(0)
        } else {
            answer
                .op_responses()
                .first()
                .and_then(first_kv)
                .map(|kv| kv.create_revision())
                .unwrap_or(0)
        };
        if revision == 0 {
            return Err(failed("campaign", "could not place our key in the queue"));
        }
        Ok(revision)
    }

    fn forget(&mut self) {
        self.session = None;
        self.phase = Phase::Unqueued;
    }

    /// Moves the phase on with `f` (a store's answer).
    fn step(&mut self, f: impl FnOnce(Phase<WatchStream>) -> Phase<WatchStream>) {
        self.phase = f(std::mem::take(&mut self.phase));
    }

    /// The switchover's reservation for the first live candidate named `to`, written
    /// in one transaction with the delete of our own key (so no follower can see our
    /// key gone and no reservation), while both keys are still the ones read. The
    /// reservation is attached to the named candidate's lease: it goes when that
    /// lease does. The named key, or `None` when `to` is not queued (or the queue
    /// moved meanwhile): nothing is written then.
    async fn reserve(
        &mut self,
        to: &str,
        key: &str,
        revision: i64,
    ) -> Result<Option<String>, BackendError> {
        let mut client = self.client().await?;
        let queue = read_candidates(&mut client, &self.prefix, "release").await?;
        let entries = queue.iter().map(|kv| (kv.key(), kv.value()));
        let Some(named) = queue::named_entry(entries, to, &key.as_bytes()).map(|i| &queue[i])
        else {
            return Ok(None);
        };
        let hand_over = Txn::new()
            .when([
                Compare::create_revision(named.key(), CompareOp::Equal, named.create_revision()),
                Compare::create_revision(key, CompareOp::Equal, revision),
            ])
            .and_then([
                TxnOp::put(
                    self.reservation.as_str(),
                    named.key(),
                    Some(PutOptions::new().with_lease(named.lease())),
                ),
                TxnOp::delete(key, None),
            ]);
        let answer = client.txn(hand_over).await.map_err(etcd("release"))?;
        Ok(answer
            .succeeded()
            .then(|| String::from_utf8_lossy(named.key()).into_owned()))
    }

    /// Reads our key and, when it is still ours, watches it again from that read.
    async fn watch_own_key(&mut self) -> Result<bool, BackendError> {
        let mut client = self.client().await?;
        let Some(s) = self.session.as_ref() else {
            return Ok(false);
        };
        let (key, lease, revision) = (s.key.clone(), s.lease, s.revision);
        let answer = client
            .get(key.as_bytes().to_vec(), None)
            .await
            .map_err(etcd("renew"))?;
        let at = answer.header().map(|h| h.revision()).unwrap_or(0);
        let found = answer
            .kvs()
            .first()
            .map(|kv| (kv.create_revision(), kv.lease(), kv.value()));
        let ours = rules::seen_in_read(found, revision, lease, &self.identity).still_ours();
        if !ours {
            return Ok(false);
        }
        let own = client
            .watch(
                key.into_bytes(),
                Some(WatchOptions::new().with_start_revision(at + 1)),
            )
            .await
            .map_err(etcd("renew"))?;
        self.step(|p| p.own_watched(own));
        Ok(true)
    }
}

impl EtcdBackend {
    /// Whether the watch on our own key has delivered, by now, news that it is no
    /// longer ours (consumed here without waiting; `record_lost` would return on it).
    /// A renew never vouches for a key whose loss the store has told us of, even when
    /// nobody looked at the watch since (the elector polls it between renews only).
    /// A watch that ended is dropped: the renew then reads the key again.
    fn own_key_lost_already(&mut self) -> bool {
        use futures_util::FutureExt;
        let lease = self.session.as_ref().map_or(0, |s| s.lease);
        while let Some(own) = self.phase.own_mut() {
            let Some(message) = own.message().now_or_never() else {
                return false;
            };
            if self.heard_on_own(&message, lease) {
                return true;
            }
        }
        false
    }

    /// Moves the phase on with one answer on the leader's watch on its own key;
    /// `true`: the claim is lost.
    fn heard_on_own(&mut self, message: &WatchMessage, lease: i64) -> bool {
        let news = match message {
            Ok(Some(resp)) if resp.canceled() || resp.compact_revision() > 0 => OwnNews::Ended,
            Ok(Some(resp)) => OwnNews::Events {
                taken: own_key_taken(resp, lease, &self.identity),
            },
            // The watch broke with its connection: the next renew looks again.
            Ok(None) | Err(_) => OwnNews::Ended,
        };
        let (phase, lost) = std::mem::take(&mut self.phase).on_own(news);
        self.phase = phase;
        lost
    }
}

/// One answer on a watch.
type WatchMessage = Result<Option<etcd_client::WatchResponse>, etcd_client::Error>;

/// What one answer on a follower's watch says.
fn watch_news(message: &WatchMessage) -> WatchNews {
    match message {
        Ok(Some(resp)) if resp.canceled() || resp.compact_revision() > 0 => WatchNews::Ended,
        Ok(Some(resp)) => WatchNews::Events {
            any: !resp.events().is_empty(),
            delete: (resp.events().iter()).any(|e| e.event_type() == EventType::Delete),
        },
        Ok(None) | Err(_) => WatchNews::Ended,
    }
}

/// Whether a watch answer on our own key says it is no longer ours.
fn own_key_taken(resp: &etcd_client::WatchResponse, lease: i64, identity: &str) -> bool {
    resp.events().iter().any(|e| {
        let delete = e.event_type() == EventType::Delete;
        let put = e.kv().map(|kv| (kv.lease(), kv.value()));
        !rules::seen_in_event(delete, put, lease, identity).still_ours()
    })
}

/// Whether a switchover's reservation (read with the queue) names a live key queued
/// behind ours: then we must let it pass. A reservation naming our own key, or a key
/// that is gone (its candidate died), or one ahead of us, asks nothing of us.
async fn ahead_of_reserved(
    client: &mut Client,
    reserved: &etcd_client::KeyValue,
    key: &str,
    revision: i64,
) -> Result<bool, BackendError> {
    if reserved.value() == key.as_bytes() {
        return Ok(false);
    }
    let named = client
        .get(reserved.value(), None)
        .await
        .map_err(etcd("campaign"))?;
    let named = named.kvs().first().map(|kv| Entry {
        order: kv.create_revision(),
        name: reserved.value(),
        shared: false,
    });
    let ours = Entry {
        order: revision,
        name: key.as_bytes(),
        shared: false,
    };
    let entries = queue::in_order(std::iter::once(ours).chain(named).collect());
    Ok(queue::lets_pass(
        &entries,
        &key.as_bytes(),
        Some(&reserved.value()),
    ))
}

/// The keys a follower watches for news of a new holder, besides its predecessor
/// (see [`Watches`]).
struct News {
    leader: Option<Vec<u8>>,
    announcement: Option<Vec<u8>>,
    next: Option<Vec<u8>>,
    /// Our own key (the next in line only): see [`Phase::NextInLine`].
    own: Option<Vec<u8>>,
}

/// A follower's watches from revision `from` (the read that placed us): the key just
/// ahead of ours (`watch`) and the news; opened together. The next in line's watch on
/// its own key comes apart.
async fn follower_watches(
    client: &Client,
    from: i64,
    watch: Vec<u8>,
    news: News,
) -> Result<(Watches<WatchStream>, Option<WatchStream>), BackendError> {
    let open = |key: Option<Vec<u8>>| {
        let mut client = client.clone();
        async move {
            match key {
                Some(k) => client
                    .watch(k, Some(WatchOptions::new().with_start_revision(from)))
                    .await
                    .map(Some)
                    .map_err(etcd("campaign")),
                None => Ok(None),
            }
        }
    };
    let (predecessor, leader, announcement, next, own) = tokio::join!(
        open(Some(watch)),
        open(news.leader),
        open(news.announcement),
        open(news.next),
        open(news.own)
    );
    let watches = Watches {
        predecessor: predecessor?.ok_or_else(|| failed("campaign", "no watch"))?,
        leader: leader?,
        announcement: announcement?,
        next: next?,
    };
    Ok((watches, own?))
}

/// The queue as one consistent read saw it.
struct Queue {
    /// The revision of the read.
    at: i64,
    /// The first key (the leader's).
    leader: Option<etcd_client::KeyValue>,
    /// The key just ahead of ours.
    predecessor: Option<etcd_client::KeyValue>,
    /// The second key of the queue: the next in line.
    next: Option<etcd_client::KeyValue>,
    /// The first keys of the queue (two; [`HOLDERS_SHOWN`] with `--mode`).
    heads: Vec<etcd_client::KeyValue>,
    /// The announcement: its value is the key of the leader that put it.
    announced: Option<etcd_client::KeyValue>,
    /// Whether our key is still there.
    ours: bool,
    /// A switchover's reservation: its value is the key of the candidate named.
    reserved: Option<etcd_client::KeyValue>,
}

impl Queue {
    /// The keys this read found, as entries of the queue in its order: the first
    /// ones, the one just ahead of ours (for a reader, the last key ahead that is not
    /// a reader's) and ours (`ours`: our key and its create revision). Every entry
    /// ahead of ours that decides where we stand is among them.
    fn entries<'q>(&'q self, prefix: &str, ours: (&'q [u8], i64)) -> Vec<Entry<&'q [u8]>> {
        let readers = format!("{prefix}read/");
        let (name, order) = ours;
        let ours = Entry {
            order,
            name,
            shared: name.starts_with(readers.as_bytes()),
        };
        let found = self.heads.iter().chain(&self.predecessor);
        let entries = found.map(|kv| entry_of(kv, &readers)).chain([ours]);
        queue::in_order(entries.collect())
    }
}

/// A key of the queue as an entry: ordered by its create revision, a reader's when it
/// lies under `readers` (`<election>/read/`).
fn entry_of<'q>(kv: &'q etcd_client::KeyValue, readers: &str) -> Entry<&'q [u8]> {
    Entry {
        order: kv.create_revision(),
        name: kv.key(),
        shared: kv.key().starts_with(readers.as_bytes()),
    }
}

/// How many holders a read-write lock's candidate lists (`/leader`'s `holders`): the
/// first keys of the queue it reads, readers' while no other key is ahead.
const HOLDERS_SHOWN: i64 = 16;

/// One consistent read: the leader and the next in line, the key just ahead of ours
/// (for a shared candidate, `reader`: the last key ahead of ours that is not a
/// reader's), ours, the reservation and the announcement (`at`: the queue's prefix,
/// the reservation's key and the announcement's; `ours`: our key, its create
/// revision, and whether we are a reader).
async fn read_queue(
    client: &mut Client,
    at: (&str, &str, &str),
    ours: (&str, i64, LockMode),
) -> Result<Queue, BackendError> {
    let (prefix, reservation, announcement) = at;
    let (key, revision, mode) = ours;
    let reader = mode == LockMode::Shared;
    let first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(match mode {
            LockMode::Election => 2,
            _ => HOLDERS_SHOWN,
        });
    let ahead = || {
        GetOptions::new()
            .with_max_create_revision(revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
    };
    let (readers, end) = (format!("{prefix}read/"), rules::prefix_end(prefix));
    let mut ops = vec![
        TxnOp::get(prefix, Some(first)),
        match reader {
            // The keys before the readers' directory, and those after it.
            true => TxnOp::get(prefix, Some(ahead().with_range(readers.clone()))),
            false => TxnOp::get(prefix, Some(ahead().with_prefix())),
        },
        TxnOp::get(key, None),
        TxnOp::get(reservation, None),
        TxnOp::get(announcement, None),
    ];
    if reader {
        let after = rules::prefix_end(&readers);
        ops.push(TxnOp::get(after, Some(ahead().with_range(end))));
    }
    let answer = client
        .txn(Txn::new().and_then(ops))
        .await
        .map_err(etcd("campaign"))?;
    let responses = answer.op_responses();
    let second = |r: &TxnOpResponse| match r {
        TxnOpResponse::Get(g) => g.kvs().get(1).cloned(),
        _ => None,
    };
    let predecessor = [responses.get(1), responses.get(5)]
        .into_iter()
        .flatten()
        .filter_map(first_kv)
        .max_by_key(|kv| kv.create_revision());
    Ok(Queue {
        at: answer.header().map(|h| h.revision()).unwrap_or(0),
        leader: responses.first().and_then(first_kv).cloned(),
        next: responses.first().and_then(second),
        heads: match responses.first() {
            Some(TxnOpResponse::Get(g)) => g.kvs().to_vec(),
            _ => Vec::new(),
        },
        announced: responses.get(4).and_then(first_kv).cloned(),
        predecessor: predecessor.cloned(),
        ours: responses
            .get(2)
            .and_then(first_kv)
            .is_some_and(|kv| kv.create_revision() == revision),
        reserved: responses.get(3).and_then(first_kv).cloned(),
    })
}

/// Every key in the queue (each attached to a live lease), in queue order: the lowest
/// create revision first.
async fn read_candidates(
    client: &mut Client,
    prefix: &str,
    op: &'static str,
) -> Result<Vec<etcd_client::KeyValue>, BackendError> {
    let all = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let answer = client.get(prefix, Some(all)).await.map_err(etcd(op))?;
    Ok(answer.kvs().to_vec())
}

fn first_kv(resp: &TxnOpResponse) -> Option<&etcd_client::KeyValue> {
    match resp {
        TxnOpResponse::Get(g) => g.kvs().first(),
        _ => None,
    }
}

fn holder_of(kv: &etcd_client::KeyValue) -> Holder {
    Holder {
        identity: String::from_utf8_lossy(kv.value()).into_owned(),
        token: u64::try_from(kv.create_revision()).ok(),
    }
}

impl EtcdBackend {
    /// Notes who holds and how (`--mode` only, for `/leader`'s holders): the first
    /// key's holder, or, when it is a reader's, every reader's key before any other.
    fn observe(&mut self, queue: &Queue) {
        if self.mode == LockMode::Election {
            return;
        }
        let readers = format!("{}read/", self.prefix);
        let heads: Vec<_> = queue
            .heads
            .iter()
            .map(|kv| entry_of(kv, &readers))
            .collect();
        let held = queue::holders(&heads);
        let mode = match held.first().is_some_and(|e| e.shared) {
            true => Mode::Shared,
            false => Mode::Exclusive,
        };
        self.observed = (queue.heads.iter().take(held.len()))
            .map(|kv| (holder_of(kv), mode))
            .collect();
    }

    /// The rest of a follower's stagger: until it passes or our predecessor's watch
    /// fires, then a look. Cancel-safe: dropped, the next wait resumes it.
    async fn finish_stagger(&mut self) -> Wake {
        if let Some((until, predecessor)) = self.phase.staggering_mut() {
            match predecessor {
                Some(predecessor) => {
                    tokio::select! {
                        _ = predecessor.message() => {}
                        _ = sleep_until(until) => {}
                    }
                }
                None => sleep_until(until).await,
            }
        }
        self.step(Phase::stagger_over);
        Wake::Changed
    }
}

impl Backend for EtcdBackend {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        (self.mode != LockMode::Election)
            .then(|| crate::status::Slots::one_lock(self.observed.iter().cloned()))
    }

    fn lease_ttl(&self) -> Duration {
        self.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        self.begin();
        let mut result = self.campaign_once(true).await;
        if let Ok(None) = result {
            // We queued again behind a switchover's named candidate: one more round
            // finds our new place (and never queues again).
            result = self.campaign_once(false).await;
        }
        let result = result.map(|c| c.unwrap_or(Campaign::Held(None)));
        self.end(result)
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        if self.session.is_none() {
            return Ok(Renewal::Lost);
        }
        self.begin();
        let result = async {
            if !self.keep_alive("renew").await? {
                return Ok(false);
            }
            if self.own_key_lost_already() {
                return Ok(false);
            }
            if !self.phase.watches_own() {
                return self.watch_own_key().await;
            }
            Ok(true)
        }
        .await;
        let alive = self.end(result)?;
        Ok(if alive {
            Renewal::Renewed
        } else {
            Renewal::Lost
        })
    }

    async fn record_lost(&mut self) {
        loop {
            let lease = self.session.as_ref().map_or(0, |s| s.lease);
            let Some(own) = self.phase.own_mut() else {
                // Not watching: the next renew reads the key and watches again.
                return std::future::pending().await;
            };
            let message = own.message().await;
            if self.heard_on_own(&message, lease) {
                return;
            }
        }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.phase = Phase::Unqueued;
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        self.begin();
        let until = rules::revoke_until(Instant::now(), self.ttl_secs);
        let result = async {
            let client = self.client().await?;
            let (first, answer) = tokio::sync::oneshot::channel();
            tokio::spawn(revoke_until_gone(client, session.lease, until, first));
            answer
                .await
                .unwrap_or_else(|_| Err(failed("release", "the revoke ended unanswered")))
        }
        .await;
        self.end(result)
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        if let Some(flag) = self.mode.flag() {
            return Err(super::no_switchover_with(flag));
        }
        self.begin();
        let result = async {
            let mut client = self.client().await?;
            let queue = read_candidates(&mut client, &self.prefix, "candidates").await?;
            Ok(queue
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
                .collect())
        }
        .await;
        self.end(result).map(Some)
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.step(Phase::quiet);
        let Some((key, revision)) = self.session.as_ref().map(|s| (s.key.clone(), s.revision))
        else {
            tracing::warn!(to, "switchover: we hold no lease to hand over");
            return Ok(());
        };
        self.begin();
        let result = self.reserve(to, &key, revision).await;
        super::log_reservation(to, self.end(result));
        self.release().await
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        match self.phase.wait() {
            // We lost our place in the queue: take a new one at once.
            WaitFor::Now => return Wake::Changed,
            WaitFor::Stagger => return self.finish_stagger().await,
            WaitFor::Watches | WaitFor::Poll => {}
        }
        let until = Instant::now() + max;
        let mut heard = false;
        loop {
            let keepalive_due = self.session.as_ref().map_or(until, |s| s.next_keepalive);
            let Some(w) = self.phase.watches_mut() else {
                // Nothing to watch (an error before): poll at the retry interval.
                sleep_until(until.min(keepalive_due)).await;
                if Instant::now() >= until {
                    return Wake::Changed;
                }
                self.begin();
                let result = self.keep_alive("keepalive").await;
                match self.end(result) {
                    Ok(true) => continue,
                    _ => return Wake::Changed,
                }
            };
            let event = tokio::select! {
                m = w.predecessor.message() => Some((Source::Predecessor, m)),
                m = next_message(w.leader.as_mut()) => Some((Source::Leader, m)),
                m = next_message(w.announcement.as_mut()) => Some((Source::Announcement, m)),
                m = next_message(w.next.as_mut()) => Some((Source::Next, m)),
                _ = sleep_until(until.min(keepalive_due)) => None,
            };
            match event {
                Some((from, message)) => {
                    let news = watch_news(&message);
                    let phase = std::mem::take(&mut self.phase);
                    let (phase, said) = phase.on_watch(from, news, Instant::now(), super::stagger);
                    self.phase = phase;
                    match said {
                        Heard::Look => return Wake::Changed,
                        Heard::Stagger => return self.finish_stagger().await,
                        Heard::Nothing => heard = true,
                    }
                }
                None => {
                    if Instant::now() >= until && heard {
                        return Wake::Quiet;
                    }
                    // A keep-alive is due, or the wait is over without news: either way
                    // a keep-alive (not a read) proves the store and our lease alive.
                    let over = Instant::now() >= until;
                    self.begin();
                    let result = self.keep_alive("keepalive").await;
                    match self.end(result) {
                        Ok(true) if over => return Wake::Quiet,
                        Ok(true) => heard = true,
                        _ => return Wake::Changed,
                    }
                }
            }
        }
    }
}

/// Revokes `lease` (a release), its first answer to `first`, and again while the store
/// does not answer, until `until`: a release whose answer is lost (the elector stopped
/// waiting for it, the link dropped it) would otherwise leave our key at its place in
/// the queue until the lease expires by itself, a ttl or more after the store is back
/// (a restarted etcd gives every lease its whole ttl again), and every candidate
/// behind it would wait that long. Each attempt has the client's request timeout.
async fn revoke_until_gone(
    mut client: Client,
    lease: i64,
    until: Instant,
    first: tokio::sync::oneshot::Sender<Result<(), BackendError>>,
) {
    let mut first = Some(first);
    loop {
        let answer = client.lease_revoke(lease).await;
        let gone = answer
            .as_ref()
            .map_or_else(rules::lease_not_found, |_| true);
        if let Some(first) = first.take() {
            let _ = first.send(answer.map(drop).map_err(etcd("release")));
        }
        if gone || Instant::now() >= until {
            return;
        }
        tokio::time::sleep(rules::REVOKE_AGAIN_AFTER).await;
    }
}

/// The next message of a watch that may not be open (then never).
async fn next_message(
    w: Option<&mut WatchStream>,
) -> Result<Option<etcd_client::WatchResponse>, etcd_client::Error> {
    match w {
        Some(w) => w.message().await,
        None => std::future::pending().await,
    }
}

/// An error of our own making (a request cancelled by its timeout): what it carried may
/// still be on its way to the server.
fn cancelled(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let code: i32 = status.code().into();
            // CANCELLED (1), DEADLINE_EXCEEDED (4).
            code == 1 || code == 4
        }
        _ => false,
    }
}
