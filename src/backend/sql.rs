//! What the SQL backends (`postgres`, `mysql`) share: the lease-row rules, the
//! fencing token, the settings, and one statement connection that is dropped after
//! any request that did not finish ([`Session`]).
//!
//! The rules are written once, as a state machine with no I/O (`core`: the phase
//! of the campaign, moved on by the store's answers); [`SqlBackend`] sends what the
//! core asks for through the dialect ([`SqlDialect`]) and hands each answer back.
//!
//! **One row per election** in the lease table (`--sql-table`, created if missing):
//!
//! | column | meaning |
//! |---|---|
//! | `election` | primary key |
//! | `holder` | identity of the tenure's candidate; empty when free |
//! | `tenure` | random id of the tenure (fresh for every tenure); empty when free |
//! | `token` | fencing token of the last tenure: bumped on every new tenure (see the counter below) |
//! | `acquired_at`, `renewed_at` | database server time of the tenure's start and last renew |
//! | `expires_at` | database server time at which the row is free for the taking |
//!
//! Every decision is one conditional statement judged by the database server's own
//! clock (`now()`, `UTC_TIMESTAMP(6)`: the time the statement started, which is after
//! it was sent, so a lease the server grants runs at least a ttl from our send time,
//! the moment the elector counts the local deadline from):
//!
//! - **take**: the row becomes ours if it is ours already (a campaign whose answer was
//!   lost is adopted, its token kept) or has expired; a new tenure gets
//!   `greatest(token, floor, counter) + 1`, where `floor` is the highest token this
//!   candidate has seen and `counter` the election's row in the **token counters'
//!   table** `<table>_tokens`, created with the lease table and raised before (MySQL)
//!   or with (PostgreSQL) every token handed out, never by anything else: a deleted or
//!   reset lease row does not set tokens back. A missing row is inserted — as ours
//!   only when no token was ever handed out (counter and floor 0), and otherwise as a
//!   *quarantine* row nobody holds, expiring a ttl later, so that a leader still
//!   claiming on the deleted row runs out first and the next token continues above
//!   the counter;
//! - **renew** and **release** act only on the row whose `tenure` is ours: renew moves
//!   `expires_at` to a ttl from now, release empties `holder` and `tenure` and expires
//!   the row now. The row and its token stay: tokens only grow, also across releases.
//!
//! **Switchover** (`release_to`): the **candidates' table** `<table>_cands`, created with
//! the other two, has one row per election and candidate:
//!
//! | column | meaning |
//! |---|---|
//! | `election`, `identity` | primary key |
//! | `alive_until` | database server time until which the candidate counts as alive |
//! | `reserved_until` | NULL, or the server time until which a switchover leaves the lease row to this candidate |
//!
//! - **listing**: every candidate upserts its own row at its first campaign and then
//!   at the first campaign after each [`Listing`] period (half a ttl, 1 s to 10 s),
//!   alive for three times the longer of that period and the longest gap between two
//!   campaigns of a follower; `candidates` is the identities whose `alive_until` has not
//!   passed (and this one's: a leader does not campaign). Rows dead for a day are
//!   deleted now and then (best effort; it needs the `DELETE` right);
//! - **reservation**: `release_to(to)` first sets `to`'s `reserved_until` to a ttl from
//!   now — only when `to` is listed alive and the lease row's tenure is still ours — and
//!   lists itself alive without a reservation, in its own statement; then the plain
//!   release. The reservation is committed before the release starts, so a take that
//!   does not see it began before the release and finds the row still held (a take
//!   that started during a release-and-reserve statement would read the candidates'
//!   table from its snapshot from before it, yet the freed row as the release left it).
//!   A `to` that is not listed alive gets nothing: a warning, and a plain release;
//! - **take** for a *new* tenure also needs that no other identity's
//!   `reserved_until` lies in the future; adopting our own tenure is unchanged, and
//!   so are the token and the quarantine rules (the reservation only ever stops a
//!   take). A refused candidate gets the free row back as nobody's with the
//!   reservation's time left, so it wakes at its end (or at the named one's take,
//!   which drops its own reservation: PostgreSQL in the take statement, MySQL at the
//!   new leader's first look at its row, best effort).
//!
//! **Shared and exclusive** (`--mode`): the **shared holders' table** `<table>_shared`,
//! created beside the others by a candidate with `--mode` (never by one without, so a
//! deployment without `--mode` needs no new table), has one row per shared tenure and
//! per waiting candidate (the queue, see [`queue`]):
//!
//! | column | meaning |
//! |---|---|
//! | `election`, `tenure` | primary key (`tenure`: the shared holder's tenure id, or the waiting candidate's presence) |
//! | `holder` | its identity |
//! | `kind` | `r`: a shared holder; `w`: a waiting writer; `q`: a waiting shared candidate |
//! | `token` | a shared holder's fencing token (a waiting candidate's arrival, server µs) |
//! | `expires_at` | database server time at which the row means nothing any more |
//!
//! While shared holders hold, **the election's lease row is theirs together**: its
//! `tenure` is [`SHARED`] (never a candidate's id), `holder` the latest to join, `token`
//! the latest token handed out, and `expires_at` at least every shared holder's row's
//! `expires_at`. So the writers' take (an election's candidate or `--mode exclusive`,
//! the same statement as without `--mode`, unchanged) finds the row held until the last
//! shared holder's expiry, by the row it locks, and no writer can take it beside a
//! shared holder — older leasekeeper versions included.
//!
//! - **shared take**: the lease row becomes (or stays) [`SHARED`] when it is shared
//!   already, or has expired (a writer's tenure that ended), and no switchover's
//!   reservation lasts (the queue, read before, let it in: no live waiting writer
//!   ahead of it); a new shared tenure gets
//!   `greatest(row token, floor, counter) + 1`, the row's token and the counter follow
//!   it (the same counter as the writers'), the row's expiry is raised to a ttl from
//!   now at least, and the holder's own `r` row is written. Its own live `r` row is
//!   adopted with its token (a campaign whose answer was lost).
//! - **shared renew**: the own `r` row and the lease row's expiry (raised, never
//!   lowered) move a ttl ahead, only while the own row is live and the lease row still
//!   shared and live — compare-and-act on the own tenure, as a writer's.
//! - **shared release**: the own `r` row is deleted (with every expired row of the
//!   election), by a statement of its own; then the last live shared holder frees the
//!   lease row, only when the row's version (`token`, `renewed_at`, which every join and
//!   renew changes: a strictly growing `renewed_at`) is still the one it read with the
//!   others' rows: a shared holder that joined or renewed meanwhile keeps the row
//!   (optimistic concurrency). Of two last shared holders leaving at once, the later
//!   one's read sees the other's row gone. A shared holder that is not the last
//!   leaves the row's expiry as it is.
//! - **the queue** ([`queue`]): a candidate kept out (by the row, or by the queue)
//!   writes its waiting row (`w`, `q`), keyed by its presence (a PostgreSQL listener's
//!   `application_name`, a MySQL presence lock) and stamped with its arrival, so that
//!   candidates go in their order of arrival and writers are not starved. The row
//!   counts while its `expires_at` (a ttl after the write) lies ahead or its presence
//!   is there: it needs no rewrite while the candidate waits, and ends with its
//!   session. It deletes it once it holds, and at its release. Before each take, one
//!   read of the lease row and the live waiting rows, and the plain decision
//!   [`queue::turn`]; a candidate it refuses skips the take. An election's candidate
//!   (no `--mode`) takes its turn once the table is there.
//! - **a waiting writer's turn lock**: a writer that waits in the queue holds a lock of
//!   its own session from then until its tenure ends (PostgreSQL: an advisory lock
//!   keyed by its presence; MySQL: a named lock), and a shared candidate kept out
//!   behind it, the row held, waits for that lock silently (see the dialects).
//! - **the waiting writer's signal**: every shared holder holds a lock of its own
//!   session (PostgreSQL: the election's readers' advisory lock, shared; MySQL: a
//!   named lock of its own), and a writer kept out by live shared holders waits for
//!   those sessions to let go, silently (see the dialects): the last one's release
//!   wakes it, and a crashed or frozen one's session's end does, after which it waits
//!   by the row's expiry.
//! - **the holders** (`GET /leader`'s `holders`): after each campaign, the writer that
//!   holds the row, or up to [`HOLDERS_SHOWN`] live shared holders.
//! - A switchover is refused with `--mode` ([`super::no_switchover_with`]).
//!
//! **The leader watches its own row** (invariant 9): between renewals it reads the
//! row's `tenure` every [`OWN_ROW_EVERY`] and steps down as soon as it is no longer
//! its own (deleted, overwritten, taken).
//!
//! How followers learn of a change (PostgreSQL `LISTEN/NOTIFY`, a MySQL/MariaDB named
//! lock) is each dialect's own. A PostgreSQL follower that found the row held by a
//! live leader sends nothing until then (the retry interval passing is
//! [`Wake::Quiet`](super::Wake::Quiet): the leader's session still holds the lock, so the observation is
//! current); a MySQL one likewise while it is queued for the named lock that the
//! holder's session holds (see [`mysql`]).

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::protocol::{Own, Protocol, Transport, Waited};
use super::{BackendError, Campaign, Candidacy, LockMode, Renewal};
use crate::status::{Holder, Mode};

