//! The Kubernetes API's own rules that a model of it easily gets wrong, on a real
//! kube-apiserver when
//! `LK_KUBE_APISERVER` names one and on the fake otherwise, with the same test bodies:
//!
//! - how the API server admits a Lease: `strategy` and `preferredHolder` dropped
//!   without the `CoordinatedLeaderElection` gate, `preferredHolder` refused without
//!   `strategy` with it, `dryRun=All` storing nothing;
//! - the API server's coordinator (gate on): it writes `holderIdentity` itself for a
//!   missing, empty or expired Lease, `preferredHolder` for one another holds, and pings
//!   LeaseCandidates first;
//! - coordinated leader election elects: the candidate a Lease is handed to takes it
//!   with a write of its own, so exactly one sidecar leads after every start, release,
//!   SIGTERM, kill -9 or `preferredHolder` change, and never two;
//! - a switchover on a coordinated Lease is refused at once, with the reason.

use crate::common;

use std::time::{Duration, Instant, SystemTime};

use common::servers::kube_server::{self, Flavor, KubeApi};
use common::{eventually, Sidecar, SidecarArgs};
use serde_json::{json, Value};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/team/leases";

/// `t` as the API writes MicroTime: RFC 3339 in UTC with microseconds.
fn micros(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).expect("epoch");
    let ts = k8s_openapi::jiff::Timestamp::from_microsecond(d.as_micros() as i64).expect("ts");
    ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

fn lease_body(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": name}, "spec": spec})
}

/// Without the gate (the default): `strategy` and `preferredHolder` are dropped, on
/// create and on update, silently (200/201).
#[test]
fn without_the_gate_the_coordination_fields_are_dropped() {
    let api = kube_server::start_exact("team", Flavor::GateOff);
    let spec = json!({"holderIdentity": "a", "leaseDurationSeconds": 5,
                      "strategy": "OldestEmulationVersion", "preferredHolder": "b"});
    let (code, created) = api.call("POST", LEASES, Some(lease_body("drop", spec)));
    assert!(code < 300, "{code} {created}");
    assert!(created["spec"]["strategy"].is_null(), "{created}");
    assert!(created["spec"]["preferredHolder"].is_null(), "{created}");
    let mut update = created.clone();
    update["spec"]["preferredHolder"] = json!("b");
    let (code, updated) = api.call("PUT", &format!("{LEASES}/drop"), Some(update));
    assert_eq!(code, 200, "{updated}");
    assert!(updated["spec"]["preferredHolder"].is_null(), "{updated}");
    assert_eq!(updated["spec"]["holderIdentity"], "a");
}

/// With the gate: `preferredHolder` without `strategy` is refused (422, the message
/// names the field), an unknown strategy too, a zero duration too; with `strategy` both
/// are kept; a dry run validates and stores nothing.
#[test]
fn with_the_gate_the_lease_is_validated_and_dry_runs_store_nothing() {
    let api = kube_server::start("team", Flavor::Coordinated);
    let refused = |spec: Value, why: &str| {
        let (code, answer) = api.call("POST", LEASES, Some(lease_body("v", spec.clone())));
        assert_eq!(code, 422, "{spec}: {answer}");
        assert!(
            answer["message"].as_str().unwrap_or("").contains(why),
            "{answer}"
        );
    };
    refused(
        json!({"holderIdentity": "a", "preferredHolder": "b"}),
        "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined",
    );
    refused(
        json!({"holderIdentity": "a", "strategy": "Newest"}),
        "spec.strategy",
    );
    refused(
        json!({"holderIdentity": "a", "leaseDurationSeconds": 0}),
        "spec.leaseDurationSeconds",
    );
    let spec = json!({"holderIdentity": "a", "strategy": "OldestEmulationVersion",
                      "preferredHolder": "b", "leaseDurationSeconds": 5});
    let (code, created) = api.call("POST", LEASES, Some(lease_body("v", spec)));
    assert!(code < 300, "{code} {created}");
    assert_eq!(created["spec"]["preferredHolder"], "b");
    let mut probe = created.clone();
    probe["spec"]["holderIdentity"] = json!("dry");
    let (code, answer) = api.call("PUT", &format!("{LEASES}/v?dryRun=All"), Some(probe));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["spec"]["holderIdentity"], "dry");
    let stored = api.lease("v").expect("lease");
    assert_eq!(
        stored["spec"]["holderIdentity"], "a",
        "a dry run stored: {stored}"
    );
    let mut no_strategy = created;
    no_strategy["spec"]["strategy"] = Value::Null;
    let (code, answer) = api.call("PUT", &format!("{LEASES}/v?dryRun=All"), Some(no_strategy));
    assert_eq!(code, 422, "{answer}");
}

