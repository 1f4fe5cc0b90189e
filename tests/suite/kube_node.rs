//! The sidecar in real Pods: a single-node Kubernetes (tests/kube_node/node.sh, the
//! binaries from `LK_KUBE_NODE`), the image from `scripts/image-archive` of the binary
//! under test imported into the node's containerd, and the charts installed with Helm.
//! Without LK_KUBE_NODE each test says it is skipped and passes.
//!
//! Each test starts a node of its own (about 15 s) and stops it at its end, also when
//! it fails: a scenario begins on an empty cluster whatever the one before it left
//! (Leases, terminating Pods, restarted containers), and a failure names one scenario.
//! One node runs on a host at a time, so the tests take turns (a lock file).
//!
//! Run: `LK_KUBE_NODE=/path/to/bin cargo nextest run --no-capture -E 'test(/^kube_node::/)'`
//! (docs/development.md, "The node suite"; the figures go to docs/workloads.md).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::http::Method;
use common::servers::kube_node::observe::{self, LeaderPolls, PodWatch, TransitionLogs};
use common::servers::kube_node::{self as node, mono_ns, ms, node_or_skip, KubeNode, BUSYBOX};
use serde_json::{json, Value};

const NS: &str = "apps";
const LEADER: &str = "leasekeeper.io/leader";
const TTL_S: u64 = 6;
/// The Pods' terminationGracePeriodSeconds (the charts' default).
const GRACE_S: u64 = 30;
/// The app: exits at once on SIGTERM.
const APP: &str = "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done";
/// The app: takes a second to stop after SIGTERM, as an app that drains does.
const DRAINING_APP: &str = "trap 'sleep 1; exit 0' TERM; while :; do sleep 1 & wait $!; done";
/// The example parent chart's StatefulSet Pods, and the chart's own Deployment's.
const STS: &str = "app.kubernetes.io/instance=shop";
const DEPLOY: &str = "app.kubernetes.io/name=leasekeeper,app.kubernetes.io/instance=lk";
/// What the scheduler, the kubelet and containerd may take beyond the sidecars' own
/// work on a loaded two-core machine, on top of a ttl.
const SLACK: Duration = Duration::from_secs(1);

