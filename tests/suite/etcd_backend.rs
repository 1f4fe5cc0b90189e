//! The etcd backend against real etcd: one member and a 3-member cluster, member
//! faults, compaction, and interop with `etcdctl elect`.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::checks::checker::{self, ElectionSpec, Fault};
use common::harness::faults::Link;
use common::servers::etcd_server::EtcdCluster;
use common::{
    eventually, harness::http, scenarios::backend_herd, scenarios::backend_switchover, Sidecar,
    SidecarArgs,
};
use leasekeeper::backend::etcd::EtcdBackend;
use leasekeeper::backend::{Backend, Campaign, Candidacy, Renewal, Wake};
use leasekeeper::timing::Timing;

#[test]
fn etcd_single_member_survives_the_checker() {
    use Fault::*;
    let mut etcd = EtcdCluster::start(1);
    let args = SidecarArgs::etcd(&etcd.endpoints()).election("checker");
    #[rustfmt::skip]
    let pattern = [Graceful, Kill9, Graceful, PauseLeader, Graceful, PauseServer, Release, RestartServer, Graceful];
    let run = checker::Run::new(1, checker::cycle(64, &pattern)).min_claims(50);
    run.on("etcd(1)", args, &mut etcd);
}

#[test]
fn etcd_three_member_cluster_survives_the_checker() {
    use Fault::*;
    let mut etcd = EtcdCluster::start(3);
    let args = SidecarArgs::etcd(&etcd.endpoints()).election("cluster");
    #[rustfmt::skip]
    let pattern = [Graceful, Kill9, PauseMinority, RestartOneNode, PauseLeader, Graceful];
    let run = checker::Run::new(2, checker::cycle(30, &pattern));
    run.on("etcd(3)", args, &mut etcd);
}

