//! The kubernetes backend and the Pod labeler against the in-process fake API server
//! (no real API server can run here; see tests/common/servers/fake_kube/ for what it enforces).

use crate::common;

use std::time::{Duration, Instant};

use common::checks::checker::{self, ElectionSpec, Fault};
use common::servers::fake_kube::FakeKube;
use common::servers::kube_server::{self, Flavor, KubeApi};
use common::{eventually, Sidecar, SidecarArgs};
use serde_json::json;

fn assert_within_rbac(api: &dyn KubeApi) {
    assert!(
        api.forbidden().is_empty(),
        "refused requests: {:?}",
        api.forbidden()
    );
    assert_eq!(api.blind_writes(), 0, "updates without a resourceVersion");
}

#[test]
fn kubernetes_lease_survives_the_checker() {
    let mut api = FakeKube::start("team");
    let kubeconfig = api.kubeconfig();
    use Fault::*;
    #[rustfmt::skip]
    let pattern = [Graceful, Kill9, Graceful, PauseLeader, Graceful, PauseServer, Release, Graceful, RestartServer, Graceful];
    let rounds = checker::cycle(40, &pattern);
    // Every write of the Lease, noted by the fake as it makes it: the claims are
    // judged against the store too.
    let store = api.lease_recorder("checker");
    // Each sidecar labels its own Pod (named after it, made up front for every
    // generation the rounds can start): in the store's order of Pod writes, never two
    // Pods of the election with the leader value (DESIGN invariant 12).
    for slot in 0..3 {
        for generation in 1..=50 {
            api.add_pod(
                &format!("cand-{slot}-g{generation}"),
                &[("app", "demo"), (ELECTION, "checker")],
            );
        }
    }
    let report = checker::run_with(
        ElectionSpec::three_candidates(
            SidecarArgs::kubernetes(&kubeconfig)
                .ttl("2s")
                .election("checker")
                .build(),
            Duration::from_secs(2),
            rounds,
            Some(&mut api),
        ),
        checker::Extras {
            store: Some(store),
            sidecar_args: Some(Box::new(|name| {
                ["--pod-label", "--pod-name", name]
                    .map(str::to_owned)
                    .to_vec()
            })),
            ..checker::Extras::default()
        },
    );
    assert!(
        report.longest_past_store_ms.is_some(),
        "the Lease recorder saw no handover"
    );
    let mut labels = std::collections::BTreeMap::new();
    let mut leader_labels = 0;
    for (pod, value) in api.label_history() {
        labels.insert(pod, value);
        let leading: Vec<&String> = labels
            .iter()
            .filter(|(_, v)| v.as_deref() == Some("true"))
            .map(|(p, _)| p)
            .collect();
        assert!(
            leading.len() <= 1,
            "two Pods labelled leader at once: {leading:?}"
        );
        leader_labels += usize::from(!leading.is_empty());
    }
    assert!(leader_labels > 0, "no Pod was ever labelled leader");
    eprintln!("kubernetes: {report:?}; requests {:?}", api.requests());
    assert!(report.claims >= 30, "only {} tenures", report.claims);
    assert_within_rbac(&api);
}

