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
use sqlx::{Connection, Row};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

use super::{LeaseRow, Session, SqlConnect, SqlSettings, TableError, Tenancy, QUARANTINE};
use crate::backend::{Backend, BackendError, Campaign, Renewal, Wake};

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

pub struct MysqlBackend {
    session: Session<MySqlConnection>,
    table: Table,
    user: String,
    statements: Statements,
    tenancy: Tenancy,
    table_ready: bool,
    want: watch::Sender<Want>,
    /// Whether the signal connection holds the named lock now.
    held: watch::Receiver<bool>,
    /// Woken when a follower's signal connection got the lock.
    woke: Arc<Notify>,
    op_timeout: Duration,
    signal: JoinHandle<()>,
}

use super::Table;

impl MysqlBackend {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    pub fn new(
        settings: &SqlSettings,
        election: &str,
        identity: &str,
        ttl: Duration,
        timing: &crate::config::Timing,
    ) -> Result<Self, BackendError> {
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
        let name = lock_name(&database, &settings.table.name, election);
        let (want, want_rx) = watch::channel(Want::Rest);
        let (held_tx, held) = watch::channel(false);
        let woke = Arc::new(Notify::new());
        let signal = tokio::spawn(signal(SignalParts {
            options: options.clone(),
            name,
            want: want_rx,
            held: held_tx,
            woke: woke.clone(),
            reconnected: session.reconnected.clone(),
            op_timeout: timing.backend_timeout,
            follow_wait: timing.retry_interval,
            check_every: timing.renew_interval,
        }));
        Ok(MysqlBackend {
            session,
            statements: Statements::for_table(&settings.table.quoted('`')),
            table: settings.table.clone(),
            user: options.get_username().to_owned(),
            tenancy: Tenancy::new(election, identity, ttl),
            table_ready: false,
            want,
            held,
            woke,
            op_timeout: timing.backend_timeout,
            signal,
        })
    }

    /// Creates the lease table if it is missing. A user who may not create it is bad
    /// input ([`TableError::NotAllowed`]); anything else is for the elector to retry.
    pub async fn prepare(&mut self) -> Result<(), TableError> {
        if self.table_ready {
            return Ok(());
        }
        let conn = self.session.begin("prepare").await?;
        let found = sqlx::query_scalar::<_, i64>(&self.statements.exists)
            .bind(self.table.schema.as_deref())
            .bind(&self.table.name)
            .fetch_one(&mut *conn)
            .await;
        let found = self.session.end("prepare", found)?;
        if found == 0 {
            let conn = self.session.begin("prepare").await?;
            let created = sqlx::query(&self.statements.create)
                .execute(&mut *conn)
                .await;
            match created {
                Err(e) if is_denied(&e) => {
                    self.session.end("prepare", Ok(()))?;
                    return Err(TableError::NotAllowed {
                        table: self.table.display(),
                        user: self.user.clone(),
                        detail: e
                            .as_database_error()
                            .map_or_else(|| e.to_string(), |d| d.message().to_owned()),
                    });
                }
                other => {
                    self.session.end("prepare", other)?;
                    tracing::info!(table = %self.table.display(), "created the lease table");
                }
            }
        }
        self.table_ready = true;
        Ok(())
    }

    fn ttl_us(&self) -> i64 {
        i64::try_from(self.tenancy.ttl.as_micros()).unwrap_or(i64::MAX)
    }

    async fn read(&mut self, op: &'static str) -> Result<Option<LeaseRow>, BackendError> {
        let conn = self.session.begin(op).await?;
        let row = sqlx::query(&self.statements.read)
            .bind(&self.tenancy.election)
            .fetch_optional(&mut *conn)
            .await;
        let row = self.session.end(op, row)?;
        row.map(|r| {
            Ok(LeaseRow {
                holder: r.try_get(0)?,
                tenure: r.try_get(1)?,
                token: r.try_get(2)?,
                left_ms: r.try_get(3)?,
            })
        })
        .transpose()
        .map_err(super::sql(op))
    }