/// Lines an `etcdctl elect` process printed, with the instant each arrived.
struct Etcdctl {
    child: std::process::Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Etcdctl {
    fn elect(endpoints: &str, election: &str, proposal: &str) -> Etcdctl {
        Self::run(endpoints, &["elect", election, proposal])
    }

    /// `etcdctl elect -l`: prints the leader's proposal now and on every change.
    fn observe(endpoints: &str, election: &str) -> Etcdctl {
        Self::run(endpoints, &["elect", "-l", election])
    }

    /// Whether etcdctl printed `line` within `limit`.
    fn printed(&self, line: &str, limit: Duration) -> bool {
        eventually(limit, || {
            self.lines
                .lock()
                .expect("lines")
                .iter()
                .any(|(_, l)| l == line)
                .then_some(())
        })
        .is_some()
    }

    fn run(endpoints: &str, args: &[&str]) -> Etcdctl {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoints])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcdctl");
        let out = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().expect("lines").push((Instant::now(), line));
            }
        });
        Etcdctl { child, lines }
    }

    /// When etcdctl announced that it leads (it prints the key, then the proposal).
    fn led_at(&self) -> Option<Instant> {
        self.lines.lock().expect("lines").first().map(|(t, _)| *t)
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn etcdctl_elect_and_leasekeeper_share_one_election() {
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::etcd(&endpoints)
        .ttl("2s")
        .election("shared")
        .build();
    let leads = |s: &Sidecar| s.leader().is_some_and(|v| v["is_leader"] == true);

    let mut a = Sidecar::spawn("lk-a", dir.path(), &args);
    assert!(
        eventually(Duration::from_secs(10), || leads(&a).then_some(())).is_some(),
        "{}",
        a.stderr()
    );
    // etcdctl sees our leader.
    let observer = Etcdctl::observe(&endpoints, "shared");
    assert!(
        observer.printed("lk-a", Duration::from_secs(5)),
        "etcdctl elect -l never printed lk-a"
    );

    // etcdctl queues behind us, then a second sidecar behind it.
    let mut ctl = Etcdctl::elect(&endpoints, "shared", "from-etcdctl");
    let queued = eventually(Duration::from_secs(10), || {
        let values = etcd.etcdctl(&["get", "--prefix", "shared/", "--print-value-only"]);
        values.lines().any(|v| v == "from-etcdctl").then_some(())
    });
    assert!(
        queued.is_some(),
        "etcdctl never put its proposal in the queue"
    );
    let b = Sidecar::spawn("lk-b", dir.path(), &args);
    assert!(eventually(Duration::from_secs(10), || b
        .leader()
        .filter(|v| v["state"] == "follower"))
    .is_some());
    assert!(
        ctl.led_at().is_none(),
        "etcdctl claims to lead while lk-a leads"
    );

    // lk-a goes: etcdctl is next in the queue and leads; nobody else does.
    a.terminate(Duration::from_secs(5));
    let led = eventually(Duration::from_secs(5), || ctl.led_at());
    assert!(led.is_some(), "etcdctl never led after lk-a left");
    let seen = eventually(Duration::from_secs(5), || {
        b.leader().filter(|v| v["leader"] == "from-etcdctl")
    });
    let seen = seen.expect("lk-b sees etcdctl as leader");
    assert_eq!(seen["is_leader"], false);
    for _ in 0..20 {
        assert_eq!(
            http::get(b.port, "/is-leader").map(|(c, _)| c),
            Some(503),
            "lk-b leads while etcdctl does"
        );
        // Pause: between looks through the window.
        std::thread::sleep(Duration::from_millis(25));
    }

    // etcdctl resigns on SIGINT: lk-b takes over.
    common::send_signal(ctl.child.id(), libc::SIGINT);
    let _ = ctl.child.wait();
    assert!(
        eventually(Duration::from_secs(5), || leads(&b).then_some(())).is_some(),
        "lk-b never led after etcdctl left"
    );
    assert!(
        observer.printed("from-etcdctl", Duration::from_secs(1)),
        "etcdctl elect -l never showed etcdctl leading"
    );
    assert!(
        observer.printed("lk-b", Duration::from_secs(5)),
        "etcdctl elect -l never printed lk-b"
    );
}

#[test]
fn followers_send_no_periodic_requests_and_survive_compaction() {
    let etcd = EtcdCluster::start(1);
    let dir = tempfile::tempdir().expect("dir");
    // ttl 10 s: a leader's key that goes only with its lease goes 6.7 s or more after
    // the SIGTERM, past the handover's bound below; retry interval 1 s as at ttl 3 s.
    let args = SidecarArgs::etcd(&etcd.endpoints())
        .ttl("10s")
        .election("quiet")
        .flag("--retry-interval", "1s")
        .build();
    let sidecars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("q{i}"), dir.path(), &args))
        .collect();
    let follower_count = || {
        sidecars
            .iter()
            .filter(|s| s.leader().is_some_and(|v| v["state"] == "follower"))
            .count()
    };
    assert!(
        eventually(Duration::from_secs(10), || (follower_count() == 2)
            .then_some(()))
        .is_some()
    );

    // Over three retry intervals, nobody sends a read or a write: only keep-alives.
    // (From a second after the followers follow: a follower behind the next in line
    // looks once when the leader's announcement of its claim arrives, which under load
    // can come after the followers first name the leader.)
    std::thread::sleep(Duration::from_secs(1));
    let reads = || {
        etcd.metric(0, "grpc_server_handled_total", "grpc_method=\"Range\"")
            + etcd.metric(0, "grpc_server_handled_total", "grpc_method=\"Txn\"")
    };
    let before = reads();
    // Observed: three retry intervals of steady leadership.
    std::thread::sleep(Duration::from_secs(3));
    let after = reads();
    assert_eq!(
        after - before,
        0.0,
        "followers or leader sent Range/Txn requests while nothing changed"
    );
    assert_eq!(
        follower_count(),
        2,
        "followers must still report a current leader"
    );

    // Compact everything the followers' watches started from, then hand over.
    for i in 0..20 {
        etcd.etcdctl(&["put", "filler", &i.to_string()]);
    }
    let status = etcd.etcdctl(&["endpoint", "status", "-w", "json"]);
    let rev = serde_json::from_str::<serde_json::Value>(&status).expect("json")[0]["Status"]
        ["header"]["revision"]
        .as_u64()
        .expect("revision");
    etcd.etcdctl(&["compact", &rev.to_string()]);
    let leader = sidecars
        .iter()
        .position(|s| s.leader().is_some_and(|v| v["is_leader"] == true))
        .expect("a leader");
    let t0 = Instant::now();
    sidecars[leader].signal(libc::SIGTERM);
    let next = eventually(Duration::from_secs(5), || {
        sidecars
            .iter()
            .enumerate()
            .find(|(i, s)| *i != leader && s.leader().is_some_and(|v| v["is_leader"] == true))
            .map(|_| ())
    });
    assert!(next.is_some(), "no new leader after compaction");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "handover after compaction took {:?}",
        t0.elapsed()
    );
}

