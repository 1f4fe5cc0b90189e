//! The zookeeper backend against real ZooKeeper: one server and a 3-server ensemble.

use crate::common;

use std::time::Duration;

use common::checks::checker::{self, Fault};
use common::harness::faults::Link;
use common::servers::curator::{compile, Jvm};
use common::servers::zk_server::{with_zk, ZkEnsemble};
use common::{scenarios::backend_herd, scenarios::backend_switchover, SidecarArgs};
use leasekeeper::backend::zookeeper::ZkBackend;
use leasekeeper::backend::{Backend, Campaign, Candidacy, Renewal, Wake};
use leasekeeper::timing::Timing;

#[test]
fn zookeeper_single_server_survives_the_checker() {
    use Fault::*;
    let mut zk = ZkEnsemble::start(1);
    let args = SidecarArgs::zookeeper(&zk.connect_string()).election("checker");
    #[rustfmt::skip]
    let pattern = [Graceful, Kill9, Graceful, PauseLeader, Graceful, PauseServer, Release, Graceful, Graceful, Graceful];
    let run = checker::Run::new(2, checker::cycle(60, &pattern)).min_claims(50);
    run.on("zookeeper(1)", args, &mut zk);
}

#[test]
fn zookeeper_ensemble_survives_the_checker() {
    use Fault::*;
    let mut zk = ZkEnsemble::start(3);
    let args = SidecarArgs::zookeeper(&zk.connect_string()).election("ensemble");
    #[rustfmt::skip]
    let pattern = [Graceful, Kill9, RestartOneNode, PauseLeader, PauseMinority, Graceful];
    let run = checker::Run::new(2, checker::cycle(24, &pattern));
    run.on("zookeeper(3)", args, &mut zk);
}

/// A Curator `LeaderLatch` participant in a JVM, driven over stdin, and whether its
/// connection came back after a loss.
struct Curator(Jvm, bool);

impl Curator {
    fn start(classes: &std::path::Path, connect: &str, latch: &str, id: &str) -> Curator {
        Curator(
            Jvm::start(classes, "CuratorLatch", &[connect, latch, id]),
            false,
        )
    }

    /// Whether its connection came back after a loss: then its latch put its node again,
    /// at the end of the queue (Curator's own rule for a latch that does not lead).
    fn reconnected(&self) -> bool {
        self.1
    }

    /// (leads, holder id) as Curator sees it. A change of its connection on the way is
    /// noted ([`Curator::reconnected`]).
    fn state(&mut self) -> (bool, String) {
        self.0.send("state");
        let line = loop {
            let line = self.0.line(Duration::from_secs(30)).expect("state line");
            if line.starts_with("connection ") {
                eprintln!("Curator: {line}");
                self.1 |= line == "connection RECONNECTED";
            } else if line.starts_with("leader=") {
                break line;
            }
        };
        let (leader, holder) = line.split_once(' ').expect("two fields");
        (
            leader == "leader=true",
            holder.trim_start_matches("holder=").to_owned(),
        )
    }

    fn close(&mut self) {
        self.0.close();
    }
}

/// A Curator `LeaderLatch` and our sidecars in one election: Curator queued behind
/// lk-a sees it lead, leads when it goes, and lk-b behind it names Curator and never
/// leads beside it, then leads when Curator closes its latch. A latch whose connection
/// comes back puts its node again at the end of the queue (Curator's rule), which
/// voids the order the round stands on: then the round runs again, in a new election.
#[test]
fn curator_leader_latch_and_leasekeeper_share_one_election() {
    let classes = compile("CuratorLatch");
    let zk = ZkEnsemble::shared();
    for round in 0..3 {
        let election = format!("shared-{round}");
        if share_one_election(classes.path(), &zk.connect_string(), &election) {
            return;
        }
        eprintln!("round {round}: Curator's connection came back; again");
    }
    panic!("Curator's connection came back in every round");
}

/// One round of [`curator_leader_latch_and_leasekeeper_share_one_election`]; `false`
/// when Curator's connection came back before its end.
fn share_one_election(classes: &std::path::Path, connect: &str, election: &str) -> bool {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::zookeeper(connect)
        .ttl("2s")
        .election(election)
        .build();
    let leads = |s: &common::Sidecar| s.leader().is_some_and(|v| v["is_leader"] == true);

    let mut a = common::Sidecar::spawn("lk-a", dir.path(), &args);
    assert!(
        common::eventually(Duration::from_secs(10), || leads(&a).then_some(())).is_some(),
        "{}",
        a.stderr()
    );
    // Curator queues behind lk-a and sees it as leader.
    let latch = format!("/leasekeeper/{election}");
    let mut curator = Curator::start(classes, connect, &latch, "from-curator");
    let seen = common::eventually(Duration::from_secs(5), || {
        Some(curator.state()).filter(|(_, h)| h == "lk-a")
    });
    assert_eq!(
        seen,
        Some((false, "lk-a".to_owned())),
        "Curator does not see lk-a leading"
    );
    // Naming lk-a shows only that Curator read the queue: its latch creates its own
    // node in the background. lk-b queues once that node is there, behind it.
    assert!(
        queued(connect, &latch, 2),
        "Curator's latch node never joined the queue"
    );
    let b = common::Sidecar::spawn("lk-b", dir.path(), &args);
    assert!(common::eventually(Duration::from_secs(10), || b
        .leader()
        .filter(|v| v["state"] == "follower"))
    .is_some());

    // lk-a goes: Curator is next and leads; lk-b sees it and does not lead.
    a.terminate(Duration::from_secs(5));
    let led = common::eventually(Duration::from_secs(10), || {
        Some(curator.state()).filter(|(l, _)| *l)
    });
    if curator.reconnected() {
        return false;
    }
    if led.is_none() {
        for c in [&a, &b] {
            eprintln!("==== {}\n{}", c.name, c.stderr());
        }
    }
    assert!(
        led.is_some(),
        "Curator never led after lk-a left (lk-b: {:?})",
        b.leader()
    );
    let shown = common::eventually(Duration::from_secs(10), || {
        b.leader().filter(|v| v["leader"] == "from-curator")
    });
    assert_eq!(
        shown.expect("lk-b shows Curator as leader")["is_leader"],
        false
    );
    for _ in 0..20 {
        let answer = common::harness::http::get(b.port, "/is-leader").map(|(c, _)| c);
        let still = curator.state().0;
        if curator.reconnected() {
            return false;
        }
        assert_eq!(answer, Some(503), "lk-b leads while Curator does");
        assert!(still, "Curator lost leadership on its own");
    }

    // Curator closes its latch: lk-b takes over.
    curator.close();
    assert!(
        common::eventually(Duration::from_secs(10), || leads(&b).then_some(())).is_some(),
        "lk-b never led after Curator left"
    );
    true
}

