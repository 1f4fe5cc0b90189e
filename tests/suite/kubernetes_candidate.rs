//! `--lease-candidate` (a coordination.k8s.io/v1beta1 LeaseCandidate, as client-go's
//! `leaderelection.NewCandidate` publishes it) and the Lease backend's side of a
//! switchover (`release_to`, `candidates`), against the in-process fake API server.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use common::servers::fake_kube::FakeKube;
use common::servers::kube_server::{self, Flavor, KubeApi};
use common::{eventually, Sidecar, SidecarArgs};
use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use leasekeeper::backend::kubernetes::settings::KubeSettings;
use leasekeeper::backend::kubernetes::KubeBackend;
use leasekeeper::backend::{Backend, Campaign, Candidacy, Wake};
use leasekeeper::timing::Timing;
use serde_json::{json, Value};

/// `t` as the API writes MicroTime: RFC 3339 in UTC with microseconds.
fn micros(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).expect("epoch");
    let ts = k8s_openapi::jiff::Timestamp::from_microsecond(d.as_micros() as i64).expect("ts");
    ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

fn parse_micros(v: &Value) -> k8s_openapi::jiff::Timestamp {
    v.as_str().expect("a time").parse().expect("RFC 3339")
}

fn candidate_args(api: &dyn KubeApi, election: &str) -> Vec<String> {
    let mut args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election(election)
        .build();
    args.push("--lease-candidate".to_owned());
    args
}

fn leads(s: &Sidecar) -> bool {
    s.leader().is_some_and(|v| v["is_leader"] == true)
}

/// The LeaseCandidate carries client-go's fields: named after the identity, for the
/// election's Lease, our version as binary and emulation version, strategy
/// OldestEmulationVersion, renewed now; the chart's rule is all it needs.
#[test]
fn the_lease_candidate_is_created_with_client_go_fields() {
    let api = kube_server::start("team", Flavor::GateOffWithCandidates);
    let dir = tempfile::tempdir().expect("dir");
    let before = SystemTime::now();
    let a = Sidecar::spawn("cand-a", dir.path(), &candidate_args(&*api, "cand"));
    let created = eventually(Duration::from_secs(10), || api.lease_candidate("cand-a"))
        .expect("a LeaseCandidate");
    let spec = &created["spec"];
    assert_eq!(spec["leaseName"], "cand", "{spec}");
    assert_eq!(spec["binaryVersion"], env!("CARGO_PKG_VERSION"), "{spec}");
    assert_eq!(
        spec["emulationVersion"],
        env!("CARGO_PKG_VERSION"),
        "{spec}"
    );
    assert_eq!(spec["strategy"], "OldestEmulationVersion", "{spec}");
    assert!(spec["pingTime"].is_null(), "{spec}");
    let renewed = parse_micros(&spec["renewTime"]);
    assert!(renewed >= parse_micros(&json!(micros(before))), "{spec}");
    assert_eq!(created["apiVersion"], "coordination.k8s.io/v1beta1");
    eventually(Duration::from_secs(10), || leads(&a).then_some(())).expect("a leads");
    assert!(api.forbidden().is_empty(), "{:?}", api.forbidden());
}

