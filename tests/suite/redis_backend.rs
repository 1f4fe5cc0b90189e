//! The redis backend against a real redis-server: the election checker with
//! leader and server faults, data loss on restart, auth, and the HTTP surface.

use crate::common;

use std::time::{Duration, Instant};

use common::checks::checker::{self, Fault};
use common::harness::faults::Link;
use common::servers::redis_server::RedisServer;
use common::{eventually, harness::http, Sidecar, SidecarArgs};

#[test]
fn redis_election_survives_the_checker() {
    use Fault::*;
    let mut server = RedisServer::start_persistent();
    let args = SidecarArgs::redis(&server.url()).election("checker");
    #[rustfmt::skip]
    let pattern = [
        Graceful, Kill9, Graceful, PauseLeader, Graceful, PauseServer, Graceful,
        Release, Kill9, Graceful, RestartServer, Graceful, Graceful, Graceful,
    ];
    let run = checker::Run::new(1, checker::cycle(56, &pattern)).min_claims(50);
    run.on("redis", args, &mut server);
}

/// A restart that loses all data (no persistence) while a leader still holds its
/// claim: without the quarantine, another candidate could lead at once.
#[test]
fn a_server_that_loses_its_data_never_yields_two_leaders() {
    use Fault::*;
    let mut server = RedisServer::start();
    let args = SidecarArgs::redis(&server.url()).election("checker");
    let rounds = vec![
        RestartServer,
        Graceful,
        RestartServer,
        Kill9,
        RestartServer,
        RestartServer,
    ];
    let run = checker::Run::new(1, rounds).losing_data();
    run.on("redis data loss", args, &mut server);
}

#[test]
fn an_unreachable_server_at_start_is_not_bad_input() {
    let dir = tempfile::tempdir().expect("dir");
    let port = common::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let sidecar = Sidecar::spawn(
        "early",
        dir.path(),
        &SidecarArgs::redis(&url)
            .ttl("2s")
            .election("checker")
            .build(),
    );
    assert!(
        sidecar.wait_listening(Duration::from_secs(10)),
        "{}",
        sidecar.stderr()
    );
    // Its first round has failed (nothing listens on the port), and it runs on.
    assert!(
        sidecar.logged("backend call failed", Duration::from_secs(20)),
        "{}",
        sidecar.stderr()
    );
    assert_eq!(
        http::get(sidecar.port, "/readyz").map(|(c, _)| c),
        Some(503)
    );
    let v = sidecar.leader().expect("/leader answers");
    assert_eq!(v["state"], "unknown");
    assert_eq!(v["is_leader"], false);
    assert_eq!(v["leader"], serde_json::Value::Null);

    // The server appears on that port: the sidecar finds it and leads.
    let _server = RedisServer::start_on(port);
    let led = eventually(Duration::from_secs(10), || {
        sidecar.leader().filter(|v| v["is_leader"] == true)
    });
    assert!(
        led.is_some(),
        "never led once the server came up:\n{}",
        sidecar.stderr()
    );
    assert_eq!(
        http::get(sidecar.port, "/readyz").map(|(c, _)| c),
        Some(200)
    );
}

#[test]
fn password_from_a_file_and_acl_user_in_the_url() {
    let server = RedisServer::start();
    assert!(server
        .command("ACL SETUSER elector on >s3cret ~* &* +@all")
        .is_some_and(|r| r.starts_with("+OK")));
    assert!(server.command("ACL SETUSER default off").is_some());
    let dir = tempfile::tempdir().expect("dir");
    let pw = dir.path().join("password");
    std::fs::write(&pw, "s3cret\n").expect("write");
    let mut args = SidecarArgs::redis(&format!("redis://elector@127.0.0.1:{}", server.port))
        .ttl("2s")
        .election("checker")
        .build();
    args.extend(["--redis-password-file".into(), pw.display().to_string()]);
    let sidecar = Sidecar::spawn("authed", dir.path(), &args);
    let led = eventually(Duration::from_secs(10), || {
        sidecar.leader().filter(|v| v["is_leader"] == true)
    });
    assert!(
        led.is_some(),
        "never led with ACL auth:\n{}",
        sidecar.stderr()
    );
    assert!(
        !sidecar.stderr().contains("s3cret"),
        "the password reached the log"
    );
}

#[test]
fn metrics_and_watch_follow_a_handover() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    // ttl 10 s: a lock left to expire goes 6.7 s or more after the SIGTERM, past the
    // takeover's bound below.
    let args = SidecarArgs::redis(&server.url())
        .ttl("10s")
        .election("checker")
        .build();
    let mut a = Sidecar::spawn("alpha", dir.path(), &args);
    assert!(eventually(Duration::from_secs(10), || a
        .leader()
        .filter(|v| v["is_leader"] == true))
    .is_some());
    let b = Sidecar::spawn("beta", dir.path(), &args);
    let follows = eventually(Duration::from_secs(10), || {
        b.leader().filter(|v| v["state"] == "follower")
    });
    assert_eq!(follows.expect("beta follows")["leader"], "alpha");

    let (code, text) = http::get(a.port, "/metrics").expect("metrics");
    assert_eq!(code, 200);
    for line in [
        "leasekeeper_is_leader 1",
        "leasekeeper_leader_transitions_total{direction=\"acquired\"} 1",
        "leasekeeper_build_info{version=\"0.1.0\",backend=\"redis\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let (_, text) = http::get(b.port, "/metrics").expect("metrics");
    assert!(text.contains("leasekeeper_is_leader 0"), "{text}");
    assert!(
        text.contains("leasekeeper_lease_remaining_seconds 0"),
        "{text}"
    );

    // The push stream: the current status at connect, then the change.
    let mut events = http::watch(b.port).expect("watch");
    let first: serde_json::Value =
        serde_json::from_str(&events.next().expect("first event")).expect("json");
    assert_eq!(first["leader"], "alpha");
    let t0 = Instant::now();
    a.signal(libc::SIGTERM);
    let took_over = events
        .map(|d| serde_json::from_str::<serde_json::Value>(&d).expect("json"))
        .find(|v| v["is_leader"] == true);
    assert!(took_over.is_some(), "no event for the takeover");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(
        a.wait_exit(Duration::from_secs(5)).map(|s| s.success()),
        Some(true)
    );
    let (_, text) = http::get(b.port, "/metrics").expect("metrics");
    assert!(text.contains("leasekeeper_is_leader 1"), "{text}");
}

