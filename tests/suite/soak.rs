//! `make soak`: every backend through at least `LK_SOAK_TRANSITIONS` (default 1000)
//! leader transitions under the election checker, mixing every fault kind that applies
//! to that backend with graceful stops and releases. Not part of `cargo test`: every
//! test here is `#[ignore]`d; `make soak` runs them with `--ignored`, one at a time.
//!
//! Each backend runs the checker in batches ([`BATCH`] rounds at most, fresh sidecars
//! and checks per batch, one store for the whole soak) until the batches together saw
//! the target number of tenures. Every batch is judged in full by the checker
//! (`tests/common/checks/checker/`): claims from the transition logs, the outside view,
//! token order, failover bounds, and the store's own record where a recorder exists;
//! across batches, the first token of a batch must be above the last of the one
//! before. Any violation panics, so a finished soak means none was seen.
//!
//! Rounds: the backend's fault kinds in turn, each followed by `gap` cheap rounds
//! (graceful stops, every fourth a `/release`), `gap` = target / (5 × kinds), between
//! 1 and 12: at the default target every kind runs at least about 5 times, and most
//! transitions come from the cheap rounds, so that the nine backends finish within an
//! hour on two cores. Each test appends one Markdown row to `target/soak/results.md`.
//!
//! Three candidates, except on `file` and ZooKeeper: two. There a third candidate
//! learns of a new leader only at its retry interval (file followers poll the lock;
//! a ZooKeeper follower watches only its predecessor's node), and the checker lets
//! every follower follow before each graceful stop or release, so every transition
//! would cost that interval; a queue (ZooKeeper) or a lock (flock) also leaves a third
//! candidate no race to run.

use crate::common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::checks::checker::ServerControl;
use common::checks::checker::{self, ElectionSpec, Extras, Fault, Links, RedisCluster, Report};
use common::eventually;
use common::harness::faults::Link;
use common::harness::recorder::Recorder;
use common::scenarios::slots::Strikes;
use common::scenarios::stores::{addresses, local};
use common::servers::etcd_server::EtcdCluster;
use common::servers::fake_kube::FakeKube;
use common::servers::redis_server::RedisServer;
use common::servers::zk_server::{with_zk, ZkEnsemble};
use common::SidecarArgs;

/// Rounds per checker run at most.
const BATCH: usize = 150;
/// Rounds per checker run at least.
const MIN_BATCH: usize = 12;

/// The transitions each backend must go through (`LK_SOAK_TRANSITIONS`).
fn target() -> usize {
    std::env::var("LK_SOAK_TRANSITIONS")
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("LK_SOAK_TRANSITIONS={v:?} is not a count"))
        })
        .unwrap_or(1000)
}

/// The order of the rounds: each fault kind in turn, `gap` cheap rounds after each.
struct Plan {
    kinds: Vec<Fault>,
    gap: usize,
}

impl Plan {
    fn new(kinds: &[Fault], target: usize) -> Plan {
        Plan {
            kinds: kinds.to_vec(),
            gap: (target / (5 * kinds.len())).clamp(1, 12),
        }
    }

    fn fault(&self, i: usize) -> Fault {
        let cycle = self.gap + 1;
        let k = i % (cycle * self.kinds.len());
        match k % cycle {
            0 => self.kinds[k / cycle],
            // Every fourth cheap round of the run is a release: the releaser sits out
            // one renew interval, which the next handover waits for.
            n if ((i / cycle) * self.gap + n).is_multiple_of(4) => Fault::Release,
            _ => Fault::Graceful,
        }
    }
}