#[test]
fn two_candidates_racing_on_one_lease_never_both_win() {
    let api = FakeKube::start("team");
    // Latency widens the window between a read and the write that follows it.
    api.set_latency(Duration::from_millis(15));
    let dir = tempfile::tempdir().expect("dir");
    for round in 0..6 {
        let election = format!("race-{round}");
        let args = SidecarArgs::kubernetes(&api.kubeconfig())
            .ttl("3s")
            .election(&election)
            .build();
        let a = Sidecar::spawn(&format!("a{round}"), dir.path(), &args);
        let b = Sidecar::spawn(&format!("b{round}"), dir.path(), &args);
        let both = eventually(Duration::from_secs(15), || {
            let (x, y) = (a.leader()?, b.leader()?);
            let settled =
                |v: &serde_json::Value| v["state"] == "leader" || v["state"] == "follower";
            (settled(&x) && settled(&y)).then_some((x, y))
        })
        .unwrap_or_else(|| {
            panic!(
                "round {round} never settled:\n{}\n{}",
                a.stderr(),
                b.stderr()
            )
        });
        let leaders = [&both.0, &both.1]
            .iter()
            .filter(|v| v["is_leader"] == true)
            .count();
        assert_eq!(leaders, 1, "round {round}: {both:?}");
        let lease = api.lease(&election).expect("lease");
        let holder = lease["spec"]["holderIdentity"].as_str().expect("holder");
        assert_eq!(both.0["leader"], holder);
        assert_eq!(both.1["leader"], holder);
        // Watch both for a while: the loser never claims.
        for _ in 0..20 {
            let (x, y) = (a.leader().expect("a"), b.leader().expect("b"));
            assert!(
                !(x["is_leader"] == true && y["is_leader"] == true),
                "two leaders: {x} {y}"
            );
            // Pause: between looks through the window.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_within_rbac(&api);
}

/// `t` as client-go writes a Lease's times: RFC 3339 in UTC with microseconds.
fn rfc3339_micros(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

#[test]
fn a_client_go_holder_is_respected_and_the_fields_follow_client_go() {
    let api = kube_server::start("team", Flavor::GateOff);
    let client_go = |renew: std::time::SystemTime| {
        json!({
            "holderIdentity": "client-go-0",
            "leaseDurationSeconds": 3,
            "acquireTime": rfc3339_micros(renew),
            "renewTime": rfc3339_micros(renew),
            "leaseTransitions": 4,
        })
    };
    api.put_lease_spec("shared", client_go(std::time::SystemTime::now()));
    let dir = tempfile::tempdir().expect("dir");
    let mut ours = Sidecar::spawn(
        "ours",
        dir.path(),
        &SidecarArgs::kubernetes(&api.kubeconfig())
            .ttl("2s")
            .election("shared")
            .build(),
    );
    // The client-go holder renews every second for 5 s: we must follow it.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        api.put_lease_spec("shared", client_go(std::time::SystemTime::now()));
        if let Some(v) = ours.leader() {
            assert_eq!(v["is_leader"], false, "took a live client-go lease: {v}");
            if v["state"] == "follower" {
                assert_eq!(v["leader"], "client-go-0");
                assert_eq!(v["fencing_token"], 4);
            }
        }
        // Pause: between looks through the window.
        std::thread::sleep(Duration::from_millis(250));
    }
    let stopped = Instant::now();
    // The holder stops renewing: we take over a lease duration (3 s) later, not before.
    let v = ours.settles_in("leader", Duration::from_secs(10));
    assert!(
        stopped.elapsed() >= Duration::from_millis(2500),
        "took over after {:?}",
        stopped.elapsed()
    );
    // Our token: above client-go's 4, and above the version of the Lease we took over
    // (token = max(leaseTransitions + 1, resourceVersion + 1) of what we read).
    let token = v["fencing_token"].as_u64().expect("token");
    let lease = api.lease("shared").expect("lease");
    let written: u64 = lease["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("resourceVersion");
    let taken_over = api
        .changes()
        .iter()
        .filter(|(v, kind, n, _)| *kind == "leases" && n == "shared" && *v < written)
        .map(|(v, ..)| *v)
        .max()
        .expect("client-go's last write");
    assert!(token > 4, "token {token}");
    assert!(
        token > taken_over,
        "token {token}, read at version {taken_over}"
    );
    let spec = lease["spec"].clone();
    assert_eq!(spec["holderIdentity"], "ours");
    assert_eq!(spec["leaseDurationSeconds"], 2);
    assert_eq!(spec["leaseTransitions"], token);
    for field in ["acquireTime", "renewTime"] {
        let t = spec[field]
            .as_str()
            .unwrap_or_else(|| panic!("{field}: {spec}"));
        assert!(t.ends_with('Z') && t.contains('T'), "{field} {t}");
    }
    // Graceful stop: client-go's ReleaseOnCancel form.
    ours.terminate(Duration::from_secs(5)).expect("exits");
    let spec = api.lease("shared").expect("lease")["spec"].clone();
    assert_eq!(spec["holderIdentity"], "", "{spec}");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    assert_eq!(spec["leaseTransitions"], token);
    assert_within_rbac(&*api);
}

/// Two sidecars labelling their own Pods (which carry their election, as the chart's do).
fn labelled_pair(api: &dyn KubeApi, dir: &std::path::Path, election: &str) -> (Sidecar, Sidecar) {
    let spawn = |pod: &str| {
        api.add_pod(pod, &[("app", "demo"), (ELECTION, election)]);
        let mut args = SidecarArgs::kubernetes(&api.kubeconfig())
            .ttl("2s")
            .election(election)
            .build();
        args.extend(
            ["--pod-label", "--pod-name", pod]
                .iter()
                .map(|s| (*s).to_owned()),
        );
        Sidecar::spawn(pod, dir, &args)
    };
    (spawn("pod-a"), spawn("pod-b"))
}

const KEY: &str = "leasekeeper.io/leader";
const ELECTION: &str = "leasekeeper.io/election";

/// The pair, the one that leads first.
fn leader_first<'a>(a: &'a mut Sidecar, b: &'a mut Sidecar) -> (&'a mut Sidecar, &'a mut Sidecar) {
    let a_leads = eventually(Duration::from_secs(15), || {
        if a.leader()?["is_leader"] == true {
            Some(true)
        } else if b.leader()?["is_leader"] == true {
            Some(false)
        } else {
            None
        }
    })
    .expect("a leader");
    if a_leads {
        (a, b)
    } else {
        (b, a)
    }
}

/// A labelled pair, the leader first, once the leader's Pod shows "true" and the
/// follower's "false".
fn labels_follow_the_leader(
    api: &dyn KubeApi,
    dir: &std::path::Path,
    election: &str,
) -> (Sidecar, Sidecar) {
    let (mut a, mut b) = labelled_pair(api, dir, election);
    let first = leader_first(&mut a, &mut b).0.name.clone();
    let a_leads = first == a.name;
    let (leader, follower) = if a_leads { (a, b) } else { (b, a) };
    assert!(label_becomes(api, &leader.name, "true"));
    assert!(label_becomes(api, &follower.name, "false"));
    (leader, follower)
}

/// Whether the Pod's label reaches `value` within 5 s.
fn label_becomes(api: &dyn KubeApi, pod: &str, value: &str) -> bool {
    eventually(Duration::from_secs(5), || {
        (api.pod_label(pod, KEY).as_deref() == Some(value)).then_some(())
    })
    .is_some()
}

#[test]
fn the_pod_label_follows_leadership_and_drift_is_corrected() {
    let api = FakeKube::start("team");
    let dir = tempfile::tempdir().expect("dir");
    let (a, b) = labelled_pair(&api, dir.path(), "labels");
    let leader = eventually(Duration::from_secs(15), || {
        [&a, &b]
            .into_iter()
            .find(|s| s.leader().is_some_and(|v| v["is_leader"] == true))
    })
    .expect("a leader");
    let follower = if leader.name == a.name { &b } else { &a };
    let label_is = |pod: &str, value: &str| label_becomes(&api, pod, value);
    assert!(
        label_is(&leader.name, "true"),
        "{:?}",
        api.pod_label(&leader.name, KEY)
    );
    assert!(label_is(&follower.name, "false"));
    // Someone edits the labels: both are put back.
    api.set_pod_label(&leader.name, KEY, "false");
    api.set_pod_label(&follower.name, KEY, "true");
    assert!(
        label_is(&leader.name, "true"),
        "leader's label not corrected"
    );
    assert!(
        label_is(&follower.name, "false"),
        "follower's label not corrected"
    );
    // The API fails a few times: the label still gets there (retried with backoff).
    api.fail_next(&[500, 503, 500]);
    api.set_pod_label(&follower.name, KEY, "true");
    assert!(
        label_is(&follower.name, "false"),
        "not retried after errors"
    );
    // The other app label is never touched.
    assert_eq!(api.pod_label(&leader.name, "app").as_deref(), Some("demo"));
    // Every correction is counted: two first labels and at least three corrections.
    let patched: f64 = [leader, follower]
        .iter()
        .map(|s| {
            let (_, text) = common::harness::http::get(s.port, "/metrics").expect("metrics");
            text.lines()
                .find_map(|l| l.strip_prefix("leasekeeper_pod_label_patch_total{result=\"ok\"} "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .expect("leasekeeper_pod_label_patch_total")
        })
        .sum();
    assert!(patched >= 5.0, "{patched} label patches counted");
    assert_within_rbac(&api);
}

#[test]
fn the_label_turns_false_before_the_lease_is_released() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let (mut a, mut b) = labelled_pair(&*api, dir.path(), "handover");
    let (leader, follower) = leader_first(&mut a, &mut b);
    let name = leader.name.clone();
    assert!(label_becomes(&*api, &name, "true"));
    leader.terminate(Duration::from_secs(5)).expect("exits");
    follower.settles_in("leader", Duration::from_secs(5));
    let changes = api.changes();
    let label_false = changes
        .iter()
        .rev()
        .find(|(_, kind, n, obj)| {
            *kind == "pods" && *n == name && obj["metadata"]["labels"][KEY] == "false"
        })
        .map(|(v, ..)| *v)
        .expect("the label was set to false");
    let released = changes
        .iter()
        .find(|(_, kind, n, obj)| {
            *kind == "leases" && n == "handover" && obj["spec"]["holderIdentity"] == ""
        })
        .map(|(v, ..)| *v)
        .expect("the lease was released");
    assert!(
        label_false < released,
        "label false at version {label_false}, lease released at {released}"
    );
    let new_leader = follower.name.clone();
    assert!(label_becomes(&*api, &new_leader, "true"));
    assert_within_rbac(&*api);
}

#[test]
fn a_deleted_lease_is_not_a_free_lease() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("3s")
        .election("deleted")
        .build();
    let a = Sidecar::spawn("a", dir.path(), &args);
    a.settles_in("leader", Duration::from_secs(10));
    let b = Sidecar::spawn("b", dir.path(), &args);
    let before = b.settles_in("follower", Duration::from_secs(10));
    let token = before["fencing_token"].as_u64().expect("token");
    api.delete_lease("deleted");
    // For a while after the deletion: never two leaders, and no token at or below the
    // one before (a recreated Lease continues the count).
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let (x, y) = (a.leader().expect("a"), b.leader().expect("b"));
        assert!(
            !(x["is_leader"] == true && y["is_leader"] == true),
            "two leaders after the deletion: {x} {y}"
        );
        for v in [&x, &y] {
            let t = v["fencing_token"].as_u64();
            // Either a's tenure from before the deletion, or a new one with a greater token.
            let old_tenure = v["identity"] == "a" && t == Some(token);
            if v["is_leader"] == true && !old_tenure {
                assert!(t.expect("token") > token, "token did not grow: {v}");
            }
        }
        // Pause: between looks through the window.
        std::thread::sleep(Duration::from_millis(20));
    }
    let lease = api.lease("deleted").expect("recreated");
    assert!(
        lease["spec"]["leaseTransitions"]
            .as_u64()
            .expect("transitions")
            > token
    );
    assert_within_rbac(&*api);
}

/// One answer of `GET /leader` while it claims: (when, sidecar, token).
type Claimed = (Instant, String, u64);

/// Polls every sidecar's `/leader` every few ms for `how_long`; the claiming answers.
fn poll_claims(sidecars: &[&Sidecar], how_long: Duration) -> Vec<Claimed> {
    let mut claims = Vec::new();
    let until = Instant::now() + how_long;
    while Instant::now() < until {
        for s in sidecars {
            if let Some(v) = s.leader() {
                if v["is_leader"] == true {
                    let token = v["fencing_token"].as_u64().expect("a leader's token");
                    claims.push((Instant::now(), s.name.clone(), token));
                }
            }
        }
        // Pause: 3 ms, the resolution of the claims seen from outside.
        std::thread::sleep(Duration::from_millis(3));
    }
    claims
}

/// The tenures seen: (sidecar, token) → (first, last) claiming answer.
fn tenures(claims: &[Claimed]) -> Vec<((String, u64), (Instant, Instant))> {
    let mut out: Vec<((String, u64), (Instant, Instant))> = Vec::new();
    for (at, name, token) in claims {
        let key = (name.clone(), *token);
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, (_, last))) => *last = *at,
            None => out.push((key, (*at, *at))),
        }
    }
    out
}