fn candidate_spec(lease: &str, version: &str, renewed: SystemTime) -> Value {
    json!({"leaseName": lease, "binaryVersion": version, "emulationVersion": version,
           "strategy": "OldestEmulationVersion", "renewTime": micros(renewed)})
}

/// The coordinator (gate on), with two LeaseCandidates written by hand: it creates the
/// missing Lease naming the oldest version (no `acquireTime`, 5 s), then, when another
/// holder writes itself in, names its pick as `preferredHolder`; once that holder's
/// record expires it writes its pick as holder again, after pinging the candidates
/// that had not renewed for 5 s.
#[test]
fn the_coordinator_hands_leases_to_its_pick() {
    let api = kube_server::start("team", Flavor::Coordinated);
    let now = SystemTime::now();
    api.put_lease_candidate("old", candidate_spec("co", "1.30.0", now));
    api.put_lease_candidate("new", candidate_spec("co", "1.33.0", now));
    let lease = eventually(Duration::from_secs(10), || {
        api.lease("co")
            .filter(|l| l["spec"]["holderIdentity"] == "old")
    })
    .unwrap_or_else(|| panic!("no Lease handed to its pick: {:?}", api.lease("co")));
    let spec = &lease["spec"];
    assert_eq!(spec["strategy"], "OldestEmulationVersion", "{spec}");
    assert_eq!(spec["leaseDurationSeconds"], 5, "{spec}");
    assert!(spec["acquireTime"].is_null(), "{spec}");
    let t = micros(SystemTime::now());
    api.put_lease_spec(
        "co",
        json!({"holderIdentity": "new", "leaseDurationSeconds": 2, "acquireTime": t,
               "renewTime": t, "strategy": "OldestEmulationVersion"}),
    );
    let preferred = eventually(Duration::from_secs(15), || {
        api.lease("co")
            .filter(|l| l["spec"]["preferredHolder"] == "old")
    });
    assert!(preferred.is_some(), "{:?}", api.lease("co"));
    // Nobody renews: the record expires (2 s), the candidates are 5 s stale by now or
    // soon, so they are pinged; "old" acks, and gets the Lease.
    let pinged = eventually(Duration::from_secs(20), || {
        api.lease_candidate("old")
            .filter(|c| !c["spec"]["pingTime"].is_null())
    })
    .expect("the coordinator pings the stale candidate");
    let ping = pinged["spec"]["pingTime"].clone();
    // (An ack within a few ms of the ping may fall before the vote's 5-s window: the
    // vote runs 5 s after the ping round *finished*; see the coordinator's docs.)
    std::thread::sleep(Duration::from_millis(500));
    api.put_lease_candidate("old", json!({"renewTime": micros(SystemTime::now())}));
    let handed = eventually(Duration::from_secs(20), || {
        api.lease("co")
            .filter(|l| l["spec"]["holderIdentity"] == "old")
    });
    assert!(handed.is_some(), "ping {ping}; {:?}", api.lease("co"));
    assert!(handed.expect("handed")["spec"]["preferredHolder"].is_null());
    assert!(!api.coordinator_crashed());
}

fn coordinated_args(api: &dyn KubeApi, election: &str) -> Vec<String> {
    let mut args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("4s")
        .election(election)
        .build();
    args.push("--lease-candidate".to_owned());
    args.push("--enable-release-endpoint".to_owned());
    args
}