/// Invariant 9: the leader's key deleted (`etcdctl del --prefix`) or overwritten
/// (`etcdctl put`) behind its back. Before the leader watched its own key, it went on
/// claiming for as long as its lease lived (renew was only a keep-alive) while a
/// follower claimed within milliseconds.
#[test]
fn a_leader_whose_key_is_deleted_or_overwritten_steps_down_at_once() {
    use common::harness::tamper::{assert_recovered, tamper_with_leader, tamper_with_leader_at};
    let etcd = EtcdCluster::start(1);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::etcd(&etcd.endpoints())
        .ttl("3s")
        .election("tamper")
        .build();
    let sidecars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("t{i}"), dir.path(), &args))
        .collect();

    let deleted = tamper_with_leader(&sidecars, Duration::from_secs(3), |_| {
        etcd.etcdctl(&["del", "--prefix", "tamper/"]);
    });
    eprintln!("deleted: {deleted:?}");
    assert_recovered(&deleted, Duration::from_millis(100));

    // Through a client of the test's own: the bound counts from the write, not from
    // the start of an etcdctl process.
    let overwritten = tamper_with_leader_at(&sidecars, Duration::from_secs(4), |_| {
        backend_switchover::runtime().block_on(async {
            let mut client = etcd_client::Client::connect([etcd.endpoint(0)], None)
                .await
                .expect("connect");
            let first = etcd_client::GetOptions::new()
                .with_prefix()
                .with_sort(
                    etcd_client::SortTarget::Create,
                    etcd_client::SortOrder::Ascend,
                )
                .with_limit(1)
                .with_keys_only();
            let read = client.get("tamper/", Some(first)).await.expect("get");
            let key = read.kvs().first().expect("no leader key").key().to_vec();
            let at = Instant::now();
            client.put(key, "intruder", None).await.expect("put");
            at
        })
    });
    eprintln!("overwritten: {overwritten:?}");
    // An overwritten key keeps its place at the head of the queue (its create
    // revision), now without a lease: the election is stuck behind it as it is for
    // etcdctl and Go electors. What matters here is that the old tenure stopped, well
    // before the end of the 4 s window (its lease, kept alive, would let it claim on).
    common::harness::tamper::assert_stopped_within(&overwritten, Duration::from_secs(2));
}

/// Invariant 11 and a gray failure on etcd: a slow link (a long pipe, then a
/// congested queue) between the leader and the store; another candidate leads within
/// 2 × ttl, and the slow one leads again once the link heals.
#[test]
fn a_slow_leader_on_a_long_pipe_gets_out_of_the_way() {
    slow_leader(Link::Delay(Duration::from_millis(1500)));
}

#[test]
fn a_slow_leader_on_a_congested_link_gets_out_of_the_way() {
    slow_leader(Link::Congested(Duration::from_millis(1200)));
}

fn slow_leader(link: Link) {
    let etcd = EtcdCluster::start(1);
    let store = etcd
        .endpoints()
        .trim_start_matches("http://")
        .parse()
        .expect("addr");
    common::scenarios::handovers::slow_leader_is_replaced_and_recovers(
        &[store],
        Duration::from_secs(3),
        link,
        |endpoints| {
            SidecarArgs::etcd(&format!("http://{}", endpoints[0]))
                .ttl("3s")
                .election("slow")
                .build()
        },
    );
}

