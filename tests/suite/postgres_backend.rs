//! The postgres backend against a real PostgreSQL 15: the lease row and its token (also
//! after the row is deleted), passwords, a user without the right to create the table,
//! the election checker with leader, server and link faults and tampering with the row,
//! and verified TLS with a client certificate (`hostssl … cert`); the scenarios are
//! `common::scenarios::sql_suite`'s.
//! Also: a server that is not there yet at start.

use crate::common;

use common::harness::recorder::Recorder;
use common::servers::pg_server::PgServer;

common::scenarios::sql_suite::sql_backend_tests! {
    server: crate::common::servers::pg_server::PgServer,
    recorder: Recorder::postgres,
    lease_row_lifecycle_and_tokens: postgres_lease_row_lifecycle_and_tokens,
    tokens_never_go_backwards_after_a_deleted_row: postgres_tokens_never_go_backwards_after_a_deleted_row,
    passwords_come_from_a_file_only: postgres_passwords_come_from_a_file_only,
    user_without_create_right_gets_one_clear_line: postgres_user_without_create_right_gets_one_clear_line,
    election_survives_the_checker: postgres_election_survives_the_checker,
    survives_partitions_slow_links_and_tampering: postgres_survives_partitions_slow_links_and_tampering,
    tls_with_a_private_ca_and_a_client_certificate: postgres_tls_with_a_private_ca_and_a_client_certificate,
    switchover_goes_to_the_named_candidate: postgres_switchover_goes_to_the_named_candidate,
    a_reservation_nobody_uses_runs_out_within_a_ttl: postgres_a_reservation_nobody_uses_runs_out_within_a_ttl,
}

common::scenarios::sql_suite::sql_store_rule_tests! {
    server: crate::common::servers::pg_server::PgServer,
    new: leasekeeper::backend::sql::postgres::PostgresBackend::new,
}

/// See [`common::scenarios::sql_suite::followers_send_no_statement_at_steady_state`].
#[test]
fn postgres_followers_send_no_statement_at_steady_state() {
    let db = PgServer::start();
    common::scenarios::sql_suite::followers_send_no_statement_at_steady_state(&db);
}

/// A database that is not there yet is not bad input: the sidecar runs, unready and
/// "unknown", and leads (creating the table) once the server appears on that port.
#[test]
fn postgres_unreachable_at_start_is_not_bad_input() {
    use common::{eventually, harness::http, Sidecar, SidecarArgs};
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
    // Its first round has failed (nothing listens on the port), and it runs on.
    assert!(
        early.logged("backend call failed", Duration::from_secs(20)),
        "{}",
        early.stderr()
    );
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
        common::scenarios::sql_suite::row(&db, "early").map(|r| r.0),
        Some("early".to_owned())
    );
}

/// A gray failure: the leader's link turns slow (a long pipe, then a congested
/// queue); another candidate leads within 2 × ttl, and the slow one leads again.
#[test]
fn a_slow_leader_on_a_long_pipe_gets_out_of_the_way() {
    let db = PgServer::shared();
    common::scenarios::sql_suite::slow_leader(
        &db,
        common::harness::faults::Link::Delay(std::time::Duration::from_millis(1500)),
    );
}

#[test]
fn a_slow_leader_on_a_congested_link_gets_out_of_the_way() {
    let db = PgServer::shared();
    common::scenarios::sql_suite::slow_leader(
        &db,
        common::harness::faults::Link::Congested(std::time::Duration::from_millis(1200)),
    );
}

/// A SIGTERM that comes while the sidecar is still starting (here: waiting for a
/// server that accepts the connection and never answers, up to the backend timeout,
/// to check the lease table) is a graceful stop: exit 0 once it runs, not a death by
/// the signal's default action (a Pod stopped during its start; the election
/// checker's respawned candidates stopped at the end of a run).
#[test]
fn a_sigterm_while_starting_is_a_clean_stop() {
    use common::{Sidecar, SidecarArgs};
    use std::time::Duration;
    // Connections complete in the backlog; nothing ever answers them.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = mute.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("postgres://lk@127.0.0.1:{port}/lk");
    let args = SidecarArgs::postgres(&url)
        .ttl("30s")
        .flag("--backend-timeout", "10s")
        .election("starting")
        .build();
    let mut car = Sidecar::spawn("starting", dir.path(), &args);
    // The sidecar waits on its first call: it has connected, and nothing answers.
    mute.set_nonblocking(true).expect("nonblocking");
    let _connected = common::eventually(Duration::from_secs(20), || mute.accept().ok())
        .expect("the sidecar connects to the mute server");
    // Nothing is held yet: the stop needs no backend timeout (10 s) to pass.
    let status = car.terminate(Duration::from_secs(5));
    assert!(
        status.is_some_and(|s| s.success()),
        "a SIGTERM while starting: {status:?}\n{}",
        car.stderr()
    );
    drop(mute);
}
