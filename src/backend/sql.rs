//! What the SQL backends (`postgres`, `mysql`) share: the lease-row rules, the
//! fencing token, the settings, and one statement connection that is dropped after
//! any request that did not finish.
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
//! [`Wake::Quiet`]: the leader's session still holds the lock, so the observation is
//! current); a MySQL one likewise while it is queued for the named lock that the
//! holder's session holds (see [`mysql`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Backend, BackendError, Campaign, Candidacy, LockMode, Renewal, Wake};
use crate::status::{FencingToken, Holder, Mode};

pub mod entry;
pub mod mysql;
pub mod postgres;
mod queue;
mod settings;
pub use queue::Ahead;
use queue::{grace_left, turn, Turn, Waiting};
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

/// The tenure of the lease row while shared holders hold it (`--mode shared`; never a
/// candidate's id, which is 32 hex digits).
pub(crate) const SHARED: &str = "shared";

/// How many shared holders `GET /leader` lists at most (as etcd's).
pub(crate) const HOLDERS_SHOWN: i64 = 16;

/// Whether a candidate whose campaign left `row` writes (or keeps) its waiting row in
/// the queue (see [`queue`]): when it uses the queue (`queued`) and the row is not
/// its own tenure's (refused by the row or by the queue).
pub(crate) fn enqueues(queued: bool, row: Option<&LeaseRow>, tenure: &str) -> bool {
    queued && row.is_some_and(|r| r.tenure != tenure)
}

/// The row a take refused by the queue leaves: as it stands, but free for nobody
/// until the grace ends when it is free (`grace_left`; see [`queue::grace_left`]).
pub(crate) fn kept_row(row: LeaseRow, grace_left: Option<i64>) -> LeaseRow {
    match grace_left {
        Some(left_ms) => LeaseRow {
            holder: String::new(),
            left_ms,
            ..row
        },
        None => row,
    }
}

/// `GET /leader`'s holders from the listing (identity, token, whether shared); a
/// negative token is shown as unknown.
pub(crate) fn observed_holders(listed: Vec<(String, i64, bool)>) -> Vec<(Holder, Mode)> {
    (listed.into_iter())
        .map(|(identity, token, shared)| {
            let holder = Holder {
                identity,
                token: FencingToken::try_from(token).ok(),
            };
            let mode = if shared {
                Mode::Shared
            } else {
                Mode::Exclusive
            };
            (holder, mode)
        })
        .collect()
}

/// The row as one statement saw it.
#[derive(Debug, Clone)]
pub struct LeaseRow {
    pub holder: String,
    pub tenure: String,
    pub token: i64,
    /// How long until the row expires, by the server's clock (0 when expired).
    pub left_ms: i64,
}

impl LeaseRow {
    /// The row from an answer whose columns are holder, tenure, token, ms left.
    pub fn from_row<R: sqlx::Row>(r: &R) -> Result<LeaseRow, sqlx::Error>
    where
        usize: sqlx::ColumnIndex<R>,
        String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    {
        Ok(LeaseRow {
            holder: r.try_get(0)?,
            tenure: r.try_get(1)?,
            token: r.try_get(2)?,
            left_ms: r.try_get(3)?,
        })
    }
}

/// The queue's read from its answer (see [`SqlDialect::waiting`]): one row per live
/// waiting row, each with the lease row's four columns, the ms it has been free, and
/// the waiting row's presence, whether a writer's (0/1), arrival and the ms since its
/// expiry (NULL when the queue is empty: one row then).
#[allow(clippy::type_complexity)]
pub fn queue_from_rows<R: sqlx::Row>(
    rows: &[R],
) -> Result<Option<(LeaseRow, i64, Vec<Waiting>)>, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let mut seen = None;
    let mut queue = Vec::new();
    for r in rows {
        if let Some(presence) = r.try_get::<Option<String>, _>(5)? {
            queue.push(Waiting {
                presence,
                writer: r.try_get::<Option<i64>, _>(6)?.unwrap_or(1) != 0,
                arrived: r.try_get::<Option<i64>, _>(7)?.unwrap_or(0),
                lapsed_ms: r.try_get::<Option<i64>, _>(8)?.unwrap_or(0),
            });
        }
        seen = Some((LeaseRow::from_row(r)?, r.try_get::<i64, _>(4)?));
    }
    Ok(seen.map(|(row, free_ms)| (row, free_ms, queue)))
}