/// The push stream carries the claim's deadline: the leader's stream has an event at
/// each renewal with the claim's fresh `lease_expires_in_ms` (not one event at the
/// start, then nothing), and no stream is silent for a ttl (keep-alives every ttl/3,
/// not every 15 s), so a subscriber of a frozen sidecar knows.
#[test]
fn watch_streams_carry_the_claims_deadline_and_never_go_quiet_for_a_ttl() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url())
        .ttl("3s")
        .election("sse")
        .build();
    let a = Sidecar::spawn("alpha", dir.path(), &args);
    a.settles_in("leader", Duration::from_secs(10));
    let b = Sidecar::spawn("beta", dir.path(), &args);
    b.settles_in("follower", Duration::from_secs(10));

    let t0 = Instant::now();
    let leading: Vec<serde_json::Value> = http::watch(a.port)
        .expect("watch")
        .take(4)
        .map(|d| serde_json::from_str(&d).expect("json"))
        .collect();
    assert_eq!(leading.len(), 4, "{leading:?} in {:?}", t0.elapsed());
    // Renewals every second: 3 s for four events; one per ttl would take 9 s.
    assert!(t0.elapsed() < Duration::from_secs(7), "{:?}", t0.elapsed());
    for v in &leading {
        assert_eq!(v["is_leader"], true, "{v}");
        let left = v["lease_expires_in_ms"].as_u64().unwrap_or(0);
        assert!(left > 1000 && left <= 3000, "{v}");
    }

    let mut lines = http::watch_raw(b.port).expect("watch");
    let mut last = Instant::now();
    let mut longest = Duration::ZERO;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let Some(line) = lines.next() else {
            longest = longest.max(last.elapsed());
            break;
        };
        if !line.is_empty() {
            longest = longest.max(last.elapsed());
            last = Instant::now();
        }
    }
    // Keep-alives every ttl/3 (1 s); silent for a ttl is what must not happen.
    assert!(
        longest < Duration::from_millis(2500),
        "a follower's stream was silent for {longest:?} (ttl 3 s)"
    );
}

#[test]
fn release_endpoint_hands_over_only_when_enabled() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url())
        .ttl("3s")
        .election("checker")
        .build();
    let plain = Sidecar::spawn("plain", dir.path(), &args);
    assert!(eventually(Duration::from_secs(10), || plain
        .leader()
        .filter(|v| v["is_leader"] == true))
    .is_some());
    let (code, body) = http::post(plain.port, "/release").expect("answer");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("--enable-release-endpoint"), "{body}");

    let mut with_release = args.clone();
    with_release.push("--enable-release-endpoint".into());
    let other = Sidecar::spawn("other", dir.path(), &with_release);
    assert!(eventually(Duration::from_secs(10), || other
        .leader()
        .filter(|v| v["state"] == "follower"))
    .is_some());
    assert_eq!(
        http::post(other.port, "/release").map(|(c, _)| c),
        Some(409),
        "a follower has nothing to release"
    );
    drop(plain);
    // Once `other` leads (after plain's lease expires), it can hand over on request.
    assert!(eventually(Duration::from_secs(10), || other
        .leader()
        .filter(|v| v["is_leader"] == true))
    .is_some());
    assert_eq!(
        http::post(other.port, "/release").map(|(c, _)| c),
        Some(200)
    );
    assert_eq!(
        http::get(other.port, "/is-leader").map(|(c, _)| c),
        Some(503)
    );
}

#[test]
fn unknown_paths_and_methods_get_json_errors() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let s = Sidecar::spawn(
        "paths",
        dir.path(),
        &SidecarArgs::redis(&server.url())
            .ttl("3s")
            .election("checker")
            .build(),
    );
    assert!(s.wait_listening(Duration::from_secs(10)));
    let (code, body) = http::get(s.port, "/nope").expect("answer");
    assert_eq!(code, 404);
    assert!(serde_json::from_str::<serde_json::Value>(&body).expect("json")["error"].is_string());
    let (code, body) = http::post(s.port, "/leader").expect("answer");
    assert_eq!(code, 405);
    assert!(serde_json::from_str::<serde_json::Value>(&body).expect("json")["error"].is_string());
    assert_eq!(http::get(s.port, "/healthz").map(|(c, _)| c), Some(200));
}

#[test]
fn rediss_with_a_private_ca_and_a_client_certificate() {
    let certs = tempfile::tempdir().expect("dir");
    common::make_certs(certs.path());
    let tls_port = common::free_port();
    let _server = RedisServer::start_tls(certs.path(), tls_port);
    let file = |n: &str| certs.path().join(n).display().to_string();
    let mut args = SidecarArgs::redis(&format!("rediss://127.0.0.1:{tls_port}"))
        .ttl("2s")
        .election("checker")
        .build();
    args.extend([
        "--redis-ca-file".into(),
        file("ca.pem"),
        "--redis-cert-file".into(),
        file("client.pem"),
        "--redis-key-file".into(),
        file("client.key"),
    ]);
    let dir = tempfile::tempdir().expect("dir");
    let secure = Sidecar::spawn("secure", dir.path(), &args);
    let led = eventually(Duration::from_secs(10), || {
        secure.leader().filter(|v| v["is_leader"] == true)
    });
    assert!(led.is_some(), "never led over TLS:\n{}", secure.stderr());

    // Without the client certificate the server refuses: the sidecar runs, unready.
    let mut no_client_cert = SidecarArgs::redis(&format!("rediss://127.0.0.1:{tls_port}"))
        .ttl("2s")
        .election("checker")
        .build();
    no_client_cert.extend(["--redis-ca-file".into(), file("ca.pem")]);
    let refused = Sidecar::spawn("refused", dir.path(), &no_client_cert);
    assert!(refused.wait_listening(Duration::from_secs(10)));
    // Its first round has failed (the handshake is refused), and it runs on.
    assert!(
        refused.logged("backend call failed", Duration::from_secs(20)),
        "{}",
        refused.stderr()
    );
    assert_eq!(
        http::get(refused.port, "/readyz").map(|(c, _)| c),
        Some(503)
    );
    assert_eq!(
        refused.leader().map(|v| v["state"].clone()),
        Some(serde_json::json!("unknown"))
    );
}

