//! `mysql` backend (MySQL 5.7+/8, MariaDB 10.3+): the lease row (see [`super`]),
//! judged by the server's `UTC_TIMESTAMP(6)` (UTC, so no time zone or DST shift can
//! move an expiry).
//!
//! - **take** is one conditional `UPDATE … WHERE election = ? AND (tenure = ? OR
//!   expires_at <= UTC_TIMESTAMP(6))`; its assignments run left to right, so every
//!   one reads the old `tenure` (assigned last). The new token comes back in the same
//!   answer through `LAST_INSERT_ID(expr)`. A candidate that did not win reads the
//!   row to learn the holder; a missing row is inserted (`INSERT IGNORE`).
//! - **renew**: `UPDATE … WHERE election = ? AND tenure = ?`.
//! - **release**: the same compare, emptying the row and expiring it now.
//!
//! **Wake-ups** (MySQL has no notifications): a MySQL/MariaDB named lock,
//! `GET_LOCK`, is used purely as a signal, on a connection of its own; the row alone
//! decides who leads. The leader holds the lock for its whole tenure. Followers wait
//! for it in `GET_LOCK(name, retry interval)`: when the leader releases (after its
//! row is free) or its session ends (a killed process's connection closes), the
//! first follower in the lock's queue gets it, campaigns at once while holding it,
//! and keeps it if it wins — the other followers stay asleep (no herd). A follower
//! that got the lock and found the row still held (the old leader crashed and its row
//! has not expired) lets the lock go and sleeps until that row's expiry. Followers
//! also wake at the observed holder's expiry and at the retry interval at the latest,
//! so a lock that is held by nobody useful (a paused old leader's session) only
//! slows a handover down to the row's expiry. Named locks are server-wide: the name
//! is `lk:` and a 64-bit FNV-1a hash (hex) of `<database>/<table>/<election>`.
//!
//! Named locks need a session: through a proxy that multiplexes statements over
//! shared connections (ProxySQL pins a connection that takes a named lock; a
//! transaction-mode pooler would not) the wake-ups are lost and followers fall back
//! to the holder's expiry and the retry interval. The lease statements keep no
//! session state and stay correct there.

use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::Connection;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

use super::{
    LeaseRow, Session, SqlBackend, SqlConnect, SqlDialect, SqlSettings, Table, TableError, Tenancy,
    QUARANTINE,
};
use crate::backend::{BackendError, Candidacy, Wake};
use crate::backoff::Backoff;

struct Statements {
    exists: String,
    create: String,
    take: String,
    read: String,
    insert: String,
    renew: String,
    release: String,
    own: String,
}

impl Statements {
    fn for_table(t: &str) -> Statements {
        Statements {
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
            // tenure, floor, tenure, identity, ttl µs, tenure, election, tenure.
            take: format!(
                "UPDATE {t} SET
                   token = LAST_INSERT_ID(IF(tenure = ?, token, GREATEST(token, ?) + 1)),
                   acquired_at = IF(tenure = ?, acquired_at, UTC_TIMESTAMP(6)),
                   holder = ?,
                   renewed_at = UTC_TIMESTAMP(6),
                   expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
                   tenure = ?
                 WHERE election = ? AND (tenure = ? OR expires_at <= UTC_TIMESTAMP(6))"
            ),
            read: format!(
                "SELECT holder, tenure, token,
                        CAST(GREATEST(0, CEILING(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000)) AS SIGNED)
                 FROM {t} WHERE election = ?"
            ),
            // election, holder, tenure, token, ttl µs.
            insert: format!(
                "INSERT IGNORE INTO {t} (election, holder, tenure, token, acquired_at, renewed_at, expires_at)
                 VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)"
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
            own: format!("SELECT tenure FROM {t} WHERE election = ?"),
        }
    }
}

/// What the signal connection should do with the named lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// Neither hold nor wait for it.
    Rest,
    /// Wait for it; when got, wake the follower and hold it until told otherwise.
    Follow,
    /// Get it and hold it (we lead).
    Lead,
}

/// The `mysql` backend (MySQL and MariaDB).
pub type MysqlBackend = SqlBackend<Mysql>;

/// MySQL's side of the lease row: its statements and its signal connection.
pub struct Mysql {
    table: Table,
    user: String,
    statements: Statements,
    table_ready: bool,
    want: watch::Sender<Want>,
    /// Whether the signal connection holds the named lock now.
    held: watch::Receiver<bool>,
    /// Woken when a follower's signal connection got the lock.
    woke: Arc<Notify>,
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
        let woke = Arc::new(Notify::new());
        let timing = lease.timing;
        let signal = tokio::spawn(signal(SignalParts {
            options: options.clone(),
            name: lock_name(&database, &settings.table.name, lease.election),
            want: want_rx,
            held: held_tx,
            woke: woke.clone(),
            reconnected: session.reconnected.clone(),
            op_timeout: timing.backend_timeout,
            follow_wait: timing.retry_interval,
            check_every: timing.renew_interval,
        }));
        let dialect = Mysql {
            statements: Statements::for_table(&settings.table.quoted('`')),
            table: settings.table.clone(),
            user: options.get_username().to_owned(),
            table_ready: false,
            want,
            held,
            woke,
            op_timeout: timing.backend_timeout,
            signal,
        };
        Ok(SqlBackend::with_dialect(session, lease, dialect))
    }
}