/// The checker's link and store faults on etcd, a short deterministic round of each,
/// judged also against the store's own record. (An overwritten key keeps the head of
/// the queue without a lease and blocks the election, as for etcdctl: the overwrite
/// is tested on its own above.)
#[test]
fn etcd_survives_partitions_slow_links_and_tampering() {
    use common::harness::recorder::Recorder;
    let etcd = EtcdCluster::start(1);
    let endpoint = etcd.endpoints();
    let store = Recorder::etcd(vec![endpoint.clone()], "faults");
    let rounds = vec![
        Fault::PartitionLeader,
        Fault::Graceful,
        Fault::SlowLeader,
        Fault::LeaderRepliesHeld,
        Fault::PartitionFollower,
        Fault::TamperDelete,
        Fault::Kill9,
        Fault::Graceful,
    ];
    let node = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("addr");
    let report = checker::run_link_faults(
        Duration::from_secs(2),
        rounds,
        node,
        |addr| {
            SidecarArgs::etcd(&format!("http://{addr}"))
                .ttl("2s")
                .election("faults")
                .build()
        },
        store,
        move |_| {
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &endpoint, "del", "--prefix", "faults/"])
                .output();
            assert!(out.is_ok_and(|o| o.status.success()), "etcdctl del");
        },
    );
    eprintln!("etcd faults: {report:?}");
}

/// A member cut off from the other two (network namespaces, blackhole routes: the
/// sidecars still reach it), alternately while it is the raft leader and the member
/// every sidecar talks to first, and while it is a follower; the claims are checked
/// against an etcd watch of the election.
#[test]
fn a_member_cut_off_from_the_others_never_gives_two_leaders() {
    use common::harness::recorder::Recorder;
    let etcd = EtcdCluster::start_partitionable(3);
    let endpoints = etcd.endpoints();
    let store = Recorder::etcd(
        endpoints.split(',').map(str::to_owned).collect(),
        "partition",
    );
    let mut cuts = 0;
    let isolate = move |node: usize, cut: bool| {
        if cut {
            // Every other cut takes the raft leader (moved to that member first).
            if cuts % 2 == 0 {
                assert!(etcd.move_leader(node), "raft leadership to member {node}");
            }
            let leader = etcd.raft_leader();
            eprintln!("cutting member {node} off (raft leader: {leader:?})");
            etcd.isolate(node);
            cuts += 1;
        } else {
            etcd.heal(node);
            // Healed when it has caught up: its own health check needs a quorum.
            let back = eventually(Duration::from_secs(10), || etcd.raft_leader().map(|_| ()));
            assert!(back.is_some(), "no raft leader after healing member {node}");
        }
    };
    let rounds = vec![
        Fault::IsolateStoreNode,
        Fault::Graceful,
        Fault::IsolateStoreNode,
        Fault::Kill9,
        Fault::IsolateStoreNode,
        Fault::IsolateStoreNode,
        Fault::Graceful,
    ];
    let report = checker::run_with(
        ElectionSpec::three_candidates(
            SidecarArgs::etcd(&endpoints)
                .ttl("2s")
                .election("partition")
                .build(),
            Duration::from_secs(2),
            rounds,
            None,
        ),
        checker::Extras {
            store: Some(store),
            isolate: Some(Box::new(isolate)),
            // Member 0 (first in every sidecar's list: the one the leader talks to),
            // then the others.
            isolate_nodes: vec![0, 0, 1, 2],
            ..checker::Extras::default()
        },
    );
    eprintln!("etcd partitions: {report:?}");
    assert_eq!(report.faults.get("isolate-node"), Some(&4));
}

/// See [`common::scenarios::handovers::followers_survive_release_requests_during_a_handover`].
#[test]
fn followers_survive_release_requests_during_a_handover() {
    let etcd = EtcdCluster::start(1);
    let args = SidecarArgs::etcd(&etcd.endpoints())
        .ttl("4s")
        .election("stagger")
        .build();
    common::scenarios::handovers::followers_survive_release_requests_during_a_handover(&args);
}

