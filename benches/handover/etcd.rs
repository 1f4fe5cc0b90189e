//! `LK_BENCH_ONLY=etcd`: leasekeeper and `etcdctl elect` on the same member: graceful
//! handovers, the store's load at steady state, crash failovers.

use std::process::Command;
use std::time::Duration;

use crate::common::servers::etcd_server::EtcdCluster;
use crate::common::SidecarArgs;
use crate::floor;
use crate::measure::{crash_failovers, graceful_handovers, rates_over};
use crate::page::Key;
use crate::peer::{by_signal, peer_handovers, spawn_piped};
use crate::report::Report;

pub fn measure(report: &mut Report, rounds: usize) {
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    let member = etcd.endpoint(0);
    let g = graceful_handovers(
        report,
        "etcd",
        SidecarArgs::etcd(&endpoints)
            .ttl("15s")
            .election("bench")
            .build(),
        rounds,
        &mut |n| floor::etcd::handovers(&member, n),
    );
    steady_requests(report, &etcd);
    drop(g);
    report.latency(
        Key::new("graceful", "etcd", "peer"),
        etcdctl_elect_handovers(&endpoints, rounds),
    );
    crash_failovers(
        report,
        "etcd",
        "ttl 1 s",
        SidecarArgs::etcd(&endpoints)
            .ttl("1s")
            .election("bench")
            .build(),
        rounds.min(30),
        None,
    );
    drop(etcd);
}

/// Steady state: reads and writes vs keep-alives per second, 3 candidates, ttl 15s.
fn steady_requests(report: &mut Report, etcd: &EtcdCluster) {
    let [unary, keepalives] = rates_over(Duration::from_secs(10), || {
        [
            etcd.metric(0, "grpc_server_handled_total", "grpc_method=\"Range\"")
                + etcd.metric(0, "grpc_server_handled_total", "grpc_method=\"Txn\""),
            etcd.metric(
                0,
                "grpc_server_msg_received_total",
                "grpc_method=\"LeaseKeepAlive\"",
            ),
        ]
    });
    report.value(
        Key::new("steady", "etcd_unary", "leasekeeper"),
        format!("{unary:.2}"),
    );
    report.value(
        Key::new("steady", "etcd_keepalives", "leasekeeper"),
        format!("{keepalives:.2}"),
    );
}

/// Graceful handover among `CANDIDATES` `etcdctl elect` processes on the same etcd:
/// SIGINT to the leader (etcdctl resigns and exits) → the next one prints its key.
fn etcdctl_elect_handovers(endpoints: &str, rounds: usize) -> Vec<f64> {
    let spawn = |i: usize| {
        spawn_piped(
            Command::new("etcdctl").env("ETCDCTL_API", "3").args([
                "--endpoints",
                endpoints,
                "elect",
                "bench-peer",
                &format!("p{i}"),
            ]),
            "etcdctl",
        )
    };
    // etcdctl prints the key it was elected with, untimed: its arrival is the stamp.
    let arrival = &|_: &str| Some(leasekeeper::clock::monotonic_now_ns());
    peer_handovers(&spawn, &by_signal(libc::SIGINT), arrival, rounds)
}
