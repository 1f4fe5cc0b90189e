//! The scenarios the `postgres` and `mysql` suites share, against a real server of
//! each (see `pg_server.rs`, `mariadb_server.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::checks::checker::{self, ElectionSpec, Fault, ServerControl};
use crate::common::{eventually, free_port, run_to_exit, Sidecar, SidecarArgs};

/// A database server the SQL scenarios run against.
pub trait SqlDb: ServerControl {
    /// `postgres` or `mysql`.
    fn backend(&self) -> &'static str;
    fn url_for(&self, user: &str) -> String;
    fn port(&self) -> u16;
    /// Runs SQL as the administrator; tab-separated rows.
    fn admin(&self, sql: &str) -> String;
    /// The statement that hands the row to a stranger for one second.
    fn overwrite_sql(&self, election: &str) -> String;
    /// Lets `limited` use an existing lease table (MySQL granted it already).
    fn grant_limited(&self);
    /// Creates user `quiet`, with the rights of `lk`, whose every statement the server
    /// logs (a server of the test's own: the logging is server-wide on MySQL).
    fn log_quiet_user(&self);
    /// How many statements user `quiet` sent so far (see [`SqlDb::log_quiet_user`]).
    fn quiet_statements(&self) -> usize;
}

/// The sidecar's flags for `user` on this server (then `.ttl(…).election(…)`).
pub fn db_flags(db: &dyn SqlDb, user: &str) -> SidecarArgs {
    SidecarArgs::sql(db.backend(), &db.url_for(user))
}

/// `(holder, tenure, token)` of the election's row.
pub fn row(db: &dyn SqlDb, election: &str) -> Option<(String, String, u64)> {
    let out = db.admin(&format!(
        "SELECT holder, tenure, token FROM leasekeeper_leases WHERE election = '{election}'"
    ));
    let line = out.lines().next()?;
    let mut parts = line.split(if db.backend() == "postgres" {
        '|'
    } else {
        '\t'
    });
    let holder = parts.next()?.to_owned();
    let tenure = parts.next()?.to_owned();
    let token = parts.next()?.trim().parse().ok()?;
    Some((holder, tenure, token))
}

/// Borrowed flags, for [`run_to_exit`].
fn strs(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}

fn token_of(v: &serde_json::Value) -> u64 {
    v["fencing_token"].as_u64().expect("a token")
}

/// Acquire, renew, handover, release: the row and its token, from outside.
pub fn lease_row_lifecycle(db: &dyn SqlDb) {
    let dir = tempfile::tempdir().expect("dir");
    let a_args = db_flags(db, "lk").ttl("1s").election("cycle").build();
    let mut a = Sidecar::spawn("a", dir.path(), &a_args);
    let led = a.settles_in("leader", Duration::from_secs(10));
    let t1 = token_of(&led);
    let (holder, tenure, token) = row(db, "cycle").expect("the row, in a table created at start");
    assert_eq!((holder.as_str(), token), ("a", t1));
    assert_eq!(tenure.len(), 32, "a tenure id: {tenure:?}");

    // Several ttls: renewals keep the one tenure.
    std::thread::sleep(Duration::from_millis(2500));
    let later = a.leader().expect("status");
    assert_eq!(later["is_leader"], true, "{later}\n{}", a.stderr());
    assert_eq!(token_of(&later), t1, "the tenure changed without a fault");
    assert!(!a.stderr().contains("lost leadership"), "{}", a.stderr());

    let mut b = Sidecar::spawn("b", dir.path(), &a_args);
    let follows = b.settles_in("follower", Duration::from_secs(10));
    assert_eq!(follows["leader"], "a");
    assert_eq!(token_of(&follows), t1);

    let t0 = Instant::now();
    a.signal(libc::SIGTERM);
    let took = eventually(Duration::from_secs(1), || {
        b.leader().filter(|v| v["is_leader"] == true)
    })
    .unwrap_or_else(|| panic!("b never led after a's graceful stop:\n{}", b.stderr()));
    eprintln!(
        "{} graceful handover seen after {:?}",
        db.backend(),
        t0.elapsed()
    );
    let t2 = token_of(&took);
    assert!(t2 > t1, "token {t2} after {t1}");
    assert!(a
        .wait_exit(Duration::from_secs(5))
        .is_some_and(|s| s.success()));
    assert_eq!(row(db, "cycle").map(|r| (r.0, r.2)), Some(("b".into(), t2)));

    // A release empties the row but keeps its token; the next tenure goes above it.
    assert!(b
        .terminate(Duration::from_secs(5))
        .is_some_and(|s| s.success()));
    let (holder, tenure, token) = row(db, "cycle").expect("the row stays after release");
    assert_eq!((holder.as_str(), tenure.as_str(), token), ("", "", t2));
    let c = Sidecar::spawn("c", dir.path(), &a_args);
    let t3 = token_of(&c.settles_in("leader", Duration::from_secs(10)));
    assert_eq!(t3, t2 + 1, "the token after a release");
}