/// Invariant 9: the lock key deleted (`DEL`) or overwritten (`SET`) behind the
/// leader's back. A leader that did not track its own key would claim on until its
/// next renew, while a follower claimed after its retry interval.
#[test]
fn a_leader_whose_key_is_deleted_or_overwritten_steps_down_at_once() {
    use common::harness::tamper::{assert_recovered, candidates, tamper_with_leader};
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let sidecars = candidates(SidecarArgs::redis(&server.url()), dir.path());
    let lock = "leasekeeper:{tamper}:lock";

    let deleted = tamper_with_leader(&sidecars, Duration::from_millis(2000), |_| {
        server.command(&format!("DEL {lock}"));
    });
    eprintln!("deleted: {deleted:?}");
    assert_recovered(&deleted, Duration::from_millis(100));

    let overwritten = tamper_with_leader(&sidecars, Duration::from_millis(2000), |_| {
        server.command(&format!("SET {lock} intruder PX 3000"));
    });
    eprintln!("overwritten: {overwritten:?}");
    common::harness::tamper::assert_stopped_within(&overwritten, Duration::from_millis(500));
}

/// Invariant 11 and a gray failure on redis: a slow link (a long pipe, then a
/// congested queue) between the leader and the store; another candidate leads within
/// ttl + 1 s (its late requests are refused), and the slow one leads again once the link heals.
#[test]
fn a_slow_leader_on_a_long_pipe_gets_out_of_the_way() {
    slow_leader(Link::Delay(Duration::from_millis(1500)));
}

#[test]
fn a_slow_leader_on_a_congested_link_gets_out_of_the_way() {
    slow_leader(Link::Congested(Duration::from_millis(1200)));
}

fn slow_leader(link: Link) {
    let server = RedisServer::start();
    let store = server.addr();
    common::scenarios::handovers::slow_leader_is_replaced_within(
        &[store],
        Duration::from_secs(3),
        link,
        Duration::from_secs(4),
        |endpoints| {
            SidecarArgs::redis(&format!("redis://{}", endpoints[0]))
                .ttl("3s")
                .election("slow")
                .build()
        },
    );
}

/// Invariant 11, the way a slow candidate could keep the lock from everyone: its
/// campaign takes the lock at the store but the answer comes after the backend
/// timeout; were the next campaign (same nonce) to adopt that lock and extend it, again
/// too late to claim, that would go on for as long as the link stays slow. A campaign
/// without an answer in time gives back what it may have taken.
#[test]
fn a_slow_candidate_does_not_keep_the_lock_it_cannot_use() {
    use common::harness::faults::{FaultProxy, Link};
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let direct = SidecarArgs::redis(&server.url())
        .ttl("3s")
        .election("hoard")
        .build();
    let proxy = FaultProxy::start(server.addr());
    let slow_args = SidecarArgs::redis(&format!("redis://{}", proxy.addr()))
        .ttl("3s")
        .election("hoard")
        .build();

    let mut first = Sidecar::spawn("first", dir.path(), &direct);
    first.settles_in("leader", Duration::from_secs(10));
    let slow = Sidecar::spawn("slow", dir.path(), &slow_args);
    slow.settles_in("follower", Duration::from_secs(10));
    proxy.set(Link::Delay(Duration::from_millis(1200)));
    let status = first.terminate(Duration::from_secs(5));
    assert!(
        status.is_some_and(|s| s.success()),
        "graceful stop: {status:?}"
    );
    // Observed: the slow candidate's campaigns for 4 s (each too late to claim, given
    // back) before a healthy candidate comes.
    std::thread::sleep(Duration::from_secs(4));
    let late = Sidecar::spawn("late", dir.path(), &direct);
    let led = eventually(Duration::from_secs(8), || {
        late.leader().filter(|v| v["is_leader"] == true).map(|_| ())
    });
    assert!(
        led.is_some(),
        "a healthy candidate never led while the slow one held the lock: {:?}\n{}",
        server.command("GET leasekeeper:{hoard}:lock"),
        slow.stderr()
    );
    assert_ne!(
        slow.leader().map(|v| v["is_leader"] == true),
        Some(true),
        "the slow candidate claims"
    );
}

/// The checker's link and store faults on Redis (a short, deterministic round of each),
// judged also against the store's own record.
#[test]
fn redis_survives_partitions_slow_links_and_tampering() {
    use common::harness::recorder::Recorder;
    let server = RedisServer::start();
    let port = server.port;
    let store = Recorder::redis(port, "faults");
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
    let report = checker::run_link_faults(
        Duration::from_secs(1),
        rounds,
        format!("127.0.0.1:{port}").parse().expect("addr"),
        |addr| {
            SidecarArgs::redis(&format!("redis://{addr}"))
                .ttl("1s")
                .election("faults")
                .build()
        },
        store,
        move |fault| {
            let lock = "leasekeeper:{faults}:lock";
            let command = match fault {
                Fault::TamperDelete => format!("DEL {lock}"),
                _ => format!("SET {lock} x|0|intruder PX 1000"),
            };
            common::servers::redis_server::command_at(port, &command);
        },
    );
    eprintln!("redis faults: {report:?}");
}

/// A leader nobody disturbs keeps one tenure. Redis 7.0.15 pushes an invalidation for
/// a key a script of the tracking connection itself changed, NOLOOP or not: taken for a change by someone else, every renewal ended the tenure and a
/// new one began at once (three tenures a second at ttl 1 s).
#[test]
fn an_undisturbed_leader_keeps_one_tenure() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let leader = Sidecar::spawn(
        "alone",
        dir.path(),
        &SidecarArgs::redis(&server.url())
            .ttl("1s")
            .election("calm")
            .build(),
    );
    let first = leader.settles_in("leader", Duration::from_secs(15));
    // Observed: 3 s (three ttl) in which the leader must keep its tenure.
    std::thread::sleep(Duration::from_secs(3));
    let later = leader.leader().expect("status");
    assert_eq!(later["is_leader"], true, "{later}");
    assert_eq!(
        later["fencing_token"], first["fencing_token"],
        "the tenure changed without any fault: {first} then {later}"
    );
    assert!(
        !leader.stderr().contains("lost leadership"),
        "{}",
        leader.stderr()
    );
}

