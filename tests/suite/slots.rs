//! Elections of several holders (`--holders N`) on every store, against the real
//! servers (the Kubernetes API: the real kube-apiserver when `LK_KUBE_APISERVER`
//! names one, else the fake): the slots scenario of `common/scenarios/slots.rs` with SIGTERM,
//! kill -9 and SIGSTOP, checked on the transition logs, as a table of cases × stores
//! (`store_matrix!`: `<case>::<store>`); and the non-blocking `run`.

use crate::common;

use std::time::Duration;

use common::harness::faults::Link;
use common::scenarios::slots::{
    all_slots_held, check_slot_claims, logged_claims, slot_leaders, two_slots_five_candidates,
    two_slots_five_candidates_and_the_store_struck, two_slots_five_candidates_no_pause, Strikes,
};
use common::scenarios::stores::{store_matrix, Store};
use common::servers::kube_server::{self, Flavor};
use common::servers::redis_server::RedisServer;
use common::{eventually, run_to_exit, Sidecar, SidecarArgs};

const GRACEFUL: Duration = Duration::from_secs(2);

/// Every byte of a link half a ttl late each way: a round trip past the backend timeout.
fn late(ttl: Duration) -> Link {
    Link::Delay(ttl / 2)
}

/// Every chunk queued 0.4 ttl behind the one before it.
fn congested(ttl: Duration) -> Link {
    Link::Congested(ttl.mul_f64(0.4))
}

/// A store's row of the slots scenario: its ttl, how a holder's link is slowed (a
/// link late past the backend timeout on some stores, a congested one on the others;
/// `make soak` runs both on every store), and whether its nodes are restarted too.
/// Redis: a ttl well above the graceful bound, for a slot whose release woke nobody
/// (its baton popped by a candidate that holds another slot) is taken only when the
/// renewals are missed, 3/4 ttl later, and fails the bound. Redlock: its nodes keep
/// no data, a restart is the Redlock checker's own (restart fencing).
fn struck(store: Store) -> (Duration, fn(Duration) -> Link, bool) {
    let secs = Duration::from_secs;
    match store {
        Store::Redis => (secs(5), congested, true),
        Store::Etcd | Store::Mysql => (secs(2), congested, true),
        Store::Redlock => (secs(2), late, false),
        _ => (secs(2), late, true),
    }
}

store_matrix! {
    /// Two slots, five candidates, with SIGTERM, kill -9 and SIGSTOP of holders, and the
    /// store struck (its faults, its nodes', a holder's slowed link) where it runs as a
    /// server of the test's own.
    fn slots_on(store) on [file, redis, redlock, etcd, zookeeper, postgres, mysql] {
        let mut on = store.own();
        let (ttl, slowed, restart) = struck(store);
        let args = on.args().ttl(&format!("{}s", ttl.as_secs())).election("slots");
        if store == Store::File {
            return two_slots_five_candidates_no_pause(args, ttl, GRACEFUL);
        }
        let nodes = on.addresses();
        let strikes = Strikes::new(on.control(), nodes, restart).slowed(&[slowed(ttl)]);
        two_slots_five_candidates_and_the_store_struck(args, ttl, GRACEFUL, strikes);
    }

    /// A waiting candidate that stops (SIGTERM) leaves every slot's queue, as a single
    /// lease's follower does: when a slot's holder goes next, a candidate that still
    /// waits takes the slot within 10 s, not after the stopped one's place expires
    /// (ttl 30 s here, so that a busy machine cannot blur the two).
    fn a_stopping_follower_leaves_every_queue(store) on [etcd, zookeeper] {
        let on = store.long_lived();
        a_stopping_follower_leaves_every_queue(on.args());
    }
}

#[test]
fn slots_on_kubernetes() {
    let api = kube_server::start("team", Flavor::GateOff);
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("slots");
    two_slots_five_candidates(args, Duration::from_secs(2), GRACEFUL);
    // One Lease per slot (slot 0 the election's own, then <election>-<slot>), each a
    // client-go Lease.
    for name in ["slots", "slots-1"] {
        let lease = api.lease(name).expect("a Lease per slot");
        assert!(lease["spec"]["holderIdentity"].is_string(), "{lease}");
        assert!(
            lease["spec"]["leaseTransitions"].as_u64().is_some(),
            "{lease}"
        );
    }
}

