//! `LK_BENCH_ONLY=slots`: an election of two slots (`--holders 2`), four candidates, on
//! etcd, ZooKeeper and Redis: a slot handed over on SIGTERM (the slot's holder stops →
//! the next claim of that slot, from the transition logs), and the store requests of
//! the two waiting candidates at steady state. Each slot is a lease of its own on the
//! store, so a slot's floor is the election's (`floor`), measured on the same server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasekeeper::clock::monotonic_now_ns;

use crate::common::scenarios::slots::{all_slots_held, logged_claims};
use crate::common::servers::etcd_server::EtcdCluster;
use crate::common::servers::redis_server::{client_ports, RedisServer};
use crate::common::servers::zk_server::ZkEnsemble;
use crate::common::{eventually, Sidecar, SidecarArgs};
use crate::floor;
use crate::look::after_stop;
use crate::page::Key;
use crate::report::Report;
use crate::settings::number_from_env;

const CANDIDATES: usize = 4;

pub fn measure(report: &mut Report, rounds: usize) {
    let etcd = EtcdCluster::start(1);
    let args = SidecarArgs::etcd(&etcd.endpoints()).ttl("15s");
    report.latency(
        Key::new("slots", "etcd", "leasekeeper"),
        handovers(args, rounds),
    );
    let at_floor = floor::totals(floor::etcd::handovers(&etcd.endpoint(0), rounds));
    floor::report(report, "slots", "etcd", at_floor);
    drop(etcd);
    let zk = ZkEnsemble::start_roomy(1);
    let args = SidecarArgs::zookeeper(&zk.connect_string()).ttl("4s");
    report.latency(
        Key::new("slots", "zookeeper", "leasekeeper"),
        handovers(args, rounds),
    );
    let at_floor = floor::totals(floor::zookeeper::handovers(&zk.connect_string(), rounds));
    floor::report(report, "slots", "zookeeper", at_floor);
    drop(zk);
    let redis = RedisServer::start();
    let args = SidecarArgs::redis(&redis.url()).ttl("15s");
    report.latency(
        Key::new("slots", "redis", "leasekeeper"),
        handovers(args, rounds),
    );
    let at_floor = floor::totals(floor::redis::handovers(&[redis.url()], rounds));
    floor::report(report, "slots", "redis", at_floor);
    steady(report, &redis);
}

/// Four candidates of two slots (each logging to `<dir>/<name>.jsonl`).
struct Slots {
    dir: tempfile::TempDir,
    args: SidecarArgs,
    cars: Vec<Sidecar>,
    spawned: usize,
}

impl Slots {
    fn start(args: SidecarArgs) -> Slots {
        let mut s = Slots {
            dir: tempfile::tempdir().expect("dir"),
            args: args.election("bench-slots").flag("--holders", "2"),
            cars: Vec::new(),
            spawned: 0,
        };
        for _ in 0..CANDIDATES {
            let car = s.spawn();
            s.cars.push(car);
        }
        s
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.jsonl"))
    }

    fn spawn(&mut self) -> Sidecar {
        let name = format!("w-{}", self.spawned);
        self.spawned += 1;
        let log = self.log(&name).display().to_string();
        let args = self.args.clone().flag("--transition-log", &log).build();
        Sidecar::spawn(&name, self.dir.path(), &args)
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Both slots held and both waiting candidates listing both holders.
    fn settled(&self) -> Vec<(usize, u64, u64)> {
        let held = all_slots_held(&self.cars, 2, Duration::from_secs(60));
        let listed = eventually(Duration::from_secs(30), || {
            (0..self.cars.len())
                .filter(|i| held.iter().all(|h| h.0 != *i))
                .all(|i| {
                    self.cars[i].leader().is_some_and(|v| {
                        v["holders"].as_array().is_some_and(|l| {
                            held.iter().all(|h| {
                                l.iter()
                                    .any(|e| e["slot"] == h.1 && e["fencing_token"] == h.2)
                            })
                        })
                    })
                })
                .then_some(())
        });
        assert!(
            listed.is_some(),
            "the waiting candidates never listed both holders"
        );
        held
    }
}

/// `rounds` times: SIGTERM one slot's holder, time its slot's next claim, restart it.
fn handovers(args: SidecarArgs, rounds: usize) -> Vec<f64> {
    let mut s = Slots::start(args);
    let mut took = Vec::new();
    for round in 0..rounds {
        let held = s.settled();
        let (gone, slot, _) = held[round % 2];
        std::thread::sleep(Duration::from_millis(20));
        let t0 = monotonic_now_ns();
        s.cars[gone].signal(libc::SIGTERM);
        let next = after_stop(Duration::from_secs(30), || {
            logged_claims(s.dir())
                .into_iter()
                .find(|c| c.start > t0 && c.slot.unwrap_or(0) == slot)
        })
        .expect("the slot's next claim");
        took.push((next.start - t0) as f64 / 1e6);
        let _ = s.cars[gone].wait_exit(Duration::from_secs(10));
        s.cars[gone] = s.spawn();
    }
    took
}

/// Redis: every command the two waiting candidates' connections send per second at
/// steady state (MONITOR, attributed to each process's sockets), each.
fn steady(report: &mut Report, redis: &RedisServer) {
    let s = Slots::start(SidecarArgs::redis(&redis.url()).ttl("15s"));
    let held = s.settled();
    let window = Duration::from_secs(number_from_env("LK_BENCH_WINDOW_S", 20));
    let seen = redis.monitor(window);
    let waiting: Vec<usize> = (0..s.cars.len())
        .filter(|i| held.iter().all(|h| h.0 != *i))
        .collect();
    let sent: usize = waiting
        .iter()
        .map(|&i| {
            let ports = client_ports(s.cars[i].pid, redis.port);
            seen.iter().filter(|(p, _)| ports.contains(p)).count()
        })
        .sum();
    report.value(
        Key::new("slots", "redis_waiting", "leasekeeper"),
        format!(
            "{:.2}",
            sent as f64 / waiting.len() as f64 / window.as_secs_f64()
        ),
    );
}
