//! Shared and exclusive holders (`--mode`): the scenario every store with a
//! read-write lock runs, and the checks on what the sidecars logged.

use std::path::Path;
use std::time::{Duration, Instant};

use super::slots::finish_and_check;
use crate::common::checks::checker::LoggedClaim;
use crate::common::{eventually, send_signal, Sidecar, SidecarArgs};
use leasekeeper::backend::sql::QUEUE_TTLS;

/// The sidecars that say they lead now (their indices).
pub fn leading(cars: &[Sidecar]) -> Vec<usize> {
    (cars.iter().enumerate())
        .filter(|(_, c)| c.is_running())
        .filter(|(_, c)| c.leader().is_some_and(|v| v["is_leader"] == true))
        .map(|(i, _)| i)
        .collect()
}

/// Waits until exactly the sidecars `want` lead (sorted indices).
fn lead_exactly(cars: &[Sidecar], want: &[usize], limit: Duration, what: &str) {
    if eventually(limit, || (leading(cars) == want).then_some(())).is_none() {
        for c in cars {
            eprintln!("==== {} {:?}\n{}", c.name, c.leader(), c.stderr());
        }
        panic!("{what}: {want:?} should lead, {:?} do", leading(cars));
    }
}

/// For `hold` long, none of `cars` at `nobody` may say it leads.
fn never_lead(cars: &[Sidecar], nobody: &[usize], hold: Duration, what: &str) {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        let now = leading(cars);
        assert!(
            !now.iter().any(|i| nobody.contains(i)),
            "{what}: {now:?} lead"
        );
        // Pause: between looks through the window.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The safety of a read-write lock, from the claims (`shared(identity)`: whether that
/// candidate held shared): an exclusive claim overlaps no other claim; a claim that
/// ended before an exclusive one began has a smaller token, one that began after it
/// ended a greater one; a process's claims never overlap.
pub fn check_mode_claims(claims: &[LoggedClaim], shared: impl Fn(&str) -> bool) {
    for x in claims.iter().filter(|c| !shared(&c.identity)) {
        for t in claims.iter().filter(|t| !std::ptr::eq(*t, x)) {
            let apart = t.until() <= x.start || t.start >= x.until();
            assert!(apart, "an exclusive claim beside another: {x:?} and {t:?}");
            if t.until() <= x.start {
                assert!(t.token < x.token, "token did not grow: {t:?} then {x:?}");
            } else {
                assert!(t.token > x.token, "token did not grow: {x:?} then {t:?}");
            }
        }
    }
    for a in claims {
        for b in claims
            .iter()
            .filter(|b| b.pid == a.pid && b.start > a.start)
        {
            assert!(b.start >= a.until(), "one process, two claims: {a:?} {b:?}");
        }
    }
}

/// Three shared holders at once; an exclusive candidate waits for all of them and
/// keeps a later shared one out meanwhile (writers go first); the last shared
/// holder's SIGTERM lets it in within `graceful`; its kill -9 lets the waiting shared
/// one in after the ttl; an election's candidate (no `--mode`) is exclusive too, for
/// the readers queued before it and after it; with `pause`, the last reader's
/// SIGSTOP lets a waiting writer in after the ttl. The logged claims keep every rule
/// of [`check_mode_claims`].
pub fn shared_and_exclusive(args: SidecarArgs, ttl: Duration, graceful: Duration, pause: bool) {
    scenario(args, ttl, graceful, pause);
}

fn scenario(args: SidecarArgs, ttl: Duration, graceful: Duration, pause: bool) {
    let dir = tempfile::tempdir().expect("dir");
    let spawn = |name: &str, mode: Option<&str>| {
        let log = dir.path().join(format!("{name}.jsonl"));
        let mut a = args
            .clone()
            .flag("--transition-log", &log.display().to_string());
        if let Some(m) = mode {
            a = a.flag("--mode", m);
        }
        Sidecar::spawn(name, dir.path(), &a.build())
    };
    let start = ttl * 3 + Duration::from_secs(15);
    let mut cars: Vec<Sidecar> = (0..3)
        .map(|i| spawn(&format!("r-{i}"), Some("shared")))
        .collect();
    lead_exactly(&cars, &[0, 1, 2], start, "three shared holders");
    let v = cars[0].leader().expect("/leader");
    assert_eq!(v["mode"], "shared", "{v}");

    // A writer waits behind them, and keeps a later reader out.
    cars.push(spawn("w-0", Some("exclusive")));
    cars[3].settles_in("follower", start);
    cars.push(spawn("r-3", Some("shared")));
    cars[4].settles_in("follower", start);
    never_lead(&cars, &[3, 4], ttl, "beside the shared holders");

    // The readers' SIGTERMs: the writer gets in as the last one leaves.
    cars[2].terminate(Duration::from_secs(10));
    cars[1].terminate(Duration::from_secs(10));
    let t0 = Instant::now();
    cars[0].signal(libc::SIGTERM);
    lead_exactly(&cars, &[3], graceful, "the writer alone");
    eprintln!(
        "exclusive lock taken {:?} after the last shared holder's SIGTERM",
        t0.elapsed()
    );
    assert!(cars[0].wait_exit(Duration::from_secs(10)).is_some());
    never_lead(&cars, &[4], ttl / 2, "beside the writer");

    // The writer's kill -9: the waiting reader gets in after the ttl; an election's
    // candidate, queued behind it (or come after it), waits.
    cars.push(spawn("e-0", None));
    cars[5].settles_in("follower", start);
    let killed = (
        u64::from(cars[3].pid),
        leasekeeper::clock::monotonic_now_ns(),
    );
    cars[3].kill();
    lead_exactly(&cars, &[4], start, "the reader after the writer");
    never_lead(
        &cars,
        &[5],
        ttl / 2,
        "an election's candidate beside a reader",
    );
    cars[4].signal(libc::SIGTERM);
    lead_exactly(&cars, &[5], start, "the election's candidate");
    // A reader waits for the election's holder too.
    cars.push(spawn("r-4", Some("shared")));
    cars[6].settles_in("follower", start);
    never_lead(&cars, &[6], ttl / 2, "a reader beside an election's holder");
    cars[5].signal(libc::SIGTERM);
    lead_exactly(&cars, &[6], start, "a reader after the election's holder");
    if pause {
        paused_reader(&mut cars, &spawn, ttl, start);
    }
    finish(cars, dir.path(), killed);
}

/// The last reader's SIGSTOP: a waiting writer gets in after the ttl, and the reader,
/// continued, does not lead beside it.
fn paused_reader(
    cars: &mut Vec<Sidecar>,
    spawn: &dyn Fn(&str, Option<&str>) -> Sidecar,
    ttl: Duration,
    start: Duration,
) {
    let r = cars.len() - 1;
    cars.push(spawn("w-1", Some("exclusive")));
    let w = cars.len() - 1;
    cars[w].settles_in("follower", start);
    send_signal(cars[r].pid, libc::SIGSTOP);
    lead_exactly(
        cars,
        &[w],
        ttl * 3 + Duration::from_secs(5),
        "the writer past a stopped reader",
    );
    send_signal(cars[r].pid, libc::SIGCONT);
    never_lead(cars, &[r], ttl, "the reader, continued, beside the writer");
}

/// Stops every sidecar and checks what they logged (`killed`: the pid killed, and
/// when, CLOCK_MONOTONIC ns).
fn finish(cars: Vec<Sidecar>, dir: &Path, killed: (u64, u64)) {
    finish_and_check(cars, dir, killed, |claims| {
        assert!(claims.len() >= 6, "too few tenures logged: {claims:?}");
        check_mode_claims(claims, |id| id.starts_with("r-"));
    });
}

/// Two shared holders (`args[0]`) leading, a writer (`args[1]`) waiting behind them,
/// and a later shared candidate (`args[2]`) following, each settled within `start`,
/// then a second more: `r-0`, `r-1`, `w-0`, `r-2`.
fn a_writer_waiting_behind_two_readers(
    dir: &Path,
    args: [&SidecarArgs; 3],
    start: Duration,
    statements: &dyn Fn() -> usize,
) -> (Vec<Sidecar>, Instant) {
    let spawn = |name: &str, args: &SidecarArgs, mode: &str| {
        Sidecar::spawn(name, dir, &args.clone().flag("--mode", mode).build())
    };
    let mut cars = vec![
        spawn("r-0", args[0], "shared"),
        spawn("r-1", args[0], "shared"),
    ];
    lead_exactly(&cars, &[0, 1], start, "two shared holders");
    cars.push(spawn("w-0", args[1], "exclusive"));
    cars[2].settles_in("follower", start);
    let joined = Instant::now();
    cars.push(spawn("r-2", args[2], "shared"));
    cars[3].settles_in("follower", start);
    let looked = goes_quiet(
        statements,
        start,
        joined,
        "the counted candidate, once it waits",
    );
    (cars, looked)
}

/// Waits until `statements` stays the same for a second (a candidate that has just
/// joined sends its last statements of the join late on a busy machine), at most
/// `limit`; one that keeps sending fails here. Returns a time before the last
/// statement counted (`since` when none came: see [`crate::common::settled`]).
fn goes_quiet(
    statements: &dyn Fn() -> usize,
    limit: Duration,
    since: Instant,
    who: &str,
) -> Instant {
    let quiet = crate::common::settled(limit, Duration::from_secs(1), since, statements);
    quiet.unwrap_or_else(|| panic!("{who} never stopped sending statements for a second"))
}

/// The time of the sample before `statements` next changes, waiting at most `limit`;
/// `None` when it does not change.
fn next_statement(statements: &dyn Fn() -> usize, limit: Duration) -> Option<Instant> {
    let end = Instant::now() + limit;
    let (mut at, seen) = (Instant::now(), statements());
    while Instant::now() < end {
        // Observed: a look is tens of statements over more than a poll.
        std::thread::sleep(crate::common::POLL_EVERY);
        let now_at = Instant::now();
        if statements() != seen {
            return Some(at);
        }
        at = now_at;
    }
    None
}

/// A writer waiting for shared holders sends the store nothing, and is woken by the
/// last one's release (0 steady requests per waiting candidate).
/// `writer`'s every statement is counted by `statements` (its own database user);
/// `reader` and `writer` share the election, with `ttl` and a retry interval of half
/// a ttl. Two shared holders lead; the writer waits; a later shared candidate comes
/// and must stay out for 3 ttl while the writer sends nothing (its waiting mark
/// lives as long as its session, not its last write) and still names a holder.
/// Then, right after the writer's next statement if it sends one within a ttl (a
/// writer that looks now and then: its next look is then about a retry interval
/// away), both shared holders get SIGTERM: the writer must lead within ttl/4 of the
/// last one's.
pub fn a_waiting_writer_is_silent_and_woken(
    reader: SidecarArgs,
    writer: SidecarArgs,
    ttl: Duration,
    statements: &dyn Fn() -> usize,
) {
    let dir = tempfile::tempdir().expect("dir");
    let start = ttl * 3 + Duration::from_secs(15);
    let (mut cars, _) = a_writer_waiting_behind_two_readers(
        dir.path(),
        [&reader, &writer, &reader],
        start,
        statements,
    );
    let before = statements();
    assert!(before > 0, "the writer's statements are not counted");
    never_lead(&cars, &[2, 3], ttl * 3, "beside the shared holders");
    let sent = statements() - before;
    eprintln!("the waiting writer sent {sent} statements in 3 ttl ({ttl:?} each)");
    let view = cars[2].leader().expect("/leader");
    assert_eq!(
        view["state"],
        "follower",
        "the silent writer: {view}\n{}",
        cars[2].stderr()
    );

    // Right after a look, if the writer looks at all.
    let seen = statements();
    let looked = eventually(ttl, || (statements() > seen).then_some(())).is_some();
    if looked {
        // Observed: the writer's SIGTERM comes 100 ms into a look, if it looks at all.
        std::thread::sleep(Duration::from_millis(100));
    }
    cars[1].terminate(Duration::from_secs(10));
    let t0 = Instant::now();
    cars[0].signal(libc::SIGTERM);
    lead_exactly(&cars, &[2], start, "the writer after the shared holders");
    let took = t0.elapsed();
    eprintln!("exclusive lock taken {took:?} after the last shared holder's SIGTERM");
    if sent != 0 || looked {
        for c in &cars {
            eprintln!("==== {}\n{}", c.name, c.stderr());
        }
    }
    assert_eq!(
        sent, 0,
        "the waiting writer sent {sent} statements in 3 ttl"
    );
    assert!(!looked, "the waiting writer looked at the store");
    assert!(
        took < ttl / 4,
        "the writer took the lock {took:?} after the last shared holder's SIGTERM"
    );
}

/// A shared candidate kept out by a waiting writer sends the store nothing, through
/// the writer's wait and its tenure, and is woken by the writer's release.
/// `late`'s every statement is counted by `statements` (its own database user); the
/// others run `plain`; all share the election, with `ttl` and a retry interval of
/// half a ttl. Two shared holders lead; a writer waits; the late shared candidate
/// comes and must stay out for 3 ttl sending nothing. The shared holders leave: the
/// writer leads; once the late one has sent nothing for a second (its look at the
/// holders' leaving may come late on a busy machine), it must send nothing for 2 ttl
/// more (at least one: not across its backstop look, [`Silent::behind`]), unless the
/// writer's statement connection was replaced meanwhile (a request cut off by its
/// deadline on a starved machine: the lock the late one waits for goes with it),
/// which may cost two looks. With `cut` (it ends the writer's statement
/// connection on the server and returns once the writer holds its turn lock again,
/// on a new one), that replacement is forced: the late one may look, then must be
/// silent again for 2 ttl. The writer's SIGTERM: the late one must lead within ttl/4.
pub fn a_reader_behind_a_waiting_writer_is_silent_and_woken(
    plain: SidecarArgs,
    late: SidecarArgs,
    ttl: Duration,
    statements: &dyn Fn() -> usize,
    cut: Option<&dyn Fn()>,
) {
    let dir = tempfile::tempdir().expect("dir");
    let start = ttl * 3 + Duration::from_secs(15);
    let (mut cars, mut looked) =
        a_writer_waiting_behind_two_readers(dir.path(), [&plain, &plain, &late], start, statements);
    let before = statements();
    assert!(before > 0, "the late reader's statements are not counted");
    never_lead(&cars, &[2, 3], ttl * 3, "beside the shared holders");
    let waiting = statements() - before;
    eprintln!("the reader behind the waiting writer sent {waiting} statements in 3 ttl");

    cars[1].terminate(Duration::from_secs(10));
    cars[0].signal(libc::SIGTERM);
    lead_exactly(&cars, &[2], start, "the writer after the shared holders");
    let silent = Silent {
        cars: &cars,
        statements,
        ttl,
        start,
    };
    let behind = silent.behind(&mut looked, "once the writer holds");
    let replaced = fresh_connections(&cars[2]);
    let again = cut.map(|cut| {
        cut();
        silent.behind(&mut looked, "once the writer's connection is cut")
    });

    let t0 = Instant::now();
    cars[2].signal(libc::SIGTERM);
    lead_exactly(&cars, &[3], start, "the reader after the writer");
    let took = t0.elapsed();
    eprintln!("shared lock taken {took:?} after the writer's SIGTERM");
    if waiting != 0 || behind != 0 || again.is_some_and(|n| n != 0) {
        for c in &cars {
            eprintln!("==== {}\n{}", c.name, c.stderr());
        }
    }
    assert_eq!(
        waiting, 0,
        "the reader behind the waiting writer sent {waiting} statements in 3 ttl"
    );
    assert!(
        behind == 0 || (replaced > 0 && behind <= 24 * replaced),
        "the reader behind the writer sent {behind} statements in up to 2 ttl \
         ({replaced} replaced connections of the writer)"
    );
    if let Some(again) = again {
        assert_eq!(
            again, 0,
            "the reader behind the writer, once it looked at the cut, sent {again} statements in up to 2 ttl"
        );
    }
    assert!(
        took < ttl / 4,
        "the reader took the lock {took:?} after the writer's SIGTERM"
    );
}

/// The late reader (`cars[3]`) of [`a_reader_behind_a_waiting_writer_is_silent_and_woken`],
/// watched for silence while the writer (`cars[2]`) holds.
struct Silent<'a> {
    cars: &'a [Sidecar],
    statements: &'a dyn Fn() -> usize,
    ttl: Duration,
    start: Duration,
}

