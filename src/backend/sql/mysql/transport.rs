//! MySQL's requests behind the take and the table's preparation (see the parent
//! module): each one statement on the statement connection, its answer passed back
//! as it came.

use sqlx::mysql::MySqlConnection;

use super::super::{LeaseRow, Session, Table, TableError, Tenancy, QUARANTINE};
use super::rules::{self, Counted};
use super::{is_denied, ttl_us, Mysql};
use crate::backend::BackendError;

impl Mysql {
    /// The row, and whether it is free but left to another candidate.
    pub(super) async fn read(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<(LeaseRow, bool)>, BackendError> {
        let op = "campaign";
        let row = session.row(op, self.statements.read(t)).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let reserved = sqlx::Row::try_get::<i64, _>(&row, 4).map_err(super::super::sql(op))? != 0;
        let row = LeaseRow::from_row(&row).map_err(super::super::sql(op))?;
        Ok(Some((row, reserved)))
    }

    /// The next token, counted before anyone holds it, when the row is free for a
    /// new tenure of ours; `None` when it is not (held, ours already, missing) or the
    /// counter's row is missing.
    pub(super) async fn count_token(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<i64>, BackendError> {
        let done = session
            .execute("campaign", self.statements.count(t))
            .await?;
        counted(session, &done).await
    }

    /// The conditional take (ours already, or free with a `reserved` token); the
    /// tenure's token when it applied (0 when the server did not pass it on), `None`
    /// when it did not.
    pub(super) async fn update_take(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
        reserved: i64,
    ) -> Result<Option<i64>, BackendError> {
        let request = self.statements.take(t, reserved);
        let done = session.execute("campaign", request).await?;
        Ok((done.rows_affected() == 1).then(|| i64::try_from(done.last_insert_id()).unwrap_or(0)))
    }

    /// The counter's row, at least as high as the lease row's token and `floor`.
    pub(super) async fn seed(
        &self,
        session: &mut Session<MySqlConnection>,
        floor: i64,
    ) -> Result<(), BackendError> {
        let request = self.statements.seed(&self.election, floor);
        session.execute("campaign", request).await.map(|_| ())
    }

    /// The counter up to `token`, a token handed out above it.
    pub(super) async fn raise(
        &self,
        session: &mut Session<MySqlConnection>,
        token: i64,
    ) -> Result<(), BackendError> {
        let request = self.statements.raise(&self.election, token);
        session.execute("campaign", request).await.map(|_| ())
    }

    /// No row: inserts one that nobody holds. When tokens were handed out before (the
    /// counter, seeded again if it went too, or the floor says so), it is a quarantine
    /// row that expires a ttl later, so that a leader still claiming on the deleted row
    /// runs out first; otherwise a free one.
    pub(super) async fn insert_missing(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<(LeaseRow, bool)>, BackendError> {
        self.seed(session, t.floor_sent().sql_param()).await?;
        let request = self.statements.counted(&t.election);
        let counted = session.maybe("campaign", request).await;
        let counted = counted?.unwrap_or(0);
        let (tenure, ttl) = rules::missing_row(counted, ttl_us(t));
        let request = self.statements.insert(&t.election, (tenure, counted), ttl);
        let done = session.execute("campaign", request).await;
        let inserted = done?.rows_affected() == 1;
        if tenure == QUARANTINE && inserted {
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
    pub(super) async fn limit_idle(&mut self, session: &mut Session<MySqlConnection>) {
        if self.idle_limited == Some(session.generation()) {
            return;
        }
        let set = format!("SET SESSION wait_timeout = {}", self.idle_limit);
        match session.execute("watch", sqlx::query(&set)).await {
            Ok(_) => self.idle_limited = Some(session.generation()),
            Err(e) => {
                tracing::debug!(error = %e, "could not limit the idle time of the leader's session")
            }
        }
    }

    /// The server's default idle limit again, on a follower's statement connection.
    pub(super) async fn lift_idle_limit(&mut self, session: &mut Session<MySqlConnection>) {
        let Some(generation) = self.idle_limited.take() else {
            return;
        };
        if !session.still(generation) {
            return;
        }
        let request = sqlx::query("SET SESSION wait_timeout = DEFAULT");
        if let Err(e) = session.execute("release", request).await {
            tracing::debug!(error = %e, "could not lift the idle limit of the statement connection");
        }
    }

    /// Drops our reservation, used up by our take (best effort: left over, it would
    /// only keep the others from the row for the rest of its ttl after our release).
    pub(super) async fn drop_reservation(
        &self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) {
        let request = self.statements.cands.clear_mine(t);
        let done = (session).execute("watch", request).await;
        if let Err(e) = done {
            tracing::debug!(error = %e, "could not drop our used-up reservation");
        }
    }

    /// Whether `table` is there.
    pub(super) async fn found(
        &self,
        session: &mut Session<MySqlConnection>,
        table: &Table,
    ) -> Result<bool, BackendError> {
        let found = session
            .one(
                "prepare",
                sqlx::query_scalar::<_, i64>(&self.statements.exists)
                    .bind(table.schema.as_deref())
                    .bind(&table.name),
            )
            .await;
        Ok(found? > 0)
    }

    /// Creates `table` with `create` if it is missing; a user who may not is bad input.
    pub(super) async fn ensure(
        &self,
        session: &mut Session<MySqlConnection>,
        table: &Table,
        create: &str,
    ) -> Result<(), TableError> {
        if self.found(session, table).await? {
            return Ok(());
        }
        let conn = session.begin("prepare").await?;
        let created = sqlx::query(create).execute(&mut *conn).await.map(|_| ());
        let who = (table, self.user.as_str());
        if (session.end_preparing(created, who, (is_denied, |_| false)))?.is_some() {
            tracing::info!(table = %table.display(), "created the table");
        }
        Ok(())
    }
}

/// The token a counting statement (`LAST_INSERT_ID(expr)`) handed out, `None` when it
/// counted nothing: from its answer, or, from a server that does not pass the value
/// on, from the session (it is the session's still).
pub(super) async fn counted(
    session: &mut Session<MySqlConnection>,
    done: &sqlx::mysql::MySqlQueryResult,
) -> Result<Option<i64>, BackendError> {
    match rules::counted(done.rows_affected(), done.last_insert_id()) {
        Counted::Nothing => Ok(None),
        Counted::Token(token) => Ok(Some(token)),
        Counted::Ask => {
            let ask = sqlx::query_scalar::<_, i64>("SELECT CAST(LAST_INSERT_ID() AS SIGNED)");
            session.one("campaign", ask).await.map(Some)
        }
    }
}