/// Tokens never go backwards, even when the row is deleted or its token reset behind
/// every sidecar's back (an operator's `DELETE`, a restore of an old backup), and the
/// candidate that comes next has never seen a token: the backend's own counter, not the
/// row, says which tokens were handed out.
pub fn tokens_after_the_row_is_deleted_or_reset(db: &dyn SqlDb) {
    let dir = tempfile::tempdir().expect("dir");
    let args = db_flags(db, "lk").ttl("1s").election("gone").build();
    let lead_once = |name: &str| -> u64 {
        let mut s = Sidecar::spawn(name, dir.path(), &args);
        let token = token_of(&s.settles_in("leader", Duration::from_secs(10)));
        assert!(s
            .terminate(Duration::from_secs(5))
            .is_some_and(|e| e.success()));
        token
    };
    let mut highest = 0;
    for name in ["a", "b", "c"] {
        let t = lead_once(name);
        assert!(t > highest, "token {t} after {highest}");
        highest = t;
    }
    assert!(highest >= 3, "three tenures, token {highest}");

    db.admin("DELETE FROM leasekeeper_leases WHERE election = 'gone'");
    let t = lead_once("d");
    assert!(
        t > highest,
        "token {t} after the row was deleted, but {highest} was handed out before"
    );
    highest = t;

    db.admin(
        "UPDATE leasekeeper_leases SET holder = '', tenure = '', token = 0, expires_at = acquired_at WHERE election = 'gone'",
    );
    let t = lead_once("e");
    assert!(
        t > highest,
        "token {t} after the row's token was reset, but {highest} was handed out before"
    );
}