/// What a backend's batches saw together.
#[derive(Default)]
struct Totals {
    rounds: usize,
    batches: usize,
    transitions: usize,
    faults: BTreeMap<&'static str, usize>,
    takeover_ms: BTreeMap<&'static str, Vec<f64>>,
    past_store_ms: Option<f64>,
    past_store_tampered_ms: Option<f64>,
    unjudged: usize,
    last_token: Option<u64>,
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Totals {
    fn add(&mut self, name: &str, rounds: usize, r: Report) {
        if let (Some(last), Some(first)) = (self.last_token, r.first_token) {
            assert!(
                first > last,
                "{name}: fencing token did not grow across batches: {last} then {first}"
            );
        }
        self.last_token = r.last_token.or(self.last_token);
        self.rounds += rounds;
        self.batches += 1;
        self.transitions += r.transitions;
        for (k, n) in r.faults {
            *self.faults.entry(k).or_default() += n;
        }
        for (k, v) in r.takeover_ms {
            self.takeover_ms.entry(k).or_default().extend(v);
        }
        self.past_store_ms = max_opt(self.past_store_ms, r.longest_past_store_ms);
        self.past_store_tampered_ms = max_opt(
            self.past_store_tampered_ms,
            r.longest_past_store_tampered_ms,
        );
        self.unjudged += r.unjudged_by_store;
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(v: f64) -> String {
    format!("{v:.0}")
}

const HEADER: &str = "| backend | ttl | transitions | rounds (batches) | faults: count (takeover p50/p99 ms) | overlaps seen from outside | overlaps seen against the store | token regressions | longest claim past the store's expiry | wall time |\n|---|---|---|---|---|---|---|---|---|---|\n";

fn results_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/soak/results.md")
}

/// One Markdown row; appended to `target/soak/results.md` (with the header first when
/// the file is new) and printed.
fn report_row(name: &str, ttl: Duration, store: bool, t: &Totals, wall: Duration) {
    let faults: Vec<String> = t
        .faults
        .iter()
        .map(|(k, n)| match t.takeover_ms.get(k) {
            Some(v) if !v.is_empty() => {
                let mut v = v.clone();
                v.sort_by(f64::total_cmp);
                format!(
                    "{k} {n} ({}/{})",
                    ms(percentile(&v, 0.5)),
                    ms(percentile(&v, 0.99))
                )
            }
            _ => format!("{k} {n} (–)"),
        })
        .collect();
    let past = if store {
        let mut s = t
            .past_store_ms
            .map_or("–".to_owned(), |v| format!("{} ms", ms(v)));
        if let Some(v) = t.past_store_tampered_ms {
            s.push_str(&format!(
                " (record tampered with: {} ms, {} allowed)",
                ms(v),
                checker::TAMPER_TOLERANCE.as_millis()
            ));
        }
        s
    } else {
        "n/a".to_owned()
    };
    let row = format!(
        "| {name} | {} | {} | {} ({}) | {} | 0 | {} | 0 | {past} | {:.1} min |\n",
        humantime(ttl),
        t.transitions,
        t.rounds,
        t.batches,
        faults.join("; "),
        if !store {
            "n/a".to_owned()
        } else if t.unjudged > 0 {
            format!(
                "0 ({} claims during recorder reconnects not judged)",
                t.unjudged
            )
        } else {
            "0".to_owned()
        },
        wall.as_secs_f64() / 60.0
    );
    append_row(&row);
}

/// Appends a row to `target/soak/results.md`, with the header first when the file is
/// new, and prints it.
fn append_row(row: &str) {
    append_row_to(&results_path(), HEADER, row);
}

/// Appends `row` to the Markdown table at `path`, with `header` first when the file is
/// new, and prints it.
fn append_row_to(path: &Path, header: &str, row: &str) {
    eprint!("{header}{row}");
    std::fs::create_dir_all(path.parent().expect("target/soak")).expect("create target/soak");
    let new = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the results");
    if new {
        f.write_all(header.as_bytes()).expect("write the results");
    }
    f.write_all(row.as_bytes()).expect("write the results");
}

fn humantime(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Runs `batch` (one checker run over the given rounds) until the target is reached,
/// then reports. `store`: whether the batches check claims against a store recorder.
fn soak(
    name: &str,
    ttl: Duration,
    kinds: &[Fault],
    store: bool,
    mut batch: impl FnMut(Vec<Fault>) -> Report,
) {
    let target = target();
    let plan = Plan::new(kinds, target);
    let started = Instant::now();
    let mut totals = Totals::default();
    // A failed batch still gets its row (what failed, after how much), then fails.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_batches(name, kinds, target, &plan, &mut totals, &mut batch)
    }));
    if let Err(panic) = run {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        let first = message.lines().next().unwrap_or("").replace('|', "/");
        let first: String = first.chars().take(300).collect();
        append_row(&format!(
            "| {name} | {} | **FAILED** in batch {} after {} transitions in earlier batches: {first} | | | | | | | {:.1} min |\n",
            humantime(ttl),
            totals.batches + 1,
            totals.transitions,
            started.elapsed().as_secs_f64() / 60.0
        ));
        std::panic::resume_unwind(panic);
    }
    report_row(name, ttl, store, &totals, started.elapsed());
}

/// The batch under way, counted by `run_batches` (the batches of one soak run one
/// after another on one thread).
static BATCH_NO: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The clock-rate fault in the soak: every other batch runs its sidecars with their
/// clocks at 0.995× real speed (libfaketime), within the 1% `--clock-drift`: no
/// overlap may follow (the checker maps their logged claims back to the host's clock;
/// tests/suite/checker_self_test.rs shows a rate beyond the allowance caught).
fn batch_clock_rate() -> Option<f64> {
    (BATCH_NO.load(std::sync::atomic::Ordering::SeqCst) % 2 == 1).then_some(0.995)
}