fn ttl_us(t: &Tenancy) -> i64 {
    i64::try_from(t.ttl.as_micros()).unwrap_or(i64::MAX)
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
    async fn read(
        &self,
        session: &mut Session<MySqlConnection>,
        op: &'static str,
        election: &str,
    ) -> Result<Option<LeaseRow>, BackendError> {
        let conn = session.begin(op).await?;
        let row = sqlx::query(&self.statements.read)
            .bind(election)
            .fetch_optional(&mut *conn)
            .await;
        let row = session.end(op, row)?;
        row.as_ref()
            .map(LeaseRow::from_row)
            .transpose()
            .map_err(super::sql(op))
    }

    /// The conditional take; the new token when it applied (0 when the server did
    /// not pass it on), `None` when it did not.
    async fn update_take(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<i64>, BackendError> {
        let conn = session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.take)
            .bind(&t.tenure)
            .bind(t.floor_param())
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(ttl_us(t))
            .bind(&t.tenure)
            .bind(&t.election)
            .bind(&t.tenure)
            .execute(&mut *conn)
            .await;
        let done = session.end("campaign", done)?;
        Ok((done.rows_affected() == 1).then(|| i64::try_from(done.last_insert_id()).unwrap_or(0)))
    }

    /// No row: inserts ours, or a quarantine row if tokens were seen before.
    async fn insert_missing(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        let quarantine = t.floor > 0;
        let (holder, tenure, token) = if quarantine {
            (String::new(), QUARANTINE.to_owned(), t.floor_param())
        } else {
            (t.identity.clone(), t.tenure.clone(), 1)
        };
        let conn = session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.insert)
            .bind(&t.election)
            .bind(&holder)
            .bind(&tenure)
            .bind(token)
            .bind(ttl_us(t))
            .execute(&mut *conn)
            .await;
        let inserted = session.end("campaign", done)?.rows_affected() == 1;
        if inserted && !quarantine {
            return Ok(Some(ours(t, 1)));
        }
        if quarantine && inserted {
            tracing::warn!(
                floor = t.floor,
                "the lease row was gone although tokens were handed out; fenced it for one ttl"
            );
        }
        self.read(session, "campaign", &t.election).await
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
fn lock_name(database: &str, table: &str, election: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{database}/{table}/{election}").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("lk:{h:016x}")
}

struct SignalParts {
    options: MySqlConnectOptions,
    name: String,
    want: watch::Receiver<Want>,
    held: watch::Sender<bool>,
    woke: Arc<Notify>,
    reconnected: Arc<Notify>,
    op_timeout: Duration,
    follow_wait: Duration,
    check_every: Duration,
}

/// Keeps the signal connection, reconnecting with backoff (see the module doc).
async fn signal(mut p: SignalParts) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        p.held.send_replace(false);
        match timeout(p.op_timeout, MySqlConnection::connect_with(&p.options)).await {
            Ok(Ok(mut conn)) => {
                backoff.reset();
                if *p.want.borrow() == Want::Follow {
                    // Releases may have happened while we were away.
                    p.woke.notify_one();
                }
                serve_signal(&mut conn, &mut p).await;
                p.held.send_replace(false);
                // Dropped, not closed: the server may be unreachable.
                drop(conn);
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "mysql signal connection failed"),
            Err(_) => tracing::debug!("mysql signal connection timed out"),
        }
        sleep(backoff.next_wait()).await;
    }
}

