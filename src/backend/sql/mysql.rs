//! `mysql` backend (MySQL 5.7+/8, MariaDB 10.3+): the lease row (see [`super`]),
//! judged by the server's `UTC_TIMESTAMP(6)` (UTC, so no time zone or DST shift can
//! move an expiry).
//!
//! - **take**: when the row is free for a new tenure, a multi-table `UPDATE` of the
//!   election's token counter joined with the lease row reserves the next token
//!   (`greatest(counter, row token, floor) + 1`, one assignment: a multi-table UPDATE
//!   runs its assignments in no set order). Then one conditional `UPDATE … WHERE
//!   election = ? AND (tenure = ? OR (reserved AND expires_at <= UTC_TIMESTAMP(6)))`;
//!   its assignments run left to right, so every one reads the old `tenure` (assigned
//!   last), and the token comes back in the same answer through
//!   `LAST_INSERT_ID(expr)`. A candidate that did not win reads the row to learn the
//!   holder; a missing row is inserted (`INSERT IGNORE`) as a quarantine row when the
//!   counter shows tokens were handed out, else as a free one. Both the token's
//!   reservation and the take also need that no other candidate's switchover
//!   reservation lasts (see [`super`]); the read then shows the free row as nobody's,
//!   with the reservation's time left, and says that it is left to another.
//! - **renew**: `UPDATE … WHERE election = ? AND tenure = ?`.
//! - **release**: the same compare, emptying the row and expiring it now.
//! - **switchover**: the candidates' rows are an upsert each; the reservation is a
//!   multi-table `UPDATE` of `to`'s row joined with the lease row (only while its
//!   tenure is ours), then our own row is listed alive and unreserved, then the
//!   release. The new leader drops its used-up reservation at its first look at its
//!   own row, right after the take.
//!
//! **Wake-ups** (MySQL has no notifications): a MySQL/MariaDB named lock,
//! `GET_LOCK`, is used purely as a signal, on a connection of its own; the row alone
//! decides who leads. The leader holds the lock for its whole tenure. Followers wait
//! for it in `GET_LOCK(name, 20 ttl)`, queued only while the row's tenure is the one
//! their last campaign saw (one statement: a take they did not see wakes them at
//! once), and send nothing meanwhile: a follower queued behind a live holder answers
//! `Quiet` at the retry interval. When the leader releases (after its row is free) or
//! its session ends (a killed process's connection closes; a frozen one's sessions
//! are ended by the server, whose idle limit `wait_timeout` is the ttl on the
//! leader's connections, which ping well within it), the first follower in the
//! lock's queue gets it, campaigns at once while holding it, and keeps it if it
//! wins. A new leader that got the lock as a follower lets it go once and queues
//! again (a *roll call*): each follower queued behind it gets the lock in turn,
//! looks (it learns of the new tenure), and hands it on, so every follower wakes
//! once per new tenure and no follower keeps naming the old leader. A follower that
//! got the lock and found the row still held hands it on and queues again when
//! the holder's session lives (the leader's *presence lock* `<name>:p`, which it
//! holds on its statement connection), and keeps it for the row's expiry when it
//! does not (a crash); see [`signal`]. A follower that got the lock and found the
//! free row left to another candidate (a switchover) hands the lock on in any case,
//! so that the named candidate, further back in the queue, wakes and takes the row
//! holding it. A follower that is not queued (its lock connection is being renewed,
//! or it holds the lock) wakes at the observed holder's expiry and at the retry
//! interval. Named locks are server-wide: the name is `lk:` and a 64-bit
//! FNV-1a hash (hex) of `<database>/<table>/<election>`.
//!
//! **Shared and exclusive** (`--mode`): see [`shared`]; a shared holder takes neither
//! the named lock nor the presence lock, but a named lock of its own, for which a
//! writer kept out by shared holders waits on its signal connection (see [`signal`]).
//!
//! Named locks need a session: through a proxy that multiplexes statements over
//! shared connections (ProxySQL pins a connection that takes a named lock; a
//! transaction-mode pooler would not) the wake-ups are lost, and a silent follower
//! would learn of a new leader only at its 20-ttl backstop: connect directly or
//! through a proxy that pins the session. The lease statements keep no session
//! state and stay correct there.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::MySqlConnection;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout, Instant};

use super::{
    LeaseRow, Session, SqlBackend, SqlConnect, SqlDialect, SqlSettings, Table, TableError, Tenancy,
    Waiting, QUARANTINE,
};
use crate::backend::{BackendError, Candidacy, Wake};

mod shared;
mod signal;
use signal::{SignalParts, Want};

struct Statements {
    /// The candidates' table's.
    cands: CandidateStatements,
    exists: String,
    create: String,
    create_counter: String,
    seed: String,
    reserve: String,
    take: String,
    raise: String,
    counted: String,
    read: String,
    insert: String,
    renew: String,
    release: String,
    own: String,
    young: String,
    queue: String,
    /// The shared holders' table's (`--mode`).
    shared: shared::SharedStatements,
}

