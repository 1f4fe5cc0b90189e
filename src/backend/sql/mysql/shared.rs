//! `--mode` on MySQL/MariaDB: the statements of the shared holders' table (see
//! [`crate::backend::sql`]), judged by the server's `UTC_TIMESTAMP(6)`.
//!
//! InnoDB's `UPDATE` reads the latest committed version of the rows it changes and
//! locks them, whatever the statement's snapshot: every step that decides on the lease
//! row is one such `UPDATE` of it.
//!
//! - **shared take**: our live shared row adopted (the renew below); else the next
//!   token counted (a multi-table `UPDATE` of the counter joined with the lease row,
//!   only while the row is shared or expired and no reservation lasts), our shared
//!   row written, and the lease row joined (shared, its expiry
//!   raised, its version moved) by one conditional `UPDATE`; when that does not apply
//!   (a writer took the row meanwhile) our shared row is deleted again. Our row is
//!   written before the lease row is joined, so a shared holder releasing meanwhile
//!   sees it live and does not free the row.
//! - **shared renew**: one multi-table `UPDATE` of the lease row joined with our shared
//!   row, only while both are live and the lease row shared.
//! - **shared release**: our row (and every expired one) deleted; then the lease row's
//!   version and the count of other live shared rows read, and, when no other is live,
//!   the lease row freed by an `UPDATE` that applies only at that version.
//!
//! - **a waiting candidate's row** (the queue, judged before the take:
//!   `crate::backend::sql`) is keyed by its presence lock, and keeps its place while
//!   that lock is held (`IS_USED_LOCK`) or its expiry lies ahead; a waiting writer
//!   holds its turn lock ([`turn_lock`]) until its tenure ends.
//!
//! Shared holders take neither the election's named lock nor the presence lock (see
//! [`super::signal`]); each holds a named lock of its own, `<lock>:r<tenure>`, on its
//! statement connection, and a writer waiting for them waits, silently, for one of
//! those at a time ([`readers`]).

use super::super::{HOLDERS_SHOWN, QUARANTINE, SHARED};

const NOW: &str = "UTC_TIMESTAMP(6)";

/// Whether a waiting writer's row (`kind = 'w'`) still keeps shared candidates out:
/// until its expiry, and for as long as the session holding the lock its `tenure`
/// names lives (the writer's presence lock: it waits silently, writing nothing).
const WAITS: &str = "(expires_at > UTC_TIMESTAMP(6) OR IS_USED_LOCK(tenure) IS NOT NULL)";

/// [`WAITS`] for the waiting row `q` of a join.
const Q_WAITS: &str = "(q.expires_at > UTC_TIMESTAMP(6) OR IS_USED_LOCK(q.tenure) IS NOT NULL)";

/// The server's clock in µs: a waiting row's arrival.
const ARRIVAL: &str = "CAST(TIMESTAMPDIFF(MICROSECOND, '2000-01-01', UTC_TIMESTAMP(6)) AS SIGNED)";

/// The statements for the shared holders' table `s` beside lease table `t`,
/// counters `c` and candidates `p`.
pub(super) struct SharedStatements {
    pub create: String,
    pub mine: String,
    pub count: String,
    pub insert: String,
    pub join: String,
    pub drop: String,
    pub renew: String,
    pub version: String,
    pub sweep: String,
    pub free: String,
    pub read: String,
    pub mark: String,
    pub unmark: String,
    pub own: String,
    pub holders: String,
    pub readers: String,
    pub queue: String,
}

