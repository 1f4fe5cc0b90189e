//! The redlock backend against 3 and 5 real, independent redis-servers.

mod common;

use std::time::Duration;

use common::checker::{self, ElectionSpec, Fault, RedisCluster};
use common::{eventually, http, redlock_args, Sidecar};

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
        args: redlock_args(&urls, "1s", "quorum"),
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
        args: redlock_args(&urls, "1s", "quorum"),
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
    let args = redlock_args(&cluster.urls(), "1s", "quorum");
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

/// A node restarts without its data while the leader holds a bare majority, and a
/// freshly started candidate (which has seen no token yet) campaigns: it must not
/// count the amnesiac node, or it would lead next to the old leader with a lower token.
#[test]
fn a_fresh_candidate_does_not_count_a_node_that_lost_its_data() {
    let mut cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().expect("dir");
    let args = redlock_args(&cluster.urls(), "3s", "amnesia");
    let old = Sidecar::spawn("old", dir.path(), &args);
    let led = eventually(Duration::from_secs(10), || {
        old.leader().filter(|v| v["is_leader"] == true)
    });
    let token = led.expect("old leads")["fencing_token"]
        .as_u64()
        .expect("token");

    // The old leader keeps a bare majority {0, 1}: node 2 forgets the lock (as if it
    // had expired there), and node 0 restarts empty.
    assert!(cluster.nodes[2]
        .command("DEL leasekeeper:{amnesia}:lock")
        .is_some());
    cluster.restart_node(0);
    let fresh = Sidecar::spawn("fresh", dir.path(), &args);
    assert!(fresh.wait_listening(Duration::from_secs(10)));
    // For longer than a ttl: never both leaders, and never a lower token.
    let until = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < until {
        let o = old.leader().is_some_and(|v| v["is_leader"] == true);
        let f = fresh.leader();
        if let Some(f) = &f {
            if f["is_leader"] == true {
                assert!(!o, "two leaders after a node lost its data: {f}");
                assert!(
                    f["fencing_token"].as_u64() > Some(token),
                    "a lower token after data loss: {f}"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
