//! `LK_BENCH_ONLY=steady`: Redis requests at steady state with the default ttl (15s):
//! every command each candidate's connections send (MONITOR, attributed to each
//! process's sockets), the leader's and the followers'; idle footprint of a leader and
//! a follower; `/leader` throughput.

use std::time::{Duration, Instant};

use crate::common::harness::http;
use crate::common::servers::redis_server::{client_ports, RedisServer};
use crate::common::SidecarArgs;
use crate::footprint::idle_footprint;
use crate::group::Group;
use crate::page::Key;
use crate::report::Report;
use crate::settings::{number_from_env, CANDIDATES};

/// Measures no handovers: `_rounds` is not used.
pub fn measure(report: &mut Report, _rounds: usize) {
    let server = RedisServer::start();
    // LK_BENCH_WINDOW_S: how long each request rate is measured (20 s).
    let window = Duration::from_secs(number_from_env("LK_BENCH_WINDOW_S", 20));
    let mut g = Group::new(
        SidecarArgs::redis(&server.url())
            .ttl("15s")
            .election("bench")
            .build(),
        1,
    );
    g.leader(Duration::from_secs(10)).expect("leader");
    for slot in 1..CANDIDATES {
        g.add_slot(slot);
    }
    assert!(g.settled(0));
    // Every command the server executed, by client socket (scripts' own calls aside).
    let seen = server.monitor(window);
    let rate = |slot: usize| {
        let ports = client_ports(g.slots[slot].pid, server.port);
        let n = seen.iter().filter(|(p, _)| ports.contains(p)).count();
        n as f64 / window.as_secs_f64()
    };
    let followers: f64 = (1..CANDIDATES).map(rate).sum::<f64>() / (CANDIDATES - 1) as f64;
    report.value(
        Key::new("steady", "redis_leader", "leasekeeper"),
        format!("{:.2}", rate(0)),
    );
    report.value(
        Key::new("steady", "redis_follower", "leasekeeper"),
        format!("{followers:.2}"),
    );
    for (row, slot) in [("redis_leader", 0), ("redis_follower", 1)] {
        let (rss, cpu) = idle_footprint(&g.slots[slot], Duration::from_secs(10));
        report.value(
            Key::new("footprint", row, "value"),
            format!("{rss:.1} MiB / {cpu:.3} ms/s"),
        );
    }
    let rps = leader_throughput(g.slots[0].port, 4, Duration::from_secs(3));
    report.value(
        Key::new("footprint", "throughput", "value"),
        format!("{:.1}k requests/s", rps / 1000.0),
    );
    drop(g);
}

/// GET /leader over kept-alive connections from `clients` threads for `window`.
fn leader_throughput(port: u16, clients: usize, window: Duration) -> f64 {
    let end = Instant::now() + window;
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            std::thread::spawn(move || {
                let mut conn = http::KeepAlive::open(port).expect("connect");
                let mut n = 0u64;
                while Instant::now() < end {
                    conn.send("/leader").expect("send");
                    let (code, _) = conn.receive().expect("answer");
                    assert_eq!(code, 200);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().expect("client")).sum();
    total as f64 / window.as_secs_f64()
}