impl SharedStatements {
    pub(super) fn for_tables(t: &str, c: &str, p: &str, s: &str) -> SharedStatements {
        // election, identity: whether another's reservation lasts (the queue, a
        // waiting writer among it, is judged before: `super::super::queue`).
        let kept = format!(
            "EXISTS (SELECT 1 FROM {p} WHERE election = ? AND identity <> ? AND reserved_until > {NOW})"
        );
        SharedStatements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {s} (
                   election   VARCHAR(253) NOT NULL,
                   tenure     VARCHAR(64) NOT NULL,
                   holder     VARCHAR(253) NOT NULL,
                   kind       CHAR(1) NOT NULL,
                   token      BIGINT NOT NULL,
                   expires_at DATETIME(6) NOT NULL,
                   PRIMARY KEY (election, tenure)
                 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            // election, tenure: our live shared row's token.
            mine: format!(
                "SELECT token FROM {s}
                 WHERE election = ? AND tenure = ? AND kind = 'r' AND expires_at > {NOW}"
            ),
            // floor, election, election, identity: the next token,
            // counted before it is handed out, only when the lease row may be joined.
            count: format!(
                "UPDATE {c} AS k JOIN {t} AS l ON l.election = k.election
                 SET k.token = LAST_INSERT_ID(GREATEST(k.token, l.token, ?) + 1)
                 WHERE k.election = ? AND (l.tenure = '{SHARED}' OR l.expires_at <= {NOW})
                   AND NOT {kept}"
            ),
            // election, tenure, identity, token, ttl µs: our shared row.
            insert: format!(
                "INSERT INTO {s} (election, tenure, holder, kind, token, expires_at)
                 VALUES (?, ?, ?, 'r', ?, {NOW} + INTERVAL ? MICROSECOND)
                 ON DUPLICATE KEY UPDATE holder = VALUES(holder), kind = 'r',
                   token = VALUES(token), expires_at = VALUES(expires_at)"
            ),
            join: join(t),
            // election, tenure.
            drop: format!("DELETE FROM {s} WHERE election = ? AND tenure = ?"),
            // ttl µs, ttl µs, election, tenure: both rows, or neither.
            renew: format!(
                "UPDATE {t} AS l JOIN {s} AS r ON r.election = l.election
                 SET l.renewed_at = GREATEST({NOW}, l.renewed_at + INTERVAL 1 MICROSECOND),
                     l.expires_at = GREATEST(l.expires_at, {NOW} + INTERVAL ? MICROSECOND),
                     r.expires_at = {NOW} + INTERVAL ? MICROSECOND
                 WHERE l.election = ? AND l.tenure = '{SHARED}' AND l.expires_at > {NOW}
                   AND r.tenure = ? AND r.kind = 'r' AND r.expires_at > {NOW}"
            ),
            // election, tenure, election: the shared lease row's version, and how many
            // other shared rows are live.
            version: format!(
                "SELECT l.token, CAST(TIMESTAMPDIFF(MICROSECOND, '2000-01-01', l.renewed_at) AS SIGNED),
                        CAST((SELECT COUNT(*) FROM {s} WHERE election = ? AND kind = 'r'
                                AND tenure <> ? AND expires_at > {NOW}) AS SIGNED)
                 FROM {t} AS l WHERE l.election = ? AND l.tenure = '{SHARED}'"
            ),
            // election, tenure: our row and every expired one (a waiting writer's
            // stays while its session lives).
            sweep: format!(
                "DELETE FROM {s} WHERE election = ? AND (tenure = ?
                   OR (expires_at <= {NOW} AND NOT (kind IN ('w', 'q') AND {WAITS})))"
            ),
            // election, token, version: the lease row freed, at that version only.
            free: format!(
                "UPDATE {t} SET holder = '', expires_at = {NOW}, tenure = ''
                 WHERE election = ? AND tenure = '{SHARED}' AND token = ?
                   AND TIMESTAMPDIFF(MICROSECOND, '2000-01-01', renewed_at) = ?"
            ),
            read: read(t, p),
            // election, our presence lock (as its tenure), identity, kind (`w`, `q`),
            // ttl µs: our waiting row, its arrival (the token) kept.
            mark: format!(
                "INSERT INTO {s} (election, tenure, holder, kind, token, expires_at)
                 VALUES (?, ?, ?, ?, {ARRIVAL}, {NOW} + INTERVAL ? MICROSECOND)
                 ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)"
            ),
            // election, our presence lock.
            unmark: format!(
                "DELETE FROM {s} WHERE election = ? AND tenure = ? AND kind IN ('w', 'q')"
            ),
            queue: queue(t, s),
            // election, tenure.
            own: format!(
                "SELECT CAST(COUNT(*) AS SIGNED) FROM {s} AS r JOIN {t} AS l ON l.election = r.election
                 WHERE r.election = ? AND r.tenure = ? AND r.kind = 'r' AND l.tenure = '{SHARED}'"
            ),
            holders: holders(t, s),
            readers: readers(s),
        }
    }
}

