//! `postgres` backend: the lease row (see [`super`]) in PostgreSQL, each step one
//! statement, judged by the server's `now()`.
//!
//! - **take** is one `INSERT … ON CONFLICT (election) DO UPDATE … WHERE` (the row is
//!   ours already, or expired and not left to another candidate) inside a statement
//!   that also reads the election's token counter and raises it to the token handed
//!   out, drops the taker's own reservation, returns the row as it stands when the take
//!   did not apply (a free row left to another candidate as nobody's, with the
//!   reservation's time left), and calls `pg_notify` when it did: one round trip for
//!   winners and losers alike.
//! - **renew**: `UPDATE … WHERE election = $1 AND tenure = $2`.
//! - **release**: the same compare, emptying the row and expiring it now, with a
//!   `pg_notify` in the same statement; the notification is delivered when the
//!   statement commits, so a woken follower always finds the row free.
//! - **switchover**: the candidates' rows (see [`super`]) are an upsert each; the
//!   reservation is one statement (`to`'s row reserved when it is alive and the lease
//!   row is ours, our own row alive and unreserved, in data-modifying CTEs) sent before
//!   the release. The release's notification wakes everyone: the named candidate takes
//!   the row; the others are refused and sleep until the reservation's end or the
//!   named one's take, which notifies too.
//!
//! **Wake-ups**: a second connection `LISTEN`s on the channel named like the table,
//! with the election as payload. Followers wake on every take and release there, and
//! when the leader's session ends (see [`wake`]: the leader holds the election's
//! advisory lock on its statement connection, idle-limited to the ttl by the server, and
//! a follower that found the row held waits for it on a connection of its own, sending
//! nothing while the leader lives; after such a wake it waits for the row's expiry, a
//! crashed leader's row standing until then). The listener is opened again whenever the statement
//! connection had to be (a partition that broke one may have left the other
//! half-open), and wakes the follower once after every (re)connect, since
//! notifications may have been missed meanwhile. While leading, a notification for
//! the election makes the leader read its own row: a takeover it did not expect (a
//! server clock that jumped, a quarantine row after a `DELETE`) ends the claim at once.
//! Changes made without a notification (an operator's plain `UPDATE`) are seen by the
//! leader's look at its own row every [`super::OWN_ROW_EVERY`] (DESIGN invariant 9).
//!
//! **Shared and exclusive** (`--mode`): see [`shared`] for the shared holders'
//! statements; a shared holder holds the election's readers' advisory lock, shared, on
//! its statement connection, and a writer waits for those holds to end on a waiter
//! connection of its own ([`wake::WAIT_READERS`]), silently; a shared candidate kept
//! out by the queue behind a waiting writer waits for that writer's turn lock
//! ([`wake::turn_key`]) on its waiter connection, silently; else shared candidates
//! wait as the election's followers do.
//!
//! `LISTEN` needs a session: through a transaction-mode pooler (PgBouncer
//! `pool_mode=transaction`) notifications are never delivered and followers fall back
//! to the holder's expiry and the retry interval. The lease statements themselves keep
//! no session state (autocommit, one statement each) and stay correct there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPoolOptions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{
    LeaseRow, Session, SqlBackend, SqlConnect, SqlDialect, SqlSettings, Table, TableError, Tenancy,
    Waiting, QUARANTINE,
};
use crate::backend::{BackendError, Candidacy, Wake};
use crate::backoff::Backoff;

mod shared;
mod wake;

/// The statements for one table (and its token counters and candidates), written once.
struct Statements {
    exists: String,
    create: String,
    create_counter: String,
    create_candidates: String,
    seed: String,
    list: String,
    live: String,
    present: String,
    reserve: String,
    prune: String,
    take: String,
    renew: String,
    release: String,
    own: String,
    /// The shared holders' table's (`--mode`).
    shared: shared::SharedStatements,
}