/// Thirty candidates: each follower watches its predecessor (its turn) and hears of a
/// new holder without a herd. The head is watched by the leader itself (invariant 9)
/// and by the next in line alone, so a handover wakes one follower; the followers
/// further back watch the leader's announcement and the next in line's node, and
/// look once the new leader has claimed. Every other node is watched by its successor
/// alone. (Before the announcement, every follower watched the head: 30 watchers on
/// it, and a handover woke all 29.)
#[test]
fn thirty_candidates_watch_their_predecessor_and_the_head_only() {
    // Sessions of 30 s: a release that never reaches the server hands over only when
    // the leader's session expires, far past the handover's bound below.
    let zk = ZkEnsemble::start_long_sessions();
    let connect = zk.connect_string();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::zookeeper(&connect)
        .ttl("30s")
        .election("herd")
        .build();
    let sidecars: Vec<common::Sidecar> = (0..30)
        .map(|i| common::Sidecar::spawn(&format!("h{i:02}"), dir.path(), &args))
        .collect();
    let followers = || {
        sidecars
            .iter()
            .filter(|s| s.leader().is_some_and(|v| v["state"] == "follower"))
            .count()
    };
    assert!(
        common::eventually(Duration::from_secs(30), || (followers() == 29)
            .then_some(()))
        .is_some(),
        "29 followers never settled"
    );

    // `candidates` in the queue: the head watched by the leader and the next in line,
    // the next in line by every follower behind it, each later node but the last by
    // its successor, the announcement by every follower behind the next in line.
    let check = |candidates: usize| {
        let behind = candidates - 2;
        let shape = |w: &std::collections::BTreeMap<String, usize>| {
            let mut by_sequence: Vec<(&String, &usize)> = w.iter().collect();
            by_sequence.sort_by_key(|(p, _)| p[p.len() - 10..].to_owned());
            let counts: Vec<usize> = by_sequence.iter().map(|(_, n)| **n).collect();
            // The last node is watched by nobody (`wchp` leaves it out).
            counts.len() == candidates - 1
                && counts[0] == 2
                && counts[1] == behind
                && counts[2..].iter().all(|n| *n == 1)
        };
        let watched = common::eventually(Duration::from_secs(15), || {
            let all = zk.watchers_by_path();
            let announcement = all.get("/leasekeeper/herd.leader").copied().unwrap_or(0);
            let w: std::collections::BTreeMap<String, usize> = all
                .into_iter()
                .filter(|(p, _)| p.starts_with("/leasekeeper/herd/"))
                .collect();
            (shape(&w) && announcement == behind).then_some(w)
        });
        watched.unwrap_or_else(|| {
            panic!(
                "never saw the head watched twice, the next in line {behind} times, every \
                 other node but the last once and the announcement {behind} times: {:?}",
                zk.watchers_by_path()
            )
        })
    };
    check(30);
    let leader = sidecars
        .iter()
        .position(|s| s.leader().is_some_and(|v| v["is_leader"] == true))
        .expect("a leader");
    sidecars[leader].signal(libc::SIGTERM);
    let next = common::eventually(Duration::from_secs(10), || {
        sidecars
            .iter()
            .enumerate()
            .find(|(i, s)| *i != leader && s.leader().is_some_and(|v| v["is_leader"] == true))
            .map(|(i, _)| i)
    });
    assert!(
        next.is_some(),
        "no new leader within 10 s of the release (the session's expiry: 30 s)"
    );
    check(29);
    // Every follower names the new holder.
    let new_leader = sidecars[next.expect("next")].name.clone();
    let named = common::eventually(Duration::from_secs(15), || {
        sidecars
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != leader)
            .all(|(_, s)| {
                s.leader()
                    .is_some_and(|v| v["leader"] == new_leader.as_str())
            })
            .then_some(())
    });
    assert!(named.is_some(), "a follower still names the old holder");
}

#[test]
fn zookeeper_over_tls_with_a_client_certificate() {
    let certs = tempfile::tempdir().expect("dir");
    common::make_certs(certs.path());
    let zk = ZkEnsemble::start_tls(certs.path());
    let file = |n: &str| certs.path().join(n).display().to_string();
    let mut args = SidecarArgs::zookeeper(&zk.secure_connect_string())
        .ttl("2s")
        .election("tls")
        .build();
    args.extend(["--zk-ca-file".into(), file("ca.pem")]);
    let dir = tempfile::tempdir().expect("dir");
    // The server requires a client certificate: with the CA alone the handshake fails.
    let anonymous = common::Sidecar::spawn("anonymous", dir.path(), &args);
    args.extend([
        "--zk-cert-file".into(),
        file("client.pem"),
        "--zk-key-file".into(),
        file("client.key"),
    ]);
    let secure = common::Sidecar::spawn("secure", dir.path(), &args);
    let status = secure.settles_in("leader", Duration::from_secs(15));
    assert_eq!(status["is_leader"], true);
    let second = common::Sidecar::spawn("second", dir.path(), &args);
    let status = second.settles_in("follower", Duration::from_secs(15));
    assert_eq!(status["leader"], "secure");
    let status = anonymous.leader().expect("anonymous answers");
    assert_eq!(status["state"], "unknown", "{status}");
    assert_eq!(status["is_leader"], false);
}