/// An etcd candidate built as the sidecar builds it (flags → settings → backend).
/// Nothing renews its lease here (no elector runs), so the lease is long enough to
/// outlive a scenario, except D's: D is the candidate the scenarios kill (drop), and
/// etcd lets it go when its 1 s lease runs out.
fn etcd_candidate(endpoints: &str, election: &str, identity: &str) -> EtcdBackend {
    let ttl = Duration::from_secs(if identity == "D" { 1 } else { 20 });
    etcd_candidate_with_ttl(endpoints, election, identity, ttl)
}

fn etcd_candidate_with_ttl(
    endpoints: &str,
    election: &str,
    identity: &str,
    ttl: Duration,
) -> EtcdBackend {
    let settings = leasekeeper::backend::etcd::Args {
        etcd_endpoints: endpoints.split(',').map(str::to_owned).collect(),
        ..Default::default()
    }
    .settings()
    .expect("etcd settings");
    let timing = Timing::for_ttl(ttl);
    EtcdBackend::new(
        &settings,
        &Candidacy {
            election,
            identity,
            timing: &timing,
            mode: Default::default(),
        },
    )
}

/// See [`backend_herd::a_follower_behind_the_next_in_line_sleeps_through_a_release`].
#[test]
fn a_follower_behind_the_next_in_line_sleeps_through_a_release() {
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    backend_switchover::runtime().block_on(
        backend_herd::a_follower_behind_the_next_in_line_sleeps_through_a_release(|id| {
            etcd_candidate(&endpoints, "herdlib", id)
        }),
    );
}

/// See [`backend_switchover::passes_the_lease_to_the_named_candidate`].
#[test]
fn switchover_passes_the_lease_to_the_named_candidate() {
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    backend_switchover::runtime().block_on(
        backend_switchover::passes_the_lease_to_the_named_candidate(|id| {
            etcd_candidate(&endpoints, "switch", id)
        }),
    );
}

/// See [`backend_switchover::lists_the_live_candidates`].
#[test]
fn switchover_candidates_are_the_live_ones() {
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    backend_switchover::runtime().block_on(backend_switchover::lists_the_live_candidates(|id| {
        etcd_candidate(&endpoints, "live", id)
    }));
}

/// See [`backend_switchover::to_a_missing_candidate_is_a_plain_release`].
#[test]
fn switchover_to_a_missing_candidate_is_a_plain_release() {
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    backend_switchover::runtime().block_on(
        backend_switchover::to_a_missing_candidate_is_a_plain_release(|id| {
            etcd_candidate(&endpoints, "missing", id)
        }),
    );
}

/// See [`common::scenarios::handovers::switchover_goes_to_the_named_candidate`]: sidecars end to
/// end (the library-level rules are `switchover_*` in `common::scenarios::backend_switchover`).
#[test]
fn switchover_goes_to_the_named_candidate() {
    let etcd = EtcdCluster::start(1);
    let args = SidecarArgs::etcd(&etcd.endpoints())
        .ttl("3s")
        .election("switch")
        .build();
    common::scenarios::handovers::switchover_goes_to_the_named_candidate(&args);
}

// The store's rules, one at a time, at the library level (DESIGN §2 and §7): candidates
// built as the sidecar builds them, driven by hand against one real etcd member, with
// every other defence in place. Each breaks alone when its rule is switched off.

/// A campaign that must take the lease; its token.
async fn etcd_leads(who: &str, b: &mut EtcdBackend) -> u64 {
    match b.campaign().await {
        Ok(Campaign::Acquired { token }) => token,
        other => panic!("{who} should lead, its campaign found {other:?}"),
    }
}

/// A campaign that must find `leader` holding the lease (with `token`, when given).
async fn etcd_follows(who: &str, b: &mut EtcdBackend, leader: &str, token: Option<u64>) {
    match b.campaign().await {
        Ok(Campaign::Held(Some(h)))
            if h.identity == leader && token.is_none_or(|t| h.token == Some(t)) => {}
        other => panic!("{who} should follow {leader} ({token:?}), its campaign found {other:?}"),
    }
}

