//! The mysql backend against a real MariaDB 10.11: the lease row and its token (also
//! after the row is deleted), passwords, a user without the right to create the table,
//! the election checker with leader, server and link faults and tampering with the row,
//! and verified TLS with a client certificate (`REQUIRE X509`); the scenarios are
//! `common::scenarios::sql_suite`'s. Also: the named lock after the leader lost a connection, and
//! a switchover that wakes the named candidate through the lock.

use crate::common;

use common::harness::recorder::Recorder;
use common::servers::mariadb_server::MariaServer;

common::scenarios::sql_suite::sql_backend_tests! {
    server: crate::common::servers::mariadb_server::MariaServer,
    recorder: Recorder::mysql,
    lease_row_lifecycle_and_tokens: mysql_lease_row_lifecycle_and_tokens,
    tokens_never_go_backwards_after_a_deleted_row: mysql_tokens_never_go_backwards_after_a_deleted_row,
    passwords_come_from_a_file_only: mysql_passwords_come_from_a_file_only,
    user_without_create_right_gets_one_clear_line: mysql_user_without_create_right_gets_one_clear_line,
    election_survives_the_checker: mysql_election_survives_the_checker,
    survives_partitions_slow_links_and_tampering: mysql_survives_partitions_slow_links_and_tampering,
    tls_with_a_private_ca_and_a_client_certificate: mysql_tls_with_a_private_ca_and_a_client_certificate,
    switchover_goes_to_the_named_candidate: mysql_switchover_goes_to_the_named_candidate,
    a_reservation_nobody_uses_runs_out_within_a_ttl: mysql_a_reservation_nobody_uses_runs_out_within_a_ttl,
}

common::scenarios::sql_suite::sql_store_rule_tests! {
    server: crate::common::servers::mariadb_server::MariaServer,
    new: leasekeeper::backend::sql::mysql::MysqlBackend::new,
}

/// A gray failure: the leader's link turns slow (a long pipe, then a congested
/// queue); another candidate leads within 2 × ttl, and the slow one leads again.
#[test]
fn a_slow_leader_on_a_long_pipe_gets_out_of_the_way() {
    let db = MariaServer::shared();
    common::scenarios::sql_suite::slow_leader(
        &db,
        common::harness::faults::Link::Delay(std::time::Duration::from_millis(1500)),
    );
}

#[test]
fn a_slow_leader_on_a_congested_link_gets_out_of_the_way() {
    let db = MariaServer::start();
    common::scenarios::sql_suite::slow_leader(
        &db,
        common::harness::faults::Link::Congested(std::time::Duration::from_millis(1200)),
    );
}

/// Which of the leader's two connections to the server a test kills.
#[derive(Clone, Copy, Debug)]
enum Lost {
    /// The one the lease statements go over: its next statement opens another.
    Statements,
    /// The one that holds the election's named lock: the followers queued for the
    /// lock get it while the row is still the leader's.
    Lock,
}

/// The server's ids of the connections `pid` holds to `db` (its sockets' local ports,
/// matched against the process list's `host:port`).
fn connections_of(db: &MariaServer, pid: u32) -> Vec<String> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.display().to_string();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let port_of = |addr: &str| u16::from_str_radix(addr.split(':').nth(1)?, 16).ok();
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let ports: Vec<u16> = tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let ours = f.len() > 9 && inodes.contains(f[9]) && port_of(f[2]) == Some(db.port);
            ours.then(|| port_of(f[1])).flatten()
        })
        .collect();
    db.sql("SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE USER = 'lk'")
        .lines()
        .filter_map(|l| {
            let (id, host) = l.split_once('\t')?;
            let port: u16 = host.rsplit_once(':')?.1.parse().ok()?;
            ports.contains(&port).then(|| id.to_owned())
        })
        .collect()
}