#[test]
fn digest_auth_keeps_other_identities_out_of_the_election() {
    let zk = ZkEnsemble::shared();
    let dir = tempfile::tempdir().expect("dir");
    let auth = |name: &str, secret: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, secret).expect("auth file");
        path.display().to_string()
    };
    let good = auth("good", "app:s3cret\n");
    let wrong = auth("wrong", "app:guess\n");
    let with_auth = |file: &str| {
        let mut a = SidecarArgs::zookeeper(&zk.connect_string())
            .ttl("2s")
            .election("guarded")
            .build();
        a.extend(["--zk-auth-file".into(), file.to_owned()]);
        a
    };
    let mut first = common::Sidecar::spawn("first", dir.path(), &with_auth(&good));
    first.settles_in("leader", Duration::from_secs(15));
    let second = common::Sidecar::spawn("second", dir.path(), &with_auth(&good));
    second.settles_in("follower", Duration::from_secs(15));
    // Same user, wrong password; and no credentials at all. The election's nodes carry
    // a creator-only ACL, so neither can read the queue nor join it.
    let intruder = common::Sidecar::spawn("intruder", dir.path(), &with_auth(&wrong));
    let anonymous = common::Sidecar::spawn(
        "anonymous",
        dir.path(),
        &SidecarArgs::zookeeper(&zk.connect_string())
            .ttl("2s")
            .election("guarded")
            .build(),
    );
    assert!(intruder.wait_listening(Duration::from_secs(10)));
    assert!(anonymous.wait_listening(Duration::from_secs(10)));
    // Observed: 3 s of the intruders' tries to read or join the queue.
    std::thread::sleep(Duration::from_secs(3));
    first.terminate(Duration::from_secs(5));
    second.settles_in("leader", Duration::from_secs(15));
    for s in [&intruder, &anonymous] {
        let status = s.leader().expect("answers");
        assert_eq!(status["state"], "unknown", "{status}");
        assert_eq!(status["is_leader"], false, "{status}");
    }
}

