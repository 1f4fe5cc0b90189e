//! Role-change hooks (`--on-change`, `--notify-url`), drain before release
//! (`--drain-url`) and `POST /release?cooldown=`, against a real redis-server.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::servers::redis_server::RedisServer;
use common::{args, eventually, harness::http, Sidecar, SidecarArgs};

/// One request the app got: when it arrived, its path and body.
#[derive(Clone, Debug)]
struct Request {
    at: Instant,
    answered: Option<Instant>,
    body: String,
}

/// The app next to the sidecar: answers every POST 200 after `delay` (never, when
/// `None`), and records what it got.
struct App {
    port: u16,
    got: Arc<Mutex<Vec<Request>>>,
}

impl App {
    fn start(delay: Option<Duration>) -> App {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let got: Arc<Mutex<Vec<Request>>> = Arc::default();
        let record = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let record = record.clone();
                std::thread::spawn(move || loop {
                    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                    let mut length = 0;
                    let mut first = true;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if first {
                            first = false;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let index = {
                        let mut g = record.lock().unwrap();
                        g.push(Request {
                            at: Instant::now(),
                            answered: None,
                            body: String::from_utf8_lossy(&body).into_owned(),
                        });
                        g.len() - 1
                    };
                    let Some(delay) = delay else {
                        // The app's answer: never (held for an hour).
                        std::thread::sleep(Duration::from_secs(3600));
                        return;
                    };
                    // The app's answer: after its delay.
                    std::thread::sleep(delay);
                    record.lock().unwrap()[index].answered = Some(Instant::now());
                    if conn
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .is_err()
                    {
                        return;
                    }
                });
            }
        });
        App { port, got }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }
}

fn is_leader(s: &Sidecar) -> bool {
    matches!(http::get(s.port, "/is-leader"), Some((200, _)))
}

/// Two sidecars with `extra` flags; the one that leads first, then the other.
fn pair(
    redis: &RedisServer,
    dir: &std::path::Path,
    election: &str,
    extra: &[&str],
) -> (Sidecar, Sidecar) {
    pair_at("1s", redis, dir, election, extra)
}

/// [`pair`] at `ttl`.
fn pair_at(
    ttl: &str,
    redis: &RedisServer,
    dir: &std::path::Path,
    election: &str,
    extra: &[&str],
) -> (Sidecar, Sidecar) {
    let mut a = SidecarArgs::redis(&redis.url())
        .ttl(ttl)
        .election(election)
        .build();
    a.extend(args(extra));
    a.push("--enable-release-endpoint".to_owned());
    let first = Sidecar::spawn("first", dir, &a);
    first.settles_in("leader", Duration::from_secs(15));
    let second = Sidecar::spawn("second", dir, &a);
    second.settles_in("follower", Duration::from_secs(15));
    (first, second)
}

#[test]
fn on_change_and_notify_url_tell_every_change_of_role() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let app = App::start(Some(Duration::ZERO));
    let states = dir.path().join("states");
    let hook = format!(
        "read -r json; echo \"$LEASEKEEPER_IDENTITY $LEASEKEEPER_STATE $LEASEKEEPER_FENCING_TOKEN $json\" >> {}",
        states.display()
    );
    let (mut first, second) = pair(
        &redis,
        dir.path(),
        "hooks",
        &["--on-change", &hook, "--notify-url", &app.url("/changes")],
    );
    first.terminate(Duration::from_secs(5)).expect("exits");
    second.settles_in("leader", Duration::from_secs(15));
    let lines = eventually(Duration::from_secs(15), || {
        let text = std::fs::read_to_string(&states).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        (lines.iter().any(|l| l.starts_with("second leader"))
            && lines.iter().any(|l| l.starts_with("first candidate")))
        .then_some(lines)
    })
    .unwrap_or_else(|| panic!("hook lines: {:?}", std::fs::read_to_string(&states)));
    eprintln!("{lines:#?}");
    let first_lines: Vec<&String> = lines.iter().filter(|l| l.starts_with("first ")).collect();
    assert!(
        first_lines[0].starts_with("first leader 1 {"),
        "{first_lines:?}"
    );
    let json: serde_json::Value =
        serde_json::from_str(first_lines[0].splitn(4, ' ').nth(3).expect("json")).expect("json");
    assert_eq!(json["is_leader"], true);
    assert_eq!(json["identity"], "first");
    assert!(lines.iter().any(|l| l.starts_with("second follower")));
    // The same changes were POSTed.
    let posted = eventually(Duration::from_secs(15), || {
        let bodies: Vec<serde_json::Value> = app
            .requests()
            .iter()
            .filter_map(|r| serde_json::from_str(&r.body).ok())
            .collect();
        bodies
            .iter()
            .any(|b| b["identity"] == "second" && b["is_leader"] == true)
            .then_some(bodies)
    })
    .expect("the takeover was POSTed");
    assert!(posted
        .iter()
        .any(|b| b["identity"] == "first" && b["state"] == "leader"));
}