/// The coordinator pings (a pingTime later than renewTime): the candidate renews at
/// once, as client-go's watch on its own LeaseCandidate does.
#[test]
fn a_pinged_lease_candidate_renews_at_once() {
    let api = kube_server::start("team", Flavor::GateOffWithCandidates);
    let dir = tempfile::tempdir().expect("dir");
    let _a = Sidecar::spawn("ping-a", dir.path(), &candidate_args(&*api, "ping"));
    eventually(Duration::from_secs(10), || api.lease_candidate("ping-a")).expect("created");
    // Let the watch for pings open.
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..2 {
        let ping = micros(SystemTime::now());
        let pinged = Instant::now();
        api.put_lease_candidate("ping-a", json!({"pingTime": ping}));
        let renewed = eventually(Duration::from_secs(2), || {
            let spec = api.lease_candidate("ping-a")?["spec"].clone();
            (parse_micros(&spec["renewTime"]) > parse_micros(&spec["pingTime"])).then_some(spec)
        });
        let renewed = renewed.unwrap_or_else(|| {
            panic!(
                "no renewal after the ping: {:?}",
                api.lease_candidate("ping-a")
            )
        });
        assert!(
            pinged.elapsed() < Duration::from_secs(1),
            "{:?}",
            pinged.elapsed()
        );
        assert_eq!(
            renewed["pingTime"], ping,
            "the ping was overwritten: {renewed}"
        );
        assert_eq!(renewed["leaseName"], "ping");
        // And again a second later: the coordinator counts only renewals within 5 s
        // of its vote, which comes 5 s after its ping round *ended*; an answer a few
        // ms after the ping may fall outside (the candidate's `ACK_AGAIN`).
        let again = eventually(Duration::from_secs(3), || {
            let spec = api.lease_candidate("ping-a")?["spec"].clone();
            let after =
                parse_micros(&spec["renewTime"]).duration_since(parse_micros(&ping.clone().into()));
            (after >= k8s_openapi::jiff::SignedDuration::from_millis(900)).then_some(spec)
        });
        assert!(again.is_some(), "{:?}", api.lease_candidate("ping-a"));
    }
    assert!(api.forbidden().is_empty(), "{:?}", api.forbidden());
}

/// An API server without coordination.k8s.io/v1beta1 (before 1.33): no LeaseCandidate
/// request beyond discovery, one warning, and the election goes on.
#[test]
fn without_v1beta1_there_is_no_lease_candidate_and_one_warning() {
    let api = FakeKube::start_granting_lease_candidates("team");
    api.serve_lease_candidates(false);
    let dir = tempfile::tempdir().expect("dir");
    let a = Sidecar::spawn("old-a", dir.path(), &candidate_args(&api, "old"));
    eventually(Duration::from_secs(10), || leads(&a).then_some(())).expect("a leads");
    let warning = "does not serve coordination.k8s.io/v1beta1 leasecandidates";
    eventually(Duration::from_secs(5), || {
        a.stderr().contains(warning).then_some(())
    })
    .unwrap_or_else(|| panic!("no warning: {}", a.stderr()));
    // Observed: a second more, in which the warning must not come again.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(a.stderr().matches(warning).count(), 1, "{}", a.stderr());
    let requests = api.requests();
    let touched: Vec<&String> = requests
        .keys()
        .filter(|k| k.contains("leasecandidates"))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    assert_eq!(requests.get("get discovery"), Some(&1), "{requests:?}");
    assert!(api.lease_candidate("old-a").is_none());
}

/// The default Role (leaseCandidate.enabled off) with --lease-candidate: a warning that
/// says what the Role lacks, and the election goes on.
#[test]
fn a_role_without_leasecandidates_warns_and_the_election_goes_on() {
    let api = kube_server::start_exact("team", Flavor::GateOff);
    let dir = tempfile::tempdir().expect("dir");
    let a = Sidecar::spawn("rbac-a", dir.path(), &candidate_args(&*api, "rbac"));
    eventually(Duration::from_secs(10), || leads(&a).then_some(())).expect("a leads");
    let said = eventually(Duration::from_secs(5), || {
        let err = a.stderr();
        (err.contains("cannot list the LeaseCandidate") && err.contains("leaseCandidate.enabled"))
            .then_some(())
    });
    said.unwrap_or_else(|| panic!("no clear warning: {}", a.stderr()));
    assert!(
        api.forbidden()
            .iter()
            .all(|f| f == "list leasecandidates in team"),
        "{:?}",
        api.forbidden()
    );
    let b = Sidecar::spawn("rbac-b", dir.path(), &candidate_args(&*api, "rbac"));
    b.settles_in("follower", Duration::from_secs(10));
    assert!(leads(&a));
}