fn run_batches(
    name: &str,
    kinds: &[Fault],
    target: usize,
    plan: &Plan,
    totals: &mut Totals,
    batch: &mut impl FnMut(Vec<Fault>) -> Report,
) {
    let started = Instant::now();
    let mut next = 0;
    // Until the target is reached and every fault kind ran at least once (a small
    // LK_SOAK_TRANSITIONS still runs each kind; after a whole cycle of the plan the
    // batches go on only while a kind has not been counted, for at most 3 cycles).
    let cycle = (plan.gap + 1) * kinds.len();
    let missing = |totals: &Totals| kinds.iter().any(|k| !totals.faults.contains_key(k.name()));
    while totals.transitions < target || (missing(totals) && next < 3 * cycle) {
        let remaining = target
            .saturating_sub(totals.transitions)
            .max(cycle.saturating_sub(next));
        let n = (remaining * 5 / 4).clamp(MIN_BATCH, BATCH);
        let rounds: Vec<Fault> = (next..next + n).map(|i| plan.fault(i)).collect();
        next += n;
        let t0 = Instant::now();
        BATCH_NO.store(totals.batches, std::sync::atomic::Ordering::SeqCst);
        let report = batch(rounds);
        eprintln!(
            "{name}: batch {} of {n} rounds: {} transitions in {:.0?} (total {} of {target}, {:.0?})",
            totals.batches + 1,
            report.transitions,
            t0.elapsed(),
            totals.transitions + report.transitions,
            started.elapsed()
        );
        totals.add(name, n, report);
    }
    assert!(totals.transitions >= target);
    for k in kinds {
        assert!(
            totals.faults.contains_key(k.name()),
            "{name}: {k:?} never ran"
        );
    }
}

/// A store shared between the checker (as its `ServerControl`) and fault closures
/// (tampering, isolation) that need it too.
struct Shared<T>(Rc<RefCell<T>>);

impl<T: ServerControl> ServerControl for Shared<T> {
    fn pause(&mut self) {
        self.0.borrow_mut().pause()
    }
    fn resume(&mut self) {
        self.0.borrow_mut().resume()
    }
    fn restart(&mut self) {
        self.0.borrow_mut().restart()
    }
    fn nodes(&self) -> usize {
        self.0.borrow().nodes()
    }
    fn pause_node(&mut self, node: usize) {
        self.0.borrow_mut().pause_node(node)
    }
    fn resume_node(&mut self, node: usize) {
        self.0.borrow_mut().resume_node(node)
    }
    fn restart_node(&mut self, node: usize) {
        self.0.borrow_mut().restart_node(node)
    }
    fn leader_node(&self) -> Option<usize> {
        self.0.borrow().leader_node()
    }
}

fn spec(
    args: Vec<String>,
    ttl: Duration,
    rounds: Vec<Fault>,
    server: Option<&mut dyn ServerControl>,
    restart_loses_data: bool,
) -> ElectionSpec<'_> {
    ElectionSpec {
        restart_loses_data,
        ..ElectionSpec::three_candidates(args, ttl, rounds, server)
    }
}

/// Link faults: every one needs `Extras::links`.
const LINK_FAULTS: [Fault; 5] = [
    Fault::PartitionLeader,
    Fault::PartitionFollower,
    Fault::SlowLeader,
    Fault::CongestedLeader,
    Fault::LeaderRepliesHeld,
];

fn kinds(list: &[&[Fault]]) -> Vec<Fault> {
    list.concat()
}

/// The faults of one store process (redis, the SQL servers): the leader's and the
/// store's, every link fault, and tampering with the record.
fn one_store_faults() -> Vec<Fault> {
    kinds(&[
        &[
            Fault::Kill9,
            Fault::PauseLeader,
            Fault::PauseServer,
            Fault::RestartServer,
        ],
        &LINK_FAULTS,
        &[Fault::TamperDelete, Fault::TamperOverwrite],
    ])
}

#[test]
#[ignore = "long: make soak"]
fn soak_1_file() {
    let dir = tempfile::tempdir().expect("dir");
    let ttl = Duration::from_secs(1);
    // flock: a paused holder keeps the lock (takeover_while_leader_paused = false), and
    // there is no store process or link to fault.
    soak(
        "file",
        ttl,
        &[Fault::Kill9, Fault::PauseLeader],
        false,
        |rounds| {
            checker::run(ElectionSpec {
                takeover_while_leader_paused: false,
                candidates: 2,
                ..spec(
                    SidecarArgs::file(dir.path()).ttl("1s").build(),
                    ttl,
                    rounds,
                    None,
                    false,
                )
            })
        },
    );
}