#[test]
fn hooks_that_hang_do_not_delay_a_step_down() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let silent = App::start(None);
    // ttl 10 s: a leader that waited for its hooks would hand over only by expiry, 6.7 s
    // or more after the SIGTERM, past the bound below.
    let (mut first, second) = pair_at(
        "10s",
        &redis,
        dir.path(),
        "hang",
        &[
            "--on-change",
            "sleep 60",
            "--notify-url",
            &silent.url("/never"),
            "--hook-timeout",
            "30s",
        ],
    );
    let t0 = Instant::now();
    first.signal(libc::SIGTERM);
    let taken = eventually(Duration::from_secs(5), || is_leader(&second).then_some(()));
    let took = t0.elapsed();
    assert!(taken.is_some(), "no takeover");
    assert!(took < Duration::from_secs(3), "the handover took {took:?}");
    let code = first.wait_exit(Duration::from_secs(5));
    assert!(code.is_some_and(|c| c.success()), "{code:?}");
    eprintln!("handover with hanging hooks: {took:?}");
}

#[test]
fn a_graceful_step_down_drains_the_app_before_the_release() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    // The app takes 4 s to finish its leader work: longer than the 3 s ttl, so the
    // lease must be renewed while it drains.
    let app = App::start(Some(Duration::from_secs(4)));
    let (mut first, second) = pair_at(
        "3s",
        &redis,
        dir.path(),
        "drain",
        &["--drain-url", &app.url("/drain"), "--drain-timeout", "10s"],
    );
    let t0 = Instant::now();
    first.signal(libc::SIGTERM);
    // Not leader is published before the drain is called.
    let not_leader = eventually(Duration::from_secs(5), || {
        (!is_leader(&first)).then(Instant::now)
    })
    .expect("the leader never said it stopped leading");
    let called = eventually(Duration::from_secs(5), || {
        app.requests().first().map(|r| r.at)
    })
    .expect("the drain was never called");
    let next = eventually(Duration::from_secs(15), || {
        is_leader(&second).then(Instant::now)
    })
    .expect("no takeover after the drain");
    let requests = app.requests();
    let answered = requests[0].answered.expect("answered");
    eprintln!(
        "not leader after {:?}, drain called at {:?}, answered at {:?}, next leader at {:?}",
        not_leader - t0,
        called - t0,
        answered - t0,
        next - t0
    );
    assert!(
        not_leader <= called + Duration::from_millis(20),
        "drain called before not-leader was shown"
    );
    assert!(
        next > answered,
        "the next leader started before the app had drained"
    );
    // A lease left to expire instead goes 2 s or more after the answer (its last
    // renewal at most a renew interval, 1 s, before it).
    assert!(
        next - answered < Duration::from_millis(1500),
        "the release after the drain took {:?}",
        next - answered
    );
    let body: serde_json::Value = serde_json::from_str(&requests[0].body).expect("json");
    assert_eq!(body["identity"], "first");
    assert_eq!(body["is_leader"], false);
    // How long the app may take: the drain's end (its timeout, or the lease's
    // deadline if sooner), never zero while it may still finish.
    let left = body["drain_expires_in_ms"]
        .as_u64()
        .expect("drain_expires_in_ms");
    assert!(left > 0 && left <= 10_000, "{body}");
    assert_eq!(body["drain_lapsed"], false, "{body}");
    let code = first.wait_exit(Duration::from_secs(5));
    assert!(code.is_some_and(|c| c.success()), "{code:?}");
}