/// Binds election, election: the writer that holds, or the live shared holders.
fn holders(t: &str, s: &str) -> String {
    format!(
        "(SELECT holder, token, CAST(0 AS SIGNED) FROM {t}
          WHERE election = ? AND expires_at > {NOW} AND holder <> ''
            AND tenure NOT IN ('{SHARED}', '{QUARANTINE}'))
         UNION ALL
         (SELECT holder, token, CAST(1 AS SIGNED) FROM {s}
          WHERE election = ? AND kind = 'r' AND expires_at > {NOW}
          ORDER BY token LIMIT {HOLDERS_SHOWN})"
    )
}

/// Binds token, identity, ttl µs, election: the lease row joined (assignments run left
/// to right: `tenure` last, `expires_at` after `acquired_at`).
fn join(t: &str) -> String {
    format!(
        "UPDATE {t} SET
           token = GREATEST(token, ?),
           holder = ?,
           acquired_at = IF(tenure = '{SHARED}' AND expires_at > {NOW}, acquired_at, {NOW}),
           renewed_at = GREATEST({NOW}, renewed_at + INTERVAL 1 MICROSECOND),
           expires_at = GREATEST(expires_at, {NOW} + INTERVAL ? MICROSECOND),
           tenure = '{SHARED}'
         WHERE election = ? AND (tenure = '{SHARED}' OR expires_at <= {NOW})"
    )
}

/// A waiting writer's wait for the shared holders (binds wait s, election's lock,
/// election, election's lock): one live shared holder's lock (`<lock>:r<tenure>`,
/// held on its statement connection while it holds), got once its session lets it
/// go (a release, a crash, or the server ending a frozen one's idle session) and let
/// go in the same statement: 1; 0 when the wait ran out; -1 when no live shared
/// holder holds its lock (the writer looks once, then waits by the row's expiry:
/// `super::rules::Absent`).
fn readers(s: &str) -> String {
    format!(
        "SELECT CAST(COALESCE((
           SELECT IF(GET_LOCK(x.n, ?) = 1, RELEASE_LOCK(x.n), 0) FROM (
             SELECT CONCAT(?, ':r', tenure) AS n FROM {s}
             WHERE election = ? AND kind = 'r' AND expires_at > {NOW}
               AND IS_USED_LOCK(CONCAT(?, ':r', tenure)) IS NOT NULL
             ORDER BY tenure LIMIT 1
           ) AS x
         ), -1) AS SIGNED)"
    )
}

/// Binds the reader lock twice: a shared holder's own lock, taken (kept) on its
/// statement connection.
const HOLD: &str =
    "SELECT CAST(IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, GET_LOCK(?, 0)) AS SIGNED)";

/// A waiting writer's turn lock (`key`: its presence lock, 38 characters, the key of
/// its waiting row): held on its statement connection from its first wait in the
/// queue until its tenure ends; a shared candidate queued behind it waits for it (see
/// `super::signal::wait_for_turn`). 40 characters.
pub(super) fn turn_lock(key: &str) -> String {
    format!("{key}:t")
}

/// A shared holder's own lock (see [`readers`]): 53 characters.
pub(super) fn reader_lock(lock: &str, tenure: &str) -> String {
    format!("{lock}:r{tenure}")
}