#[test]
#[ignore = "long: make soak"]
fn soak_2_redis() {
    let mut server = RedisServer::start_persistent();
    let port = server.port;
    let ttl = Duration::from_secs(1);
    let election = "soak";
    soak("redis", ttl, &one_store_faults(), true, |rounds| {
        checker::run_with(
            spec(Vec::new(), ttl, rounds, Some(&mut server), false),
            Extras {
                clock_rate: batch_clock_rate(),
                links: Some(Links {
                    nodes: vec![local(port)],
                    args: Box::new(move |a| {
                        SidecarArgs::redis(&format!("redis://{}", a[0]))
                            .ttl("1s")
                            .election(election)
                            .build()
                    }),
                }),
                store: Some(Recorder::redis(port, election)),
                tamper: Some(Box::new(move |fault| {
                    let lock = format!("leasekeeper:{{{election}}}:lock");
                    let command = match fault {
                        Fault::TamperDelete => format!("DEL {lock}"),
                        _ => format!("SET {lock} x|0|intruder PX 1000"),
                    };
                    common::servers::redis_server::command_at(port, &command);
                })),
                ..Extras::default()
            },
        )
    });
}

/// Redlock over `n` nodes (without persistence, as the suite runs it): no store
/// recorder (no single node's record is the lease). Tampering deletes or overwrites
/// the lock key on a majority of the nodes (the leader hears of it on each, DESIGN
/// invariant 9; on a minority it must go on leading).
fn redlock(n: usize) {
    let mut cluster = RedisCluster::start(n);
    let majority: Vec<u16> = cluster
        .nodes
        .iter()
        .take(n / 2 + 1)
        .map(|s| s.port)
        .collect();
    let nodes: Vec<SocketAddr> = cluster.nodes.iter().map(|s| local(s.port)).collect();
    let ttl = Duration::from_secs(1);
    soak(
        &format!("redlock ({n} nodes)"),
        ttl,
        &kinds(&[
            &[
                Fault::Kill9,
                Fault::PauseLeader,
                Fault::PauseServer,
                Fault::PauseMinority,
                Fault::RestartOneNode,
                Fault::MinorityCut,
                Fault::TamperDelete,
                Fault::TamperOverwrite,
            ],
            &LINK_FAULTS,
        ]),
        false,
        |rounds| {
            let majority = majority.clone();
            checker::run_with(
                spec(Vec::new(), ttl, rounds, Some(&mut cluster), true),
                Extras {
                    tamper: Some(Box::new(move |fault| {
                        let command = match fault {
                            Fault::TamperDelete => "DEL leasekeeper:{soak}:lock",
                            _ => "SET leasekeeper:{soak}:lock x|0|intruder PX 1000",
                        };
                        for &port in &majority {
                            common::servers::redis_server::command_at(port, command);
                        }
                    })),
                    clock_rate: batch_clock_rate(),
                    links: Some(Links {
                        nodes: nodes.clone(),
                        args: Box::new(|a| {
                            let urls: Vec<String> =
                                a.iter().map(|a| format!("redis://{a}")).collect();
                            SidecarArgs::redlock(&urls.join(","))
                                .ttl("1s")
                                .election("soak")
                                .build()
                        }),
                    }),
                    ..Extras::default()
                },
            )
        },
    );
}

#[test]
#[ignore = "long: make soak"]
fn soak_3_redlock_3() {
    redlock(3);
}

#[test]
#[ignore = "long: make soak"]
fn soak_4_redlock_5() {
    redlock(5);
}