impl Statements {
    fn for_tables(t: &str, c: &str, p: &str, s: &str) -> Statements {
        // election, identity: whether another candidate's reservation lasts.
        let reserved_for_another = format!(
            "EXISTS (SELECT 1 FROM {p} WHERE election = ? AND identity <> ? AND reserved_until > UTC_TIMESTAMP(6))"
        );
        Statements {
            shared: shared::SharedStatements::for_tables(t, c, p, s),
            exists: "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.tables
                     WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?"
                .to_owned(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (
                   election    VARCHAR(253) NOT NULL PRIMARY KEY,
                   holder      VARCHAR(253) NOT NULL,
                   tenure      VARCHAR(64) NOT NULL,
                   token       BIGINT NOT NULL,
                   acquired_at DATETIME(6) NOT NULL,
                   renewed_at  DATETIME(6) NOT NULL,
                   expires_at  DATETIME(6) NOT NULL
                 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            create_counter: format!(
                "CREATE TABLE IF NOT EXISTS {c} (
                   election VARCHAR(253) NOT NULL PRIMARY KEY,
                   token    BIGINT NOT NULL
                 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            cands: CandidateStatements::for_tables(t, p),
            // election, floor, election: the counter row, at least as high as the
            // lease row's token and the floor.
            seed: format!(
                "INSERT INTO {c} (election, token)
                 SELECT ?, GREATEST(COALESCE(MAX(token), 0), ?) FROM {t} WHERE election = ?
                 ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))"
            ),
            // floor, election, tenure, election, identity: the next token, counted
            // before it is handed out, and only when the lease row is free for a new
            // tenure of ours (not left to another candidate; one assignment: a
            // multi-table UPDATE runs its assignments in no set order).
            reserve: format!(
                "UPDATE {c} AS k JOIN {t} AS l ON l.election = k.election
                 SET k.token = LAST_INSERT_ID(GREATEST(k.token, l.token, ?) + 1)
                 WHERE k.election = ? AND l.tenure <> ? AND l.expires_at <= UTC_TIMESTAMP(6)
                   AND NOT {reserved_for_another}"
            ),
            // tenure, reserved, tenure, identity, ttl µs, tenure, election, tenure,
            // reserved, election, identity: ours again (a lost answer), or free, not
            // left to another candidate, and a token reserved.
            take: format!(
                "UPDATE {t} SET
                   token = LAST_INSERT_ID(IF(tenure = ?, token, GREATEST(token + 1, ?))),
                   acquired_at = IF(tenure = ?, acquired_at, UTC_TIMESTAMP(6)),
                   holder = ?,
                   renewed_at = UTC_TIMESTAMP(6),
                   expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
                   tenure = ?
                 WHERE election = ? AND (tenure = ? OR (? > 0 AND expires_at <= UTC_TIMESTAMP(6)
                   AND NOT {reserved_for_another}))"
            ),
            // token, election: the counter catches up with a row whose token was above it.
            raise: format!("UPDATE {c} SET token = GREATEST(token, ?) WHERE election = ?"),
            counted: format!("SELECT token FROM {c} WHERE election = ?"),
            read: read(t, p),
            // election, tenure, token, ttl µs: a row nobody holds.
            insert: format!(
                "INSERT IGNORE INTO {t} (election, holder, tenure, token, acquired_at, renewed_at, expires_at)
                 VALUES (?, '', ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)"
            ),
            // ttl µs, election, tenure.
            renew: format!(
                "UPDATE {t} SET renewed_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
                 WHERE election = ? AND tenure = ?"
            ),
            release: format!(
                "UPDATE {t} SET holder = '', tenure = '', expires_at = UTC_TIMESTAMP(6)
                 WHERE election = ? AND tenure = ?"
            ),
            // tenure, presence, presence, lock, election: the row's tenure; the
            // presence lock taken (kept) when the row is ours; who holds the named lock.
            own: format!(
                "SELECT tenure,
                        CAST(IF(tenure = ?, IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, GET_LOCK(?, 0)), 0) AS SIGNED),
                        CAST(IS_USED_LOCK(?) AS SIGNED)
                 FROM {t} WHERE election = ?"
            ),
            young: young(t),
            // election, tenure, lock, wait: a follower's wait for the named lock,
            // queued only while the row's tenure is the one it saw (see `signal`).
            queue: format!(
                "SELECT CAST(IF(COALESCE((SELECT tenure FROM {t} WHERE election = ?), '') = ?,
                                GET_LOCK(?, ?), -1) AS SIGNED)"
            ),
        }
    }
}

/// Binds presence, election, tenure: whether the session of the tenure's leader lives
/// (see `signal`).
fn young(t: &str) -> String {
    format!(
        "SELECT CAST(IS_USED_LOCK(?) IS NOT NULL OR EXISTS (
           SELECT 1 FROM {t} WHERE election = ? AND tenure = ? AND holder <> ''
             AND acquired_at > UTC_TIMESTAMP(6) - INTERVAL {} MICROSECOND) AS SIGNED)",
        signal::YOUNG_TENURE.as_micros()
    )
}

/// The statements of the candidates' table `p` (beside the lease table `t`).
struct CandidateStatements {
    create: String,
    list: String,
    live: String,
    present: String,
    reserve_to: String,
    mine: String,
    clear_mine: String,
    prune: String,
}