/// The sidecars that lead now, by their own answers.
fn leading(cars: &[Sidecar]) -> Vec<String> {
    cars.iter()
        .filter(|s| s.is_running())
        .filter(|s| s.leader().is_some_and(|v| v["is_leader"] == true))
        .map(|s| s.name.clone())
        .collect()
}

/// Polls until one of `cars` leads and stays the only one for 1.5 s; never two at
/// once. The leader's index and how long it took.
fn one_leader(cars: &[Sidecar], limit: Duration, api: &dyn KubeApi) -> (usize, Duration) {
    let (name, took) = settled_leader(cars, &[], limit, Duration::ZERO, api);
    let i = cars.iter().position(|c| c.name == name).expect("a sidecar");
    (i, took)
}

/// Coordinated election elects: three sidecars with `--lease-candidate` on an API
/// server with the gate on. One leads after the start, after a SIGTERM of the leader,
/// after a kill -9, after `preferredHolder` names another, and on a Lease created
/// beforehand with `strategy` and no holder; never two; every write keeps a
/// `holderIdentity`, so the coordinator never crashes.
#[test]
fn coordinated_election_elects_after_every_start_and_stop() {
    let api = kube_server::start("team", Flavor::Coordinated);
    api.put_lease_spec(
        "ce",
        json!({"holderIdentity": "", "strategy": "OldestEmulationVersion", "leaseDurationSeconds": 4}),
    );
    let dir = tempfile::tempdir().expect("dir");
    let args = coordinated_args(api.as_ref(), "ce");
    let mut cars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("ce{i}"), dir.path(), &args))
        .collect();
    // The coordinator's own bound: a ping round (5 s) and its 5 s requeue, past a ttl.
    let limit = Duration::from_secs(30);
    let (first, took) = one_leader(&cars, limit, api.as_ref());
    eprintln!(
        "coordinated: {} leads {took:?} after the start",
        cars[first].name
    );
    // As in every real deployment (LeaseCandidates are renewed every 5 minutes), let
    // the candidates' renewals age past the coordinator's 5 s, so that it pings them.
    std::thread::sleep(Duration::from_secs(6));
    cars[first].terminate(Duration::from_secs(10));
    let (second, took) = one_leader(&cars, limit, api.as_ref());
    eprintln!(
        "coordinated: {} leads {took:?} after a SIGTERM",
        cars[second].name
    );
    assert_ne!(first, second);
    // The stopped candidate withdrew its LeaseCandidate, so the coordinator did not
    // wait 5 s for its answer to a ping (without the withdrawal a SIGTERM costs 5 s
    // more than the bound below). The real coordinator adds its own delays (a ping written from its
    // informer's cache meets a candidate's renewal: 409, retried at its 5-s requeue or
    // the next change), seen 0.002-2.7 s there.
    let bound = Duration::from_secs(if api.is_real() { 8 } else { 4 });
    assert!(took < bound, "{took:?} after a SIGTERM");
    cars[second].kill();
    let (third, took) = one_leader(&cars, limit, api.as_ref());
    eprintln!(
        "coordinated: {} leads {took:?} after a kill -9",
        cars[third].name
    );
    let restarted = Sidecar::spawn(&format!("ce{first}"), dir.path(), &args);
    cars[first] = restarted;
    let other = cars[first].name.clone();
    api.patch_lease_spec("ce", json!({"preferredHolder": other}));
    let (fourth, took) = one_leader(&cars, limit, api.as_ref());
    eprintln!(
        "coordinated: {} leads {took:?} after a preferredHolder",
        cars[fourth].name
    );
    let writes = api.lease_writes("ce");
    for (_, spec) in &writes {
        assert!(
            !spec["holderIdentity"].is_null(),
            "a write without a holder: {spec}"
        );
    }
    assert!(!api.coordinator_crashed());
}