/// Drives the named lock on one connection; returns when the connection must be
/// renewed.
async fn serve_signal(conn: &mut MySqlConnection, p: &mut SignalParts) {
    loop {
        let want = *p.want.borrow_and_update();
        let held = *p.held.borrow();
        match (want, held) {
            (Want::Rest, true) => {
                let freed = timeout(
                    p.op_timeout,
                    sqlx::query("SELECT RELEASE_LOCK(?)")
                        .bind(&p.name)
                        .execute(&mut *conn),
                )
                .await;
                p.held.send_replace(false);
                if !matches!(freed, Ok(Ok(_))) {
                    return;
                }
            }
            (Want::Rest, false) => {
                tokio::select! {
                    changed = p.want.changed() => if changed.is_err() { return },
                    _ = p.reconnected.notified() => return,
                }
            }
            (Want::Follow | Want::Lead, false) => {
                let wait = if want == Want::Follow {
                    p.follow_wait
                } else {
                    p.check_every
                };
                let got = tokio::select! {
                    r = timeout(
                        wait + p.op_timeout,
                        sqlx::query_scalar::<_, Option<i64>>("SELECT CAST(GET_LOCK(?, ?) AS SIGNED)")
                            .bind(&p.name)
                            .bind(wait.as_secs_f64())
                            .fetch_one(&mut *conn),
                    ) => r,
                    _ = p.reconnected.notified() => return,
                };
                match got {
                    Ok(Ok(Some(1))) => {
                        p.held.send_replace(true);
                        if *p.want.borrow() == Want::Follow {
                            p.woke.notify_one();
                        }
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "GET_LOCK failed");
                        return;
                    }
                    Err(_) => return,
                }
            }
            (Want::Follow | Want::Lead, true) => {
                // Hold it; check now and then that the session (and so the lock) lives.
                tokio::select! {
                    changed = p.want.changed() => if changed.is_err() { return },
                    _ = p.reconnected.notified() => return,
                    _ = sleep(p.check_every) => {
                        let ours = timeout(
                            p.op_timeout,
                            sqlx::query_scalar::<_, i64>(
                                "SELECT CAST(COALESCE(IS_USED_LOCK(?) = CONNECTION_ID(), 0) AS SIGNED)",
                            )
                            .bind(&p.name)
                            .fetch_one(&mut *conn),
                        )
                        .await;
                        match ours {
                            Ok(Ok(1)) => {}
                            Ok(Ok(_)) => {
                                p.held.send_replace(false);
                            }
                            _ => return,
                        }
                    }
                }
            }
        }
    }
}

impl SqlDialect for Mysql {
    type Conn = MySqlConnection;
    const NAME: &'static str = "mysql";

    async fn prepare(&mut self, session: &mut Session<MySqlConnection>) -> Result<(), TableError> {
        if self.table_ready {
            return Ok(());
        }
        let conn = session.begin("prepare").await?;
        let found = sqlx::query_scalar::<_, i64>(&self.statements.exists)
            .bind(self.table.schema.as_deref())
            .bind(&self.table.name)
            .fetch_one(&mut *conn)
            .await;
        if session.end("prepare", found)? == 0 {
            let conn = session.begin("prepare").await?;
            let created = sqlx::query(&self.statements.create)
                .execute(&mut *conn)
                .await;
            match created {
                Err(e) if is_denied(&e) => {
                    session.end("prepare", Ok(()))?;
                    return Err(TableError::NotAllowed {
                        table: self.table.display(),
                        user: self.user.clone(),
                        detail: e
                            .as_database_error()
                            .map_or_else(|| e.to_string(), |d| d.message().to_owned()),
                    });
                }
                other => {
                    session.end("prepare", other)?;
                    tracing::info!(table = %self.table.display(), "created the lease table");
                }
            }
        }
        self.table_ready = true;
        Ok(())
    }

    async fn take(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        match self.update_take(session, t).await? {
            Some(token) if token > 0 => return Ok(Some(ours(t, token))),
            // No token in the answer (a server that does not pass it on): look.
            Some(_) => return self.read(session, "campaign", &t.election).await,
            None => {}
        }
        if let Some(row) = self.read(session, "campaign", &t.election).await? {
            return Ok(Some(row));
        }
        self.insert_missing(session, t).await
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

    async fn own_tenure(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
    ) -> Result<Option<String>, BackendError> {
        let conn = session.begin("watch").await?;
        let tenure = sqlx::query_scalar::<_, String>(&self.statements.own)
            .bind(election)
            .fetch_optional(&mut *conn)
            .await;
        session.end("watch", tenure)
    }

    fn acquired(&mut self) {
        self.want.send_replace(Want::Lead);
    }

    async fn released(&mut self) {
        // Even when the row could not be freed, the lock is no use to us now.
        self.want.send_replace(Want::Rest);
        let mut held = self.held.clone();
        let _ = timeout(self.op_timeout, held.wait_for(|h| !*h)).await;
    }

    async fn next_look(&mut self) {
        sleep(super::OWN_ROW_EVERY).await;
    }

    async fn wait_for_change(&mut self, tenancy: &mut Tenancy, max: Duration) -> Wake {
        if *self.held.borrow() {
            // We were woken by the lock and the row is still someone else's (the old
            // leader crashed and its row has not expired, or the leader does not hold
            // the lock): let the lock go to whoever queues for it, and sleep until
            // the row's expiry, or the retry interval.
            self.want.send_replace(Want::Rest);
            let mut sleep_for = max;
            if let Some(h) = tenancy.expiry_hint.take() {
                sleep_for = sleep_for.min(h.saturating_duration_since(tokio::time::Instant::now()));
            }
            sleep(sleep_for).await;
            return Wake::Changed;
        }
        self.want.send_replace(Want::Follow);
        crate::backend::wait_for_wake(&self.woke, &mut tenancy.expiry_hint, max).await;
        Wake::Changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