/// etcd with `n` members. Tampering: the key deleted (an overwritten key blocks the
/// election by design, see the etcd suite). With 3 members, no pause of a majority
/// (etcd 3.4 before 3.4.28 revokes live leases when a paused raft leader resumes,
/// etcd-io/etcd#12528, the checker's PauseMinority avoids the raft leader for that
/// reason); the members run in network namespaces of their own, and every other
/// isolation takes the raft leader (moved to the cut member first).
fn etcd(n: usize, ttl: Duration) {
    let cluster = Rc::new(RefCell::new(if n == 1 {
        EtcdCluster::start(1)
    } else {
        EtcdCluster::start_partitionable(n)
    }));
    let endpoints = cluster.borrow().endpoints();
    let nodes = addresses(&endpoints);
    let mut kinds = vec![
        Fault::Kill9,
        Fault::PauseLeader,
        Fault::RestartServer,
        Fault::TamperDelete,
    ];
    if n == 1 {
        kinds.push(Fault::PauseServer);
    } else {
        kinds.extend([
            Fault::PauseMinority,
            Fault::RestartOneNode,
            Fault::IsolateStoreNode,
        ]);
    }
    kinds.extend(LINK_FAULTS);
    let ttl_flag = humantime(ttl).replace(' ', "");
    let mut server = Shared(cluster.clone());
    let cuts = Rc::new(std::cell::Cell::new(0usize));
    soak(
        &format!("etcd ({n} member{})", if n == 1 { "" } else { "s" }),
        ttl,
        &kinds,
        true,
        |rounds| {
            let ttl_flag = ttl_flag.clone();
            let endpoints = endpoints.clone();
            let isolate: Option<Box<dyn FnMut(usize, bool)>> = (n > 1).then(|| {
                let cluster = cluster.clone();
                let cuts = cuts.clone();
                Box::new(move |node: usize, cut: bool| {
                    let etcd = cluster.borrow();
                    if cut {
                        if cuts.get().is_multiple_of(2) && !etcd.move_leader(node) {
                            eprintln!("soak: raft leadership did not move to member {node}");
                        }
                        etcd.isolate(node);
                        cuts.set(cuts.get() + 1);
                    } else {
                        etcd.heal(node);
                        let back =
                            eventually(Duration::from_secs(10), || etcd.raft_leader().map(|_| ()));
                        assert!(back.is_some(), "no raft leader after healing member {node}");
                    }
                }) as Box<dyn FnMut(usize, bool)>
            });
            checker::run_with(
                spec(Vec::new(), ttl, rounds, Some(&mut server), false),
                Extras {
                    clock_rate: batch_clock_rate(),
                    links: Some(Links {
                        nodes: nodes.clone(),
                        args: Box::new(move |a| {
                            let urls: Vec<String> =
                                a.iter().map(|a| format!("http://{a}")).collect();
                            SidecarArgs::etcd(&urls.join(","))
                                .ttl(&ttl_flag)
                                .election("soak")
                                .build()
                        }),
                    }),
                    store: Some(Recorder::etcd(
                        endpoints.split(',').map(str::to_owned).collect(),
                        "soak",
                    )),
                    tamper: Some(Box::new(move |_| {
                        let out = std::process::Command::new("etcdctl")
                            .env("ETCDCTL_API", "3")
                            .args(["--endpoints", &endpoints, "del", "--prefix", "soak/"])
                            .output();
                        assert!(out.is_ok_and(|o| o.status.success()), "etcdctl del");
                    })),
                    isolate,
                    ..Extras::default()
                },
            )
        },
    );
}

#[test]
#[ignore = "long: make soak"]
fn soak_5_etcd_1() {
    etcd(1, Duration::from_secs(1));
}

#[test]
#[ignore = "long: make soak"]
fn soak_6_etcd_3() {
    etcd(3, Duration::from_secs(2));
}

/// ZooKeeper with `n` servers (a partitionable ensemble for 3: isolation of one server
/// from the others, round robin). ttl 2 s: the session timeout (see the suite).
fn zookeeper(n: usize) {
    let zk = Rc::new(RefCell::new(if n == 1 {
        ZkEnsemble::start(1)
    } else {
        ZkEnsemble::start_partitionable(n)
    }));
    let connect = zk.borrow().connect_string();
    let nodes = addresses(&connect);
    let ttl = Duration::from_secs(2);
    let dir = "/leasekeeper/soak";
    let mut kinds = vec![
        Fault::Kill9,
        Fault::PauseLeader,
        Fault::PauseServer,
        Fault::RestartServer,
        Fault::TamperDelete,
        Fault::TamperOverwrite,
    ];
    if n > 1 {
        kinds.extend([
            Fault::PauseMinority,
            Fault::RestartOneNode,
            Fault::IsolateStoreNode,
        ]);
    }
    kinds.extend(LINK_FAULTS);
    let mut server = Shared(zk.clone());
    soak(
        &format!("zookeeper ({n} server{})", if n == 1 { "" } else { "s" }),
        ttl,
        &kinds,
        true,
        |rounds| {
            let connect = connect.clone();
            let isolate: Option<Box<dyn FnMut(usize, bool)>> = (n > 1).then(|| {
                let zk = zk.clone();
                Box::new(move |node: usize, cut: bool| {
                    if cut {
                        zk.borrow().isolate(node)
                    } else {
                        zk.borrow().heal(node)
                    }
                }) as Box<dyn FnMut(usize, bool)>
            });
            checker::run_with(
                ElectionSpec {
                    candidates: 2,
                    ..spec(Vec::new(), ttl, rounds, Some(&mut server), false)
                },
                Extras {
                    clock_rate: batch_clock_rate(),
                    links: Some(Links {
                        nodes: nodes.clone(),
                        args: Box::new(|a| {
                            SidecarArgs::zookeeper(&a.join(","))
                                .ttl("2s")
                                .election("soak")
                                .build()
                        }),
                    }),
                    store: Some(Recorder::zookeeper(connect.clone(), dir.to_owned())),
                    tamper: Some(Box::new(move |fault| {
                        with_zk(&connect, async |c| {
                            let mut children = c.list_children(dir).await.expect("list");
                            children.sort_by_key(|c| c[c.len() - 10..].to_owned());
                            let node = format!("{dir}/{}", children.first().expect("a node"));
                            if fault == Fault::TamperDelete {
                                c.delete(&node, None).await.expect("delete");
                            } else {
                                c.set_data(&node, b"intruder", None).await.expect("set");
                            }
                        })
                    })),
                    isolate,
                    ..Extras::default()
                },
            )
        },
    );
}