/// A password in the URL is refused before anything starts; one from a file works
/// and never reaches the log.
pub fn passwords(db: &dyn SqlDb) {
    let setting = format!("--{}-url", db.backend());
    let port = free_port().to_string();
    let flags = db_flags(db, "secret:s3cret")
        .flag("--http-addr", &format!("127.0.0.1:{port}"))
        .build();
    let (code, _, stderr) = run_to_exit(&strs(&flags), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&setting) && stderr.contains("--sql-password-file"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");

    let dir = tempfile::tempdir().expect("dir");
    let pw = dir.path().join("password");
    std::fs::write(&pw, "s3cret\n").expect("write");
    let mut a = db_flags(db, "secret").ttl("2s").election("authed").build();
    a.extend(["--sql-password-file".into(), pw.display().to_string()]);
    let s = Sidecar::spawn("authed", dir.path(), &a);
    s.settles_in("leader", Duration::from_secs(10));
    assert!(
        !s.stderr().contains("s3cret"),
        "the password reached the log"
    );

    // The wrong password: the sidecar runs, unready, and says why.
    std::fs::write(&pw, "wrong\n").expect("write");
    let refused = Sidecar::spawn("refused", dir.path(), &a);
    assert!(refused.wait_listening(Duration::from_secs(10)));
    // Its first round has failed (the password is refused), and it runs on.
    assert!(
        refused.logged("backend call failed", Duration::from_secs(20)),
        "{}",
        refused.stderr()
    );
    assert_eq!(
        crate::common::harness::http::get(refused.port, "/readyz").map(|(c, _)| c),
        Some(503)
    );
}

/// A user who may not create the missing table: one line naming `--sql-table`,
/// exit 2. Once the table exists, the same user needs no such right.
pub fn user_without_create_right(db: &dyn SqlDb) {
    let port = free_port().to_string();
    let flags = db_flags(db, "limited")
        .flag("--http-addr", &format!("127.0.0.1:{port}"))
        .election("limited")
        .ttl("2s")
        .build();
    let t0 = Instant::now();
    let (code, _, stderr) = run_to_exit(&strs(&flags), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: --sql-table leasekeeper_leases")
            && stderr.contains("may not create it")
            && stderr.contains("\"limited\""),
        "{stderr}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));

    // The table made by a user who may; `limited` then leads without CREATE.
    let dir = tempfile::tempdir().expect("dir");
    let owner = Sidecar::spawn(
        "owner",
        dir.path(),
        &db_flags(db, "lk").ttl("2s").election("other").build(),
    );
    owner.settles_in("leader", Duration::from_secs(10));
    db.grant_limited();
    let limited = Sidecar::spawn(
        "limited",
        dir.path(),
        &db_flags(db, "limited")
            .ttl("2s")
            .election("limited")
            .build(),
    );
    limited.settles_in("leader", Duration::from_secs(10));
}

/// See [`super::handovers::switchover_goes_to_the_named_candidate`]: the live
/// candidates and the reservation in `<table>_cands`.
pub fn switchover(db: &dyn SqlDb) {
    let args = db_flags(db, "lk").ttl("3s").election("switch").build();
    super::handovers::switchover_goes_to_the_named_candidate(&args);
}

/// A switchover to a candidate that is listed alive but never takes the row (gone
/// right after it was named): nobody leads while the reservation lasts, the releasing
/// leader neither, and the others take the row once it runs out, one ttl after the
/// release.
pub fn a_reservation_nobody_uses_runs_out(db: &dyn SqlDb) {
    let dir = tempfile::tempdir().expect("dir");
    let mut args = db_flags(db, "lk").ttl("2s").election("unused").build();
    args.push("--enable-release-endpoint".into());
    let a = Sidecar::spawn("a", dir.path(), &args);
    a.settles_in("leader", Duration::from_secs(10));
    let b = Sidecar::spawn("b", dir.path(), &args);
    b.settles_in("follower", Duration::from_secs(10));
    // A candidate whose session lives (it is listed alive) but that never campaigns
    // again: frozen.
    let ghost = Sidecar::spawn("ghost", dir.path(), &args);
    ghost.settles_in("follower", Duration::from_secs(10));
    // (Its presence session is opened again right after its first campaign.)
    std::thread::sleep(Duration::from_millis(500));
    ghost.signal(libc::SIGSTOP);
    let t0 = Instant::now();
    let answer = crate::common::harness::http::post(a.port, "/release?to=ghost");
    assert_eq!(answer.as_ref().map(|r| r.0), Some(200), "{answer:?}");
    let cars = [&a, &b];
    let led = eventually(Duration::from_secs(6), || {
        cars.iter()
            .find(|c| c.leader().is_some_and(|v| v["is_leader"] == true))
            .map(|c| (c.name.clone(), t0.elapsed()))
    });
    let (name, after) = led.expect("nobody led after the reservation ran out");
    eprintln!(
        "{}: {name} led {after:?} after the switchover to ghost",
        db.backend()
    );
    assert!(
        after >= Duration::from_millis(1800),
        "{name} led {after:?} after the release: the reservation for ghost did not hold"
    );
    assert!(
        after < Duration::from_millis(3500),
        "{name} led only {after:?} after the release (ttl 2 s)"
    );
}

/// Verified TLS with a private CA and a client certificate (PostgreSQL: `hostssl …
/// cert`, the certificate is the only way in for that user; MariaDB: `REQUIRE X509`).
/// Without the client certificate the server refuses: the sidecar runs, unready.
pub fn tls_with_a_private_ca_and_a_client_certificate<D: SqlDb>(
    start_tls: impl FnOnce(&Path) -> D,
) {
    let certs = tempfile::tempdir().expect("dir");
    crate::common::make_certs(certs.path());
    let db = start_tls(certs.path());
    let file = |n: &str| certs.path().join(n).display().to_string();
    let dir = tempfile::tempdir().expect("dir");
    let args = db_flags(&db, "client")
        .ttl("2s")
        .election("tls")
        .flag("--sql-ca-file", &file("ca.pem"))
        .flag("--sql-cert-file", &file("client.pem"))
        .flag("--sql-key-file", &file("client.key"))
        .build();
    let secure = Sidecar::spawn("secure", dir.path(), &args);
    secure.settles_in("leader", Duration::from_secs(10));

    let no_cert = db_flags(&db, "client")
        .ttl("2s")
        .election("tls")
        .flag("--sql-ca-file", &file("ca.pem"))
        .build();
    let refused = Sidecar::spawn("refused", dir.path(), &no_cert);
    assert!(refused.wait_listening(Duration::from_secs(10)));
    let unready = eventually(Duration::from_secs(2), || {
        (crate::common::harness::http::get(refused.port, "/readyz").map(|(c, _)| c) == Some(503))
            .then_some(())
    });
    assert!(unready.is_some());
    // Its first round has failed (the server wants a client certificate), and it runs on.
    assert!(
        refused.logged("backend call failed", Duration::from_secs(20)),
        "{}",
        refused.stderr()
    );
    assert_eq!(
        refused.leader().map(|v| v["state"].clone()),
        Some(serde_json::json!("unknown")),
        "{}",
        refused.stderr()
    );
}

/// The checker with leader faults and faults of the database itself.
pub fn checker_with_server_faults(db: &mut dyn SqlDb, rounds: usize) -> checker::Report {
    let args = db_flags(db, "lk").ttl("1s").election("checker").build();
    let plan = (0..rounds)
        .map(|i| match i % 7 {
            1 => Fault::Kill9,
            2 => Fault::PauseLeader,
            3 => Fault::PauseServer,
            4 => Fault::Release,
            5 => Fault::RestartServer,
            _ => Fault::Graceful,
        })
        .collect();
    checker::run(ElectionSpec::three_candidates(
        args,
        Duration::from_secs(1),
        plan,
        Some(db),
    ))
}

/// Partitions, slow links and tampering, judged also against the row.
pub fn checker_with_link_faults(
    db: &dyn SqlDb,
    store: crate::common::harness::recorder::Recorder,
) -> checker::Report {
    let backend = db.backend();
    let user_url = db.url_for("lk");
    let port = db.port();
    let rounds = vec![
        Fault::PartitionLeader,
        Fault::Graceful,
        Fault::SlowLeader,
        Fault::LeaderRepliesHeld,
        Fault::PartitionFollower,
        Fault::TamperDelete,
        Fault::Kill9,
        Fault::TamperOverwrite,
        Fault::Graceful,
    ];
    let delete = "DELETE FROM leasekeeper_leases WHERE election = 'faults'".to_owned();
    let overwrite = db.overwrite_sql("faults");
    let admin_url = user_url.clone();
    checker::run_link_faults(
        Duration::from_secs(1),
        rounds,
        format!("127.0.0.1:{port}").parse().expect("addr"),
        move |addr| args_via(backend, &user_url, port, addr, "1s", "faults"),
        store,
        move |fault| {
            let sql = if fault == Fault::TamperDelete {
                &delete
            } else {
                &overwrite
            };
            admin_exec(backend, &admin_url, sql);
        },
    )
}

/// Backend flags for a sidecar that reaches the server at `addr` (a proxy) instead.
pub fn args_via(
    backend: &str,
    url: &str,
    port: u16,
    addr: &str,
    ttl: &str,
    election: &str,
) -> Vec<String> {
    let url = url.replace(&format!("127.0.0.1:{port}"), addr);
    SidecarArgs::sql(backend, &url)
        .ttl(ttl)
        .election(election)
        .build()
}

/// Runs one statement with the command-line client (the tamper closure must be
/// `'static`, so it cannot borrow the server).
pub fn admin_exec(backend: &str, url: &str, sql: &str) {
    let parsed = url::Url::parse(url).expect("url");
    let port = parsed.port().expect("port").to_string();
    let database = parsed.path().trim_start_matches('/');
    let out = if backend == "postgres" {
        std::process::Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "lk", "-d", database])
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
    } else {
        std::process::Command::new("mariadb")
            .args([
                "-h",
                "127.0.0.1",
                "-P",
                &port,
                "-u",
                "lk",
                database,
                "-e",
                sql,
            ])
            .output()
    }
    .expect("client");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl SqlDb for crate::common::servers::pg_server::PgServer {
    fn backend(&self) -> &'static str {
        "postgres"
    }
    fn url_for(&self, user: &str) -> String {
        crate::common::servers::pg_server::PgServer::url_for(self, user)
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn admin(&self, sql: &str) -> String {
        self.psql(sql)
    }
    fn overwrite_sql(&self, election: &str) -> String {
        format!(
            "UPDATE leasekeeper_leases SET holder = 'intruder', tenure = 'x', token = 0, expires_at = now() + interval '1 second' WHERE election = '{election}'"
        )
    }
    fn grant_limited(&self) {
        self.psql("GRANT SELECT, INSERT, UPDATE ON leasekeeper_leases, leasekeeper_leases_tokens, leasekeeper_leases_cands TO limited");
    }
    /// `log_statement = all` for the role.
    fn log_quiet_user(&self) {
        self.psql("CREATE ROLE quiet LOGIN SUPERUSER; ALTER ROLE quiet SET log_statement = 'all'");
    }
    /// The statements in the server's log: only `quiet`'s are logged.
    fn quiet_statements(&self) -> usize {
        (self.log().lines())
            .filter(|l| l.contains("LOG:  statement: ") || l.contains("LOG:  execute "))
            .count()
    }
}

impl SqlDb for crate::common::servers::mariadb_server::MariaServer {
    fn backend(&self) -> &'static str {
        "mysql"
    }
    fn url_for(&self, user: &str) -> String {
        crate::common::servers::mariadb_server::MariaServer::url_for(self, user)
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn admin(&self, sql: &str) -> String {
        self.sql(&format!("USE {}; {sql}", self.database()))
    }
    fn overwrite_sql(&self, election: &str) -> String {
        format!(
            "UPDATE leasekeeper_leases SET holder = 'intruder', tenure = 'x', token = 0, expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 SECOND WHERE election = '{election}'"
        )
    }
    fn grant_limited(&self) {}
    /// The general log, kept as a table.
    fn log_quiet_user(&self) {
        self.sql(
            "CREATE USER 'quiet'@'127.0.0.1'; GRANT ALL ON lk.* TO 'quiet'@'127.0.0.1';
             SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1;",
        );
    }
    /// Every command of the user in the general log, on any of its connections
    /// (connects, prepares, executes, pings, queries).
    fn quiet_statements(&self) -> usize {
        self.sql("SELECT COUNT(*) FROM mysql.general_log WHERE user_host LIKE 'quiet[quiet]%'")
            .trim()
            .parse::<usize>()
            .unwrap_or(0)
    }
}

/// The tests every SQL backend's suite runs against a server of type `server` (with
/// `start` and `start_tls`), its row recorded by `recorder(url, election)`; each test
/// under the name given after its scenario.
#[allow(unused_macros)]
macro_rules! sql_backend_tests {
    (
        server: $server:ty,
        recorder: $recorder:path,
        lease_row_lifecycle_and_tokens: $lifecycle:ident,
        tokens_never_go_backwards_after_a_deleted_row: $tokens:ident,
        passwords_come_from_a_file_only: $passwords:ident,
        user_without_create_right_gets_one_clear_line: $limited:ident,
        election_survives_the_checker: $checker:ident,
        survives_partitions_slow_links_and_tampering: $links:ident,
        tls_with_a_private_ca_and_a_client_certificate: $tls:ident,
        switchover_goes_to_the_named_candidate: $switch:ident,
        a_reservation_nobody_uses_runs_out_within_a_ttl: $unused:ident $(,)?
    ) => {
        #[test]
        fn $unused() {
            let db = <$server>::shared();
            $crate::common::scenarios::sql_suite::a_reservation_nobody_uses_runs_out(&db);
        }

        #[test]
        fn $switch() {
            let db = <$server>::shared();
            $crate::common::scenarios::sql_suite::switchover(&db);
        }

        #[test]
        fn $lifecycle() {
            let db = <$server>::shared();
            $crate::common::scenarios::sql_suite::lease_row_lifecycle(&db);
        }

        #[test]
        fn $tokens() {
            let db = <$server>::shared();
            $crate::common::scenarios::sql_suite::tokens_after_the_row_is_deleted_or_reset(&db);
        }

        #[test]
        fn $passwords() {
            let db = <$server>::shared();
            $crate::common::scenarios::sql_suite::passwords(&db);
        }

        #[test]
        fn $limited() {
            let db = <$server>::shared();
            $crate::common::scenarios::sql_suite::user_without_create_right(&db);
        }

        #[test]
        fn $checker() {
            use $crate::common::scenarios::sql_suite::SqlDb;
            let mut db = <$server>::start();
            let report =
                $crate::common::scenarios::sql_suite::checker_with_server_faults(&mut db, 14);
            eprintln!("{}: {report:?}", db.backend());
        }

        #[test]
        fn $links() {
            use $crate::common::scenarios::sql_suite::SqlDb;
            let db = <$server>::shared();
            let store = $recorder(db.url(), "faults");
            let report = $crate::common::scenarios::sql_suite::checker_with_link_faults(&db, store);
            eprintln!("{} faults: {report:?}", db.backend());
        }

        #[test]
        fn $tls() {
            $crate::common::scenarios::sql_suite::tls_with_a_private_ca_and_a_client_certificate(
                <$server>::start_tls,
            );
        }
    };
}

// Each SQL suite uses it; other test binaries and the bench do not.
#[allow(unused_imports)]
pub(crate) use sql_backend_tests;

/// A gray failure on SQL: the leader's link turns slow (see
/// [`super::handovers::slow_leader_is_replaced_and_recovers`]).
pub fn slow_leader(db: &dyn SqlDb, link: crate::common::harness::faults::Link) {
    let direct = format!("127.0.0.1:{}", db.port());
    let url = db.url_for("lk");
    assert!(url.contains(&direct), "{url} names {direct}");
    super::handovers::slow_leader_is_replaced_and_recovers(
        &[direct.parse().expect("addr")],
        Duration::from_secs(3),
        link,
        |endpoints| {
            SidecarArgs::sql(db.backend(), &url.replace(&direct, &endpoints[0]))
                .ttl("3s")
                .election("slow")
                .build()
        },
    );
}

// ---------------------------------------------------------------------------------
// The lease row's own rules, each reached directly: candidates built as the sidecar
// builds them (`new` is the dialect's `…Backend::new`), driven through the `Backend`
// trait one call at a time, with the row changed by hand between the calls. No elector
// runs, so nobody looks at a leader's own row: the rule under test is the only
// defence.

use leasekeeper::backend::sql::{Args as SqlArgs, Dialect, SqlSettings};
use leasekeeper::backend::{Backend, BackendError, Campaign, Candidacy, Renewal};
use leasekeeper::timing::Timing;

/// The settings the sidecar reads from `--<backend>-url` for user `lk`.
pub fn settings(db: &dyn SqlDb) -> SqlSettings {
    let url = Some(db.url_for("lk"));
    let (args, dialect) = if db.backend() == "postgres" {
        let args = SqlArgs {
            postgres_url: url,
            ..Default::default()
        };
        (args, Dialect::Postgres)
    } else {
        let args = SqlArgs {
            mysql_url: url,
            ..Default::default()
        };
        (args, Dialect::Mysql)
    };
    args.settings(dialect).expect("sql settings")
}

/// One candidate of `election` with this ttl.
pub fn candidate<B>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
    election: &str,
    identity: &str,
    ttl: Duration,
) -> B {
    let timing = Timing::for_ttl(ttl);
    new(
        &settings(db),
        &Candidacy {
            election,
            identity,
            timing: &timing,
            mode: Default::default(),
        },
    )
    .expect("backend")
}

