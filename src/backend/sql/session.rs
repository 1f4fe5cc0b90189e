//! The transport the SQL dialects share: one statement connection that is dropped
//! after any request that did not finish, and the decoding of the answers the core
//! reads ([`LeaseRow`], the queue's read).

use std::sync::Arc;

use tokio::sync::Notify;

use super::core::LeaseRow;
use super::queue::Waiting;
use super::settings::Table;
use crate::backend::BackendError;

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

/// The queue's read from its answer (see [`super::SqlDialect::waiting`]): one row per live
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

/// One connection for the lease statements. A request that did not finish (the
/// elector dropped it on its timeout) leaves the connection in an unknown state: the
/// next request opens a fresh one, and so does any error below SQL (I/O, TLS,
/// protocol). Each fresh connection after the first is announced on `reconnected`,
/// so that the dialect's wake-up connection is renewed with it (a partition that
/// broke one may have left the other half-open); the first finds it new already.
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
            if self.generation > 0 {
                self.reconnected.notify_one();
            }
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

    /// Ends a request that prepares `table` for `user`: an answer that refuses the
    /// user the right (`refused`) is bad input ([`TableError::NotAllowed`]); one that
    /// lost a creation race to another session (`raced`) is `None`, done all the same.
    pub fn end_preparing<T>(
        &mut self,
        answer: Result<T, sqlx::Error>,
        (table, user): (&Table, &str),
        (refused, raced): (ErrorCheck, ErrorCheck),
    ) -> Result<Option<T>, TableError> {
        match answer {
            Err(e) if refused(&e) => {
                self.end("prepare", Ok(()))?;
                Err(TableError::NotAllowed {
                    table: table.display(),
                    user: user.to_owned(),
                    detail: e
                        .as_database_error()
                        .map_or_else(|| e.to_string(), |d| d.message().to_owned()),
                })
            }
            Err(e) if raced(&e) => {
                self.end("prepare", Ok(()))?;
                Ok(None)
            }
            other => Ok(Some(self.end("prepare", other)?)),
        }
    }
}

/// Whether an error is of one kind (a dialect's refused right, a lost creation race).
pub type ErrorCheck = fn(&sqlx::Error) -> bool;

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

/// One request on the statement connection: the connection (opened if needed), the
/// statement, and its end ([`Session::end`]), for each kind of answer.
macro_rules! requests {
    ($conn:ty, $db:ty) => {
        impl Session<$conn> {
            /// A statement's result (rows affected).
            pub async fn execute<'q>(
                &mut self,
                op: &'static str,
                q: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<<$db as sqlx::Database>::QueryResult, BackendError> {
                let conn = self.begin(op).await?;
                let done = q.execute(&mut *conn).await;
                self.end(op, done)
            }

            /// A statement's rows.
            pub async fn rows<'q>(
                &mut self,
                op: &'static str,
                q: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<Vec<<$db as sqlx::Database>::Row>, BackendError> {
                let conn = self.begin(op).await?;
                let rows = q.fetch_all(&mut *conn).await;
                self.end(op, rows)
            }

            /// A statement's one row, if any.
            pub async fn row<'q>(
                &mut self,
                op: &'static str,
                q: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<Option<<$db as sqlx::Database>::Row>, BackendError> {
                let conn = self.begin(op).await?;
                let row = q.fetch_optional(&mut *conn).await;
                self.end(op, row)
            }

            /// A statement's one value.
            pub async fn one<'q, O>(
                &mut self,
                op: &'static str,
                q: sqlx::query::QueryScalar<'q, $db, O, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<O, BackendError>
            where
                O: Send + Unpin + 'static,
                (O,): for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row>,
            {
                let conn = self.begin(op).await?;
                let value = q.fetch_one(&mut *conn).await;
                self.end(op, value)
            }

            /// A statement's one value, if it returned a row.
            pub async fn maybe<'q, O>(
                &mut self,
                op: &'static str,
                q: sqlx::query::QueryScalar<'q, $db, O, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<Option<O>, BackendError>
            where
                O: Send + Unpin + 'static,
                (O,): for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row>,
            {
                let conn = self.begin(op).await?;
                let value = q.fetch_optional(&mut *conn).await;
                self.end(op, value)
            }

            /// A statement's values, one per row.
            pub async fn values<'q, O>(
                &mut self,
                op: &'static str,
                q: sqlx::query::QueryScalar<'q, $db, O, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<Vec<O>, BackendError>
            where
                O: Send + Unpin + 'static,
                (O,): for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row>,
            {
                let conn = self.begin(op).await?;
                let values = q.fetch_all(&mut *conn).await;
                self.end(op, values)
            }

            /// A statement's rows as tuples.
            pub async fn tuples<'q, O>(
                &mut self,
                op: &'static str,
                q: sqlx::query::QueryAs<'q, $db, O, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<Vec<O>, BackendError>
            where
                O: Send + Unpin + 'static + for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row>,
            {
                let conn = self.begin(op).await?;
                let rows = q.fetch_all(&mut *conn).await;
                self.end(op, rows)
            }

            /// A statement's one row as a tuple, if any.
            pub async fn tuple<'q, O>(
                &mut self,
                op: &'static str,
                q: sqlx::query::QueryAs<'q, $db, O, <$db as sqlx::Database>::Arguments<'q>>,
            ) -> Result<Option<O>, BackendError>
            where
                O: Send + Unpin + 'static + for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row>,
            {
                let conn = self.begin(op).await?;
                let row = q.fetch_optional(&mut *conn).await;
                self.end(op, row)
            }
        }
    };
}

requests!(sqlx::postgres::PgConnection, sqlx::Postgres);
requests!(sqlx::mysql::MySqlConnection, sqlx::MySql);

#[cfg(test)]
mod tests {
    use super::*;

    fn protocol(e: &sqlx::Error) -> bool {
        matches!(e, sqlx::Error::Protocol(_))
    }

    fn row_not_found(e: &sqlx::Error) -> bool {
        matches!(e, sqlx::Error::RowNotFound)
    }

    /// A refused right is bad input naming the table and the user; a lost creation
    /// race is done; any other error is the store's, and an answer passes through.
    #[test]
    fn a_preparing_answer_is_bad_input_only_when_the_right_is_refused() {
        let table = Table::parse("app.leases").expect("a table");
        let who = (&table, "lk");
        let checks: (ErrorCheck, ErrorCheck) = (protocol, row_not_found);
        let mut s =
            Session::<sqlx::postgres::PgConnection>::new(sqlx::postgres::PgConnectOptions::new());
        let refused = s.end_preparing::<()>(Err(sqlx::Error::Protocol("no".into())), who, checks);
        match refused {
            Err(TableError::NotAllowed { table, user, .. }) => {
                assert_eq!((table.as_str(), user.as_str()), ("app.leases", "lk"));
            }
            other => panic!("not bad input: {other:?}"),
        }
        let raced = s.end_preparing::<()>(Err(sqlx::Error::RowNotFound), who, checks);
        assert!(matches!(raced, Ok(None)));
        let failed = s.end_preparing::<()>(Err(sqlx::Error::PoolClosed), who, checks);
        assert!(matches!(failed, Err(TableError::Backend(_))));
        assert!(matches!(s.end_preparing(Ok(7), who, checks), Ok(Some(7))));
    }
}
