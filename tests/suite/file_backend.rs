//! The file backend against the election checker and as the quick start promises.

use crate::common;

use std::time::Duration;

use common::checks::checker::{self, ElectionSpec, Fault};
use common::{harness::http, scenarios::backend_switchover, Sidecar, SidecarArgs};
use leasekeeper::backend::file::FileBackend;
use leasekeeper::backend::{Backend, Campaign, Candidacy, Renewal};
use leasekeeper::timing::Timing;

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
    // ttl 45 s: a follower that looked only at its retry interval (15 s) would take
    // over within the bound below only one time in ten.
    let args = SidecarArgs::file(dir.path()).ttl("45s").build();
    let mut first = Sidecar::spawn("first", dir.path(), &args);
    assert!(first.wait_listening(Duration::from_secs(10)));
    let led = common::eventually(Duration::from_secs(10), || {
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
    let follows = common::eventually(Duration::from_secs(10), || {
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
    let took = common::eventually(Duration::from_secs(10), || {
        (http::get(second.port, "/is-leader")?.0 == 200).then(|| t0.elapsed())
    });
    let took = took.expect("the second copy takes over");
    assert!(took < Duration::from_millis(1500), "takeover took {took:?}");
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

/// See [`common::scenarios::handovers::switchover_goes_to_the_named_candidate`].
#[test]
fn switchover_goes_to_the_named_candidate() {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path()).ttl("2s").build();
    common::scenarios::handovers::switchover_goes_to_the_named_candidate(&args);
}

// The file backend's rules, one at a time, at the library level: candidates built on
// one lock file in this process (each its own open file description, so `flock`
// arbitrates between them as between processes), driven by hand.

fn file_candidate(path: &std::path::Path, identity: &str) -> FileBackend {
    let timing = Timing::for_ttl(Duration::from_secs(2));
    FileBackend::new(
        path.to_owned(),
        &Candidacy {
            election: "file",
            identity,
            timing: &timing,
            mode: Default::default(),
        },
    )
}

async fn file_leads(who: &str, b: &mut FileBackend) -> u64 {
    match b.campaign().await {
        Ok(Campaign::Acquired { token }) => token,
        other => panic!("{who} should lead, its campaign found {other:?}"),
    }
}

async fn file_follows(who: &str, b: &mut FileBackend, leader: &str, token: u64) {
    match b.campaign().await {
        Ok(Campaign::Held(Some(h))) if h.identity == leader && h.token == Some(token) => {}
        other => panic!("{who} should follow {leader} ({token}), its campaign found {other:?}"),
    }
}

/// Campaigns (waking on the lock) until `b` leads or `limit` passes.
async fn file_leads_within(b: &mut FileBackend, limit: Duration) -> Option<u64> {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        if let Ok(Campaign::Acquired { token }) = b.campaign().await {
            return Some(token);
        }
        let _ = b.wait_for_change(Duration::from_millis(100)).await;
    }
    None
}

/// Invariant 4 on the file backend: the counter lives in the lock file, so every new
/// tenure's token is one more than the last, also for a fresh candidate that never
/// saw the earlier tenures, and after a holder that vanished without a release.
#[test]
fn tokens_grow_in_the_lock_file_for_fresh_candidates() {
    let dir = tempfile::tempdir().expect("dir");
    let lock = dir.path().join("t.lock");
    backend_switchover::runtime().block_on(async {
        let mut a = file_candidate(&lock, "A");
        let first = file_leads("A", &mut a).await;
        a.release().await.expect("release");
        let second = file_leads("B", &mut file_candidate(&lock, "B")).await;
        assert_eq!(second, first + 1);
        // B was dropped holding the lock (its descriptor closed): a crash.
        let third = file_leads("C", &mut file_candidate(&lock, "C")).await;
        assert_eq!(third, second + 1);
    });
}

/// Invariant 5 on the file backend: a follower's release touches neither the lock nor
/// the record, and the holder renews while the lock file is still the one it locked;
/// deleted (or replaced) under it, the next renew is lost.
#[test]
fn a_release_gives_back_only_our_own_lock() {
    let dir = tempfile::tempdir().expect("dir");
    let lock = dir.path().join("r.lock");
    backend_switchover::runtime().block_on(async {
        let mut a = file_candidate(&lock, "A");
        let token = file_leads("A", &mut a).await;
        let mut b = file_candidate(&lock, "B");
        file_follows("B", &mut b, "A", token).await;
        b.release().await.expect("B releases");
        b.release_to("B")
            .await
            .expect("B hands over what it does not hold");
        file_follows(
            "a fresh candidate",
            &mut file_candidate(&lock, "F"),
            "A",
            token,
        )
        .await;
        assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
        // Replaced (another file renamed over it, on the same device): lost.
        let other = dir.path().join("other");
        std::fs::write(&other, b"").expect("another file");
        std::fs::rename(&other, &lock).expect("replace the lock file");
        assert_eq!(a.renew().await.expect("renew"), Renewal::Lost);
        // Deleted: lost (on a lock file of its own, away from the followers' waiters).
        let lock2 = dir.path().join("r2.lock");
        let mut b = file_candidate(&lock2, "B2");
        file_leads("B2", &mut b).await;
        std::fs::remove_file(&lock2).expect("delete the lock file");
        assert_eq!(b.renew().await.expect("renew"), Renewal::Lost);
    });
}

/// The switchover's reservation in the lock file: after `A.release_to("C")`, B (next
/// to get the lock, or not) lets go of it at once and stays away, and C leads; a
/// reservation for someone else is no bar to the one it names. A reservation for a
/// candidate that never comes lasts a ttl (2 s here), no longer.
#[test]
fn a_switchover_reservation_keeps_the_others_away() {
    let dir = tempfile::tempdir().expect("dir");
    let lock = dir.path().join("s.lock");
    backend_switchover::runtime().block_on(async {
        let mut a = file_candidate(&lock, "A");
        let first = file_leads("A", &mut a).await;
        let (mut b, mut c) = (file_candidate(&lock, "B"), file_candidate(&lock, "C"));
        file_follows("B", &mut b, "A", first).await;
        file_follows("C", &mut c, "A", first).await;
        a.release_to("C").await.expect("A hands over to C");
        // B looks first and often; it must never lead while the reservation stands.
        assert_eq!(
            file_leads_within(&mut b, Duration::from_millis(500)).await,
            None
        );
        let token = file_leads_within(&mut c, Duration::from_secs(1)).await;
        assert_eq!(token, Some(first + 1), "C did not lead");
        c.release_to("nobody")
            .await
            .expect("C hands over to nobody");
        let next = file_leads_within(&mut b, Duration::from_millis(3500)).await;
        assert_eq!(next, Some(first + 2), "B did not lead after the use-by");
    });
}

/// Runs the sidecar on `path` for at most 5 s: its exit code (`None` when it was
/// still running) and its stderr.
fn start_on_lock_path(path: &std::path::Path, wrap: &[&str]) -> (Option<i32>, String) {
    use std::process::{Command, Stdio};
    let bin = common::leasekeeper_bin();
    let path = path.to_str().expect("utf8");
    let sidecar = [
        bin.to_str().expect("utf8"),
        "--file-path",
        path,
        "--http-addr",
        "127.0.0.1:0",
    ];
    let argv: Vec<&str> = wrap.iter().chain(sidecar.iter()).copied().collect();
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let code = common::eventually(Duration::from_secs(5), || child.try_wait().ok().flatten())
        .map(|status| status.code());
    if code.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("wait");
    (
        code.flatten(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_one_line_naming(code: Option<i32>, err: &str, path: &std::path::Path) {
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(code, Some(2), "{}: exit {code:?}: {err}", path.display());
    assert_eq!(lines.len(), 1, "{}: not one line: {err}", path.display());
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains(&*path.to_string_lossy()),
        "{}: {err}",
        path.display()
    );
}

/// A lock path that cannot be created or opened ends the start with one line naming
/// it, and no directory is created on the way: a missing directory, a file where a
/// directory is expected, a directory nobody may create files in.
#[test]
fn a_lock_path_that_cannot_be_opened_is_one_line_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("missing");
    let path = missing.join("dir").join("x.lock");
    let (code, err) = start_on_lock_path(&path, &[]);
    assert_one_line_naming(code, &err, &path);
    assert!(!missing.exists(), "a directory was created: {err}");

    let plain = dir.path().join("plain");
    std::fs::write(&plain, "a file").expect("write");
    let path = plain.join("x.lock");
    let (code, err) = start_on_lock_path(&path, &[]);
    assert_one_line_naming(code, &err, &path);

    let path = std::path::Path::new("/proc/leasekeeper-test.lock");
    let (code, err) = start_on_lock_path(path, &[]);
    assert_one_line_naming(code, &err, path);

    // A directory without write permission: root passes mode bits, but not a
    // read-only mount (in a mount namespace of its own, where it can have one).
    let closed = dir.path().join("closed");
    std::fs::create_dir(&closed).expect("mkdir");
    let path = closed.join("x.lock");
    let shown = closed.to_str().expect("utf8");
    // SAFETY: geteuid has no preconditions.
    let (code, err) = if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        start_on_lock_path(&path, &[])
    } else {
        let script = format!("mount --bind -o ro {shown} {shown} && exec \"$@\"");
        let probe = std::process::Command::new("unshare")
            .args(["-m", "sh", "-c", &script, "sh", "true"])
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            eprintln!("no mount namespace here: the read-only directory is not tried");
            return;
        }
        start_on_lock_path(&path, &["unshare", "-m", "sh", "-c", &script, "sh"])
    };
    assert_one_line_naming(code, &err, &path);
    assert_eq!(std::fs::read_dir(&closed).expect("ls").count(), 0, "{err}");
}

/// A store that grants the ttl asked for is not said to grant a shorter one: the
/// elector's rule for the renew interval is validation's.
#[test]
fn a_ttl_granted_as_asked_is_not_taken_for_a_shorter_one() {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path())
        .ttl("2s")
        .flag("--renew-interval", "1500ms")
        .build();
    let mut sidecar = Sidecar::spawn("granted", dir.path(), &args);
    sidecar.settles_in("leader", Duration::from_secs(10));
    // The rule: past the first renew interval (1.5 s), the leader has renewed.
    std::thread::sleep(Duration::from_millis(1700));
    sidecar.settles_in("leader", Duration::from_secs(1));
    sidecar.terminate(Duration::from_secs(5));
    let log = sidecar.stderr();
    assert!(!log.contains("shorter ttl"), "{log}");
}