impl CandidateStatements {
    fn for_tables(t: &str, p: &str) -> CandidateStatements {
        CandidateStatements {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {p} (
                   election       VARCHAR(253) NOT NULL,
                   identity       VARCHAR(253) NOT NULL,
                   alive_until    DATETIME(6) NOT NULL,
                   reserved_until DATETIME(6) NULL,
                   PRIMARY KEY (election, identity)
                 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            // election, identity, alive µs: our own row, alive (its reservation stays).
            list: format!(
                "INSERT INTO {p} (election, identity, alive_until, reserved_until)
                 VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULL)
                 ON DUPLICATE KEY UPDATE alive_until = VALUES(alive_until)"
            ),
            live: format!("SELECT identity FROM {p} WHERE election = ? ORDER BY identity"),
            // presence lock: whether that candidate's session lives.
            present: "SELECT CAST(IS_USED_LOCK(?) IS NOT NULL AS SIGNED)".to_owned(),
            // ttl µs, election, to, `to`'s presence lock, tenure: `to`'s row reserved
            // when its session lives and the lease row is ours (one matched row).
            reserve_to: format!(
                "UPDATE {p} AS r JOIN {t} AS l ON l.election = r.election
                 SET r.reserved_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
                 WHERE r.election = ? AND r.identity = ? AND IS_USED_LOCK(?) IS NOT NULL
                   AND l.tenure = ?"
            ),
            // alive µs, election, identity: our own row alive, without a reservation.
            mine: format!(
                "UPDATE {p} SET reserved_until = NULL,
                   alive_until = GREATEST(alive_until, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
                 WHERE election = ? AND identity = ?"
            ),
            // election, identity: a reservation of ours, used up by our take.
            clear_mine: format!(
                "UPDATE {p} SET reserved_until = NULL
                 WHERE election = ? AND identity = ? AND reserved_until IS NOT NULL"
            ),
            // election, identity (whose session is gone).
            prune: format!(
                "DELETE FROM {p} WHERE election = ? AND identity = ?
                   AND alive_until < UTC_TIMESTAMP(6)
                   AND (reserved_until IS NULL OR reserved_until < UTC_TIMESTAMP(6))"
            ),
        }
    }
}

/// The read of the election's row in lease table `t`, with candidates' table `p`:
/// binds election, identity, election; the row, and a free one left to another
/// candidate shown as nobody's, with the reservation's time left, saying so.
fn read(t: &str, p: &str) -> String {
    format!(
        "SELECT IF(l.expires_at > UTC_TIMESTAMP(6), l.holder, ''), l.tenure, l.token,
                CAST(GREATEST(0, CEILING(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6),
                  GREATEST(l.expires_at, COALESCE(r.until, l.expires_at))) / 1000)) AS SIGNED),
                CAST(r.until IS NOT NULL AS SIGNED)
         FROM {t} AS l CROSS JOIN (
           SELECT MAX(reserved_until) AS until FROM {p}
           WHERE election = ? AND identity <> ? AND reserved_until > UTC_TIMESTAMP(6)
         ) AS r
         WHERE l.election = ?"
    )
}

/// The `mysql` backend (MySQL and MariaDB).
pub type MysqlBackend = SqlBackend<Mysql>;

/// MySQL's side of the lease row: its statements and its signal connection.
pub struct Mysql {
    table: Table,
    /// The shared holders' table beside it, when this candidate has `--mode`.
    shared: Option<Table>,
    /// Whether this candidate holds shared (`--mode shared`): it never takes the
    /// election's named lock nor the presence lock.
    reader: bool,
    election: String,
    user: String,
    statements: Statements,
    table_ready: bool,
    /// Whether the shared holders' table is there: this candidate takes its turn in
    /// the waiting candidates' queue (see [`super::queue`]).
    queue: bool,
    /// A waiting writer's turn lock ([`shared::turn_lock`]): the statement
    /// connection that holds it.
    turn: Option<u64>,
    /// A shared candidate kept out by the queue behind a waiting writer, the row
    /// held: that writer's turn lock, which it waits for.
    behind: Option<String>,
    /// When the waiting writer that `behind` names goes stale (it looks then).
    stale_at: Option<Instant>,
    /// The election's named lock, and the leader's presence lock.
    lock: String,
    presence: String,
    /// This candidate's presence lock (held by its signal connection): the key of
    /// its waiting writer's row.
    candidate: String,
    /// Our shared holder's lock, and the statement connection that holds it.
    reader_lock: Option<(String, u64)>,
    /// A shared holder's looks at its own row, on a connection of their own.
    look: Session<MySqlConnection>,
    want: watch::Sender<Want>,
    /// Whether the signal connection holds the named lock now.
    held: watch::Receiver<bool>,
    /// Woken when a follower's signal connection got the lock.
    woke: Arc<Notify>,
    /// Asks the signal connection to look whether the lock is still its own.
    check: Arc<Notify>,
    /// The signal connection's id at the server (0 while there is none).
    signal_id: Arc<AtomicU64>,
    /// Whether the signal connection is queued for the lock as a follower.
    queued: watch::Receiver<bool>,
    /// The server's idle limit on a leader's sessions (`wait_timeout`, whole seconds:
    /// the ttl, rounded up), and the statement connection that has it.
    idle_limit: u64,
    idle_limited: Option<u64>,
    /// Set by the signal connection at every (re)connect, once it holds this
    /// candidate's presence lock.
    renewed: Arc<AtomicBool>,
    /// The tenure of the row as the last campaign saw it, and as the signal
    /// connection queues with it.
    seen_tenure: String,
    seen: watch::Sender<String>,
    /// Whether the last campaign found the row free but left to another candidate
    /// (a switchover's reservation).
    left_to_another: bool,
    /// Our reservation, if any, is used up: drop it at the leader's first look.
    clear_mine: bool,
    /// The leader's next look at its own row is now (right after the take: it takes
    /// the presence lock).
    look_now: bool,
    op_timeout: Duration,
    signal: JoinHandle<()>,
}