/// The longest time two different sidecars both answered that they lead.
fn longest_overlap(claims: &[Claimed]) -> Duration {
    let t = tenures(claims);
    let mut worst = Duration::ZERO;
    for (i, ((a, _), (a0, a1))) in t.iter().enumerate() {
        for ((b, _), (b0, b1)) in &t[i + 1..] {
            if a != b && a0.max(b0) <= a1.min(b1) {
                worst = worst.max(a1.min(b1).duration_since(*a0.max(b0)));
            }
        }
    }
    worst
}

/// Waits until the Lease's renewTime changes (a renew just happened), so the next renew
/// is a whole renew interval away.
fn just_after_a_renew(api: &dyn KubeApi, election: &str) {
    let renewed =
        |api: &dyn KubeApi| api.lease(election).expect("lease")["spec"]["renewTime"].clone();
    let before = renewed(api);
    eventually(Duration::from_secs(10), || {
        (renewed(api) != before).then_some(())
    })
    .expect("the leader renews");
}

#[test]
fn a_deleted_lease_ends_the_old_claim_at_once_and_tokens_keep_growing() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    // A renew interval of 2 s: without a watch the old leader would claim up to 2 s on.
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("6s")
        .election("gone")
        .build();
    let a = Sidecar::spawn("a", dir.path(), &args);
    let old = a.settles_in("leader", Duration::from_secs(10))["fencing_token"]
        .as_u64()
        .expect("token");
    let b = Sidecar::spawn("b", dir.path(), &args);
    let c = Sidecar::spawn("c", dir.path(), &args);
    b.settles_in("follower", Duration::from_secs(10));
    c.settles_in("follower", Duration::from_secs(10));
    just_after_a_renew(&*api, "gone");
    // `kubectl delete lease gone`, and a fresh candidate that never saw the Lease: it
    // creates it at once.
    api.delete_lease("gone");
    let deleted = Instant::now();
    let d = Sidecar::spawn("d", dir.path(), &args);
    let claims = poll_claims(&[&a, &b, &c, &d], Duration::from_secs(4));
    let overlap = longest_overlap(&claims);
    let seen = tenures(&claims);
    assert!(
        overlap <= Duration::from_millis(100),
        "two leaders for {overlap:?} after the deletion: {seen:?}\n{}",
        a.stderr()
    );
    // The old tenure ends at once, not at its next renew.
    let old_end = claims
        .iter()
        .filter(|(_, n, t)| n == "a" && *t == old)
        .map(|(at, ..)| *at)
        .max();
    if let Some(end) = old_end {
        assert!(
            end.saturating_duration_since(deleted) <= Duration::from_millis(150),
            "the old leader claimed {:?} after the deletion",
            end.saturating_duration_since(deleted)
        );
    }
    // Somebody leads again, and every tenure after the deletion has a greater token.
    let after: Vec<_> = seen
        .iter()
        .filter(|((n, t), _)| !(n == "a" && *t == old))
        .collect();
    assert!(!after.is_empty(), "nobody led after the deletion");
    for ((name, token), _) in &after {
        assert!(
            *token > old,
            "{name} led with token {token}, not above {old}"
        );
    }
    assert_within_rbac(&*api);
}

#[test]
fn a_lease_created_after_a_deletion_continues_the_token_count() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("5s")
        .election("recreated")
        .build();
    let mut a = Sidecar::spawn("a", dir.path(), &args);
    let old = a.settles_in("leader", Duration::from_secs(10))["fencing_token"]
        .as_u64()
        .expect("token");
    a.terminate(Duration::from_secs(5)).expect("exits");
    api.delete_lease("recreated");
    // A fresh candidate (it never saw the Lease) creates it at once, above every earlier
    // token.
    let started = Instant::now();
    let b = Sidecar::spawn("b", dir.path(), &args);
    let v = b.settles_in("leader", Duration::from_secs(10));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a fresh install waited {:?}",
        started.elapsed()
    );
    let token = v["fencing_token"].as_u64().expect("token");
    assert!(
        token > old,
        "token {token} after a deletion, not above {old}"
    );
    assert_within_rbac(&*api);
}

#[test]
fn an_overwritten_lease_ends_the_claim_at_once() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("6s")
        .election("taken")
        .build();
    let a = Sidecar::spawn("a", dir.path(), &args);
    a.settles_in("leader", Duration::from_secs(10));
    just_after_a_renew(&*api, "taken");
    // Another client replaces the holder, with the right resourceVersion.
    let mut lease = api.lease("taken").expect("lease");
    lease["spec"]["holderIdentity"] = json!("intruder");
    let path = "/apis/coordination.k8s.io/v1/namespaces/team/leases/taken";
    let (code, _) = api.call("PUT", path, Some(lease));
    assert_eq!(code, 200);
    let overwritten = Instant::now();
    let stopped = eventually(Duration::from_secs(5), || {
        (a.leader()?["is_leader"] == false).then(Instant::now)
    })
    .expect("a stops claiming");
    let late = stopped.duration_since(overwritten);
    assert!(
        late <= Duration::from_millis(100),
        "claimed {late:?} after the Lease changed hands"
    );
    // And it follows the intruder rather than fighting it.
    let v = a.settles_in("follower", Duration::from_secs(5));
    assert_eq!(v["leader"], "intruder");
    assert_within_rbac(&*api);
}

#[test]
fn a_second_process_with_our_identity_is_a_rival() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("twins")
        .build();
    let mut first = Sidecar::spawn("same", dir.path(), &args);
    first.settles_in("leader", Duration::from_secs(10));
    // A second process with the same identity (a StatefulSet Pod recreated while the old
    // one still runs on a partitioned node): the Lease names it, but it did not write it.
    let second = Sidecar::spawn("same", dir.path(), &args);
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        if let Some(v) = second.leader() {
            assert_eq!(v["is_leader"], false, "took the lease of a live twin: {v}");
        }
        // Pause: between looks through the window.
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill();
    let v = second.settles_in("leader", Duration::from_secs(10));
    assert!(v["fencing_token"].as_u64().expect("token") >= 1);
}