/// A shared candidate's read of the lease row (binds election, identity, election): as
/// the writers' read, with the time until another's reservation ends when that is
/// later, and whether it keeps it out.
fn read(t: &str, p: &str) -> String {
    format!(
        "SELECT IF(l.expires_at > {NOW}, l.holder, ''), l.tenure, l.token,
                CAST(GREATEST(0, CEILING(TIMESTAMPDIFF(MICROSECOND, {NOW},
                  GREATEST(l.expires_at, COALESCE(k.until, l.expires_at))) / 1000)) AS SIGNED),
                CAST(k.until IS NOT NULL AS SIGNED)
         FROM {t} AS l CROSS JOIN (
           SELECT MAX(until) AS until FROM (
             SELECT reserved_until AS until FROM {p}
             WHERE election = ? AND identity <> ? AND reserved_until > {NOW}
           ) AS w
         ) AS k
         WHERE l.election = ?"
    )
}

/// The queue's read (binds election): the lease row (as a refused take's read returns
/// it), how long it has been free (ms, negative while held), and each live waiting
/// row (presence, whether a writer's, arrival, ms since its expiry), NULL when there
/// is none.
fn queue(t: &str, s: &str) -> String {
    format!(
        "SELECT IF(l.expires_at > {NOW}, l.holder, ''), l.tenure, l.token,
                CAST(GREATEST(0, CEILING(TIMESTAMPDIFF(MICROSECOND, {NOW}, l.expires_at) / 1000)) AS SIGNED),
                CAST(FLOOR(TIMESTAMPDIFF(MICROSECOND, l.expires_at, {NOW}) / 1000) AS SIGNED),
                q.tenure, CAST(q.kind = 'w' AS SIGNED), q.token,
                CAST(FLOOR(TIMESTAMPDIFF(MICROSECOND, q.expires_at, {NOW}) / 1000) AS SIGNED)
         FROM {t} AS l LEFT JOIN {s} AS q ON q.election = l.election
           AND q.kind IN ('w', 'q') AND {Q_WAITS}
         WHERE l.election = ?"
    )
}

use sqlx::mysql::MySqlConnection;

use super::super::{LeaseRow, Session, Tenancy, Waiting, NO_ELECTION, NO_TENURE};
use super::{ours, Mysql};
use crate::backend::BackendError;

type Conn = Session<MySqlConnection>;
type Request<'q> = sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>;
type Scalar<'q, O> = sqlx::query::QueryScalar<'q, sqlx::MySql, O, sqlx::mysql::MySqlArguments>;

/// Takes the named lock `name` at once, or keeps it when this session holds it.
fn hold(name: &str) -> Scalar<'_, Option<i64>> {
    sqlx::query_scalar(HOLD).bind(name).bind(name)
}

/// Lets the named lock `name` go.
fn let_go<'q>(name: String) -> Request<'q> {
    sqlx::query("SELECT RELEASE_LOCK(?)").bind(name)
}

impl Mysql {
    /// The shared take (see the module doc).
    pub(super) async fn join(
        &mut self,
        session: &mut Conn,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        self.sight.left_to_another = false;
        if let Some(token) = self.own_share(session, t).await? {
            if self.renew_share(session, t).await? {
                self.hold_reader_lock(session, t).await;
                return Ok(Some(ours(t, token)));
            }
        }
        if let Some(token) = self.count_share(session, t).await? {
            if self.join_lease(session, t, token).await? {
                self.hold_reader_lock(session, t).await;
                return Ok(Some(ours(t, token)));
            }
        }
        let Some((row, kept)) = self.read_shared(session, t).await? else {
            let found = self.insert_missing(session, t).await?;
            let row = found.map(|(row, _)| row);
            self.sight.saw(row.as_ref(), false);
            return Ok(row);
        };
        self.sight.saw(Some(&row), kept);
        if super::rules::counter_gone(false, kept, &row, &t.tenure) {
            // Free, yet no token was counted: the counter's row is gone (see `take`).
            self.seed(session, t.floor_sent().sql_param()).await?;
        }
        Ok(Some(row))
    }

    /// Our live shared row's token.
    async fn own_share(
        &self,
        session: &mut Conn,
        t: &Tenancy,
    ) -> Result<Option<i64>, BackendError> {
        let request = self.statements.shared.mine(t);
        session.maybe("campaign", request).await
    }