impl Statements {
    fn for_tables(t: &str, c: &str, k: &str, s: &str) -> Statements {
        Statements {
            shared: shared::SharedStatements::for_tables(t, c, k, s),
            exists: "SELECT to_regclass($1) IS NOT NULL".to_owned(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (
                   election    text PRIMARY KEY,
                   holder      text NOT NULL,
                   tenure      text NOT NULL,
                   token       bigint NOT NULL,
                   acquired_at timestamptz NOT NULL,
                   renewed_at  timestamptz NOT NULL,
                   expires_at  timestamptz NOT NULL
                 )"
            ),
            create_counter: format!(
                "CREATE TABLE IF NOT EXISTS {c} (
                   election text PRIMARY KEY,
                   token    bigint NOT NULL
                 )"
            ),
            create_candidates: format!(
                "CREATE TABLE IF NOT EXISTS {k} (
                   election       text NOT NULL,
                   identity       text NOT NULL,
                   alive_until    timestamptz NOT NULL,
                   reserved_until timestamptz,
                   PRIMARY KEY (election, identity)
                 )"
            ),
            // $1 election, $2 identity, $3 alive ms: our own row, alive (its
            // reservation stays).
            list: format!(
                "INSERT INTO {k} AS p (election, identity, alive_until)
                 VALUES ($1::text, $2::text, now() + $3::bigint * interval '1 millisecond')
                 ON CONFLICT (election, identity) DO UPDATE SET alive_until = EXCLUDED.alive_until"
            ),
            live: format!("SELECT identity FROM {k} WHERE election = $1::text ORDER BY identity"),
            // The presences (listener connections' names) in this database.
            present: "SELECT application_name::text FROM pg_stat_activity
                      WHERE application_name LIKE 'lk:%' AND datname = current_database()"
                .to_owned(),
            // $1 election, $2 to, $3 ttl ms, $4 our tenure, $5 identity, $6 alive ms,
            // $7 `to`'s presence: `to`'s row reserved when its presence is there and
            // the lease row is ours; our own row kept and without a reservation. The
            // count of rows reserved.
            reserve: format!(
                "WITH held AS (
                   SELECT 1 FROM {t} WHERE election = $1::text AND tenure = $4::text
                 ),
                 marked AS (
                   UPDATE {k} SET reserved_until = now() + $3::bigint * interval '1 millisecond'
                   WHERE election = $1::text AND identity = $2::text
                     AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $7::text)
                     AND EXISTS (SELECT 1 FROM held)
                   RETURNING identity
                 ),
                 mine AS (
                   UPDATE {k} SET reserved_until = NULL,
                     alive_until = GREATEST(alive_until, now() + $6::bigint * interval '1 millisecond')
                   WHERE election = $1::text AND identity = $5::text AND identity <> $2::text
                 )
                 SELECT count(*)::bigint FROM marked"
            ),
            // $1 election, $2 identity (whose presence is gone).
            prune: format!(
                "DELETE FROM {k} WHERE election = $1::text AND identity = $2::text
                   AND alive_until < now()
                   AND (reserved_until IS NULL OR reserved_until < now())"
            ),
            // $1 election: the counter at least as high as the row's token.
            seed: format!(
                "INSERT INTO {c} AS k (election, token)
                 SELECT $1::text, COALESCE(MAX(token), 0) FROM {t} WHERE election = $1::text
                 ON CONFLICT (election) DO UPDATE SET token = GREATEST(k.token, EXCLUDED.token)"
            ),
            take: take(t, c, k),
            renew: format!(
                "UPDATE {t} SET renewed_at = now(), expires_at = now() + $3::bigint * interval '1 millisecond'
                 WHERE election = $1::text AND tenure = $2::text"
            ),
            release: format!(
                "WITH freed AS (
                   UPDATE {t} SET holder = '', tenure = '', expires_at = now()
                   WHERE election = $1::text AND tenure = $2::text
                   RETURNING election
                 )
                 SELECT pg_notify($3::text, election)::text FROM freed"
            ),
            own: format!("SELECT tenure FROM {t} WHERE election = $1::text"),
        }
    }
}

