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
//! | `token` | fencing token of the last tenure: bumped on every new tenure, never reset |
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
//!   `greatest(token, floor) + 1`, where `floor` is the highest token this candidate
//!   has seen. A missing row is inserted — as ours when this candidate has never seen
//!   a token, and otherwise (someone deleted the row while tokens were out) as a
//!   *quarantine* row nobody holds, expiring a ttl later, so that a leader still
//!   claiming on the deleted row runs out first and the next token continues above the
//!   highest one seen;
//! - **renew** and **release** act only on the row whose `tenure` is ours: renew moves
//!   `expires_at` to a ttl from now, release empties `holder` and `tenure` and expires
//!   the row now. The row and its token stay: tokens only grow, also across releases.
//!
//! **The leader watches its own row** (invariant 9): between renewals it reads the
//! row's `tenure` every [`OWN_ROW_EVERY`] and steps down as soon as it is no longer
//! its own (deleted, overwritten, taken).
//!
//! How followers learn of a change (PostgreSQL `LISTEN/NOTIFY`, a MySQL/MariaDB named
//! lock) is each dialect's own; both also wake at the observed holder's expiry, and
//! at the retry interval at the latest.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{BackendError, Campaign};
use crate::config::{bad, read_pem, read_secret_file, Cli, ConfigError};
use crate::status::{FencingToken, Holder};

pub mod mysql;
pub mod postgres;

/// The lease table's name when `--sql-table` is not given.
pub const DEFAULT_TABLE: &str = "leasekeeper_leases";

/// The two SQL dialects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Mysql,
}

impl Dialect {
    fn url_setting(self) -> &'static str {
        match self {
            Dialect::Postgres => "--postgres-url",
            Dialect::Mysql => "--mysql-url",
        }
    }
}

/// The lease table, `table` or `schema.table`, each part a plain lowercase identifier
/// (checked once here, so that it can be written into statements as it is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub schema: Option<String>,
    pub name: String,
}

impl Table {
    pub fn parse(raw: &str) -> Result<Table, ConfigError> {
        let raw = raw.trim();
        let ident_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        let (schema, name) = match raw.split_once('.') {
            Some((s, n)) => (Some(s), n),
            None => (None, raw),
        };
        if !ident_ok(name) || schema.is_some_and(|s| !ident_ok(s)) {
            return Err(bad(format!(
                "--sql-table {raw:?} is not a table name; use lowercase letters, digits and '_' (at most 63, not starting with a digit), optionally as schema.table"
            )));
        }
        Ok(Table {
            schema: schema.map(str::to_owned),
            name: name.to_owned(),
        })
    }

    /// The name quoted with `q` (`"` for PostgreSQL, `` ` `` for MySQL).
    pub fn quoted(&self, q: char) -> String {
        match &self.schema {
            Some(s) => format!("{q}{s}{q}.{q}{}{q}", self.name),
            None => format!("{q}{}{q}", self.name),
        }
    }

    /// As the user wrote it.
    pub fn display(&self) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// How to reach the database: the dialect's connect options, read and checked.
#[derive(Clone)]
pub struct SqlSettings {
    /// The URL without any secret, for logs.
    pub url: String,
    pub table: Table,
    pub connect: SqlConnect,
}

/// The client library's own connect options (they carry the password: never printed).
#[derive(Clone)]
pub enum SqlConnect {
    Postgres(sqlx::postgres::PgConnectOptions),
    Mysql(sqlx::mysql::MySqlConnectOptions),
}

impl SqlSettings {
    pub fn dialect(&self) -> Dialect {
        match self.connect {
            SqlConnect::Postgres(_) => Dialect::Postgres,
            SqlConnect::Mysql(_) => Dialect::Mysql,
        }
    }
}

impl std::fmt::Debug for SqlSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSettings")
            .field("dialect", &self.dialect())
            .field("url", &self.url)
            .field("table", &self.table.display())
            .finish()
    }
}

