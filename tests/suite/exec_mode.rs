//! `leasekeeper run -- CMD` against a real redis-server: CMD runs only while its
//! candidate leads, judged from lines the commands themselves write.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::servers::redis_server::RedisServer;
use common::{eventually, Sidecar, SidecarArgs};

/// The command: appends `<CLOCK_MONOTONIC ns> <kind> <identity> <token>` lines to a
/// shared file: `start`, then `alive` every 5 ms, and on SIGTERM (after 50 ms of
/// "cleanup", still alive) `stop`. A line is proof it ran at that moment.
const WORKER: &str = r#"
import os, signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
me = os.environ["LEASEKEEPER_IDENTITY"]
token = os.environ["LEASEKEEPER_FENCING_TOKEN"]
def line(kind):
    out.write("%d %s %s %s\n" % (time.monotonic_ns(), kind, me, token))
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
line("start")
print("working as", me, "with token", token, flush=True)
while not stopping:
    line("alive")
    time.sleep(0.005)
for _ in range(10):
    line("alive")
    time.sleep(0.005)
line("stop")
sys.exit(int(os.environ.get("WORKER_EXIT", "0")))
"#;

struct Line {
    at: u64,
    kind: String,
    identity: String,
    token: u64,
}

fn read_lines(path: &Path) -> Vec<Line> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<Line> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(Line {
                at: f.next()?.parse().ok()?,
                kind: f.next()?.to_owned(),
                identity: f.next()?.to_owned(),
                token: f.next()?.parse().ok()?,
            })
        })
        .collect();
    lines.sort_by_key(|l| l.at);
    lines
}

/// The runs of CMD in time order: (identity, token, first line, last line). Panics
/// when two runs interleave (a line of one after the first line of the next).
fn runs_never_overlap(lines: &[Line]) -> Vec<(String, u64, u64, u64)> {
    let mut runs: Vec<(String, u64, u64, u64)> = Vec::new();
    for l in lines {
        match runs
            .iter()
            .position(|r| r.0 == l.identity && r.1 == l.token)
        {
            Some(i) => {
                assert_eq!(
                    i,
                    runs.len() - 1,
                    "two commands at once: {} (token {}) still ran at {} after {} (token {}) had started at {}",
                    l.identity,
                    l.token,
                    l.at,
                    runs[runs.len() - 1].0,
                    runs[runs.len() - 1].1,
                    runs[runs.len() - 1].2
                );
                runs[i].3 = l.at;
            }
            None => {
                assert_eq!(
                    l.kind, "start",
                    "a run without its start line: {}",
                    l.identity
                );
                runs.push((l.identity.clone(), l.token, l.at, l.at));
            }
        }
    }
    runs
}

fn worker(dir: &Path) -> (Vec<String>, PathBuf) {
    let script = dir.join("worker.py");
    std::fs::write(&script, WORKER).expect("script");
    let out = dir.join("runs.log");
    (
        vec![
            "python3".to_owned(),
            script.display().to_string(),
            out.display().to_string(),
        ],
        out,
    )
}

fn leader(sidecars: &[Sidecar], limit: Duration) -> Option<usize> {
    eventually(limit, || {
        sidecars
            .iter()
            .position(|s| s.is_running() && s.leader().is_some_and(|v| v["is_leader"] == true))
    })
}

/// The token of the tenure `s` reports.
fn token_of(s: &Sidecar) -> Option<u64> {
    s.leader().and_then(|v| v["fencing_token"].as_u64())
}

/// A run of `identity` (of its tenure `token`, when given) has written its start line.
fn started(out: &Path, identity: &str, token: Option<u64>, limit: Duration) -> bool {
    eventually(limit, || {
        read_lines(out)
            .iter()
            .any(|l| {
                l.identity == identity && l.kind == "start" && token.is_none_or(|t| t == l.token)
            })
            .then_some(())
    })
    .is_some()
}

