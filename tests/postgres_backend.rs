//! The postgres backend against a real PostgreSQL 15: the lease row and its token,
//! passwords, a user without the right to create the table, and the election
//! checker with leader, server and link faults and tampering with the row.

mod common;

use common::pg_server::PgServer;
use common::recorder::Recorder;
use common::sql_suite;

#[test]
fn postgres_lease_row_lifecycle_and_tokens() {
    let db = PgServer::start();
    sql_suite::lease_row_lifecycle(&db);
}

#[test]
fn postgres_passwords_come_from_a_file_only() {
    let db = PgServer::start();
    sql_suite::passwords(&db);
}

#[test]
fn postgres_user_without_create_right_gets_one_clear_line() {
    let db = PgServer::start();
    sql_suite::user_without_create_right(&db);
}

#[test]
fn postgres_election_survives_the_checker() {
    let mut db = PgServer::start();
    let report = sql_suite::checker_with_server_faults(&mut db, 14);
    eprintln!("postgres: {report:?}");
}

#[test]
fn postgres_survives_partitions_slow_links_and_tampering() {
    let db = PgServer::start();
    let store = Recorder::postgres(db.url(), "faults");
    let report = sql_suite::checker_with_link_faults(&db, store);
    eprintln!("postgres faults: {report:?}");
}

/// Verified TLS with a private CA and a client certificate (`hostssl … cert`: the
/// certificate is the only way in for that user).
#[test]
fn postgres_tls_with_a_private_ca_and_a_client_certificate() {
    use common::{eventually, http, Sidecar, SidecarArgs};
    use std::time::Duration;
    let certs = tempfile::tempdir().expect("dir");
    common::make_certs(certs.path());
    let db = PgServer::start_tls(certs.path());
    let file = |n: &str| certs.path().join(n).display().to_string();
    let url = db.url_for("client");
    let dir = tempfile::tempdir().expect("dir");
    let mut args = SidecarArgs::postgres(&url)
        .ttl("2s")
        .election("tls")
        .build();
    args.extend([
        "--sql-ca-file".into(),
        file("ca.pem"),
        "--sql-cert-file".into(),
        file("client.pem"),
        "--sql-key-file".into(),
        file("client.key"),
    ]);
    let secure = Sidecar::spawn("secure", dir.path(), &args);
    secure.settles_in("leader", Duration::from_secs(10));

    // Without the client certificate the server refuses: the sidecar runs, unready.
    let mut no_cert = SidecarArgs::postgres(&url)
        .ttl("2s")
        .election("tls")
        .build();
    no_cert.extend(["--sql-ca-file".into(), file("ca.pem")]);
    let refused = Sidecar::spawn("refused", dir.path(), &no_cert);
    assert!(refused.wait_listening(Duration::from_secs(10)));
    let unready = eventually(Duration::from_secs(2), || {
        (http::get(refused.port, "/readyz").map(|(c, _)| c) == Some(503)).then_some(())
    });
    assert!(unready.is_some());
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        refused.leader().map(|v| v["state"].clone()),
        Some(serde_json::json!("unknown")),
        "{}",
        refused.stderr()
    );
}

/// A database that is not there yet is not bad input: the sidecar runs, unready and
/// "unknown", and leads (creating the table) once the server appears on that port.
#[test]
fn postgres_unreachable_at_start_is_not_bad_input() {
    use common::{eventually, http, Sidecar, SidecarArgs};
    use std::time::Duration;
    let port = common::free_port();
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("postgres://lk@127.0.0.1:{port}/lk");
    let early = Sidecar::spawn(
        "early",
        dir.path(),
        &SidecarArgs::postgres(&url)
            .ttl("2s")
            .election("early")
            .build(),
    );
    assert!(
        early.wait_listening(Duration::from_secs(10)),
        "{}",
        early.stderr()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(http::get(early.port, "/readyz").map(|(c, _)| c), Some(503));
    let v = early.leader().expect("/leader answers");
    assert_eq!(v["state"], "unknown");
    assert_eq!(v["is_leader"], false);

    let db = PgServer::start_on(port);
    let led = eventually(Duration::from_secs(15), || {
        early.leader().filter(|v| v["is_leader"] == true)
    });
    assert!(
        led.is_some(),
        "never led once the server came up:\n{}",
        early.stderr()
    );
    assert_eq!(
        common::sql_suite::row(&db, "early").map(|r| r.0),
        Some("early".to_owned())
    );
}