/// Whether `dir` holds `n` latch nodes within 5 s.
fn queued(connect: &str, dir: &str, n: usize) -> bool {
    backend_switchover::runtime().block_on(async {
        let client = zookeeper_client::Client::connect(connect)
            .await
            .expect("connect");
        for _ in 0..100 {
            if client.list_children(dir).await.is_ok_and(|c| c.len() >= n) {
                return true;
            }
            // Pause: the node's create is on its way.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    })
}

/// The leader's node under `dir`: the lowest sequence.
async fn leader_node(client: &zookeeper_client::Client, dir: &str) -> String {
    let mut children = client.list_children(dir).await.expect("list");
    children.sort_by_key(|c| c[c.len() - 10..].to_owned());
    format!("{dir}/{}", children.first().expect("a candidate node"))
}

/// Invariants 8 and 9: the leader's node deleted or rewritten by another client.
/// A leader that did not watch its own node (a renew that is a read) would go on
/// claiming until its next renew while the next candidate in the queue took over at
/// once.
#[test]
fn a_leader_whose_node_is_deleted_or_rewritten_steps_down_at_once() {
    use common::harness::tamper::{assert_recovered, tamper_with_leader};
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    let dir = tempfile::tempdir().expect("dir");
    let mut args = SidecarArgs::zookeeper(&connect)
        .ttl("4s")
        .election("tamper")
        .build();
    args.extend(common::args(&["--renew-interval", "1500ms"]));
    let sidecars: Vec<common::Sidecar> = (0..3)
        .map(|i| common::Sidecar::spawn(&format!("t{i}"), dir.path(), &args))
        .collect();

    let deleted = tamper_with_leader(&sidecars, Duration::from_millis(2000), |_| {
        with_zk(&connect, async |c| {
            let node = leader_node(&c, "/leasekeeper/tamper").await;
            c.delete(&node, None)
                .await
                .expect("delete the leader's node");
        })
    });
    eprintln!("deleted: {deleted:?}");
    assert_recovered(&deleted, Duration::from_millis(100));

    let rewritten = tamper_with_leader(&sidecars, Duration::from_millis(2000), |_| {
        with_zk(&connect, async |c| {
            let node = leader_node(&c, "/leasekeeper/tamper").await;
            c.set_data(&node, b"intruder", None)
                .await
                .expect("rewrite the leader's node");
        })
    });
    eprintln!("rewritten: {rewritten:?}");
    common::harness::tamper::assert_stopped_within(&rewritten, Duration::from_millis(500));
}

/// A granted ttl shorter than asked: the server caps the session timeout (20 ×
/// tickTime = 4 s here), far below the 15 s asked for. The deadline follows the
/// granted 4 s, so the default renew interval (5 s) does not fit: the interval adapts,
/// else the leader would lose every tenure at its deadline and flap.
#[test]
fn a_granted_session_shorter_than_the_ttl_does_not_make_the_leader_flap() {
    let zk = ZkEnsemble::shared();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::zookeeper(&zk.connect_string())
        .ttl("15s")
        .election("granted")
        .build();
    let sidecar = common::Sidecar::spawn("g0", dir.path(), &args);
    let first = sidecar.settles_in("leader", Duration::from_secs(10));
    let token = first["fencing_token"].as_u64().expect("a token");
    let until = std::time::Instant::now() + Duration::from_secs(9);
    while std::time::Instant::now() < until {
        let now = sidecar.leader().expect("/leader answers");
        assert_eq!(
            (now["is_leader"].as_bool(), now["fencing_token"].as_u64()),
            (Some(true), Some(token)),
            "the leader lost its tenure under a granted session of 4 s: {now}"
        );
        // Pause: between looks through the window.
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = sidecar.stderr();
    assert!(
        log.contains("renewing more often"),
        "the adapted renew interval is logged:\n{log}"
    );
}

/// Invariant 11 and a gray failure on zookeeper: a slow link (a long pipe, then a
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
    let zk = ZkEnsemble::shared();
    common::scenarios::handovers::slow_leader_is_replaced_and_recovers(
        &[zk.address()],
        Duration::from_secs(3),
        link,
        |endpoints| {
            SidecarArgs::zookeeper(&format!("{}{}", endpoints[0], zk.chroot()))
                .ttl("3s")
                .election("slow")
                .build()
        },
    );
}

/// Invariant 8: the server the leader talks to is cut off from the other two while
/// it keeps its client connections. It goes on answering reads for syncLimit ×
/// tickTime (~1 s here) while the quorum expires the leader's session and hands the
/// lead on. With renew as a read (`check_stat`), renewals answered by that server in
/// that second extended the old leader's deadline past the takeover; a renew proven
/// by the ensemble's leader (a `multi` check) cannot be answered there.
#[test]
fn a_leader_on_a_server_cut_off_from_the_quorum_stops_before_the_next_one_leads() {
    let zk = ZkEnsemble::start_partitionable(3);
    let leader_server = (0..3)
        .find(|&i| zk.server_mode(i).as_deref() == Some("leader"))
        .expect("the ensemble has a leader");
    let follower = (0..3).find(|&i| i != leader_server).expect("a follower");
    let other = (0..3)
        .find(|&i| i != leader_server && i != follower)
        .expect("another server");
    let dir = tempfile::tempdir().expect("dir");
    let spawn = |name: &str, server: usize| {
        let mut args = SidecarArgs::zookeeper(&zk.connect_string_for(server))
            .ttl("4s")
            .election("cutoff")
            .build();
        args.extend(common::args(&[
            "--renew-interval",
            "300ms",
            "--transition-log",
            &dir.path()
                .join(format!("{name}.jsonl"))
                .display()
                .to_string(),
        ]));
        common::Sidecar::spawn(name, dir.path(), &args)
    };
    let a = spawn("a", follower);
    a.settles_in("leader", Duration::from_secs(15));
    let b = spawn("b", other);
    b.settles_in("follower", Duration::from_secs(15));
    // Observed: 500 ms of both candidates renewing (every 300 ms) before the cut.
    std::thread::sleep(Duration::from_millis(500));

    zk.isolate(follower);
    let took_over = common::eventually(Duration::from_secs(15), || {
        b.leader().filter(|v| v["is_leader"] == true).map(|_| ())
    });
    // The fault: the server stays cut off a second after the takeover.
    std::thread::sleep(Duration::from_secs(1));
    zk.heal(follower);
    assert!(
        took_over.is_some(),
        "nobody took over from the cut-off leader"
    );

    let mut claims = std::collections::BTreeMap::new();
    for name in ["a", "b"] {
        let text =
            std::fs::read_to_string(dir.path().join(format!("{name}.jsonl"))).unwrap_or_default();
        checker::parse_claims(&text, &mut claims);
    }
    let mut claims: Vec<checker::LoggedClaim> = claims.into_values().collect();
    claims.sort_by_key(|c| c.start);
    eprintln!("claims: {claims:#?}");
    checker::check_claims_never_overlap(&claims);
    checker::check_tokens_strictly_grow(&claims);
}

/// The checker's link and store faults on ZooKeeper, a short deterministic round of
/// each, judged also against the store's own record.
#[test]
fn zookeeper_survives_partitions_slow_links_and_tampering() {
    use common::harness::recorder::Recorder;
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    let store = Recorder::zookeeper(connect.clone(), "/leasekeeper/faults".to_owned());
    let rounds = vec![
        Fault::PartitionLeader,
        Fault::Graceful,
        Fault::SlowLeader,
        Fault::CongestedLeader,
        Fault::LeaderRepliesHeld,
        Fault::PartitionFollower,
        Fault::TamperDelete,
        Fault::Kill9,
        Fault::TamperOverwrite,
        Fault::Graceful,
    ];
    let chroot = zk.chroot().to_owned();
    let report = checker::run_link_faults(
        Duration::from_secs(2),
        rounds,
        zk.address(),
        move |addr| {
            SidecarArgs::zookeeper(&format!("{addr}{chroot}"))
                .ttl("2s")
                .election("faults")
                .build()
        },
        store,
        move |fault| {
            with_zk(&connect, async |c| {
                let node = leader_node(&c, "/leasekeeper/faults").await;
                if fault == Fault::TamperDelete {
                    c.delete(&node, None).await.expect("delete");
                } else {
                    c.set_data(&node, b"intruder", None).await.expect("set");
                }
            })
        },
    );
    eprintln!("zookeeper faults: {report:?}");
}

/// A release cut short: a release whose delete never reaches the server (the
/// elector gave up on it) must not leave the node for the next campaign of the same
/// session to find by its prefix and claim again with the same czxid.
#[test]
fn a_release_cut_short_never_hands_out_the_same_token_twice() {
    use common::harness::faults::{FaultProxy, Link};
    let zk = ZkEnsemble::shared();
    let proxy = FaultProxy::start(zk.address());
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("t.jsonl");
    let mut args = SidecarArgs::zookeeper(&format!("{}{}", proxy.addr(), zk.chroot()))
        .ttl("4s")
        .election("cut-short")
        .build();
    args.extend(common::args(&[
        "--enable-release-endpoint",
        "--transition-log",
        &log.display().to_string(),
    ]));
    let sidecar = common::Sidecar::spawn("r0", dir.path(), &args);
    let first = sidecar.settles_in("leader", Duration::from_secs(10));
    let token = first["fencing_token"].as_u64().expect("token");
    // The delete of the release is held, the elector gives up on it (backend timeout
    // 800 ms), then the connection is cut so the delete is lost; the session lives on.
    proxy.set(Link::Blackhole);
    // Answered once the release gave up, after the client's read timeout: not waited for.
    let port = sidecar.port;
    let asked = std::thread::spawn(move || common::harness::http::post(port, "/release"));
    common::eventually(Duration::from_secs(3), || {
        sidecar
            .leader()
            .filter(|v| v["is_leader"] == false)
            .map(|_| ())
    })
    .expect("stepped down on /release");
    // The fault: the link stays blackholed until the release has given up.
    std::thread::sleep(Duration::from_millis(1200));
    proxy.reset();
    let _ = asked.join();
    proxy.set(Link::Pass);
    let again = common::eventually(Duration::from_secs(15), || {
        sidecar
            .leader()
            .filter(|v| v["is_leader"] == true)
            .and_then(|v| v["fencing_token"].as_u64())
    });
    assert!(again.is_some(), "never led again:\n{}", sidecar.stderr());
    let mut claims = std::collections::BTreeMap::new();
    checker::parse_claims(
        &std::fs::read_to_string(&log).unwrap_or_default(),
        &mut claims,
    );
    let claims: Vec<checker::LoggedClaim> = claims.into_values().collect();
    assert!(claims.len() >= 2, "two tenures: {claims:?}");
    checker::check_tokens_strictly_grow(&claims);
    assert!(again > Some(token), "token {again:?} after {token}");
}

/// The election's parent node deleted (with every candidate's node under it) and
/// created again while a leader holds: the leader's own-node watch ends its claim,
/// and the candidates queue again under the new parent.
#[test]
fn the_election_parent_deleted_and_recreated_leaves_one_leader() {
    use common::harness::recorder::Recorder;
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    let parent = "/leasekeeper/parent".to_owned();
    let store = Recorder::zookeeper(connect.clone(), parent.clone());
    let rounds = vec![
        Fault::TamperDelete,
        Fault::Graceful,
        Fault::TamperDelete,
        Fault::Kill9,
        Fault::TamperDelete,
        Fault::Graceful,
    ];
    let chroot = zk.chroot().to_owned();
    let report = checker::run_link_faults(
        Duration::from_secs(2),
        rounds,
        zk.address(),
        move |addr| {
            SidecarArgs::zookeeper(&format!("{addr}{chroot}"))
                .ttl("2s")
                .election("parent")
                .build()
        },
        store,
        move |_| {
            with_zk(&connect, async |c| {
                let (acls, _) = c.get_acl(&parent).await.expect("parent acl");
                // One transaction: every child, the parent, a new parent. (Deleted
                // one by one, each candidate left alone would lead for a moment, and
                // the recorder's one-shot watches can miss such a short tenure.)
                let options =
                    zookeeper_client::CreateMode::Persistent.with_acls(acls.as_slice().into());
                let done = tokio::time::timeout(Duration::from_secs(5), async {
                    loop {
                        let children = c.list_children(&parent).await.expect("children");
                        let mut multi = c.new_multi_writer();
                        for child in &children {
                            multi
                                .add_delete(&format!("{parent}/{child}"), None)
                                .expect("op");
                        }
                        multi.add_delete(&parent, None).expect("op");
                        multi.add_create(&parent, b"", &options).expect("op");
                        if multi.commit().await.is_ok() {
                            break;
                        }
                    }
                })
                .await;
                assert!(
                    done.is_ok(),
                    "could not delete and recreate the election parent"
                );
            })
        },
    );
    eprintln!("zookeeper parent recreated: {report:?}");
    assert_eq!(report.faults.get("tamper-delete"), Some(&3));
}

/// Followers watch their predecessor and the holder's node and otherwise send nothing
/// but their session's pings while the holder renews; a graceful handover still moves
/// at once, and each follower's `/leader` names the new holder.
#[test]
fn followers_send_only_pings_while_the_holder_renews() {
    use common::{eventually, Sidecar};
    let zk = ZkEnsemble::start(1);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::zookeeper(&zk.connect_string())
        .ttl("2s")
        .election("quiet")
        .build();
    let mut cars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("quiet-{i}"), dir.path(), &args))
        .collect();
    let settled = |cars: &[Sidecar]| {
        eventually(Duration::from_secs(15), || {
            let s: Vec<serde_json::Value> =
                cars.iter().map(|c| c.leader()).collect::<Option<_>>()?;
            let leader = s.iter().find(|v| v["state"] == "leader")?["identity"].clone();
            let followers = s
                .iter()
                .filter(|v| v["state"] == "follower" && v["leader"] == leader)
                .count();
            (followers == cars.len() - 1).then_some(leader)
        })
    };
    assert!(
        settled(&cars).is_some(),
        "never one leader and two followers"
    );
    // Observed: the count starts 2 s after the followers follow.
    std::thread::sleep(Duration::from_secs(2));
    let before = zk.received_by_session();
    // Observed: 6 s of steady leadership.
    std::thread::sleep(Duration::from_secs(6));
    let after = zk.received_by_session();
    let mut deltas: Vec<u64> = after
        .iter()
        .filter_map(|(sid, n)| before.get(sid).map(|b| n - b))
        .collect();
    deltas.sort();
    eprintln!("requests per session in 6 s (pings included): {deltas:?}");
    assert_eq!(deltas.len(), 3, "{before:?} {after:?}");
    // An idle 2 s session pings every 3/20 of it (zookeeper-client): at most 20 in 6 s.
    // Followers that re-read the queue every retry interval sent 43 each here.
    assert!(deltas[1] <= 21, "followers sent {deltas:?}");
    for c in &cars {
        let v = c.leader().expect("status");
        assert!(v["leader"].is_string(), "{}: stale holder {v}", c.name);
    }
    let li = cars
        .iter()
        .position(|c| c.leader().is_some_and(|v| v["is_leader"] == true))
        .expect("leader");
    let mut old = cars.remove(li);
    old.terminate(Duration::from_secs(5)).expect("stopped");
    let next = settled(&cars).expect("no new leader after a graceful stop");
    assert_ne!(next, old.name.as_str());
}

/// See [`common::scenarios::handovers::followers_survive_release_requests_during_a_handover`].
#[test]
fn followers_survive_release_requests_during_a_handover() {
    let zk = ZkEnsemble::shared();
    let args = SidecarArgs::zookeeper(&zk.connect_string())
        .ttl("4s")
        .election("stagger")
        .build();
    common::scenarios::handovers::followers_survive_release_requests_during_a_handover(&args);
}

/// A ZooKeeper candidate built as the sidecar builds it (flags → settings → backend).
fn zk_candidate(connect: &str, election: &str, identity: &str) -> ZkBackend {
    zk_candidate_with_ttl(connect, election, identity, Duration::from_secs(2))
}

fn zk_candidate_with_ttl(
    connect: &str,
    election: &str,
    identity: &str,
    ttl: Duration,
) -> ZkBackend {
    let settings = leasekeeper::backend::zookeeper::Args {
        zk_connect: Some(connect.to_owned()),
        ..Default::default()
    }
    .settings()
    .expect("zookeeper settings");
    let timing = Timing::for_ttl(ttl);
    ZkBackend::new(
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
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(
        backend_herd::a_follower_behind_the_next_in_line_sleeps_through_a_release(|id| {
            zk_candidate(&connect, "herdlib", id)
        }),
    );
}

/// See [`backend_switchover::passes_the_lease_to_the_named_candidate`].
#[test]
fn switchover_passes_the_lease_to_the_named_candidate() {
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(
        backend_switchover::passes_the_lease_to_the_named_candidate(|id| {
            zk_candidate(&connect, "switch", id)
        }),
    );
}

/// See [`backend_switchover::lists_the_live_candidates`].
#[test]
fn switchover_candidates_are_the_live_ones() {
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(backend_switchover::lists_the_live_candidates(|id| {
        zk_candidate(&connect, "live", id)
    }));
}

/// See [`backend_switchover::to_a_missing_candidate_is_a_plain_release`].
#[test]
fn switchover_to_a_missing_candidate_is_a_plain_release() {
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(
        backend_switchover::to_a_missing_candidate_is_a_plain_release(|id| {
            zk_candidate(&connect, "missing", id)
        }),
    );
}

/// See [`common::scenarios::handovers::switchover_goes_to_the_named_candidate`]: sidecars end to
/// end (the library-level rules are `switchover_*` in `common::scenarios::backend_switchover`).
#[test]
fn switchover_goes_to_the_named_candidate() {
    let zk = ZkEnsemble::shared();
    let args = SidecarArgs::zookeeper(&zk.connect_string())
        .ttl("4s")
        .election("switch")
        .build();
    common::scenarios::handovers::switchover_goes_to_the_named_candidate(&args);
}

// The store's rules, one at a time, at the library level (DESIGN §2 and §7): candidates
// built as the sidecar builds them, driven by hand against real ZooKeeper, with every
// other defence in place. Each breaks alone when its rule is switched off.

/// A campaign that must take the lease; its token.
async fn zk_leads(who: &str, b: &mut ZkBackend) -> u64 {
    match b.campaign().await {
        Ok(Campaign::Acquired { token }) => token,
        other => panic!("{who} should lead, its campaign found {other:?}"),
    }
}

/// A campaign that must find `leader` holding the lease (with `token`, when given).
async fn zk_follows(who: &str, b: &mut ZkBackend, leader: &str, token: Option<u64>) {
    match b.campaign().await {
        Ok(Campaign::Held(Some(h)))
            if h.identity == leader && token.is_none_or(|t| h.token == Some(t)) => {}
        other => panic!("{who} should follow {leader} ({token:?}), its campaign found {other:?}"),
    }
}

/// Invariant 8: a renew is proven by the ensemble's leader. A leader connected only to
/// a follower server that is cut off from the quorum: that server goes on answering
/// reads for about a second, so a renew proven by a read there is answered at once;
/// the `multi` check must go to the ensemble's leader and cannot be answered.
#[test]
fn a_renew_through_a_server_cut_off_from_the_quorum_proves_nothing() {
    let zk = ZkEnsemble::start_partitionable(3);
    let leader = (0..3)
        .find(|&i| zk.server_mode(i).as_deref() == Some("leader"))
        .expect("the ensemble has a leader");
    let f = (0..3).find(|&i| i != leader).expect("a follower");
    let connect = zk.connect_string_for(f);
    backend_switchover::runtime().block_on(async {
        let mut a = zk_candidate(&connect, "cut", "A");
        zk_leads("A", &mut a).await;
        assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
        zk.isolate(f);
        let renew = tokio::time::timeout(Duration::from_millis(1500), a.renew()).await;
        assert!(
            !matches!(renew, Ok(Ok(Renewal::Renewed))),
            "a server cut off from the quorum vouched for the renew: {renew:?}"
        );
    });
    zk.heal(f);
}

/// Invariant 8 for a claim: the next in line, connected to a follower server, hears
/// that the head was deleted, and that server is then cut off from the quorum. Its
/// claim (one round trip, see `claim_next_in_line`) needs the ensemble's leader (the
/// `multi` check) and cannot be answered; a claim proven by reads alone (our node,
/// owned by this session) was answered at once by the cut-off server.
#[test]
fn a_claim_through_a_server_cut_off_from_the_quorum_proves_nothing() {
    let zk = ZkEnsemble::start_partitionable(3);
    let leader = (0..3)
        .find(|&i| zk.server_mode(i).as_deref() == Some("leader"))
        .expect("the ensemble has a leader");
    let f = (0..3).find(|&i| i != leader).expect("a follower");
    backend_switchover::runtime().block_on(async {
        let mut a = zk_candidate(&zk.connect_string_for(leader), "cutclaim", "A");
        zk_leads("A", &mut a).await;
        let mut b = zk_candidate(&zk.connect_string_for(f), "cutclaim", "B");
        zk_follows("B", &mut b, "A", None).await;
        a.release().await.expect("release");
        let woke = tokio::time::timeout(
            Duration::from_secs(5),
            b.wait_for_change(Duration::from_secs(5)),
        )
        .await;
        assert_eq!(woke, Ok(Wake::Changed), "B never heard of the release");
        zk.isolate(f);
        let claim = tokio::time::timeout(Duration::from_millis(1500), b.campaign()).await;
        assert!(
            !matches!(claim, Ok(Ok(Campaign::Acquired { .. }))),
            "a server cut off from the quorum vouched for the claim: {claim:?}"
        );
    });
    zk.heal(f);
}

/// Invariant 8 when the ensemble's leader itself is cut off from its quorum: it goes on
/// answering the `sync` of a claim until it steps down (a deposed leader's answer), but
/// the claim's `multi` check, sent with it, never commits there. B, next in line and
/// connected to that server only, claims on the `sync`; its claim must end when the
/// check fails (the server steps down after syncLimit × tickTime, about 1 s here, and
/// drops its connections), not only when B's 4 s session is given up, since the new
/// leader may expire that session a session timeout after it starts.
#[test]
fn a_claim_that_only_a_deposed_leader_vouched_for_ends_when_it_steps_down() {
    let zk = ZkEnsemble::start_partitionable(3);
    let leader = (0..3)
        .find(|&i| zk.server_mode(i).as_deref() == Some("leader"))
        .expect("the ensemble has a leader");
    let f = (0..3).find(|&i| i != leader).expect("a follower");
    let ttl = Duration::from_secs(4);
    backend_switchover::runtime().block_on(async {
        let mut a = zk_candidate_with_ttl(&zk.connect_string_for(f), "deposed", "A", ttl);
        zk_leads("A", &mut a).await;
        let mut b = zk_candidate_with_ttl(&zk.connect_string_for(leader), "deposed", "B", ttl);
        zk_follows("B", &mut b, "A", None).await;
        a.release().await.expect("release");
        let woke = tokio::time::timeout(
            Duration::from_secs(5),
            b.wait_for_change(Duration::from_secs(5)),
        )
        .await;
        assert_eq!(woke, Ok(Wake::Changed), "B never heard of the release");
        zk.isolate(leader);
        let claim = tokio::time::timeout(Duration::from_secs(3), b.campaign()).await;
        assert!(
            matches!(claim, Ok(Ok(Campaign::Acquired { .. }))),
            "the deposed leader did not answer B's claim: {claim:?}"
        );
        let started = std::time::Instant::now();
        b.record_lost().await;
        let took = started.elapsed();
        eprintln!("B's claim ended {took:?} after it was made");
        assert!(
            took < Duration::from_millis(3500),
            "B kept a claim that only a deposed leader vouched for for {took:?}"
        );
    });
    zk.heal(leader);
}

/// A leads; then its node is deleted and created again under the same name by
/// another session (an operator, say), with version 0 like ours. A's own watch is
/// held blind (nobody polls `record_lost`).
async fn leader_whose_node_was_created_again(connect: &str, election: &str) -> ZkBackend {
    let mut a = zk_candidate(connect, election, "A");
    zk_leads("A", &mut a).await;
    let intruder = zookeeper_client::Client::connect(connect)
        .await
        .expect("connect");
    let node = leader_node(&intruder, &format!("/leasekeeper/{election}")).await;
    intruder.delete(&node, None).await.expect("delete A's node");
    let options =
        zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
    intruder
        .create(&node, b"intruder", &options)
        .await
        .expect("create it again");
    // The intruder's session must outlive the test's calls.
    std::mem::forget(intruder);
    a
}

/// Before claiming, the lowest node must belong to the current session (DESIGN §7).
#[test]
fn a_node_of_another_session_never_leads() {
    let zk = ZkEnsemble::shared();
    backend_switchover::runtime().block_on(async {
        let mut a = leader_whose_node_was_created_again(&zk.connect_string(), "again1").await;
        let found = a.campaign().await.expect("campaign");
        assert!(
            !matches!(found, Campaign::Acquired { .. }),
            "A claimed another session's node: {found:?}"
        );
    });
}

/// Invariant 5 on ZooKeeper: a renew vouches only for our session's own node.
#[test]
fn a_renew_never_vouches_for_a_node_of_another_session() {
    let zk = ZkEnsemble::shared();
    backend_switchover::runtime().block_on(async {
        let mut a = leader_whose_node_was_created_again(&zk.connect_string(), "again2").await;
        assert_eq!(
            a.renew().await.expect("renew"),
            Renewal::Lost,
            "A renewed on a node created again by another session"
        );
    });
}

/// Invariant 5 on ZooKeeper: a release is compare-and-act too. A leader whose node
/// was deleted and created again under the same name by another session (its own
/// watch held blind) must not delete that node on release.
#[test]
fn a_release_never_deletes_a_node_of_another_session() {
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(async {
        let mut a = leader_whose_node_was_created_again(&connect, "again3").await;
        let look = zookeeper_client::Client::connect(&connect)
            .await
            .expect("connect");
        let before = look
            .list_children("/leasekeeper/again3")
            .await
            .expect("list");
        assert_eq!(before.len(), 1, "the other session's node is there");
        a.release().await.expect("A's release answers");
        let left = look
            .list_children("/leasekeeper/again3")
            .await
            .expect("list");
        assert_eq!(
            left.len(),
            1,
            "A's release deleted the other session's node"
        );
        let (data, _) = look
            .get_data(&format!("/leasekeeper/again3/{}", left[0]))
            .await
            .expect("read");
        assert_eq!(data, b"intruder");
    });
}

/// Invariant 5 on ZooKeeper: a release deletes our own node only. A follower's release
/// leaves the leader's node (and its token) in place and takes the follower's node
/// out of the queue at once; a second release is a no-op.
#[test]
fn a_release_gives_back_only_our_own_node() {
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(async {
        let make = |id| zk_candidate(&connect, "own", id);
        let (mut a, mut b, mut c) = (make("A"), make("B"), make("C"));
        let token = zk_leads("A", &mut a).await;
        zk_follows("B", &mut b, "A", Some(token)).await;
        zk_follows("C", &mut c, "A", Some(token)).await;
        b.release().await.expect("B releases");
        b.release().await.expect("B releases again");
        let listed = c.candidates().await.expect("list").expect("a list");
        assert_eq!(listed, ["A", "C"], "B's release took the wrong node");
        let mut fresh = make("F");
        zk_follows("a fresh candidate", &mut fresh, "A", Some(token)).await;
        zk_follows("C", &mut c, "A", Some(token)).await;
        assert_eq!(a.renew().await.expect("A renews"), Renewal::Renewed);
    });
}

/// A graceful release is one transaction on the server: the close of the session,
/// which deletes our ephemeral node with it (a delete of the node and then the close
/// would be two, and the successor's first requests would queue behind the second's
/// disk write). The node is gone at once: the next candidate leads.
#[test]
fn a_release_is_one_transaction_the_close_of_the_session() {
    let zk = ZkEnsemble::start(1);
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(async {
        let look = zookeeper_client::Client::connect(&connect)
            .await
            .expect("connect");
        let mut a = zk_candidate(&connect, "close", "A");
        zk_leads("A", &mut a).await;
        // The leader's own writes after its claim are done: its announcement is there.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while look.get_data("/leasekeeper/close.leader").await.is_err() {
            assert!(
                std::time::Instant::now() < until,
                "A never announced its claim"
            );
            // Pause: between looks.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = zk.last_zxid();
        a.release().await.expect("A releases");
        let left = look
            .list_children("/leasekeeper/close")
            .await
            .expect("list");
        assert!(left.is_empty(), "A's node outlived its release: {left:?}");
        // A session left open instead of closed would end by the server's expiry, a
        // transaction of its own, a session timeout (2 s) later.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let spent = zk.last_zxid() - before;
        assert_eq!(spent, 1, "the release took {spent} transactions");
    });
}

/// A release sends nothing ahead of the close of its session: the leader's watch on
/// its own node is still set at the server when the close deletes the node (a
/// removeWatches first would be one more request for the server to answer before the
/// close, and so before the successor's watch fires). The release comes right after
/// the claim, while the claim's own background writes (its confirmation, its
/// announcement) still hold the session open.
#[test]
fn a_release_sends_no_removal_of_its_watch_ahead_of_the_close() {
    let zk = ZkEnsemble::start(1);
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(async {
        let mut a = zk_candidate(&connect, "unwatch", "A");
        let fired = || zk.mntr("zk_sum_node_deleted_watch_count");
        let before = fired();
        zk_leads("A", &mut a).await;
        a.release().await.expect("A releases");
        // The delete's watchers are counted once the close is applied.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while fired() == before && std::time::Instant::now() < until {
            // Pause: between looks at the server's counters.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            fired() - before,
            1.0,
            "the leader's own watch was removed before the close deleted its node"
        );
    });
}

/// Invariant 4 and the queue order on ZooKeeper: the node of lowest sequence leads,
/// whoever campaigns first after the leader went (C, third in line, looks before B
/// does and still follows B); and each new tenure's token (the czxid) is greater than
/// every earlier one, also for a fresh candidate that never saw the earlier tenures,
/// and after a candidate that vanished without a release.
#[test]
fn the_lowest_node_leads_and_tokens_grow_for_fresh_candidates() {
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(async {
        let make = |id| zk_candidate(&connect, "order", id);
        let (mut a, mut b, mut c) = (make("A"), make("B"), make("C"));
        let first = zk_leads("A", &mut a).await;
        zk_follows("B", &mut b, "A", Some(first)).await;
        zk_follows("C", &mut c, "A", Some(first)).await;
        a.release().await.expect("A releases");
        let b_token = match c.campaign().await {
            Ok(Campaign::Held(Some(h))) if h.identity == "B" => h.token.expect("B's token"),
            other => panic!("C, behind B, should follow B: {other:?}"),
        };
        assert_eq!(zk_leads("B", &mut b).await, b_token);
        assert!(b_token > first, "B's token {b_token} after A's {first}");
        // B vanishes without a release (its session ends with it); a fresh
        // candidate with no memory of the tenures before comes after C.
        drop(b);
        let c_token = loop {
            match c.campaign().await.expect("campaign") {
                Campaign::Acquired { token } => break token,
                Campaign::Held(_) => {
                    let _ = c.wait_for_change(Duration::from_millis(300)).await;
                }
            }
        };
        assert!(c_token > b_token, "C's token {c_token} after B's {b_token}");
        c.release().await.expect("C releases");
        let fresh = zk_leads("E", &mut make("E")).await;
        assert!(
            fresh > c_token,
            "the fresh candidate's token {fresh} after {c_token}"
        );
    });
}

/// Invariant 9 on ZooKeeper, reached directly: the leader's own-node watch
/// (`record_lost`) does not end while the node is its own (its renewals included), and
/// ends soon after another client deletes the node.
#[test]
fn the_leader_hears_its_node_deleted_but_not_its_own_renewals() {
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    backend_switchover::runtime().block_on(async {
        let mut a = zk_candidate(&connect, "heard", "A");
        zk_leads("A", &mut a).await;
        for _ in 0..2 {
            assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
            let own = tokio::time::timeout(Duration::from_millis(500), a.record_lost()).await;
            assert!(own.is_err(), "A's own node read as lost");
        }
        let intruder = zookeeper_client::Client::connect(&connect)
            .await
            .expect("connect");
        let node = leader_node(&intruder, "/leasekeeper/heard").await;
        intruder.delete(&node, None).await.expect("delete A's node");
        let heard = tokio::time::timeout(Duration::from_secs(2), a.record_lost()).await;
        assert!(heard.is_ok(), "A never heard of its node's deletion");
    });
}