mod core;
mod dialect;
pub mod driven;
pub mod entry;
mod held;
mod listing;
pub mod mysql;
pub mod postgres;
mod queue;
mod request;
mod session;
mod settings;
pub use self::core::{LeaseRow, Tenancy, WaitFor};
use self::core::{Look, Taken};
pub use dialect::SqlDialect;
use listing::{observed_holders, split_live};
pub use queue::{Ahead, Waiting};
pub(crate) use session::sql;
pub use session::{queue_from_rows, Session, TableError};
pub use settings::{Args, Dialect, SqlConnect, SqlSettings, Table, DEFAULT_TABLE};

/// A fresh tenure id.
pub(crate) fn new_tenure_id() -> String {
    let n: u128 = rand::rng().random();
    format!("{n:032x}")
}

/// How often a leader reads its own row between renewals, so that it stops claiming
/// soon after someone else changed or deleted the row (DESIGN invariant 9: within
/// 100 ms). A primary-key read; the followers send nothing of the kind.
pub(crate) const OWN_ROW_EVERY: Duration = Duration::from_millis(50);

/// The tenure of a row inserted to fence a deleted one (never a candidate's id).
pub(crate) const QUARANTINE: &str = "quarantine";

/// A tenure no row carries (a candidate's is 32 hex digits, a free row's empty): what
/// a statement readied ahead of its use names, to match nothing.
pub(crate) const NO_TENURE: &str = "-";