impl MysqlBackend {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    pub fn new(settings: &SqlSettings, lease: &Candidacy) -> Result<Self, BackendError> {
        let SqlConnect::Mysql(options) = &settings.connect else {
            return Err(BackendError::Store {
                op: "connect",
                message: "not MySQL settings".to_owned(),
            });
        };
        let session = Session::new(options.clone());
        let database = settings
            .table
            .schema
            .clone()
            .or_else(|| options.get_database().map(str::to_owned))
            .unwrap_or_default();
        let (want, want_rx) = watch::channel(Want::Rest);
        let (held_tx, held) = watch::channel(false);
        let (queued_tx, queued) = watch::channel(false);
        let (seen, seen_rx) = watch::channel(String::new());
        let idle_limit = idle_limit(lease.timing.ttl);
        let woke = Arc::new(Notify::new());
        let signal_id = Arc::new(AtomicU64::new(0));
        let timing = lease.timing;
        let lock = lock_name(&database, &settings.table.name, lease.election);
        let presence = format!("{lock}:p");
        let renewed = Arc::new(AtomicBool::new(false));
        let statements = Statements::for_tables(
            &settings.table.quoted('`'),
            &settings.table.counter().quoted('`'),
            &settings.table.candidates().quoted('`'),
            &settings.table.shared().quoted('`'),
        );
        let candidate = candidate_lock(&lock, lease.identity);
        let signal = tokio::spawn(signal::signal(SignalParts {
            options: options.clone(),
            name: lock.clone(),
            presence: presence.clone(),
            candidate: candidate.clone(),
            readers: statements.shared.readers.clone(),
            renewed: renewed.clone(),
            young: statements.young.clone(),
            queue: statements.queue.clone(),
            seen: seen_rx,
            election: lease.election.to_owned(),
            want: want_rx,
            held: held_tx,
            woke: woke.clone(),
            check: session.reconnected.clone(),
            conn_id: signal_id.clone(),
            queued: queued_tx,
            op_timeout: timing.backend_timeout,
            follow_wait: timing.retry_interval,
            backstop: timing.ttl * super::BACKSTOP_TTLS,
            queue_backstop: timing.ttl * super::QUEUE_TTLS,
            check_every: timing.renew_interval,
            idle_limit,
        }));
        let dialect = Mysql {
            shared: lease.mode.flag().map(|_| settings.table.shared()),
            reader: lease.mode == crate::backend::LockMode::Shared,
            statements,
            election: lease.election.to_owned(),
            table: settings.table.clone(),
            user: options.get_username().to_owned(),
            table_ready: false,
            queue: false,
            turn: None,
            behind: None,
            stale_at: None,
            lock,
            presence,
            candidate,
            reader_lock: None,
            look: Session::new(options.clone()),
            want,
            held,
            woke,
            check: session.reconnected.clone(),
            signal_id,
            queued,
            idle_limit,
            idle_limited: None,
            renewed,
            seen_tenure: String::new(),
            seen,
            left_to_another: false,
            clear_mine: false,
            look_now: false,
            op_timeout: timing.backend_timeout,
            signal,
        };
        Ok(SqlBackend::with_dialect(session, lease, dialect))
    }
}

/// The server's idle limit for a leader's sessions: the ttl in whole seconds, rounded
/// up (`wait_timeout` counts seconds, 1 at least).
fn idle_limit(ttl: Duration) -> u64 {
    let whole = ttl.as_secs();
    (if ttl.subsec_nanos() > 0 {
        whole + 1
    } else {
        whole
    })
    .max(1)
}