/// This candidate's side of the lease row: its tenure id, the highest token it has
/// seen, and what it observed last. Shared by both dialects.
pub struct Tenancy {
    pub election: String,
    pub identity: String,
    pub ttl: Duration,
    /// This tenure's id; rotated on every release, so a leftover of an earlier tenure
    /// is never adopted as a new one.
    pub tenure: String,
    /// Whether the last campaign made us the holder (until release).
    pub holding: bool,
    /// The highest token seen; new tokens never go below it.
    pub floor: FencingToken,
    /// When the observed holder's row expires, if known.
    pub expiry_hint: Option<Instant>,
    /// Whether the last campaign found the row held by another candidate.
    pub held_by_other: bool,
    /// Whether the last campaign found the row held by shared holders ([`SHARED`],
    /// live): a writer waits for their sessions (see the dialects).
    pub held_by_readers: bool,
}

impl Tenancy {
    pub fn new(election: &str, identity: &str, ttl: Duration) -> Self {
        Tenancy {
            election: election.to_owned(),
            identity: identity.to_owned(),
            ttl,
            tenure: new_tenure_id(),
            holding: false,
            floor: 0,
            expiry_hint: None,
            held_by_other: false,
            held_by_readers: false,
        }
    }

    pub fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    pub fn floor_param(&self) -> i64 {
        i64::try_from(self.floor).unwrap_or(i64::MAX)
    }

    /// Turns the row a take statement left into the campaign's answer.
    pub fn judge(&mut self, row: Option<LeaseRow>) -> Result<Campaign, BackendError> {
        self.held_by_other = false;
        self.held_by_readers = false;
        let Some(row) = row else {
            // Inserted meanwhile by someone whose row our snapshot did not show: the
            // notification (or the retry) brings the next look.
            self.expiry_hint = None;
            return Ok(Campaign::Held(None));
        };
        let token = FencingToken::try_from(row.token).map_err(|_| BackendError::Store {
            op: "campaign",
            message: format!("the lease row carries a negative token {}", row.token),
        })?;
        self.floor = self.floor.max(token);
        if row.tenure == self.tenure {
            self.holding = true;
            self.expiry_hint = None;
            return Ok(Campaign::Acquired { token });
        }
        let left = u64::try_from(row.left_ms).unwrap_or(0);
        self.expiry_hint = Some(Instant::now() + Duration::from_millis(left + 2));
        let held = left > 0 && !row.holder.is_empty();
        // Shared holders hold no election's signal: a writer waits for their own
        // sessions' signal instead (see the dialects), a shared candidate by the
        // notifications, the row's expiry and the retry interval.
        self.held_by_other = held && row.tenure != SHARED;
        self.held_by_readers = held && row.tenure == SHARED;
        Ok(Campaign::Held(held.then_some(Holder {
            identity: row.holder,
            token: Some(token),
        })))
    }

    /// Ends this tenure whatever the release statement's fate: the next one gets a
    /// fresh id. Returns the id to release.
    pub fn rotate(&mut self) -> String {
        self.holding = false;
        std::mem::replace(&mut self.tenure, new_tenure_id())
    }
}

/// One connection for the lease statements. A request that did not finish (the
/// elector dropped it on its timeout) leaves the connection in an unknown state: the
/// next request opens a fresh one, and so does any error below SQL (I/O, TLS,
/// protocol). Each fresh connection is announced on `reconnected`, so that the
/// dialect's wake-up connection is renewed with it (a partition that broke one may
/// have left the other half-open).
pub struct Session<C: sqlx::Connection> {
    options: <C as sqlx::Connection>::Options,
    conn: Option<C>,
    in_flight: bool,
    /// How many connections were opened: a session-level lock lives as long as one.
    generation: u64,
    pub reconnected: Arc<Notify>,
}

impl<C: sqlx::Connection> Session<C> {
    pub fn new(options: <C as sqlx::Connection>::Options) -> Self {
        Session {
            options,
            conn: None,
            in_flight: false,
            generation: 0,
            reconnected: Arc::new(Notify::new()),
        }
    }

    /// The connection now in use (it changes at every reconnect; 0 before the first).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether connection `generation` is still the one in use, idle and sound.
    pub fn still(&self, generation: u64) -> bool {
        self.conn.is_some() && !self.in_flight && self.generation == generation
    }