#[test]
fn the_command_runs_on_one_candidate_at_a_time_through_stops_crashes_pauses_and_store_faults() {
    let redis = RedisServer::start();
    let mut dir = tempfile::tempdir().expect("dir");
    if std::env::var_os("LK_KEEP_TEST_DIRS").is_some() {
        dir.disable_cleanup(true);
        eprintln!("test dir: {}", dir.path().display());
    }
    let (cmd, out) = worker(dir.path());
    let args = SidecarArgs::redis(&redis.url())
        .ttl("2s")
        .election("exec")
        .build();
    let mut generation = 0;
    let mut spawn = |dir: &Path| {
        generation += 1;
        Sidecar::spawn_run(&format!("w{generation}"), dir, &args, &cmd)
    };
    let mut sidecars: Vec<Sidecar> = (0..3).map(|_| spawn(dir.path())).collect();
    let mut log = Vec::new();
    for fault in [
        "graceful",
        "kill-9",
        "sigstop",
        "store-paused",
        "graceful",
        "kill-9",
    ] {
        let li = leader(&sidecars, Duration::from_secs(10)).expect("a leader");
        let name = sidecars[li].name.clone();
        let token = token_of(&sidecars[li]);
        assert!(
            started(&out, &name, token, Duration::from_secs(5)),
            "{name} leads (token {token:?}) but its command never started"
        );
        let t0 = Instant::now();
        match fault {
            "graceful" => {
                sidecars[li].signal(libc::SIGTERM);
                let code = sidecars[li].wait_exit(Duration::from_secs(10));
                assert!(code.is_some_and(|c| c.success()), "{name}: {code:?}");
            }
            "kill-9" => sidecars[li].kill(),
            "sigstop" => another_runs_while_the_leader_is_stopped(&sidecars, li, &out),
            _ => {
                redis.pause();
                // The fault: the store stays paused for 2.3 s.
                std::thread::sleep(Duration::from_millis(2300));
                redis.resume();
            }
        }
        let next = eventually(Duration::from_secs(8), || {
            leader(&sidecars, Duration::ZERO)
                .filter(|&i| sidecars[i].name != name || fault == "store-paused")
        });
        assert!(next.is_some(), "no leader after {fault}");
        log.push(format!("{fault}: {:?}", t0.elapsed()));
        if !sidecars[li].is_running() {
            sidecars[li] = spawn(dir.path());
        }
    }
    // The last takeover's command has started before everything stops.
    let last = leader(&sidecars, Duration::from_secs(10)).expect("a leader at the end");
    let token = token_of(&sidecars[last]);
    assert!(started(
        &out,
        &sidecars[last].name,
        token,
        Duration::from_secs(5)
    ));
    for s in sidecars.iter_mut() {
        s.terminate(Duration::from_secs(10));
    }
    eprintln!("{log:?}");
    runs_took_turns_with_growing_tokens(&out);
}

/// SIGSTOP of the leader `li`: its guard stops the command by the claim's deadline
/// though the sidecar cannot act; another candidate leads once the lease has expired,
/// and its command runs a while before the stopped one wakes, no longer leading.
fn another_runs_while_the_leader_is_stopped(sidecars: &[Sidecar], li: usize, out: &Path) {
    let name = &sidecars[li].name;
    sidecars[li].signal(libc::SIGSTOP);
    let other = eventually(Duration::from_secs(8), || {
        leader(sidecars, Duration::ZERO).filter(|&i| i != li)
    });
    let other = other.expect("no other leader while the first was stopped");
    // Stay stopped while the new leader's command runs for a while.
    let token = token_of(&sidecars[other]);
    assert!(started(
        out,
        &sidecars[other].name,
        token,
        Duration::from_secs(5)
    ));
    // The fault: the old leader stays stopped while the new leader's command runs.
    std::thread::sleep(Duration::from_millis(300));
    sidecars[li].signal(libc::SIGCONT);
    let woke = eventually(Duration::from_secs(5), || {
        sidecars[li].leader().filter(|v| v["is_leader"] == false)
    });
    assert!(woke.is_some(), "{name} woke still leading");
}

