//! `LK_BENCH_ONLY=modes`: the read-write lock (`--mode`) on file, Redis, etcd, ZooKeeper,
//! PostgreSQL and MySQL:
//! an exclusive lock taken after the last shared holder leaves (two readers hold, a
//! writer waits; the first reader stops, then the second's SIGTERM → the writer's
//! claim, from the transition logs); beside each, the store's floor (`floor`): on
//! etcd and ZooKeeper the exclusive candidate waits for the last shared holder's key or
//! node as a next in line waits for the holder's, so their floor is the election's.

use std::time::Duration;

use leasekeeper::clock::monotonic_now_ns;

use crate::common::scenarios::modes::leading;
use crate::common::scenarios::slots::logged_claims;
use crate::common::servers::etcd_server::EtcdCluster;
use crate::common::servers::mariadb_server::MariaServer;
use crate::common::servers::pg_server::PgServer;
use crate::common::servers::redis_server::RedisServer;
use crate::common::servers::zk_server::ZkEnsemble;
use crate::common::{eventually, Sidecar, SidecarArgs};
use crate::floor;
use crate::look::after_stop;
use crate::page::Key;
use crate::report::Report;

pub fn measure(report: &mut Report, rounds: usize) {
    let dir = tempfile::tempdir().expect("dir");
    let cell = |store| Key::new("modes", store, "leasekeeper");
    let args = SidecarArgs::file(dir.path()).ttl("15s");
    report.latency(cell("file"), handovers(args, rounds));
    let at_floor = floor::file::exclusive_after_shared(dir.path(), rounds);
    floor::report(report, "modes", "file", at_floor);
    let redis = RedisServer::start();
    let args = SidecarArgs::redis(&redis.url()).ttl("15s");
    report.latency(cell("redis"), handovers(args, rounds));
    let at_floor = floor::redis::exclusive_after_shared(&redis.url(), rounds);
    floor::report(report, "modes", "redis", at_floor);
    drop(redis);
    let etcd = EtcdCluster::start(1);
    let args = SidecarArgs::etcd(&etcd.endpoints()).ttl("15s");
    report.latency(cell("etcd"), handovers(args, rounds));
    let at_floor = floor::totals(floor::etcd::handovers(&etcd.endpoint(0), rounds));
    floor::report(report, "modes", "etcd", at_floor);
    drop(etcd);
    let zk = ZkEnsemble::start_roomy(1);
    let args = SidecarArgs::zookeeper(&zk.connect_string()).ttl("4s");
    report.latency(cell("zookeeper"), handovers(args, rounds));
    let at_floor = floor::totals(floor::zookeeper::handovers(&zk.connect_string(), rounds));
    floor::report(report, "modes", "zookeeper", at_floor);
    drop(zk);
    let pg = PgServer::start();
    let args = SidecarArgs::postgres(&pg.url()).ttl("15s");
    report.latency(cell("postgres"), handovers(args, rounds));
    let at_floor = floor::sql::postgres_exclusive_after_shared(&pg.url(), rounds);
    floor::report(report, "modes", "postgres", at_floor);
    drop(pg);
    let db = MariaServer::start();
    let args = SidecarArgs::mysql(&db.url()).ttl("15s");
    report.latency(cell("mysql"), handovers(args, rounds));
    let at_floor = floor::sql::mysql_exclusive_after_shared(&db.url(), rounds);
    floor::report(report, "modes", "mysql", at_floor);
}

/// `rounds` times, each with new processes: two readers hold, a writer waits behind
/// them; the first reader stops, the second's SIGTERM is timed to the writer's claim.
fn handovers(args: SidecarArgs, rounds: usize) -> Vec<f64> {
    let dir = tempfile::tempdir().expect("dir");
    let args = args.election("bench-modes");
    let spawn = |name: String, mode: &str| {
        let log = dir.path().join(format!("{name}.jsonl"));
        let a = (args.clone().flag("--mode", mode))
            .flag("--transition-log", &log.display().to_string());
        Sidecar::spawn(&name, dir.path(), &a.build())
    };
    let mut took = Vec::new();
    for round in 0..rounds {
        let mut cars = vec![
            spawn(format!("r{round}a"), "shared"),
            spawn(format!("r{round}b"), "shared"),
        ];
        let both = eventually(Duration::from_secs(60), || {
            (leading(&cars) == [0, 1]).then_some(())
        });
        both.expect("both readers hold");
        cars.push(spawn(format!("w{round}"), "exclusive"));
        cars[2].settles_in("follower", Duration::from_secs(60));
        cars[0].terminate(Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(50));
        let t0 = monotonic_now_ns();
        cars[1].signal(libc::SIGTERM);
        let writer = cars[2].pid as u64;
        let claim = after_stop(Duration::from_secs(30), || {
            logged_claims(dir.path())
                .into_iter()
                .find(|c| c.pid == writer && c.start > t0)
        })
        .expect("the writer's claim");
        took.push((claim.start - t0) as f64 / 1e6);
        for c in &mut cars {
            c.terminate(Duration::from_secs(10));
        }
    }
    took
}