/// Invariant 5 on etcd: a release revokes our own lease only. A follower's release
/// leaves the leader's key (and its token) in place and takes the follower's own key
/// out of the queue at once; a second release is a no-op.
#[test]
fn a_release_gives_back_only_our_own_key() {
    let etcd = EtcdCluster::start(1);
    let ep = etcd.endpoints();
    backend_switchover::runtime().block_on(async {
        let make = |id| etcd_candidate(&ep, "own", id);
        let (mut a, mut b, mut c) = (make("A"), make("B"), make("C"));
        let token = etcd_leads("A", &mut a).await;
        etcd_follows("B", &mut b, "A", Some(token)).await;
        etcd_follows("C", &mut c, "A", Some(token)).await;
        b.release().await.expect("B releases");
        b.release().await.expect("B releases again");
        let listed = c.candidates().await.expect("list").expect("a list");
        assert_eq!(listed, ["A", "C"], "B's release took the wrong key");
        let mut fresh = make("F");
        etcd_follows("a fresh candidate", &mut fresh, "A", Some(token)).await;
        etcd_follows("C", &mut c, "A", Some(token)).await;
        assert_eq!(a.renew().await.expect("A renews"), Renewal::Renewed);
    });
}

/// Invariant 2 on etcd: a key that comes first in the queue claims only after a
/// keep-alive of its own lease, so the store holds the lease for a ttl from a moment
/// after the campaign was sent, on both paths to the front: B (ttl 3 s) queues as the
/// next in line (behind the leader A, its keep-alive sent beside the read), or behind
/// a follower M that leaves with A (its keep-alive sent after the read); it sends
/// nothing for 2.2 s (no wait, no keep-alive), then comes first and claims: 2.5 s after
/// that claim its key must still be there. Claiming on the lease as last refreshed,
/// B's key goes 0.8 s after its claim (while its deadline runs 3 s).
#[test]
fn a_lease_that_is_not_kept_alive_never_leads() {
    let etcd = EtcdCluster::start(1);
    let ep = etcd.endpoints();
    for next_in_line in [true, false] {
        let election = format!("fresh-{next_in_line}");
        backend_switchover::runtime().block_on(async {
            let mut a = etcd_candidate(&ep, &election, "A");
            etcd_leads("A", &mut a).await;
            let mut middle = (!next_in_line).then(|| etcd_candidate(&ep, &election, "M"));
            if let Some(m) = middle.as_mut() {
                etcd_follows("M", m, "A", None).await;
            }
            let mut b = etcd_candidate_with_ttl(&ep, &election, "B", Duration::from_secs(3));
            etcd_follows("B", &mut b, "A", None).await;
            // The fault: B sends nothing for 2.2 s (no wait, no keep-alive).
            tokio::time::sleep(Duration::from_millis(2200)).await;
            if let Some(m) = middle.as_mut() {
                m.release().await.expect("M leaves");
            }
            a.release().await.expect("A releases");
            let sent = tokio::time::Instant::now();
            etcd_leads("B", &mut b).await;
            tokio::time::sleep_until(sent + Duration::from_millis(2500)).await;
            let mut observer = etcd_candidate(&ep, &election, "O");
            let listed = observer.candidates().await.expect("list").expect("a list");
            assert!(
                listed.iter().any(|c| c == "B"),
                "next in line {next_in_line}: B's key expired within its claim: {listed:?}"
            );
        });
    }
}

/// Invariants 5 and 9 on etcd: a renew never vouches for a key the store has told us
/// is no longer ours, even when nobody looked at the leader's own watch since (the
/// watch held blind: the test never polls `record_lost`). Deleted, or overwritten
/// by another client, the key is lost at the next renew.
#[test]
fn a_renew_never_vouches_for_a_key_taken_behind_its_back() {
    let etcd = EtcdCluster::start(1);
    let ep = etcd.endpoints();
    for (n, tamper) in ["del", "put"].into_iter().enumerate() {
        let election = format!("taken{n}");
        backend_switchover::runtime().block_on(async {
            let mut a = etcd_candidate(&ep, &election, "A");
            etcd_leads("A", &mut a).await;
            assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
            let keys = etcd.etcdctl(&["get", "--prefix", "--keys-only", &format!("{election}/")]);
            let key = keys
                .lines()
                .find(|l| !l.is_empty())
                .expect("A's key")
                .to_owned();
            match tamper {
                "del" => etcd.etcdctl(&["del", &key]),
                _ => etcd.etcdctl(&["put", &key, "intruder"]),
            };
            // The watch's event has long arrived (etcd pushes it within milliseconds).
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                a.renew().await.expect("renew"),
                Renewal::Lost,
                "A renewed a key that was {tamper}'d"
            );
        });
    }
}