#[test]
#[ignore = "long: make soak"]
fn soak_7_zookeeper_1() {
    zookeeper(1);
}

#[test]
#[ignore = "long: make soak"]
fn soak_8_zookeeper_3() {
    zookeeper(3);
}

/// A kubeconfig for the fake API server at `addr` (a proxy in front of it).
fn kubeconfig(dir: &Path, addr: &str) -> String {
    let path = dir.join(format!("kubeconfig-{}", addr.replace(':', "-")));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\nusers:\n- name: leasekeeper\n  user:\n    token: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: leasekeeper\n    namespace: team\ncurrent-context: fake\n",
            common::servers::fake_kube::TOKEN
        ),
    )
    .expect("kubeconfig");
    path.display().to_string()
}

#[test]
#[ignore = "long: make soak"]
fn soak_9_kubernetes() {
    let api = Rc::new(RefCell::new(FakeKube::start("team")));
    let port = api.borrow().port;
    let configs = tempfile::tempdir().expect("dir");
    let ttl = Duration::from_secs(2);
    let lease = "soak";
    let direct = api.borrow().kubeconfig();
    let mut server = Shared(api.clone());
    soak(
        "kubernetes (fake API)",
        ttl,
        &kinds(&[
            &[
                Fault::Kill9,
                Fault::PauseLeader,
                Fault::PauseServer,
                Fault::RestartServer,
                Fault::TamperDelete,
                Fault::TamperOverwrite,
            ],
            &LINK_FAULTS,
        ]),
        true,
        |rounds| {
            let dir = configs.path().to_owned();
            let api = api.clone();
            checker::run_with(
                spec(Vec::new(), ttl, rounds, Some(&mut server), false),
                Extras {
                    clock_rate: batch_clock_rate(),
                    links: Some(Links {
                        nodes: vec![local(port)],
                        args: Box::new(move |a| {
                            SidecarArgs::kubernetes(&kubeconfig(&dir, &a[0]))
                                .ttl("2s")
                                .election(lease)
                                .build()
                        }),
                    }),
                    store: Some(Recorder::kubernetes(
                        direct.clone(),
                        "team".to_owned(),
                        lease.to_owned(),
                    )),
                    tamper: Some(Box::new(move |fault| {
                        let api = api.borrow();
                        if fault == Fault::TamperDelete {
                            api.delete_lease(lease);
                        } else {
                            let mut spec = api.lease(lease).expect("the Lease")["spec"].clone();
                            spec["holderIdentity"] = serde_json::json!("intruder");
                            api.put_lease_spec(lease, spec);
                        }
                    })),
                    ..Extras::default()
                },
            )
        },
    );
    let api = api.borrow();
    assert!(
        api.forbidden().is_empty(),
        "refused requests: {:?}",
        api.forbidden()
    );
    assert_eq!(api.blind_writes(), 0, "updates without a resourceVersion");
}

/// The SQL backends: leader, database and link faults and tampering with the row,
/// judged against the row.
fn sql_soak<D: common::scenarios::sql_suite::SqlDb>(name: &str, mut db: D) {
    use common::scenarios::sql_suite::{admin_exec, args_via};
    let ttl = Duration::from_secs(1);
    let election = "soak";
    let backend = db.backend();
    let port = db.port();
    let url = db.url_for("lk");
    let overwrite = db.overwrite_sql(election);
    soak(name, ttl, &one_store_faults(), true, |rounds| {
        let (link_url, tamper_url, overwrite) = (url.clone(), url.clone(), overwrite.clone());
        let store = if backend == "postgres" {
            Recorder::postgres(url.clone(), election)
        } else {
            Recorder::mysql(url.clone(), election)
        };
        checker::run_with(
            spec(Vec::new(), ttl, rounds, Some(&mut db), false),
            Extras {
                clock_rate: batch_clock_rate(),
                links: Some(Links {
                    nodes: vec![local(port)],
                    args: Box::new(move |a| {
                        args_via(backend, &link_url, port, &a[0], "1s", election)
                    }),
                }),
                store: Some(store),
                tamper: Some(Box::new(move |fault| {
                    let sql = match fault {
                        Fault::TamperDelete => {
                            format!("DELETE FROM leasekeeper_leases WHERE election = '{election}'")
                        }
                        _ => overwrite.clone(),
                    };
                    admin_exec(backend, &tamper_url, &sql);
                })),
                ..Extras::default()
            },
        )
    });
}