async fn client(api: &dyn KubeApi) -> kube::Client {
    // As main.rs does: one TLS provider for the process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = api.kubeconfig();
    leasekeeper::kube_api::client(Some(Path::new(&kubeconfig)))
        .await
        .expect("client")
}

async fn backend(api: &dyn KubeApi, identity: &str, lease_candidate: bool) -> KubeBackend {
    let timing = Timing::for_ttl(Duration::from_secs(3));
    let candidacy = Candidacy {
        election: "switch",
        identity,
        timing: &timing,
        mode: Default::default(),
    };
    let settings = KubeSettings {
        lease_candidate,
        ..KubeSettings::default()
    };
    KubeBackend::new(client(api).await, "team", &candidacy, settings)
}

/// A follower's loop: campaigns until it acquires, waiting for changes between; the
/// moment it acquired.
async fn follow(mut b: KubeBackend) -> (KubeBackend, Instant) {
    loop {
        if let Ok(Campaign::Acquired { .. }) = b.campaign().await {
            return (b, Instant::now());
        }
        while b.wait_for_change(Duration::from_secs(1)).await == Wake::Waiting {}
    }
}

/// A switchover on the Lease backend: `release_to(C)` hands the Lease to C in one
/// write at the resourceVersion (`holderIdentity: C`, no `acquireTime`, a ttl), as the
/// API server's coordinator hands a Lease to its pick; C takes it at once with a write
/// of its own (its `acquireTime`, a greater token); B (also waiting) does not. The
/// hand-over carries no `preferredHolder`: without the CoordinatedLeaderElection gate
/// (the default) the API server drops that field, and with it refuses it without
/// `strategy`. Runs on both: the gate off, and on (no LeaseCandidates: no coordinator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_to_hands_the_lease_to_the_named_candidate() {
    for flavor in [Flavor::GateOff, Flavor::Coordinated] {
        let api = kube_server::start("team", flavor);
        hand_over_to_the_named_candidate(&*api).await;
    }
}

async fn hand_over_to_the_named_candidate(api: &dyn KubeApi) {
    let mut a = backend(api, "sw-a", false).await;
    let (b, c) = (
        backend(api, "sw-b", false).await,
        backend(api, "sw-c", false).await,
    );
    let Ok(Campaign::Acquired { token }) = a.campaign().await else {
        panic!("sw-a leads first");
    };
    let b = tokio::spawn(follow(b));
    let c = tokio::spawn(follow(c));
    // Unobserved: B and C wait on their watches (inside the backends) before the release.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    a.release_to("sw-c").await.expect("release_to");
    let (_c, c_at) = tokio::time::timeout(Duration::from_secs(2), c)
        .await
        .expect("sw-c takes the Lease at once")
        .expect("task");
    assert!(
        c_at - released < Duration::from_millis(500),
        "{:?}",
        c_at - released
    );
    let lease = api.lease("switch").expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "sw-c");
    // B sat out: it takes the Lease only when sw-c's record expires (3 s, unrenewed).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !b.is_finished(),
        "sw-b took the Lease: {:?}",
        api.lease("switch")
    );
    b.abort();
    let writes: Vec<Value> = api
        .lease_writes("switch")
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    let handed = writes
        .iter()
        .position(|spec| spec["holderIdentity"] == "sw-c")
        .expect("a hand-over write");
    let (hand, taken) = (&writes[handed], &writes[handed + 1]);
    assert!(hand["acquireTime"].is_null(), "{hand}");
    assert!(hand["preferredHolder"].is_null(), "{hand}");
    assert_eq!(hand["leaseDurationSeconds"], 3, "{hand}");
    assert_eq!(hand["leaseTransitions"].as_u64(), Some(token), "{hand}");
    assert_eq!(taken["holderIdentity"], "sw-c", "{taken}");
    assert!(!taken["acquireTime"].is_null(), "{taken}");
    assert!(taken["leaseTransitions"].as_u64() > Some(token), "{taken}");
    assert_eq!(api.blind_writes(), 0);
    assert!(a
        .campaign()
        .await
        .is_ok_and(|c| !matches!(c, Campaign::Acquired { .. })));
    api.delete_lease("switch");
}

