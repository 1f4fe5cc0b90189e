//! `LK_BENCH_ONLY=exec`: exec mode next to `etcdctl lock NAME CMD` on one etcd: the same
//! command on both sides, a static C program built at the section's start (it prints
//! `leader <CLOCK_MONOTONIC ns>` as it starts, about a millisecond after its exec, and
//! exits on SIGTERM or SIGINT), SIGTERM/SIGINT to the holder → the next command's
//! stamp. For leasekeeper the old command's group is gone before the lease is released.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::common::servers::etcd_server::EtcdCluster;
use crate::common::SidecarArgs;
use crate::group::transition_lines;
use crate::page::Key;
use crate::peer::{by_signal, leader_stamp, peer_handovers, peer_rounds, spawn_piped};
use crate::report::Report;
use crate::settings::CANDIDATES;

/// The supervised command's source: its start's stamp, then a wait for the signal.
const COMMAND_SOURCE: &str = "\
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
int main(void) {
    struct timespec t;
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    clock_gettime(CLOCK_MONOTONIC, &t);
    printf(\"leader %lld\\n\", (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
    fflush(stdout);
    for (;;) pause();
}
";

pub fn measure(report: &mut Report, rounds: usize) {
    let command = build_command();
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    let ((ours, steps), peer) = match &command {
        Some(command) => (
            leasekeeper_run_handovers(&endpoints, command, rounds),
            etcdctl_lock_handovers(&endpoints, command, rounds),
        ),
        None => ((Vec::new(), Vec::new()), Vec::new()),
    };
    report.latency(Key::new("exec", "etcd", "leasekeeper"), ours);
    for (i, column) in STEP_COLUMNS.iter().enumerate() {
        let values = steps.iter().filter_map(|s: &Steps| s[i]).collect();
        report.median(Key::new("exec_steps", "etcd", column), values);
    }
    report.latency(Key::new("exec", "etcd", "peer"), peer);
    drop(etcd);
}

/// Builds the supervised command with `gcc -static -O2` into the target directory;
/// none (said on stderr) when gcc fails.
fn build_command() -> Option<PathBuf> {
    build_c("leasekeeper-bench-command", COMMAND_SOURCE)
}

/// Builds the C program `source` with `gcc -static -O2` as `name` in the target
/// directory; none (said on stderr) when gcc fails.
pub fn build_c(name: &str, source: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("{name}.c"));
    let binary = dir.join(name);
    std::fs::write(&path, source).ok()?;
    let built = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&binary)
        .arg(&path)
        .status();
    match built {
        Ok(s) if s.success() => Some(binary),
        other => {
            eprintln!("bench: gcc -static could not build {name}: {other:?}");
            None
        }
    }
}

/// The steps of one handover of `leasekeeper run` (ms; `None` where a mark is
/// missing), in the order of [`STEP_COLUMNS`].
type Steps = [Option<f64>; 4];

/// The step table's columns: SIGTERM → the leader's claim ended; → its command gone
/// and its release sent; → the next claim; → the next command's stamp.
const STEP_COLUMNS: [&str; 4] = ["ended", "release_sent", "claim", "started"];

/// Handovers of `leasekeeper run`: their latencies, and their steps from the
/// transition logs.
fn leasekeeper_run_handovers(
    endpoints: &str,
    command: &Path,
    rounds: usize,
) -> (Vec<f64>, Vec<Steps>) {
    let dir = tempfile::tempdir().expect("dir");
    let log = |i: usize| dir.path().join(format!("x{i}.jsonl"));
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
                    &log(i).display().to_string(),
                ])
                .arg("--")
                .arg(command),
            "leasekeeper run",
        )
    };
    let rounds = peer_rounds(&spawn, &by_signal(libc::SIGTERM), &leader_stamp, rounds);
    let lines = transition_lines((0..CANDIDATES).map(log));
    let latency = rounds.iter().map(|(t0, next)| ms(*t0, *next)).collect();
    (latency, rounds.iter().map(|r| steps(&lines, *r)).collect())
}

fn ms(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1e6
}

/// The steps of the handover from the stop at `t0` to the next command's stamp at
/// `started`: the first claim end, release sent and claim start between them.
fn steps(lines: &[serde_json::Value], (t0, started): (u64, u64)) -> Steps {
    let first = |event: &str, field: &str| {
        let of_event = lines.iter().filter(|l| l["event"] == event);
        let marks = of_event.filter_map(|l| l[field].as_u64());
        marks.filter(|at| *at > t0 && *at <= started).min()
    };
    let ended = first("claim_end", "at_ns");
    let released = first("release", "sent_ns");
    let claim = first("claim_start", "at_ns");
    let step = |from: Option<u64>, to: Option<u64>| Some(ms(from?, to?));
    [
        step(Some(t0), ended),
        step(ended, released),
        step(released, claim),
        step(claim, Some(started)),
    ]
}

fn etcdctl_lock_handovers(endpoints: &str, command: &Path, rounds: usize) -> Vec<f64> {
    let spawn = |_: usize| {
        spawn_piped(
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", endpoints, "lock", "bench-lock", "--"])
                .arg(command)
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