/// The take statement on lease table `t`, counters `c`, candidates `k`.
fn take(t: &str, c: &str, k: &str) -> String {
    // $1 election, $2 our tenure, $3 identity, $4 ttl ms, $5 floor, $6 channel.
    // A new tenure gets one more than the highest of the row's token, the
    // floor and the counter, and the counter follows it in the same statement.
    // A missing row comes back as a quarantine row instead of ours when tokens
    // were handed out before (the counter or the floor says so; see the parent
    // module).
    // A free row is not taken for a new tenure while another candidate's
    // reservation lasts (a switchover's); the row then comes back as nobody's
    // with the reservation's time left, and the named candidate's take drops
    // its reservation in the same statement.
    format!(
        "WITH c AS (
           SELECT GREATEST(COALESCE((SELECT token FROM {c} WHERE election = $1::text), 0), $5::bigint) AS n
         ),
         r AS (
           SELECT MAX(reserved_until) AS until FROM {k}
           WHERE election = $1::text AND identity <> $3::text AND reserved_until > now()
         ),
         taken AS (
           INSERT INTO {t} AS l (election, holder, tenure, token, acquired_at, renewed_at, expires_at)
           SELECT $1::text,
                  CASE WHEN c.n > 0 THEN '' ELSE $3::text END,
                  CASE WHEN c.n > 0 THEN '{QUARANTINE}' ELSE $2::text END,
                  GREATEST(c.n, 1),
                  now(), now(), now() + $4::bigint * interval '1 millisecond'
           FROM c
           ON CONFLICT (election) DO UPDATE SET
             token = CASE WHEN l.tenure = $2::text THEN l.token
                          ELSE GREATEST(l.token, (SELECT n FROM c)) + 1 END,
             holder = $3::text,
             tenure = $2::text,
             acquired_at = CASE WHEN l.tenure = $2::text THEN l.acquired_at ELSE now() END,
             renewed_at = now(),
             expires_at = now() + $4::bigint * interval '1 millisecond'
           WHERE l.tenure = $2::text
              OR (l.expires_at <= now() AND (SELECT until FROM r) IS NULL)
           RETURNING l.holder, l.tenure, l.token, l.expires_at
         ),
         counted AS (
           INSERT INTO {c} AS k (election, token) SELECT $1::text, token FROM taken
           ON CONFLICT (election) DO UPDATE SET token = GREATEST(k.token, EXCLUDED.token)
         ),
         cleared AS (
           UPDATE {k} SET reserved_until = NULL
           WHERE election = $1::text AND identity = $3::text AND reserved_until IS NOT NULL
             AND EXISTS (SELECT 1 FROM taken WHERE tenure = $2::text)
         )
         SELECT holder, tenure, token,
                GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::bigint,
                pg_notify($6::text, $1::text)::text
         FROM taken
         UNION ALL
         SELECT CASE WHEN expires_at > now() THEN holder ELSE '' END, tenure, token,
                GREATEST(0, CEIL(EXTRACT(EPOCH FROM (
                  GREATEST(expires_at, COALESCE((SELECT until FROM r), expires_at)) - now()
                )) * 1000))::bigint,
                NULL::text
         FROM {t} WHERE election = $1::text AND NOT EXISTS (SELECT 1 FROM taken)"
    )
}

/// The `postgres` backend.
pub type PostgresBackend = SqlBackend<Postgres>;

/// PostgreSQL's side of the lease row: its statements and its listener.
pub struct Postgres {
    table: Table,
    /// The token counters' table beside it.
    counter: Table,
    /// The live candidates' table beside it.
    candidates: Table,
    /// The shared holders' table beside it, when this candidate has `--mode`.
    shared: Option<Table>,
    election: String,
    user: String,
    channel: String,
    statements: Statements,
    /// Woken by the listener for followers.
    wake: Arc<Notify>,
    /// Woken by the listener for the leader's look at its own row.
    own_changed: Arc<Notify>,
    /// Set by the listener at every (re)connect (see [`SqlDialect::presence_renewed`]).
    renewed: Arc<AtomicBool>,
    listener: JoinHandle<()>,
    table_ready: bool,
    /// Whether the shared holders' table is there: this candidate takes its turn in
    /// the waiting candidates' queue (see [`super::queue`]).
    queue: bool,
    /// A waiting writer's turn lock ([`wake::turn_key`]): the statement connection
    /// that holds it.
    turn: Option<u64>,
    /// A shared candidate kept out by the queue behind a waiting writer, the row
    /// held: that writer's turn lock, which it waits for, and when that writer's
    /// waiting row goes stale (it looks then).
    behind: Option<(i64, Option<tokio::time::Instant>)>,
    /// The election's advisory lock (see [`wake`]).
    key: i64,
    /// The readers' lock, held shared by shared holders (see [`wake::WAIT_READERS`]).
    readers_key: i64,
    /// Whether this candidate holds shared (`--mode shared`).
    reader: bool,
    /// This candidate's presence (its listener's `application_name`): the key of its
    /// waiting writer's row.
    presence: String,
    /// The leader's `idle_session_timeout`, ms: the ttl.
    idle_limit: String,
    /// The statement connection on which we hold the lock, while we lead.
    guard: Option<u64>,
    /// The leader's looks at its own row, on a connection of their own: the
    /// statement connection idles between renewals, for its idle limit.
    look: Session<PgConnection>,
    waiter: wake::Waiter,
    /// A writer's wait for the shared holders.
    readers: wake::Waiter,
}

