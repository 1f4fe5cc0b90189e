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