#[test]
fn a_leader_stopped_while_its_true_label_is_in_flight_ends_false() {
    let api = FakeKube::start("team");
    let dir = tempfile::tempdir().expect("dir");
    let (mut a, mut b) = labelled_pair(&api, dir.path(), "midflight");
    // Let both settle as followers-or-leader, then slow the API so the next label write
    // is in flight when the leader is stopped.
    let (leader, follower) = leader_first(&mut a, &mut b);
    let (old, new) = (leader.name.clone(), follower.name.clone());
    assert!(label_becomes(&api, &new, "false"));
    // The follower takes over while every request takes 150 ms: stop it right after it
    // claims, while its "true" patch is on the way.
    api.set_latency(Duration::from_millis(150));
    leader.terminate(Duration::from_secs(10)).expect("exits");
    follower.settles_in("leader", Duration::from_secs(10));
    follower.terminate(Duration::from_secs(10)).expect("exits");
    api.set_latency(Duration::ZERO);
    for pod in [&old, &new] {
        assert_eq!(
            api.pod_label(pod, KEY).as_deref(),
            Some("false"),
            "{pod} left as leader"
        );
    }
    // And the last release came after the last "false" of the pod that held the lease.
    let changes = api.changes();
    let last_true_or_false = changes
        .iter()
        .rfind(|(_, kind, n, _)| *kind == "pods" && *n == new)
        .map(|(v, _, _, obj)| (*v, obj["metadata"]["labels"][KEY].clone()))
        .expect("label writes");
    let last_release = changes
        .iter()
        .rev()
        .find(|(_, kind, _, obj)| *kind == "leases" && obj["spec"]["holderIdentity"] == "")
        .map(|(v, ..)| *v)
        .expect("released");
    assert_eq!(last_true_or_false.1, "false");
    assert!(
        last_true_or_false.0 < last_release,
        "{last_true_or_false:?} vs release at {last_release}"
    );
    assert_within_rbac(&api);
}

/// The resourceVersions at which `pod`'s label took `value`, in order.
fn label_writes(api: &dyn KubeApi, pod: &str, value: &str) -> Vec<u64> {
    api.changes()
        .iter()
        .filter(|(_, kind, n, obj)| {
            *kind == "pods" && n == pod && obj["metadata"]["labels"][KEY] == value
        })
        .map(|(v, ..)| *v)
        .collect()
}

#[test]
fn a_new_leader_clears_the_label_of_a_frozen_old_leader() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let (leader, follower) = labels_follow_the_leader(&*api, dir.path(), "frozen");
    let (old, new) = (leader.name.clone(), follower.name.clone());
    // The old leader freezes: it cannot clear its own label.
    leader.signal(libc::SIGSTOP);
    let frozen = api.changes().last().expect("writes").0;
    follower.settles_in("leader", Duration::from_secs(10));
    let claimed = Instant::now();
    let one_true = eventually(Duration::from_secs(2), || {
        let (o, n) = (api.pod_label(&old, KEY), api.pod_label(&new, KEY));
        (o.as_deref() == Some("false") && n.as_deref() == Some("true")).then_some(())
    });
    leader.signal(libc::SIGCONT);
    assert!(
        one_true.is_some(),
        "2 s after the new leader claimed: {old}={:?} {new}={:?} ({:?} after the claim)\n{}",
        api.pod_label(&old, KEY),
        api.pod_label(&new, KEY),
        claimed.elapsed(),
        follower.stderr()
    );
    // The stale label was cleared before the new leader's own "true" was written. (The
    // old leader, woken, writes "false" again itself: the first writes after the freeze.)
    let first_after = |pod: &str, value: &str| {
        label_writes(&*api, pod, value)
            .into_iter()
            .find(|v| *v > frozen)
            .unwrap_or_else(|| panic!("no {value:?} on {pod} after the freeze"))
    };
    let cleared = first_after(&old, "false");
    let own_true = first_after(&new, "true");
    assert!(
        cleared < own_true,
        "{old} cleared at version {cleared}, {new} true at {own_true}"
    );
    assert_within_rbac(&*api);
}

#[test]
fn a_delayed_true_from_an_old_leader_cannot_land_after_the_clear() {
    let api = FakeKube::start("team");
    let dir = tempfile::tempdir().expect("dir");
    let (leader, follower) = labels_follow_the_leader(&api, dir.path(), "delayed");
    let (old, new) = (leader.name.clone(), follower.name.clone());
    // The old leader's next label write is slow on the wire (5 s): someone edits its
    // label, it writes "true" back, and that write is on its way...
    api.hold_next("PATCH", &format!("/pods/{old}"), Duration::from_secs(5));
    api.set_pod_label(&old, KEY, "false");
    eventually(Duration::from_secs(5), || {
        (!api.held().is_empty()).then_some(())
    })
    .expect("the old leader writes its label back");
    // ...while the Pod shows the leader value again (another client put it back), and
    // the old leader freezes. The next leader clears the label it finds.
    api.set_pod_label(&old, KEY, "true");
    leader.signal(libc::SIGSTOP);
    follower.settles_in("leader", Duration::from_secs(10));
    assert!(label_becomes(&api, &old, "false"), "not cleared");
    let cleared = *label_writes(&api, &old, "false").last().expect("cleared");
    // The delayed "true" arrives after the clear: refused, as it was conditional.
    let held = eventually(Duration::from_secs(8), || api.held()[0]);
    leader.signal(libc::SIGCONT);
    assert_eq!(held, Some(409), "the delayed write was not refused");
    let late_true: Vec<_> = label_writes(&api, &old, "true")
        .into_iter()
        .filter(|v| *v > cleared)
        .collect();
    assert!(
        late_true.is_empty(),
        "{old} showed true again at {late_true:?} after the clear at {cleared}"
    );
    assert!(label_becomes(&api, &new, "true"));
    assert_within_rbac(&api);
}

#[test]
fn a_true_that_lands_after_the_clear_is_cleared_at_once() {
    let api = FakeKube::start("team");
    let dir = tempfile::tempdir().expect("dir");
    let (leader, follower) = labels_follow_the_leader(&api, dir.path(), "landed");
    let (old, new) = (leader.name.clone(), follower.name.clone());
    // The old leader's "true" is on its way (5 s) while its Pod shows "false", and the
    // old leader freezes: the next leader finds nothing to clear, and nobody writes that
    // Pod, so the late write is not refused when it arrives.
    api.hold_next("PATCH", &format!("/pods/{old}"), Duration::from_secs(5));
    api.set_pod_label(&old, KEY, "false");
    eventually(Duration::from_secs(5), || {
        (!api.held().is_empty()).then_some(())
    })
    .expect("the old leader writes its label back");
    leader.signal(libc::SIGSTOP);
    follower.settles_in("leader", Duration::from_secs(10));
    assert!(label_becomes(&api, &new, "true"));
    let landed = eventually(Duration::from_secs(8), || api.held()[0]);
    let at = Instant::now();
    assert_eq!(landed, Some(200), "the late write should land here");
    // The new leader sees it land and clears it at once.
    let cleared = eventually(Duration::from_secs(2), || {
        (api.pod_label(&old, KEY).as_deref() == Some("false")).then(Instant::now)
    });
    leader.signal(libc::SIGCONT);
    let cleared = cleared.unwrap_or_else(|| {
        panic!(
            "{old} still shows {:?} 2 s after the late true landed\n{}",
            api.pod_label(&old, KEY),
            follower.stderr()
        )
    });
    assert!(
        cleared.duration_since(at) <= Duration::from_millis(500),
        "cleared {:?} after it landed",
        cleared.duration_since(at)
    );
    assert_eq!(api.pod_label(&new, KEY).as_deref(), Some("true"));
    assert_within_rbac(&api);
}

#[test]
fn a_pod_without_its_election_label_is_warned_about_once() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    api.add_pod("bare", &[("app", "demo")]);
    let mut args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("unlabelled")
        .build();
    args.extend(["--pod-label", "--pod-name", "bare"].map(str::to_owned));
    let s = Sidecar::spawn("bare", dir.path(), &args);
    s.settles_in("leader", Duration::from_secs(10));
    // It still runs and labels itself; the missing label is said once.
    assert!(label_becomes(&*api, "bare", "true"));
    api.set_pod_label("bare", KEY, "false");
    assert!(label_becomes(&*api, "bare", "true"));
    let warnings = s
        .stderr()
        .matches("does not carry its election's label")
        .count();
    assert_eq!(warnings, 1, "{}", s.stderr());
}

