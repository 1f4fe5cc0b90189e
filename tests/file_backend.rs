//! The file backend against the election checker and as the quick start promises.

mod common;

use std::time::Duration;

use common::checker::{self, ElectionSpec, Fault};
use common::{http, Sidecar, SidecarArgs};

#[test]
fn file_election_survives_the_checker() {
    let dir = tempfile::tempdir().expect("dir");
    let mut rounds = Vec::new();
    for i in 0..55 {
        rounds.push(match i % 11 {
            3 | 8 => Fault::Kill9,
            5 => Fault::Release,
            10 => Fault::PauseLeader,
            _ => Fault::Graceful,
        });
    }
    let report = checker::run(ElectionSpec {
        args: SidecarArgs::file(dir.path()).ttl("1s").build(),
        ttl: Duration::from_secs(1),
        candidates: 3,
        rounds,
        server: None,
        takeover_while_leader_paused: false,
        restart_loses_data: false,
    });
    eprintln!("file: {report:?}");
    assert!(report.claims >= 50, "only {} tenures", report.claims);
}

#[test]
fn a_second_copy_follows_and_takes_over_when_the_first_stops() {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path()).ttl("15s").build();
    let mut first = Sidecar::spawn("first", dir.path(), &args);
    assert!(first.wait_listening(Duration::from_secs(10)));
    let led = common::eventually(Duration::from_secs(5), || {
        first.leader().filter(|v| v["is_leader"] == true)
    });
    let led = led.expect("the first copy leads");
    for field in [
        "election",
        "identity",
        "backend",
        "state",
        "is_leader",
        "leader",
        "fencing_token",
        "leader_since",
        "lease_expires_in_ms",
        "observed_at",
        "transitions",
    ] {
        assert!(led.get(field).is_some(), "/leader lacks {field}: {led}");
    }
    assert_eq!(led["state"], "leader");
    assert_eq!(led["backend"], "file");

    let second = Sidecar::spawn("second", dir.path(), &args);
    assert!(second.wait_listening(Duration::from_secs(10)));
    let follows = common::eventually(Duration::from_secs(5), || {
        second.leader().filter(|v| v["state"] == "follower")
    });
    let follows = follows.expect("the second copy follows");
    assert_eq!(follows["leader"], "first");
    assert_eq!(follows["is_leader"], false);
    assert_eq!(
        http::get(second.port, "/is-leader"),
        Some((503, "false".into()))
    );
    assert_eq!(
        http::get(second.port, "/")
            .map(|(c, b)| (c, serde_json::from_str::<serde_json::Value>(&b).ok())),
        Some((200, Some(serde_json::json!({"name": "first"}))))
    );

    let t0 = std::time::Instant::now();
    first.signal(libc::SIGTERM);
    let took = common::eventually(Duration::from_secs(2), || {
        (http::get(second.port, "/is-leader")?.0 == 200).then(|| t0.elapsed())
    });
    let took = took.expect("the second copy takes over");
    assert!(took < Duration::from_millis(500), "takeover took {took:?}");
    assert_eq!(
        first.wait_exit(Duration::from_secs(5)).map(|s| s.success()),
        Some(true)
    );
    let now = second.leader().expect("answer");
    assert_eq!(
        now["fencing_token"].as_u64(),
        led["fencing_token"].as_u64().map(|t| t + 1)
    );
}

/// See [`common::scenarios::switchover_goes_to_the_named_candidate`].
#[test]
fn switchover_goes_to_the_named_candidate() {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path()).ttl("2s").build();
    common::scenarios::switchover_goes_to_the_named_candidate(&args);
}