/// A graceful handover stays a matter of milliseconds after the leader lost one of its
/// two connections (killed by the server, a proxy or a DBA), once the sidecars had half a
/// second to get over it: the followers must still be waiting for the named lock, and
/// the leader must hold it again.
#[test]
fn mysql_graceful_handover_stays_fast_after_the_leader_loses_a_connection() {
    use common::scenarios::sql_suite::db_flags;
    use common::{eventually, Sidecar};
    use std::time::{Duration, Instant};
    let db = MariaServer::start();
    let dir = tempfile::tempdir().expect("dir");
    // ttl 30 s: a follower that left the lock's queue comes back only after the
    // retry interval (10 s), far beyond the bound below.
    let args = db_flags(&db, "lk").ttl("30s").election("wake").build();
    let lock = leasekeeper::backend::sql::mysql::lock_name("lk", "leasekeeper_leases", "wake");
    let mut slots: Vec<Sidecar> = Vec::new();
    let mut generation = 0;
    let mut spawn = |slots: &mut Vec<Sidecar>, at: Option<usize>| {
        generation += 1;
        let s = Sidecar::spawn(&format!("s{generation}"), dir.path(), &args);
        assert!(s.wait_listening(Duration::from_secs(10)), "{}", s.stderr());
        match at {
            Some(i) => slots[i] = s,
            None => slots.push(s),
        }
    };
    spawn(&mut slots, None);
    slots[0].settles_in("leader", Duration::from_secs(10));
    spawn(&mut slots, None);
    spawn(&mut slots, None);
    for lost in [Lost::Statements, Lost::Lock, Lost::Statements, Lost::Lock] {
        // Everyone follows the leader, and the leader's connection holds the lock.
        let (li, conns, holder) = eventually(Duration::from_secs(20), || {
            let li = slots
                .iter()
                .position(|s| s.leader().is_some_and(|v| v["is_leader"] == true))?;
            let name = slots[li].leader()?["identity"].clone();
            let all = slots
                .iter()
                .all(|s| s.leader().is_some_and(|v| v["leader"] == name));
            let holder = db.sql(&format!("SELECT IS_USED_LOCK('{lock}')"));
            let conns = connections_of(&db, slots[li].pid);
            (all && conns.len() == 2 && conns.contains(&holder)).then_some((li, conns, holder))
        })
        .unwrap_or_else(|| panic!("no settled leader holding the lock before {lost:?}"));
        let victim = match lost {
            Lost::Lock => holder.clone(),
            Lost::Statements => conns.iter().find(|c| **c != holder).expect("two").clone(),
        };
        db.sql(&format!("KILL CONNECTION {victim}"));
        // The fault: the killed connection is gone for 500 ms before the SIGTERM.
        std::thread::sleep(Duration::from_millis(500));
        let t0 = Instant::now();
        slots[li].signal(libc::SIGTERM);
        let next = eventually(Duration::from_secs(15), || {
            slots
                .iter()
                .enumerate()
                .find(|(i, s)| *i != li && s.leader().is_some_and(|v| v["is_leader"] == true))
                .map(|_| t0.elapsed())
        });
        let logs: Vec<String> = slots.iter().map(Sidecar::stderr).collect();
        let took =
            next.unwrap_or_else(|| panic!("no new leader after {lost:?}:\n{}", logs.join("\n")));
        eprintln!("graceful handover after the leader lost its {lost:?} connection: {took:?}");
        assert!(
            took < Duration::from_secs(3),
            "graceful handover took {took:?} after the leader lost its {lost:?} connection"
        );
        assert!(slots[li]
            .wait_exit(Duration::from_secs(5))
            .is_some_and(|s| s.success()));
        spawn(&mut slots, Some(li));
    }
}

/// A switchover wakes the named candidate through the named lock at once, also from
/// the back of the lock's queue: the follower at its head gets the lock, is refused by
/// the reservation and passes the lock on. The retry interval (4 s) is far longer than
/// the handover may take, so the named candidate's own timer is not what woke it.
#[test]
fn mysql_switchover_passes_the_named_lock_on_to_the_named_candidate() {
    use common::{harness::http, Sidecar};
    use std::time::{Duration, Instant};
    let db = MariaServer::shared();
    let mut args = common::scenarios::sql_suite::db_flags(&db, "lk")
        .ttl("6s")
        .election("pass")
        .flag("--retry-interval", "4s")
        .build();
    args.push("--enable-release-endpoint".into());
    let dir = tempfile::tempdir().expect("dir");
    let mut cars: Vec<Sidecar> = Vec::new();
    for (i, state) in ["leader", "follower", "follower"].into_iter().enumerate() {
        // One after the other: the followers queue for the lock in this order.
        cars.push(Sidecar::spawn(&format!("p{i}"), dir.path(), &args));
        cars[i].settles_in(state, Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(300));
    }
    // p1 heads the queue; name p2 behind it, then p0 (queued again behind p1 once its
    // sit-out after the release, a renew interval, is over).
    for (from, to) in [(0, 2), (2, 0)] {
        if to == 0 {
            std::thread::sleep(Duration::from_millis(3000));
        }
        let t0 = Instant::now();
        let answer = http::post(cars[from].port, &format!("/release?to=p{to}"));
        assert_eq!(answer.as_ref().map(|a| a.0), Some(200), "{answer:?}");
        let led = common::eventually(Duration::from_secs(8), || {
            cars[to]
                .leader()
                .filter(|v| v["is_leader"] == true)
                .map(|_| t0.elapsed())
        })
        .unwrap_or_else(|| panic!("p{to} never led:\n{}", cars[to].stderr()));
        eprintln!("switchover p{from} -> p{to}: p{to} leads after {led:?}");
        assert!(
            led < Duration::from_millis(1500),
            "p{to} took {led:?} to lead: not woken through the lock\n{}",
            cars[to].stderr()
        );
    }
    assert!(
        !cars[1].stderr().contains("acquired leadership"),
        "p1 led in between:\n{}",
        cars[1].stderr()
    );
}

