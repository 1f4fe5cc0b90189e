//! The mysql backend against a real MariaDB 10.11: the lease row and its token,
//! passwords, a user without the right to create the table, and the election
//! checker with leader, server and link faults and tampering with the row.

mod common;

use common::mariadb_server::MariaServer;
use common::recorder::Recorder;
use common::sql_suite;

#[test]
fn mysql_lease_row_lifecycle_and_tokens() {
    let db = MariaServer::start();
    sql_suite::lease_row_lifecycle(&db);
}

#[test]
fn mysql_passwords_come_from_a_file_only() {
    let db = MariaServer::start();
    sql_suite::passwords(&db);
}

#[test]
fn mysql_user_without_create_right_gets_one_clear_line() {
    let db = MariaServer::start();
    sql_suite::user_without_create_right(&db);
}

#[test]
fn mysql_election_survives_the_checker() {
    let mut db = MariaServer::start();
    let report = sql_suite::checker_with_server_faults(&mut db, 14);
    eprintln!("mysql: {report:?}");
}

#[test]
fn mysql_survives_partitions_slow_links_and_tampering() {
    let db = MariaServer::start();
    let store = Recorder::mysql(db.url(), "faults");
    let report = sql_suite::checker_with_link_faults(&db, store);
    eprintln!("mysql faults: {report:?}");
}

/// Verified TLS with a private CA and a client certificate (`REQUIRE X509`).
#[test]
fn mysql_tls_with_a_private_ca_and_a_client_certificate() {
    use common::{eventually, http, Sidecar, SidecarArgs};
    use std::time::Duration;
    let certs = tempfile::tempdir().expect("dir");
    common::make_certs(certs.path());
    let db = MariaServer::start_tls(certs.path());
    let file = |n: &str| certs.path().join(n).display().to_string();
    let url = db.url_for("client");
    let dir = tempfile::tempdir().expect("dir");
    let mut args = SidecarArgs::mysql(&url).ttl("2s").election("tls").build();
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

    let mut no_cert = SidecarArgs::mysql(&url).ttl("2s").election("tls").build();
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