impl PostgresBackend {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    pub fn new(settings: &SqlSettings, lease: &Candidacy) -> Result<Self, BackendError> {
        let SqlConnect::Postgres(options) = &settings.connect else {
            return Err(BackendError::Store {
                op: "connect",
                message: "not PostgreSQL settings".to_owned(),
            });
        };
        let session = Session::new(options.clone());
        let wake = Arc::new(Notify::new());
        let own_changed = Arc::new(Notify::new());
        let channel = settings.table.name.clone();
        let renewed = Arc::new(AtomicBool::new(false));
        // The listener's connection is this candidate's presence (its name is listed
        // in `pg_stat_activity` while it lives).
        let presence = presence(&settings.table, lease.election, lease.identity);
        let listener = tokio::spawn(listen(Listener {
            options: options.clone().application_name(&presence),
            renewed: renewed.clone(),
            channel: channel.clone(),
            election: lease.election.to_owned(),
            wake: wake.clone(),
            own_changed: own_changed.clone(),
            reconnected: session.reconnected.clone(),
            op_timeout: lease.timing.backend_timeout,
        }));
        let key = wake::lock_key(&settings.table.display(), lease.election);
        let waiter = wake::Waiter::spawn(
            options.clone(),
            wake::WAIT,
            lease.timing.ttl * super::BACKSTOP_TTLS,
            lease.timing.backend_timeout,
        );
        let readers_key = wake::readers_key(&settings.table.display(), lease.election);
        let readers = wake::Waiter::spawn(
            options.clone(),
            wake::WAIT_READERS,
            lease.timing.ttl * super::QUEUE_TTLS,
            lease.timing.backend_timeout,
        );
        let dialect = Postgres {
            key,
            readers_key,
            reader: lease.mode == crate::backend::LockMode::Shared,
            presence,
            readers,
            idle_limit: millis(lease.timing.ttl).to_string(),
            guard: None,
            look: Session::new(options.clone()),
            waiter,
            statements: Statements::for_tables(
                &settings.table.quoted('"'),
                &settings.table.counter().quoted('"'),
                &settings.table.candidates().quoted('"'),
                &settings.table.shared().quoted('"'),
            ),
            shared: lease.mode.flag().map(|_| settings.table.shared()),
            table: settings.table.clone(),
            counter: settings.table.counter(),
            candidates: settings.table.candidates(),
            election: lease.election.to_owned(),
            user: options.get_username().to_owned(),
            channel,
            wake,
            own_changed,
            renewed,
            listener,
            table_ready: false,
            queue: false,
            turn: None,
            behind: None,
        };
        Ok(SqlBackend::with_dialect(session, lease, dialect))
    }
}

/// The SQLSTATEs of a `CREATE TABLE IF NOT EXISTS` that lost to another session's
/// creation of the same table: the catalog's unique index (23505), the table (42P07),
/// or its row type ("type … already exists", 42710).
fn lost_a_creation_race(code: &str) -> bool {
    matches!(code, "23505" | "42P07" | "42710")
}

impl Postgres {
    fn not_allowed(&self, table: &Table, e: &sqlx::Error) -> TableError {
        TableError::NotAllowed {
            table: table.display(),
            user: self.user.clone(),
            detail: e
                .as_database_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned()),
        }
    }

    /// Whether `table` is there; a user who may not even look is bad input.
    async fn exists(
        &self,
        session: &mut Session<PgConnection>,
        table: &Table,
    ) -> Result<bool, TableError> {
        let conn = session.begin("prepare").await?;
        let exists = sqlx::query_scalar::<_, bool>(&self.statements.exists)
            .bind(table.quoted('"'))
            .fetch_one(&mut *conn)
            .await;
        match exists {
            Err(e) if is_denied(&e) => {
                session.end("prepare", Ok(()))?;
                Err(self.not_allowed(table, &e))
            }
            other => Ok(session.end("prepare", other)?),
        }
    }

    /// Creates `table` with `create` if it is missing.
    async fn ensure(
        &self,
        session: &mut Session<PgConnection>,
        table: &Table,
        create: &str,
    ) -> Result<(), TableError> {
        if self.exists(session, table).await? {
            return Ok(());
        }
        let conn = session.begin("prepare").await?;
        let created = sqlx::query(create).execute(&mut *conn).await;
        match created {
            Err(e) if is_denied(&e) => {
                session.end("prepare", Ok(()))?;
                Err(self.not_allowed(table, &e))
            }
            // Two candidates creating it at once: one loses a catalog race.
            Err(e) if code_of(&e).is_some_and(|c| lost_a_creation_race(&c)) => {
                session.end("prepare", Ok(()))?;
                Ok(())
            }
            other => {
                session.end("prepare", other)?;
                tracing::info!(table = %table.display(), "created the table");
                Ok(())
            }
        }
    }
}

