//! `LK_BENCH_ONLY=exec`: exec mode next to `etcdctl lock NAME CMD` on one etcd: the same
//! command (it prints `leader <CLOCK_MONOTONIC ns>` when it starts, python startup
//! included on both sides), SIGTERM/SIGINT to the holder → the next command's stamp.
//! For leasekeeper the old command's group is gone before the lease is released.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use crate::common::servers::etcd_server::EtcdCluster;
use crate::common::SidecarArgs;
use crate::page::Key;
use crate::peer::{by_signal, leader_stamp, peer_handovers, spawn_piped};
use crate::report::Report;

/// The supervised command on both sides.
const COMMAND: [&str; 3] = [
    "python3",
    "-c",
    "import signal, sys, time\n\
     print('leader', time.monotonic_ns(), flush=True)\n\
     signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n\
     time.sleep(3600)",
];

pub fn measure(report: &mut Report, rounds: usize) {
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    report.latency(
        Key::new("exec", "etcd", "leasekeeper"),
        leasekeeper_run_handovers(&endpoints, rounds),
    );
    report.latency(
        Key::new("exec", "etcd", "peer"),
        etcdctl_lock_handovers(&endpoints, rounds),
    );
    drop(etcd);
}

fn leasekeeper_run_handovers(endpoints: &str, rounds: usize) -> Vec<f64> {
    let dir = tempfile::tempdir().expect("dir");
    let spawn = |i: usize| {
        spawn_piped(
            Command::new(env!("CARGO_BIN_EXE_leasekeeper"))
                .arg("run")
                .args(
                    SidecarArgs::etcd(endpoints)
                        .ttl("15s")
                        .election("bench-exec")
                        .build(),
                )
                .args([
                    "--identity",
                    &format!("x{i}"),
                    "--http-addr",
                    "127.0.0.1:0",
                    "--transition-log",
                    &dir.path().join(format!("x{i}.jsonl")).display().to_string(),
                ])
                .arg("--")
                .args(COMMAND),
            "leasekeeper run",
        )
    };
    peer_handovers(&spawn, &by_signal(libc::SIGTERM), &leader_stamp, rounds)
}

fn etcdctl_lock_handovers(endpoints: &str, rounds: usize) -> Vec<f64> {
    let spawn = |_: usize| {
        spawn_piped(
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", endpoints, "lock", "bench-lock", "--"])
                .args(COMMAND)
                .process_group(0),
            "etcdctl lock",
        )
    };
    // etcdctl waits for its command and does not pass a signal on: stop them as a
    // Ctrl-C at the terminal would, the whole process group (the command exits,
    // then etcdctl unlocks).
    let interrupt_group = |c: &mut Child| {
        // SAFETY: kill(2) on the process group of our own child.
        unsafe { libc::kill(-(c.id() as libc::pid_t), libc::SIGINT) };
    };
    peer_handovers(&spawn, &interrupt_group, &leader_stamp, rounds)
}