/// An election no row carries (a valid name starts and ends with a letter or digit,
/// `--election`): what a statement readied ahead of its use names where the tenure
/// alone would not keep it from matching.
pub(crate) const NO_ELECTION: &str = "-";

/// The tenure of the lease row while shared holders hold it (`--mode shared`; never a
/// candidate's id, which is 32 hex digits).
pub(crate) const SHARED: &str = "shared";

/// How many shared holders `GET /leader` lists at most (as etcd's).
pub(crate) const HOLDERS_SHOWN: i64 = 16;

/// How many ttls a follower's silent wait lasts at most: then it looks once (a check
/// that its wait's connection still stands).
pub(crate) const BACKSTOP_TTLS: u32 = 20;

/// How many ttls a waiting candidate's silent wait beside shared holders lasts at most
/// (a writer's wait for them, a shared candidate's for a waiting writer's turn): then
/// it looks once, which writes its waiting row again. While shared holders hold, a
/// waiting row whose expiry passed more than this many ttls ago keeps nobody out
/// ([`queue::turn`]): its candidate stopped looking (frozen), so new shared
/// candidates wait behind a frozen waiting writer for about `QUEUE_TTLS + 1` ttls at
/// most, where before they waited for as long as the shared holders held.
pub const QUEUE_TTLS: u32 = 6;