    /// The next token, counted, when the lease row may be joined.
    async fn count_share(
        &self,
        session: &mut Conn,
        t: &Tenancy,
    ) -> Result<Option<i64>, BackendError> {
        let request = self.statements.shared.count(t);
        let done = session.execute("campaign", request).await?;
        super::transport::counted(session, &done).await
    }

    /// Our shared row, then the lease row joined; our row deleted again when the
    /// lease row could not be joined (a writer took it meanwhile).
    async fn join_lease(
        &self,
        session: &mut Conn,
        t: &Tenancy,
        token: i64,
    ) -> Result<bool, BackendError> {
        let request = self.statements.shared.insert(t, token);
        session.execute("campaign", request).await?;
        let request = self.statements.shared.join(t, token);
        let done = session.execute("campaign", request).await;
        if done?.rows_affected() == 1 {
            return Ok(true);
        }
        self.drop_share(session, &t.election, &t.tenure, "campaign")
            .await?;
        Ok(false)
    }

    async fn drop_share(
        &self,
        session: &mut Conn,
        election: &str,
        tenure: &str,
        op: &'static str,
    ) -> Result<(), BackendError> {
        let request = self.statements.shared.drop(election, tenure);
        session.execute(op, request).await.map(|_| ())
    }

    /// Both our shared row and the lease row a ttl ahead, or neither.
    pub(super) async fn renew_share(
        &self,
        session: &mut Conn,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let request = self.statements.shared.renew(t);
        let done = session.execute("renew", request).await;
        // Matched rows (the client asks for found rows): both, or none.
        Ok(done?.rows_affected() > 0)
    }

    /// The lease row for a shared candidate, and whether a waiting writer or another's
    /// reservation keeps it out.
    async fn read_shared(
        &self,
        session: &mut Conn,
        t: &Tenancy,
    ) -> Result<Option<(LeaseRow, bool)>, BackendError> {
        let op = "campaign";
        let row = session.row(op, self.statements.shared.read(t)).await;
        let Some(row) = row? else {
            return Ok(None);
        };
        let kept = sqlx::Row::try_get::<i64, _>(&row, 4).map_err(super::super::sql(op))? != 0;
        let row = LeaseRow::from_row(&row).map_err(super::super::sql(op))?;
        Ok(Some((row, kept)))
    }

    /// The shared release (see the module doc): our row (and every expired one)
    /// deleted first, then the version read with the others' rows, so that of two last
    /// shared holders leaving at once the later one sees the other's row gone.
    pub(super) async fn leave(
        &self,
        session: &mut Conn,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        let op = "release";
        let request = self.statements.shared.sweep(election, tenure);
        session.execute(op, request).await?;
        let request = self.statements.shared.version(election, tenure);
        let version = session.tuple(op, request).await;
        let Some((token, at)) = super::rules::frees(version?) else {
            return Ok(());
        };
        let request = self.statements.shared.free(election, (token, at));
        session.execute(op, request).await.map(|_| ())
    }

    /// A shared holder's release ([`Mysql::leave`]'s three statements) prepared ahead
    /// of the handover that needs it, for an election no row carries
    /// ([`NO_ELECTION`]): none of them matches a row.
    pub(super) async fn ready_leave(&self, session: &mut Conn) -> Result<(), BackendError> {
        let (op, none) = ("prepare", (NO_ELECTION, NO_TENURE));
        let shared = &self.statements.shared;
        session.execute(op, shared.sweep(none.0, none.1)).await?;
        session.tuple(op, shared.version(none.0, none.1)).await?;
        session
            .execute(op, shared.free(none.0, (0, 0)))
            .await
            .map(|_| ())
    }

    /// Our waiting row in the queue, written for a ttl (`on`) or deleted.
    pub(super) async fn mark(
        &mut self,
        session: &mut Conn,
        t: &Tenancy,
        on: bool,
    ) -> Result<(), BackendError> {
        // Keyed by our presence lock, which our signal connection holds while we
        // live: the row keeps its place for that long (see `WAITS`).
        let shared = &self.statements.shared;
        let request = if on {
            shared.mark(t, &self.candidate, self.reader)
        } else {
            shared.unmark(&t.election, &self.candidate)
        };
        session.execute("campaign", request).await?;
        if on && !self.reader {
            self.hold_turn(session).await;
        }
        Ok(())
    }