impl Postgres {
    /// While we lead: the election's lock on the statement connection, with its idle
    /// limit (see [`wake`]); once per connection. Best effort: without it followers
    /// fall back to the row's expiry.
    async fn hold(&mut self, session: &mut Session<PgConnection>) {
        if self.guard.is_some_and(|g| session.still(g)) {
            return;
        }
        self.guard = None;
        let Ok(conn) = session.begin("hold").await else {
            return;
        };
        // A shared holder holds the readers' lock, shared; a writer the election's.
        let (hold, key) = if self.reader {
            (wake::HOLD_SHARED, self.readers_key)
        } else {
            (wake::HOLD, self.key)
        };
        let held = sqlx::query_scalar::<_, Option<bool>>(hold)
            .bind(key)
            .bind(&self.idle_limit)
            .fetch_one(&mut *conn)
            .await;
        match session.end("hold", held) {
            Ok(Some(true)) => self.guard = Some(session.generation()),
            Ok(_) => tracing::debug!("the election's lock is busy; trying again at the next renew"),
            Err(e) => tracing::debug!(error = %e, "could not hold the election's lock"),
        }
    }

    /// Lets the lock and the idle limit go, if we hold them (and our turn lock with
    /// every other).
    async fn let_go(&mut self, session: &mut Session<PgConnection>) {
        if !self.guard.take().is_some_and(|g| session.still(g)) {
            return;
        }
        if let Ok(conn) = session.begin("release").await {
            let done = sqlx::query(wake::LET_GO).execute(&mut *conn).await;
            let _ = session.end("release", done);
        }
        self.turn = None;
    }

    /// A waiting writer's turn lock on the statement connection, once per
    /// connection, kept until its tenure ends (see [`wake::turn_key`]). Best effort:
    /// without it, the shared candidates behind it wait by the retry interval.
    async fn hold_turn(&mut self, session: &mut Session<PgConnection>) {
        if self.turn.is_some_and(|g| session.still(g)) {
            return;
        }
        self.turn = None;
        let Ok(conn) = session.begin("campaign").await else {
            return;
        };
        let held = sqlx::query_scalar::<_, bool>(wake::HOLD_TURN)
            .bind(wake::turn_key(&self.presence))
            .fetch_one(&mut *conn)
            .await;
        match session.end("campaign", held) {
            Ok(true) => self.turn = Some(session.generation()),
            Ok(false) => tracing::debug!("our turn lock is busy"),
            Err(e) => tracing::debug!(error = %e, "could not take our turn lock"),
        }
    }

    /// Lets our turn lock go, if we hold it: our tenure (or our wait) ended.
    async fn let_turn_go(&mut self, session: &mut Session<PgConnection>) {
        if !self.turn.take().is_some_and(|g| session.still(g)) {
            return;
        }
        if let Ok(conn) = session.begin("release").await {
            let done = sqlx::query(wake::LET_TURN_GO)
                .bind(wake::turn_key(&self.presence))
                .execute(&mut *conn)
                .await;
            let _ = session.end("release", done);
        }
    }

    /// What a take statement's answer (`row`) found; our tenure in it holds the
    /// advisory lock that goes with it (see [`Postgres::hold`]), any other lets it go.
    async fn after_take(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
        row: Result<Option<sqlx::postgres::PgRow>, sqlx::Error>,
    ) -> Result<Option<LeaseRow>, BackendError> {
        let row = session.end("campaign", row)?;
        let row = row
            .as_ref()
            .map(LeaseRow::from_row)
            .transpose()
            .map_err(super::sql("campaign"))?;
        if row.as_ref().is_some_and(|r| r.tenure == t.tenure) {
            self.hold(session).await;
        } else {
            self.let_go(session).await;
        }
        Ok(row)
    }
}