/// A campaign (or two: MySQL's first look at a missing row inserts it free) that must
/// take the row; its token.
async fn leads<B: Backend>(who: &str, b: &mut B) -> u64 {
    for _ in 0..2 {
        match b.campaign().await {
            Ok(Campaign::Acquired { token }) => return token,
            Ok(Campaign::Held(None)) => {}
            other => panic!("{who} should lead now, its campaign found {other:?}"),
        }
    }
    panic!("{who} should lead now, its campaigns found nobody holding the row")
}

async fn does_not_lead<B: Backend>(who: &str, b: &mut B) {
    let c = b.campaign().await.expect("campaign");
    assert!(
        !matches!(c, Campaign::Acquired { .. }),
        "{who} must not lead now: {c:?}"
    );
}

fn server_now(db: &dyn SqlDb) -> &'static str {
    if db.backend() == "postgres" {
        "now()"
    } else {
        "UTC_TIMESTAMP(6)"
    }
}

/// The election's row expires now (as if its leader were paused for a ttl).
fn expire_row(db: &dyn SqlDb, election: &str) {
    db.admin(&format!(
        "UPDATE leasekeeper_leases SET expires_at = {} WHERE election = '{election}'",
        server_now(db)
    ));
}

/// Renew and release touch only the row of the candidate's own tenure: a leader
/// whose row expired and was taken by another neither extends nor frees it.
pub async fn renew_and_release_act_only_on_the_own_tenure<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let ttl = Duration::from_secs(3);
    let mut a = candidate(db, &new, "own", "A", ttl);
    let mut b = candidate(db, &new, "own", "B", ttl);
    leads("A", &mut a).await;
    does_not_lead("B, while A's row lives", &mut b).await;
    expire_row(db, "own");
    leads("B", &mut b).await;
    expire_row(db, "own");
    assert_eq!(
        a.renew().await.expect("A's renew answers"),
        Renewal::Lost,
        "A's renew moved B's row"
    );
    a.release().await.expect("A's release answers");
    let (holder, _, _) = row(db, "own").expect("the row");
    assert_eq!(holder, "B", "A's release freed B's row");
    // B's row, expired by hand above, is still B's to renew; nobody else took it.
    assert_eq!(b.renew().await.expect("B renews"), Renewal::Renewed);
}