use common::servers::kube_server::raw_call as call;

/// The events of a watch that ends by itself (timeoutSeconds), one JSON value each.
fn watch_lines(port: u16, path: &str) -> Vec<serde_json::Value> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        common::servers::fake_kube::TOKEN
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    // (Chunked: the size lines are not JSON.)
    raw.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// The fake must keep the API's rules, or the tests above prove nothing.
#[test]
fn the_fake_api_enforces_what_it_claims() {
    let api = FakeKube::start("team");
    api.add_pod("p", &[("app", "demo"), (KEY, "true")]);
    the_fake_refuses_without_the_token_or_outside_the_role(&api);
    the_fake_creates_once_and_updates_only_the_current_version(&api);
    the_fake_takes_only_merge_patches(&api);
    the_fake_lists_at_the_current_version_by_selectors(&api);
    the_fake_refuses_a_stale_conditional_merge_patch(&api);
    the_fake_watch_relabels_by_selector(&api);
    the_fake_fails_injected_requests_first(&api);
}

fn the_fake_refuses_without_the_token_or_outside_the_role(api: &FakeKube) {
    let leases = "/apis/coordination.k8s.io/v1/namespaces/team/leases";
    let json = "application/json";
    let t = Some(common::servers::fake_kube::TOKEN);
    // 401 without the token; 403 outside the Role (create pods, delete, another namespace).
    assert_eq!(
        call(api.port, "GET", &format!("{leases}/x"), None, json, "").0,
        401
    );
    assert_eq!(
        call(
            api.port,
            "POST",
            "/api/v1/namespaces/team/pods",
            t,
            json,
            "{}"
        )
        .0,
        403
    );
    assert_eq!(
        call(api.port, "DELETE", &format!("{leases}/x"), t, json, "").0,
        403
    );
    assert_eq!(
        call(
            api.port,
            "GET",
            "/api/v1/namespaces/other/pods/p",
            t,
            json,
            ""
        )
        .0,
        403
    );
    assert_eq!(api.forbidden().len(), 3);
    // The Role read from manifests/ grants the sidecar's verbs and nothing else here.
    assert_eq!(
        api.granted(),
        [
            ("pods", "get"),
            ("pods", "list"),
            ("pods", "patch"),
            ("pods", "watch"),
            ("leases", "get"),
            ("leases", "list"),
            ("leases", "create"),
            ("leases", "update"),
            ("leases", "watch"),
            ("events", "create"),
            ("events", "patch"),
        ]
        .map(|(r, v)| (r.to_owned(), v.to_owned()))
    );
}

fn the_fake_creates_once_and_updates_only_the_current_version(api: &FakeKube) {
    let leases = "/apis/coordination.k8s.io/v1/namespaces/team/leases";
    let json = "application/json";
    let t = Some(common::servers::fake_kube::TOKEN);
    // Create, then create again: 409 AlreadyExists.
    let lease = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"x"},"spec":{"holderIdentity":"a"}}"#;
    let (code, created) = call(api.port, "POST", leases, t, json, lease);
    assert_eq!(code, 201);
    assert_eq!(call(api.port, "POST", leases, t, json, lease).0, 409);
    // Update with a stale resourceVersion: 409; with the current one: a new version.
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_owned();
    let update = |rv: &str, holder: &str| {
        format!(
            r#"{{"metadata":{{"name":"x","resourceVersion":"{rv}"}},"spec":{{"holderIdentity":"{holder}"}}}}"#
        )
    };
    let (code, updated) = call(
        api.port,
        "PUT",
        &format!("{leases}/x"),
        t,
        json,
        &update(&rv, "b"),
    );
    assert_eq!(code, 200);
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert_eq!(
        call(
            api.port,
            "PUT",
            &format!("{leases}/x"),
            t,
            json,
            &update(&rv, "c")
        )
        .0,
        409
    );
    assert_eq!(
        api.lease("x").expect("lease")["spec"]["holderIdentity"],
        "b"
    );
}

fn the_fake_takes_only_merge_patches(api: &FakeKube) {
    let t = Some(common::servers::fake_kube::TOKEN);
    // Only merge patches; `null` deletes a key and other labels stay.
    let pod = "/api/v1/namespaces/team/pods/p";
    let patch = format!(r#"{{"metadata":{{"labels":{{"{KEY}":null}}}}}}"#);
    assert_eq!(
        call(
            api.port,
            "PATCH",
            pod,
            t,
            "application/json-patch+json",
            "[]"
        )
        .0,
        415
    );
    let (code, patched) = call(
        api.port,
        "PATCH",
        pod,
        t,
        "application/merge-patch+json",
        &patch,
    );
    assert_eq!(code, 200);
    assert!(patched["metadata"]["labels"][KEY].is_null());
    assert_eq!(patched["metadata"]["labels"]["app"], "demo");
}

fn the_fake_lists_at_the_current_version_by_selectors(api: &FakeKube) {
    let leases = "/apis/coordination.k8s.io/v1/namespaces/team/leases";
    let json = "application/json";
    let t = Some(common::servers::fake_kube::TOKEN);
    // A list is a consistent read: the List carries the current global resourceVersion
    // (here the last write, the pod patch), filtered by label and field selectors.
    api.add_pod("q", &[("app", "demo"), (KEY, "true")]);
    let (code, pods) = call(
        api.port,
        "GET",
        &format!("/api/v1/namespaces/team/pods?labelSelector={KEY}%3Dtrue"),
        t,
        json,
        "",
    );
    assert_eq!(code, 200);
    assert_eq!(pods["kind"], "PodList");
    let names: Vec<_> = pods["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| p["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, ["q"]);
    let current = api.changes().last().expect("a write").0;
    assert_eq!(pods["metadata"]["resourceVersion"], current.to_string());
    let (code, list) = call(
        api.port,
        "GET",
        &format!("{leases}?fieldSelector=metadata.name%3Dnone&limit=1"),
        t,
        json,
        "",
    );
    assert_eq!(code, 200);
    assert_eq!(list["items"], json!([]));
    assert_eq!(list["metadata"]["resourceVersion"], current.to_string());
    let (code, _) = call(
        api.port,
        "GET",
        &format!("{leases}?fieldSelector=spec.holderIdentity%3Da"),
        t,
        json,
        "",
    );
    assert_eq!(code, 400, "unsupported field selector");
}

fn the_fake_refuses_a_stale_conditional_merge_patch(api: &FakeKube) {
    let t = Some(common::servers::fake_kube::TOKEN);
    // A conditional merge patch with a stale resourceVersion: 409.
    let stale = format!(r#"{{"metadata":{{"resourceVersion":"1","labels":{{"{KEY}":"false"}}}}}}"#);
    assert_eq!(
        call(
            api.port,
            "PATCH",
            "/api/v1/namespaces/team/pods/q",
            t,
            "application/merge-patch+json",
            &stale
        )
        .0,
        409
    );
}

fn the_fake_watch_relabels_by_selector(api: &FakeKube) {
    // A watch with a label selector: a Pod that stops matching is DELETED, one that
    // comes to match is ADDED, changes of others are not sent.
    let from = api.changes().last().expect("a write").0;
    api.set_pod_label("q", KEY, "false");
    api.set_pod_label("q", "app", "other");
    api.set_pod_label("p", KEY, "true");
    let events = watch_lines(
        api.port,
        &format!(
            "/api/v1/namespaces/team/pods?watch=true&labelSelector={KEY}%3Dtrue&resourceVersion={from}&timeoutSeconds=1"
        ),
    );
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e["type"].clone(), e["object"]["metadata"]["name"].clone()))
        .collect();
    assert_eq!(
        seen,
        [(json!("DELETED"), json!("q")), (json!("ADDED"), json!("p"))]
    );
}