fn ttl_us(t: &Tenancy) -> i64 {
    micros(t.ttl)
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The row as this candidate just took it (the server passed the token on).
fn ours(t: &Tenancy, token: i64) -> LeaseRow {
    LeaseRow {
        holder: t.identity.clone(),
        tenure: t.tenure.clone(),
        token,
        left_ms: t.ttl_ms(),
    }
}

impl Mysql {
    /// The row, and whether it is free but left to another candidate.
    async fn read(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<(LeaseRow, bool)>, BackendError> {
        let op = "campaign";
        let conn = session.begin(op).await?;
        let row = sqlx::query(&self.statements.read)
            .bind(&t.election)
            .bind(&t.identity)
            .bind(&t.election)
            .fetch_optional(&mut *conn)
            .await;
        let row = session.end(op, row)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let reserved = sqlx::Row::try_get::<i64, _>(&row, 4).map_err(super::sql(op))? != 0;
        let row = LeaseRow::from_row(&row).map_err(super::sql(op))?;
        Ok(Some((row, reserved)))
    }

    /// The next token, counted before anyone holds it, when the row is free for a
    /// new tenure of ours; `None` when it is not (held, ours already, missing) or the
    /// counter's row is missing.
    async fn count_token(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<i64>, BackendError> {
        let conn = session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.reserve)
            .bind(t.floor_param())
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(&t.election)
            .bind(&t.identity)
            .execute(&mut *conn)
            .await;
        let done = session.end("campaign", done)?;
        counted(session, &done).await
    }

    /// The conditional take (ours already, or free with a `reserved` token); the
    /// tenure's token when it applied (0 when the server did not pass it on), `None`
    /// when it did not.
    async fn update_take(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
        reserved: i64,
    ) -> Result<Option<i64>, BackendError> {
        let conn = session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.take)
            .bind(&t.tenure)
            .bind(reserved)
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(ttl_us(t))
            .bind(&t.tenure)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(reserved)
            .bind(&t.election)
            .bind(&t.identity)
            .execute(&mut *conn)
            .await;
        let done = session.end("campaign", done)?;
        Ok((done.rows_affected() == 1).then(|| i64::try_from(done.last_insert_id()).unwrap_or(0)))
    }

    /// The counter's row, at least as high as the lease row's token and `floor`.
    async fn seed(
        &self,
        session: &mut Session<MySqlConnection>,
        floor: i64,
    ) -> Result<(), BackendError> {
        let conn = session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.seed)
            .bind(&self.election)
            .bind(floor)
            .bind(&self.election)
            .execute(&mut *conn)
            .await;
        session.end("campaign", done).map(|_| ())
    }

    /// The counter up to `token`, a token handed out above it.
    async fn raise(
        &self,
        session: &mut Session<MySqlConnection>,
        token: i64,
    ) -> Result<(), BackendError> {
        let conn = session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.raise)
            .bind(token)
            .bind(&self.election)
            .execute(&mut *conn)
            .await;
        session.end("campaign", done).map(|_| ())
    }

    /// No row: inserts one that nobody holds. When tokens were handed out before (the
    /// counter, seeded again if it went too, or the floor says so), it is a quarantine
    /// row that expires a ttl later, so that a leader still claiming on the deleted row
    /// runs out first; otherwise a free one.
    async fn insert_missing(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<(LeaseRow, bool)>, BackendError> {
        self.seed(session, t.floor_param()).await?;
        let conn = session.begin("campaign").await?;
        let counted = sqlx::query_scalar::<_, i64>(&self.statements.counted)
            .bind(&t.election)
            .fetch_optional(&mut *conn)
            .await;
        let counted = session.end("campaign", counted)?.unwrap_or(0);
        let quarantine = counted > 0;
        let (tenure, ttl) = if quarantine {
            (QUARANTINE, ttl_us(t))
        } else {
            ("", 0)
        };
        let conn = session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.insert)
            .bind(&t.election)
            .bind(tenure)
            .bind(counted)
            .bind(ttl)
            .execute(&mut *conn)
            .await;
        let inserted = session.end("campaign", done)?.rows_affected() == 1;
        if quarantine && inserted {
            tracing::warn!(
                token = counted,
                "the lease row was gone although tokens were handed out; fenced it for one ttl"
            );
        }
        self.read(session, t).await
    }

    /// The leader's statement connection ends when it idles for a ttl, like its lock
    /// connection: a frozen leader's presence lock goes with its named lock, so that
    /// the follower that gets the lock keeps it for the row's expiry.
    async fn limit_idle(&mut self, session: &mut Session<MySqlConnection>) {
        if self.idle_limited == Some(session.generation()) {
            return;
        }
        let Ok(conn) = session.begin("watch").await else {
            return;
        };
        let set = format!("SET SESSION wait_timeout = {}", self.idle_limit);
        let done = sqlx::query(&set).execute(&mut *conn).await;
        match session.end("watch", done) {
            Ok(_) => self.idle_limited = Some(session.generation()),
            Err(e) => {
                tracing::debug!(error = %e, "could not limit the idle time of the leader's session")
            }
        }
    }

    /// The server's default idle limit again, on a follower's statement connection.
    async fn lift_idle_limit(&mut self, session: &mut Session<MySqlConnection>) {
        let Some(generation) = self.idle_limited.take() else {
            return;
        };
        if !session.still(generation) {
            return;
        }
        let Ok(conn) = session.begin("release").await else {
            return;
        };
        let done = sqlx::query("SET SESSION wait_timeout = DEFAULT")
            .execute(&mut *conn)
            .await;
        if let Err(e) = session.end("release", done) {
            tracing::debug!(error = %e, "could not lift the idle limit of the statement connection");
        }
    }

    /// Drops our reservation, used up by our take (best effort: left over, it would
    /// only keep the others from the row for the rest of its ttl after our release).
    async fn drop_reservation(&self, session: &mut Session<MySqlConnection>, t: &Tenancy) {
        let Ok(conn) = session.begin("watch").await else {
            return;
        };
        let done = sqlx::query(&self.statements.cands.clear_mine)
            .bind(&t.election)
            .bind(&t.identity)
            .execute(&mut *conn)
            .await;
        if let Err(e) = session.end("watch", done) {
            tracing::debug!(error = %e, "could not drop our used-up reservation");
        }
    }

    /// Whether `table` is there.
    async fn found(
        &self,
        session: &mut Session<MySqlConnection>,
        table: &Table,
    ) -> Result<bool, BackendError> {
        let conn = session.begin("prepare").await?;
        let found = sqlx::query_scalar::<_, i64>(&self.statements.exists)
            .bind(table.schema.as_deref())
            .bind(&table.name)
            .fetch_one(&mut *conn)
            .await;
        Ok(session.end("prepare", found)? > 0)
    }

    /// Creates `table` with `create` if it is missing; a user who may not is bad input.
    async fn ensure(
        &self,
        session: &mut Session<MySqlConnection>,
        table: &Table,
        create: &str,
    ) -> Result<(), TableError> {
        if self.found(session, table).await? {
            return Ok(());
        }
        let conn = session.begin("prepare").await?;
        let created = sqlx::query(create).execute(&mut *conn).await;
        match created {
            Err(e) if is_denied(&e) => {
                session.end("prepare", Ok(()))?;
                Err(TableError::NotAllowed {
                    table: table.display(),
                    user: self.user.clone(),
                    detail: e
                        .as_database_error()
                        .map_or_else(|| e.to_string(), |d| d.message().to_owned()),
                })
            }
            other => {
                session.end("prepare", other)?;
                tracing::info!(table = %table.display(), "created the table");
                Ok(())
            }
        }
    }
}

