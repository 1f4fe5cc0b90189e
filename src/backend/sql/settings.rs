//! The SQL flags (`--postgres-url`, `--mysql-url` and the `--sql-*` settings, one set
//! for both dialects), read and checked into [`SqlSettings`].

use std::path::PathBuf;

use crate::settings::{
    bad, cert_and_key, optional_pem, read_pem, read_secret_file, redact, ConfigError,
};

/// The SQL flags.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
#[command(next_help_heading = "PostgreSQL and MySQL backends")]
pub struct Args {
    /// postgres://user@host:port/db (password from --sql-password-file).
    #[arg(long, value_name = "URL", env = "LEASEKEEPER_POSTGRES_URL")]
    pub postgres_url: Option<String>,
    /// mysql://user@host:port/db, MySQL or MariaDB (password from --sql-password-file).
    #[arg(long, value_name = "URL", env = "LEASEKEEPER_MYSQL_URL")]
    pub mysql_url: Option<String>,
    /// Lease table, table or schema.table; created if missing [default: leasekeeper_leases].
    #[arg(long, value_name = "TABLE", env = "LEASEKEEPER_SQL_TABLE")]
    pub sql_table: Option<String>,
    /// File holding the SQL user's password.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_SQL_PASSWORD_FILE")]
    pub sql_password_file: Option<PathBuf>,
    /// PEM CA bundle of the database server; turns on verified TLS.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_SQL_CA_FILE")]
    pub sql_ca_file: Option<PathBuf>,
    /// PEM client certificate for the database (with --sql-key-file).
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_SQL_CERT_FILE")]
    pub sql_cert_file: Option<PathBuf>,
    /// PEM private key of the database client certificate.
    #[arg(long, value_name = "FILE", env = "LEASEKEEPER_SQL_KEY_FILE")]
    pub sql_key_file: Option<PathBuf>,
}

/// The lease table's name when `--sql-table` is not given.
pub const DEFAULT_TABLE: &str = "leasekeeper_leases";

/// What the token counters' table adds to the lease table's name.
const COUNTER_SUFFIX: &str = "_tokens";

/// What the live candidates' table adds to the lease table's name (no longer than
/// [`COUNTER_SUFFIX`], so that every lease table name allowed before still fits 63).
const CANDIDATES_SUFFIX: &str = "_cands";

/// What the shared holders' table (`--mode`) adds to the lease table's name (no longer
/// than [`COUNTER_SUFFIX`] either).
const SHARED_SUFFIX: &str = "_shared";

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

    /// The backend's name (`--backend`).
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
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
        let ident_ok = |s: &str, max: usize| {
            !s.is_empty()
                && s.len() <= max
                && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        let (schema, name) = match raw.split_once('.') {
            Some((s, n)) => (Some(s), n),
            None => (None, raw),
        };
        // The token counters' table is named `<name>_tokens` and the candidates'
        // `<name>_cands` and the shared holders' `<name>_shared`, which must fit 63 too.
        let longest_name = 63
            - (COUNTER_SUFFIX.len())
                .max(CANDIDATES_SUFFIX.len())
                .max(SHARED_SUFFIX.len());
        if !ident_ok(name, longest_name) || schema.is_some_and(|s| !ident_ok(s, 63)) {
            return Err(bad(format!(
                "--sql-table {raw:?} is not a table name; use lowercase letters, digits and '_' (at most {longest_name} for the table, 63 for a schema, not starting with a digit), optionally as schema.table"
            )));
        }
        Ok(Table {
            schema: schema.map(str::to_owned),
            name: name.to_owned(),
        })
    }

    /// The table of the election's token counters beside it: `<name>_tokens`, in the
    /// same schema (see the parent module).
    pub fn counter(&self) -> Table {
        Table {
            schema: self.schema.clone(),
            name: format!("{}{COUNTER_SUFFIX}", self.name),
        }
    }

    /// The table of the election's live candidates and a switchover's reservation
    /// beside it: `<name>_cands`, in the same schema (see the parent module).
    pub fn candidates(&self) -> Table {
        Table {
            schema: self.schema.clone(),
            name: format!("{}{CANDIDATES_SUFFIX}", self.name),
        }
    }

    /// The table of the election's shared holders and waiting writers beside it
    /// (`--mode`): `<name>_shared`, in the same schema (see the parent module).
    pub fn shared(&self) -> Table {
        Table {
            schema: self.schema.clone(),
            name: format!("{}{SHARED_SUFFIX}", self.name),
        }
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

/// What both dialects read from the flags before building their connect options.
struct Common<'a> {
    setting: &'static str,
    raw: &'a str,
    shown: String,
    password: Option<String>,
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
    /// Whether the URL sets the TLS mode itself (then a CA does not change it).
    tls_mode_in_url: bool,
}