/// Every new tenure gets a greater token, also for a candidate that never saw one
/// (its floor is 0) and after the lease row was deleted: the token counter carries
/// it, and the deleted row comes back fenced for a ttl (a leader may still claim).
pub async fn tokens_grow_for_fresh_candidates_and_after_a_deleted_row<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let ttl = Duration::from_secs(1);
    let mut last = 0;
    for round in 0..3 {
        let mut fresh = candidate(db, &new, "fence", &format!("P{round}"), ttl);
        let token = leads("a fresh candidate", &mut fresh).await;
        assert!(token > last, "round {round}: token {token} after {last}");
        last = token;
        fresh.release().await.expect("release");
    }
    db.admin("DELETE FROM leasekeeper_leases WHERE election = 'fence'");
    let mut fresh = candidate(db, &new, "fence", "Q", ttl);
    // Twice: MySQL's first look inserts the missing row, its second could take it.
    does_not_lead(
        "a fresh candidate right after the row was deleted",
        &mut fresh,
    )
    .await;
    does_not_lead("a fresh candidate, looking again", &mut fresh).await;
    // The rule: the missing row comes back fenced for a ttl.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let token = leads("the fresh candidate, a ttl later", &mut fresh).await;
    assert!(token > last, "token {token} after the deleted row's {last}");
    // The counter's row deleted under a candidate whose tables are ready: a free row
    // is still taken (MySQL seeds the counter again at the campaign that finds no
    // token reserved), with a greater token.
    fresh.release().await.expect("release");
    db.admin("DELETE FROM leasekeeper_leases_tokens WHERE election = 'fence'");
    let mut took = None;
    for _ in 0..3 {
        if let Ok(Campaign::Acquired { token }) = fresh.campaign().await {
            took = Some(token);
            break;
        }
    }
    let again = took.expect("a free row was never taken after the counter's row was deleted");
    assert!(again > token, "token {again} after {token}");
}

