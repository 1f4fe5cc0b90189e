//! `LK_BENCH_ONLY=redis`: redis, then the redis-py peer on the same server, then
//! redlock over 3 and 5 servers; and the servers' request counters the other sections
//! read.

use std::process::Command;

use crate::common::servers::redis_server::RedisServer;
use crate::common::SidecarArgs;
use crate::floor;
use crate::measure::graceful_handovers_then_crash_failovers;
use crate::page::Key;
use crate::peer::{
    acquired_stamp, by_signal, peer_handovers, peer_script, python_has, spawn_piped,
};
use crate::report::Report;

pub fn measure(report: &mut Report, rounds: usize) {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let url = servers[0].url();
    redis_backend(
        report,
        "redis",
        |ttl| SidecarArgs::redis(&url).ttl(ttl).election("bench").build(),
        &[&servers[0]],
        rounds,
    );
    report.latency(
        Key::new("graceful", "redis", "peer"),
        redis_py_handovers(&url, rounds).unwrap_or_default(),
    );
    for (n, row) in [(3, "redlock3"), (5, "redlock5")] {
        let nodes: Vec<String> = servers[..n].iter().map(|s| s.url()).collect();
        let urls = nodes.join(",");
        let refs: Vec<&RedisServer> = servers[..n].iter().collect();
        redis_backend(
            report,
            row,
            |ttl| {
                SidecarArgs::redlock(&urls)
                    .ttl(ttl)
                    .election("bench")
                    .build()
            },
            &refs,
            rounds,
        );
    }
    drop(servers);
}

/// Graceful and crash handovers among 3 sidecars on the Redis `servers`: the cells of
/// `row`.
fn redis_backend(
    report: &mut Report,
    row: &'static str,
    args: impl Fn(&str) -> Vec<String>,
    servers: &[&RedisServer],
    rounds: usize,
) {
    let nodes: Vec<String> = servers.iter().map(|s| s.url()).collect();
    graceful_handovers_then_crash_failovers(
        report,
        row,
        args,
        &|| lock_pttl(servers, "bench"),
        (rounds, rounds),
        &mut |n| floor::redis::handovers(&nodes, n),
    );
}

/// Remaining ttl (ms) of the election's lock: the most any node reports (the lease
/// lives until the last majority member lets it go; for one node, that node).
fn lock_pttl(servers: &[&RedisServer], election: &str) -> Option<u64> {
    let mut ttls: Vec<u64> = servers
        .iter()
        .filter_map(|s| s.command(&format!("PTTL leasekeeper:{{{election}}}:lock")))
        .filter_map(|r| r.trim().trim_start_matches(':').parse::<i64>().ok())
        .filter(|v| *v > 0)
        .map(|v| v as u64)
        .collect();
    ttls.sort_unstable();
    // With a majority rule the lease is gone once fewer than a majority hold it:
    // the (n - quorum + 1)-th smallest expiry, i.e. the quorum-th largest.
    let quorum = servers.len() / 2 + 1;
    let idx = ttls.len().checked_sub(quorum)?;
    ttls.get(idx).copied()
}

/// Graceful handover among `CANDIDATES` redis-py `Lock` holders on the same server;
/// none when redis-py is missing or a round found no holder.
fn redis_py_handovers(url: &str, rounds: usize) -> Option<Vec<f64>> {
    if !python_has("redis") {
        eprintln!("redis-py is not installed (pip install redis); skipping the peer");
        return None;
    }
    let script = peer_script("redis_py_lock.py");
    let spawn = |_: usize| {
        spawn_piped(
            Command::new("python3").args([&script, url, "bench-peer", "15"]),
            "python3",
        )
    };
    let lat = peer_handovers(&spawn, &by_signal(libc::SIGTERM), &acquired_stamp, rounds);
    (lat.len() == rounds).then_some(lat)
}

/// Calls so far of the commands `counted` (by name), from the server's command
/// statistics.
fn calls(server: &RedisServer, counted: impl Fn(&str) -> bool) -> u64 {
    let info = server.command("INFO commandstats").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(command, _)| counted(command))
        .filter_map(|(_, rest)| {
            rest.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Every command the server has served, ours included.
pub fn all_calls(server: &RedisServer) -> f64 {
    calls(server, |_| true) as f64
}