impl Postgres {
    /// A release statement (`statement`: the lease row's, or the shared holders' last
    /// step) for `(election, tenure)`, which notifies the waiting on our channel.
    async fn release_by(
        &self,
        session: &mut Session<PgConnection>,
        statement: &str,
        (election, tenure): (&str, &str),
    ) -> Result<(), BackendError> {
        let conn = session.begin("release").await?;
        let done = sqlx::query(statement)
            .bind(election)
            .bind(tenure)
            .bind(&self.channel)
            .execute(&mut *conn)
            .await;
        session.end("release", done).map(|_| ())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn code_of(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
}

/// `insufficient_privilege`.
fn is_denied(e: &sqlx::Error) -> bool {
    code_of(e).is_some_and(|c| c == "42501")
}

/// The `application_name` of `identity`'s listener connection (see [`super::presence_name`]).
fn presence(table: &Table, election: &str, identity: &str) -> String {
    super::presence_name(&[&table.display(), election, identity])
}

/// What the listener task needs.
struct Listener {
    options: PgConnectOptions,
    renewed: Arc<AtomicBool>,
    channel: String,
    election: String,
    wake: Arc<Notify>,
    own_changed: Arc<Notify>,
    reconnected: Arc<Notify>,
    op_timeout: Duration,
}

/// Keeps one connection listening on the table's channel; wakes the follower on
/// every notification for our election, and once after every (re)connect.
async fn listen(p: Listener) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(p.op_timeout)
            .connect_lazy_with(p.options.clone());
        let listening = async {
            let mut l = PgListener::connect_with(&pool).await?;
            l.eager_reconnect(false);
            l.listen(&p.channel).await?;
            Ok::<_, sqlx::Error>(l)
        };
        match tokio::time::timeout(p.op_timeout, listening).await {
            Ok(Ok(mut l)) => {
                backoff.reset();
                p.renewed.store(true, Ordering::SeqCst);
                p.wake.notify_one();
                p.own_changed.notify_one();
                relay(&mut l, &p).await;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "postgres LISTEN failed"),
            Err(_) => tracing::debug!("postgres LISTEN timed out"),
        }
        drop(pool);
        tokio::time::sleep(backoff.next_wait()).await;
    }
}

/// Passes our election's notifications on until the connection must be renewed.
async fn relay(l: &mut PgListener, p: &Listener) {
    loop {
        tokio::select! {
            n = l.try_recv() => match n {
                Ok(Some(n)) => {
                    if n.payload() == p.election {
                        p.wake.notify_one();
                        p.own_changed.notify_one();
                    }
                }
                Ok(None) => {
                    tracing::debug!("postgres listener connection lost; reconnecting");
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "postgres listener failed; reconnecting");
                    return;
                }
            },
            _ = p.reconnected.notified() => return,
        }
    }
}

impl SqlDialect for Postgres {
    type Conn = PgConnection;
    const NAME: &'static str = "postgres";

    async fn prepare(&mut self, session: &mut Session<PgConnection>) -> Result<(), TableError> {
        if self.table_ready {
            return Ok(());
        }
        self.ensure(session, &self.table, &self.statements.create)
            .await?;
        self.ensure(session, &self.counter, &self.statements.create_counter)
            .await?;
        self.ensure(
            session,
            &self.candidates,
            &self.statements.create_candidates,
        )
        .await?;
        if let Some(shared) = &self.shared {
            self.ensure(session, shared, &self.statements.shared.create)
                .await?;
            self.queue = true;
        } else {
            // An election's candidate takes its turn too once `--mode` candidates
            // created the table.
            self.queue = self.exists(session, &self.table.shared()).await?;
        }
        // The counter at least as high as the row (a table from before the counter, a
        // counter row deleted while the lease row stayed).
        let conn = session.begin("prepare").await?;
        let seeded = sqlx::query(&self.statements.seed)
            .bind(&self.election)
            .execute(&mut *conn)
            .await;
        session.end("prepare", seeded)?;
        self.table_ready = true;
        Ok(())
    }