/// The command's runs (from its log `out`) never overlapped, at least 6 of them, with
/// growing tokens, and each but at most one wrote its stop line.
fn runs_took_turns_with_growing_tokens(out: &Path) {
    let lines = read_lines(out);
    let runs = runs_never_overlap(&lines);
    for w in runs.windows(2) {
        eprintln!(
            "{} token {} ended; {} token {} started {:.1} ms later",
            w[0].0,
            w[0].1,
            w[1].0,
            w[1].1,
            (w[1].2 - w[0].3) as f64 / 1e6
        );
    }
    assert!(runs.len() >= 6, "only {} runs of the command", runs.len());
    let tokens: Vec<u64> = runs.iter().map(|r| r.1).collect();
    assert!(
        tokens.windows(2).all(|w| w[1] > w[0]),
        "tokens of the runs did not grow: {tokens:?}"
    );
    // Each stopped run wrote its stop line, bar the one killed in the paused sidecar
    // at the deadline (it got SIGTERM first, so it stopped too) and the kill -9 ones
    // (their guard gave them SIGTERM when the sidecar vanished).
    let stops = lines.iter().filter(|l| l.kind == "stop").count();
    assert!(
        stops >= runs.len() - 1,
        "{stops} stop lines for {} runs",
        runs.len()
    );
}

#[test]
fn the_commands_own_exit_ends_the_tenure_with_its_code_or_a_new_campaign() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    // Exits 7 by itself after 300 ms.
    let cmd: Vec<String> = [
        "sh",
        "-c",
        "echo token=$LEASEKEEPER_FENCING_TOKEN; sleep 0.3; exit 7",
    ]
    .map(str::to_owned)
    .to_vec();
    let args = SidecarArgs::redis(&redis.url())
        .ttl("2s")
        .election("exits")
        .build();
    let mut once = Sidecar::spawn_run("once", dir.path(), &args, &cmd);
    let code = once.wait_exit(Duration::from_secs(10));
    assert_eq!(code.and_then(|c| c.code()), Some(7), "{}", once.stderr());
    let printed = std::fs::read_to_string(dir.path().join("once.stdout")).unwrap_or_default();
    assert!(
        printed.starts_with("token="),
        "the command's stdout: {printed:?}"
    );
    // The lease was released: the next candidate leads at once, not after the ttl.
    let mut with_restart = args.clone();
    with_restart.push("--restart".to_owned());
    let t0 = Instant::now();
    let again = Sidecar::spawn_run("again", dir.path(), &with_restart, &cmd);
    assert!(
        eventually(Duration::from_secs(10), || {
            let text = std::fs::read_to_string(dir.path().join("again.stdout")).ok()?;
            (text.lines().count() >= 3).then_some(())
        })
        .is_some(),
        "--restart did not run the command again: {}",
        again.stderr()
    );
    eprintln!("three runs with --restart in {:?}", t0.elapsed());
    assert!(again.is_running(), "--restart exited");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_before_the_deadline_and_the_release_waits() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let (_, out) = worker(dir.path());
    // Ignores SIGTERM; writes alive lines until killed.
    let script = dir.path().join("stubborn.py");
    std::fs::write(
        &script,
        WORKER.replace(
            "signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))",
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
        ),
    )
    .expect("script");
    let cmd = vec![
        "python3".to_owned(),
        script.display().to_string(),
        out.display().to_string(),
    ];
    let mut args = SidecarArgs::redis(&redis.url())
        .ttl("2s")
        .election("stubborn")
        .build();
    args.extend(["--kill-grace".to_owned(), "500ms".to_owned()]);
    let mut a = Sidecar::spawn_run("a", dir.path(), &args, &cmd);
    assert!(started(&out, "a", None, Duration::from_secs(10)));
    let b = Sidecar::spawn_run("b", dir.path(), &args, &cmd);
    b.settles_in("follower", Duration::from_secs(5));
    let t0 = Instant::now();
    a.signal(libc::SIGTERM);
    let code = a.wait_exit(Duration::from_secs(10));
    let stopped_in = t0.elapsed();
    assert!(code.is_some_and(|c| c.success()), "{code:?}");
    assert!(started(&out, "b", None, Duration::from_secs(5)));
    let runs = runs_never_overlap(&read_lines(&out));
    assert_eq!(runs.len(), 2);
    eprintln!(
        "a stopped after {stopped_in:?}; b started {:.1} ms after a's last line",
        (runs[1].2 - runs[0].3) as f64 / 1e6
    );
    assert!(
        stopped_in >= Duration::from_millis(450) && stopped_in < Duration::from_secs(3),
        "SIGKILL came after {stopped_in:?}, not after the 500 ms grace"
    );
}