/// The leader's own-row watch (`record_lost`) ends soon after another candidate or a
/// person overwrites or deletes the row, and not while the row is its own (its
/// renewals included).
pub async fn the_leader_hears_its_row_taken_but_not_its_own_renewals<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let ttl = Duration::from_secs(3);
    let delete = |e: &str| format!("DELETE FROM leasekeeper_leases WHERE election = '{e}'");
    for (election, tamper) in [
        ("heard1", db.overwrite_sql("heard1")),
        ("heard2", delete("heard2")),
    ] {
        let mut a = candidate(db, &new, election, "A", ttl);
        leads("A", &mut a).await;
        for _ in 0..2 {
            assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
            let own = tokio::time::timeout(Duration::from_millis(500), a.record_lost()).await;
            assert!(own.is_err(), "A's own row read as lost ({election})");
        }
        db.admin(&tamper);
        let heard = tokio::time::timeout(Duration::from_secs(2), a.record_lost()).await;
        assert!(heard.is_ok(), "A never heard of {tamper:?}");
    }
}

/// Candidates that campaign at once for a free row: one takes it, never two (each
/// take is judged by the server against the row as it stands, its expiry included,
/// not against what an earlier statement of the same campaign read).
pub async fn one_of_concurrent_campaigns_takes_a_free_row<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let ttl = Duration::from_secs(3);
    let mut cands: Vec<B> = ["A", "B", "C"]
        .iter()
        .map(|id| candidate(db, &new, "race", id, ttl))
        .collect();
    leads("A", &mut cands[0]).await;
    cands[0].release().await.expect("release");
    let mut won = 0;
    for round in 0..20 {
        let [a, b, c] = &mut cands[..] else {
            unreachable!()
        };
        let (x, y, z) = tokio::join!(a.campaign(), b.campaign(), c.campaign());
        let winners: Vec<usize> = [x, y, z]
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r, Ok(Campaign::Acquired { .. })))
            .map(|(i, _)| i)
            .collect();
        assert!(
            winners.len() <= 1,
            "round {round}: {winners:?} all took the row"
        );
        if let Some(&w) = winners.first() {
            won += 1;
            cands[w].release().await.expect("release");
        }
    }
    assert!(won >= 10, "only {won} of 20 rounds had a winner");
}