/// How long a candidate's row stays in the candidates' table after its last
/// registration when its presence is gone (then a listing by a leader deletes it).
pub(crate) const PRUNE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The name of a candidate's presence at the server (a PostgreSQL connection's
/// `application_name`, a MySQL named lock): `lk:` and a 64-bit FNV-1a hash (hex) of
/// `parts` joined by `/`. Short and fixed-length (PostgreSQL keeps 63 bytes of an
/// application name, MySQL 64 characters of a lock name), the same in every version.
pub fn presence_name(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.join("/").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("lk:{h:016x}")
}

/// The SQL backend over one dialect: the I/O around the core's rules
/// ([`Tenancy`]): each statement's answer goes to the core, and the core says what
/// to send next.
pub struct SqlTransport<D: SqlDialect> {
    session: Session<D::Conn>,
    tenancy: Tenancy,
    /// Who holds, and how, as the last campaign saw it (`--mode` only).
    observed: Vec<(Holder, Mode)>,
    dialect: D,
    /// The statement connection ([`Session::generation`]) [`SqlDialect::warm`] readied.
    warmed: u64,
}

/// An SQL store (one dialect) as a [`super::Backend`].
pub type SqlBackend<D> = Protocol<SqlTransport<D>>;

impl<D: SqlDialect> SqlTransport<D> {
    pub(crate) fn with_dialect(session: Session<D::Conn>, lease: &Candidacy, dialect: D) -> Self {
        let timing = lease.timing;
        SqlTransport {
            session,
            tenancy: Tenancy::new(lease.election, lease.identity, timing.ttl, lease.mode),
            observed: Vec::new(),
            dialect,
            warmed: 0,
        }
    }

    /// Creates the lease table if it is missing. A user who may not create it is bad
    /// input ([`TableError::NotAllowed`]); anything else is for the elector to retry.
    pub async fn prepare(&mut self) -> Result<(), TableError> {
        self.dialect.prepare(&mut self.session).await?;
        if self.session.generation() != self.warmed {
            self.warmed = self.session.generation();
            self.dialect.warm(&mut self.session).await;
        }
        Ok(())
    }

    /// Registers this candidate in the candidates' table when the core says so. Best
    /// effort: a failure is logged and the campaign goes on (the candidate only cannot
    /// be named by a switchover until the next campaign registers it).
    async fn register(&mut self) {
        if !self.tenancy.registers(self.dialect.presence_renewed()) {
            return;
        }
        let listed = (self.dialect)
            .list(&mut self.session, &self.tenancy, PRUNE_AFTER)
            .await;
        self.listed(listed);
    }

    /// Our waiting row (see the module doc), as the core says. Best effort: without
    /// it, only new shared holders may join while the writer waits.
    async fn mark(&mut self, marks: bool, done: bool) {
        let Some(on) = self.tenancy.mark_step(marks, done) else {
            return;
        };
        let marked = (self.dialect)
            .mark_waiting(&mut self.session, &self.tenancy, on)
            .await;
        self.marked(on, marked);
    }

    /// The queue's read and the core's verdict (see [`queue`]): `Some`, the row as a
    /// take refused by the queue leaves it, and the nearest waiting writer ahead;
    /// `None`: take.
    async fn queue_turn(&mut self) -> Option<(LeaseRow, Option<Ahead>)> {
        if !self.dialect.queued() {
            return None;
        }
        let election = self.tenancy.election.clone();
        let seen = self.dialect.waiting(&mut self.session, &election).await;
        self.queue_read(seen)
    }

    /// The take statement of this candidate's mode.
    async fn take(&mut self) -> Result<Option<LeaseRow>, BackendError> {
        let (session, tenancy) = (&mut self.session, &self.tenancy);
        match tenancy.mode {
            LockMode::Shared => self.dialect.take_shared(session, tenancy).await,
            _ => self.dialect.take(session, tenancy).await,
        }
    }

    /// Notes who holds and how (`--mode` only, for `GET /leader`'s holders); a failed
    /// listing keeps the last one.
    async fn observe(&mut self) {
        if self.tenancy.mode == LockMode::Election {
            return;
        }
        let election = self.tenancy.election.clone();
        match self.dialect.holders(&mut self.session, &election).await {
            Ok(listed) => self.observed = observed_holders(listed),
            Err(e) => tracing::debug!(error = %e, "could not list the holders"),
        }
    }