impl Drop for Mysql {
    fn drop(&mut self) {
        self.signal.abort();
    }
}

/// Access denied: `ER_TABLEACCESS_DENIED_ERROR`, `ER_DBACCESS_DENIED_ERROR`,
/// `ER_ACCESS_DENIED_ERROR`, `ER_SPECIFIC_ACCESS_DENIED_ERROR`.
fn is_denied(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|d| matches!(d.number(), 1142 | 1044 | 1045 | 1227))
}

/// The named lock of one election: short and fixed-length (MySQL allows 64
/// characters), the same in every leasekeeper version.
pub fn lock_name(database: &str, table: &str, election: &str) -> String {
    super::presence_name(&[database, table, election])
}

/// The presence lock of candidate `identity` in the election whose lock is `lock`:
/// held by its signal connection while that session lives (38 characters).
pub fn candidate_lock(lock: &str, identity: &str) -> String {
    let hash = super::presence_name(&[identity]);
    format!("{lock}:c{}", &hash[3..])
}

impl SqlDialect for Mysql {
    type Conn = MySqlConnection;
    const NAME: &'static str = "mysql";

    async fn prepare(&mut self, session: &mut Session<MySqlConnection>) -> Result<(), TableError> {
        if self.table_ready {
            return Ok(());
        }
        self.ensure(session, &self.table, &self.statements.create)
            .await?;
        self.ensure(
            session,
            &self.table.counter(),
            &self.statements.create_counter,
        )
        .await?;
        self.ensure(
            session,
            &self.table.candidates(),
            &self.statements.cands.create,
        )
        .await?;
        if let Some(shared) = &self.shared {
            self.ensure(session, shared, &self.statements.shared.create)
                .await?;
            self.queue = true;
        } else {
            // An election's candidate takes its turn too once `--mode` candidates
            // created the table.
            self.queue = self.found(session, &self.table.shared()).await?;
        }
        // The counter's row, at least as high as the lease row (a table from before
        // the counter, a counter row deleted while the lease row stayed).
        self.seed(session, 0).await?;
        self.table_ready = true;
        Ok(())
    }

    async fn take(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        // Left over from a tenure that ended without a release (best effort).
        self.lift_idle_limit(session).await;
        let reserved = self.count_token(session, t).await?;
        self.left_to_another = false;
        match self.update_take(session, t, reserved.unwrap_or(0)).await? {
            Some(token) if token > 0 => {
                if reserved.is_some_and(|r| token > r) {
                    // The row's token was above the counter (tampered with meanwhile).
                    self.raise(session, token).await?;
                }
                self.clear_mine |= reserved.is_some();
                return Ok(Some(ours(t, token)));
            }
            // No token in the answer (a server that does not pass it on): look.
            Some(_) => {
                self.clear_mine |= reserved.is_some();
                return Ok(self.read(session, t).await?.map(|(row, _)| row));
            }
            None => {}
        }
        let Some((row, left_to_another)) = self.read(session, t).await? else {
            let found = self.insert_missing(session, t).await?;
            self.left_to_another = found.as_ref().is_some_and(|(_, l)| *l);
            let row = found.map(|(row, _)| row);
            self.seen_tenure = row.as_ref().map(|r| r.tenure.clone()).unwrap_or_default();
            return Ok(row);
        };
        self.seen_tenure.clone_from(&row.tenure);
        self.left_to_another = left_to_another;
        if reserved.is_none() && row.left_ms == 0 && row.tenure != t.tenure {
            // Free, yet no token was counted: the counter's row is gone. Back with
            // it, for the next campaign (at once: the row shows no expiry to wait for).
            self.seed(session, t.floor_param()).await?;
        }
        Ok(Some(row))
    }

    async fn renew(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let conn = session.begin("renew").await?;
        let done = sqlx::query(&self.statements.renew)
            .bind(ttl_us(t))
            .bind(&t.election)
            .bind(&t.tenure)
            .execute(&mut *conn)
            .await;
        Ok(session.end("renew", done)?.rows_affected() == 1)
    }

    async fn release(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        let conn = session.begin("release").await?;
        let done = sqlx::query(&self.statements.release)
            .bind(election)
            .bind(tenure)
            .execute(&mut *conn)
            .await;
        session.end("release", done).map(|_| ())
    }

    async fn list(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
        alive: Duration,
    ) -> Result<(), BackendError> {
        let conn = session.begin("candidates").await?;
        let done = sqlx::query(&self.statements.cands.list)
            .bind(&t.election)
            .bind(&t.identity)
            .bind(micros(alive))
            .execute(&mut *conn)
            .await;
        session.end("candidates", done).map(|_| ())
    }