/// A switchover on a coordinated Lease cannot name the next holder (the coordinator
/// elects it): refused at once, with the reason, nothing released.
#[test]
fn a_switchover_on_a_coordinated_lease_is_refused_at_once() {
    let api = kube_server::start("team", Flavor::Coordinated);
    let dir = tempfile::tempdir().expect("dir");
    let args = coordinated_args(api.as_ref(), "ce");
    let cars: Vec<Sidecar> = (0..2)
        .map(|i| Sidecar::spawn(&format!("sw{i}"), dir.path(), &args))
        .collect();
    let (leader, _) = one_leader(&cars, Duration::from_secs(30), api.as_ref());
    let before = cars[leader].leader().expect("status")["fencing_token"].clone();
    let url = format!("http://127.0.0.1:{}", cars[leader].port);
    let to = cars[1 - leader].name.clone();
    let started = Instant::now();
    let (code, out, err) = common::run_to_exit(
        &["switchover", "--to", &to, "--url", &url, "--timeout", "10s"],
        &[],
    );
    assert_eq!(code, Some(4), "{out}{err}");
    assert!(err.contains("coordinat"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let after = cars[leader].leader().expect("status");
    assert_eq!(after["is_leader"], true, "{after}");
    assert_eq!(after["fencing_token"], before, "{after}");
}

/// The switchover scenario (three sidecars, two switchovers to the candidate that
/// would not come next, the refusals) on every flavour of a real server where it can
/// work: the gate off (with and without LeaseCandidates), and the gate on for sidecars
/// without LeaseCandidates (the coordinator leaves such a Lease alone).
#[test]
fn switchover_goes_to_the_named_candidate_with_the_gate_off_and_on() {
    for (flavor, candidates) in [
        (Flavor::GateOffWithCandidates, true),
        (Flavor::GateOff, false),
        (Flavor::Coordinated, false),
    ] {
        let api = kube_server::start_exact("team", flavor);
        let mut args = SidecarArgs::kubernetes(&api.kubeconfig())
            .ttl("2s")
            .election("switch")
            .build();
        if candidates {
            args.push("--lease-candidate".to_owned());
        }
        eprintln!("switchover on {flavor:?}, lease candidates {candidates}");
        common::scenarios::handovers::switchover_goes_to_the_named_candidate(&args);
    }
}

/// A client-go coordinated candidate (`leaderelection` with `Coordinated: true` and
/// `NewCandidate`), built by the developer from the same Kubernetes release
/// (`LK_CLIENT_GO_PEER`, docs/development.md): its `/leader` answers `is_leader`.
struct Peer {
    name: String,
    port: u16,
    child: std::process::Child,
}

impl Peer {
    fn start(binary: &str, api: &dyn KubeApi, name: &str, lease: &str) -> Peer {
        let port = common::free_port();
        // client-go's LeaseCandidate informer lists cluster-wide (kube-scheduler's RBAC
        // allows it; the chart's namespaced Role does not): the harness's admin.
        let kubeconfig = api
            .kubeconfig()
            .replace("kubeconfig-user", "kubeconfig-admin");
        let child = std::process::Command::new(binary)
            .args(["--kubeconfig", &kubeconfig, "--namespace", "team"])
            .args([
                "--lease",
                lease,
                "--identity",
                name,
                "--port",
                &port.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(
                std::fs::File::create(std::env::temp_dir().join(format!("lkpeer-{name}.log")))
                    .map(std::process::Stdio::from)
                    .unwrap_or_else(|_| std::process::Stdio::null()),
            )
            .spawn()
            .expect("the client-go peer");
        Peer {
            name: name.to_owned(),
            port,
            child,
        }
    }

    fn leads(&self) -> bool {
        common::harness::http::get(self.port, "/leader")
            .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
            .is_some_and(|v| v["is_leader"] == true)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Who leads among sidecars and peers, by their own answers.
fn mixed_leaders(cars: &[Sidecar], peers: &[Peer]) -> Vec<String> {
    let mut out = leading(cars);
    out.extend(peers.iter().filter(|p| p.leads()).map(|p| p.name.clone()));
    out
}

/// Polls until one of them leads for 1.5 s on end; never two at once, but for two
/// answers within `overlap` of a change (a client-go candidate's answer trusts its
/// callbacks, not a deadline: a stale `true` of a moment is possible there). Who leads
/// and how long it took.
fn settled_leader(
    cars: &[Sidecar],
    peers: &[Peer],
    limit: Duration,
    overlap: Duration,
    api: &dyn KubeApi,
) -> (String, Duration) {
    let start = Instant::now();
    let mut since: Option<(String, Instant)> = None;
    let mut two_since: Option<Instant> = None;
    while start.elapsed() < limit {
        let now = mixed_leaders(cars, peers);
        if now.len() > 1 {
            let t = *two_since.get_or_insert_with(Instant::now);
            let tolerated = !overlap.is_zero() && t.elapsed() < overlap;
            assert!(tolerated, "two leaders: {now:?}, {:?}", api.lease("ce"));
        } else {
            two_since = None;
        }
        match (now.as_slice(), &since) {
            ([l], Some((s, t))) if l == s && t.elapsed() >= Duration::from_millis(1500) => {
                return (l.clone(), *t - start);
            }
            ([l], Some((s, _))) if l == s => {}
            ([l], _) => since = Some((l.clone(), Instant::now())),
            _ => since = None,
        }
        // Pause: between looks.
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "no single leader within {limit:?}: {:?}\n{}",
        api.lease("ce"),
        cars.iter()
            .map(|c| c.stderr())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}

/// Two client-go coordinated candidates and two sidecars on one coordinated Lease
/// (gate on): one leads after the start and after each SIGTERM and kill -9 of the
/// leader, whoever it is; never two. Runs only with `LK_CLIENT_GO_PEER` (and a real
/// API server), which CI does not have.
#[test]
fn client_go_coordinated_candidates_and_sidecars_share_one_election() {
    let Ok(peer) = std::env::var("LK_CLIENT_GO_PEER") else {
        eprintln!("skipped: LK_CLIENT_GO_PEER names no client-go peer");
        return;
    };
    let api = kube_server::start_exact("team", Flavor::Coordinated);
    let dir = tempfile::tempdir().expect("dir");
    let args = coordinated_args(api.as_ref(), "mix");
    // A client-go candidate first: the oldest candidate is the coordinator's pick.
    let mut peers: Vec<Peer> = (0..2)
        .map(|i| Peer::start(&peer, api.as_ref(), &format!("go{i}"), "mix"))
        .collect();
    // The rule: the coordinator picks the oldest candidate, by creation times in whole
    // seconds; the client-go peers are two seconds older.
    std::thread::sleep(Duration::from_secs(2));
    let mut cars: Vec<Sidecar> = (0..2)
        .map(|i| Sidecar::spawn(&format!("lk{i}"), dir.path(), &args))
        .collect();
    let limit = Duration::from_secs(40);
    let (mut leader, took) = settled_leader(
        &cars,
        &peers,
        limit,
        Duration::from_millis(300),
        api.as_ref(),
    );
    eprintln!("mixed: {leader} leads {took:?} after the start");
    for round in 0..4 {
        // The rule: the candidates' renewals age past the coordinator's 5 s between rounds.
        std::thread::sleep(Duration::from_secs(6));
        let kill = round % 2 == 1;
        if let Some(c) = cars.iter_mut().find(|c| c.name == leader) {
            if kill {
                c.kill()
            } else {
                c.terminate(Duration::from_secs(10));
            }
        } else if let Some(p) = peers.iter_mut().find(|p| p.name == leader) {
            let sig = if kill { libc::SIGKILL } else { libc::SIGTERM };
            common::send_signal(p.child.id(), sig);
            let _ = p.child.wait();
        }
        let (next, took) = settled_leader(
            &cars,
            &peers,
            limit,
            Duration::from_millis(300),
            api.as_ref(),
        );
        eprintln!(
            "mixed: {next} leads {took:?} after a {} of {leader}",
            if kill { "kill -9" } else { "SIGTERM" }
        );
        // The stopped one comes back as a new candidate.
        if leader.starts_with("lk") {
            let i = cars.iter().position(|c| c.name == leader).expect("car");
            cars[i] = Sidecar::spawn(&format!("{leader}r{round}"), dir.path(), &args);
        } else {
            let i = peers.iter().position(|p| p.name == leader).expect("peer");
            peers[i] = Peer::start(&peer, api.as_ref(), &format!("{leader}r{round}"), "mix");
        }
        leader = next;
    }
    assert!(!api.coordinator_crashed());
}