    async fn take(&mut self) -> Result<Option<LeaseRow>, BackendError> {
        let ttl_us = self.ttl_us();
        let ours = |t: &Tenancy, token: i64| LeaseRow {
            holder: t.identity.clone(),
            tenure: t.tenure.clone(),
            token,
            left_ms: t.ttl_ms(),
        };
        let t = &self.tenancy;
        let conn = self.session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.take)
            .bind(&t.tenure)
            .bind(t.floor_param())
            .bind(&t.tenure)
            .bind(&t.identity)
            .bind(ttl_us)
            .bind(&t.tenure)
            .bind(&t.election)
            .bind(&t.tenure)
            .execute(&mut *conn)
            .await;
        let done = self.session.end("campaign", done)?;
        if done.rows_affected() == 1 {
            let token = i64::try_from(done.last_insert_id()).unwrap_or(0);
            if token > 0 {
                return Ok(Some(ours(&self.tenancy, token)));
            }
            // No token in the answer (a server that does not pass it on): look.
            return self.read("campaign").await;
        }
        if let Some(row) = self.read("campaign").await? {
            return Ok(Some(row));
        }
        // No row: insert ours, or a quarantine row if tokens were seen before.
        let t = &self.tenancy;
        let quarantine = t.floor > 0;
        let (holder, tenure, token) = if quarantine {
            (String::new(), QUARANTINE.to_owned(), t.floor_param())
        } else {
            (t.identity.clone(), t.tenure.clone(), 1)
        };
        let conn = self.session.begin("campaign").await?;
        let done = sqlx::query(&self.statements.insert)
            .bind(&t.election)
            .bind(&holder)
            .bind(&tenure)
            .bind(token)
            .bind(ttl_us)
            .execute(&mut *conn)
            .await;
        let inserted = self.session.end("campaign", done)?.rows_affected() == 1;
        if inserted && !quarantine {
            return Ok(Some(ours(&self.tenancy, 1)));
        }
        if quarantine && inserted {
            tracing::warn!(
                floor = self.tenancy.floor,
                "the lease row was gone although tokens were handed out; fenced it for one ttl"
            );
        }
        self.read("campaign").await
    }
}

impl Drop for MysqlBackend {
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
    let mut backoff = Duration::from_millis(50);
    loop {
        p.held.send_replace(false);
        match timeout(p.op_timeout, MySqlConnection::connect_with(&p.options)).await {
            Ok(Ok(mut conn)) => {
                backoff = Duration::from_millis(50);
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
        sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
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

impl Backend for MysqlBackend {
    fn name(&self) -> &'static str {
        "mysql"
    }

    fn lease_ttl(&self) -> Duration {
        self.tenancy.ttl
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
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
        let row = self.take().await?;
        let campaign = self.tenancy.judge(row)?;
        if matches!(campaign, Campaign::Acquired { .. }) {
            self.want.send_replace(Want::Lead);
        }
        Ok(campaign)
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        if !self.tenancy.holding {
            return Ok(Renewal::Lost);
        }
        let ttl_us = self.ttl_us();
        let conn = self.session.begin("renew").await?;
        let done = sqlx::query(&self.statements.renew)
            .bind(ttl_us)
            .bind(&self.tenancy.election)
            .bind(&self.tenancy.tenure)
            .execute(&mut *conn)
            .await;
        let done = self.session.end("renew", done)?;
        Ok(if done.rows_affected() == 1 {
            Renewal::Renewed
        } else {
            Renewal::Lost
        })
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        let tenure = self.tenancy.rotate();
        let freed = async {
            let conn = self.session.begin("release").await?;
            let done = sqlx::query(&self.statements.release)
                .bind(&self.tenancy.election)
                .bind(&tenure)
                .execute(&mut *conn)
                .await;
            self.session.end("release", done).map(|_| ())
        }
        .await;
        // The row first, then the signal: a follower woken by the lock finds the row
        // free. Even when the row could not be freed, the lock is no use to us now.
        self.want.send_replace(Want::Rest);
        let mut held = self.held.clone();
        let _ = timeout(self.op_timeout, held.wait_for(|h| !*h)).await;
        freed
    }

    async fn record_lost(&mut self) {
        loop {
            sleep(super::OWN_ROW_EVERY).await;
            if !self.tenancy.holding {
                continue;
            }
            let Ok(conn) = self.session.begin("watch").await else {
                continue;
            };
            let tenure = sqlx::query_scalar::<_, String>(&self.statements.own)
                .bind(&self.tenancy.election)
                .fetch_optional(&mut *conn)
                .await;
            // A read that fails says nothing; the renewals decide then.
            match self.session.end("watch", tenure) {
                Ok(Some(t)) if t == self.tenancy.tenure => {}
                Ok(_) => return,
                Err(_) => {}
            }
        }
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        if *self.held.borrow() {
            // We were woken by the lock and the row is still someone else's (the old
            // leader crashed and its row has not expired, or the leader does not hold
            // the lock): let the lock go to whoever queues for it, and sleep until
            // the row's expiry, or the retry interval.
            self.want.send_replace(Want::Rest);
            let until = self.tenancy.expiry_hint.take();
            let mut sleep_for = max;
            if let Some(h) = until {
                sleep_for = sleep_for.min(h.saturating_duration_since(tokio::time::Instant::now()));
            }
            sleep(sleep_for).await;
            return Wake::Changed;
        }
        self.want.send_replace(Want::Follow);
        super::wait_for(&self.woke, &mut self.tenancy.expiry_hint, max).await;
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