#[test]
#[ignore = "long: make soak"]
fn soak_10_postgres() {
    sql_soak("postgres", common::servers::pg_server::PgServer::start());
}

#[test]
#[ignore = "long: make soak"]
fn soak_11_mysql() {
    sql_soak(
        "mysql",
        common::servers::mariadb_server::MariaServer::start(),
    );
}

/// The slots scenario (`tests/common/scenarios/slots.rs`: two slots, five candidates, SIGTERM,
/// kill -9 and SIGSTOP of slot holders, every logged claim checked per slot)
/// `LK_SOAK_SLOT_RUNS` times (default 10) on every store, one store at a time, each run
/// on an election of its own; the first run on each store with a server also strikes
/// the store (paused, a holder cut off, late and congested, each node of etcd's and
/// ZooKeeper's three cut off from the others, restarted from its data); one row per
/// store in `target/soak/slots.md`.
#[test]
#[ignore = "long: make soak"]
fn soak_12_slots_every_store() {
    let runs: usize = std::env::var("LK_SOAK_SLOT_RUNS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().expect("dir");
    slot_runs("file", runs, None, &|r| {
        let own = dir.path().join(format!("r{r}"));
        std::fs::create_dir_all(&own).expect("dir");
        SidecarArgs::file(&own).election(&slots_election(r))
    });
    let mut redis = RedisServer::start_persistent();
    let (url, nodes) = (redis.url(), vec![local(redis.port)]);
    let strikes = Strikes::new(&mut redis, nodes, true);
    slot_runs("redis", runs, Some(strikes), &|r| {
        SidecarArgs::redis(&url).election(&slots_election(r))
    });
    drop(redis);
    let mut cluster = RedisCluster::start(3);
    let (urls, nodes) = (cluster.urls(), cluster.links("2s", "slots").nodes);
    let strikes = Strikes::new(&mut cluster, nodes, false);
    slot_runs("redlock (3)", runs, Some(strikes), &|r| {
        SidecarArgs::redlock(&urls).election(&slots_election(r))
    });
    drop(cluster);
    let mut etcd = EtcdCluster::start_partitionable(3);
    let endpoints = etcd.endpoints();
    let strikes = Strikes::new(&mut etcd, addresses(&endpoints), true).isolated();
    slot_runs("etcd (3)", runs, Some(strikes), &|r| {
        SidecarArgs::etcd(&endpoints).election(&slots_election(r))
    });
    drop(etcd);
    let mut zk = ZkEnsemble::start_partitionable(3);
    let connect = zk.connect_string();
    let strikes = Strikes::new(&mut zk, addresses(&connect), true).isolated();
    slot_runs("zookeeper (3)", runs, Some(strikes), &|r| {
        SidecarArgs::zookeeper(&connect).election(&slots_election(r))
    });
    drop(zk);
    let api = FakeKube::start("team");
    slot_runs("kubernetes (fake API)", runs, None, &|r| {
        SidecarArgs::kubernetes(&api.kubeconfig()).election(&slots_election(r))
    });
    drop(api);
    let mut pg = common::servers::pg_server::PgServer::start();
    let (url, nodes) = (pg.url(), vec![local(pg.port)]);
    let strikes = Strikes::new(&mut pg, nodes, true);
    slot_runs("postgres", runs, Some(strikes), &|r| {
        SidecarArgs::postgres(&url).election(&slots_election(r))
    });
    drop(pg);
    let mut maria = common::servers::mariadb_server::MariaServer::start();
    let (url, nodes) = (maria.url(), vec![local(maria.port)]);
    let strikes = Strikes::new(&mut maria, nodes, true);
    slot_runs("mysql", runs, Some(strikes), &|r| {
        SidecarArgs::mysql(&url).election(&slots_election(r))
    });
}

fn slots_election(run: usize) -> String {
    format!("slots-{run}")
}

/// `runs` runs of the slots scenario on one store (ttl 2 s), the first struck by
/// `strikes` (with both slowed links) when given; a row in `target/soak/slots.md`.
/// The file backend runs without SIGSTOP: a stopped process keeps its kernel lock.
fn slot_runs(
    name: &str,
    runs: usize,
    strikes: Option<Strikes>,
    args: &dyn Fn(usize) -> SidecarArgs,
) {
    use common::scenarios::slots::{
        two_slots_five_candidates, two_slots_five_candidates_and_the_store_struck,
        two_slots_five_candidates_no_pause,
    };
    let ttl = Duration::from_secs(2);
    let graceful = Duration::from_secs(2);
    let t0 = Instant::now();
    let mut strikes = strikes;
    for run in 0..runs {
        let a = args(run).ttl("2s");
        match strikes.take() {
            Some(s) => {
                let links = [Link::Delay(ttl / 2), Link::Congested(ttl.mul_f64(0.4))];
                two_slots_five_candidates_and_the_store_struck(a, ttl, graceful, s.slowed(&links));
            }
            None if name == "file" => two_slots_five_candidates_no_pause(a, ttl, graceful),
            None => two_slots_five_candidates(a, ttl, graceful),
        }
    }
    let row = format!(
        "| {name} | {runs} | none | {:.1} min |\n",
        t0.elapsed().as_secs_f64() / 60.0
    );
    let header =
        "| store (2 slots, 5 candidates) | runs | violations | wall |\n|---|---|---|---|\n";
    append_row_to(&results_path().with_file_name("slots.md"), header, &row);
}

/// The shared/exclusive scenario of `tests/suite/modes.rs` (three readers, a writer that
/// waits and keeps a later reader out, an election's candidate, SIGTERM, kill -9 and
/// SIGSTOP, every logged claim checked) `LK_SOAK_MODE_RUNS` times (default 10) on every
/// store with a read-write lock; one row per store in `target/soak/modes.md`.
#[test]
#[ignore = "long: make soak"]
fn soak_13_shared_and_exclusive() {
    let runs: usize = std::env::var("LK_SOAK_MODE_RUNS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(10);
    let ttl = Duration::from_secs(2);
    type Scenario = fn(SidecarArgs, Duration, Duration);
    let run_on = |name: &str, args: &dyn Fn(usize) -> SidecarArgs, scenario: Scenario| {
        let t0 = Instant::now();
        for run in 0..runs {
            scenario(args(run).ttl("2s"), ttl, ttl);
        }
        let row = format!(
            "| {name} | {runs} | none | {:.1} min |\n",
            t0.elapsed().as_secs_f64() / 60.0
        );
        let header = "| store (3 readers, 2 writers, 1 election candidate) | runs | violations | wall |\n|---|---|---|---|\n";
        append_row_to(&results_path().with_file_name("modes.md"), header, &row);
    };
    let election = |run: usize| format!("rw-{run}");
    let dir = tempfile::tempdir().expect("dir");
    run_on(
        "file",
        &|r| {
            let own = dir.path().join(format!("r{r}"));
            std::fs::create_dir_all(&own).expect("dir");
            SidecarArgs::file(&own).election(&election(r))
        },
        |a, t, g| common::scenarios::modes::shared_and_exclusive(a, t, g, false),
    );
    let queued: Scenario = |a, t, g| common::scenarios::modes::shared_and_exclusive(a, t, g, true);
    let redis = common::servers::redis_server::RedisServer::start();
    run_on(
        "redis",
        &|r| SidecarArgs::redis(&redis.url()).election(&election(r)),
        queued,
    );
    drop(redis);
    let cluster = RedisCluster::start(3);
    run_on(
        "redlock (3)",
        &|r| SidecarArgs::redlock(&cluster.urls()).election(&election(r)),
        queued,
    );
    drop(cluster);
    let etcd = EtcdCluster::start(1);
    run_on(
        "etcd",
        &|r| SidecarArgs::etcd(&etcd.endpoints()).election(&election(r)),
        queued,
    );
    drop(etcd);
    let zk = ZkEnsemble::start(1);
    run_on(
        "zookeeper",
        &|r| SidecarArgs::zookeeper(&zk.connect_string()).election(&election(r)),
        queued,
    );
    drop(zk);
    let pg = common::servers::pg_server::PgServer::start();
    run_on(
        "postgres",
        &|r| SidecarArgs::postgres(&pg.url()).election(&election(r)),
        queued,
    );
    drop(pg);
    let maria = common::servers::mariadb_server::MariaServer::start();
    run_on(
        "mysql",
        &|r| SidecarArgs::mysql(&maria.url()).election(&election(r)),
        queued,
    );
}