/// Invariant 9 for a leader that came through a handover: the next in line opens the
/// watch on its own key while it follows (so its claim after the release needs none),
/// and that watch is the leader's from then on. Deleted, or overwritten, the key is
/// lost at the next renew and `record_lost` returns.
#[test]
fn a_successor_hears_its_key_taken_on_the_watch_it_opened_as_next_in_line() {
    let etcd = EtcdCluster::start(1);
    let ep = etcd.endpoints();
    for (n, tamper) in ["del", "put"].into_iter().enumerate() {
        let election = format!("early{n}");
        backend_switchover::runtime().block_on(async {
            let (mut a, mut b) = (
                etcd_candidate(&ep, &election, "A"),
                etcd_candidate(&ep, &election, "B"),
            );
            etcd_leads("A", &mut a).await;
            etcd_follows("B", &mut b, "A", None).await;
            a.release().await.expect("A's release");
            let woke = b.wait_for_change(Duration::from_secs(5)).await;
            assert_eq!(woke, Wake::Changed, "B not woken by A's release");
            etcd_leads("B", &mut b).await;
            assert_eq!(b.renew().await.expect("renew"), Renewal::Renewed);
            let keys = etcd.etcdctl(&["get", "--prefix", "--keys-only", &format!("{election}/")]);
            let key = keys.lines().find(|l| !l.is_empty()).expect("B's key");
            match tamper {
                "del" => etcd.etcdctl(&["del", key]),
                _ => etcd.etcdctl(&["put", key, "intruder"]),
            };
            // B renews by hand (ttl 20 s): nothing but its watch can end the wait.
            let heard = tokio::time::timeout(Duration::from_secs(10), b.record_lost()).await;
            assert!(heard.is_ok(), "B's watch missed its key {tamper}'d");
            assert_eq!(
                b.renew().await.expect("renew"),
                Renewal::Lost,
                "B renewed a key that was {tamper}'d"
            );
        });
    }
}

/// Invariant 4 and the queue order on etcd: the key of lowest create revision leads,
/// whoever campaigns first after the leader went (C, third in line, looks before B
/// does and still follows B); and each new tenure's token (the create revision) is
/// greater than every earlier one, also for a fresh candidate that never saw the
/// earlier tenures, and after a candidate that vanished without a release.
#[test]
fn the_lowest_key_leads_and_tokens_grow_for_fresh_candidates() {
    let etcd = EtcdCluster::start(1);
    let ep = etcd.endpoints();
    backend_switchover::runtime().block_on(async {
        let make = |id| etcd_candidate(&ep, "order", id);
        let (mut a, mut b, mut c) = (make("A"), make("B"), make("C"));
        let first = etcd_leads("A", &mut a).await;
        etcd_follows("B", &mut b, "A", Some(first)).await;
        etcd_follows("C", &mut c, "A", Some(first)).await;
        a.release().await.expect("A releases");
        let b_token = {
            let listed = c.candidates().await.expect("list").expect("a list");
            assert_eq!(listed, ["B", "C"]);
            match c.campaign().await {
                Ok(Campaign::Held(Some(h))) if h.identity == "B" => h.token.expect("B's token"),
                other => panic!("C, behind B, should follow B: {other:?}"),
            }
        };
        assert_eq!(etcd_leads("B", &mut b).await, b_token);
        assert!(b_token > first, "B's token {b_token} after A's {first}");
        b.release().await.expect("B releases");
        let c_token = etcd_leads("C", &mut c).await;
        assert!(c_token > b_token);
        c.release().await.expect("C releases");
        let mut v = etcd_candidate_with_ttl(&ep, "order", "V", Duration::from_secs(1));
        let third = etcd_leads("V", &mut v).await;
        assert!(third > c_token);
        // A fresh candidate with no memory of the tenures before, after V vanished
        // without a word (its 1 s lease runs out).
        drop(v);
        let mut d = etcd_candidate(&ep, "order", "D");
        let mut fresh = make("E");
        let fourth = loop {
            match fresh.campaign().await.expect("campaign") {
                Campaign::Acquired { token } => break token,
                Campaign::Held(_) => {
                    let _ = fresh.wait_for_change(Duration::from_millis(300)).await;
                }
            }
        };
        assert!(
            fourth > third,
            "the fresh candidate's token {fourth} after {third}"
        );
        etcd_follows("D", &mut d, "E", Some(fourth)).await;
    });
}