    async fn live(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
    ) -> Result<Vec<(String, bool)>, BackendError> {
        let conn = session.begin("candidates").await?;
        let registered = sqlx::query_scalar::<_, String>(&self.statements.cands.live)
            .bind(election)
            .fetch_all(&mut *conn)
            .await;
        let registered = session.end("candidates", registered)?;
        let mut live = Vec::with_capacity(registered.len());
        for id in registered {
            let conn = session.begin("candidates").await?;
            let up = sqlx::query_scalar::<_, i64>(&self.statements.cands.present)
                .bind(candidate_lock(&self.lock, &id))
                .fetch_one(&mut *conn)
                .await;
            let up = session.end("candidates", up)? == 1;
            live.push((id, up));
        }
        Ok(live)
    }

    fn presence_renewed(&mut self) -> bool {
        self.renewed.swap(false, Ordering::SeqCst)
    }

    async fn reserve(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
        to: &str,
        alive: Duration,
    ) -> Result<bool, BackendError> {
        let conn = session.begin("release").await?;
        let done = sqlx::query(&self.statements.cands.reserve_to)
            .bind(ttl_us(t))
            .bind(&t.election)
            .bind(to)
            .bind(candidate_lock(&self.lock, to))
            .bind(&t.tenure)
            .execute(&mut *conn)
            .await;
        // Matched rows (the client asks for found rows, not changed ones).
        let reserved = session.end("release", done)?.rows_affected() > 0;
        if to != t.identity {
            // Best effort: we campaign again soon, and list ourselves then.
            let conn = session.begin("release").await?;
            let done = sqlx::query(&self.statements.cands.mine)
                .bind(micros(alive))
                .bind(&t.election)
                .bind(&t.identity)
                .execute(&mut *conn)
                .await;
            if let Err(e) = session.end("release", done) {
                tracing::debug!(error = %e, "could not list ourselves alive at the switchover");
            }
        }
        Ok(reserved)
    }

    async fn prune(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
        identity: &str,
    ) -> Result<(), BackendError> {
        let conn = session.begin("candidates").await?;
        let done = sqlx::query(&self.statements.cands.prune)
            .bind(election)
            .bind(identity)
            .execute(&mut *conn)
            .await;
        session.end("candidates", done).map(|_| ())
    }