fn the_fake_fails_injected_requests_first(api: &FakeKube) {
    let json = "application/json";
    let t = Some(common::servers::fake_kube::TOKEN);
    let pod = "/api/v1/namespaces/team/pods/p";
    // Injected failures come first, one per request.
    api.fail_next(&[503]);
    assert_eq!(call(api.port, "GET", pod, t, json, "").0, 503);
    assert_eq!(call(api.port, "GET", pod, t, json, "").0, 200);
}

/// Followers keep one watch open across the holder's renewals: over a window of
/// steady leadership the API server sees the leader's updates and nothing from the
/// followers (no reads, no new watches), while their `/leader` stays fresh.
#[test]
fn followers_send_no_requests_while_the_holder_renews() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("quiet")
        .build();
    let cars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("quiet-{i}"), dir.path(), &args))
        .collect();
    let settled = eventually(Duration::from_secs(15), || {
        let states: Vec<serde_json::Value> =
            cars.iter().map(|c| c.leader()).collect::<Option<_>>()?;
        let leaders = states.iter().filter(|v| v["state"] == "leader").count();
        let followers = states.iter().filter(|v| v["state"] == "follower").count();
        (leaders == 1 && followers == 2).then_some(())
    });
    assert!(settled.is_some(), "never one leader and two followers");
    // Let the followers open their watches after the first renewals.
    std::thread::sleep(Duration::from_secs(2));
    let before = api.requests();
    std::thread::sleep(Duration::from_secs(6));
    let after = api.requests();
    let delta = |key: &str| after.get(key).unwrap_or(&0) - before.get(key).unwrap_or(&0);
    eprintln!("requests before {before:?}, after {after:?}");
    // The leader renews every ttl/3: about 9 updates in 6 s.
    assert!(delta("update leases") >= 5, "{after:?}");
    assert_eq!(
        delta("get leases"),
        0,
        "followers read the Lease: {after:?}"
    );
    assert_eq!(
        delta("list leases"),
        0,
        "followers listed leases: {after:?}"
    );
    assert_eq!(
        delta("watch leases"),
        0,
        "watches were re-opened: {after:?}"
    );
    // Their view of the holder is still current.
    for c in &cars {
        let v = c.leader().expect("status");
        assert!(v["leader"].is_string(), "{}: stale holder {v}", c.name);
    }
}

/// A graceful handover costs each waiting follower about one request, not a herd of
/// reads: the release reaches every follower on its watch, each writes over the
/// released Lease as the event showed it (no read first), and each whose write lost
/// waits for the winner's write on the watch instead of reading (a read at the release
/// and another for each loser would be 2-3 requests per follower).
#[test]
fn a_release_costs_each_follower_one_request_not_a_read_each() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("15s")
        .election("herd")
        .build();
    let mut cars: Vec<Sidecar> = (0..6)
        .map(|i| Sidecar::spawn(&format!("herd-{i}"), dir.path(), &args))
        .collect();
    for round in 0..2 {
        let leader = eventually(Duration::from_secs(20), || settled_leader(&cars))
            .unwrap_or_else(|| panic!("round {round}: no settled leader"));
        // Let the followers open their watches after the claim.
        std::thread::sleep(Duration::from_secs(1));
        let before = api.requests();
        let mut old = cars.remove(leader);
        old.terminate(Duration::from_secs(10));
        let next = eventually(Duration::from_secs(10), || {
            let name = settled_leader(&cars).map(|i| cars[i].name.clone())?;
            let named = cars.iter().all(|c| {
                c.leader()
                    .is_some_and(|v| v["leader"].as_str() == Some(name.as_str()))
            });
            named.then_some(name)
        });
        assert!(next.is_some(), "round {round}: no new leader named by all");
        let after = api.requests();
        let delta = |key: &str| after.get(key).unwrap_or(&0) - before.get(key).unwrap_or(&0);
        eprintln!("round {round}: requests before {before:?}, after {after:?}");
        let followers = cars.len();
        // The release's write, one write per follower, and a few renewals.
        assert!(
            delta("update leases") <= followers + 1 + 3,
            "round {round}: more writes than one per follower: {after:?}"
        );
        // One read: the new leader's leadership Event names the Lease by its uid.
        assert!(
            delta("get leases") + delta("list leases") <= 1,
            "round {round}: followers read the Lease at the handover: {before:?} → {after:?}"
        );
    }
}

/// A gray failure on the Lease API: the leader's link turns slow (a long pipe,
/// then a congested queue); another candidate leads within 2 × ttl, and the slow one
/// leads again once its link heals.
#[test]
fn a_slow_leader_on_a_long_pipe_gets_out_of_the_way() {
    slow_leader(common::harness::faults::Link::Delay(Duration::from_millis(
        1500,
    )));
}

#[test]
fn a_slow_leader_on_a_congested_link_gets_out_of_the_way() {
    slow_leader(common::harness::faults::Link::Congested(
        Duration::from_millis(1200),
    ));
}

fn slow_leader(link: common::harness::faults::Link) {
    let api = kube_server::start("team", Flavor::GateOff);
    common::scenarios::handovers::slow_leader_is_replaced_and_recovers(
        &[api.addr()],
        Duration::from_secs(3),
        link,
        |endpoints| {
            SidecarArgs::kubernetes(&api.kubeconfig_via(&endpoints[0]))
                .ttl("3s")
                .election("slow")
                .build()
        },
    );
}

/// The time from each release of Lease `election` to the next write that names a
/// holder (the successor's take-over), among the writes after the first `skip`.
fn takeover_gaps(api: &dyn KubeApi, election: &str, skip: usize) -> Vec<Duration> {
    let writes = api.lease_writes(election);
    let mut released: Option<Instant> = None;
    let mut gaps = Vec::new();
    for (at, spec) in writes.into_iter().skip(skip) {
        let holder = spec["holderIdentity"].as_str().unwrap_or("");
        match (holder.is_empty(), released) {
            (true, _) => released = Some(at),
            (false, Some(r)) => {
                gaps.push(at - r);
                released = None;
            }
            (false, None) => {}
        }
    }
    gaps
}

/// The index of the one leader among `sidecars`, once the others follow it.
fn settled_leader(sidecars: &[Sidecar]) -> Option<usize> {
    let states: Vec<serde_json::Value> = sidecars
        .iter()
        .map(Sidecar::leader)
        .collect::<Option<_>>()?;
    let leaders: Vec<usize> = (0..states.len())
        .filter(|&i| states[i]["is_leader"] == true)
        .collect();
    let followers = states.iter().filter(|s| s["state"] == "follower").count();
    (leaders.len() == 1 && followers == states.len() - 1).then(|| leaders[0])
}

/// A graceful handover over HTTPS, as a real API server serves it: the successor's
/// write comes within a few ms of the release. The successor's watch holds a
/// connection of its own, and its take goes over the one its last request left open;
/// when that one is gone (dropped idle), the take's first request on a new one would
/// wait for the server's delayed ACK of the TLS handshake with Nagle on, about 50 ms
/// (kube_api sets TCP_NODELAY). Tens of ms at most are left for a debug build on a
/// busy machine, hence 40 ms: below what the delayed ACK costs, and not flaky.
#[test]
fn the_successor_takes_a_released_lease_within_a_few_ms() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("15s")
        .election("quick")
        .build();
    let mut sidecars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("q{i}"), dir.path(), &args))
        .collect();
    let mut gaps = Vec::new();
    for round in 0..6 {
        let leader = eventually(Duration::from_secs(20), || settled_leader(&sidecars))
            .unwrap_or_else(|| panic!("round {round}: no settled leader"));
        // Observed: the count of the Lease's writes starts 100 ms after the leader settled.
        std::thread::sleep(Duration::from_millis(100));
        let skip = api.lease_writes("quick").len();
        sidecars[leader].terminate(Duration::from_secs(10));
        let gap = eventually(Duration::from_secs(10), || {
            takeover_gaps(&*api, "quick", skip).first().copied()
        })
        .unwrap_or_else(|| panic!("round {round}: nobody took the released Lease"));
        gaps.push(gap);
        sidecars[leader] = Sidecar::spawn(&format!("q{leader}-{round}"), dir.path(), &args);
    }
    gaps.sort();
    let median = gaps[gaps.len() / 2];
    eprintln!("release → successor's write: {gaps:?}");
    assert!(
        median <= Duration::from_millis(40),
        "the successor took the released Lease {median:?} after the release (median of {gaps:?})"
    );
    assert_within_rbac(&*api);
}