/// A record naming us without an `acquireTime` that we did not write is handed to us
/// (above); one naming us *with* an `acquireTime` we did not write is a second process
/// with our identity: a rival, waited out, never adopted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_with_our_name_and_an_acquire_time_is_not_adopted() {
    let api = kube_server::start("team", Flavor::GateOff);
    let now = micros(SystemTime::now());
    api.put_lease_spec(
        "switch",
        json!({"holderIdentity": "sw-a", "leaseDurationSeconds": 3, "acquireTime": now,
               "renewTime": now, "leaseTransitions": 4}),
    );
    let mut a = backend(&*api, "sw-a", false).await;
    let found = a.campaign().await.expect("campaign");
    assert!(!matches!(found, Campaign::Acquired { .. }), "{found:?}");
    api.put_lease_spec(
        "switch",
        json!({"holderIdentity": "sw-a", "leaseDurationSeconds": 5, "renewTime": now,
               "leaseTransitions": 4}),
    );
    let found = a.campaign().await.expect("campaign");
    assert!(
        matches!(found, Campaign::Acquired { token } if token > 4),
        "{found:?}"
    );
}

/// On a graceful stop the sidecar deletes its own LeaseCandidate (the coordinator would
/// otherwise ping it and wait 5 s for an answer before the next election), within the
/// chart's rule.
#[test]
fn a_graceful_stop_withdraws_the_lease_candidate() {
    let api = kube_server::start("team", Flavor::GateOffWithCandidates);
    let dir = tempfile::tempdir().expect("dir");
    let mut a = Sidecar::spawn("cand-w", dir.path(), &candidate_args(&*api, "cand"));
    eventually(Duration::from_secs(10), || api.lease_candidate("cand-w")).expect("created");
    a.terminate(Duration::from_secs(10));
    assert!(api.lease_candidate("cand-w").is_none(), "{}", a.stderr());
    assert!(api.forbidden().is_empty(), "{:?}", api.forbidden());
}

/// A LeaseCandidate written as another client (a candidate of this or another Lease).
fn other_candidate(api: &dyn KubeApi, name: &str, lease: &str, renewed: SystemTime) {
    api.put_lease_candidate(
        name,
        json!({
            "leaseName": lease, "binaryVersion": "1.0.0", "emulationVersion": "1.0.0",
            "strategy": "OldestEmulationVersion", "renewTime": micros(renewed),
        }),
    );
}

/// `candidates()` with --lease-candidate: the identities of the LeaseCandidates of this
/// Lease renewed within ten minutes (this one's too); None without the flag, and None
/// when the API server does not serve LeaseCandidates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_are_the_live_lease_candidates_of_the_lease() {
    let api = kube_server::start("team", Flavor::GateOffWithCandidates);
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    other_candidate(&*api, "sw-gone", "switch", hour_ago);
    other_candidate(&*api, "sw-elsewhere", "another-lease", SystemTime::now());
    other_candidate(
        &*api,
        "sw-d",
        "switch",
        SystemTime::now() - Duration::from_secs(300),
    );
    let mut a = backend(&*api, "sw-a", true).await;
    let _b = backend(&*api, "sw-b", true).await;
    let _c = backend(&*api, "sw-c", true).await;
    let want: Vec<String> = ["sw-a", "sw-b", "sw-c", "sw-d"].map(str::to_owned).to_vec();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = None;
    while Instant::now() < deadline {
        got = a.candidates().await.expect("candidates");
        if got.as_ref() == Some(&want) {
            break;
        }
        // Pause: between looks at the list.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(got, Some(want));
    let mut plain = backend(&*api, "sw-e", false).await;
    assert_eq!(plain.candidates().await.expect("candidates"), None);
    assert!(api.forbidden().is_empty(), "{:?}", api.forbidden());

    let old = FakeKube::start_granting_lease_candidates("team");
    old.serve_lease_candidates(false);
    let mut a = backend(&old, "sw-a", true).await;
    assert_eq!(a.candidates().await.expect("candidates"), None);
}

