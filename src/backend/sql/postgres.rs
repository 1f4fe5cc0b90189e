//! `postgres` backend: the lease row (see [`super`]) in PostgreSQL, each step one
//! statement, judged by the server's `now()`.
//!
//! - **take** is one `INSERT … ON CONFLICT (election) DO UPDATE … WHERE` (the row is
//!   ours already, or expired) inside a statement that also returns the row as it
//!   stands when the take did not apply, and calls `pg_notify` when it did: one round
//!   trip for winners and losers alike.
//! - **renew**: `UPDATE … WHERE election = $1 AND tenure = $2`.
//! - **release**: the same compare, emptying the row and expiring it now, with a
//!   `pg_notify` in the same statement; the notification is delivered when the
//!   statement commits, so a woken follower always finds the row free.
//!
//! **Wake-ups**: a second connection `LISTEN`s on the channel named like the table,
//! with the election as payload. Followers wake on every take and release there, at
//! the observed holder's expiry (a crashed leader sends nothing), and at the retry
//! interval at the latest. The listener is opened again whenever the statement
//! connection had to be (a partition that broke one may have left the other
//! half-open), and wakes the follower once after every (re)connect, since
//! notifications may have been missed meanwhile. While leading, a notification for
//! the election makes the leader read its own row: a takeover it did not expect (a
//! server clock that jumped, a quarantine row after a `DELETE`) ends the claim at once.
//! Changes made without a notification (an operator's plain `UPDATE`) are seen by the
//! leader's look at its own row every [`super::OWN_ROW_EVERY`] (DESIGN invariant 9).
//!
//! `LISTEN` needs a session: through a transaction-mode pooler (PgBouncer
//! `pool_mode=transaction`) notifications are never delivered and followers fall back
//! to the holder's expiry and the retry interval. The lease statements themselves keep
//! no session state (autocommit, one statement each) and stay correct there.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPoolOptions};
use sqlx::Row;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{LeaseRow, Session, SqlConnect, SqlSettings, TableError, Tenancy, QUARANTINE};
use crate::backend::{Backend, BackendError, Campaign, Renewal, Wake};

/// The statements for one table, written once.
struct Statements {
    exists: String,
    create: String,
    take: String,
    renew: String,
    release: String,
    own: String,
}