    /// Starts a request: the connection, opened if needed.
    pub async fn begin(&mut self, op: &'static str) -> Result<&mut C, BackendError> {
        if std::mem::replace(&mut self.in_flight, true) {
            tracing::info!(op, "a request did not finish: a fresh connection");
            self.conn = None;
        }
        if self.conn.is_none() {
            let conn = C::connect_with(&self.options).await.map_err(sql(op))?;
            self.reconnected.notify_one();
            self.generation += 1;
            self.conn = Some(conn);
        }
        self.conn.as_mut().ok_or_else(|| BackendError::Store {
            op,
            message: "no connection".to_owned(),
        })
    }

    /// Ends a request; an error below SQL drops the connection.
    pub fn end<T>(
        &mut self,
        op: &'static str,
        r: Result<T, sqlx::Error>,
    ) -> Result<T, BackendError> {
        self.in_flight = false;
        if let Err(e) = &r {
            if !matches!(
                e,
                sqlx::Error::Database(_)
                    | sqlx::Error::RowNotFound
                    | sqlx::Error::ColumnDecode { .. }
            ) {
                tracing::debug!(op, error = %e, "the connection failed: a fresh one next");
                self.conn = None;
            }
        }
        r.map_err(sql(op))
    }
}

pub(crate) fn sql(op: &'static str) -> impl FnOnce(sqlx::Error) -> BackendError {
    move |e| BackendError::Store {
        op,
        message: e.to_string(),
    }
}

