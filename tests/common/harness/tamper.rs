//! Store tampering seen from outside: while a leader holds, somebody else changes
//! its record in the store (deletes the etcd key, the Redis lock key, the ZooKeeper
//! node, the Lease). An outside observer polls every sidecar's `/leader` every few
//! milliseconds and measures how long the old tenure went on answering "leader"
//! after another tenure first did (DESIGN invariant 9: at most 100 ms), and which
//! token the next tenure carries (it must be higher).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{eventually, harness::http, Sidecar, SidecarArgs};

/// One `/leader` answer.
#[derive(Clone, Debug)]
pub struct Seen {
    pub port: u16,
    pub sent: Instant,
    pub recv: Instant,
    pub leader: bool,
    pub token: Option<u64>,
}

/// Polls the given ports' `/leader`, one thread each, until `finish`.
pub struct Observer {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Observer {
    pub fn start(ports: &[u16]) -> Observer {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = ports
            .iter()
            .map(|&port| {
                let (seen, stop) = (seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let sent = Instant::now();
                        if let Some((200, body)) = http::get(port, "/leader") {
                            let recv = Instant::now();
                            let v: serde_json::Value =
                                serde_json::from_str(&body).unwrap_or_default();
                            seen.lock().expect("seen").push(Seen {
                                port,
                                sent,
                                recv,
                                leader: v["is_leader"] == true,
                                token: v["fencing_token"].as_u64(),
                            });
                        }
                        // Pause: a few milliseconds, the resolution of the measured overlap (the bound is
                        // 100 ms).
                        std::thread::sleep(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        Observer {
            seen,
            stop,
            threads,
        }
    }

    /// Waits until every port has answered at least once (the observer is watching);
    /// panics after `limit`.
    pub fn wait_answered(&self, ports: &[u16], limit: Duration) {
        let all = || {
            let seen = self.seen.lock().expect("seen");
            ports
                .iter()
                .all(|p| seen.iter().any(|s| s.port == *p))
                .then_some(())
        };
        eventually(limit, all).expect("every observed port answers /leader");
    }

    pub fn finish(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().expect("an observer thread panicked");
        }
        let seen = self.seen.lock().expect("seen");
        seen.clone()
    }
}

/// What the observer saw around one act of tampering.
#[derive(Debug)]
pub struct Outcome {
    pub old_port: u16,
    pub old_token: u64,
    /// How long the old tenure answered "leader" after another tenure first did
    /// (the old tenure's last "leader" reply minus the other's first request: an
    /// upper bound of the real overlap).
    pub overlap: Duration,
    /// The tenure leading at the end of the window, if any: (port, token).
    pub leader_after: Option<(u16, u64)>,
    /// When the old tenure last answered "leader", after the tampering.
    pub old_last_leader: Option<Duration>,
}

/// The first sidecar that says it leads, with its token.
pub fn leader_of(sidecars: &[Sidecar], limit: Duration) -> Option<(usize, u64)> {
    eventually(limit, || {
        sidecars.iter().enumerate().find_map(|(i, s)| {
            let v = s.leader()?;
            (v["is_leader"] == true).then(|| (i, v["fencing_token"].as_u64().unwrap_or(0)))
        })
    })
}

/// Three candidates of election `tamper` at ttl 6 s for the tampering tests, with a
/// long renew interval (3 s: without its own-record watch the old leader would claim
/// on for seconds) and a short retry interval (500 ms). `args`: the store's.
pub fn candidates(args: SidecarArgs, dir: &std::path::Path) -> Vec<Sidecar> {
    let args = (args.ttl("6s").election("tamper"))
        .flag("--renew-interval", "3s")
        .flag("--retry-interval", "500ms")
        .build();
    (0..3)
        .map(|i| Sidecar::spawn(&format!("t{i}"), dir, &args))
        .collect()
}

/// Waits for a leader among `sidecars`, tampers (`tamper` gets the leader's index),
/// watches for `window`, and reports. The sidecars keep running.
pub fn tamper_with_leader(
    sidecars: &[Sidecar],
    window: Duration,
    tamper: impl FnOnce(usize),
) -> Outcome {
    tamper_with_leader_at(sidecars, window, |li| {
        let t0 = Instant::now();
        tamper(li);
        t0
    })
}

/// [`tamper_with_leader`], counting from the moment `tamper` returns: the instant just
/// before its write, after whatever it looked up first.
pub fn tamper_with_leader_at(
    sidecars: &[Sidecar],
    window: Duration,
    tamper: impl FnOnce(usize) -> Instant,
) -> Outcome {
    let (li, old_token) =
        leader_of(sidecars, Duration::from_secs(15)).expect("a leader before the tampering");
    let old_port = sidecars[li].port;
    let ports: Vec<u16> = sidecars.iter().map(|s| s.port).collect();
    let observer = Observer::start(&ports);
    observer.wait_answered(&ports, Duration::from_secs(10));
    let t0 = tamper(li);
    // Observed: the window after the tampering.
    std::thread::sleep(window);
    let seen = observer.finish();
    outcome(&seen, old_port, old_token, t0)
}

/// Judges the answers seen around a tampering at `t0`.
pub fn outcome(seen: &[Seen], old_port: u16, old_token: u64, t0: Instant) -> Outcome {
    let is_old = |s: &Seen| s.port == old_port && s.token == Some(old_token);
    let old_last = seen
        .iter()
        .filter(|s| s.leader && is_old(s))
        .map(|s| s.recv)
        .max();
    let other_first = seen
        .iter()
        .filter(|s| s.leader && !is_old(s) && s.sent >= t0)
        .map(|s| s.sent)
        .min();
    let overlap = match (old_last, other_first) {
        (Some(old), Some(other)) => old.saturating_duration_since(other),
        _ => Duration::ZERO,
    };
    // The leader at the end: the last answers of each port.
    let last_time = seen.iter().map(|s| s.sent).max();
    let leader_after = last_time.and_then(|end| {
        seen.iter()
            .rfind(|s| s.leader && s.sent + Duration::from_millis(200) >= end)
            .map(|s| (s.port, s.token.unwrap_or(0)))
    });
    Outcome {
        old_port,
        old_token,
        overlap,
        leader_after,
        old_last_leader: old_last.map(|t| t.saturating_duration_since(t0)),
    }
}

/// The checks of DESIGN invariant 9 after tampering with the leader's record: any
/// overlap seen from outside is at most `max_overlap`, and a later tenure leads
/// with a higher token.
pub fn assert_recovered(o: &Outcome, max_overlap: Duration) {
    assert!(
        o.overlap <= max_overlap,
        "after the tampering the old leader (port {}, token {}) went on answering leader {:?} after another tenure did (allowed {max_overlap:?}): {o:?}",
        o.old_port,
        o.old_token,
        o.overlap
    );
    let (port, token) = o
        .leader_after
        .unwrap_or_else(|| panic!("no leader at the end of the window: {o:?}"));
    assert!(
        token > o.old_token,
        "the tenure leading after the tampering (port {port}) has token {token}, not above the old {}: {o:?}",
        o.old_token
    );
}

/// After an overwrite that hands the lease to no candidate: the old tenure stopped
/// answering "leader" within `bound` of the tampering.
pub fn assert_stopped_within(o: &Outcome, bound: Duration) {
    assert!(
        o.old_last_leader.is_none_or(|d| d <= bound),
        "the leader went on claiming after its record was overwritten: {o:?}"
    );
}