    async fn take(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        let conn = session.begin("campaign").await?;
        let row = sqlx::query(&self.statements.take)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(t.ttl_ms())
            .bind(t.floor_param())
            .bind(&self.channel)
            .fetch_optional(&mut *conn)
            .await;
        self.after_take(session, t, row).await
    }

    async fn renew(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let conn = session.begin("renew").await?;
        let done = sqlx::query(&self.statements.renew)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(t.ttl_ms())
            .execute(&mut *conn)
            .await;
        let ours = session.end("renew", done)?.rows_affected() == 1;
        if ours {
            self.hold(session).await;
        } else {
            self.let_go(session).await;
        }
        Ok(ours)
    }

    async fn release(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        self.release_by(session, &self.statements.release, (election, tenure))
            .await
    }

    async fn list(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
        alive: Duration,
    ) -> Result<(), BackendError> {
        let conn = session.begin("candidates").await?;
        let done = sqlx::query(&self.statements.list)
            .bind(&t.election)
            .bind(&t.identity)
            .bind(millis(alive))
            .execute(&mut *conn)
            .await;
        session.end("candidates", done).map(|_| ())
    }

    async fn live(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
    ) -> Result<Vec<(String, bool)>, BackendError> {
        let conn = session.begin("candidates").await?;
        let registered = sqlx::query_scalar::<_, String>(&self.statements.live)
            .bind(election)
            .fetch_all(&mut *conn)
            .await;
        let registered = session.end("candidates", registered)?;
        let conn = session.begin("candidates").await?;
        let present = sqlx::query_scalar::<_, String>(&self.statements.present)
            .fetch_all(&mut *conn)
            .await;
        let present = session.end("candidates", present)?;
        Ok(registered
            .into_iter()
            .map(|id| {
                let up = present.contains(&presence(&self.table, election, &id));
                (id, up)
            })
            .collect())
    }

    fn presence_renewed(&mut self) -> bool {
        self.renewed.swap(false, Ordering::SeqCst)
    }

    async fn reserve(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
        to: &str,
        alive: Duration,
    ) -> Result<bool, BackendError> {
        let conn = session.begin("release").await?;
        let reserved = sqlx::query_scalar::<_, i64>(&self.statements.reserve)
            .bind(&t.election)
            .bind(to)
            .bind(t.ttl_ms())
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(millis(alive))
            .bind(presence(&self.table, &t.election, to))
            .fetch_one(&mut *conn)
            .await;
        Ok(session.end("release", reserved)? > 0)
    }

    async fn prune(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
        identity: &str,
    ) -> Result<(), BackendError> {
        let conn = session.begin("candidates").await?;
        let done = sqlx::query(&self.statements.prune)
            .bind(election)
            .bind(identity)
            .execute(&mut *conn)
            .await;
        session.end("candidates", done).map(|_| ())
    }