#[test]
fn a_drain_that_never_answers_ends_at_its_timeout() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let app = App::start(None);
    let (first, second) = pair(
        &redis,
        dir.path(),
        "drain-timeout",
        &[
            "--drain-url",
            &app.url("/drain"),
            "--drain-timeout",
            "700ms",
        ],
    );
    let t0 = Instant::now();
    // The answer comes once released, after the drain.
    let port = first.port;
    let release =
        std::thread::spawn(move || http::post_within(port, "/release", Duration::from_secs(5)));
    let next = eventually(Duration::from_secs(10), || {
        is_leader(&second).then(Instant::now)
    })
    .expect("no takeover");
    let answer = release.join().expect("thread");
    assert!(matches!(answer, Some((200, _))), "{answer:?}");
    let took = next - t0;
    eprintln!("takeover {took:?} after a drain that never answered (timeout 700 ms)");
    assert!(
        took >= Duration::from_millis(650) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // The app is told that the drain is over without its answer (not one POST, and
    // silence).
    let told = the_app_is_told_the_drain_lapsed(&app);
    assert!(
        told <= next + Duration::from_secs(1),
        "told {:?} after the takeover",
        told - next
    );
}

/// The second POST of a drain the app did not answer: `drain_lapsed`, nothing left.
fn the_app_is_told_the_drain_lapsed(app: &App) -> Instant {
    let requests = eventually(Duration::from_secs(10), || {
        let r = app.requests();
        (r.len() >= 2).then_some(r)
    })
    .unwrap_or_else(|| {
        panic!(
            "the app was not told that the drain ended: {:?}",
            app.requests()
        )
    });
    let last: serde_json::Value =
        serde_json::from_str(&requests[requests.len() - 1].body).expect("json");
    assert_eq!(last["drain_lapsed"], true, "{last}");
    assert_eq!(last["drain_expires_in_ms"], 0, "{last}");
    assert_eq!(last["is_leader"], false, "{last}");
    requests[requests.len() - 1].at
}

/// The lease lost while the app drains (the store hangs, so the renewals that keep the
/// claim during a drain fail until its deadline): the drain ends at the deadline, not
/// at its 30 s timeout, and the app is told that the claim it drained under lapsed.
#[test]
fn a_claim_that_lapses_during_a_drain_is_told_to_the_app() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let app = App::start(None);
    let (mut first, _second) = pair(
        &redis,
        dir.path(),
        "drain-lapse",
        &["--drain-url", &app.url("/drain"), "--drain-timeout", "30s"],
    );
    first.signal(libc::SIGTERM);
    let called = eventually(Duration::from_secs(5), || {
        app.requests().first().map(|r| r.at)
    })
    .expect("the drain was never called");
    redis.pause();
    let told = the_app_is_told_the_drain_lapsed(&app);
    redis.resume();
    eprintln!("told the drain lapsed {:?} after it began", told - called);
    assert!(
        told - called < Duration::from_secs(5),
        "told {:?} after the drain began (ttl 1 s, drain timeout 30 s)",
        told - called
    );
    let code = first.wait_exit(Duration::from_secs(5));
    assert!(code.is_some_and(|c| c.success()), "{code:?}");
}

#[test]
fn a_release_with_a_cooldown_keeps_the_candidate_out_for_that_long() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let (first, mut second) = pair(&redis, dir.path(), "cooldown", &[]);
    let answer = http::post(first.port, "/release?cooldown=4s");
    assert!(matches!(answer, Some((200, _))), "{answer:?}");
    second.settles_in("leader", Duration::from_secs(10));
    let t0 = Instant::now();
    second.terminate(Duration::from_secs(5)).expect("exits");
    // Nobody leads until the first candidate's cooldown is over.
    let back = eventually(Duration::from_secs(15), || {
        is_leader(&first).then(Instant::now)
    })
    .expect("the first candidate never came back");
    eprintln!("back {:?} after the other left", back - t0);
    assert!(
        back - t0 >= Duration::from_millis(2500),
        "back after only {:?}",
        back - t0
    );
    let bad = http::post(first.port, "/release?cooldown=soon");
    assert!(matches!(bad, Some((400, _))), "{bad:?}");
}

#[test]
fn a_hook_that_runs_too_long_is_killed_with_its_children() {
    let worker = common::harness::procs::Marker::new();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let mut flags = SidecarArgs::redis(&redis.url())
        .ttl("1s")
        .election("hook-timeout")
        .build();
    let hook = format!("{} & wait", worker.sleep());
    flags.extend(args(&["--on-change", &hook, "--hook-timeout", "300ms"]));
    let leader = Sidecar::spawn("leader", dir.path(), &flags);
    leader.settles_in("leader", Duration::from_secs(15));
    let started = worker.wait_running(Duration::from_secs(10));
    assert!(started.is_some(), "the hook never started its worker");
    // Killed 300 ms after it started; the worker itself sleeps far longer.
    assert!(
        worker.gone_within(Duration::from_secs(10)),
        "the timed-out hook's child still runs: {:?}\n{}",
        worker.procs(),
        leader.stderr()
    );
}