/// A former holder's announcement that reaches the followers after its successor's
/// (its link slow, or replayed by hand) names an older tenure: a follower keeps the
/// holder it follows instead of showing, for as long as that holder renews, one that
/// is gone.
#[test]
fn a_late_announcement_of_an_older_tenure_is_not_followed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url())
        .ttl("1s")
        .election("late")
        .build();
    let leader = Sidecar::spawn("a", dir.path(), &args);
    leader.settles_in("leader", Duration::from_secs(10));
    let follower = Sidecar::spawn("b", dir.path(), &args);
    let token = eventually(Duration::from_secs(10), || {
        let v = follower.leader()?;
        (v["leader"] == "a").then(|| v["fencing_token"].as_u64())?
    })
    .expect("the follower follows a");
    let stale = token.saturating_sub(1);
    let sent = server.command(&format!(
        "PUBLISH leasekeeper:{{late}}:leader acquired|0|{stale}|ghost"
    ));
    // Both sidecars listen.
    assert!(
        sent.as_deref().is_some_and(|r| r.starts_with(":2")),
        "PUBLISH: {sent:?}"
    );
    let strayed = eventually(Duration::from_secs(2), || {
        follower.leader().filter(|v| v["leader"] != "a")
    });
    assert!(
        strayed.is_none(),
        "the follower took an older tenure's announcement: {strayed:?}"
    );
}

/// Followers hear of the holder's renewals through CLIENT TRACKING pushes and send
/// nothing while it renews; they still follow a graceful handover at once and a
/// crashed holder within its ttl.
#[test]
fn followers_send_no_requests_while_the_holder_renews() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url())
        .ttl("2s")
        .election("quiet")
        .build();
    let mut cars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("quiet-{i}"), dir.path(), &args))
        .collect();
    assert!(
        common::scenarios::handovers::one_leads_the_rest_follow(&cars),
        "never one leader and two followers"
    );
    // Observed: the count starts 2 s after the followers follow (a join's last
    // commands come late on a busy machine).
    std::thread::sleep(Duration::from_secs(2));
    let (evals, gets) = (server.calls("evalsha"), server.calls("get"));
    // Observed: 6 s of steady leadership.
    std::thread::sleep(Duration::from_secs(6));
    let (evals, gets) = (server.calls("evalsha") - evals, server.calls("get") - gets);
    // The leader renews every ttl/3 (one EVALSHA each): about 9 in 6 s. Followers
    // polling at their retry interval would add about 18.
    eprintln!("in 6 s: {evals} scripts, {gets} reads");
    assert!((5..=12).contains(&evals), "{evals} scripts run in 6 s");
    // Reads inside scripts count too: one per renewal, the script's own GET. The
    // push of the leader's own renewal (Redis 7.0.15 pushes those, NOLOOP or not) is
    // not read back (reading it would be one more read per renewal), and the
    // followers read nothing.
    assert!(
        gets <= evals + 1,
        "{gets} reads in 6 s for {evals} renewals"
    );
    // A graceful handover and a crash are still followed.
    common::scenarios::handovers::handover_and_crash_still_followed(&mut cars);
}

/// No herd: a graceful handover wakes one follower (the one a release hands the baton
/// to), and the others name the new leader from its announcement without asking (nor
/// hear anything on the read-write lock's channel, which nobody waits for). With
/// 8 candidates, the handover (the release, the one look that takes the lock, and
/// whatever looks come up to a second after every follower names the new leader) runs
/// a few scripts, not one or two per follower; and every follower names the new leader
/// within 10 s (a generous bound; docs/backends.md states the real one; a lock left
/// to expire at ttl 30 s goes 20 s or more after the SIGTERM).
#[test]
fn a_graceful_handover_wakes_one_follower_not_all() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url())
        .ttl("30s")
        .election("baton")
        .build();
    let rw_heard = Heard::on(&server.url(), "leasekeeper:{baton}:rw");
    let mut cars: Vec<Sidecar> = (0..8)
        .map(|i| Sidecar::spawn(&format!("baton-{i}"), dir.path(), &args))
        .collect();
    for round in 0..2 {
        assert!(
            common::scenarios::handovers::one_leads_the_rest_follow(&cars),
            "never one leader and the rest following"
        );
        let li = cars
            .iter()
            .position(|c| c.leader().is_some_and(|v| v["is_leader"] == true))
            .expect("leader");
        // Every follower has looked since it joined (and names the holder).
        std::thread::sleep(Duration::from_secs(1));
        let scripts = || server.calls("evalsha") + server.calls("eval");
        let before = scripts();
        let rw_before = rw_heard.count();
        let mut old = cars.remove(li);
        old.terminate(Duration::from_secs(5)).expect("stopped");
        let named = eventually(Duration::from_secs(10), || {
            let new = cars
                .iter()
                .find_map(|c| c.leader().filter(|v| v["is_leader"] == true))?;
            let holder = new["identity"].clone();
            cars.iter()
                .all(|c| c.leader().is_some_and(|v| v["leader"] == holder))
                .then_some(())
        });
        assert!(
            named.is_some(),
            "round {round}: the followers did not all name the new leader within 10 s"
        );
        // Observed: the count ends a second after every follower names the new leader.
        std::thread::sleep(Duration::from_secs(1));
        let ran = scripts() - before;
        eprintln!("round {round}: {ran} scripts for a handover among 8");
        // The release, the take, and a spare look; one per follower would be 8 or more.
        assert!(
            ran <= 4,
            "round {round}: {ran} scripts run for one handover"
        );
        // Nobody waits for the read-write lock: a message there would wake every
        // candidate's listener during the handover.
        let rw = rw_heard.count() - rw_before;
        assert_eq!(
            rw, 0,
            "round {round}: {rw} messages on the read-write channel"
        );
    }
}