    async fn own_tenure(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<String>, BackendError> {
        if std::mem::take(&mut self.clear_mine) {
            self.drop_reservation(session, t).await;
        }
        let conn = session.begin("watch").await?;
        let row = sqlx::query_as::<_, (String, Option<i64>, Option<i64>)>(&self.statements.own)
            .bind(&t.tenure)
            .bind(&self.presence)
            .bind(&self.presence)
            .bind(&self.lock)
            .bind(&t.election)
            .fetch_optional(&mut *conn)
            .await;
        let row = session.end("watch", row)?;
        if row
            .as_ref()
            .is_some_and(|(tenure, _, _)| *tenure == t.tenure)
        {
            self.limit_idle(session).await;
            if self.turn.is_some() {
                // A writer that queued keeps its turn lock through its tenure; a new
                // connection (the old one cut or replaced) takes it again, so that
                // the readers behind it wait silently again after one look.
                self.hold_turn(session).await;
            }
        }
        if let Some((_, _, lock_holder)) = &row {
            let ours = self.signal_id.load(Ordering::SeqCst);
            let holder = lock_holder.and_then(|h| u64::try_from(h).ok());
            if *self.held.borrow() && holder != Some(ours) {
                // The signal connection lost the lock (and likely itself) unnoticed.
                self.check.notify_one();
            }
        }
        Ok(row.map(|(tenure, _, _)| tenure))
    }

    fn acquired(&mut self) {
        if self.reader {
            // A shared holder holds no lock: one it got as a follower goes on to the
            // next in the queue (each wakes and looks in turn).
            self.want.send_replace(Want::Rest);
            return;
        }
        self.look_now = true;
        self.want.send_replace(Want::Lead);
    }

    async fn released(&mut self, session: &mut Session<MySqlConnection>) {
        // Even when the row could not be freed, the lock is no use to us now.
        self.want.send_replace(Want::Rest);
        let mut held = self.held.clone();
        let _ = timeout(self.op_timeout, held.wait_for(|h| !*h)).await;
        // Then the presence lock: a follower woken meanwhile found the row free.
        if let Ok(conn) = session.begin("release").await {
            let freed = sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(&self.presence)
                .execute(&mut *conn)
                .await;
            let _ = session.end("release", freed);
        }
        self.let_reader_lock_go(session).await;
        self.let_turn_go(session).await;
        self.lift_idle_limit(session).await;
    }

    async fn next_look(&mut self) {
        if !std::mem::take(&mut self.look_now) {
            sleep(super::OWN_ROW_EVERY).await;
        }
    }

    async fn take_shared(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        self.join(session, t).await
    }

    async fn renew_shared(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let ours = self.renew_share(session, t).await?;
        if ours {
            self.hold_reader_lock(session, t).await;
        }
        Ok(ours)
    }

    async fn release_shared(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        self.leave(session, election, tenure).await
    }

    async fn mark_waiting(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
        on: bool,
    ) -> Result<(), BackendError> {
        self.mark(session, t, on).await
    }

    async fn own_shared(
        &mut self,
        _session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        self.still_shared(t).await
    }

    async fn holders(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
    ) -> Result<Vec<(String, i64, bool)>, BackendError> {
        self.list_holders(session, election).await
    }

    fn queued(&self) -> bool {
        self.queue
    }

    fn look_for_queue(&mut self) {
        self.table_ready = false;
    }

    fn queue_key(&self) -> &str {
        &self.candidate
    }

    async fn waiting(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
    ) -> Result<Option<(LeaseRow, i64, Vec<Waiting>)>, BackendError> {
        self.read_queue(session, election).await
    }

    fn kept_by_queue(&mut self, kept: Option<(&LeaseRow, Option<&super::Ahead>)>) {
        self.behind = None;
        self.stale_at = None;
        let Some((row, writer)) = kept else {
            return;
        };
        // As a take that found the row: the signal connection queues with its tenure;
        // a free row left to the candidates ahead hands the lock on to them.
        self.seen_tenure.clone_from(&row.tenure);
        self.left_to_another = row.holder.is_empty();
        // A shared candidate behind a waiting writer, the row held: it waits for the
        // writer's tenure to end (see `shared::turn_lock`).
        if self.reader && !row.holder.is_empty() && row.left_ms > 0 {
            self.behind = writer.map(|w| shared::turn_lock(&w.presence));
            self.stale_at = super::stale_at(Instant::now(), writer);
        }
    }

    async fn wait_for_change(&mut self, tenancy: &mut Tenancy, max: Duration) -> Wake {
        // A writer kept out by live shared holders waits for their sessions (see
        // `signal`), the election's named lock let go.
        let readers = tenancy.held_by_readers && !self.reader;
        let turn = self.behind.is_some();
        let want = if let Some(name) = &self.behind {
            // Kept out by the queue behind a waiting writer: its turn lock (`signal`).
            Want::Turn(name.clone())
        } else if readers {
            Want::Readers
        } else if *self.held.borrow() && self.left_to_another {
            // Woken by the lock, and the free row is left to another candidate (a
            // switchover): the signal connection hands the lock on, so that the named
            // candidate, queued behind us, wakes (see `signal`).
            Want::Pass
        } else if *self.held.borrow() {
            // Woken by the lock, and the row is someone else's: the signal connection
            // hands the lock on to a leader whose session lives and queues again, or
            // keeps it for the expiry of a crashed leader's row (see `signal`).
            Want::Yield(self.seen_tenure.clone())
        } else {
            Want::Follow
        };
        self.seen.send_replace(self.seen_tenure.clone());
        self.want.send_replace(want);
        let now = Instant::now();
        let until = now + super::behind_for(max, self.stale_at.filter(|_| turn), now);
        let mut queue_known = true;
        loop {
            // Silent while queued for the lock and the row's holder lives: it holds
            // the lock (a release, a crash or a freeze, by the server's idle limit,
            // ends its session and wakes the first in the queue), or a follower does
            // that took it over and will take the row at its expiry (a new leader
            // that got the lock as a follower lets it go once: every follower in the
            // queue gets it and looks).
            let silent = (tenancy.held_by_other || readers || turn) && *self.queued.borrow();
            let wake_at = match tenancy.expiry_hint {
                Some(hint) if !silent => hint.min(until),
                _ => until,
            };
            tokio::select! {
                _ = self.woke.notified() => return Wake::Changed,
                changed = self.queued.changed(), if queue_known => {
                    queue_known = changed.is_ok();
                    continue;
                }
                _ = sleep_until(wake_at) => {}
            }
            if silent {
                let stale_at = self.stale_at.filter(|_| turn);
                return super::behind_woke(Wake::Quiet, stale_at, Instant::now());
            }
            tenancy.expiry_hint = None;
            return Wake::Changed;
        }
    }
}

/// The token a counting statement (`LAST_INSERT_ID(expr)`) handed out, `None` when it
/// counted nothing: from its answer, or, from a server that does not pass the value
/// on, from the session (it is the session's still).
async fn counted(
    session: &mut Session<MySqlConnection>,
    done: &sqlx::mysql::MySqlQueryResult,
) -> Result<Option<i64>, BackendError> {
    if done.rows_affected() != 1 {
        return Ok(None);
    }
    match i64::try_from(done.last_insert_id()) {
        Ok(token) if token > 0 => Ok(Some(token)),
        _ => {
            let conn = session.begin("campaign").await?;
            let token = sqlx::query_scalar::<_, i64>("SELECT CAST(LAST_INSERT_ID() AS SIGNED)")
                .fetch_one(&mut *conn)
                .await;
            session.end("campaign", token).map(Some)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_limit_is_the_ttl_in_whole_seconds_rounded_up() {
        assert_eq!(idle_limit(Duration::from_secs(2)), 2);
        assert_eq!(idle_limit(Duration::from_millis(2001)), 3);
        assert_eq!(idle_limit(Duration::from_millis(1500)), 2);
        assert_eq!(idle_limit(Duration::from_millis(300)), 1);
        assert_eq!(idle_limit(Duration::ZERO), 1);
    }

    #[test]
    fn lock_names_are_short_and_stable() {
        let n = lock_name("app", "leasekeeper_leases", "my-app");
        assert_eq!(n.len(), 19);
        assert_eq!(n, lock_name("app", "leasekeeper_leases", "my-app"));
        assert_ne!(n, lock_name("app", "leasekeeper_leases", "other"));
        // Pinned: every version must name the lock of an election alike.
        assert_eq!(lock_name("", "", ""), "lk:07d69907b49d2e23");
    }
}
