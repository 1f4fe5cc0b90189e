//! The mysql backend against a real MariaDB 10.11: the lease row and its token,
//! passwords, a user without the right to create the table, the election checker with
//! leader, server and link faults and tampering with the row, and verified TLS with a
//! client certificate (`REQUIRE X509`); the scenarios are `common::sql_suite`'s.

mod common;

use common::mariadb_server::MariaServer;
use common::recorder::Recorder;

common::sql_suite::sql_backend_tests! {
    server: MariaServer,
    recorder: Recorder::mysql,
    lease_row_lifecycle_and_tokens: mysql_lease_row_lifecycle_and_tokens,
    passwords_come_from_a_file_only: mysql_passwords_come_from_a_file_only,
    user_without_create_right_gets_one_clear_line: mysql_user_without_create_right_gets_one_clear_line,
    election_survives_the_checker: mysql_election_survives_the_checker,
    survives_partitions_slow_links_and_tampering: mysql_survives_partitions_slow_links_and_tampering,
    tls_with_a_private_ca_and_a_client_certificate: mysql_tls_with_a_private_ca_and_a_client_certificate,
}

/// The gray-failure issue: the leader's link turns slow (a long pipe, then a congested
/// queue); another candidate leads within 2 × ttl, and the slow one leads again.
#[test]
fn a_slow_leader_on_a_long_pipe_gets_out_of_the_way() {
    let db = MariaServer::start();
    common::sql_suite::slow_leader(
        &db,
        common::faults::Link::Delay(std::time::Duration::from_millis(1500)),
    );
}

#[test]
fn a_slow_leader_on_a_congested_link_gets_out_of_the_way() {
    let db = MariaServer::start();
    common::sql_suite::slow_leader(
        &db,
        common::faults::Link::Congested(std::time::Duration::from_millis(1200)),
    );
}
