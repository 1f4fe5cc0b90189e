//! The zookeeper backend against real ZooKeeper: one server and a 3-server ensemble.

mod common;

use std::time::Duration;

use common::checker::{self, ElectionSpec, Fault};
use common::zk_args;
use common::zk_server::ZkEnsemble;

#[test]
fn zookeeper_single_server_survives_the_checker() {
    let mut zk = ZkEnsemble::start(1);
    let connect = zk.connect_string();
    let rounds = (0..60)
        .map(|i| match i % 10 {
            1 => Fault::Kill9,
            3 => Fault::PauseLeader,
            5 => Fault::PauseServer,
            6 => Fault::Release,
            _ => Fault::Graceful,
        })
        .collect();
    let report = checker::run(ElectionSpec {
        args: zk_args(&connect, "2s", "checker"),
        ttl: Duration::from_secs(2),
        candidates: 3,
        rounds,
        server: Some(&mut zk),
        takeover_while_leader_paused: true,
        restart_loses_data: false,
    });
    eprintln!("zookeeper(1): {report:?}");
    assert!(report.claims >= 50, "only {} tenures", report.claims);
}

#[test]
fn zookeeper_ensemble_survives_the_checker() {
    let mut zk = ZkEnsemble::start(3);
    let connect = zk.connect_string();
    let rounds = (0..24)
        .map(|i| match i % 6 {
            1 => Fault::Kill9,
            2 => Fault::RestartOneNode,
            3 => Fault::PauseLeader,
            4 => Fault::PauseMinority,
            _ => Fault::Graceful,
        })
        .collect();
    let report = checker::run(ElectionSpec {
        args: zk_args(&connect, "2s", "ensemble"),
        ttl: Duration::from_secs(2),
        candidates: 3,
        rounds,
        server: Some(&mut zk),
        takeover_while_leader_paused: true,
        restart_loses_data: false,
    });
    eprintln!("zookeeper(3): {report:?}");
}
