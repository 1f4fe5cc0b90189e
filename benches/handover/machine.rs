//! The machine's own part of a handover, with no sidecar and no store: a signal's
//! delivery to a process that waits for it (`kill(2)` → its handler runs), and a wake
//! across processes (a pipe written → the process blocked reading it runs), each timed
//! by a small static C program's `CLOCK_MONOTONIC` stamp. Every sidecar handover pays
//! the first at its start, and the store's notice to the next leader pays the second.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use leasekeeper::clock::monotonic_now_ns;

use crate::exec::build_c;
use crate::page::Key;
use crate::report::Report;

/// The program: `signal` waits in `pause(2)` for SIGTERM, `pipe` in `read(2)` on its
/// stdin; each prints `ready`, then the time it woke.
const SOURCE: &str = "\
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static volatile long long woke;
static long long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static void got(int s) { (void)s; woke = now(); }
int main(int argc, char **argv) {
    char c;
    if (argc > 1 && strcmp(argv[1], \"pipe\") == 0) {
        printf(\"ready\\n\");
        fflush(stdout);
        if (read(0, &c, 1) == 1) woke = now();
    } else {
        signal(SIGTERM, got);
        printf(\"ready\\n\");
        fflush(stdout);
        while (!woke) pause();
    }
    printf(\"%lld\\n\", woke);
    return 0;
}
";

/// The step table's row of the machine: the signal's delivery under "the leader's
/// claim ended", the wake across processes under "the next leader woke".
pub fn measure(report: &mut Report, rounds: usize) {
    let program = build_c("leasekeeper-bench-wake", SOURCE);
    let (signals, pipes) = match &program {
        Some(p) => (
            (0..rounds).filter_map(|_| woken(p, Wake::Signal)).collect(),
            (0..rounds).filter_map(|_| woken(p, Wake::Pipe)).collect(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    report.median(Key::new("steps", "machine", "ended"), signals);
    report.median(Key::new("steps", "machine", "woke"), pipes);
}

#[derive(Clone, Copy)]
enum Wake {
    Signal,
    Pipe,
}

/// One wake of a fresh process, idle for a while first (as a leader is before its
/// SIGTERM): ms from the kill or the write to its stamp.
fn woken(program: &std::path::Path, wake: Wake) -> Option<f64> {
    let mode = match wake {
        Wake::Signal => "signal",
        Wake::Pipe => "pipe",
    };
    let mut child = Command::new(program)
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut out = BufReader::new(child.stdout.take()?);
    let woke = ready(&mut out).and_then(|()| {
        std::thread::sleep(Duration::from_millis(100));
        let t0 = monotonic_now_ns();
        poke(&mut child, wake)?;
        Some((stamp(&mut out)?.checked_sub(t0)?) as f64 / 1e6)
    });
    let _ = child.kill();
    let _ = child.wait();
    woke
}

fn ready(out: &mut BufReader<ChildStdout>) -> Option<()> {
    let mut line = String::new();
    out.read_line(&mut line).ok()?;
    (line.trim() == "ready").then_some(())
}

fn poke(child: &mut Child, wake: Wake) -> Option<()> {
    match wake {
        // SAFETY: kill(2) on our own child.
        Wake::Signal => {
            (unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) } == 0).then_some(())
        }
        Wake::Pipe => child.stdin.as_mut()?.write_all(b"x").ok(),
    }
}

fn stamp(out: &mut BufReader<ChildStdout>) -> Option<u64> {
    let mut line = String::new();
    out.read_line(&mut line).ok()?;
    line.trim().parse().ok()
}