    /// A registration's answer (see [`Self::register`]).
    fn listed(&mut self, listed: Result<(), BackendError>) {
        match listed {
            Ok(()) => self.tenancy.registered(),
            Err(e) => {
                tracing::warn!(error = %e, "could not register this candidate; a switchover cannot name it")
            }
        }
    }

    /// The answer of our waiting row's write (`on`) or delete (see [`Self::mark`]).
    fn marked(&mut self, on: bool, marked: Result<(), BackendError>) {
        match marked {
            Ok(()) => self.tenancy.marked(on),
            Err(e) => {
                tracing::debug!(error = %e, on, "could not mark (or unmark) this writer waiting")
            }
        }
    }

    /// The queue's read (`seen`) and the core's verdict (see [`Self::queue_turn`]); a
    /// candidate the queue keeps out skips the take, as the dialect learns.
    fn queue_read(
        &mut self,
        seen: Result<Option<(LeaseRow, i64, Vec<Waiting>)>, BackendError>,
    ) -> Option<(LeaseRow, Option<Ahead>)> {
        // Best effort: a queue that cannot be read (a user without the right to read
        // the shared holders' table, an election's candidate among them) costs only
        // the order, never the take.
        let seen = seen.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "could not read the queue of waiting candidates");
            None
        });
        let kept = self.tenancy.queue_verdict(seen, self.dialect.queue_key());
        if let Some((row, _)) = &kept {
            self.dialect.kept_by_queue(row);
        }
        kept
    }

    /// The campaign's answer at `now` from the row its take (or the queue: `behind`,
    /// the nearest waiting writer ahead) left, as the core judges it; the dialect learns
    /// of a tenure taken and of a queue to look for. Also whether our waiting row is
    /// written (`marks`), and whether the row is ours.
    fn took(
        &mut self,
        now: Instant,
        row: Option<LeaseRow>,
        behind: Option<&Ahead>,
    ) -> Result<(Campaign, bool, bool), BackendError> {
        let queued = self.dialect.queued();
        let taken = (self.tenancy).after_take(now, row, queued, behind)?;
        let Taken {
            campaign,
            acquired,
            marks,
            look_for_queue,
        } = taken;
        if look_for_queue {
            self.dialect.look_for_queue();
        }
        if acquired {
            self.dialect.acquired();
        }
        Ok((campaign, marks, acquired))
    }

    /// A table that could not be made ready, as the campaign's error.
    fn not_ready(e: TableError) -> BackendError {
        match e {
            TableError::Backend(b) => b,
            refused => {
                tracing::error!("{refused}");
                BackendError::Store {
                    op: "campaign",
                    message: refused.to_string(),
                }
            }
        }
    }
}

/// Says what a switchover's reservation for `to` came to (`reserved`); the plain
/// release follows either way.
fn note_reservation(reserved: Result<bool, BackendError>, to: &str) {
    match reserved {
        Ok(true) => {
            tracing::info!(to, "the lease is left to the named candidate for one ttl");
        }
        Ok(false) => tracing::warn!(
            to,
            "the named candidate is not listed alive (or the lease is no longer ours); releasing without a reservation"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            to,
            "could not leave the lease to the named candidate; releasing without a reservation"
        ),
    }
}

impl<D: SqlDialect> Transport for SqlTransport<D> {
    type News = ();
    type Look = ();