/// `--postgres-url`/`--mysql-url` and the `--sql-*` settings, checked and read.
pub fn settings(cli: &Cli, dialect: Dialect) -> Result<SqlSettings, ConfigError> {
    let setting = dialect.url_setting();
    let (raw, example, schemes): (_, _, &[&str]) = match dialect {
        Dialect::Postgres => (
            cli.postgres_url.as_deref(),
            "postgres://leasekeeper@127.0.0.1:5432/app",
            &["postgres", "postgresql"],
        ),
        Dialect::Mysql => (
            cli.mysql_url.as_deref(),
            "mysql://leasekeeper@127.0.0.1:3306/app",
            &["mysql", "mariadb"],
        ),
    };
    let raw = raw.map(str::trim).unwrap_or("");
    let backend = match dialect {
        Dialect::Postgres => "postgres",
        Dialect::Mysql => "mysql",
    };
    if raw.is_empty() {
        return Err(bad(format!(
            "{setting} is required with --backend {backend}; write it like {example}"
        )));
    }
    let shown = crate::config::redact(raw);
    let url = url::Url::parse(raw).map_err(|e| {
        bad(format!(
            "{setting} {shown:?} is not a URL ({e}); write it like {example}"
        ))
    })?;
    if !schemes.contains(&url.scheme()) {
        return Err(bad(format!(
            "{setting} {shown:?} must start with {}://, like {example}",
            schemes[0]
        )));
    }
    let password_in_query = url.query_pairs().any(|(k, _)| k == "password");
    if url.password().is_some() || password_in_query {
        return Err(bad(format!(
            "{setting} {:?} carries a password; put it in --sql-password-file instead (a URL shows in the process list)",
            redact_query(&shown)
        )));
    }
    let table = Table::parse(cli.sql_table.as_deref().unwrap_or(DEFAULT_TABLE))?;
    let password = cli
        .sql_password_file
        .as_deref()
        .map(|p| read_secret_file("--sql-password-file", p))
        .transpose()?;
    let ca = cli
        .sql_ca_file
        .as_deref()
        .map(|p| read_pem("--sql-ca-file", p))
        .transpose()?;
    let client = match (&cli.sql_cert_file, &cli.sql_key_file) {
        (Some(c), Some(k)) => Some((
            read_pem("--sql-cert-file", c)?,
            read_pem("--sql-key-file", k)?,
        )),
        (None, None) => None,
        (Some(_), None) => return Err(bad("--sql-cert-file needs --sql-key-file too")),
        (None, Some(_)) => return Err(bad("--sql-key-file needs --sql-cert-file too")),
    };
    let tls_mode_in_url = url
        .query_pairs()
        .any(|(k, _)| k == "sslmode" || k == "ssl-mode");
    let connect = match dialect {
        Dialect::Postgres => {
            use sqlx::postgres::{PgConnectOptions, PgSslMode};
            let mut o: PgConnectOptions = raw
                .parse()
                .map_err(|e| bad(format!("{setting} {shown:?}: {e}")))?;
            if let Some(p) = &password {
                o = o.password(p);
            }
            if let Some(ca) = ca {
                o = o.ssl_root_cert_from_pem(ca);
                if !tls_mode_in_url {
                    o = o.ssl_mode(PgSslMode::VerifyFull);
                }
            }
            if let Some((cert, key)) = &client {
                o = o
                    .ssl_client_cert_from_pem(cert)
                    .ssl_client_key_from_pem(key);
            }
            if matches!(o.get_ssl_mode(), PgSslMode::Disable)
                && (cli.sql_ca_file.is_some() || client.is_some())
            {
                return Err(bad(format!(
                    "{setting} {shown:?} turns TLS off (sslmode=disable), but TLS files were given"
                )));
            }
            SqlConnect::Postgres(o.application_name("leasekeeper"))
        }
        Dialect::Mysql => {
            use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
            let mut o: MySqlConnectOptions = raw
                .parse()
                .map_err(|e| bad(format!("{setting} {shown:?}: {e}")))?;
            if let Some(p) = &password {
                o = o.password(p);
            }
            if let Some(ca) = ca {
                o = o.ssl_ca_from_pem(ca);
                if !tls_mode_in_url {
                    o = o.ssl_mode(MySqlSslMode::VerifyIdentity);
                }
            }
            if let Some((cert, key)) = &client {
                o = o
                    .ssl_client_cert_from_pem(cert)
                    .ssl_client_key_from_pem(key);
            }
            if matches!(o.get_ssl_mode(), MySqlSslMode::Disabled)
                && (cli.sql_ca_file.is_some() || client.is_some())
            {
                return Err(bad(format!(
                    "{setting} {shown:?} turns TLS off (ssl-mode=disabled), but TLS files were given"
                )));
            }
            if o.get_database().is_none() && table.schema.is_none() {
                return Err(bad(format!(
                    "{setting} {shown:?} names no database; add it to the URL (mysql://user@host:3306/app) or write --sql-table as database.table"
                )));
            }
            SqlConnect::Mysql(o)
        }
    };
    Ok(SqlSettings {
        url: shown,
        table,
        connect,
    })
}

/// Hides a `password=` query parameter's value.
fn redact_query(url: &str) -> String {
    match url.split_once('?') {
        Some((base, query)) => {
            let parts: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some(("password", _)) => "password=***".to_owned(),
                    _ => kv.to_owned(),
                })
                .collect();
            format!("{base}?{}", parts.join("&"))
        }
        None => url.to_owned(),
    }
}

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

/// The row as one statement saw it.
#[derive(Debug, Clone)]
pub(crate) struct LeaseRow {
    pub holder: String,
    pub tenure: String,
    pub token: i64,
    /// How long until the row expires, by the server's clock (0 when expired).
    pub left_ms: i64,
}

