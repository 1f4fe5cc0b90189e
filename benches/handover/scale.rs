//! `LK_BENCH_ONLY=scale`: `LK_BENCH_CANDIDATES` (100) candidates on one election per
//! backend, ttl 15 s: store requests/s at steady state, sidecar RSS and CPU per
//! candidate, then `LK_BENCH_SCALE_ROUNDS` (10) graceful handovers: latency and store
//! requests per handover (the steady rate subtracted; the stopped candidate's restart,
//! as a follower that joins, included), and the outside observer's overlap check on
//! every claim of the run. `LK_BENCH_SCALE_BACKEND=redis` (a prefix of the backend's
//! name) runs one backend.

use std::time::{Duration, Instant};

use crate::common::checks::checker::{check_claims_never_overlap, check_tokens_strictly_grow};
use crate::common::servers::etcd_server::EtcdCluster;
use crate::common::servers::fake_kube::FakeKube;
use crate::common::servers::redis_server::RedisServer;
use crate::common::servers::zk_server::ZkEnsemble;
use crate::common::SidecarArgs;
use crate::footprint::{cpu_ns, rss_kib};
use crate::group::{Group, Stop};
use crate::page::Key;
use crate::redis::all_calls;
use crate::report::Report;
use crate::settings::number_from_env;

/// Requests a store has served so far; none for the file backend (the kernel holds the
/// lock).
type Count<'a> = Option<Box<dyn Fn() -> f64 + 'a>>;

/// The steady-state window, after every follower has settled.
const WINDOW: Duration = Duration::from_secs(15);

/// Takes its own number of rounds (`LK_BENCH_SCALE_ROUNDS`).
pub fn measure(report: &mut Report, _rounds: usize) {
    let n = number_from_env("LK_BENCH_CANDIDATES", 100);
    let rounds = number_from_env("LK_BENCH_SCALE_ROUNDS", 10);
    let only_backend = std::env::var("LK_BENCH_SCALE_BACKEND").ok();
    let stores = Stores::start();
    for (name, args, count) in stores.cases() {
        if only_backend
            .as_deref()
            .is_some_and(|b| !name.starts_with(b))
        {
            continue;
        }
        let run = ScaleRun::measure(name, args, count.as_deref(), n, rounds);
        run.report(report, name);
    }
}

/// One server of each backend.
struct Stores {
    dir: tempfile::TempDir,
    redis: RedisServer,
    redlock: Vec<RedisServer>,
    etcd: EtcdCluster,
    zk: ZkEnsemble,
    api: FakeKube,
}

impl Stores {
    fn start() -> Stores {
        Stores {
            dir: tempfile::tempdir().expect("dir"),
            redis: RedisServer::start(),
            redlock: (0..3).map(|_| RedisServer::start()).collect(),
            etcd: EtcdCluster::start(1),
            zk: ZkEnsemble::start_roomy(1),
            api: FakeKube::start("team"),
        }
    }

    /// (backend, which is its row on the page, sidecar arguments, request count) for
    /// each backend.
    fn cases(&self) -> Vec<(&'static str, Vec<String>, Count<'_>)> {
        let redlock_urls = self
            .redlock
            .iter()
            .map(|s| s.url())
            .collect::<Vec<_>>()
            .join(",");
        let etcd = &self.etcd;
        vec![
            (
                "file",
                SidecarArgs::file(self.dir.path()).ttl("15s").build(),
                None,
            ),
            (
                "redis",
                SidecarArgs::redis(&self.redis.url())
                    .ttl("15s")
                    .election("scale")
                    .build(),
                Some(Box::new(|| all_calls(&self.redis))),
            ),
            (
                "redlock3",
                SidecarArgs::redlock(&redlock_urls)
                    .ttl("15s")
                    .election("scale")
                    .build(),
                Some(Box::new(|| self.redlock.iter().map(all_calls).sum())),
            ),
            (
                "etcd",
                SidecarArgs::etcd(&etcd.endpoints())
                    .ttl("15s")
                    .election("scale")
                    .build(),
                Some(Box::new(|| {
                    etcd.metric(0, "grpc_server_handled_total", "grpc_type=\"unary\"")
                        + etcd.metric(
                            0,
                            "grpc_server_msg_received_total",
                            "grpc_type=\"bidi_stream\"",
                        )
                })),
            ),
            (
                "zookeeper",
                SidecarArgs::zookeeper(&self.zk.connect_string())
                    .ttl("15s")
                    .election("scale")
                    .build(),
                Some(Box::new(|| self.zk.mntr("zk_packets_received"))),
            ),
            (
                "kubernetes",
                SidecarArgs::kubernetes(&self.api.kubeconfig())
                    .ttl("15s")
                    .election("scale")
                    .build(),
                Some(Box::new(|| {
                    self.api.requests().values().sum::<usize>() as f64
                })),
            ),
        ]
    }
}