/// The fake keeps the API's rules for LeaseCandidates (or the tests above prove
/// nothing): discovery, 422 for what validation refuses, 409 on a stale version, 404
/// when the group version is not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_serves_lease_candidates_as_the_api_does() {
    let api = FakeKube::start_granting_lease_candidates("team");
    let client = client(&api).await;
    let found = client
        .list_api_group_resources("coordination.k8s.io/v1beta1")
        .await
        .expect("discovery");
    assert!(found
        .resources
        .iter()
        .any(|r| r.name == "leasecandidates" && r.namespaced));
    let candidates: Api<LeaseCandidate> = Api::namespaced(client.clone(), "team");
    let code = |r: Result<LeaseCandidate, kube::Error>| match r {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("{e}"),
    };
    let make = |name: &str, spec: LeaseCandidateSpec| LeaseCandidate {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec,
    };
    let good = LeaseCandidateSpec {
        lease_name: "l".to_owned(),
        binary_version: "1.0.0".to_owned(),
        emulation_version: Some("1.0.0".to_owned()),
        strategy: "OldestEmulationVersion".to_owned(),
        ..LeaseCandidateSpec::default()
    };
    let pp = PostParams::default();
    let no_emulation = LeaseCandidateSpec {
        emulation_version: None,
        ..good.clone()
    };
    assert_eq!(
        code(candidates.create(&pp, &make("x", no_emulation)).await),
        422
    );
    assert_eq!(
        code(candidates.create(&pp, &make("Not_DNS", good.clone())).await),
        422
    );
    let created = candidates
        .create(&pp, &make("x", good.clone()))
        .await
        .expect("create");
    assert_eq!(
        code(candidates.create(&pp, &make("x", good.clone())).await),
        409
    );
    let mut moved = created.clone();
    moved.spec.lease_name = "other".to_owned();
    assert_eq!(code(candidates.replace("x", &pp, &moved).await), 422);
    let renewed = candidates
        .replace("x", &pp, &created)
        .await
        .expect("replace");
    assert_ne!(
        renewed.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(code(candidates.replace("x", &pp, &created).await), 409);
    api.serve_lease_candidates(false);
    let gone = client
        .list_api_group_resources("coordination.k8s.io/v1beta1")
        .await;
    assert!(matches!(gone, Err(kube::Error::Api(s)) if s.code == 404));
    let listed = candidates.list(&Default::default()).await;
    assert!(matches!(listed, Err(kube::Error::Api(s)) if s.code == 404));
    // Outside the chart's rule (deletecollection is not granted): 403.
    api.serve_lease_candidates(true);
    let deleted = candidates
        .delete_collection(&Default::default(), &Default::default())
        .await;
    assert!(matches!(deleted, Err(kube::Error::Api(s)) if s.code == 403));
}

/// After a switchover the new leader's Lease still names it as `preferredHolder`; its
/// own plain release must not leave the free Lease to itself (a ttl without a leader):
/// the waiting candidate takes it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_switchover_the_new_leaders_release_is_free_for_all() {
    let api = kube_server::start("team", Flavor::GateOff);
    let mut a = backend(&*api, "sw-a", false).await;
    let c = backend(&*api, "sw-c", false).await;
    assert!(matches!(a.campaign().await, Ok(Campaign::Acquired { .. })));
    let c = tokio::spawn(follow(c));
    // Unobserved: C waits on its watch (inside the backend) before the release.
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.release_to("sw-c").await.expect("release_to");
    let (mut c, _) = tokio::time::timeout(Duration::from_secs(2), c)
        .await
        .expect("sw-c takes the Lease")
        .expect("task");
    let a = tokio::spawn(follow(a));
    // Unobserved: A waits on its watch (inside the backend) before the release.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    c.release().await.expect("release");
    let (_a, a_at) = tokio::time::timeout(Duration::from_secs(2), a)
        .await
        .unwrap_or_else(|_| panic!("sw-a waits: {:?}", api.lease("switch")))
        .expect("task");
    assert!(
        a_at - released < Duration::from_millis(500),
        "{:?}",
        a_at - released
    );
}