/// This candidate's side of the lease row: its tenure id, the highest token it has
/// seen, and what it observed last. Shared by both dialects.
pub(crate) struct Tenancy {
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

/// A follower's wait: `wake`, the observed holder's expiry (used once), or `max`.
pub(crate) async fn wait_for(wake: &Notify, hint: &mut Option<Instant>, max: Duration) {
    let mut until = Instant::now() + max;
    if let Some(h) = hint.take() {
        until = until.min(h);
    }
    tokio::select! {
        _ = wake.notified() => {}
        _ = tokio::time::sleep_until(until) => {}
    }
}

/// One connection for the lease statements. A request that did not finish (the
/// elector dropped it on its timeout) leaves the connection in an unknown state: the
/// next request opens a fresh one, and so does any error below SQL (I/O, TLS,
/// protocol). Each fresh connection is announced on `reconnected`, so that the
/// dialect's wake-up connection is renewed with it (a partition that broke one may
/// have left the other half-open).
pub(crate) struct Session<C: sqlx::Connection> {
    options: <C as sqlx::Connection>::Options,
    conn: Option<C>,
    in_flight: bool,
    pub reconnected: Arc<Notify>,
}

impl<C: sqlx::Connection> Session<C> {
    pub fn new(options: <C as sqlx::Connection>::Options) -> Self {
        Session {
            options,
            conn: None,
            in_flight: false,
            reconnected: Arc::new(Notify::new()),
        }
    }

    /// Starts a request: the connection, opened if needed.
    pub async fn begin(&mut self, op: &'static str) -> Result<&mut C, BackendError> {
        if std::mem::replace(&mut self.in_flight, true) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let conn = C::connect_with(&self.options).await.map_err(sql(op))?;
            self.reconnected.notify_one();
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<SqlSettings, ConfigError> {
        let mut all = vec!["leasekeeper"];
        all.extend_from_slice(args);
        let cli = Cli::try_parse_from(all).expect("flags");
        let dialect = if cli.mysql_url.is_some() {
            Dialect::Mysql
        } else {
            Dialect::Postgres
        };
        settings(&cli, dialect)
    }

    #[test]
    fn table_names_are_plain_identifiers() {
        assert_eq!(
            Table::parse("leases").expect("ok").quoted('"'),
            "\"leases\""
        );
        assert_eq!(
            Table::parse("ops.leases").expect("ok").quoted('`'),
            "`ops`.`leases`"
        );
        for bad in [
            "",
            "Leases",
            "1x",
            "a-b",
            "a.b.c",
            "x;drop",
            "a b",
            &"x".repeat(64),
        ] {
            let e = Table::parse(bad).expect_err(bad).to_string();
            assert!(e.starts_with("--sql-table") && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn urls_are_checked_and_passwords_refused() {
        assert!(parse(&["--postgres-url", "postgres://lk@127.0.0.1:5432/app"]).is_ok());
        assert!(parse(&["--mysql-url", "mysql://lk@127.0.0.1:3306/app"]).is_ok());
        let cases: &[(&[&str], &str)] = &[
            (
                &["--postgres-url", "postgres://lk:s3cret@h/app"],
                "--sql-password-file",
            ),
            (
                &["--postgres-url", "postgres://lk@h/app?password=s3cret"],
                "--sql-password-file",
            ),
            (
                &["--mysql-url", "mysql://lk:s3cret@h/app"],
                "--sql-password-file",
            ),
            (
                &["--postgres-url", "mysql://lk@h/app"],
                "must start with postgres://",
            ),
            (&["--mysql-url", "mysql://lk@h:3306"], "names no database"),
            (&["--postgres-url", "not a url"], "is not a URL"),
            (
                &[
                    "--postgres-url",
                    "postgres://lk@h/app",
                    "--sql-cert-file",
                    "/x",
                ],
                "--sql-cert-file needs --sql-key-file",
            ),
            (
                &[
                    "--postgres-url",
                    "postgres://lk@h/app",
                    "--sql-ca-file",
                    "/nonexistent/ca.pem",
                ],
                "--sql-ca-file /nonexistent/ca.pem",
            ),
            (
                &[
                    "--postgres-url",
                    "postgres://lk@h/app",
                    "--sql-password-file",
                    "/nonexistent",
                ],
                "--sql-password-file /nonexistent",
            ),
            (
                &[
                    "--postgres-url",
                    "postgres://lk@h/app",
                    "--sql-table",
                    "Bad-Name",
                ],
                "--sql-table",
            ),
        ];
        for (args, want) in cases {
            let e = parse(args).expect_err(&format!("{args:?}")).to_string();
            assert!(e.contains(want), "{args:?}: {e}");
            assert!(
                !e.contains("s3cret"),
                "the password reached the message: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_mysql_table_may_name_its_database() {
        let s = parse(&[
            "--mysql-url",
            "mysql://lk@h:3306",
            "--sql-table",
            "app.leases",
        ])
        .expect("database from the table");
        assert_eq!(s.table.schema.as_deref(), Some("app"));
    }
}
