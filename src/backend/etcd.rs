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
//!   staggering, leading, each with what it watches), how each answer moves it, and
//!   how a wait goes on; one campaign round in `round`: what it sends beside and
//!   after its read (the refresh before claiming a step of its own on both paths to
//!   the front). The requests are built and read back in `requests`, the connection
//!   and the lease's keep-alives are `session`'s, the watches `watches`'; this file
//!   runs a round and asks the core at each answer.
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

use etcd_client::{Client, WatchStream};
use tokio::time::{sleep_until, Instant};

use super::protocol::{Own, Protocol, Transport, Waited, Waits};
use super::{BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::status::{Holder, Mode};

mod core;
pub mod driven;
pub mod entry;
mod requests;
mod round;
mod rules;
mod session;
mod settings;
mod watches;
use self::core::{Heard, Phase, Source, Timer, WaitFor, Waiting};
use self::requests::{etcd, failed, holder_of, Keys, Queue};
use self::round::{Found, Next, Round};
use self::session::{Link, Session, Unanswered};
use self::watches::{News, WatchMessage};
use super::queue;
pub use settings::{Args, EtcdSettings};

pub struct EtcdTransport {
    /// The connection: one endpoint at a time.
    link: Link,
    keys: Keys,
    mode: LockMode,
    /// The holders at the head of the queue and how they hold, as last read
    /// (`--mode` only): the first key's, or the readers' keys before any other.
    observed: Vec<(Holder, Mode)>,
    identity: String,
    ttl: Duration,
    ttl_secs: i64,
    keepalive_every: Duration,
    /// Our lease and key; `None` exactly while the phase is [`Phase::Unqueued`].
    session: Option<Session>,
    /// Where we stand in the queue, and what we watch (see `core`).
    phase: Phase<WatchStream>,
}

/// The etcd store as a [`super::Backend`].
pub type EtcdBackend = Protocol<EtcdTransport>;

impl EtcdBackend {
    pub fn new(settings: &EtcdSettings, lease: &Candidacy) -> Self {
        Protocol::over(EtcdTransport::new(settings, lease))
    }
}

impl EtcdTransport {
    pub fn new(settings: &EtcdSettings, lease: &Candidacy) -> Self {
        let timing = &lease.timing;
        EtcdTransport {
            link: Link::new(settings, timing.renew_interval, timing.backend_timeout),
            keys: Keys::new(lease.election, lease.mode),
            mode: lease.mode,
            observed: Vec::new(),
            identity: lease.identity.to_owned(),
            ttl: timing.ttl,
            // etcd leases are whole seconds; rounding up only lengthens the real lease,
            // while the local deadline keeps using the configured ttl.
            ttl_secs: rules::lease_seconds(timing.ttl),
            keepalive_every: timing.renew_interval,
            session: None,
            phase: Phase::Unqueued,
        }
    }

    /// Leaves the current endpoint: the next call connects to the next one. The lease
    /// lives on in the cluster; only this connection's streams are gone.
    fn next_endpoint(&mut self) {
        self.link.next_endpoint();
        self.step(Phase::connection_lost);
        if let Some(s) = self.session.as_mut() {
            s.stream_lost();
        }
    }

    /// Starts an operation; a previous one that never finished was cancelled on a timeout.
    fn begin(&mut self) {
        if self.link.begin() {
            self.next_endpoint();
        }
    }

    /// Ends an operation; a failed one moves us to the next endpoint.
    fn end<T>(&mut self, result: Result<T, BackendError>) -> Result<T, BackendError> {
        self.link.end();
        if result.is_err() {
            self.next_endpoint();
        }
        result
    }

    /// A granted lease with its keep-alive stream, and our key name.
    async fn session(&mut self) -> Result<&mut Session, BackendError> {
        if self.session.is_none() {
            let mut client = self.link.client().await?;
            let every = self.keepalive_every;
            let granted = session::grant(&mut client, self.ttl_secs, &self.keys.dir, every);
            let (session, granted) = granted.await?;
            // A shorter grant is what the store will hold us to: the deadline must use
            // it (a longer one changes nothing, the claim keeps the configured ttl).
            self.ttl = rules::granted_ttl(self.ttl, granted);
            self.session = Some(session);
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
    /// one sends one), until a ttl after it was sent (`rules::Pace`). A follower's
    /// keep-alive or the refresh before claiming is not held back: a late one only
    /// keeps that candidate in the queue (holding it back would make the first claim
    /// after a cut-off store member healed wait a ttl). On a slow link every keep-alive
    /// sent arrives in the end and extends the lease by a ttl from its arrival: were
    /// each retry to open a new connection and stream with a keep-alive of its own,
    /// the last of them could keep a stepped-down leader's key alive for several ttl.
    /// A late answer proves nothing about this call's send time (the lease may run out
    /// a ttl after that old keep-alive arrived), so a new keep-alive follows it and
    /// only its answer counts. A stream that died with its connection (not by our own
    /// timeout) forgets what it carried.
    async fn keep_alive(&mut self, op: &'static str) -> Result<bool, BackendError> {
        let renew = op == "renew";
        if self.session.as_ref().is_some_and(|s| !s.has_stream()) {
            self.open_stream(op, renew).await?;
        }
        let Some(s) = self.session.as_mut().filter(|s| s.has_stream()) else {
            return Ok(false);
        };
        let until = Instant::now() + self.link.op_timeout;
        let answered = match session::exchange(s, renew, until, self.ttl).await {
            Ok(ttl) => ttl,
            Err(Unanswered::Late) => return Err(failed(op, "no keep-alive answer in time")),
            Err(Unanswered::Store(e)) => return Err(self.after_error(op, e)),
        };
        let alive = rules::lease_alive(answered);
        match self.session.as_mut() {
            Some(s) if alive => s.pace.kept(Instant::now(), self.keepalive_every),
            // The lease expired: our key went with it. Start over with a new one.
            _ => self.session = None,
        }
        self.step(|p| p.kept_alive(alive));
        Ok(alive)
    }

    /// Opens the keep-alive stream, unless it is a leader's renew while a keep-alive
    /// that may still reach the server is on its way (see `keep_alive`).
    async fn open_stream(&mut self, op: &'static str, renew: bool) -> Result<(), BackendError> {
        let (now, ttl) = (Instant::now(), self.ttl);
        if (self.session.as_ref()).is_some_and(|s| !s.pace.may_open(renew, now, ttl)) {
            return Err(failed(op, "an earlier keep-alive may still be on its way"));
        }
        let mut client = self.link.client().await?;
        let Some(s) = self.session.as_mut() else {
            return Ok(());
        };
        match session::open_stream(&mut client, s).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.after_error(op, e)),
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
        let (phase, mut round) = std::mem::take(&mut self.phase).begin();
        self.phase = phase;
        let mut client = self.link.client().await?;
        let (key, revision) = self.placed_key(&mut client).await?;
        let read = requests::queue_read(&self.keys, (&key, revision, self.mode));
        let read = requests::read_queue(&mut client, read, revision);
        // The next in line refreshes its lease with the read, not after it: sent after
        // the campaign began either way, which is all the claim's deadline assumes.
        let queue = match round.refresh_beside_read {
            true => {
                let (alive, queue) = tokio::join!(self.keep_alive("campaign"), read);
                round.refreshed(alive?);
                queue?
            }
            false => read.await?,
        };
        self.observe(&queue);
        let ours = (key.as_str(), revision);
        let lets_pass = match (&queue.reserved, may_requeue && queue.ours) {
            (Some(reserved), true) => {
                requests::ahead_of_reserved(&mut client, reserved, ours).await?
            }
            _ => false,
        };
        let entries = queue.entries(&self.keys, (key.as_bytes(), revision));
        let mut next = round.after_read(self.found(&queue, &entries, key.as_bytes(), lets_pass));
        if next == Next::RefreshThenClaim {
            // We are first. Refresh the lease before claiming (see the module doc).
            round.refreshed(self.keep_alive("campaign").await?);
            next = round.after_refresh();
        }
        self.act(next, client, ours, round, &queue).await
    }

    /// Does what the round decided after its read (`ours`: our key and its create
    /// revision).
    async fn act(
        &mut self,
        next: Next<&[u8]>,
        mut client: Client,
        ours: (&str, i64),
        round: Round<WatchStream>,
        queue: &Queue,
    ) -> Result<Option<Campaign>, BackendError> {
        let leader = queue.leader.as_ref().map(holder_of);
        match next {
            Next::StartOver { show_leader } => {
                // Our key is gone (lease expired between calls): start over.
                self.forget();
                Ok(Some(Campaign::Held(leader.filter(|_| show_leader))))
            }
            Next::Requeue => {
                self.requeue(&mut client, ours).await?;
                Ok(None)
            }
            Next::RefreshThenClaim => Err(failed("campaign", "no refresh before the claim")),
            Next::Claim => {
                let claimed = self.claim(client, ours, round.own, queue);
                claimed.await.map(Some)
            }
            Next::Follow(follow) => {
                let news = News::of(follow, &self.keys.announcement, ours.0);
                let opened = watches::follower_watches(&client, queue.at + 1, news).await?;
                self.step(|p| p.follow(opened.0, opened.1));
                Ok(Some(Campaign::Held(leader)))
            }
        }
    }

    /// Our session's key and its create revision, placing the key when it is not yet:
    /// only if absent (a put whose answer was lost is found again).
    async fn placed_key(&mut self, client: &mut Client) -> Result<(String, i64), BackendError> {
        let session = self.session().await?;
        let (key, lease, placed) = (session.key.clone(), session.lease, session.revision);
        if placed == 0 {
            let put = requests::place(&key, &self.identity, lease);
            let answer = match client.txn(put).await {
                Ok(a) => a,
                Err(e) => return Err(self.after_error("campaign", e)),
            };
            let revision = requests::placed_revision(&answer)?;
            if let Some(s) = self.session.as_mut() {
                s.revision = revision;
            }
        }
        let revision = self.session.as_ref().map_or(0, |s| s.revision);
        Ok((key, revision))
    }

    /// What one read of the queue found (`entries`: its keys, ours among them;
    /// `lets_pass`: whether a reservation asks us to let its named key pass).
    fn found<'q>(
        &self,
        queue: &'q Queue,
        entries: &'q [queue::Entry<&'q [u8]>],
        ours: &'q [u8],
        lets_pass: bool,
    ) -> Found<'q, &'q [u8]> {
        let announced = queue.announced.as_ref().map(|a| a.value());
        let announces = |e: &queue::Entry<&[u8]>| rules::announces(e.name, &self.keys.prefix);
        Found {
            ours: queue.ours,
            lets_pass,
            stand: queue::stand(entries, &ours),
            news: queue::holder_news(entries, &ours, announced.as_ref(), announces),
            next: queue.next.as_ref().map(|n| n.key()),
        }
    }

    /// The claim, once the round says so: the watch on our own key (the next in
    /// line's `early`, or one from just after the read that found us first), the
    /// announcement and the spent reservation (`ours`: our key and its create
    /// revision).
    async fn claim(
        &mut self,
        mut client: Client,
        ours: (&str, i64),
        early: Option<WatchStream>,
        queue: &Queue,
    ) -> Result<Campaign, BackendError> {
        let (key, revision) = ours;
        // Every event on our key since the read that found us first (or since the
        // earlier read that made us the next in line).
        let own = match early {
            Some(own) => own,
            None => {
                let from = queue.at + 1;
                watches::watch_from(&mut client, key.as_bytes().to_vec(), from, "campaign").await?
            }
        };
        self.phase = Phase::claimed(own);
        self.after_claim(client, key, queue);
        Ok(Campaign::Acquired {
            token: rules::token_of(revision),
        })
    }

    /// What follows a claim, in the background: the announcement (not a reader's),
    /// which tells the followers behind the next in line that we lead now (after the
    /// claim, so their looks never compete with it), and the delete of the
    /// reservation that named our key, now spent (only tidying: it goes with our
    /// lease anyway).
    fn after_claim(&self, client: Client, key: &str, queue: &Queue) {
        if self.mode != LockMode::Shared {
            let at = self.keys.announcement.clone();
            requests::announce(client.clone(), at, key.to_owned());
        }
        let named_us = queue
            .reserved
            .as_ref()
            .filter(|r| r.value() == key.as_bytes());
        if let Some(r) = named_us {
            let spend = requests::spend(&self.keys.reservation, r.mod_revision());
            requests::in_background(client, spend, "switchover: the spent reservation stays");
        }
    }

    /// Gives our place up to a switchover's named candidate queued behind us: our key
    /// goes (if it is still the one we placed) and the next round puts it again, at
    /// the end of the queue. Never a claim: the lease stays ours, the key's new create
    /// revision (a later token) comes after the named candidate's. The delete wakes
    /// our successor, which does the same unless it is the named one.
    async fn requeue(
        &mut self,
        client: &mut Client,
        ours: (&str, i64),
    ) -> Result<(), BackendError> {
        // Placed again by the next round; a round cut short before the delete was
        // answered finds the key again (create-if-absent) wherever it stands.
        if let Some(s) = self.session.as_mut() {
            s.revision = 0;
        }
        tracing::info!(
            key = ours.0,
            "switchover: queueing again behind the named candidate"
        );
        let delete = requests::unqueue(ours.0, ours.1);
        client.txn(delete).await.map_err(etcd("campaign"))?;
        Ok(())
    }

    fn forget(&mut self) {
        self.session = None;
        self.phase = Phase::Unqueued;
    }

    /// Moves the phase on with `f` (a store's answer).
    fn step(&mut self, f: impl FnOnce(Phase<WatchStream>) -> Phase<WatchStream>) {
        self.phase = f(std::mem::take(&mut self.phase));
    }

    /// Reads our key and, when it is still ours, watches it again from that read.
    async fn watch_own_key(&mut self) -> Result<bool, BackendError> {
        let mut client = self.link.client().await?;
        let Some(s) = self.session.as_ref() else {
            return Ok(false);
        };
        let (key, lease, revision) = (s.key.clone(), s.lease, s.revision);
        let answer = client.get(key.as_bytes().to_vec(), None).await;
        let answer = answer.map_err(etcd("renew"))?;
        let Some(from) = requests::own_key_read(&answer, revision, lease, &self.identity) else {
            return Ok(false);
        };
        let own = watches::watch_from(&mut client, key.into_bytes(), from, "renew").await?;
        self.step(|p| p.own_watched(own));
        Ok(true)
    }

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
        let news = watches::own_news(message, lease, &self.identity);
        let (phase, lost) = std::mem::take(&mut self.phase).on_own(news);
        self.phase = phase;
        lost
    }

    /// Notes who holds and how (`--mode` only, for `/leader`'s holders): the first
    /// key's holder, or, when it is a reader's, every reader's key before any other.
    fn observe(&mut self, queue: &Queue) {
        if self.mode == LockMode::Election {
            return;
        }
        let readers = self.keys.readers();
        let heads: Vec<_> = (queue.heads.iter())
            .map(|kv| requests::entry_of(kv, &readers))
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

    /// Moves the phase on with one answer on a follower's watch (`from`).
    fn heard_on_watch(&mut self, from: Source, message: &WatchMessage) -> Heard {
        let news = watches::watch_news(message);
        let phase = std::mem::take(&mut self.phase);
        let (phase, said) = phase.on_watch(from, news, Instant::now(), super::stagger);
        self.phase = phase;
        said
    }

    /// A keep-alive during a wait: whether it kept the lease alive.
    async fn keep_alive_while_waiting(&mut self) -> bool {
        self.begin();
        let result = self.keep_alive("keepalive").await;
        matches!(self.end(result), Ok(true))
    }
}

