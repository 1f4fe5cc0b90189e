//! `LK_BENCH_ONLY=zookeeper`: leasekeeper, then kazoo's `Election` and Curator's
//! `LeaderLatch` on the same server: graceful handovers, requests at steady state,
//! crash failovers.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::servers::zk_server::ZkEnsemble;
use crate::common::SidecarArgs;
use crate::floor;
use crate::measure::{crash_failovers, rates_over, warmed_graceful_handovers};
use crate::page::Key;
use crate::peer::{by_signal, leader_stamp, peer_handovers, peer_script, python_has, spawn_piped};
use crate::report::Report;
use crate::settings::CANDIDATES;

/// The class path of Debian's Curator and ZooKeeper jars.
const CURATOR_CLASS_PATH: &str = "/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/guava.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar";

/// Unmeasured rounds before the measured ones, as a multiple of them.
const WARM: usize = 3;

pub fn measure(report: &mut Report, rounds: usize) {
    let zk = ZkEnsemble::start_roomy(1);
    let connect = zk.connect_string();
    // The server is a JVM: its first requests run before the JIT compiled their code
    // (a method after some hundreds of calls). The floor's rounds and leasekeeper's,
    // WARM times as many as measured each, warm it (and are dropped), so that
    // leasekeeper's rounds and the floor's measured ones below meet the same warm
    // server.
    drop(floor::zookeeper::handovers(&connect, WARM * rounds));
    let g = warmed_graceful_handovers(
        report,
        "zookeeper",
        SidecarArgs::zookeeper(&connect)
            .ttl("4s")
            .election("bench")
            .build(),
        (WARM * rounds, rounds),
        &mut |n| floor::zookeeper::handovers(&connect, n),
    );
    let [packets] = rates_over(Duration::from_secs(10), || [zk.mntr("zk_packets_received")]);
    report.value(
        Key::new("steady", "zookeeper", "leasekeeper"),
        format!("{:.2}", packets / CANDIDATES as f64),
    );
    drop(g);
    match floor::zookeeper::closing_handovers(&connect, rounds) {
        Ok(closing) => floor::steps(report, "zookeeper_close", &closing),
        Err(e) => eprintln!("bench: the floor of graceful / zookeeper, closing: {e:#}"),
    }
    report.latency(
        Key::new("graceful", "zookeeper", "peer"),
        kazoo_handovers(&connect, rounds).unwrap_or_default(),
    );
    report.latency(
        Key::new("graceful", "zookeeper_curator", "peer"),
        curator_handovers(&connect, rounds).unwrap_or_default(),
    );
    crash_failovers(
        report,
        "zookeeper",
        "ttl 2 s",
        SidecarArgs::zookeeper(&connect)
            .ttl("2s")
            .election("bench-crash")
            .build(),
        rounds.min(30),
        None,
    );
}

/// Graceful handovers among kazoo `Election` peers; none without kazoo.
fn kazoo_handovers(connect: &str, rounds: usize) -> Option<Vec<f64>> {
    if !python_has("kazoo") {
        return None;
    }
    let script = peer_script("kazoo_election.py");
    let spawn = |i: usize| {
        spawn_piped(
            Command::new("python3").args([&script, connect, "/bench-kazoo", &format!("k{i}")]),
            "python3",
        )
    };
    Some(peer_handovers(
        &spawn,
        &by_signal(libc::SIGTERM),
        &leader_stamp,
        rounds,
    ))
}

/// Graceful handovers among Curator `LeaderLatch` peers (tests/interop/CuratorLatch.java,
/// told to `close` on stdin); none when it does not compile.
fn curator_handovers(connect: &str, rounds: usize) -> Option<Vec<f64>> {
    let classes = tempfile::tempdir().expect("dir");
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/CuratorLatch.java"
    );
    let built = Command::new("javac")
        .args(["-cp", CURATOR_CLASS_PATH, "-d"])
        .arg(classes.path())
        .arg(source)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        return None;
    }
    let class_path = format!("{}:{CURATOR_CLASS_PATH}", classes.path().display());
    let spawn = |i: usize| {
        spawn_piped(
            Command::new("java")
                .args([
                    "-cp",
                    &class_path,
                    "CuratorLatch",
                    connect,
                    "/bench-curator",
                    &format!("c{i}"),
                ])
                .stdin(Stdio::piped()),
            "java",
        )
    };
    let close = |c: &mut Child| {
        use std::io::Write;
        if let Some(stdin) = c.stdin.as_mut() {
            let _ = writeln!(stdin, "close");
            let _ = stdin.flush();
        }
    };
    Some(peer_handovers(&spawn, &close, &leader_stamp, rounds))
}