/// A leader's release goes over a connection it has open: its watch on its own
/// record holds a connection of its own (a client of its own), so the release never
/// waits for a new connection's TLS handshake (about a millisecond on the loopback,
/// most of a graceful handover on the fake API server). A leader that has not renewed
/// yet shows it: its one request connection is the one its take went over.
#[test]
fn a_release_goes_over_a_connection_already_open() {
    let api = FakeKube::start("team");
    let dir = tempfile::tempdir().expect("dir");
    let mut args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("15s")
        .election("warm")
        .build();
    // No Events: their client's connections are no part of this.
    args.push("--events=false".to_owned());
    let mut a = Sidecar::spawn("wa", dir.path(), &args);
    eventually(Duration::from_secs(20), || {
        a.leader().filter(|v| v["is_leader"] == true)
    })
    .expect("a leader");
    // The leader's watch on its own record is open.
    let watching = || api.requests().get("watch leases").copied().unwrap_or(0) >= 1;
    eventually(Duration::from_secs(10), || watching().then_some(())).expect("the watch");
    std::thread::sleep(Duration::from_millis(200));
    let before = api.tls_connections();
    a.terminate(Duration::from_secs(10)).expect("exited");
    let writes = api.lease_writes("warm");
    let (_, last) = writes.last().expect("a write");
    assert!(
        last["holderIdentity"].as_str().unwrap_or("").is_empty(),
        "not released: {last}"
    );
    assert_eq!(
        api.tls_connections(),
        before,
        "the release opened a new connection"
    );
}

/// client-go's drop-in series: `leader_election_master_status{name}` says who leads,
/// and a renew refused with a conflict (the Lease written by someone else, its record
/// unchanged) and retried after a read counts once in `leader_election_slowpath_total`.
#[test]
fn client_go_metric_names_show_the_leader_and_the_slow_path() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("3s")
        .election("slow")
        .build();
    let mut a = Sidecar::spawn("sa", dir.path(), &args);
    let mut b = Sidecar::spawn("sb", dir.path(), &args);
    let (leader, follower) = leader_first(&mut a, &mut b);
    let metrics = |s: &Sidecar| common::harness::http::get(s.port, "/metrics").map(|(_, t)| t);
    // The leader answered first; the follower may still be starting its listener.
    let follower_text = eventually(Duration::from_secs(15), || metrics(follower)).expect("metrics");
    assert!(
        follower_text.contains("leader_election_master_status{name=\"slow\"} 0"),
        "{follower_text}"
    );
    let text = metrics(leader).expect("metrics");
    assert!(
        text.contains("leader_election_master_status{name=\"slow\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("leader_election_slowpath_total{name=\"slow\"} 0"),
        "{text}"
    );
    api.touch_lease("slow");
    let counted = eventually(Duration::from_secs(4), || {
        let text = metrics(leader)?;
        text.contains("leader_election_slowpath_total{name=\"slow\"} 1")
            .then_some(())
    });
    assert!(counted.is_some(), "{}", metrics(leader).unwrap_or_default());
    assert_eq!(leader.leader().expect("leader")["is_leader"], true);
    assert_within_rbac(&*api);
}

/// Which of `sidecars` lead now (by their own answers), by name.
fn leading(sidecars: &[(&str, &Sidecar)]) -> Vec<String> {
    sidecars
        .iter()
        .filter(|(_, s)| s.leader().is_some_and(|v| v["is_leader"] == true))
        .map(|(n, _)| (*n).to_owned())
        .collect()
}

/// Polls `sidecars` for `how_long`: never two leaders; the leaders seen, in order.
/// The sidecars are asked one after another, so a handover that completes between two
/// answers (a few ms now: the successor writes without a read first) shows the old
/// leader and the new one: two leaders seen are asked again, and one that no longer
/// leads was the old one.
fn leaders_over(sidecars: &[(&str, &Sidecar)], how_long: Duration) -> Vec<String> {
    let end = Instant::now() + how_long;
    let mut seen: Vec<String> = Vec::new();
    while Instant::now() < end {
        let mut now = leading(sidecars);
        if now.len() > 1 {
            let again: Vec<(&str, &Sidecar)> = (sidecars.iter().copied())
                .filter(|(n, _)| now.iter().any(|l| l == n))
                .collect();
            now = leading(&again);
        }
        assert!(now.len() <= 1, "two leaders: {now:?}");
        if let Some(l) = now.first() {
            if seen.last() != Some(l) {
                seen.push(l.clone());
            }
        }
        // Pause: between looks through the window.
        std::thread::sleep(Duration::from_millis(20));
    }
    seen
}

/// KEP-4355: when a coordinator sets `strategy` and names another candidate as
/// `preferredHolder` (a real API server takes the latter only with the former, and only
/// with the CoordinatedLeaderElection gate on), the leader drains and releases, and the
/// named candidate (not the third one) takes it; every write keeps `preferredHolder`.
/// (No LeaseCandidates here, so the API server's own coordinator leaves the Lease alone.)
#[test]
fn a_preferred_holder_gets_the_lease_and_the_others_sit_out() {
    let api = kube_server::start("team", Flavor::Coordinated);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("pref")
        .build();
    let a = Sidecar::spawn("pa", dir.path(), &args);
    eventually(Duration::from_secs(10), || {
        (a.leader()?["is_leader"] == true).then_some(())
    })
    .expect("pa leads");
    let b = Sidecar::spawn("pb", dir.path(), &args);
    let c = Sidecar::spawn("pc", dir.path(), &args);
    let all = [("pa", &a), ("pb", &b), ("pc", &c)];
    b.settles_in("follower", Duration::from_secs(10));
    c.settles_in("follower", Duration::from_secs(10));
    api.patch_lease_spec(
        "pref",
        json!({"strategy": "OldestEmulationVersion", "preferredHolder": "pb"}),
    );
    let seen = leaders_over(&all, Duration::from_secs(3));
    assert_eq!(
        seen.last().map(String::as_str),
        Some("pb"),
        "leaders: {seen:?}"
    );
    assert!(!seen.contains(&"pc".to_owned()), "leaders: {seen:?}");
    let lease = api.lease("pref").expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "pb");
    let writes = api.lease_writes("pref");
    let after: Vec<&serde_json::Value> = writes
        .iter()
        .map(|(_, spec)| spec)
        .skip_while(|spec| spec["preferredHolder"].is_null())
        .collect();
    assert!(after.len() >= 3, "writes after the patch: {after:?}");
    for spec in after {
        assert_eq!(spec["preferredHolder"], "pb", "a write dropped it: {spec}");
    }
    assert!(
        a.stderr().contains("prefers another candidate"),
        "{}",
        a.stderr()
    );
    assert_within_rbac(&*api);
}