fn chart(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The sidecar as the tests run it: native, the imported image (never pulled), and a
/// transition log in its /tmp emptyDir, which the host reads.
fn sidecar_values() -> Value {
    json!({
        "native": true,
        "image": {"pullPolicy": "Never"},
        "extraEnv": [{"name": "LEASEKEEPER_TRANSITION_LOG", "value": "/tmp/transitions.log"}],
    })
}

/// The example parent chart: a StatefulSet of 3 that includes the named templates.
fn parent_values() -> Value {
    json!({
        "image": BUSYBOX,
        "command": ["sh", "-c", APP],
        "leasekeeper": {"election": {"ttl": format!("{TTL_S}s")}, "sidecar": sidecar_values()},
    })
}

/// The chart's own Deployment of 3 with a busybox app running `app`.
fn chart_values(app: &str) -> Value {
    json!({
        "replicaCount": 3,
        "election": {"ttl": format!("{TTL_S}s")},
        "sidecar": sidecar_values(),
        "app": {
            "image": {"repository": "localhost/busybox", "tag": "1.35", "pullPolicy": "Never"},
            "command": ["sh", "-c", app],
            "args": [],
        },
    })
}

/// Exactly one Pod labelled leader, the others labelled follower.
fn one_leader(pods: &[Value]) -> bool {
    let leaders = pods
        .iter()
        .filter(|p| node::label(p, LEADER).as_deref() == Some("true"))
        .count();
    let followers = pods
        .iter()
        .filter(|p| node::label(p, LEADER).as_deref() == Some("false"))
        .count();
    leaders == 1 && followers == pods.len() - 1
}

fn leader_of(pods: &[Value]) -> String {
    pods.iter()
        .find(|p| node::label(p, LEADER).as_deref() == Some("true"))
        .map(node::name)
        .expect("a labelled leader")
}

fn install(node: &KubeNode, release: &str, chart_path: &str, values: &Value) -> f64 {
    let began = Instant::now();
    let answer = node.helm("install", release, Some(&chart(chart_path)), NS, values);
    let took = began.elapsed().as_secs_f64();
    eprintln!("helm install {release} {chart_path}: {answer} in {took:.1} s");
    took
}

#[test]
fn a_statefulset_with_the_named_template_elects_one_leader_on_real_pods() {
    let Some(node) = node_or_skip("kube_node::statefulset") else {
        return;
    };
    install(
        &node,
        "shop",
        "charts/examples/statefulset-with-sidecar",
        &parent_values(),
    );
    let pods = node.wait_ready(NS, STS, 3, Duration::from_secs(120), one_leader);
    let leader = leader_of(&pods);
    eprintln!("3 Pods Running and Ready, {leader} labelled leader");
    for pod in &pods {
        let side = native_sidecar(pod);
        assert_eq!(side["image"], node::IMAGE_TAG);
        assert_eq!(side["imagePullPolicy"], "Never");
    }
    let lease = node.get(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/statefulset-with-sidecar"
    ));
    assert_eq!(lease["spec"]["holderIdentity"], leader.as_str());
    status_answers(&node, &pods, &leader);
    token_only(&node, &pods, "system:serviceaccount:apps:shop-leasekeeper");

    let watch = PodWatch::start(&node, NS);
    let logs = TransitionLogs::start(&node, "transitions.log");
    let rounds: Vec<Failover> = (0..5)
        .map(|_| failover(&node, &watch, &logs, STS))
        .collect();
    report_failovers("StatefulSet, named template", &rounds);
}

/// The sidecar container of a Pod: an init container with restartPolicy Always.
fn native_sidecar(pod: &Value) -> Value {
    let side = pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "leasekeeper")
        .cloned()
        .unwrap_or_else(|| panic!("{}: no leasekeeper init container", node::name(pod)));
    assert_eq!(side["restartPolicy"], "Always", "not a native sidecar");
    side
}

/// `kubectl exec POD -c leasekeeper -- leasekeeper status`: 0 from the leader, 3 from
/// a follower (docs/configuration.md, "Exit codes"), each naming the leader.
fn status_answers(node: &KubeNode, pods: &[Value], leader: &str) {
    for pod in pods {
        let name = node::name(pod);
        let (code, out) = node.exec_leasekeeper(NS, &name, &["status"]);
        let expected = if name == leader { 0 } else { 3 };
        assert_eq!(code, expected, "leasekeeper status in {name}:\n{out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("leader") && l.ends_with(leader)),
            "{name}: {out}"
        );
        eprintln!("kubectl exec {name} -c leasekeeper -- leasekeeper status: exit {code}");
    }
}