/// A pipe whose buffer is full, blocking: (read end, write end). A writer blocks until
/// someone reads the read end, which nobody does.
fn full_pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`, which we then own.
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) },
        0
    );
    let (read, write) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let chunk = [b'x'; 4096];
    // SAFETY: writes from a live buffer to a descriptor we own.
    while unsafe { libc::write(write.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) } > 0 {}
    // SAFETY: fcntl on a descriptor we own.
    assert_eq!(
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, 0) },
        0
    );
    (read, write)
}

/// A sidecar whose stderr nobody reads (a log pipe whose reader stalls, as a stuck
/// container runtime's log copier) still leads, answers and hands over: a log line
/// that cannot be written is dropped, never waited for.
#[test]
fn a_stalled_log_pipe_never_stalls_the_sidecar() {
    let dir = tempfile::tempdir().expect("dir");
    let (_unread, pipe) = full_pipe();
    let args = SidecarArgs::file(dir.path()).ttl("1s").build();
    let mut stalled = Sidecar::spawn_with_stderr("stalled", dir.path(), &args, pipe.into());
    let led = common::eventually(Duration::from_secs(10), || {
        http::get(stalled.port, "/is-leader").filter(|(code, _)| *code == 200)
    });
    assert!(led.is_some(), "a sidecar whose log pipe is full never led");
    let next = Sidecar::spawn("next", dir.path(), &args);
    next.settles_in("follower", Duration::from_secs(10));
    stalled.signal(libc::SIGTERM);
    next.settles_in("leader", Duration::from_secs(5));
    let exited = stalled.wait_exit(Duration::from_secs(5));
    assert!(
        exited.is_some_and(|s| s.success()),
        "the stalled sidecar's exit: {exited:?}"
    );
}

/// A leader left idle holds little memory of its own: its anonymous memory (heap,
/// stacks; not the binary's pages, which the page cache shares) stays under 4 MiB. A
/// log buffer sized for 128,000 lines up front (tracing-appender's default: 4 MiB of
/// slots before the first line) breaks it. `make bench` measures the whole footprint.
#[test]
fn an_idle_leader_holds_under_4_mib_of_its_own() {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path()).build();
    let leader = Sidecar::spawn("idle", dir.path(), &args);
    leader.settles_in("leader", Duration::from_secs(10));
    // Idle: a second of renewals after the claim, so the first requests are behind it.
    std::thread::sleep(Duration::from_secs(1));
    let status = std::fs::read_to_string(format!("/proc/{}/status", leader.pid)).expect("status");
    let anon_kib: u64 = (status.lines())
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("RssAnon in /proc/<pid>/status");
    assert!(
        anon_kib < 4 * 1024,
        "the idle leader's anonymous memory: {anon_kib} KiB"
    );
}

/// The signals a process blocks: the `SigBlk` mask of a `/proc/<pid>/status` (the
/// sidecar's, or a child's own as its `grep` wrote it), as a number.
fn blocked(status: &str) -> Option<u64> {
    let mask = status.lines().find_map(|l| l.strip_prefix("SigBlk:"))?;
    u64::from_str_radix(mask.trim(), 16).ok()
}

/// SIGTERM and SIGINT are the sidecar's own: blocked in all of its threads and taken
/// by the runtime that steps down. Nothing it starts inherits that: CMD and a hook
/// begin with no signal blocked (a CMD with SIGTERM blocked would ignore every stop
/// until the SIGKILL at the deadline), and a SIGTERM still stops the sidecar gracefully.
#[test]
fn the_sidecar_takes_sigterm_itself_and_what_it_starts_blocks_no_signal() {
    let dir = tempfile::tempdir().expect("dir");
    let hook_mask = dir.path().join("hook-mask");
    let cmd_mask = dir.path().join("cmd-mask");
    let hook = format!("grep SigBlk /proc/self/status >> {}", hook_mask.display());
    let args = SidecarArgs::file(dir.path())
        .flag("--on-change", &hook)
        .build();
    let script = format!(
        "trap 'exit 0' TERM; grep SigBlk /proc/self/status > {}; sleep 60 & wait",
        cmd_mask.display()
    );
    let cmd = ["sh".to_owned(), "-c".to_owned(), script];
    let mut sidecar = Sidecar::spawn_run("masks", dir.path(), &args, &cmd);
    sidecar.settles_in("leader", Duration::from_secs(10));
    let own = std::fs::read_to_string(format!("/proc/{}/status", sidecar.pid)).expect("status");
    let stop = 1 << (libc::SIGTERM - 1) | 1 << (libc::SIGINT - 1);
    assert_eq!(blocked(&own).map(|m| m & stop), Some(stop), "{own}");
    let read = |path: &std::path::Path| {
        common::eventually(Duration::from_secs(10), || {
            blocked(&std::fs::read_to_string(path).ok()?)
        })
    };
    assert_eq!(read(&cmd_mask), Some(0), "CMD's mask");
    assert_eq!(read(&hook_mask), Some(0), "the hook's mask");
    let code = sidecar.terminate(Duration::from_secs(10));
    assert!(code.is_some_and(|c| c.success()), "{code:?}");
}