/// See [`common::scenarios::sql_suite::followers_send_no_statement_at_steady_state`].
#[test]
fn mysql_followers_send_no_statement_at_steady_state() {
    let db = MariaServer::start();
    common::scenarios::sql_suite::followers_send_no_statement_at_steady_state(&db);
}

/// Silent followers still learn of every next leader: only the first follower in the
/// named lock's queue wakes when the leader's session ends, so a new leader that got
/// the lock as a follower lets it go once and every follower in the queue looks (a
/// roll call). After a crash (-9), a graceful stop and a freeze (SIGSTOP: the server
/// ends the leader's idle sessions after a ttl), every follower names the new leader
/// soon after it leads, and not at the retry backstop (20 ttl, 40 s).
#[test]
fn mysql_every_silent_follower_learns_of_the_next_leader() {
    use common::scenarios::sql_suite::db_flags;
    use common::{eventually, Sidecar};
    use std::time::{Duration, Instant};
    let db = MariaServer::shared();
    let dir = tempfile::tempdir().expect("dir");
    let args = db_flags(&db, "lk").ttl("2s").election("roll").build();
    let mut cars: Vec<Sidecar> = Vec::new();
    let mut generation = 0;
    let mut spawn = |cars: &mut Vec<Sidecar>, at: Option<usize>| {
        generation += 1;
        let s = Sidecar::spawn(&format!("r{generation}"), dir.path(), &args);
        assert!(s.wait_listening(Duration::from_secs(10)), "{}", s.stderr());
        match at {
            Some(i) => cars[i] = s,
            None => cars.push(s),
        }
    };
    spawn(&mut cars, None);
    cars[0].settles_in("leader", Duration::from_secs(10));
    for _ in 0..3 {
        spawn(&mut cars, None);
    }
    let leading = |cars: &[Sidecar]| {
        cars.iter()
            .position(|s| s.leader().is_some_and(|v| v["is_leader"] == true))
    };
    for signal in [libc::SIGKILL, libc::SIGTERM, libc::SIGSTOP] {
        let li = eventually(Duration::from_secs(20), || {
            let li = leading(&cars)?;
            let name = cars[li].name.clone();
            cars.iter()
                .all(|s| s.leader().is_some_and(|v| v["leader"] == name.as_str()))
                .then_some(li)
        })
        .expect("no settled leader");
        // A second of silence, so that every follower waits in the lock's queue.
        std::thread::sleep(Duration::from_secs(1));
        cars[li].signal(signal);
        // (Never asking the frozen one: its port accepts and never answers.)
        let next = eventually(Duration::from_secs(10), || {
            (0..cars.len())
                .find(|i| *i != li && cars[*i].leader().is_some_and(|v| v["is_leader"] == true))
        })
        .unwrap_or_else(|| panic!("no new leader after signal {signal}"));
        let t0 = Instant::now();
        let name = cars[next].name.clone();
        let stale = || {
            cars.iter()
                .enumerate()
                .filter(|(i, _)| *i != li && *i != next)
                .filter(|(_, s)| !s.leader().is_some_and(|v| v["leader"] == name.as_str()))
                .map(|(_, s)| (s.name.clone(), s.leader()))
                .collect::<Vec<_>>()
        };
        let learned = eventually(Duration::from_secs(10), || stale().is_empty().then_some(()));
        assert!(
            learned.is_some(),
            "after signal {signal}, {name} leads but followers still name another after {:?}: {:?}",
            t0.elapsed(),
            stale()
        );
        eprintln!(
            "signal {signal}: every follower named {name} {:?} after it led",
            t0.elapsed()
        );
        if signal == libc::SIGSTOP {
            cars[li].signal(libc::SIGCONT);
        } else {
            let _ = cars[li].wait_exit(Duration::from_secs(5));
            spawn(&mut cars, Some(li));
        }
    }
}