/// The sidecar reaches the API server with its Pod's service-account token and nothing
/// else: no kubeconfig in its spec, command line or environment, the token's projected
/// volume its only credential mount, and every request the API server audited from
/// the Pods' addresses made as the ServiceAccount with a token bound to that very Pod.
fn token_only(node: &KubeNode, pods: &[Value], user: &str) {
    let mut ips = std::collections::BTreeMap::new();
    for pod in pods {
        let name = node::name(pod);
        let side = native_sidecar(pod);
        assert!(
            side["command"].is_null() && side["args"].is_null(),
            "{side}"
        );
        let env: Vec<&str> = side["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert!(
            !env.iter().any(|e| e.contains("KUBECONFIG")),
            "{name}: {env:?}"
        );
        let mounts: Vec<&str> = side["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["mountPath"].as_str())
            .collect();
        assert_eq!(
            mounts,
            ["/tmp", "/var/run/secrets/kubernetes.io/serviceaccount"],
            "{name}"
        );
        let id = node::container_status(pod, "leasekeeper")["containerID"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let pid = node.container_pid(&id).expect("the sidecar's host pid");
        let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
        let environ = String::from_utf8_lossy(&environ);
        assert!(!environ.contains("KUBECONFIG"), "{name}: {environ}");
        assert!(environ.contains("KUBERNETES_SERVICE_HOST="), "{name}");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
        assert_eq!(cmdline, b"/usr/local/bin/leasekeeper\0", "{name}");
        ips.insert(
            pod["status"]["podIP"].as_str().expect("ip").to_owned(),
            name,
        );
    }
    let audited = node.audit();
    let mut per_pod = std::collections::BTreeMap::<String, usize>::new();
    for e in &audited {
        let Some(ip) = e["sourceIPs"][0].as_str() else {
            continue;
        };
        let Some(pod) = ips.get(ip) else { continue };
        assert_eq!(e["user"]["username"], user, "{e}");
        assert_eq!(
            e["user"]["extra"]["authentication.kubernetes.io/pod-name"][0],
            pod.as_str(),
            "{e}"
        );
        let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
        assert!(code != 401 && code != 403, "refused: {e}");
        *per_pod.entry(pod.clone()).or_default() += 1;
    }
    assert_eq!(per_pod.len(), pods.len(), "requests per Pod: {per_pod:?}");
    eprintln!("audited requests as {user}, each with its own Pod's bound token: {per_pod:?}");
}

/// One deletion of the leader's Pod, in milliseconds: from the DELETE to the new
/// leader's label in the API (`whole`), split into the kubelet's part
/// (DELETE to the old sidecar's claim_end: the app stopped, then the sidecar's
/// SIGTERM), the sidecars' handover (claim_end to the next claim_start: the label set
/// to follower, the Lease released, the watch event, the new Lease write), and the new
/// leader's label (claim_start to the label in the API).
#[derive(Debug)]
struct Failover {
    old: String,
    new: String,
    whole: f64,
    kubelet: f64,
    handover: f64,
    label: f64,
    /// Of the handover, the time the API server spent answering the sidecars'
    /// requests in it (its audit log: received to response complete).
    api: f64,
    /// The handover less `api`: the sidecars' own work, the watch event's delivery
    /// and the loopback between them.
    own: f64,
}

fn failover(node: &KubeNode, watch: &PodWatch, logs: &TransitionLogs, selector: &str) -> Failover {
    let pods = node.wait_ready(NS, selector, 3, Duration::from_secs(120), one_leader);
    let old = leader_of(&pods);
    let t0 = mono_ns();
    let (code, body) = node.call(
        Method::DELETE,
        &format!("/api/v1/namespaces/{NS}/pods/{old}"),
        None,
    );
    assert_eq!(code, 200, "delete {old}: {body}");
    let (labelled, new) = watch
        .wait_label(LEADER, "true", t0, &old, Duration::from_secs(TTL_S * 3))
        .unwrap_or_else(|| panic!("no other Pod labelled leader after deleting {old}"));
    let find = |identity: &str, event: &str| {
        logs.wait_for(Duration::from_secs(5), |ts| {
            ts.iter()
                .find(|t| t.identity == identity && t.event == event && t.at_ns >= t0)
                .cloned()
        })
        .unwrap_or_else(|| panic!("no {event} of {identity} in the transition logs"))
    };
    let end = find(&old, "claim_end");
    let start = find(&new, "claim_start");
    assert_eq!(end.reason.as_deref(), Some("shutdown"), "{end:?}");
    assert!(
        start.at_ns >= end.at_ns,
        "{new} claimed before {old} released"
    );
    let handover = ms(end.at_ns, start.at_ns);
    let api = api_time(node, &[&old, &new], end.at_ns, start.at_ns);
    Failover {
        old,
        new,
        whole: ms(t0, labelled),
        kubelet: ms(t0, end.at_ns),
        handover,
        label: ms(start.at_ns, labelled),
        api,
        own: handover - api,
    }
}

/// The time (ms) the API server spent on the handover's requests: those of `pods` on
/// Pods (the label) and Leases it received within [`from_ns`, `to_ns`]
/// (CLOCK_MONOTONIC), from its audit log, printed one by one. They follow one another
/// (the label, the release, the next write); an Event sent beside them is printed but
/// not counted.
/// The log's wall-clock stamps are moved onto the monotonic clock by the offset
/// between the two clocks read now.
fn api_time(node: &KubeNode, pods: &[&str], from_ns: u64, to_ns: u64) -> f64 {
    let offset = wall_ns() - mono_ns() as i128;
    let stamp = |v: &Value| -> i128 {
        let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime =
            serde_json::from_value(v.clone()).expect("an audit timestamp");
        t.0.as_nanosecond() - offset
    };
    // The log is written when a request completes: give it a moment.
    std::thread::sleep(Duration::from_millis(300));
    let mut total = 0.0;
    for e in node.audit() {
        let pod = e["user"]["extra"]["authentication.kubernetes.io/pod-name"][0]
            .as_str()
            .unwrap_or_default();
        if !pods.contains(&pod) || e["stage"] != "ResponseComplete" {
            continue;
        }
        let (received, done) = (
            stamp(&e["requestReceivedTimestamp"]),
            stamp(&e["stageTimestamp"]),
        );
        if received < from_ns as i128 || received > to_ns as i128 {
            continue;
        }
        let spent = (done - received) as f64 / 1e6;
        let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
        if resource == "pods" || resource == "leases" {
            total += spent;
        }
        eprintln!(
            "  {pod}: {} {resource} at +{:.1} ms, the API server's {spent:.1} ms",
            e["verb"].as_str().unwrap_or_default(),
            (received - from_ns as i128) as f64 / 1e6,
        );
    }
    total
}

/// CLOCK_REALTIME in ns.
fn wall_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_nanos() as i128
}

fn report_failovers(workload: &str, rounds: &[Failover]) {
    for f in rounds {
        eprintln!(
            "failover: {} deleted, {} leads: whole {:.0} ms, kubelet {:.0} ms, handover {:.0} ms \
             (API server {:.0} ms, the sidecars' own {:.0} ms), label {:.0} ms",
            f.old, f.new, f.whole, f.kubelet, f.handover, f.api, f.own, f.label
        );
    }
    let worst = |f: fn(&Failover) -> f64| rounds.iter().map(f).fold(0.0, f64::max);
    let median = |f: fn(&Failover) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    eprintln!(
        "FIGURE leader Pod deleted -> another Pod labelled leader ({workload}, {} rounds): whole median {:.0} ms, max {:.0} ms; \
         kubelet (DELETE -> old sidecar's claim_end) median {:.0} ms; sidecars' handover (claim_end -> claim_start) \
         median {:.0} ms, max {:.0} ms, of which the API server's requests median {:.0} ms and the sidecars' own part \
         median {:.0} ms, max {:.0} ms (target 50 ms); new label (claim_start -> label) median {:.0} ms, max {:.0} ms",
        rounds.len(),
        median(|f| f.whole),
        worst(|f| f.whole),
        median(|f| f.kubelet),
        median(|f| f.handover),
        worst(|f| f.handover),
        median(|f| f.api),
        median(|f| f.own),
        worst(|f| f.own),
        median(|f| f.label),
        worst(|f| f.label),
    );
    // The kubelet's part is the node's (the Pod worker, the app's stop, then the
    // sidecar's SIGTERM); within the Pod's grace period the sidecar stopped on SIGTERM
    // and released, not on the SIGKILL at its end.
    assert!(
        worst(|f| f.whole) < (GRACE_S * 1000) as f64,
        "a failover took the Pod's whole grace period: {rounds:?}"
    );
    assert!(
        worst(|f| f.handover + f.label) < SLACK.as_millis() as f64,
        "the sidecars' part of a failover took more than {SLACK:?}: {rounds:?}"
    );
}

#[test]
fn helm_upgrade_rolls_the_deployment_with_never_two_leaders() {
    let Some(node) = node_or_skip("kube_node::rolling_upgrade") else {
        return;
    };
    install(&node, "lk", "charts/leasekeeper", &chart_values(APP));
    let before = node.wait_ready(NS, DEPLOY, 3, Duration::from_secs(120), one_leader);
    let old: Vec<String> = before.iter().map(node::name).collect();
    let watch = PodWatch::start(&node, NS);
    let logs = TransitionLogs::start(&node, "transitions.log");
    let polls = LeaderPolls::start(watch.ips(), 4040, Duration::from_millis(50));
    // Observed: a second of the watchers' baseline before the upgrade.
    std::thread::sleep(Duration::from_secs(1));
    let from = mono_ns();
    let mut values = chart_values(APP);
    values["election"]["renewInterval"] = json!("1s");
    let began = Instant::now();
    let answer = node.helm(
        "upgrade",
        "lk",
        Some(&chart("charts/leasekeeper")),
        NS,
        &values,
    );
    eprintln!(
        "helm upgrade lk (election.renewInterval=1s): {answer} in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let after = node.wait_ready(NS, DEPLOY, 3, Duration::from_secs(120), |pods| {
        one_leader(pods) && pods.iter().all(|p| !old.contains(&node::name(p)))
    });
    // Observed: a second of the watchers after the rollout settled.
    std::thread::sleep(Duration::from_secs(1));
    let to = mono_ns();
    for pod in &after {
        let side = native_sidecar(pod);
        let renew = side["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "LEASEKEEPER_RENEW_INTERVAL");
        assert_eq!(renew.map(|e| e["value"].clone()), Some(json!("1s")));
    }
    judge_rollout(&watch, &logs, &polls, from, to);
}

/// Never two leaders, by the sidecars' own claims, by the label in the API and by each
/// Pod's /leader; the longest time without one, by each, within the ttl and SLACK.
fn judge_rollout(watch: &PodWatch, logs: &TransitionLogs, polls: &LeaderPolls, from: u64, to: u64) {
    let claims = logs.claims();
    let started = claims
        .iter()
        .filter(|c| c.start_ns >= from && c.start_ns <= to)
        .count();
    let (claim_gap, claim_most) = observe::claim_gaps(&claims, from, to);
    let (label_gap, label_most) = label_gaps(watch, from, to);
    let sweeps = polls.sweeps();
    let sweeps: Vec<&observe::Sweep> = sweeps
        .iter()
        .filter(|s| s.at_ns >= from && s.at_ns <= to)
        .collect();
    let sweep_most = sweeps.iter().map(|s| s.leaders().len()).max().unwrap_or(0);
    let mut sweep_gap = 0u64;
    let mut last_led = from;
    for s in &sweeps {
        if !s.leaders().is_empty() {
            sweep_gap = sweep_gap.max(s.at_ns.saturating_sub(last_led));
            last_led = s.at_ns;
        }
    }
    sweep_gap = sweep_gap.max(to.saturating_sub(last_led));
    eprintln!(
        "FIGURE helm upgrade, rolling update of 3 Pods ({:.1} s, {started} tenures began): longest without a leader: \
         claims {:.0} ms, label {:.0} ms, /leader polls {:.0} ms ({} sweeps every 50 ms); most leaders at once: \
         claims {claim_most}, label {label_most}, /leader {sweep_most}",
        ms(from, to) / 1000.0,
        ms(0, claim_gap),
        ms(0, label_gap),
        ms(0, sweep_gap),
        sweeps.len(),
    );
    assert!(started >= 1, "no handover during the rollout: {claims:?}");
    assert_eq!(claim_most, 1, "two claims at once: {claims:?}");
    assert_eq!(label_most, 1, "two Pods labelled leader at once");
    assert_eq!(sweep_most, 1, "two Pods answered as leader in one sweep");
    let bound = Duration::from_secs(TTL_S) + SLACK;
    for (what, gap) in [
        ("claims", claim_gap),
        ("label", label_gap),
        ("/leader", sweep_gap),
    ] {
        assert!(
            Duration::from_nanos(gap) <= bound,
            "{what}: {gap} ns without a leader, more than the ttl and {SLACK:?}"
        );
    }
}

/// The longest time within [from, to] with no Pod labelled leader, and the most Pods
/// labelled leader at once.
fn label_gaps(watch: &PodWatch, from: u64, to: u64) -> (u64, usize) {
    let timeline = watch.label_timeline(LEADER, "true");
    let mut most = 0;
    let mut gap = 0u64;
    let mut none_since: Option<u64> = None;
    let mut leading = timeline
        .iter()
        .take_while(|(at, _)| *at < from)
        .last()
        .map(|(_, pods)| pods.len())
        .unwrap_or(0);
    if leading == 0 {
        none_since = Some(from);
    }
    for (at, pods) in timeline.iter().filter(|(at, _)| *at >= from && *at <= to) {
        most = most.max(pods.len());
        match (leading, pods.len()) {
            (0, n) if n > 0 => gap = gap.max(at - none_since.take().unwrap_or(*at)),
            (n, 0) if n > 0 => none_since = Some(*at),
            _ => {}
        }
        leading = pods.len();
    }
    if let Some(since) = none_since {
        gap = gap.max(to.saturating_sub(since));
    }
    (gap, most.max(usize::from(leading > 0)))
}

#[test]
fn the_native_sidecar_outlives_the_app_releases_and_rejoins_after_kill_9() {
    let Some(node) = node_or_skip("kube_node::termination_and_kill_9") else {
        return;
    };
    install(
        &node,
        "lk",
        "charts/leasekeeper",
        &chart_values(DRAINING_APP),
    );
    let watch = PodWatch::start(&node, NS);
    let logs = TransitionLogs::start(&node, "transitions.log");
    termination_order(&node, &watch, &logs);
    kill_9_of_the_sidecar(&node, &logs);
}

/// Deleting the leader's Pod: the app stops first (it takes a second), the sidecar
/// leads until then, releases after it, and its process ends last; the next leader
/// takes over right after the release, not a ttl later.
fn termination_order(node: &KubeNode, watch: &PodWatch, logs: &TransitionLogs) {
    let pods = node.wait_ready(NS, DEPLOY, 3, Duration::from_secs(120), one_leader);
    let old = leader_of(&pods);
    let pod = pods
        .iter()
        .find(|p| node::name(p) == old)
        .expect("leader pod");
    let pid_of = |c: &str| {
        let id = node::container_status(pod, c)["containerID"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        node.container_pid(&id)
            .unwrap_or_else(|| panic!("{old}: no host pid of {c}"))
    };
    let exits = observe::watch_exits(
        vec![pid_of("app"), pid_of("leasekeeper")],
        Duration::from_secs(60),
    );
    let t0 = mono_ns();
    let (code, body) = node.call(
        Method::DELETE,
        &format!("/api/v1/namespaces/{NS}/pods/{old}"),
        None,
    );
    assert_eq!(code, 200, "delete {old}: {body}");
    let (labelled, new) = watch
        .wait_label(LEADER, "true", t0, &old, Duration::from_secs(TTL_S * 3))
        .expect("another Pod labelled leader");
    let gone = exits.join().expect("exit watch");
    let (app_gone, side_gone) = (
        gone[0].expect("app never ended"),
        gone[1].expect("sidecar never ended"),
    );
    let end = logs
        .wait_for(Duration::from_secs(5), |ts| {
            ts.iter()
                .find(|t| t.identity == old && t.event == "claim_end" && t.at_ns >= t0)
                .cloned()
        })
        .expect("the old leader's claim_end");
    let start = logs
        .wait_for(Duration::from_secs(5), |ts| {
            ts.iter()
                .find(|t| t.identity == new && t.event == "claim_start" && t.at_ns >= t0)
                .cloned()
        })
        .expect("the new leader's claim_start");
    eprintln!(
        "FIGURE Pod termination ({old}): DELETE -> app exited {:.0} ms; app exited -> sidecar released {:.0} ms; \
         released -> sidecar exited {:.0} ms; released -> {new} leads {:.0} ms; DELETE -> new label {:.0} ms (ttl {TTL_S} s)",
        ms(t0, app_gone),
        ms(app_gone, end.at_ns),
        ms(end.at_ns, side_gone),
        ms(end.at_ns, start.at_ns),
        ms(t0, labelled),
    );
    assert!(
        ms(t0, app_gone) >= 900.0,
        "the app did not take its second to stop"
    );
    assert!(
        app_gone < end.at_ns,
        "the sidecar released before the app had stopped"
    );
    assert!(
        end.at_ns < side_gone,
        "the sidecar's process ended before its release"
    );
    assert_eq!(end.reason.as_deref(), Some("shutdown"));
    assert!(
        Duration::from_nanos(start.at_ns - end.at_ns) < SLACK,
        "the next leader waited {:.0} ms after the release",
        ms(end.at_ns, start.at_ns)
    );
}

/// kill -9 of a sidecar's container process from the host: the kubelet restarts the
/// container (its restartCount grows, the app's does not), the sidecar answers again
/// and is back in the election, and one Pod leads.
fn kill_9_of_the_sidecar(node: &KubeNode, logs: &TransitionLogs) {
    let pods = node.wait_ready(NS, DEPLOY, 3, Duration::from_secs(120), one_leader);
    let victim = leader_of(&pods);
    let pod = pods.iter().find(|p| node::name(p) == victim).expect("pod");
    let side = node::container_status(pod, "leasekeeper");
    let restarts = side["restartCount"].as_u64().unwrap_or(0);
    let pid = node
        .container_pid(side["containerID"].as_str().unwrap_or(""))
        .expect("sidecar pid");
    let ip: std::net::IpAddr = pod["status"]["podIP"]
        .as_str()
        .expect("ip")
        .parse()
        .expect("ip");
    let t0 = mono_ns();
    common::send_signal(pid, libc::SIGKILL);
    // Any answer from here on comes from the restarted container.
    let gone = observe::watch_exits(vec![pid], Duration::from_secs(10));
    assert!(
        gone.join().expect("exit watch")[0].is_some(),
        "the sidecar outlived kill -9"
    );
    let rejoined = common::eventually(Duration::from_secs(60), || {
        let (code, body) =
            common::harness::http::get_from(std::net::SocketAddr::new(ip, 4040), "/leader")?;
        let v: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && (v["state"] == "leader" || v["state"] == "follower"))
            .then(|| (mono_ns(), v))
    })
    .expect("the restarted sidecar never answered as leader or follower");
    // The kubelet reports the restart in the Pod's status a moment later.
    let restarted = |pods: &[Value]| {
        pods.iter().any(|p| {
            node::name(p) == victim
                && node::container_status(p, "leasekeeper")["restartCount"]
                    .as_u64()
                    .is_some_and(|n| n > restarts)
        })
    };
    let after = node.wait_ready(NS, DEPLOY, 3, Duration::from_secs(60), |pods| {
        one_leader(pods) && restarted(pods)
    });
    let now = after
        .iter()
        .find(|p| node::name(p) == victim)
        .expect("same Pod");
    let side_now = node::container_status(now, "leasekeeper");
    assert_eq!(node::container_status(now, "app")["restartCount"], 0);
    let next = logs
        .wait_for(Duration::from_secs(TTL_S * 3), |ts| {
            ts.iter()
                .find(|t| t.event == "claim_start" && t.at_ns >= t0)
                .cloned()
        })
        .expect("nobody led after the kill");
    eprintln!(
        "FIGURE kill -9 of {victim}'s sidecar (the leader): restartCount {restarts} -> {}; kill -> /leader answers \
         again {:.0} ms ({}); kill -> {} leads {:.0} ms (ttl {TTL_S} s)",
        side_now["restartCount"],
        ms(t0, rejoined.0),
        rejoined.1["state"],
        next.identity,
        ms(t0, next.at_ns),
    );
    assert!(
        Duration::from_nanos(next.at_ns - t0) <= Duration::from_secs(TTL_S) + SLACK * 5,
        "no leader within the ttl of the kill"
    );
}

#[test]
fn a_deployment_gets_the_sidecar_by_injection() {
    if node::binaries().is_none() {
        node_or_skip("kube_node::injection");
        return;
    }
    let (code, _, _) = common::run_to_exit(&["inject", "--help"], &[]);
    if code != Some(0) {
        eprintln!(
            "kube_node::injection: skipped: this leasekeeper has no `inject` subcommand (the mutating \
             admission webhook the chart runs with injector.enabled=true), so no Pod can get the \
             sidecar by injection"
        );
        return;
    }
    let Some(node) = node_or_skip("kube_node::injection") else {
        return;
    };
    injected_deployment(&node);
}

/// The injector from the chart (its own namespace), a namespace labelled for
/// injection, and a plain Deployment of 3 whose Pod template asks for the sidecar.
fn injected_deployment(node: &KubeNode) {
    let values = json!({
        "deployment": {"enabled": false},
        "injector": {
            "enabled": true,
            "replicas": 1,
            "sidecarRBAC": [{"namespace": NS, "serviceAccount": "default"}],
        },
        "election": {"ttl": format!("{TTL_S}s")},
        "sidecar": sidecar_values(),
    });
    node.kubectl_ok(&["create", "namespace", NS]);
    node.kubectl_ok(&["label", "namespace", NS, "leasekeeper.io/injection=enabled"]);
    let began = Instant::now();
    let answer = node.helm(
        "install",
        "lk",
        Some(&chart("charts/leasekeeper")),
        "leasekeeper-system",
        &values,
    );
    eprintln!(
        "helm install lk (injector): {answer} in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "orders", "namespace": NS},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "orders"}},
            "template": {
                "metadata": {
                    "labels": {"app": "orders"},
                    "annotations": {
                        "leasekeeper.io/inject": "true",
                        "leasekeeper.io/election": "orders",
                        "leasekeeper.io/ttl": format!("{TTL_S}s"),
                    },
                },
                "spec": {"containers": [{"name": "orders", "image": BUSYBOX, "command": ["sh", "-c", APP]}]},
            },
        },
    });
    let created = Instant::now();
    let (code, body) = node.call(
        Method::POST,
        &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        Some(deployment),
    );
    assert_eq!(code, 200, "create the Deployment: {body}");
    let pods = node.wait_ready(NS, "app=orders", 3, Duration::from_secs(120), one_leader);
    let ready = created.elapsed().as_secs_f64();
    for pod in &pods {
        native_sidecar(pod);
        assert_eq!(
            pod["metadata"]["annotations"]["leasekeeper.io/status"],
            "injected"
        );
    }
    let leader = leader_of(&pods);
    status_answers(node, &pods, &leader);
    token_only(node, &pods, "system:serviceaccount:apps:default");
    eprintln!(
        "FIGURE injected Deployment: created -> 3 Pods Running and Ready with the sidecar, {leader} \
         labelled leader: {ready:.1} s"
    );
    let watch = PodWatch::start(node, NS);
    let logs = TransitionLogs::start(node, "transitions.log");
    let rounds: Vec<Failover> = (0..3)
        .map(|_| failover(node, &watch, &logs, "app=orders"))
        .collect();
    report_failovers("Deployment, injected", &rounds);
}