/// A fault proxy in front of the one member of `etcd`, and the endpoint through it.
fn proxied(etcd: &EtcdCluster) -> (common::harness::faults::FaultProxy, String) {
    let target = common::scenarios::stores::addresses(&etcd.endpoint(0))[0];
    let proxy = common::harness::faults::FaultProxy::start(target);
    let through = format!("http://{}", proxy.addr());
    (proxy, through)
}

/// A release whose answer never comes (the elector stops waiting for it; the link held
/// it, then dropped it) does not leave our key in the queue until the lease expires by
/// itself: the revoke goes again once the store answers, and the key is gone within a
/// second of the link's healing, while the lease (ttl 5 s) would have kept it for
/// seconds more.
#[test]
fn a_release_whose_answer_is_lost_is_sent_again() {
    let etcd = EtcdCluster::start(1);
    let (proxy, through) = proxied(&etcd);
    let keys = || etcd.etcdctl(&["get", "--prefix", "--keys-only", "lost/"]);
    backend_switchover::runtime().block_on(async {
        let mut a = etcd_candidate_with_ttl(&through, "lost", "A", Duration::from_secs(5));
        etcd_leads("A", &mut a).await;
        assert!(!keys().trim().is_empty(), "A's key is in the queue");
        proxy.set(Link::Blackhole);
        let released = tokio::time::timeout(Duration::from_millis(200), a.release()).await;
        assert!(
            !matches!(released, Ok(Ok(()))),
            "the release went through a held link"
        );
        proxy.reset();
        proxy.set(Link::Pass);
        let healed = std::time::Instant::now();
        let gone = loop {
            if keys().trim().is_empty() {
                break Some(healed.elapsed());
            }
            if healed.elapsed() > Duration::from_secs(1) {
                break None;
            }
            // Pause: between looks at the queue.
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            gone.is_some(),
            "A's key outlived its lost release: {}",
            keys()
        );
    });
}

/// When the leader's own watch broke with its connection, a renew reads the key before
/// it vouches for it (and watches it again from that read): with the key still there,
/// renewed; deleted while the watch was down, lost.
#[test]
fn a_renew_after_the_own_watch_broke_reads_the_key_first() {
    let etcd = EtcdCluster::start(1);
    let (proxy, through) = proxied(&etcd);
    backend_switchover::runtime().block_on(async {
        let mut a = etcd_candidate(&through, "broke", "A");
        etcd_leads("A", &mut a).await;
        // The first renew after a cut fails (its stream is gone); the next decides.
        let renew_after_cut = async |a: &mut EtcdBackend| {
            for _ in 0..3 {
                if let Ok(r) = a.renew().await {
                    return r;
                }
            }
            panic!("no renew went through after the cut");
        };
        proxy.reset();
        assert_eq!(renew_after_cut(&mut a).await, Renewal::Renewed);
        let keys = etcd.etcdctl(&["get", "--prefix", "--keys-only", "broke/"]);
        let key = keys
            .lines()
            .find(|l| !l.is_empty())
            .expect("A's key")
            .to_owned();
        // The delete's watch event is held, then lost with the connection.
        proxy.set(Link::Blackhole);
        etcd.etcdctl(&["del", &key]);
        proxy.reset();
        proxy.set(Link::Pass);
        assert_eq!(
            renew_after_cut(&mut a).await,
            Renewal::Lost,
            "A renewed a key deleted while its watch was down"
        );
    });
}