/// After `A.release_to("C")`, B (first to look) cannot take the free row; C can,
/// and once C releases, B can.
pub async fn a_switchover_reservation_keeps_the_others_out<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let ttl = Duration::from_secs(3);
    let mut a = candidate(db, &new, "resv", "A", ttl);
    let mut b = candidate(db, &new, "resv", "B", ttl);
    let mut c = candidate(db, &new, "resv", "C", ttl);
    let first = leads("A", &mut a).await;
    does_not_lead("B", &mut b).await;
    does_not_lead("C", &mut c).await;
    live_eventually(&mut a, &["A", "B", "C"]).await;
    a.release_to("C").await.expect("release_to");
    does_not_lead("B, while the row is left to C", &mut b).await;
    let token = leads("C", &mut c).await;
    assert!(token > first);
    // The leader's first look at its own row (MySQL drops the spent reservation there).
    let looked = tokio::time::timeout(Duration::from_millis(300), c.record_lost()).await;
    assert!(looked.is_err(), "C's row looked lost");
    c.release().await.expect("release");
    leads("B, once the reservation is spent", &mut b).await;
}

/// Waits (up to 5 s) until `b` lists exactly `expected`.
pub async fn live_eventually<B: Backend>(b: &mut B, expected: &[&str]) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let mut listed = b.candidates().await.expect("candidates").expect("a list");
        listed.sort();
        if listed == expected {
            return;
        }
        assert!(
            Instant::now() < until,
            "listed {listed:?}, expected {expected:?}"
        );
        // Pause: between looks at the list.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Followers do not refresh anything to stay listed as live candidates (their presence
/// is their session's): no candidate's row in `<table>_cands` changes over 6 s at ttl
/// 2 s at steady state (they moved every second with the periodic listing), and a
/// switchover to a follower still finds it alive.
pub fn followers_do_not_refresh_their_listing(db: &dyn SqlDb) {
    let dir = tempfile::tempdir().expect("dir");
    let mut args = db_flags(db, "lk").ttl("2s").election("quiet").build();
    args.push("--enable-release-endpoint".into());
    let cars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("quiet-{i}"), dir.path(), &args))
        .collect();
    assert!(
        super::handovers::one_leads_the_rest_follow(&cars),
        "never one leader and two followers"
    );
    let rows = || {
        db.admin(
            "SELECT identity, alive_until FROM leasekeeper_leases_cands WHERE election = 'quiet' ORDER BY identity",
        )
    };
    // Observed: the count starts a second after the follower joined (a join's last
    // statements come late on a busy machine).
    std::thread::sleep(Duration::from_secs(1));
    let before = rows();
    // Observed: 6 s of steady leadership, over which the rows must not change.
    std::thread::sleep(Duration::from_secs(6));
    let after = rows();
    eprintln!("{}: {before:?} then {after:?}", db.backend());
    assert_eq!(before.lines().count(), 3, "{before}");
    assert_eq!(
        before, after,
        "the candidates' rows changed at steady state"
    );
    super::handovers::a_switchover_to_a_follower_works(&cars);
}