/// See [`common::scenarios::handovers::switchover_goes_to_the_named_candidate`]: with
/// `--lease-candidate`, an unknown candidate is refused; the switchover itself goes
/// through `preferredHolder`.
#[test]
fn switchover_goes_to_the_named_candidate() {
    let api = kube_server::start_exact("team", Flavor::GateOffWithCandidates);
    let args = candidate_args(&*api, "switch");
    common::scenarios::handovers::switchover_goes_to_the_named_candidate(&args);
}

/// Without `--lease-candidate` the Lease keeps no list of candidates: the switchover
/// goes ahead (the command then reports whether the named one took the Lease).
#[test]
fn switchover_without_lease_candidates_goes_to_the_named_candidate() {
    let api = kube_server::start("team", Flavor::GateOff);
    let args = SidecarArgs::kubernetes(&api.kubeconfig())
        .ttl("2s")
        .election("switch-plain")
        .build();
    common::scenarios::handovers::switchover_goes_to_the_named_candidate(&args);
}

/// The Lease's store rules, each reached directly at library level (every store rule
/// pinned by a fast test), on the fake and on a real API server alike.
///
/// Compare-and-act renew: with its own-record watch never polled (blind), a leader
/// whose record another client overwrote (at the right resourceVersion) must not
/// extend it: its renew names the version it wrote, gets 409, reads, and reports the
/// loss; the intruder's record stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_never_overwrites_a_record_another_client_wrote() {
    let api = kube_server::start("team", Flavor::GateOff);
    let mut a = backend(&*api, "rule-a", false).await;
    assert!(matches!(a.campaign().await, Ok(Campaign::Acquired { .. })));
    let now = micros(SystemTime::now());
    api.put_lease_spec(
        "switch",
        json!({"holderIdentity": "intruder", "leaseDurationSeconds": 30, "acquireTime": now,
               "renewTime": now, "leaseTransitions": 100}),
    );
    let renewed = a.renew().await.expect("renew");
    assert!(
        matches!(renewed, leasekeeper::backend::Renewal::Lost),
        "{renewed:?}"
    );
    let lease = api.lease("switch").expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "intruder", "{lease}");
    assert_eq!(api.blind_writes(), 0);
}

/// The expiry judgement: a candidate that never saw the record measures a whole
/// `leaseDurationSeconds` from the moment *it* first saw it, never from `renewTime`
/// (another host's clock): a record whose renewTime is an hour old is not taken at
/// once, and is taken once it stood still for its duration here. The token of that
/// new tenure is above the record's `leaseTransitions`, for a fresh candidate too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_candidate_judges_expiry_by_its_own_clock_and_tokens_grow() {
    let api = kube_server::start("team", Flavor::GateOff);
    let old = micros(SystemTime::now() - Duration::from_secs(3600));
    api.put_lease_spec(
        "switch",
        json!({"holderIdentity": "gone", "leaseDurationSeconds": 2, "acquireTime": old,
               "renewTime": old, "leaseTransitions": 41}),
    );
    let mut a = backend(&*api, "rule-f", false).await;
    let first = a.campaign().await.expect("campaign");
    assert!(
        !matches!(first, Campaign::Acquired { .. }),
        "taken at once by renewTime: {first:?}"
    );
    // The rule: the record is taken only once renewTime + its duration (2 s) has passed.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    match a.campaign().await.expect("campaign") {
        Campaign::Acquired { token } => assert!(token > 41, "token {token}"),
        other => panic!("not taken after its duration: {other:?}"),
    }
}