impl Silent<'_> {
    /// Once the late reader has sent nothing for a second, the statements it sends
    /// in 2 ttl (while it stays out). `looked` is a time before its last statement;
    /// its wait for the writer's turn lock runs out [`QUEUE_TTLS`] ttl after that
    /// (its backstop),
    /// and it looks then: the window ends a second before that look, or, when less
    /// than a ttl would be left, begins after it.
    fn behind(&self, looked: &mut Instant, when: &str) -> usize {
        let (statements, ttl) = (self.statements, self.ttl);
        let who = format!("the late reader, {when}");
        *looked = goes_quiet(statements, self.start, *looked, &who);
        let room = |looked: Instant| {
            (looked + ttl * QUEUE_TTLS)
                .saturating_duration_since(Instant::now())
                .saturating_sub(Duration::from_secs(1))
        };
        let mut window = room(*looked).min(ttl * 2);
        if window < ttl {
            let backstop = window + Duration::from_secs(5);
            window = ttl * 2;
            if let Some(at) = next_statement(statements, backstop) {
                *looked = goes_quiet(statements, self.start, at, &who);
                window = room(*looked).min(window);
            }
        }
        let before = statements();
        never_lead(self.cars, &[3], window, "beside the writer");
        let sent = statements() - before;
        eprintln!(
            "the reader behind the writer that holds sent {sent} statements in {window:?}, {when}"
        );
        sent
    }
}