/// Followers send the server nothing at steady state (DESIGN §9): a follower,
/// connected as its own user `quiet` whose every statement the server counts
/// ([`SqlDb::log_quiet_user`], a server of the test's own), sends none over 3 ttl
/// (ttl 2 s) while the leader renews (one that campaigned at every retry interval
/// would send about 9 statements here). Then the leader is killed (-9) and the
/// follower still takes over (its wait ends with the leader's session).
pub fn followers_send_no_statement_at_steady_state(db: &dyn SqlDb) {
    db.log_quiet_user();
    let statements = || db.quiet_statements();
    let dir = tempfile::tempdir().expect("dir");
    let lead_args = db_flags(db, "lk").ttl("2s").election("hush").build();
    let leader = Sidecar::spawn("hush-a", dir.path(), &lead_args);
    leader.settles_in("leader", Duration::from_secs(10));
    let follow_args = db_flags(db, "quiet").ttl("2s").election("hush").build();
    let follower = Sidecar::spawn("hush-b", dir.path(), &follow_args);
    follower.settles_in("follower", Duration::from_secs(10));
    // Observed: the count starts a second after the follower joined (a join's last
    // statements come late on a busy machine).
    std::thread::sleep(Duration::from_secs(1));
    let before = statements();
    assert!(before > 0, "the follower's statements are not counted");
    // Observed: 6 s of steady leadership, over which the follower must stay silent.
    std::thread::sleep(Duration::from_secs(6));
    let sent = statements() - before;
    eprintln!(
        "{}: the follower sent {sent} statements in 6 s",
        db.backend()
    );
    assert_eq!(
        sent,
        0,
        "the follower sent {sent} statements in 3 ttl; its stderr: {}",
        follower.stderr()
    );
    // Silent, and still current: a follower that reported nothing current for a ttl
    // would answer `unknown` (seen: every silent PostgreSQL follower did, 3 ttl in).
    let view = follower.leader().expect("the follower answers");
    assert_eq!(
        (view["state"].as_str(), view["leader"].as_str()),
        (Some("follower"), Some("hush-a")),
        "a silent follower no longer names the leader: {view}"
    );
    leader.signal(libc::SIGKILL);
    let took = eventually(Duration::from_secs(6), || {
        follower.leader().filter(|v| v["is_leader"] == true)
    });
    assert!(
        took.is_some(),
        "the follower never took over after kill -9: {}",
        follower.stderr()
    );
}

/// The store-rule tests of one SQL suite: `new` builds a candidate of its dialect.
#[allow(unused_macros)]
macro_rules! sql_store_rule_tests {
    (server: $server:ty, new: $new:path $(,)?) => {
        mod store_rules {
            use $crate::common::scenarios::backend_switchover::runtime;
            use $crate::common::scenarios::sql_suite as suite;

            #[test]
            fn renew_and_release_act_only_on_the_own_tenure() {
                let db = <$server>::shared();
                runtime().block_on(suite::renew_and_release_act_only_on_the_own_tenure(
                    &db, $new,
                ));
            }

            #[test]
            fn tokens_grow_for_fresh_candidates_and_after_a_deleted_row() {
                let db = <$server>::shared();
                runtime().block_on(
                    suite::tokens_grow_for_fresh_candidates_and_after_a_deleted_row(&db, $new),
                );
            }

            #[test]
            fn followers_do_not_refresh_their_listing() {
                let db = <$server>::shared();
                suite::followers_do_not_refresh_their_listing(&db);
            }

            #[test]
            fn the_leader_hears_its_row_taken_but_not_its_own_renewals() {
                let db = <$server>::shared();
                runtime().block_on(
                    suite::the_leader_hears_its_row_taken_but_not_its_own_renewals(&db, $new),
                );
            }

            #[test]
            fn one_of_concurrent_campaigns_takes_a_free_row() {
                let db = <$server>::shared();
                runtime().block_on(suite::one_of_concurrent_campaigns_takes_a_free_row(
                    &db, $new,
                ));
            }

            #[test]
            fn a_switchover_reservation_keeps_the_others_out() {
                let db = <$server>::shared();
                runtime().block_on(suite::a_switchover_reservation_keeps_the_others_out(
                    &db, $new,
                ));
            }
        }
    };
}

#[allow(unused_imports)]
pub(crate) use sql_store_rule_tests;
