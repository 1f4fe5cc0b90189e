//! The redlock backend against 3 and 5 real, independent redis-servers.

mod common;

use std::time::Duration;

use common::checker::{self, ElectionSpec, Fault, RedisCluster};
use common::{eventually, http, Sidecar};

fn redlock_args(urls: &str, ttl: &str) -> Vec<String> {
    [
        "--backend",
        "redlock",
        "--redis-url",
        urls,
        "--ttl",
        ttl,
        "--election",
        "quorum",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn rounds(n: usize) -> Vec<Fault> {
    (0..n)
        .map(|i| match i % 12 {
            1 => Fault::Kill9,
            3 => Fault::PauseMinority,
            4 => Fault::PauseLeader,
            6 => Fault::RestartOneNode,
            8 => Fault::PauseServer,
            10 => Fault::Release,
            _ => Fault::Graceful,
        })
        .collect()
}

#[test]
fn redlock_over_three_nodes_survives_the_checker() {
    let mut cluster = RedisCluster::start(3);
    let urls = cluster.urls();
    let report = checker::run(ElectionSpec {
        args: redlock_args(&urls, "1s"),
        ttl: Duration::from_secs(1),
        candidates: 3,
        rounds: rounds(60),
        server: Some(&mut cluster),
        takeover_while_leader_paused: true,
        restart_loses_data: true,
    });
    eprintln!("redlock(3): {report:?}");
    assert!(report.claims >= 50, "only {} tenures", report.claims);
}

#[test]
fn redlock_over_five_nodes_survives_the_checker() {
    let mut cluster = RedisCluster::start(5);
    let urls = cluster.urls();
    let report = checker::run(ElectionSpec {
        args: redlock_args(&urls, "1s"),
        ttl: Duration::from_secs(1),
        candidates: 3,
        rounds: rounds(24),
        server: Some(&mut cluster),
        takeover_while_leader_paused: true,
        restart_loses_data: true,
    });
    eprintln!("redlock(5): {report:?}");
}

#[test]
fn losing_a_majority_leaves_nobody_leading_and_recovering_it_brings_a_leader_back() {
    let mut cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().expect("dir");
    let args = redlock_args(&cluster.urls(), "1s");
    let sidecars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("q{i}"), dir.path(), &args))
        .collect();
    let leads = |s: &Sidecar| s.leader().is_some_and(|v| v["is_leader"] == true);
    assert!(eventually(Duration::from_secs(10), || sidecars
        .iter()
        .any(leads)
        .then_some(()))
    .is_some());

    // One node gone: a majority remains, so there is still a leader.
    cluster.nodes[0].kill();
    std::thread::sleep(Duration::from_millis(1300));
    assert!(
        eventually(Duration::from_secs(3), || sidecars
            .iter()
            .any(leads)
            .then_some(()))
        .is_some(),
        "no leader with 2 of 3 nodes"
    );

    // Two gone: within the ttl everyone steps down, and nobody claims after.
    cluster.nodes[1].kill();
    std::thread::sleep(Duration::from_millis(1100));
    for _ in 0..20 {
        for s in &sidecars {
            assert_eq!(
                http::get(s.port, "/is-leader").map(|(c, _)| c),
                Some(503),
                "{} leads without a majority",
                s.name
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.restart_node(0);
    cluster.restart_node(1);
    let back = eventually(Duration::from_secs(10), || {
        sidecars.iter().any(leads).then_some(())
    });
    assert!(
        back.is_some(),
        "no leader once the majority returned:\n{}",
        sidecars[0].stderr()
    );
}

use common::checker::ServerControl;