/// How often a SQL sidecar replaced its statement connection (its log says so).
fn fresh_connections(car: &Sidecar) -> usize {
    car.stderr()
        .matches("a request did not finish: a fresh connection")
        .count()
}

/// A frozen (SIGSTOP) waiting writer keeps shared candidates out for a few ttl at
/// most while a shared holder holds (`backend::sql::QUEUE_TTLS`): a live waiting
/// writer looks at least every 6 ttl, writing its waiting row again, and a row not
/// written for 6 ttl past its expiry keeps nobody out beside shared holders (on
/// Redis, `backend::redis::quiet::QUEUE_TTLS`: a live one looks at least every 5 ttl,
/// and its place goes stale 6 ttl after its last look, while the readers keep the
/// queue too). A shared
/// holder leads; a writer waits; a shared candidate queues behind it (in its turn
/// lock) and stays out for 9 ttl (a live waiting writer keeps its place past the
/// staleness limit); the writer is stopped and a second shared candidate comes: both
/// must lead within 8 ttl of the stop (the bound is 7 ttl after the writer's last
/// look; the queued one's own 6-ttl backstop alone would let it in at about 9 ttl
/// here), and not within a ttl (the frozen writer still has its place then).
/// Continued, the writer does not lead beside them.
pub fn a_frozen_waiting_writer_keeps_shared_candidates_out_briefly(
    args: SidecarArgs,
    ttl: Duration,
) {
    let dir = tempfile::tempdir().expect("dir");
    let start = ttl * 3 + Duration::from_secs(15);
    let spawn = |name: &str, mode: &str| {
        Sidecar::spawn(name, dir.path(), &args.clone().flag("--mode", mode).build())
    };
    let mut cars = vec![spawn("r-0", "shared")];
    lead_exactly(&cars, &[0], start, "the shared holder");
    cars.push(spawn("w-0", "exclusive"));
    cars[1].settles_in("follower", start);
    cars.push(spawn("r-1", "shared"));
    cars[2].settles_in("follower", start);
    never_lead(&cars, &[1, 2], ttl * 9, "behind the live waiting writer");
    send_signal(cars[1].pid, libc::SIGSTOP);
    let stopped = Instant::now();
    cars.push(spawn("r-2", "shared"));
    never_lead(&cars, &[2, 3], ttl, "behind the frozen writer, at first");
    lead_exactly(
        &cars,
        &[0, 2, 3],
        (ttl * 8).saturating_sub(stopped.elapsed()),
        "the shared candidates past the frozen writer",
    );
    eprintln!(
        "shared candidates past the frozen waiting writer {:?} after its SIGSTOP",
        stopped.elapsed()
    );
    send_signal(cars[1].pid, libc::SIGCONT);
    never_lead(
        &cars,
        &[1],
        ttl * 2,
        "the writer, continued, beside shared holders",
    );
}