/// `run --wait-timeout`: with every slot held, `0` tries once and exits 75 at once,
/// a duration waits that long and exits 75; with a slot free, CMD runs with its slot
/// in the environment and `run` exits with CMD's code.
#[test]
fn run_with_a_wait_timeout_is_a_non_blocking_lock() {
    let dir = tempfile::tempdir().expect("dir");
    let lock = dir.path().join("job.lock").display().to_string();
    let base = [
        "--backend",
        "file",
        "--file-path",
        &lock,
        "--election",
        "job",
        "--holders",
        "2",
        "--ttl",
        "3s",
    ];
    let holder_args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    let first = Sidecar::spawn("job-0", dir.path(), &holder_args);
    first.settles_in("leader", Duration::from_secs(10));

    // One slot free: CMD runs in it.
    let port = common::free_port().to_string();
    let mut run: Vec<&str> = vec!["run"];
    run.extend(base);
    run.extend(["--identity", "job-1", "--http-addr"]);
    let addr = format!("127.0.0.1:{port}");
    run.push(&addr);
    let with_cmd = |wait: &'static str, cmd: &'static str| {
        let mut a = run.clone();
        a.extend(["--wait-timeout", wait, "--", "sh", "-c", cmd]);
        a
    };
    let (code, out, err) = run_to_exit(
        &with_cmd(
            "0",
            "echo slot=$LEASEKEEPER_SLOT/$LEASEKEEPER_HOLDERS; exit 7",
        ),
        &[],
    );
    assert_eq!(code, Some(7), "{out}\n{err}");
    assert!(out.contains("slot=1/2"), "{out}");

    // Both slots held: 0 gives up after one round, a duration after that long.
    let holders = [first, Sidecar::spawn("job-2", dir.path(), &holder_args)];
    all_slots_held(&holders, 2, Duration::from_secs(10));
    let t0 = std::time::Instant::now();
    let (code, out, err) = run_to_exit(&with_cmd("0", "echo ran"), &[]);
    assert_eq!(code, Some(75), "{out}\n{err}");
    assert!(!out.contains("ran"), "{out}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "one try took {:?}",
        t0.elapsed()
    );
    let t0 = std::time::Instant::now();
    let (code, out, err) = run_to_exit(&with_cmd("1500ms", "echo ran"), &[]);
    assert_eq!(code, Some(75), "{out}\n{err}");
    assert!(
        t0.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
    assert!(err.contains("--wait-timeout"), "{err}");
}

/// Bad `--holders` values, `--wait-timeout` without `run`, and several slots with the
/// API server's coordinated election are refused with one line naming the setting.
#[test]
fn bad_slot_settings_are_refused_with_one_line() {
    for (args, needle) in [
        (vec!["--holders", "0"], "--holders"),
        (vec!["--holders", "65"], "--holders"),
        (vec!["--holders", "two"], "--holders"),
        (vec!["--wait-timeout", "1s"], "--wait-timeout"),
        (
            vec![
                "--backend",
                "kubernetes",
                "--namespace",
                "team",
                "--holders",
                "2",
                "--lease-candidate",
            ],
            "--holders above 1 with --lease-candidate",
        ),
    ] {
        let (code, _, err) = run_to_exit(&args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A rollout that changes `--holders`: from 1 to 2 and back. Slot 0 is the election's
/// own lease, so the old single leader and the new slots share it: there are never
/// more claims than the larger N, never two on one lease; the new slot is taken at
/// once; the holders of slots past the new N hand over as their Pods stop (SIGTERM),
/// and nobody takes those slots again.
#[test]
fn changing_the_number_of_holders_in_a_rollout() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let spawn = |name: &str, holders: &str| {
        let log = dir
            .path()
            .join(format!("{name}.jsonl"))
            .display()
            .to_string();
        let args = SidecarArgs::redis(&redis.url())
            .ttl("2s")
            .election("roll")
            .flag("--holders", holders)
            .flag("--transition-log", &log);
        Sidecar::spawn(name, dir.path(), &args.build())
    };
    let bound = Duration::from_secs(15);
    let mut cars = vec![spawn("a-0", "1"), spawn("a-1", "1")];
    all_slots_held(&cars, 1, bound);
    // Up to 2: the new slot is taken by a new Pod, slot 0 stays with its holder.
    cars.extend([spawn("b-0", "2"), spawn("b-1", "2")]);
    let held = all_slots_held(&cars, 2, bound);
    assert!(held[0].0 < 2 && held[1].0 >= 2, "{held:?}");
    for old in &mut cars[0..2] {
        old.terminate(Duration::from_secs(10));
    }
    let held = all_slots_held(&cars, 2, bound);
    assert!(held.iter().all(|h| h.0 >= 2), "{held:?}");
    // Back to 1: slot 1's holder goes with its Pod, and nobody takes slot 1 again.
    cars.extend([spawn("c-0", "1"), spawn("c-1", "1")]);
    for new in &cars[4..6] {
        new.settles_in("follower", bound);
    }
    for old in &mut cars[2..4] {
        old.terminate(Duration::from_secs(10));
    }
    let held = all_slots_held(&cars, 1, bound);
    assert!(held[0].0 >= 4, "{held:?}");
    // Observed: 3 s in which nobody takes slot 1 again.
    std::thread::sleep(Duration::from_secs(3));
    let now = slot_leaders(&cars);
    assert_eq!(now.len(), 1, "one leader after the rollout to 1: {now:?}");
    for c in &mut cars {
        c.terminate(Duration::from_secs(10));
    }
    let claims = logged_claims(dir.path());
    assert!(claims.len() >= 4, "{claims:?}");
    check_slot_claims(&claims, 2);
}

/// The Pod label with two slots: each leader's Pod shows `leasekeeper.io/leader: true`
/// and `leasekeeper.io/slot: <its slot>`, a follower's `false` and no slot; a new
/// tenure in one slot clears stale leader labels of that slot only, never the other
/// slot's leader (no "false" is ever written on its Pod while it leads).
#[test]
fn the_pod_labels_name_each_slot_and_a_new_tenure_clears_only_its_own() {
    const KEY: &str = "leasekeeper.io/leader";
    const SLOT: &str = "leasekeeper.io/slot";
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let spawn = |pod: &str| {
        api.add_pod(pod, &[("leasekeeper.io/election", "labelled")]);
        let args = SidecarArgs::kubernetes(&api.kubeconfig())
            .ttl("2s")
            .election("labelled")
            .flag("--holders", "2")
            .flag("--pod-name", pod)
            .build();
        let mut args = args;
        args.push("--pod-label".to_owned());
        Sidecar::spawn(pod, dir.path(), &args)
    };
    let mut cars = vec![spawn("pod-0"), spawn("pod-1"), spawn("pod-2")];
    let labels = |pod: &str| (api.pod_label(pod, KEY), api.pod_label(pod, SLOT));
    // Every running sidecar's Pod shows what `held` says, within 5 s.
    let shown = |cars: &[Sidecar], held: &[(usize, u64, u64)]| {
        let want = |i: usize| match held.iter().find(|h| h.0 == i) {
            Some(h) => (Some("true".to_owned()), Some(h.1.to_string())),
            None => (Some("false".to_owned()), None),
        };
        let all = || {
            (0..cars.len())
                .filter(|&i| cars[i].is_running())
                .all(|i| labels(&cars[i].name) == want(i))
                .then_some(())
        };
        eventually(Duration::from_secs(5), all).is_some()
    };
    let held = all_slots_held(&cars, 2, Duration::from_secs(20));
    assert!(
        shown(&cars, &held),
        "{:?}",
        (0..3)
            .map(|i| labels(&format!("pod-{i}")))
            .collect::<Vec<_>>()
    );
    let stays = held[0].0;
    let before = api.changes().last().map_or(0, |c| c.0);
    cars[held[1].0].terminate(Duration::from_secs(10));
    let held = all_slots_held(&cars, 2, Duration::from_secs(10));
    assert!(
        shown(&cars, &held),
        "{:?}",
        (0..3)
            .map(|i| labels(&format!("pod-{i}")))
            .collect::<Vec<_>>()
    );
    let cleared_wrongly = api.changes().iter().any(|(v, kind, name, obj)| {
        *v > before
            && *kind == "pods"
            && *name == cars[stays].name
            && obj["metadata"]["labels"][KEY] == "false"
    });
    assert!(
        !cleared_wrongly,
        "the other slot's leader {} was labelled false",
        cars[stays].name
    );
}

fn a_stopping_follower_leaves_every_queue(args: SidecarArgs) {
    let dir = tempfile::tempdir().expect("dir");
    let args = args.ttl("30s").election("leaving").flag("--holders", "2");
    // The backends' and the elector's decisions in the logs a failure prints.
    let debug = [("RUST_LOG".to_owned(), "info,leasekeeper=debug".to_owned())];
    let spawn =
        |name: &str| Sidecar::spawn_with_env(name, dir.path(), &args.clone().build(), &debug);
    let bound = Duration::from_secs(20);
    let mut cars = vec![spawn("w-0")];
    cars[0].settles_in("leader", bound);
    cars.push(spawn("w-2"));
    all_slots_held(&cars, 2, bound);
    // w-1 queues behind both holders, then w-3 behind it.
    cars.push(spawn("w-1"));
    cars[2].settles_in("follower", bound);
    std::thread::sleep(Duration::from_millis(500));
    cars.push(spawn("w-3"));
    cars[3].settles_in("follower", bound);
    // Unobserved: w-3 has joined the queue of every slot (no view of a queue common to
    // the stores).
    std::thread::sleep(Duration::from_millis(500));
    cars[2].terminate(Duration::from_secs(10));
    let held = all_slots_held(&cars, 2, bound);
    let (gone, slot, token) = held[0];
    cars[gone].terminate(Duration::from_secs(10));
    let next = eventually(Duration::from_secs(10), || {
        slot_leaders(&cars)
            .into_iter()
            .find(|h| h.0 == 3 && h.1 == slot && h.2 > token)
    });
    assert!(
        next.is_some(),
        "slot {slot} not taken by the waiting w-3 within 10 s of its holder's SIGTERM: {:?}\n\
         w-3 says {:?}\n\
         w-3:\n{}\nw-1 (the follower stopped first):\n{}\nthe holder stopped:\n{}",
        slot_leaders(&cars),
        cars[3].leader(),
        cars[3].stderr(),
        cars[2].stderr(),
        cars[gone].stderr()
    );
}

/// Slots keep their own fencing counters, so a candidate that lost one slot may take
/// another with a token below the one it held: it must lead there. An elector that
/// refused any token not above the last it had claimed in any slot (a rule meant for
/// one lease) would take the slot, let go of it at once, back off and try again: the
/// slot would churn and it would never lead, until the other slot's counter caught up
/// (here a thousand takes). Redis: slot 0's counter is set to 1000 first.
#[test]
fn a_candidate_that_lost_a_slot_leads_another_with_its_lower_token() {
    let redis = RedisServer::start();
    redis
        .command("SET leasekeeper:{move}:fence 1000")
        .expect("set the counter");
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&redis.url())
        .ttl("2s")
        .election("move")
        .flag("--holders", "2")
        .build();
    let spawn = |name: &str| Sidecar::spawn(name, dir.path(), &args);
    // m-0 takes slot 0 (token above 1000), m-1 slot 1, m-2 (slot 0 first) waits.
    let mut cars = vec![spawn("m-0")];
    cars[0].settles_in("leader", Duration::from_secs(20));
    cars.push(spawn("m-1"));
    let held = all_slots_held(&cars, 2, Duration::from_secs(20));
    assert!(
        held[0].0 == 0 && held[0].2 > 1000,
        "m-0 in slot 0: {held:?}"
    );
    cars.push(spawn("m-2"));
    cars[2].settles_in("follower", Duration::from_secs(20));
    // m-0 stops past its ttl: m-2 takes slot 0; m-0 resumes and follows.
    cars[0].signal(libc::SIGSTOP);
    let taken = eventually(Duration::from_secs(10), || {
        slot_leaders(&cars)
            .into_iter()
            .find(|h| h.0 == 2 && h.1 == 0)
    });
    cars[0].signal(libc::SIGCONT);
    assert!(
        taken.is_some(),
        "m-2 never took slot 0: {:?}",
        slot_leaders(&cars)
    );
    cars[0].settles_in("follower", Duration::from_secs(10));
    // m-1 goes: slot 1 is m-0's, with slot 1's own (lower) token.
    cars[1].terminate(Duration::from_secs(10));
    let moved = eventually(Duration::from_secs(10), || {
        slot_leaders(&cars)
            .into_iter()
            .find(|h| h.0 == 0 && h.1 == 1)
    });
    assert!(
        moved.is_some(),
        "m-0 never led slot 1 after losing slot 0: {:?}\n{}",
        slot_leaders(&cars),
        cars[0].stderr()
    );
    let (_, _, token) = moved.expect("moved");
    assert!(token < 1000, "slot 1's own counter: {token}");
}