// ---------------------------------------------------------------------------------
// MySQL's own store rules beyond `common::scenarios::sql_suite`'s, reached directly.

mod mysql_store_rules {
    use std::time::Duration;

    use leasekeeper::backend::sql::mysql::MysqlBackend;
    use leasekeeper::backend::sql::{Args as SqlArgs, Dialect};
    use leasekeeper::backend::{Backend, Campaign, Candidacy};
    use leasekeeper::timing::Timing;

    use crate::common::harness::faults::{FaultProxy, Link};
    use crate::common::scenarios::backend_switchover::runtime;
    use crate::common::scenarios::sql_suite::SqlDb;
    use crate::common::servers::mariadb_server::MariaServer;

    fn candidate(url: &str, election: &str, identity: &str, ttl: Duration) -> MysqlBackend {
        let settings = SqlArgs {
            mysql_url: Some(url.to_owned()),
            ..Default::default()
        }
        .settings(Dialect::Mysql)
        .expect("sql settings");
        let timing = Timing::for_ttl(ttl);
        MysqlBackend::new(
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

    fn counter(db: &MariaServer, election: &str) -> u64 {
        db.admin(&format!(
            "SELECT token FROM leasekeeper_leases_tokens WHERE election = '{election}'"
        ))
        .trim()
        .parse()
        .unwrap_or(0)
    }

    /// A campaign's token is reserved (the counter) and then handed out by the take,
    /// two statements: when the row's token was raised between them (by hand here, on a
    /// slow link: 300 ms each way), the take hands out a token above the reserved one,
    /// and the counter must catch up with it. Else, once the row is deleted, a fresh
    /// candidate (no floor) would be counted a token the earlier tenure already had.
    #[test]
    fn a_token_raised_between_the_reservation_and_the_take_raises_the_counter() {
        let db = MariaServer::shared();
        let direct = format!("127.0.0.1:{}", db.port);
        let proxy = FaultProxy::start(direct.parse().expect("addr"));
        let url = db.url_for("lk").replace(&direct, &proxy.addr());
        assert!(url.contains(&proxy.addr()), "{url}");
        let rt = runtime();
        let (mut a, first) = rt.block_on(async {
            let mut a = candidate(&url, "between", "A", Duration::from_secs(10));
            // The first look inserts the missing row, free; the second takes it.
            let mut first = 0;
            for _ in 0..2 {
                if let Campaign::Acquired { token } = a.campaign().await.expect("campaign") {
                    first = token;
                    break;
                }
            }
            assert!(first > 0, "A never took the free row");
            a.release().await.expect("release");
            (a, first)
        });
        proxy.set(Link::Delay(Duration::from_millis(300)));
        let campaign = rt.spawn(async move {
            let c = a.campaign().await;
            (a, c)
        });
        let reserved = crate::common::eventually(Duration::from_secs(8), || {
            (counter(&db, "between") > first).then_some(())
        });
        assert!(reserved.is_some(), "A's reservation never ran");
        db.admin("UPDATE leasekeeper_leases SET token = token + 100 WHERE election = 'between'");
        let (mut a, took) = rt.block_on(campaign).expect("campaign task");
        let Ok(Campaign::Acquired { token }) = took else {
            panic!("A should lead, its campaign found {took:?}");
        };
        assert!(token > first + 100, "token {token} after the raised row");
        proxy.set(Link::Pass);
        rt.block_on(async {
            a.release().await.expect("release");
            drop(a);
            db.admin("DELETE FROM leasekeeper_leases WHERE election = 'between'");
            let ttl = Duration::from_secs(1);
            let mut fresh = candidate(&db.url_for("lk"), "between", "F", ttl);
            // The missing row comes back fenced for a ttl.
            for _ in 0..2 {
                let c = fresh.campaign().await.expect("campaign");
                assert!(!matches!(c, Campaign::Acquired { .. }), "{c:?}");
            }
            // The rule: the missing row comes back fenced for a ttl.
            tokio::time::sleep(ttl + Duration::from_millis(100)).await;
            let mut next = None;
            for _ in 0..2 {
                if let Campaign::Acquired { token } = fresh.campaign().await.expect("campaign") {
                    next = Some(token);
                    break;
                }
            }
            let next = next.expect("the fresh candidate never took the row");
            assert!(
                next > token,
                "a fresh candidate got token {next} after the tenure of {token}"
            );
        });
    }
}