    /// Whether our shared row is there and the lease row still shared.
    pub(super) async fn still_shared(&mut self, t: &Tenancy) -> Result<bool, BackendError> {
        // On a connection of its own: a look cut off by the elector (at a renewal's
        // time) renews that connection, not the one that holds our lock.
        Ok(self
            .look
            .one("watch", self.statements.shared.own(t))
            .await?
            > 0)
    }

    /// While we hold shared: our own lock on the statement connection (idle-limited
    /// to the ttl, as a leader's), once per connection, so that a writer waiting for
    /// us wakes when our session lets it go (see `readers`). Best effort: without it
    /// the writer waits by the row's expiry.
    pub(super) async fn hold_reader_lock(&mut self, session: &mut Conn, t: &Tenancy) {
        self.limit_idle(session).await;
        let name = reader_lock(&self.lock, &t.tenure);
        let generation = session.generation();
        if self.reader_lock.as_ref() == Some(&(name.clone(), generation))
            && session.still(generation)
        {
            return;
        }
        let held = session.one("watch", hold(&name)).await;
        match held {
            Ok(Some(1)) => self.reader_lock = Some((name, session.generation())),
            Ok(_) => tracing::debug!("a shared holder's own lock is busy"),
            Err(e) => tracing::debug!(error = %e, "could not take a shared holder's own lock"),
        }
    }

    /// A waiting writer's turn lock (see [`turn_lock`]) on the statement connection,
    /// once per connection; a holder that queued calls it at each look at its own row,
    /// so a lock lost with a connection is taken again. Best effort: without it, the
    /// shared candidates behind it wait by the retry interval.
    pub(super) async fn hold_turn(&mut self, session: &mut Conn) {
        // Wanted, on no connection yet: the next call tries again.
        if !self.turn.asks(|g| session.still(g), true) {
            return;
        }
        let name = turn_lock(&self.candidate);
        let held = session.one("campaign", hold(&name)).await;
        let held = held.map(|h| h == Some(1));
        self.turn
            .answered(held, session.generation(), "our turn lock");
    }

    /// Lets our turn lock go, if we hold it: our tenure (or our wait) ended.
    pub(super) async fn let_turn_go(&mut self, session: &mut Conn) {
        if !self.turn.lets_go(|g| session.still(g)) {
            return;
        }
        let request = let_go(turn_lock(&self.candidate));
        let _ = session.execute("release", request).await;
    }

    /// Lets our shared holder's lock go, after the release (best effort: it goes
    /// with the session anyway).
    pub(super) async fn let_reader_lock_go(&mut self, session: &mut Conn) {
        let Some((name, generation)) = self.reader_lock.take() else {
            return;
        };
        if !session.still(generation) {
            return;
        }
        let _ = session.execute("release", let_go(name)).await;
    }

    /// The queue's read (see [`SqlDialect::waiting`](super::super::SqlDialect::waiting)).
    #[allow(clippy::type_complexity)]
    pub(super) async fn read_queue(
        &self,
        session: &mut Conn,
        election: &str,
    ) -> Result<Option<(LeaseRow, i64, Vec<Waiting>)>, BackendError> {
        let op = "campaign";
        let request = self.statements.shared.queue(election);
        let rows = session.rows(op, request).await?;
        super::super::queue_from_rows(&rows).map_err(super::super::sql(op))
    }

    /// Who holds now (identity, token, whether shared).
    pub(super) async fn list_holders(
        &self,
        session: &mut Conn,
        election: &str,
    ) -> Result<Vec<(String, i64, bool)>, BackendError> {
        let request = self.statements.shared.holders(election);
        let listed = session.tuples("campaign", request).await?;
        Ok(listed
            .into_iter()
            .map(|(holder, token, shared)| (holder, token, shared != 0))
            .collect())
    }
}