/// Why the lease table could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The user may not create the table: bad input, the sidecar stops.
    #[error("--sql-table {table}: the table is missing and user {user:?} may not create it ({detail}); create it once as a user who may (docs/backends-sql.md shows the statement) or grant that right")]
    NotAllowed {
        table: String,
        user: String,
        detail: String,
    },
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// What differs between PostgreSQL and MySQL: the statements, the table's creation
/// and how followers are woken. Each method runs one request on the shared
/// [`Session`]; the lease-row rules around them live in [`SqlBackend`].
pub trait SqlDialect: Send + 'static {
    type Conn: sqlx::Connection;

    /// The backend's name in `Status` and metrics.
    const NAME: &'static str;

    /// Creates the lease table if it is missing.
    fn prepare(
        &mut self,
        session: &mut Session<Self::Conn>,
    ) -> impl Future<Output = Result<(), TableError>> + Send;

    /// The take statement (see the module doc); the row as it stands afterwards.
    fn take(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<Option<LeaseRow>, BackendError>> + Send;

    /// Moves our row's expiry; true when the row was ours.
    fn renew(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Frees the row if its tenure is `tenure`.
    fn release(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
        tenure: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Registers this candidate's identity: an upsert of its own row in the
    /// candidates' table, kept for `alive` from now at least (its reservation, if any,
    /// stays). Whether it is alive is its session's presence (see the module doc).
    fn list(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
        alive: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The identities the candidates' table registers, each with whether its session's
    /// presence is there now.
    fn live(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
    ) -> impl Future<Output = Result<Vec<(String, bool)>, BackendError>> + Send;

    /// Whether this candidate's presence session was (re)opened since the last call:
    /// then its row is registered again (a prune may have deleted it meanwhile).
    fn presence_renewed(&mut self) -> bool {
        false
    }

    /// A switchover's reservation, before the release: `to`'s row reserved for one ttl
    /// from now, only when `to` is listed alive and the lease row's tenure is ours; our
    /// own row listed alive for `alive` and its reservation, if any, dropped. True when
    /// `to` got the reservation.
    fn reserve(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
        to: &str,
        alive: Duration,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Deletes the row of `identity`, whose presence is gone, once its registration is
    /// older than [`PRUNE_AFTER`] and it holds no reservation (a candidate gone for
    /// good: a pod name never seen again).
    fn prune(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
        identity: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The tenure in the election's row now, if the row exists (the leader's look).
    fn own_tenure(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<Option<String>, BackendError>> + Send;

    /// This candidate just took the row.
    fn acquired(&mut self) {}

    /// After the release statement, whatever its fate.
    fn released(&mut self, _session: &mut Session<Self::Conn>) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Resolves when the leader should look at its own row again.
    fn next_look(&mut self) -> impl Future<Output = ()> + Send;

    /// A follower's wait for a change of holder.
    fn wait_for_change(
        &mut self,
        tenancy: &mut Tenancy,
        max: Duration,
    ) -> impl Future<Output = Wake> + Send;

    /// `--mode shared`: the shared take (see the module doc); our own row (our tenure,
    /// our token, a ttl left) when we hold, else the lease row as it stands, with the
    /// time until a waiting writer's or a reservation's end when that is later.
    fn take_shared(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<Option<LeaseRow>, BackendError>> + Send;

    /// Moves our shared row's expiry and the lease row's; true when both were ours
    /// to move (our row live, the lease row shared and live).
    fn renew_shared(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Deletes our shared row `tenure`; the last live shared holder frees the lease row
    /// (see the module doc).
    fn release_shared(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
        tenure: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Whether this candidate takes its turn in the waiting candidates' queue (see
    /// [`queue`]): the shared holders' table is there (a `--mode` candidate creates
    /// it; an election's candidate looks for it when it prepares).
    fn queued(&self) -> bool;

    /// Looks for the shared holders' table again at the next campaign (an election's
    /// candidate that found shared holders while it knew of no queue).
    fn look_for_queue(&mut self);

    /// This candidate's presence: the key of its waiting row.
    fn queue_key(&self) -> &str;

    /// The queue's read: the lease row (as a refused take returns it), how long it has
    /// been free (ms; negative while it is held), and the live waiting candidates;
    /// `None` without a lease row.
    #[allow(clippy::type_complexity)]
    fn waiting(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
    ) -> impl Future<Output = Result<Option<(LeaseRow, i64, Vec<Waiting>)>, BackendError>> + Send;

    /// What the queue said at this campaign: `None`, take; `Some`, the take was
    /// skipped, the queue keeps this candidate out, the row as it stands (`writer`:
    /// the nearest waiting writer ahead of it, whose tenure a shared candidate waits
    /// to end, or until its row goes stale, whichever comes first).
    fn kept_by_queue(&mut self, kept: Option<(&LeaseRow, Option<&Ahead>)>);

    /// Our waiting row in the queue (a writer's `w`, a shared candidate's `q`): written
    /// for a ttl from now, its arrival kept (`on`), or deleted.
    fn mark_waiting(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
        on: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Whether our shared row is there and the lease row still shared (a shared
    /// holder's look at its own rows).
    fn own_shared(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Who holds now: the writer that holds the lease row, or up to [`HOLDERS_SHOWN`]
    /// live shared holders (identity, token, whether shared).
    fn holders(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
    ) -> impl Future<Output = Result<Vec<(String, i64, bool)>, BackendError>> + Send;
}

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
pub(crate) const QUEUE_TTLS: u32 = 6;

/// When a shared candidate waiting behind a writer's turn looks anyway, from `now`:
/// when the writer's waiting row goes stale (`stale_in_ms`; see [`queue::turn`]).
pub(crate) fn stale_at(now: Instant, ahead: Option<&Ahead>) -> Option<Instant> {
    let ms = ahead.and_then(|a| a.stale_in_ms)?;
    Some(now + Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0) + 1))
}

/// A wait behind a writer's turn lasts until `stale_at` at most (`max` otherwise).
pub(crate) fn behind_for(max: Duration, stale_at: Option<Instant>, now: Instant) -> Duration {
    stale_at.map_or(max, |at| at.saturating_duration_since(now).min(max))
}

/// A wait behind a writer's turn that ran out (`Quiet`) once the writer's row went
/// stale is a change: the candidate looks (and goes past a frozen writer).
pub(crate) fn behind_woke(wake: Wake, stale_at: Option<Instant>, now: Instant) -> Wake {
    match (wake, stale_at) {
        (Wake::Quiet, Some(at)) if now >= at => Wake::Changed,
        _ => wake,
    }
}

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

/// The live candidates among the `registered` ones (sorted, with `me` added: a
/// candidate that asks is alive), and the others.
fn split_live(registered: Vec<(String, bool)>, me: &str) -> (Vec<String>, Vec<String>) {
    let (live, gone): (Vec<_>, Vec<_>) = registered.into_iter().partition(|(_, up)| *up);
    let mut live: Vec<String> = live.into_iter().map(|(id, _)| id).collect();
    if !live.iter().any(|id| id == me) {
        live.push(me.to_owned());
    }
    live.sort();
    live.dedup();
    let gone = gone
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| id != me)
        .collect();
    (live, gone)
}

/// The SQL backend over one dialect: the lease-row rules of the module doc.
pub struct SqlBackend<D: SqlDialect> {
    session: Session<D::Conn>,
    tenancy: Tenancy,
    /// Whether this candidate's row is registered in the candidates' table.
    registered: bool,
    /// How it joins the election (`--mode`).
    mode: LockMode,
    /// Whether our waiting writer's row may be in the shared holders' table.
    marked: bool,
    /// Who holds, and how, as the last campaign saw it (`--mode` only).
    observed: Vec<(Holder, Mode)>,
    dialect: D,
}

impl<D: SqlDialect> SqlBackend<D> {
    pub(crate) fn with_dialect(session: Session<D::Conn>, lease: &Candidacy, dialect: D) -> Self {
        SqlBackend {
            session,
            tenancy: Tenancy::new(lease.election, lease.identity, lease.timing.ttl),
            registered: false,
            mode: lease.mode,
            marked: false,
            observed: Vec::new(),
            dialect,
        }
    }

    /// Creates the lease table if it is missing. A user who may not create it is bad
    /// input ([`TableError::NotAllowed`]); anything else is for the elector to retry.
    pub async fn prepare(&mut self) -> Result<(), TableError> {
        self.dialect.prepare(&mut self.session).await
    }

    /// Registers this candidate in the candidates' table at its first campaign and
    /// after its presence session was opened again (never periodically). Best effort:
    /// a failure is logged and the campaign goes on (the candidate only cannot be named
    /// by a switchover until the next campaign registers it).
    async fn register(&mut self) {
        if self.dialect.presence_renewed() {
            self.registered = false;
        }
        if self.registered {
            return;
        }
        let listed = self
            .dialect
            .list(&mut self.session, &self.tenancy, PRUNE_AFTER)
            .await;
        match listed {
            Ok(()) => self.registered = true,
            Err(e) => {
                tracing::warn!(error = %e, "could not register this candidate; a switchover cannot name it")
            }
        }
    }
}

impl<D: SqlDialect> SqlBackend<D> {
    /// A writer's waiting row (see the module doc): written when `marks`, deleted once
    /// it holds (`done`) or releases. Best effort: without it, only new shared holders
    /// may join while the writer waits.
    async fn mark(&mut self, marks: bool, done: bool) {
        let on = marks && !done;
        let unmark = done && self.marked;
        if !on && !unmark {
            return;
        }
        let marked = (self.dialect)
            .mark_waiting(&mut self.session, &self.tenancy, on)
            .await;
        match marked {
            Ok(()) => self.marked = on,
            Err(e) => {
                tracing::debug!(error = %e, on, "could not mark (or unmark) this writer waiting")
            }
        }
    }

    /// The queue's verdict (see [`queue`]): `Some(row)`, the row as a take refused by
    /// it leaves it, when candidates ahead go first; `None`: take. A candidate whose
    /// tenure the row is goes on (a campaign whose answer was lost).
    async fn queue_turn(&mut self) -> Result<Option<LeaseRow>, BackendError> {
        if !self.dialect.queued() {
            return Ok(None);
        }
        let election = self.tenancy.election.clone();
        self.dialect.kept_by_queue(None);
        // Best effort: a queue that cannot be read (a user without the right to read
        // the shared holders' table, an election's candidate among them) costs only
        // the order, never the take.
        let seen = match self.dialect.waiting(&mut self.session, &election).await {
            Ok(seen) => seen,
            Err(e) => {
                tracing::debug!(error = %e, "could not read the queue of waiting candidates");
                None
            }
        };
        let Some((row, free_ms, waiting)) = seen else {
            return Ok(None);
        };
        if row.tenure == self.tenancy.tenure {
            return Ok(None);
        }
        let grace = self.tenancy.ttl_ms();
        let shared = self.mode == LockMode::Shared;
        let me = self.dialect.queue_key();
        let stale = (row.tenure == SHARED && free_ms < 0).then(|| grace * i64::from(QUEUE_TTLS));
        let Turn::Wait { writer } = turn(shared, me, &waiting, (free_ms, grace), stale) else {
            return Ok(None);
        };
        let row = kept_row(row, grace_left(free_ms, grace));
        self.dialect.kept_by_queue(Some((&row, writer.as_ref())));
        Ok(Some(row))
    }

    /// Notes who holds and how (`--mode` only, for `GET /leader`'s holders); a failed
    /// listing keeps the last one.
    async fn observe(&mut self) {
        if self.mode == LockMode::Election {
            return;
        }
        let election = self.tenancy.election.clone();
        match self.dialect.holders(&mut self.session, &election).await {
            Ok(listed) => self.observed = observed_holders(listed),
            Err(e) => tracing::debug!(error = %e, "could not list the holders"),
        }
    }
}

impl<D: SqlDialect> Backend for SqlBackend<D> {
    fn name(&self) -> &'static str {
        D::NAME
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        (self.mode != LockMode::Election)
            .then(|| crate::status::Slots::one_lock(self.observed.iter().cloned()))
    }

    fn lease_ttl(&self) -> Duration {
        self.tenancy.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        // Only a campaign that found another holder lets a follower wait silently.
        self.tenancy.held_by_other = false;
        self.tenancy.held_by_readers = false;
        if let Err(e) = self.prepare().await {
            return Err(match e {
                TableError::Backend(b) => b,
                refused => {
                    tracing::error!("{refused}");
                    BackendError::Store {
                        op: "campaign",
                        message: refused.to_string(),
                    }
                }
            });
        }
        self.register().await;
        let row = match self.queue_turn().await? {
            Some(kept) => Some(kept),
            None if self.mode == LockMode::Shared => {
                self.dialect
                    .take_shared(&mut self.session, &self.tenancy)
                    .await?
            }
            None => self.dialect.take(&mut self.session, &self.tenancy).await?,
        };
        if !self.dialect.queued() && row.as_ref().is_some_and(|r| r.tenure == SHARED) {
            // Shared holders, and we knew of no queue (an election's candidate).
            self.dialect.look_for_queue();
        }
        let marks = enqueues(self.dialect.queued(), row.as_ref(), &self.tenancy.tenure);
        let campaign = self.tenancy.judge(row)?;
        let acquired = matches!(campaign, Campaign::Acquired { .. });
        if acquired {
            self.dialect.acquired();
        }
        self.mark(marks, acquired).await;
        self.observe().await;
        Ok(campaign)
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        if !self.tenancy.holding {
            return Ok(Renewal::Lost);
        }
        let ours = if self.mode == LockMode::Shared {
            (self.dialect)
                .renew_shared(&mut self.session, &self.tenancy)
                .await?
        } else {
            self.dialect.renew(&mut self.session, &self.tenancy).await?
        };
        Ok(if ours {
            Renewal::Renewed
        } else {
            Renewal::Lost
        })
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.mark(false, true).await;
        let tenure = self.tenancy.rotate();
        let election = self.tenancy.election.clone();
        let freed = if self.mode == LockMode::Shared {
            (self.dialect)
                .release_shared(&mut self.session, &election, &tenure)
                .await
        } else {
            (self.dialect)
                .release(&mut self.session, &election, &tenure)
                .await
        };
        // The row first, then the dialect's signal: a follower woken by it finds the
        // row free.
        self.dialect.released(&mut self.session).await;
        freed
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        self.dialect.wait_for_change(&mut self.tenancy, max).await
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        if let Some(flag) = self.mode.flag() {
            return Err(super::no_switchover_with(flag));
        }
        let election = self.tenancy.election.clone();
        let registered = self.dialect.live(&mut self.session, &election).await?;
        let (live, gone) = split_live(registered, &self.tenancy.identity);
        for identity in gone {
            // Best effort (it needs the DELETE right).
            if let Err(e) = self
                .dialect
                .prune(&mut self.session, &election, &identity)
                .await
            {
                tracing::debug!(error = %e, "could not prune a candidate that is gone");
                break;
            }
        }
        Ok(Some(live))
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        if self.tenancy.holding {
            // Its own statement, committed before the release's: a take that started
            // before it cannot see the row free (see the module doc).
            let reserved = self
                .dialect
                .reserve(&mut self.session, &self.tenancy, to, PRUNE_AFTER)
                .await;
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
        self.release().await
    }

    async fn record_lost(&mut self) {
        loop {
            self.dialect.next_look().await;
            if !self.tenancy.holding {
                continue;
            }
            if self.mode == LockMode::Shared {
                // A read that fails says nothing; the renewals decide then.
                let own = (self.dialect)
                    .own_shared(&mut self.session, &self.tenancy)
                    .await;
                if matches!(own, Ok(false)) {
                    return;
                }
                continue;
            }
            // A read that fails says nothing; the renewals decide then.
            match self
                .dialect
                .own_tenure(&mut self.session, &self.tenancy)
                .await
            {
                Ok(Some(t)) if t == self.tenancy.tenure => {}
                Ok(_) => return,
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared candidate behind a waiting writer waits until that writer's row goes
    /// stale at most, and then looks (a wait that ran out is a change then); without
    /// staleness (the row not held by shared holders) it waits for the writer alone.
    #[test]
    fn a_wait_behind_a_waiting_writer_ends_when_its_row_goes_stale() {
        let now = Instant::now();
        let ahead = |stale_in_ms| Ahead {
            presence: "w".to_owned(),
            stale_in_ms,
        };
        let max = Duration::from_secs(10);
        let at = stale_at(now, Some(&ahead(Some(3000))));
        assert_eq!(at, Some(now + Duration::from_millis(3001)));
        assert_eq!(stale_at(now, Some(&ahead(None))), None);
        assert_eq!(stale_at(now, None), None);
        let past = stale_at(now, Some(&ahead(Some(-50))));
        assert_eq!(past, Some(now + Duration::from_millis(1)));
        assert_eq!(behind_for(max, at, now), Duration::from_millis(3001));
        assert_eq!(
            behind_for(Duration::from_secs(2), at, now),
            Duration::from_secs(2)
        );
        assert_eq!(behind_for(max, None, now), max);
        let later = now + Duration::from_secs(4);
        assert_eq!(behind_for(max, at, later), Duration::ZERO);
        assert_eq!(behind_woke(Wake::Quiet, at, later), Wake::Changed);
        assert_eq!(behind_woke(Wake::Quiet, at, now), Wake::Quiet);
        assert_eq!(behind_woke(Wake::Quiet, None, later), Wake::Quiet);
        assert_eq!(behind_woke(Wake::Waiting, at, later), Wake::Waiting);
        let exactly = now + Duration::from_millis(3001);
        assert_eq!(behind_woke(Wake::Quiet, at, exactly), Wake::Changed);
    }

    fn row(holder: &str, tenure: &str, token: i64, left_ms: i64) -> LeaseRow {
        LeaseRow {
            holder: holder.to_owned(),
            tenure: tenure.to_owned(),
            token,
            left_ms,
        }
    }

    /// The campaign's answer from the row the take left: ours (with its token), held
    /// by a live other (named, with the wait until its expiry), or held by nobody (an
    /// expired or free row, or none); the floor only grows, and a negative token is
    /// an error.
    #[tokio::test(start_paused = true)]
    async fn a_campaign_is_judged_by_the_row_the_take_left() {
        let mut t = Tenancy::new("e", "me", Duration::from_secs(10));
        let mine = t.tenure.clone();
        let c = t.judge(Some(row("me", &mine, 7, 10_000)));
        assert!(matches!(c, Ok(Campaign::Acquired { token: 7 })), "{c:?}");
        assert!(t.holding && !t.held_by_other);
        assert_eq!((t.floor, t.expiry_hint), (7, None));
        let now = Instant::now();
        match t.judge(Some(row("b", "x", 9, 500))) {
            Ok(Campaign::Held(Some(h))) => {
                assert_eq!((h.identity.as_str(), h.token), ("b", Some(9)));
            }
            other => panic!("b holds: {other:?}"),
        }
        assert!(t.held_by_other);
        assert_eq!(t.floor, 9);
        assert_eq!(t.expiry_hint, Some(now + Duration::from_millis(502)));
        // Expired, or free: nobody is named, and nobody holds it.
        for (holder, left) in [("b", 0), ("", 300)] {
            let c = t.judge(Some(row(holder, "x", 3, left)));
            assert!(
                matches!(c, Ok(Campaign::Held(None))),
                "{holder:?} {left}: {c:?}"
            );
            assert!(!t.held_by_other, "{holder:?} {left}");
        }
        // A lower token never lowers the floor.
        assert_eq!(t.floor, 9);
        assert!(t.judge(Some(row("b", "x", -1, 500))).is_err());
        let c = t.judge(None);
        assert!(matches!(c, Ok(Campaign::Held(None))), "{c:?}");
        assert_eq!(t.expiry_hint, None);
        assert!(!t.held_by_other);
    }

    /// A row that shared holders hold is held, and named, but nobody's session-long
    /// signal: the follower waits by the notifications and the row's expiry.
    #[tokio::test(start_paused = true)]
    async fn a_shared_row_is_held_without_a_silent_wait() {
        let mut t = Tenancy::new("e", "me", Duration::from_secs(10));
        match t.judge(Some(row("r-1", SHARED, 5, 800))) {
            Ok(Campaign::Held(Some(h))) => assert_eq!(h.identity, "r-1"),
            other => panic!("shared: {other:?}"),
        }
        assert!(!t.held_by_other);
        assert!(t.held_by_readers);
        assert_eq!(
            t.expiry_hint,
            Some(Instant::now() + Duration::from_millis(802))
        );
        assert!(t.judge(Some(row("w", "x", 6, 800))).is_ok());
        assert!(t.held_by_other, "a writer's row is");
        assert!(!t.held_by_readers, "a writer's row is not the readers'");
        assert!(t.judge(Some(row("r-1", SHARED, 6, 0))).is_ok());
        assert!(!t.held_by_readers, "an expired shared row holds nobody");
    }

    /// A candidate that uses the queue writes its waiting row whenever its campaign
    /// left a row that is not its tenure's; never without the queue, nor without a row.
    #[test]
    fn refused_candidates_queue_up() {
        let mine = "t".repeat(32);
        for other in [row("r", SHARED, 3, 500), row("w", "x", 3, 0)] {
            assert!(enqueues(true, Some(&other), &mine), "{other:?}");
            assert!(!enqueues(false, Some(&other), &mine), "{other:?}");
        }
        assert!(!enqueues(true, Some(&row("me", &mine, 3, 500)), &mine));
        assert!(!enqueues(true, None, &mine));
    }

    /// A row kept by the queue: a free one is nobody's until the grace ends; a held
    /// one stays as it is.
    #[test]
    fn a_row_kept_by_the_queue_is_free_for_nobody_until_the_grace_ends() {
        let kept = kept_row(row("", "", 4, 0), Some(700));
        assert_eq!(
            (kept.holder.as_str(), kept.left_ms, kept.token),
            ("", 700, 4)
        );
        let kept = kept_row(row("b", "x", 4, 0), Some(700));
        assert_eq!((kept.holder.as_str(), kept.left_ms), ("", 700));
        let held = kept_row(row("b", "x", 4, 300), None);
        assert_eq!((held.holder.as_str(), held.left_ms), ("b", 300));
    }

    #[test]
    fn the_holders_listed_keep_their_mode_and_token() {
        let listed = vec![
            ("a".to_owned(), 4, true),
            ("b".to_owned(), -1, true),
            ("w".to_owned(), 9, false),
        ];
        let held = observed_holders(listed);
        assert_eq!(held.len(), 3);
        assert_eq!(
            (held[0].0.identity.as_str(), held[0].0.token),
            ("a", Some(4))
        );
        assert_eq!(held[0].1, Mode::Shared);
        assert_eq!(held[1].0.token, None);
        assert_eq!(held[2].1, Mode::Exclusive);
    }

    #[test]
    fn a_tenure_ends_with_a_fresh_id_and_the_floor_is_bound_as_it_is() {
        let mut t = Tenancy::new("e", "me", Duration::from_secs(10));
        let first = t.tenure.clone();
        t.holding = true;
        assert_eq!(t.rotate(), first);
        assert!(!t.holding);
        assert_ne!(t.tenure, first);
        assert_eq!(t.tenure.len(), 32);
        t.floor = 41;
        assert_eq!(t.floor_param(), 41);
        t.floor = u64::MAX;
        assert_eq!(t.floor_param(), i64::MAX);
        assert_eq!(t.ttl_ms(), 10_000);
    }

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

    #[test]
    fn the_live_candidates_are_the_present_ones_and_the_asker() {
        let registered = vec![
            ("c".to_owned(), true),
            ("a".to_owned(), false),
            ("b".to_owned(), true),
            ("me".to_owned(), false),
        ];
        let (live, gone) = split_live(registered, "me");
        assert_eq!(live, ["b", "c", "me"]);
        assert_eq!(gone, ["a"]);
        let (live, gone) = split_live(vec![("me".to_owned(), true)], "me");
        assert_eq!((live, gone), (vec!["me".to_owned()], Vec::<String>::new()));
    }
}
