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