/// What one backend's run measured.
struct ScaleRun {
    n: usize,
    rounds: usize,
    /// Store requests per second at steady state.
    steady_rate: Option<f64>,
    /// Sidecars' CPU time over the steady window, ns, all candidates.
    steady_cpu_ns: u64,
    /// Sidecars' RSS at the end of the steady window, KiB, all candidates.
    rss_kib: u64,
    latency: Vec<f64>,
    /// Store requests over the handovers, and the seconds they took.
    handover_requests: Option<(f64, f64)>,
    claims: usize,
    seconds: f64,
}

impl ScaleRun {
    fn measure(
        name: &str,
        args: Vec<String>,
        count: Option<&(dyn Fn() -> f64 + '_)>,
        n: usize,
        rounds: usize,
    ) -> ScaleRun {
        let started = Instant::now();
        let mut g = Group::new(args, n);
        let leader = g.leader(Duration::from_secs(60)).expect("a leader");
        assert!(g.settled(leader), "{name}: {n} candidates never settled");
        // Steady state: a window after every follower has settled.
        std::thread::sleep(Duration::from_secs(3));
        let cpu0: u64 = g.slots.iter().map(|s| cpu_ns(s.pid)).sum();
        let r0 = count.map(|c| c());
        std::thread::sleep(WINDOW);
        let r1 = count.map(|c| c());
        let cpu1: u64 = g.slots.iter().map(|s| cpu_ns(s.pid)).sum();
        let rss: u64 = g.slots.iter().map(|s| rss_kib(s.pid)).sum();
        let steady_rate = r0.zip(r1).map(|(a, b)| (b - a) / WINDOW.as_secs_f64());
        let t0 = Instant::now();
        let h0 = count.map(|c| c());
        let h = g.handovers(Stop::Graceful, rounds, None);
        // Count the last handover's requests in full: every follower has caught up.
        let last = g.leader(Duration::from_secs(30)).expect("a leader");
        assert!(g.settled(last), "{name}: followers never caught up");
        let h1 = count.map(|c| c());
        let spent = t0.elapsed().as_secs_f64();
        let claims = g.claims();
        check_claims_never_overlap(&claims);
        check_tokens_strictly_grow(&claims);
        ScaleRun {
            n,
            rounds,
            steady_rate,
            steady_cpu_ns: cpu1.saturating_sub(cpu0),
            rss_kib: rss,
            latency: h.latency,
            handover_requests: h0.zip(h1).map(|(a, b)| (b - a, spent)),
            claims: claims.len(),
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// The cells of the store's row, `row`, of the 100 candidates' table.
    fn report(self, report: &mut Report, row: &'static str) {
        let n = self.n as f64;
        let cell = |column| Key::new("scale", row, column);
        report.latency(cell("handover"), self.latency);
        if let (Some(rate), Some((requests, spent))) = (self.steady_rate, self.handover_requests) {
            report.value(cell("steady"), format!("{:.3}", rate / n));
            let per = (requests - rate * spent).max(0.0) / self.rounds as f64;
            report.value(cell("per_handover"), format!("{:.2}", per / (n - 1.0)));
        }
        report.value(
            cell("footprint"),
            format!(
                "{:.1} MiB / {:.3} ms/s",
                self.rss_kib as f64 / 1024.0 / n,
                self.steady_cpu_ns as f64 / 1e6 / WINDOW.as_secs_f64() / n
            ),
        );
        report.value(
            cell("overlaps"),
            format!("0 of {} claims ({:.0} s)", self.claims, self.seconds),
        );
    }
}