    async fn own_tenure(
        &mut self,
        _session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<Option<String>, BackendError> {
        // On the look connection: see `look`.
        let conn = self.look.begin("watch").await?;
        let tenure = sqlx::query_scalar::<_, String>(&self.statements.own)
            .bind(&t.election)
            .fetch_optional(&mut *conn)
            .await;
        self.look.end("watch", tenure)
    }

    async fn released(&mut self, session: &mut Session<PgConnection>) {
        self.let_go(session).await;
        self.let_turn_go(session).await;
    }

    async fn next_look(&mut self) {
        // A notification (someone took or freed the row), or the next look: a plain
        // UPDATE or DELETE by someone else notifies nobody.
        tokio::select! {
            _ = self.own_changed.notified() => {}
            _ = tokio::time::sleep(super::OWN_ROW_EVERY) => {}
        }
    }

    async fn wait_for_change(&mut self, tenancy: &mut Tenancy, max: Duration) -> Wake {
        if let Some((turn, stale_at)) = self.behind {
            // A shared candidate behind a waiting writer waits for its tenure's end,
            // or until its waiting row goes stale.
            let max = super::behind_for(max, stale_at, tokio::time::Instant::now());
            let woke = (self.waiter)
                .wait(&self.wake, &mut tenancy.expiry_hint, (true, turn), max)
                .await;
            return super::behind_woke(woke, stale_at, tokio::time::Instant::now());
        }
        if tenancy.held_by_readers && !self.reader {
            // A writer kept out by shared holders waits for their sessions.
            let readers = (true, self.readers_key);
            return (self.readers)
                .wait(&self.wake, &mut tenancy.expiry_hint, readers, max)
                .await;
        }
        let held = (tenancy.held_by_other, self.key);
        self.waiter
            .wait(&self.wake, &mut tenancy.expiry_hint, held, max)
            .await
    }

    async fn take_shared(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        // A shared holder holds the readers' lock (shared): writers wait for it.
        let conn = session.begin("campaign").await?;
        let row = sqlx::query(&self.statements.shared.take)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(t.ttl_ms())
            .bind(t.floor_param())
            .fetch_optional(&mut *conn)
            .await;
        self.after_take(session, t, row).await
    }

    async fn renew_shared(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let conn = session.begin("renew").await?;
        let done = sqlx::query_scalar::<_, i64>(&self.statements.shared.renew)
            .bind(&t.election)
            .bind(&t.tenure)
            .bind(t.ttl_ms())
            .fetch_one(&mut *conn)
            .await;
        let ours = session.end("renew", done)? == 1;
        if ours {
            self.hold(session).await;
        } else {
            self.let_go(session).await;
        }
        Ok(ours)
    }

    async fn release_shared(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        let conn = session.begin("release").await?;
        let swept = sqlx::query(&self.statements.shared.sweep)
            .bind(election)
            .bind(tenure)
            .execute(&mut *conn)
            .await;
        session.end("release", swept)?;
        self.release_by(session, &self.statements.shared.release, (election, tenure))
            .await
    }

    async fn mark_waiting(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
        on: bool,
    ) -> Result<(), BackendError> {
        let conn = session.begin("campaign").await?;
        let done = if on {
            // Keyed by our presence: the row keeps shared candidates out while our
            // listener's session lives, without writes (see `shared`).
            sqlx::query(&self.statements.shared.mark)
                .bind(&t.election)
                .bind(&self.presence)
                .bind(&t.identity)
                .bind(t.ttl_ms())
                .bind(if self.reader { "q" } else { "w" })
                .execute(&mut *conn)
                .await
        } else {
            sqlx::query(&self.statements.shared.unmark)
                .bind(&t.election)
                .bind(&self.presence)
                .execute(&mut *conn)
                .await
        };
        session.end("campaign", done)?;
        if on && !self.reader {
            self.hold_turn(session).await;
        }
        Ok(())
    }

    async fn own_shared(
        &mut self,
        _session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        // On the look connection, as the writers' look.
        let conn = self.look.begin("watch").await?;
        let found = sqlx::query_scalar::<_, i64>(&self.statements.shared.own)
            .bind(&t.election)
            .bind(&t.tenure)
            .fetch_one(&mut *conn)
            .await;
        Ok(self.look.end("watch", found)? > 0)
    }

    fn queued(&self) -> bool {
        self.queue
    }

    fn look_for_queue(&mut self) {
        self.table_ready = false;
    }

    fn kept_by_queue(&mut self, kept: Option<(&LeaseRow, Option<&super::Ahead>)>) {
        // Only a shared candidate behind a waiting writer, the row held, waits for the
        // writer's turn lock; a free row is the candidates' ahead until the grace ends.
        let now = tokio::time::Instant::now();
        self.behind = kept
            .filter(|(row, _)| self.reader && !row.holder.is_empty() && row.left_ms > 0)
            .and_then(|(_, writer)| {
                writer.map(|w| (wake::turn_key(&w.presence), super::stale_at(now, Some(w))))
            });
    }

    fn queue_key(&self) -> &str {
        &self.presence
    }

    async fn waiting(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
    ) -> Result<Option<(LeaseRow, i64, Vec<Waiting>)>, BackendError> {
        let conn = session.begin("campaign").await?;
        let rows = sqlx::query(&self.statements.shared.queue)
            .bind(election)
            .fetch_all(&mut *conn)
            .await;
        let rows = session.end("campaign", rows)?;
        super::queue_from_rows(&rows).map_err(super::sql("campaign"))
    }

    async fn holders(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
    ) -> Result<Vec<(String, i64, bool)>, BackendError> {
        let conn = session.begin("campaign").await?;
        let listed = sqlx::query_as::<_, (String, i64, bool)>(&self.statements.shared.holders)
            .bind(election)
            .fetch_all(&mut *conn)
            .await;
        session.end("campaign", listed)
    }
}
