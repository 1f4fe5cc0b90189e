//! Peers: other election clients run as processes next to leasekeeper on the same
//! server, each printing its own CLOCK_MONOTONIC time when elected.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::eventually;
use crate::look::after_stop;
use crate::settings::CANDIDATES;

/// Reads the election time (CLOCK_MONOTONIC ns) off a line a peer prints.
pub type Stamp = dyn Fn(&str) -> Option<u64> + Sync;

/// The stamp of peers that print `leader <CLOCK_MONOTONIC ns>` when elected.
pub fn leader_stamp(line: &str) -> Option<u64> {
    line.strip_prefix("leader ")?.trim().parse().ok()
}

/// The stamp of peers that print `acquired <CLOCK_MONOTONIC ns>` when elected.
pub fn acquired_stamp(line: &str) -> Option<u64> {
    line.strip_prefix("acquired ")?.trim().parse().ok()
}

/// Starts `command` with its output piped to us and its errors dropped.
pub fn spawn_piped(command: &mut Command, what: &str) -> Child {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect(what)
}

/// Stops a peer by sending it `signal`.
pub fn by_signal(signal: i32) -> impl Fn(&mut Child) {
    move |c: &mut Child| crate::common::send_signal(c.id(), signal)
}

/// Whether python3 can import `module`.
pub fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success())
}

/// A peer script of `benches/peers/`, by file name.
pub fn peer_script(name: &str) -> String {
    format!("{}/benches/peers/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// One peer process and the election time it printed, if it has.
struct Peer {
    child: Child,
    elected: Arc<Mutex<Option<u64>>>,
}

impl Peer {
    fn start(mut child: Child, stamp: &'static Stamp) -> Peer {
        let out = child.stdout.take().expect("stdout");
        let elected = Arc::new(Mutex::new(None));
        let sink = elected.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // Keep draining after the stamp: a closed pipe would kill the peer
                // before it could give up the election.
                if let Some(ns) = stamp(&line) {
                    sink.lock().expect("elected").get_or_insert(ns);
                }
            }
        });
        Peer { child, elected }
    }

    fn elected_at(&self) -> Option<u64> {
        *self.elected.lock().expect("elected")
    }

    /// Kills the peer, and its process group where it leads one (`etcdctl lock`'s
    /// command is a child that its SIGKILL would leave running).
    fn end(mut self) {
        // SAFETY: kill(2) of a process group; one the peer does not lead is no group
        // (ESRCH).
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Graceful (or, by `stop`, crash) handovers among `CANDIDATES` peer processes:
/// `spawn` starts peer `i`, `stamp` reads the election time off the line a peer prints
/// when elected, `stop` asks the leader to give up, and the latency runs up to the next
/// peer's stamp. Ends early, with what it measured, when no peer gets elected in 30 s.
pub fn peer_handovers(
    spawn: &dyn Fn(usize) -> Child,
    stop: &dyn Fn(&mut Child),
    stamp: &'static Stamp,
    rounds: usize,
) -> Vec<f64> {
    let rounds = peer_rounds(spawn, stop, stamp, rounds);
    rounds
        .iter()
        .map(|(t0, next)| next.saturating_sub(*t0) as f64 / 1e6)
        .collect()
}

/// As [`peer_handovers`], each handover as its two instants (CLOCK_MONOTONIC ns):
/// the stop sent, the next one's stamp.
pub fn peer_rounds(
    spawn: &dyn Fn(usize) -> Child,
    stop: &dyn Fn(&mut Child),
    stamp: &'static Stamp,
    rounds: usize,
) -> Vec<(u64, u64)> {
    let start = |i: usize| Peer::start(spawn(i), stamp);
    let mut peers: Vec<Peer> = (0..CANDIDATES).map(start).collect();
    let mut lat = Vec::new();
    for _ in 0..rounds {
        let Some(holder) = eventually(Duration::from_secs(30), || {
            peers.iter().position(|p| p.elected_at().is_some())
        }) else {
            break;
        };
        std::thread::sleep(Duration::from_millis(150));
        let t0 = leasekeeper::clock::monotonic_now_ns();
        stop(&mut peers[holder].child);
        let next = after_stop(Duration::from_secs(30), || {
            peers
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != holder)
                .find_map(|(_, p)| p.elected_at())
        });
        let Some(next) = next else { break };
        lat.push((t0, next));
        let _ = peers[holder].child.wait();
        peers[holder] = start(holder);
    }
    peers.into_iter().for_each(Peer::end);
    lat
}