impl Transport for EtcdTransport {
    type News = WatchMessage;
    type Look = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "etcd"
    }

    fn no_switchover(&self) -> Option<&'static str> {
        self.mode.flag()
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

    async fn own_news(&mut self) -> Option<WatchMessage> {
        // Not watching: the next renew reads the key and watches again.
        let own = self.phase.own_mut()?;
        Some(own.message().await)
    }

    fn on_own(&mut self, _now: Instant, message: WatchMessage) -> Own<Self::Look> {
        let lease = self.session.as_ref().map_or(0, |s| s.lease);
        if self.heard_on_own(&message, lease) {
            Own::Lost
        } else {
            Own::Quiet
        }
    }

    async fn own_look(&mut self, look: Self::Look) -> bool {
        match look {}
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.phase = Phase::Unqueued;
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        self.begin();
        let until = rules::revoke_until(Instant::now(), self.ttl_secs);
        let result = async {
            let client = self.link.client().await?;
            let (first, answer) = tokio::sync::oneshot::channel();
            let revoke = requests::revoke_until_gone(client, session.lease, until, first);
            tokio::spawn(revoke);
            answer
                .await
                .unwrap_or_else(|_| Err(failed("release", "the revoke ended unanswered")))
        }
        .await;
        self.end(result)
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        self.begin();
        let result = async {
            let mut client = self.link.client().await?;
            let queue = requests::read_candidates(&mut client, &self.keys.prefix, "candidates");
            Ok((queue.await?.iter())
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
        let result = async {
            let mut client = self.link.client().await?;
            requests::reserve(&mut client, &self.keys, to, (&key, revision)).await
        }
        .await;
        super::log_reservation(to, self.end(result));
        self.release().await
    }

    fn waits(&mut self) -> Waits {
        match self.phase.wait() {
            // We lost our place in the queue: take a new one at once.
            WaitFor::Now => Waits::Now,
            WaitFor::Stagger => Waits::Stagger,
            WaitFor::Watches | WaitFor::Poll => Waits::Store,
        }
    }

    fn stagger_until(&mut self) -> Option<Instant> {
        self.phase.staggering_mut().map(|(until, _)| until)
    }

    /// Our predecessor's watch fired (when open).
    async fn turn_comes(&mut self) {
        match self.phase.staggering_mut().and_then(|(_, p)| p) {
            Some(predecessor) => drop(predecessor.message().await),
            None => std::future::pending().await,
        }
    }

    fn stagger_over(&mut self) {
        self.step(Phase::stagger_over);
    }

    async fn wait(&mut self, max: Duration) -> Waited {
        let mut wait = Waiting::new(Instant::now(), max);
        loop {
            let timer = wait.timer(self.session.as_ref().map(|s| s.pace.due));
            let (watching, answer) = match self.phase.watches_mut() {
                Some(w) => (true, watches::next_answer(w, timer).await),
                // Nothing to watch (an error before): poll at the retry interval.
                None => {
                    sleep_until(timer).await;
                    (false, None)
                }
            };
            let ended = match answer {
                Some((from, message)) => match wait.on_heard(self.heard_on_watch(from, &message)) {
                    Some(Heard::Stagger) => return Waited::Stagger,
                    Some(_) => Some(Wake::Changed),
                    None => None,
                },
                None => match wait.on_timer(Instant::now(), watching) {
                    Timer::Over(wake) => Some(wake),
                    Timer::KeepAlive { over } => {
                        let alive = self.keep_alive_while_waiting().await;
                        wait.on_keep_alive(alive, over)
                    }
                },
            };
            if let Some(wake) = ended {
                return Waited::Wake(wake);
            }
        }
    }
}
