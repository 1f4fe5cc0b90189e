//! `LK_BENCH_ONLY=postgres` and `=mysql`: leasekeeper on one SQL server, then the 100 ms
//! polling peer (`sql_peer`) on the same server. The graceful handovers run 50 times
//! unless `LK_BENCH_ROUNDS` says otherwise (the p99 target is judged over 50).

use std::process::{Child, Command};

use crate::common::scenarios::sql_suite::{db_flags, SqlDb};
use crate::common::servers::mariadb_server::MariaServer;
use crate::common::servers::pg_server::PgServer;
use crate::floor;
use crate::measure::graceful_handovers_then_crash_failovers;
use crate::page::Key;
use crate::peer::{by_signal, leader_stamp, peer_handovers, spawn_piped};
use crate::report::Report;

/// The lease row's remaining ttl, ms, by server kind.
const POSTGRES_REMAINING: &str = "SELECT GREATEST(0, CEIL(EXTRACT(EPOCH FROM expires_at - now()) * 1000))::bigint FROM leasekeeper_leases WHERE election = 'bench'";
const MYSQL_REMAINING: &str = "SELECT CAST(GREATEST(0, CEILING(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000)) AS SIGNED) FROM leasekeeper_leases WHERE election = 'bench'";

pub fn postgres(report: &mut Report, rounds: usize) {
    measure(report, "postgres", rounds);
}

pub fn mysql(report: &mut Report, rounds: usize) {
    measure(report, "mysql", rounds);
}

/// `kind` is `postgres` or `mysql`, and the row of its cells.
fn measure(report: &mut Report, kind: &'static str, rounds: usize) {
    let postgres = kind == "postgres";
    let db: Box<dyn SqlDb> = if postgres {
        Box::new(PgServer::start())
    } else {
        Box::new(MariaServer::start())
    };
    let remaining = if postgres {
        POSTGRES_REMAINING
    } else {
        MYSQL_REMAINING
    };
    let url = db.url_for("lk");
    graceful_handovers_then_crash_failovers(
        report,
        kind,
        |ttl| db_flags(&*db, "lk").ttl(ttl).election("bench").build(),
        &|| db.admin(remaining).trim().parse::<u64>().ok(),
        (crate::settings::sql_graceful_rounds(), rounds),
        &mut |n| match postgres {
            true => floor::sql::postgres(&url, n),
            false => floor::sql::mysql(&url, n),
        },
    );
    polling_peer(report, &*db, kind, rounds);
}

/// The polling peer, run as this bench binary itself: graceful handovers, then crash
/// failovers.
fn polling_peer(report: &mut Report, db: &dyn SqlDb, kind: &'static str, rounds: usize) {
    if kind == "mysql" {
        db.admin("CREATE TABLE peer_lock (name VARCHAR(64) PRIMARY KEY); INSERT INTO peer_lock VALUES ('bench-peer')");
    }
    let url = db.url_for("lk");
    let exe = std::env::current_exe().expect("bench binary");
    let spawn = |_: usize| -> Child {
        spawn_piped(
            Command::new(&exe)
                .env("LK_SQL_PEER", kind)
                .env("LK_SQL_PEER_URL", &url),
            "peer",
        )
    };
    report.latency(
        Key::new("graceful", kind, "peer"),
        peer_handovers(&spawn, &by_signal(libc::SIGTERM), &leader_stamp, rounds),
    );
    report.latency(
        Key::new("failover", kind, "peer_crash"),
        peer_handovers(
            &spawn,
            &by_signal(libc::SIGKILL),
            &leader_stamp,
            rounds.min(30),
        ),
    );
}