impl Statements {
    fn for_table(t: &str) -> Statements {
        Statements {
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
            // $1 election, $2 our tenure, $3 identity, $4 ttl ms, $5 floor, $6 channel.
            // With a floor (tokens were seen) a missing row comes back as a quarantine
            // row instead of ours (see the parent module).
            take: format!(
                "WITH taken AS (
                   INSERT INTO {t} AS l (election, holder, tenure, token, acquired_at, renewed_at, expires_at)
                   VALUES ($1::text,
                           CASE WHEN $5::bigint > 0 THEN '' ELSE $3::text END,
                           CASE WHEN $5::bigint > 0 THEN '{QUARANTINE}' ELSE $2::text END,
                           GREATEST($5::bigint, 1),
                           now(), now(), now() + $4::bigint * interval '1 millisecond')
                   ON CONFLICT (election) DO UPDATE SET
                     token = CASE WHEN l.tenure = $2::text THEN l.token ELSE GREATEST(l.token, $5::bigint) + 1 END,
                     holder = $3::text,
                     tenure = $2::text,
                     acquired_at = CASE WHEN l.tenure = $2::text THEN l.acquired_at ELSE now() END,
                     renewed_at = now(),
                     expires_at = now() + $4::bigint * interval '1 millisecond'
                   WHERE l.tenure = $2::text OR l.expires_at <= now()
                   RETURNING l.holder, l.tenure, l.token, l.expires_at
                 )
                 SELECT holder, tenure, token,
                        GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::bigint,
                        pg_notify($6::text, $1::text)::text
                 FROM taken
                 UNION ALL
                 SELECT holder, tenure, token,
                        GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::bigint,
                        NULL::text
                 FROM {t} WHERE election = $1::text AND NOT EXISTS (SELECT 1 FROM taken)"
            ),
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

pub struct PostgresBackend {
    session: Session<PgConnection>,
    table: String,
    user: String,
    channel: String,
    statements: Statements,
    tenancy: Tenancy,
    table_ready: bool,
    /// Woken by the listener for followers.
    wake: Arc<Notify>,
    /// Woken by the listener for the leader's look at its own row.
    own_changed: Arc<Notify>,
    listener: JoinHandle<()>,
}

impl PostgresBackend {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    pub fn new(
        settings: &SqlSettings,
        election: &str,
        identity: &str,
        ttl: Duration,
        op_timeout: Duration,
    ) -> Result<Self, BackendError> {
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
        let listener = tokio::spawn(listen(
            options.clone(),
            channel.clone(),
            election.to_owned(),
            wake.clone(),
            own_changed.clone(),
            session.reconnected.clone(),
            op_timeout,
        ));
        let table = settings.table.quoted('"');
        Ok(PostgresBackend {
            session,
            statements: Statements::for_table(&table),
            table,
            user: options.get_username().to_owned(),
            channel,
            tenancy: Tenancy::new(election, identity, ttl),
            table_ready: false,
            wake,
            own_changed,
            listener,
        })
    }

    /// Creates the lease table if it is missing. A user who may not create it is bad
    /// input ([`TableError::NotAllowed`]); anything else is for the elector to retry.
    pub async fn prepare(&mut self) -> Result<(), TableError> {
        if self.table_ready {
            return Ok(());
        }
        let conn = self.session.begin("prepare").await?;
        let exists = sqlx::query_scalar::<_, bool>(&self.statements.exists)
            .bind(&self.table)
            .fetch_one(&mut *conn)
            .await;
        let exists = match exists {
            Err(e) if is_denied(&e) => {
                self.session.end("prepare", Ok(()))?;
                return Err(self.not_allowed(&e));
            }
            other => self.session.end("prepare", other)?,
        };
        if !exists {
            let conn = self.session.begin("prepare").await?;
            let created = sqlx::query(&self.statements.create)
                .execute(&mut *conn)
                .await;
            match created {
                Err(e) if is_denied(&e) => {
                    self.session.end("prepare", Ok(()))?;
                    return Err(self.not_allowed(&e));
                }
                // Two candidates creating it at once: one loses a catalog race.
                Err(e) if code_of(&e).is_some_and(|c| c == "23505" || c == "42P07") => {
                    self.session.end("prepare", Ok(()))?;
                }
                other => {
                    self.session.end("prepare", other)?;
                    tracing::info!(table = %self.table, "created the lease table");
                }
            }
        }
        self.table_ready = true;
        Ok(())
    }

    fn not_allowed(&self, e: &sqlx::Error) -> TableError {
        TableError::NotAllowed {
            table: self.table.replace('"', ""),
            user: self.user.clone(),
            detail: e
                .as_database_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned()),
        }
    }

    async fn take(&mut self) -> Result<Option<LeaseRow>, BackendError> {
        let conn = self.session.begin("campaign").await?;
        let row = sqlx::query(&self.statements.take)
            .bind(&self.tenancy.election)
            .bind(&self.tenancy.tenure)
            .bind(&self.tenancy.identity)
            .bind(self.tenancy.ttl_ms())
            .bind(self.tenancy.floor_param())
            .bind(&self.channel)
            .fetch_optional(&mut *conn)
            .await;
        let row = self.session.end("campaign", row)?;
        row.map(|r| {
            Ok(LeaseRow {
                holder: r.try_get(0)?,
                tenure: r.try_get(1)?,
                token: r.try_get(2)?,
                left_ms: r.try_get(3)?,
            })
        })
        .transpose()
        .map_err(super::sql("campaign"))
    }

    /// The tenure id in our row now, if the row exists.
    async fn own_tenure(&mut self) -> Result<Option<String>, BackendError> {
        let conn = self.session.begin("watch").await?;
        let tenure = sqlx::query_scalar::<_, String>(&self.statements.own)
            .bind(&self.tenancy.election)
            .fetch_optional(&mut *conn)
            .await;
        self.session.end("watch", tenure)
    }
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        self.listener.abort();
    }
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

/// Keeps one connection listening on the table's channel; wakes the follower on
/// every notification for our election, and once after every (re)connect.
async fn listen(
    options: PgConnectOptions,
    channel: String,
    election: String,
    wake: Arc<Notify>,
    own_changed: Arc<Notify>,
    reconnected: Arc<Notify>,
    op_timeout: Duration,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(op_timeout)
            .connect_lazy_with(options.clone());
        let listening = async {
            let mut l = PgListener::connect_with(&pool).await?;
            l.eager_reconnect(false);
            l.listen(&channel).await?;
            Ok::<_, sqlx::Error>(l)
        };
        match tokio::time::timeout(op_timeout, listening).await {
            Ok(Ok(mut l)) => {
                backoff = Duration::from_millis(50);
                wake.notify_one();
                own_changed.notify_one();
                loop {
                    tokio::select! {
                        n = l.try_recv() => match n {
                            Ok(Some(n)) => {
                                if n.payload() == election {
                                    wake.notify_one();
                                    own_changed.notify_one();
                                }
                            }
                            Ok(None) => {
                                tracing::debug!("postgres listener connection lost; reconnecting");
                                break;
                            }
                            Err(e) => {
                                tracing::debug!(error = %e, "postgres listener failed; reconnecting");
                                break;
                            }
                        },
                        _ = reconnected.notified() => break,
                    }
                }
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "postgres LISTEN failed"),
            Err(_) => tracing::debug!("postgres LISTEN timed out"),
        }
        drop(pool);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

impl Backend for PostgresBackend {
    fn name(&self) -> &'static str {
        "postgres"
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
        self.tenancy.judge(row)
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        if !self.tenancy.holding {
            return Ok(Renewal::Lost);
        }
        let conn = self.session.begin("renew").await?;
        let done = sqlx::query(&self.statements.renew)
            .bind(&self.tenancy.election)
            .bind(&self.tenancy.tenure)
            .bind(self.tenancy.ttl_ms())
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
        let conn = self.session.begin("release").await?;
        let done = sqlx::query(&self.statements.release)
            .bind(&self.tenancy.election)
            .bind(&tenure)
            .bind(&self.channel)
            .execute(&mut *conn)
            .await;
        self.session.end("release", done)?;
        Ok(())
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        super::wait_for(&self.wake, &mut self.tenancy.expiry_hint, max).await;
        Wake::Changed
    }

    async fn record_lost(&mut self) {
        loop {
            // A notification (someone took or freed the row), or the next look: a
            // plain UPDATE or DELETE by someone else notifies nobody.
            tokio::select! {
                _ = self.own_changed.notified() => {}
                _ = tokio::time::sleep(super::OWN_ROW_EVERY) => {}
            }
            if !self.tenancy.holding {
                continue;
            }
            // A read that fails says nothing; the renewals decide then.
            match self.own_tenure().await {
                Ok(Some(t)) if t == self.tenancy.tenure => {}
                Ok(_) => return,
                Err(_) => {}
            }
        }
    }
}