/// KEP-4355 with `spec.strategy` set: a free Lease is taken only by the candidate it
/// is handed to (`preferredHolder`); a candidate with `--lease-strategy-mixed` takes it
/// as any free Lease; renewals and the release keep `strategy` and `preferredHolder`.
#[test]
fn a_lease_with_a_strategy_is_taken_only_when_handed_over() {
    let api = kube_server::start("team", Flavor::Coordinated);
    let dir = tempfile::tempdir().expect("dir");
    let spec = |preferred: &str| {
        json!({
            "holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 3,
            "strategy": "OldestEmulationVersion", "preferredHolder": preferred,
        })
    };
    api.put_lease_spec("coord", spec("sb"));
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("coord")
        .build();
    let mut a = Sidecar::spawn("sa", dir.path(), &args);
    let seen = leaders_over(&[("sa", &a)], Duration::from_secs(3));
    assert!(
        seen.is_empty(),
        "a Lease handed to sb was taken by: {seen:?}"
    );
    let mut b = Sidecar::spawn("sb", dir.path(), &args);
    let seen = leaders_over(&[("sa", &a), ("sb", &b)], Duration::from_secs(3));
    assert_eq!(seen, ["sb"], "leaders");
    let lease = api.lease("coord").expect("lease");
    assert_eq!(lease["spec"]["strategy"], "OldestEmulationVersion");
    assert_eq!(lease["spec"]["preferredHolder"], "sb");
    b.terminate(Duration::from_secs(10));
    let released = api.lease("coord").expect("lease");
    assert_eq!(released["spec"]["holderIdentity"], "");
    assert_eq!(released["spec"]["strategy"], "OldestEmulationVersion");
    assert_eq!(released["spec"]["preferredHolder"], "sb");
    // Released, still handed to sb: sa sits out; a mixed-mode candidate takes it.
    let seen = leaders_over(&[("sa", &a)], Duration::from_secs(3));
    assert!(seen.is_empty(), "taken by {seen:?}");
    let mut mixed_args = args.clone();
    mixed_args.push("--lease-strategy-mixed".to_owned());
    let m = Sidecar::spawn("sm", dir.path(), &mixed_args);
    let seen = leaders_over(&[("sa", &a), ("sm", &m)], Duration::from_secs(4));
    assert_eq!(seen, ["sm"], "leaders");
    a.terminate(Duration::from_secs(10));
    assert_within_rbac(&*api);
}

/// The leadership Events of `who`'s messages: (message, count) in order of creation.
fn leadership_events(api: &dyn KubeApi) -> Vec<(String, u64)> {
    api.events()
        .iter()
        .filter(|e| e["reason"] == "LeaderElection")
        .map(|e| {
            (
                e["message"].as_str().unwrap_or("").to_owned(),
                e["count"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// client-go's Events: `<identity> became leader` and `<identity> stopped leading`,
/// type Normal, reason LeaderElection, about the Lease (with its uid).
#[test]
fn leadership_events_are_recorded_as_client_go_records_them() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("evt")
        .build();
    let mut a = Sidecar::spawn("ea", dir.path(), &args);
    a.settles_in("leader", Duration::from_secs(10));
    let b = Sidecar::spawn("eb", dir.path(), &args);
    b.settles_in("follower", Duration::from_secs(10));
    let first = eventually(Duration::from_secs(5), || {
        api.events()
            .into_iter()
            .find(|e| e["message"] == "ea became leader")
    })
    .expect("an Event for ea's tenure");
    let lease = api.lease("evt").expect("lease");
    assert_eq!(first["type"], "Normal");
    assert_eq!(first["reason"], "LeaderElection");
    assert_eq!(first["count"], 1);
    assert_eq!(first["involvedObject"]["kind"], "Lease");
    assert_eq!(
        first["involvedObject"]["apiVersion"],
        "coordination.k8s.io/v1"
    );
    assert_eq!(first["involvedObject"]["name"], "evt");
    assert_eq!(first["involvedObject"]["namespace"], "team");
    assert_eq!(first["involvedObject"]["uid"], lease["metadata"]["uid"]);
    assert_eq!(first["source"]["component"], "leasekeeper");
    assert!(first["firstTimestamp"].is_string(), "{first}");
    a.terminate(Duration::from_secs(10));
    b.settles_in("leader", Duration::from_secs(10));
    let all = eventually(Duration::from_secs(5), || {
        let e = leadership_events(&*api);
        (e.len() == 3).then_some(e)
    })
    .unwrap_or_else(|| panic!("events: {:?}", leadership_events(&*api)));
    let messages: Vec<&str> = all.iter().map(|(m, _)| m.as_str()).collect();
    assert!(messages.contains(&"ea stopped leading"), "{messages:?}");
    assert!(messages.contains(&"eb became leader"), "{messages:?}");
    assert_within_rbac(&*api);
}

/// A flapping election does not flood the API: repeats of a message within ten
/// minutes patch one Event's count (a series), at most 10 writes at once per sidecar
/// and one per 10 s after, and the counts are complete once the sidecars stop.
#[test]
fn a_flapping_election_makes_series_not_a_flood_of_events() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let mut args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("flap")
        .build();
    args.extend(["--enable-release-endpoint".to_owned()]);
    let mut a = Sidecar::spawn("fa", dir.path(), &args);
    let mut b = Sidecar::spawn("fb", dir.path(), &args);
    let mut tenures = 0;
    for _ in 0..24 {
        let Some(leader) = eventually(Duration::from_secs(10), || {
            [&a, &b]
                .into_iter()
                .find(|s| s.leader().is_some_and(|v| v["is_leader"] == true))
                .map(|s| s.port)
        }) else {
            panic!("no leader");
        };
        tenures += 1;
        let _ = common::harness::http::post(leader, "/release?cooldown=0s");
    }
    let requests = |api: &dyn KubeApi| {
        let r = api.requests();
        r.get("create events").copied().unwrap_or(0) + r.get("patch events").copied().unwrap_or(0)
    };
    let during = requests(&*api);
    assert!(
        during <= 2 * 12,
        "{during} event writes for {tenures} tenures"
    );
    a.terminate(Duration::from_secs(10));
    b.terminate(Duration::from_secs(10));
    let events = leadership_events(&*api);
    assert!(events.len() <= 4, "one Event per message: {events:?}");
    let became: u64 = events
        .iter()
        .filter(|(m, _)| m.ends_with("became leader"))
        .map(|(_, c)| c)
        .sum();
    let taken = api
        .lease_writes("flap")
        .windows(2)
        .filter(|w| {
            let holder =
                |s: &serde_json::Value| s["holderIdentity"].as_str().unwrap_or("").to_owned();
            !holder(&w[1].1).is_empty() && holder(&w[1].1) != holder(&w[0].1)
        })
        .count() as u64
        + 1;
    assert_eq!(
        became, taken,
        "counts {events:?}, tenures in the Lease {taken}"
    );
    assert_within_rbac(&*api);
}

/// With another backend, in a Pod, the Events are about the own Pod.
#[test]
fn with_another_backend_the_events_are_about_the_own_pod() {
    let api = kube_server::start("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    api.add_pod("file-pod", &[("app", "demo")]);
    let mut args = SidecarArgs::file(dir.path())
        .ttl("2s")
        .election("pe")
        .build();
    args.extend(
        [
            "--events",
            "--pod-name",
            "file-pod",
            "--namespace",
            "team",
            "--kubeconfig",
            &api.kubeconfig(),
        ]
        .map(str::to_owned),
    );
    let s = Sidecar::spawn("file-pod", dir.path(), &args);
    s.settles_in("leader", Duration::from_secs(10));
    let event = eventually(Duration::from_secs(5), || api.events().into_iter().next())
        .unwrap_or_else(|| panic!("no Event; {}", s.stderr()));
    assert_eq!(event["message"], "file-pod became leader");
    assert_eq!(event["involvedObject"]["kind"], "Pod");
    assert_eq!(event["involvedObject"]["name"], "file-pod");
    assert!(event["involvedObject"]["uid"].is_string(), "{event}");
    assert_within_rbac(&*api);
}