/// Counts the messages published on one Redis channel, from a subscriber of its own.
struct Heard {
    count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Heard {
    /// Subscribes to `channel` on the server at `url` and returns once subscribed.
    fn on(url: &str, channel: &str) -> Heard {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let count = std::sync::Arc::new(AtomicUsize::new(0));
        let client = redis::Client::open(url).expect("client");
        let mut con = client.get_connection().expect("connect");
        let (subscribed, ready) = std::sync::mpsc::channel();
        let (counted, channel) = (count.clone(), channel.to_owned());
        std::thread::spawn(move || {
            let mut sub = con.as_pubsub();
            sub.subscribe(&channel).expect("subscribe");
            let _ = subscribed.send(());
            // Ends with the server (the test's end drops it).
            while sub.get_message().is_ok() {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        ready.recv().expect("subscribed");
        Heard { count }
    }

    fn count(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Followers read the holder's pushes at the renew interval the fleet is configured
/// with, not at the default's ttl/3. With the thresholds fixed at ttl/6 and 3/4 ttl, a
/// renew interval of 300 ms at ttl 3 s made every renewal look "too soon" (someone
/// else's change), and every follower ran the script again at each one.
#[test]
fn followers_stay_quiet_with_a_short_renew_interval() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let mut args = SidecarArgs::redis(&server.url())
        .ttl("3s")
        .election("cadence")
        .build();
    args.extend(["--renew-interval".to_owned(), "300ms".to_owned()]);
    let cars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("cadence-{i}"), dir.path(), &args))
        .collect();
    assert!(
        common::scenarios::handovers::one_leads_the_rest_follow(&cars),
        "never one leader and two followers"
    );
    // Observed: the count starts a second after the followers follow.
    std::thread::sleep(Duration::from_secs(1));
    let before = server.calls("evalsha");
    // Observed: 3 s of steady leadership.
    std::thread::sleep(Duration::from_secs(3));
    let evals = server.calls("evalsha") - before;
    // The leader renews about 10 times in 3 s; followers that looked at each renewal
    // would add about 20.
    eprintln!("in 3 s: {evals} scripts");
    assert!((5..=16).contains(&evals), "{evals} scripts run in 3 s");
}

/// A graceful release is one request, whatever scripts the server has cached: on a
/// server that never ran the release script (a restart, a failover, `SCRIPT FLUSH`),
/// EVALSHA would cost NOSCRIPT, SCRIPT LOAD and EVALSHA again, three round trips that
/// do not fit the release budget on a slow link.
#[test]
fn a_release_is_one_request_on_a_server_without_the_script() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    // A long renew interval: no renewal falls between the flush and the release.
    let args = SidecarArgs::redis(&server.url())
        .ttl("15s")
        .election("one-trip")
        .build();
    let mut leader = Sidecar::spawn("r1", dir.path(), &args);
    leader.settles_in("leader", Duration::from_secs(10));
    server.command("SCRIPT FLUSH");
    server.command("CONFIG RESETSTAT");
    assert!(
        leader.terminate(Duration::from_secs(5)).is_some(),
        "no graceful exit"
    );
    let exists = server.command("EXISTS leasekeeper:{one-trip}:lock");
    assert_eq!(
        exists.as_deref().map(str::trim),
        Some(":0"),
        "the lock was not released"
    );
    let (scripts, evalsha, eval) = (
        server.calls("script|load") + server.calls("script"),
        server.calls("evalsha"),
        server.calls("eval"),
    );
    assert_eq!(
        (scripts, evalsha, eval),
        (0, 0, 1),
        "the release took SCRIPT LOAD, EVALSHA, EVAL calls"
    );
}

/// See [`common::scenarios::handovers::switchover_goes_to_the_named_candidate`].
#[test]
fn switchover_goes_to_the_named_candidate() {
    let server = RedisServer::start();
    let args = SidecarArgs::redis(&server.url())
        .ttl("3s")
        .election("switch")
        .build();
    common::scenarios::handovers::switchover_goes_to_the_named_candidate(&args);
}

// ---------------------------------------------------------------------------------
// The store's own rules, each reached directly: candidates built as the sidecar
// builds them and driven through the `Backend` trait one call at a time (no elector,
// so nobody watches a leader's own key: the rule under test is the only defence).

mod rules {
    use std::time::Duration;

    use leasekeeper::backend::redis::{Args, RedisBackend};
    use leasekeeper::backend::{Backend, Campaign, Candidacy, Renewal, Wake};
    use leasekeeper::timing::Timing;

    use crate::common::scenarios::backend_switchover::runtime;
    use crate::common::servers::redis_server::{client_field, RedisServer};

    pub fn candidate(url: &str, election: &str, identity: &str, ttl: Duration) -> RedisBackend {
        let settings = Args {
            redis_url: vec![url.to_owned()],
            ..Default::default()
        }
        .single()
        .expect("redis settings");
        let timing = Timing::for_ttl(ttl);
        RedisBackend::new(
            &settings,
            &Candidacy {
                election,
                identity,
                timing: &timing,
                mode: Default::default(),
            },
        )
        .expect("backend")
    }

    pub async fn leads(who: &str, b: &mut RedisBackend) -> u64 {
        match b.campaign().await {
            Ok(Campaign::Acquired { token }) => token,
            other => panic!("{who} should lead now, its campaign found {other:?}"),
        }
    }

    pub async fn does_not_lead(who: &str, b: &mut RedisBackend) {
        let c = b.campaign().await.expect("campaign");
        assert!(
            !matches!(c, Campaign::Acquired { .. }),
            "{who} must not lead now: {c:?}"
        );
    }

    fn lock(election: &str) -> String {
        format!("leasekeeper:{{{election}}}:lock")
    }

    /// A key taken by another between the take and the tracking read (two requests:
    /// the read also turns tracking on, so that every later change is pushed) is not
    /// claimed: the leader's link is slow (300 ms each way), and the key is
    /// overwritten right after the take ran at the server.
    #[test]
    fn a_key_taken_between_the_take_and_the_tracking_read_is_not_claimed() {
        use crate::common::harness::faults::{FaultProxy, Link};
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.addr());
        let ttl = Duration::from_secs(30);
        let rt = runtime();
        let mut a = rt.block_on(async {
            let mut a = candidate(&format!("redis://{}", proxy.addr()), "between", "A", ttl);
            // A follower first: its tracking is on before the slow campaign.
            let mut b = candidate(&server.url(), "between", "B", ttl);
            leads("B", &mut b).await;
            does_not_lead("A", &mut a).await;
            b.release().await.expect("release");
            a
        });
        proxy.set(Link::Delay(Duration::from_millis(300)));
        let campaign = rt.spawn(async move { a.campaign().await });
        let key = lock("between");
        let took = crate::common::eventually(Duration::from_secs(5), || {
            let v = server.command(&format!("GET {key}")).unwrap_or_default();
            v.contains("|A").then_some(())
        });
        assert!(took.is_some(), "A's take never ran");
        server.command(&format!("SET {key} ffff|999|C PX 30000"));
        let found = rt.block_on(campaign).expect("campaign task");
        assert!(
            !matches!(found, Ok(Campaign::Acquired { .. })),
            "A claimed a key C took between A's take and its tracking read: {found:?}"
        );
    }

    /// One way of A's slow link in the baton tests below.
    const HALF: Duration = Duration::from_millis(300);

    /// B leads and A, on a slow link (`HALF` each way, through `proxy`), waits for
    /// the baton (its `BLPOP` blocked at the server) when B lets go.
    fn a_waits_for_bs_baton(
        rt: &tokio::runtime::Runtime,
        (server, proxy): (&RedisServer, &crate::common::harness::faults::FaultProxy),
        election: &str,
    ) -> tokio::task::JoinHandle<(RedisBackend, Wake)> {
        let ttl = Duration::from_secs(30);
        let (mut a, mut b) = rt.block_on(async {
            let mut a = candidate(&format!("redis://{}", proxy.addr()), election, "A", ttl);
            let mut b = candidate(&server.url(), election, "B", ttl);
            leads("B", &mut b).await;
            does_not_lead("A", &mut a).await;
            (a, b)
        });
        proxy.set(crate::common::harness::faults::Link::Delay(HALF));
        let blocked = || {
            let clients = server.command("CLIENT LIST").unwrap_or_default();
            (clients.lines())
                .any(|l| client_field(l, "cmd") == Some("blpop"))
                .then_some(())
        };
        // A wait ends at once on a look its listener asked for (its subscription's
        // first): A looks again then, and waits again, until a wait stands.
        for _ in 0..5 {
            let waiting = rt.spawn(async move {
                let woke = a.wait_for_change(Duration::from_secs(20)).await;
                (a, woke)
            });
            let armed = crate::common::eventually(Duration::from_secs(5), blocked);
            assert!(armed.is_some(), "A's baton wait never reached the server");
            // Longer than a look's round trip on A's link.
            std::thread::sleep(4 * HALF);
            if !waiting.is_finished() {
                rt.block_on(b.release()).expect("B's release");
                return waiting;
            }
            a = rt.block_on(waiting).expect("A's wait").0;
            rt.block_on(does_not_lead("A", &mut a));
        }
        panic!("A's wait never stood");
    }

    /// The one follower a graceful release wakes (its baton) takes the lock, turns the
    /// holder's tracking on and reads the key in one round trip (a take, then the
    /// tracking read, are two), and then hears its key taken as any leader does
    /// (invariant 9): the intruder's key lives 30 s, so only the tracking push can end
    /// the wait in time.
    #[test]
    fn the_follower_a_baton_wakes_claims_in_one_round_trip_and_hears_its_key() {
        use crate::common::harness::faults::FaultProxy;
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.addr());
        let rt = runtime();
        let waiting = a_waits_for_bs_baton(&rt, (&server, &proxy), "baton-claim");
        let (mut a, woke) = rt.block_on(waiting).expect("A's wait");
        assert_eq!(woke, Wake::Changed, "the baton woke A");
        let started = std::time::Instant::now();
        rt.block_on(leads("A", &mut a));
        let took = started.elapsed();
        // One round trip is 2 * HALF; a second one would be at least 4 * HALF.
        assert!(
            took < 4 * HALF - Duration::from_millis(100),
            "A's claim after the baton took {took:?}: more than one round trip"
        );
        server.command(&format!(
            "SET {} 1|intruder|x PX 30000",
            lock("baton-claim")
        ));
        let heard = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), a.record_lost()).await
        });
        assert!(
            heard.is_ok(),
            "A, leading after a baton, never heard its key taken"
        );
    }

    /// The follower a baton woke, whose take finds the lock taken meanwhile (an
    /// intruder's key, written before A's take reaches the server), follows the holder
    /// with the follower's tracking on again (its take turned the holder's on): a
    /// write of the renewals' key is heard at once (pushed, too soon for a renewal, so
    /// A looks after a grace), not at the holder's expiry 30 s away.
    #[test]
    fn a_take_after_a_baton_that_finds_the_lock_taken_tracks_the_renewals_again() {
        use crate::common::harness::faults::FaultProxy;
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.addr());
        let rt = runtime();
        let election = "baton-lost";
        let waiting = a_waits_for_bs_baton(&rt, (&server, &proxy), election);
        server.command(&format!("SET {} ffff|999|C PX 30000", lock(election)));
        let (mut a, woke) = rt.block_on(waiting).expect("A's wait");
        assert_eq!(woke, Wake::Changed, "the baton woke A");
        rt.block_on(does_not_lead("A", &mut a));
        server.command(&format!(
            "SET leasekeeper:{{{election}}}:alive ffff|999|C PX 30000"
        ));
        let within = Duration::from_secs(5);
        let heard = rt
            .block_on(async { tokio::time::timeout(within, a.wait_for_change(within * 4)).await });
        assert!(
            heard.is_ok(),
            "A's tracking after its lost take did not cover the renewals"
        );
    }

    /// A leader whose key expired and was taken by another (its own-key watch blind:
    /// nobody polls it here): its renew must not extend the new holder's key (the
    /// renew is compare-and-PEXPIRE), and its release must not delete it
    /// (compare-and-DEL).
    #[test]
    fn renew_and_release_act_only_on_the_own_tenure() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(3);
        runtime().block_on(async {
            let mut a = candidate(&server.url(), "own", "A", ttl);
            let mut b = candidate(&server.url(), "own", "B", ttl);
            leads("A", &mut a).await;
            // A's key runs out (as if A were paused for a ttl); B takes the lease.
            server.command(&format!("DEL {}", lock("own")));
            leads("B", &mut b).await;
            server.command(&format!("PEXPIRE {} 1500", lock("own")));
            assert_eq!(
                a.renew().await.expect("A's renew answers"),
                Renewal::Lost,
                "A's renew extended B's key"
            );
            let pttl = server
                .command(&format!("PTTL {}", lock("own")))
                .unwrap_or_default();
            let pttl: i64 = pttl.trim().trim_start_matches(':').parse().expect("pttl");
            assert!(pttl <= 1500, "B's key was extended to {pttl} ms by A");
            a.release().await.expect("A's release answers");
            let value = server
                .command(&format!("GET {}", lock("own")))
                .unwrap_or_default();
            assert!(
                value.contains("|B"),
                "A's release deleted B's key: {value:?}"
            );
            assert_eq!(b.renew().await.expect("B renews"), Renewal::Renewed);
        });
    }

    /// A candidate that never saw an earlier tenure (a new Pod: its floor is 0) gets a
    /// greater token than every earlier tenure: the counter is bumped with every
    /// acquire, in the script that takes the key.
    #[test]
    fn a_fresh_candidate_gets_a_greater_token_than_every_earlier_tenure() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(3);
        runtime().block_on(async {
            let mut last = 0;
            for round in 0..3 {
                let mut fresh = candidate(&server.url(), "fence", &format!("P{round}"), ttl);
                let token = leads("fresh", &mut fresh).await;
                assert!(token > last, "round {round}: token {token} after {last}");
                last = token;
                if round == 1 {
                    // An expiry instead of a release.
                    server.command(&format!("DEL {}", lock("fence")));
                } else {
                    fresh.release().await.expect("release");
                }
            }
        });
    }

    /// After the server lost its data (restart without persistence, here FLUSHALL) a
    /// candidate that remembers a token fences the key for one ttl (a claim on the lost
    /// key may still run) and puts its floor into the counter, so that even a fresh
    /// candidate's token is greater afterwards.
    #[test]
    fn after_data_loss_the_floor_fences_for_a_ttl_and_tokens_go_on_above_it() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(1);
        runtime().block_on(async {
            let mut a = candidate(&server.url(), "loss", "A", ttl);
            let mut seen = 0;
            for _ in 0..3 {
                seen = leads("A", &mut a).await;
                a.release().await.expect("release");
            }
            server.command("FLUSHALL");
            does_not_lead("A (with its floor, right after the loss)", &mut a).await;
            let mut fresh = candidate(&server.url(), "loss", "F", ttl);
            does_not_lead("a fresh candidate, within the quarantine", &mut fresh).await;
            // The rule: the quarantine after the data loss lasts a ttl.
            tokio::time::sleep(ttl + Duration::from_millis(100)).await;
            let token = leads("the fresh candidate, a ttl later", &mut fresh).await;
            assert!(token > seen, "token {token} after the lost tenure's {seen}");
        });
    }

    /// `candidates()` lists every live candidate (its presence: a subscription), whoever
    /// asks, and no longer one that was dropped.
    #[test]
    fn the_live_candidates_are_listed() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(2);
        runtime().block_on(async {
            let make = |id| candidate(&server.url(), "live", id, ttl);
            let (mut a, mut b, mut c) = (make("A"), make("B"), make("C"));
            leads("A", &mut a).await;
            does_not_lead("B", &mut b).await;
            does_not_lead("C", &mut c).await;
            let listed = |x: Option<Vec<String>>| x.expect("a list");
            let until = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let seen = listed(a.candidates().await.expect("list"));
                if seen == ["A", "B", "C"] {
                    break;
                }
                assert!(tokio::time::Instant::now() < until, "listed {seen:?}");
                // Pause: between looks at the list.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(listed(b.candidates().await.expect("list")), ["A", "B", "C"]);
            drop(c);
            loop {
                let seen = listed(a.candidates().await.expect("list"));
                if seen == ["A", "B"] {
                    break;
                }
                assert!(tokio::time::Instant::now() < until, "listed {seen:?}");
                // Pause: between looks at the list.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    }

    /// Invariant 9 on Redis, reached directly: the leader's own-key watch
    /// (`record_lost`) ends when another client overwrites or deletes the key, and not
    /// on the leader's own renewals.
    #[test]
    fn the_leader_hears_its_key_taken_but_not_its_own_renewals() {
        let server = RedisServer::start();
        // A claim of 30 s: its end is no way to hear of the tampering in time either.
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let within = Duration::from_millis(800);
            // The intruder's key lives 30 s: only the tracking push can end the wait.
            for tamper in ["SET {} 1|intruder|x PX 30000", "DEL {}"] {
                let mut a = candidate(&server.url(), "heard", "A", ttl);
                leads("A", &mut a).await;
                for _ in 0..2 {
                    assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
                    let own = tokio::time::timeout(within, a.record_lost()).await;
                    assert!(own.is_err(), "A's own renewal read as its key lost");
                }
                server.command(&tamper.replace("{}", &lock("heard")));
                let heard = tokio::time::timeout(Duration::from_secs(5), a.record_lost()).await;
                assert!(heard.is_ok(), "A never heard of {tamper:?}");
                server.command(&format!("DEL {}", lock("heard")));
            }
        });
    }

    /// A leader whose tracking connection was lost (killed at the server; the client
    /// reconnects on its own, without tracking) turns tracking on again at its next
    /// renew, with a read of its key: the renew of a key still its own renews (no step-down for a
    /// reconnect), and a takeover afterwards is heard at once by the own-key watch
    /// (`record_lost`), not a renewal later.
    #[test]
    fn a_renew_after_a_lost_connection_tracks_the_key_again() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut a = candidate(&server.url(), "retrack", "A", ttl);
            leads("A", &mut a).await;
            let tracking = server.kill_the_tracking_connection();
            // The client has noticed (and said so on its push channel) once its new
            // connection shows at the server.
            let back = crate::common::eventually(Duration::from_secs(5), || {
                let clients = server.command("CLIENT LIST").unwrap_or_default();
                clients
                    .lines()
                    // Not this test's own connections (the kill's may linger).
                    .filter(|l| {
                        !matches!(client_field(l, "cmd"), Some("client|list" | "client|kill"))
                    })
                    .filter_map(|l| client_field(l, "id")?.parse::<u64>().ok())
                    .any(|id| id > tracking)
                    .then_some(())
            });
            assert!(back.is_some(), "A never reconnected");
            assert_eq!(
                a.renew().await.expect("A's renew answers"),
                Renewal::Renewed,
                "A's key is still its own"
            );
            server.command(&format!("SET {} 1|intruder|x PX 30000", lock("retrack")));
            // A's next renewal would be a ttl (30 s) away.
            let within = Duration::from_secs(10);
            let heard = tokio::time::timeout(within, a.record_lost()).await;
            assert!(heard.is_ok(), "A's tracking was not turned on again");
        });
    }

    /// The tracking connection killed while A leads, and no renewal after it: A's wait
    /// for news of its key (`record_lost`) turns tracking on again by itself, so a
    /// takeover right after is heard at once, not at A's next renewal (ttl 30 s).
    /// Before, the disconnect notice only switched tracking off, and the wait heard
    /// nothing until a renewal tracked again.
    #[test]
    fn a_leader_tracks_its_key_again_when_the_tracking_connection_dies() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut a = candidate(&server.url(), "retrack2", "A", ttl);
            leads("A", &mut a).await;
            server.kill_the_tracking_connection();
            let waiting = a.record_lost();
            tokio::pin!(waiting);
            // A waits (and hears of the lost connection) before anyone else writes.
            let early = tokio::time::timeout(Duration::from_millis(500), &mut waiting).await;
            assert!(early.is_err(), "A's wait ended with its key untouched");
            server.command(&format!("SET {} 1|intruder|x PX 30000", lock("retrack2")));
            let heard = tokio::time::timeout(Duration::from_secs(10), waiting).await;
            assert!(
                heard.is_ok(),
                "A did not hear its key taken after its tracking died"
            );
        });
    }

    /// A release whose connection dies while it is on its way (the server restarted:
    /// the request is held on the link meanwhile, so the client learns of the dead
    /// connection only from the release's own failure) is sent again on a fresh
    /// connection: the key is gone and a follower takes over at once, not a ttl (30 s)
    /// later.
    #[test]
    fn a_release_cut_by_a_server_restart_is_sent_again() {
        use crate::common::harness::faults::{FaultProxy, Link};
        let mut server = RedisServer::start_persistent();
        let proxy = FaultProxy::start(server.addr());
        let ttl = Duration::from_secs(30);
        let rt = runtime();
        let mut a = rt.block_on(async {
            let mut a = candidate(&format!("redis://{}", proxy.addr()), "again", "A", ttl);
            leads("A", &mut a).await;
            assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
            a
        });
        proxy.set(Link::HoldRequests);
        let release = rt.spawn(async move {
            let r = a.release().await;
            (a, r)
        });
        // Unobserved: the release's request reaches the proxy, which holds it (the proxy
        // shows no held bytes).
        std::thread::sleep(Duration::from_millis(300));
        server.restart();
        proxy.set(Link::Pass);
        let (_a, released) = rt.block_on(release).expect("release task");
        released.expect("A's release, sent again");
        let exists = server.command(&format!("EXISTS {}", lock("again")));
        assert_eq!(
            exists.as_deref().map(str::trim),
            Some(":0"),
            "A's key was left to expire"
        );
        rt.block_on(async {
            let mut b = candidate(&server.url(), "again", "B", ttl);
            tokio::time::timeout(Duration::from_secs(5), leads("B", &mut b))
                .await
                .expect("B's campaign answers");
        });
    }

    /// A switchover's reservation: after A's `release_to("C")`, B (first to look)
    /// cannot take the free lease; C can, and its take spends the reservation.
    #[test]
    fn a_switchover_reservation_keeps_the_others_out() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(3);
        runtime().block_on(async {
            let mut a = candidate(&server.url(), "resv", "A", ttl);
            let mut b = candidate(&server.url(), "resv", "B", ttl);
            let mut c = candidate(&server.url(), "resv", "C", ttl);
            let first = leads("A", &mut a).await;
            does_not_lead("B", &mut b).await;
            a.release_to("C").await.expect("release_to");
            does_not_lead("B, while the lease is left to C", &mut b).await;
            let token = leads("C", &mut c).await;
            assert!(token > first);
            c.release().await.expect("release");
            leads("B, once the reservation is spent", &mut b).await;
        });
    }
}

