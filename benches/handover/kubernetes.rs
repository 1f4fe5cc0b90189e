//! `LK_BENCH_ONLY=kubernetes`: the Lease backend on the in-process fake API server (the
//! client side of the path: watch event → GET → PUT; a real API server adds its own etcd
//! write), next to client-go's request pattern on the same fake.

use std::time::Duration;

use crate::client_go::client_go_replicas;
use crate::common::servers::fake_kube::FakeKube;
use crate::common::SidecarArgs;
use crate::floor;
use crate::measure::{crash_failovers, graceful_handovers, rates_during, rates_over};
use crate::page::Key;
use crate::report::Report;
use crate::settings::CANDIDATES;

pub fn measure(report: &mut Report, rounds: usize) {
    let api = FakeKube::start("team");
    let kubeconfig = api.kubeconfig();
    let requests = || [api.requests().values().sum::<usize>() as f64];
    let g = graceful_handovers(
        report,
        "kubernetes",
        SidecarArgs::kubernetes(&kubeconfig)
            .ttl("15s")
            .election("bench")
            .build(),
        rounds,
        &mut |n| floor::kubernetes::handovers(&kubeconfig, "team", n),
    );
    // Steady state: API requests per second per candidate at ttl 15s.
    let [rate] = rates_over(Duration::from_secs(30), requests);
    report.value(
        Key::new("steady", "kubernetes", "leasekeeper"),
        format!("{:.2}", rate / CANDIDATES as f64),
    );
    drop(g);
    // client-go's request pattern at its defaults (LeaseDuration 15s, RetryPeriod
    // 2s), 4 replicas of one election, on the same fake.
    let replicas = 4;
    let window = Duration::from_secs(30);
    let [rate] = rates_during(window, requests, || {
        client_go_replicas(api.port, "team", "bench-client-go", replicas, window)
    });
    report.value(
        Key::new("steady", "kubernetes", "peer"),
        format!("{:.2}", rate / replicas as f64),
    );
    crash_failovers(
        report,
        "kubernetes",
        "ttl 2 s",
        SidecarArgs::kubernetes(&kubeconfig)
            .ttl("2s")
            .election("bench-crash")
            .build(),
        rounds.min(20),
        None,
    );
}