    fn name(&self) -> &'static str {
        D::NAME
    }

    fn no_switchover(&self) -> Option<&'static str> {
        self.tenancy.mode.flag()
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        (self.tenancy.mode != LockMode::Election)
            .then(|| crate::status::Slots::one_lock(self.observed.iter().cloned()))
    }

    fn lease_ttl(&self) -> Duration {
        self.tenancy.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        self.tenancy.begin();
        self.prepare().await.map_err(Self::not_ready)?;
        self.register().await;
        let (row, behind) = match self.queue_turn().await {
            Some((kept, writer)) => (Some(kept), writer),
            None => (self.take().await?, None),
        };
        let (campaign, marks, acquired) = self.took(Instant::now(), row, behind.as_ref())?;
        self.mark(marks, acquired).await;
        self.observe().await;
        Ok(campaign)
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        if !self.tenancy.holding() {
            return Ok(Renewal::Lost);
        }
        let (session, tenancy) = (&mut self.session, &self.tenancy);
        let ours = match tenancy.mode {
            LockMode::Shared => self.dialect.renew_shared(session, tenancy).await?,
            _ => self.dialect.renew(session, tenancy).await?,
        };
        Ok(Tenancy::renewal(ours))
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.mark(false, true).await;
        let tenure = self.tenancy.rotate();
        let (session, election) = (&mut self.session, &self.tenancy.election);
        let freed = match self.tenancy.mode {
            LockMode::Shared => (self.dialect.release_shared(session, election, &tenure)).await,
            _ => self.dialect.release(session, election, &tenure).await,
        };
        // The row first, then the dialect's signal: a follower woken by it finds the
        // row free.
        self.dialect.released(&mut self.session).await;
        freed
    }

    async fn wait(&mut self, max: Duration) -> Waited {
        let (wait, max) = self.tenancy.wait(max, Instant::now());
        let woke = (self.dialect)
            .wait_for_change(&mut self.tenancy, wait, max)
            .await;
        Waited::Wake(self.tenancy.woke(woke, Instant::now()))
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        let election = self.tenancy.election.clone();
        let registered = self.dialect.live(&mut self.session, &election).await?;
        let (live, gone) = split_live(registered, &self.tenancy.identity);
        for identity in gone {
            // Best effort (it needs the DELETE right).
            let pruned = self.dialect.prune(&mut self.session, &election, &identity);
            if let Err(e) = pruned.await {
                tracing::debug!(error = %e, "could not prune a candidate that is gone");
                break;
            }
        }
        Ok(Some(live))
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        if self.tenancy.holding() {
            // Its own statement, committed before the release's: a take that started
            // before it cannot see the row free (see the module doc).
            let reserved = (self.dialect)
                .reserve(&mut self.session, &self.tenancy, to, PRUNE_AFTER)
                .await;
            note_reservation(reserved, to);
        }
        self.release().await
    }

    /// The dialect's next reason to look at our row (a notification, a timer).
    async fn own_news(&mut self) -> Option<()> {
        self.dialect.settle(&mut self.session).await;
        self.dialect.next_look().await;
        Some(())
    }

    /// A look while we hold.
    fn on_own(&mut self, _now: Instant, _news: ()) -> Own<()> {
        if self.tenancy.holding() {
            Own::Look(())
        } else {
            Own::Quiet
        }
    }

    async fn own_look(&mut self, _look: ()) -> bool {
        let (session, tenancy) = (&mut self.session, &self.tenancy);
        let look = match tenancy.mode {
            LockMode::Shared => {
                Tenancy::still_shared(self.dialect.own_shared(session, tenancy).await)
            }
            _ => tenancy.still_ours(self.dialect.own_tenure(session, tenancy).await),
        };
        look == Look::Lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_names_are_short_stable_and_distinct() {
        let n = presence_name(&["leasekeeper_leases", "my-app", "pod-1"]);
        assert_eq!(n.len(), 19);
        assert_ne!(n, presence_name(&["leasekeeper_leases", "my-app", "pod-2"]));
        assert_ne!(
            n,
            presence_name(&["leasekeeper_leases", "my-app/pod-1"][..1])
        );
        // Pinned: every version must name a presence alike.
        assert_eq!(presence_name(&[""]), "lk:cbf29ce484222325");
        assert_eq!(presence_name(&["", "", ""]), "lk:07d69907b49d2e23");
    }

    /// A statement readied ahead of its use names `NO_TENURE`, which must match no
    /// row: no candidate's tenure, no free row's, no fencing or shared row's.
    #[test]
    fn no_row_carries_the_tenure_a_readied_statement_names() {
        for taken in [String::new(), QUARANTINE.to_owned(), SHARED.to_owned()] {
            assert_ne!(NO_TENURE, taken);
        }
        for _ in 0..1000 {
            let tenure = new_tenure_id();
            assert_eq!(tenure.len(), 32, "{tenure}");
            assert_ne!(NO_TENURE, tenure);
        }
    }
}