/// A follower sends the server nothing at all at steady state, on any of its
/// connections (MONITOR, attributed to each process's sockets): no script, no read, no
/// listing of itself as a live candidate (its presence is its pub/sub subscription),
/// for 6 s at ttl 2 s; and the leader's list of live candidates still names it.
#[test]
fn a_follower_sends_no_command_at_all_at_steady_state() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let mut args = SidecarArgs::redis(&server.url())
        .ttl("2s")
        .election("silent")
        .build();
    args.push("--enable-release-endpoint".into());
    let cars: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::spawn(&format!("silent-{i}"), dir.path(), &args))
        .collect();
    assert!(
        common::scenarios::handovers::one_leads_the_rest_follow(&cars),
        "never one leader and two followers"
    );
    // Observed: the window starts a second after the followers follow.
    std::thread::sleep(Duration::from_secs(1));
    let seen = server.monitor(Duration::from_secs(6));
    let mut leader_commands = 0;
    for car in &cars {
        let ports = common::servers::redis_server::client_ports(car.pid, server.port);
        assert!(!ports.is_empty(), "{}: no connection found", car.name);
        let sent: Vec<&String> = seen
            .iter()
            .filter(|(p, _)| ports.contains(p))
            .map(|(_, c)| c)
            .collect();
        let is_leader = car.leader().is_some_and(|v| v["is_leader"] == true);
        eprintln!(
            "{} (leader {is_leader}): {} commands in 6 s",
            car.name,
            sent.len()
        );
        if is_leader {
            leader_commands = sent.len();
        } else {
            assert!(sent.is_empty(), "{} sent {sent:?}", car.name);
        }
    }
    // The leader's renewals (every ttl/3): the monitor did see this process's traffic.
    assert!(leader_commands >= 5, "the leader sent {leader_commands}");
    // A switchover to a follower still finds it alive.
    common::scenarios::handovers::a_switchover_to_a_follower_works(&cars);
}
