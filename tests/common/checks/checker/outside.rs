//! The outside view: every live sidecar's `/leader` and `/is-leader` polled from
//! outside while the rounds run, and the check that no two processes were seen to
//! lead at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::harness::http;

/// One answer seen from outside.
#[derive(Clone, Debug)]
pub(super) struct Observation {
    port: u16,
    sent: Instant,
    recv: Instant,
    leader: bool,
    /// Only `/leader` answers carry the token; `/is-leader` answers do not.
    token: Option<u64>,
}

/// Polls every live sidecar's `/leader` and `/is-leader`, one thread per slot.
pub(super) struct Poller {
    ports: Arc<Mutex<Vec<Option<u16>>>>,
    seen: Arc<Mutex<Vec<Observation>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Poller {
    pub(super) fn start(slots: usize) -> Poller {
        let ports = Arc::new(Mutex::new(vec![None; slots]));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..slots)
            .map(|slot| {
                let (ports, seen, stop) = (ports.clone(), seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut round = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        round += 1;
                        let port = ports.lock().expect("ports")[slot];
                        if let Some(port) = port {
                            let path = if round.is_multiple_of(2) {
                                "/leader"
                            } else {
                                "/is-leader"
                            };
                            let sent = Instant::now();
                            if let Some((code, body)) = http::get(port, path) {
                                let recv = Instant::now();
                                let obs = if path == "/leader" {
                                    let v: serde_json::Value =
                                        serde_json::from_str(&body).unwrap_or_default();
                                    Observation {
                                        port,
                                        sent,
                                        recv,
                                        leader: v["is_leader"].as_bool().unwrap_or(false),
                                        token: v["fencing_token"].as_u64(),
                                    }
                                } else {
                                    assert!(
                                        (code == 200 && body == "true")
                                            || (code == 503 && body == "false"),
                                        "/is-leader answered {code} {body:?}"
                                    );
                                    Observation {
                                        port,
                                        sent,
                                        recv,
                                        leader: code == 200,
                                        token: None,
                                    }
                                };
                                seen.lock().expect("seen").push(obs);
                            }
                        }
                        // Pause: the outside view asks each sidecar every 10 ms.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                })
            })
            .collect();
        Poller {
            ports,
            seen,
            stop,
            threads,
        }
    }

    pub(super) fn set(&self, slot: usize, port: Option<u16>) {
        self.ports.lock().expect("ports")[slot] = port;
    }

    /// Stops the threads and returns what they saw. A poller thread that panicked
    /// (an `/is-leader` answer that broke the contract, say) fails the test here:
    /// its assertion must not just end that slot's polling.
    pub(super) fn finish(self) -> Vec<Observation> {
        self.stop.store(true, Ordering::SeqCst);
        let failures: Vec<String> = self
            .threads
            .into_iter()
            .filter_map(|t| t.join().err())
            .map(|panic| panic_message(&*panic))
            .collect();
        assert!(
            failures.is_empty(),
            "a poller thread failed: {}",
            failures.join("; ")
        );
        let seen = self.seen.lock().expect("seen");
        seen.clone()
    }
}

/// Text of a panic payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// (b) No process answered "leader" while another held an unbroken tenure: for each
/// process, two "leader" answers with the same token and no other answer between
/// them prove it led from the first reply to the second request; nobody else may
/// have answered "leader" entirely inside that span.
fn check_outside_view(observations: &[Observation]) {
    check_outside_view_but(observations, &[], Duration::ZERO);
}

/// The outside view, leaving out answers given within `tolerance` after a tampering
/// (`tampered`, CLOCK_MONOTONIC ns), when two leaders may briefly answer.
pub(super) fn check_outside_view_but(
    observations: &[Observation],
    tampered: &[u64],
    tolerance: Duration,
) {
    let excused = |o: &Observation| {
        let at = leasekeeper::clock::to_monotonic_ns(tokio::time::Instant::from_std(o.sent));
        let tol = tolerance.as_nanos() as u64;
        tampered.iter().any(|&t| t <= at + tol && at <= t + tol * 2)
    };
    let kept: Vec<Observation> = observations
        .iter()
        .filter(|o| !excused(o))
        .cloned()
        .collect();
    let observations = &kept[..];
    let mut by_port: HashMap<u16, Vec<&Observation>> = HashMap::new();
    for o in observations {
        by_port.entry(o.port).or_default().push(o);
    }
    let mut certain: Vec<(u16, Instant, Instant, u64)> = Vec::new();
    for (port, obs) in by_port.iter_mut() {
        obs.sort_by_key(|o| o.sent);
        let mut run: Vec<&Observation> = Vec::new();
        let flush = |run: &mut Vec<&Observation>,
                     certain: &mut Vec<(u16, Instant, Instant, u64)>| {
            let mut spans: HashMap<u64, (Instant, Instant)> = HashMap::new();
            for o in run.iter() {
                if let Some(t) = o.token {
                    let span = spans.entry(t).or_insert((o.recv, o.sent));
                    span.0 = span.0.min(o.recv);
                    span.1 = span.1.max(o.sent);
                }
            }
            for (t, (from, to)) in spans {
                if from < to {
                    certain.push((*port, from, to, t));
                }
            }
            run.clear();
        };
        for o in obs.iter() {
            if o.leader {
                run.push(o);
            } else {
                flush(&mut run, &mut certain);
            }
        }
        flush(&mut run, &mut certain);
    }
    for o in observations.iter().filter(|o| o.leader) {
        for (port, from, to, token) in &certain {
            if *port != o.port && *from <= o.sent && o.recv <= *to {
                panic!("seen from outside: port {} answered leader while port {port} held token {token} without a break", o.port);
            }
        }
    }
}

#[cfg(test)]
mod self_test {
    // Imported in each test: the bench, built as a test without a harness, drops them.
    #[test]
    #[should_panic(expected = "a poller thread failed")]
    fn a_failed_assertion_in_a_poller_thread_fails_the_test() {
        use super::{Duration, Poller};
        // A listener that answers /is-leader with a body the contract forbids.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for conn in listener.incoming().flatten().take(50) {
                let mut conn = conn;
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nmaybe",
                );
            }
        });
        let poller = Poller::start(1);
        poller.set(0, Some(port));
        // Observed: the poller runs 300 ms against an answer it cannot read.
        std::thread::sleep(Duration::from_millis(300));
        poller.finish();
    }

    #[test]
    #[should_panic(expected = "seen from outside")]
    fn the_checker_catches_two_leaders_seen_from_outside() {
        use super::{check_outside_view, Duration, Instant, Observation};
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let obs = vec![
            Observation {
                port: 1,
                sent: ms(0),
                recv: ms(1),
                leader: true,
                token: Some(3),
            },
            Observation {
                port: 1,
                sent: ms(10),
                recv: ms(11),
                leader: true,
                token: Some(3),
            },
            Observation {
                port: 2,
                sent: ms(4),
                recv: ms(5),
                leader: true,
                token: None,
            },
        ];
        check_outside_view(&obs);
    }
}