impl Args {
    /// `--postgres-url`/`--mysql-url` and the `--sql-*` settings, checked and read.
    pub fn settings(&self, dialect: Dialect) -> Result<SqlSettings, ConfigError> {
        let table = Table::parse(self.sql_table.as_deref().unwrap_or(DEFAULT_TABLE))?;
        let c = self.common(dialect)?;
        let connect = match dialect {
            Dialect::Postgres => postgres_options(&c)?,
            Dialect::Mysql => mysql_options(&c, &table)?,
        };
        Ok(SqlSettings {
            url: c.shown,
            table,
            connect,
        })
    }

    fn common(&self, dialect: Dialect) -> Result<Common<'_>, ConfigError> {
        let setting = dialect.url_setting();
        let (raw, example, schemes): (_, _, &[&str]) = match dialect {
            Dialect::Postgres => (
                self.postgres_url.as_deref(),
                "postgres://leasekeeper@127.0.0.1:5432/app",
                &["postgres", "postgresql"],
            ),
            Dialect::Mysql => (
                self.mysql_url.as_deref(),
                "mysql://leasekeeper@127.0.0.1:3306/app",
                &["mysql", "mariadb"],
            ),
        };
        let raw = raw.map(str::trim).unwrap_or("");
        if raw.is_empty() {
            return Err(bad(format!(
                "{setting} is required with --backend {}; write it like {example}",
                dialect.name()
            )));
        }
        let shown = redact(raw);
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
        Ok(Common {
            setting,
            raw,
            shown,
            password: self
                .sql_password_file
                .as_deref()
                .map(|p| read_secret_file("--sql-password-file", p))
                .transpose()?,
            ca: optional_pem("--sql-ca-file", self.sql_ca_file.as_deref(), read_pem)?,
            client: cert_and_key(
                "--sql",
                self.sql_cert_file.as_deref(),
                self.sql_key_file.as_deref(),
                read_pem,
            )?,
            tls_mode_in_url: url
                .query_pairs()
                .any(|(k, _)| k == "sslmode" || k == "ssl-mode"),
        })
    }
}

fn postgres_options(c: &Common) -> Result<SqlConnect, ConfigError> {
    use sqlx::postgres::{PgConnectOptions, PgSslMode};
    let (setting, shown) = (c.setting, &c.shown);
    let mut o: PgConnectOptions = c
        .raw
        .parse()
        .map_err(|e| bad(format!("{setting} {shown:?}: {e}")))?;
    if let Some(p) = &c.password {
        o = o.password(p);
    }
    if let Some(ca) = &c.ca {
        o = o.ssl_root_cert_from_pem(ca.clone());
        if !c.tls_mode_in_url {
            o = o.ssl_mode(PgSslMode::VerifyFull);
        }
    }
    if let Some((cert, key)) = &c.client {
        o = o
            .ssl_client_cert_from_pem(cert)
            .ssl_client_key_from_pem(key);
    }
    if matches!(o.get_ssl_mode(), PgSslMode::Disable) && (c.ca.is_some() || c.client.is_some()) {
        return Err(bad(format!(
            "{setting} {shown:?} turns TLS off (sslmode=disable), but TLS files were given"
        )));
    }
    Ok(SqlConnect::Postgres(o.application_name("leasekeeper")))
}

fn mysql_options(c: &Common, table: &Table) -> Result<SqlConnect, ConfigError> {
    use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
    let (setting, shown) = (c.setting, &c.shown);
    let mut o: MySqlConnectOptions = c
        .raw
        .parse()
        .map_err(|e| bad(format!("{setting} {shown:?}: {e}")))?;
    if let Some(p) = &c.password {
        o = o.password(p);
    }
    if let Some(ca) = &c.ca {
        o = o.ssl_ca_from_pem(ca.clone());
        if !c.tls_mode_in_url {
            o = o.ssl_mode(MySqlSslMode::VerifyIdentity);
        }
    }
    if let Some((cert, key)) = &c.client {
        o = o
            .ssl_client_cert_from_pem(cert)
            .ssl_client_key_from_pem(key);
    }
    if matches!(o.get_ssl_mode(), MySqlSslMode::Disabled) && (c.ca.is_some() || c.client.is_some())
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
    Ok(SqlConnect::Mysql(o))
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        sql: Args,
    }

    fn parse(args: &[&str]) -> Result<SqlSettings, ConfigError> {
        let mut all = vec!["leasekeeper"];
        all.extend_from_slice(args);
        let cli = Cli::try_parse_from(all).expect("flags");
        let dialect = if cli.sql.mysql_url.is_some() {
            Dialect::Mysql
        } else {
            Dialect::Postgres
        };
        cli.sql.settings(dialect)
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
        let longest = "x".repeat(56);
        assert_eq!(
            Table::parse(&format!("{}.{longest}", "s".repeat(63)))
                .expect("ok")
                .counter()
                .display(),
            format!("{}.{longest}_tokens", "s".repeat(63))
        );
        assert_eq!(
            Table::parse(&longest).expect("ok").candidates().quoted('`'),
            format!("`{longest}_cands`")
        );
        for bad in [
            "",
            "Leases",
            "1x",
            "a-b",
            "a.b.c",
            "x;drop",
            "a b",
            &"x".repeat(57),
            &format!("{}.x", "s".repeat(64)),
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
