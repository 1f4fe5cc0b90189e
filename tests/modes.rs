//! Shared and exclusive holders (`--mode`) on every store with a read-write lock,
//! against the real servers: the scenario of `common/modes.rs` (three shared
//! holders, a writer that waits for them and keeps later readers out, an election's
//! candidate as a writer, kill -9, SIGTERM and SIGSTOP), checked on the transition
//! logs; and the settings refused.

mod common;

use std::time::Duration;

use common::checker::{self, ElectionSpec, Fault};
use common::curator::{compile, Jvm};
use common::etcd_server::EtcdCluster;
use common::modes::{
    a_reader_behind_a_waiting_writer_is_silent_and_woken, a_waiting_writer_is_silent_and_woken,
    leading, shared_and_exclusive,
};
use common::zk_server::ZkEnsemble;
use common::{eventually, run_to_exit, Sidecar, SidecarArgs};
// The SQL stores' runs.
use common::backend_switchover::runtime;
use common::mariadb_server::MariaServer;
use common::pg_server::PgServer;
use common::sql_modes;
use common::sql_suite::{db_flags, SqlDb};
use leasekeeper::backend::sql::mysql::MysqlBackend;
use leasekeeper::backend::sql::postgres::PostgresBackend;

const GRACEFUL: Duration = Duration::from_secs(2);

#[test]
fn shared_and_exclusive_on_file() {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path()).ttl("2s").election("rw");
    shared_and_exclusive(args, Duration::from_secs(2), GRACEFUL, false);
}

#[test]
fn shared_and_exclusive_on_etcd() {
    let etcd = EtcdCluster::start(1);
    let args = SidecarArgs::etcd(&etcd.endpoints())
        .ttl("2s")
        .election("rw");
    shared_and_exclusive(args, Duration::from_secs(2), GRACEFUL, true);
}

/// A waiting writer lists every shared holder (`holders`, each `mode: shared`), and a
/// reader the writer once it holds.
#[test]
fn etcd_lists_the_shared_holders() {
    let etcd = EtcdCluster::start(1);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::etcd(&etcd.endpoints())
        .ttl("2s")
        .election("rw");
    let spawn = |name: &str, mode: &str| {
        Sidecar::spawn(name, dir.path(), &args.clone().flag("--mode", mode).build())
    };
    let mut cars: Vec<Sidecar> = (0..3).map(|i| spawn(&format!("r-{i}"), "shared")).collect();
    let held = eventually(Duration::from_secs(20), || {
        (leading(&cars) == [0, 1, 2]).then_some(())
    });
    assert!(held.is_some(), "three readers");
    cars.push(spawn("w-0", "exclusive"));
    let listed = eventually(Duration::from_secs(10), || {
        let v = cars[3].leader()?;
        let list = v["holders"].as_array()?.clone();
        (list.len() == 3 && list.iter().all(|h| h["mode"] == "shared")).then_some(list)
    });
    assert!(listed.is_some(), "the writer lists: {:?}", cars[3].leader());
    for c in &mut cars[..3] {
        c.terminate(Duration::from_secs(10));
    }
    cars.push(spawn("r-3", "shared"));
    let listed = eventually(Duration::from_secs(10), || {
        let v = cars[4].leader()?;
        let list = v["holders"].as_array()?.clone();
        (list.len() == 1 && list[0]["identity"] == "w-0" && list[0]["mode"] == "exclusive")
            .then_some(())
    });
    assert!(listed.is_some(), "the reader lists: {:?}", cars[4].leader());
}

/// The key layout of etcd's `recipes.RWMutex` (prefix = the election): a Go writer's
/// key `<prefix>/write/<n>` (attached to its session's lease) keeps our shared
/// candidate out until it goes, and a Go reader's `<prefix>/read/<n>` keeps our
/// exclusive candidate out, while our shared candidate holds beside it. Put here by
/// etcdctl, as the recipe puts them.
#[test]
fn etcd_shares_the_lock_with_the_rwmutex_layout() {
    let etcd = EtcdCluster::start(1);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::etcd(&etcd.endpoints())
        .ttl("2s")
        .election("rw");
    let lease = |ttl: &str| {
        let out = etcd.etcdctl(&["lease", "grant", ttl]);
        out.split_whitespace().nth(1).expect("lease id").to_owned()
    };
    let (go_writer, go_reader) = (lease("30"), lease("30"));
    etcd.etcdctl(&["put", "rw/write/1", "", "--lease", &go_writer]);
    let spawn = |name: &str, mode: &str| {
        Sidecar::spawn(name, dir.path(), &args.clone().flag("--mode", mode).build())
    };
    let mut cars = vec![spawn("r-0", "shared")];
    cars[0].settles_in("follower", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    assert!(leading(&cars).is_empty(), "a reader beside a Go writer");
    etcd.etcdctl(&["lease", "revoke", &go_writer]);
    let led = eventually(Duration::from_secs(5), || {
        (leading(&cars) == [0]).then_some(())
    });
    assert!(
        led.is_some(),
        "the reader never led after the Go writer went"
    );
    cars[0].terminate(Duration::from_secs(10));

    etcd.etcdctl(&["put", "rw/read/2", "", "--lease", &go_reader]);
    cars.push(spawn("w-0", "exclusive"));
    cars[1].settles_in("follower", Duration::from_secs(20));
    cars.push(spawn("r-1", "shared"));
    cars[2].settles_in("follower", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        leading(&cars).is_empty(),
        "beside a Go reader, a writer, and a reader behind it"
    );
    let keys = etcd.etcdctl(&["get", "rw/", "--prefix", "--keys-only"]);
    assert!(
        keys.contains("rw/write/") && keys.contains("rw/read/"),
        "{keys}"
    );
    etcd.etcdctl(&["lease", "revoke", &go_reader]);
    let led = eventually(Duration::from_secs(5), || {
        (leading(&cars) == [1]).then_some(())
    });
    assert!(
        led.is_some(),
        "the writer never led after the Go reader went"
    );
    cars[1].terminate(Duration::from_secs(10));
    let led = eventually(Duration::from_secs(5), || {
        (leading(&cars) == [2]).then_some(())
    });
    assert!(led.is_some(), "the reader never led after the writer went");
}

#[test]
fn shared_and_exclusive_on_zookeeper() {
    let zk = ZkEnsemble::start(1);
    let args = SidecarArgs::zookeeper(&zk.connect_string())
        .ttl("2s")
        .election("rw");
    shared_and_exclusive(args, Duration::from_secs(2), GRACEFUL, true);
}

/// Curator's `InterProcessReadWriteLock` on the election's node (the names
/// `_c_<uuid>-__READ__<n>` / `__WRIT__`, ordered by sequence): its write lock keeps
/// our shared candidate out until released; its read lock is held beside ours; our
/// exclusive holder keeps its read lock out until it goes.
#[test]
fn zookeeper_shares_the_lock_with_curators_read_write_lock() {
    let classes = compile("CuratorRwLock");
    let zk = ZkEnsemble::start(1);
    let connect = zk.connect_string();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::zookeeper(&connect).ttl("2s").election("rw");
    let spawn = |name: &str, mode: &str| {
        Sidecar::spawn(name, dir.path(), &args.clone().flag("--mode", mode).build())
    };
    let mut curator = Jvm::start(
        classes.path(),
        "CuratorRwLock",
        &[&connect, "/leasekeeper/rw"],
    );
    let said = |c: &mut Jvm, want: &str| {
        let line = c.line(Duration::from_secs(10));
        assert_eq!(line.as_deref(), Some(want), "Curator");
    };
    curator.send("write");
    said(&mut curator, "held");
    let mut cars = vec![spawn("r-0", "shared")];
    cars[0].settles_in("follower", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        leading(&cars).is_empty(),
        "a reader beside Curator's writer"
    );
    curator.send("release");
    said(&mut curator, "released");
    let led = eventually(Duration::from_secs(5), || {
        (leading(&cars) == [0]).then_some(())
    });
    assert!(
        led.is_some(),
        "the reader never led after Curator's writer went"
    );
    curator.send("read");
    said(&mut curator, "held");

    cars.push(spawn("w-0", "exclusive"));
    cars[1].settles_in("follower", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(leading(&cars), [0], "a writer beside two readers");
    curator.send("release");
    said(&mut curator, "released");
    cars[0].terminate(Duration::from_secs(10));
    let led = eventually(Duration::from_secs(5), || {
        (leading(&cars) == [1]).then_some(())
    });
    assert!(
        led.is_some(),
        "the writer never led after both readers went"
    );
    curator.send("read");
    assert_eq!(
        curator.line(Duration::from_secs(2)),
        None,
        "Curator read beside our writer"
    );
    cars[1].terminate(Duration::from_secs(10));
    said(&mut curator, "held");
    curator.close();
}

/// The election checker's faults (kill -9, SIGSTOP of the leader and of the store,
/// release, graceful stops) on three `--mode exclusive` candidates: the writer's side
/// of the read-write lock keeps invariant 1, tokens grow, and a new leader follows
/// every fault.
fn exclusive_under_the_checker(args: SidecarArgs, server: &mut dyn checker::ServerControl) {
    let rounds = (0..18)
        .map(|i| match i % 6 {
            1 => Fault::Kill9,
            2 => Fault::PauseLeader,
            3 => Fault::PauseServer,
            4 => Fault::Release,
            _ => Fault::Graceful,
        })
        .collect();
    let report = checker::run(ElectionSpec::three_candidates(
        args.ttl("1s")
            .election("checker")
            .flag("--mode", "exclusive")
            .build(),
        Duration::from_secs(1),
        rounds,
        Some(server),
    ));
    eprintln!("{report:?}");
    assert!(report.claims >= 14, "only {} tenures", report.claims);
}

#[test]
fn exclusive_mode_survives_the_checker_on_etcd() {
    let mut etcd = EtcdCluster::start(1);
    let args = SidecarArgs::etcd(&etcd.endpoints());
    exclusive_under_the_checker(args, &mut etcd);
}

#[test]
fn exclusive_mode_survives_the_checker_on_zookeeper() {
    let mut zk = ZkEnsemble::start(1);
    let args = SidecarArgs::zookeeper(&zk.connect_string());
    exclusive_under_the_checker(args, &mut zk);
}

// ---- PostgreSQL and MySQL (the shared holders' rows beside the lease row) ----

#[test]
fn shared_and_exclusive_on_postgres() {
    let db = PgServer::start();
    let args = SidecarArgs::postgres(&db.url()).ttl("2s").election("rw");
    shared_and_exclusive(args, Duration::from_secs(2), GRACEFUL, true);
}

#[test]
fn shared_and_exclusive_on_mysql() {
    let db = MariaServer::start();
    let args = SidecarArgs::mysql(&db.url()).ttl("2s").election("rw");
    shared_and_exclusive(args, Duration::from_secs(2), GRACEFUL, true);
}

/// See [`common::modes::a_waiting_writer_is_silent_and_woken`]: the writer's role
/// logs every statement it runs (`log_statement = all`).
#[test]
fn postgres_a_waiting_writer_is_silent_and_woken() {
    let db = PgServer::start();
    db.psql("CREATE ROLE quiet LOGIN SUPERUSER; ALTER ROLE quiet SET log_statement = 'all'");
    let statements = || {
        db.log()
            .lines()
            .filter(|l| l.contains("LOG:  statement: ") || l.contains("LOG:  execute "))
            .count()
    };
    let (reader, writer) = waiting_writer_args(&db);
    a_waiting_writer_is_silent_and_woken(reader, writer, Duration::from_secs(4), &statements);
}

/// See [`common::modes::a_waiting_writer_is_silent_and_woken`]: the server's general
/// log (as a table) counts every command of the writer's user.
#[test]
fn mysql_a_waiting_writer_is_silent_and_woken() {
    let db = MariaServer::start();
    db.sql(
        "CREATE USER 'quiet'@'127.0.0.1'; GRANT ALL ON lk.* TO 'quiet'@'127.0.0.1';
         SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1;",
    );
    let statements = || {
        db.sql("SELECT COUNT(*) FROM mysql.general_log WHERE user_host LIKE 'quiet[quiet]%'")
            .trim()
            .parse::<usize>()
            .unwrap_or(0)
    };
    let (reader, writer) = waiting_writer_args(&db);
    a_waiting_writer_is_silent_and_woken(reader, writer, Duration::from_secs(4), &statements);
}

/// See [`common::modes::a_reader_behind_a_waiting_writer_is_silent_and_woken`]: the
/// late reader's role logs every statement it runs (`log_statement = all`).
#[test]
fn postgres_a_reader_behind_a_waiting_writer_is_silent_and_woken() {
    let db = PgServer::start();
    db.psql("CREATE ROLE quiet LOGIN SUPERUSER; ALTER ROLE quiet SET log_statement = 'all'");
    let statements = || {
        db.log()
            .lines()
            .filter(|l| l.contains("LOG:  statement: ") || l.contains("LOG:  execute "))
            .count()
    };
    let (plain, late) = waiting_writer_args(&db);
    a_reader_behind_a_waiting_writer_is_silent_and_woken(
        plain,
        late,
        Duration::from_secs(4),
        &statements,
    );
}

/// See [`common::modes::a_reader_behind_a_waiting_writer_is_silent_and_woken`]: the
/// server's general log (as a table) counts every command of the late reader's user.
#[test]
fn mysql_a_reader_behind_a_waiting_writer_is_silent_and_woken() {
    let db = MariaServer::start();
    db.sql(
        "CREATE USER 'quiet'@'127.0.0.1'; GRANT ALL ON lk.* TO 'quiet'@'127.0.0.1';
         SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1;",
    );
    let statements = || {
        db.sql("SELECT COUNT(*) FROM mysql.general_log WHERE user_host LIKE 'quiet[quiet]%'")
            .trim()
            .parse::<usize>()
            .unwrap_or(0)
    };
    let (plain, late) = waiting_writer_args(&db);
    a_reader_behind_a_waiting_writer_is_silent_and_woken(
        plain,
        late,
        Duration::from_secs(4),
        &statements,
    );
}

/// An election's candidate whose user may not read the shared holders' table (rights
/// granted before `--mode` came to the election) still leads once the shared holder
/// left: the queue is best effort, it costs only the order.
#[test]
fn postgres_an_election_candidate_that_may_not_read_the_queue_still_leads() {
    let db = PgServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let reader = db_flags(&db, "lk")
        .ttl("2s")
        .election("rw")
        .flag("--mode", "shared");
    let mut r = Sidecar::spawn("r-0", dir.path(), &reader.build());
    r.settles_in("leader", Duration::from_secs(15));
    r.terminate(Duration::from_secs(10));
    db.grant_limited();
    let limited = db_flags(&db, "limited").ttl("2s").election("rw");
    let e = Sidecar::spawn("e-0", dir.path(), &limited.build());
    e.settles_in("leader", Duration::from_secs(15));
}

/// The shared holders' flags (user `lk`) and the writer's (user `quiet`): ttl 4 s,
/// retry interval 2 s.
fn waiting_writer_args(db: &dyn SqlDb) -> (SidecarArgs, SidecarArgs) {
    let args = |user: &str| {
        db_flags(db, user)
            .ttl("4s")
            .election("quiet-rw")
            .flag("--retry-interval", "2s")
    };
    (args("lk"), args("quiet"))
}

#[test]
fn exclusive_mode_survives_the_checker_on_postgres() {
    let mut db = PgServer::start();
    let args = SidecarArgs::postgres(&db.url());
    exclusive_under_the_checker(args, &mut db);
}

#[test]
fn exclusive_mode_survives_the_checker_on_mysql() {
    let mut db = MariaServer::start();
    let args = SidecarArgs::mysql(&db.url());
    exclusive_under_the_checker(args, &mut db);
}

#[test]
fn postgres_shared_and_exclusive_rows() {
    let db = PgServer::start();
    runtime().block_on(sql_modes::shared_and_exclusive_rows(
        &db,
        PostgresBackend::new,
    ));
}

#[test]
fn mysql_shared_and_exclusive_rows() {
    let db = MariaServer::start();
    runtime().block_on(sql_modes::shared_and_exclusive_rows(&db, MysqlBackend::new));
}

#[test]
fn postgres_the_queue_admits_in_arrival_order() {
    let db = PgServer::start();
    runtime().block_on(sql_modes::the_queue_admits_in_arrival_order(
        &db,
        PostgresBackend::new,
    ));
}

#[test]
fn mysql_the_queue_admits_in_arrival_order() {
    let db = MariaServer::start();
    runtime().block_on(sql_modes::the_queue_admits_in_arrival_order(
        &db,
        MysqlBackend::new,
    ));
}

#[test]
fn postgres_concurrent_shared_and_exclusive() {
    let db = PgServer::start();
    runtime().block_on(sql_modes::concurrent_shared_and_exclusive(
        &db,
        PostgresBackend::new,
    ));
}

#[test]
fn mysql_concurrent_shared_and_exclusive() {
    let db = MariaServer::start();
    runtime().block_on(sql_modes::concurrent_shared_and_exclusive(
        &db,
        MysqlBackend::new,
    ));
}

#[test]
fn postgres_a_release_racing_a_join_keeps_the_row() {
    let db = PgServer::start();
    runtime().block_on(sql_modes::a_release_racing_a_join_keeps_the_row(
        &db,
        PostgresBackend::new,
    ));
}

#[test]
fn mysql_a_release_racing_a_join_keeps_the_row() {
    let db = MariaServer::start();
    runtime().block_on(sql_modes::a_release_racing_a_join_keeps_the_row(
        &db,
        MysqlBackend::new,
    ));
}

/// `leasekeeper run --mode shared`: two commands run at once, each told its mode.
#[test]
fn run_passes_the_mode_and_shared_commands_run_at_once() {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path())
        .ttl("2s")
        .election("rw")
        .flag("--mode", "shared")
        .build();
    let cmd: Vec<String> = ["sh", "-c", "echo mode=$LEASEKEEPER_MODE; sleep 30"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let _a = Sidecar::spawn_run("a", dir.path(), &args, &cmd);
    let _b = Sidecar::spawn_run("b", dir.path(), &args, &cmd);
    let both = eventually(Duration::from_secs(20), || {
        let out = |n: &str| std::fs::read_to_string(dir.path().join(format!("{n}.stdout")));
        (out("a").ok()? == "mode=shared\n" && out("b").ok()? == "mode=shared\n").then_some(())
    });
    assert!(both.is_some(), "both commands should run, told mode=shared");
}

/// Bad `--mode` values, `--mode` with several slots, and `--mode` on a store without
/// a read-write lock are refused with one line naming the setting.
#[test]
fn bad_mode_settings_are_refused_with_one_line() {
    for (args, needle) in [
        (vec!["--mode", "read"], "--mode \"read\""),
        (
            vec!["--mode", "shared", "--holders", "2"],
            "--mode shared with --holders",
        ),
        (
            vec![
                "--backend",
                "redlock",
                "--redis-url",
                "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3",
                "--mode",
                "exclusive",
            ],
            "--mode exclusive: the redlock backend",
        ),
        (
            vec![
                "--backend",
                "kubernetes",
                "--namespace",
                "team",
                "--mode",
                "shared",
            ],
            "--mode shared: a Kubernetes Lease has one holder",
        ),
    ] {
        let (code, _, err) = run_to_exit(&args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn shared_and_exclusive_on_redis() {
    let server = common::redis_server::RedisServer::start();
    let args = SidecarArgs::redis(&server.url()).ttl("2s").election("rw");
    shared_and_exclusive(args, Duration::from_secs(2), GRACEFUL, true);
}

#[test]
fn exclusive_mode_survives_the_checker_on_redis() {
    let mut server = common::redis_server::RedisServer::start_persistent();
    let args = SidecarArgs::redis(&server.url());
    exclusive_under_the_checker(args, &mut server);
}

/// A waiting writer lists every shared holder (`holders`, each `mode: shared`), and a
/// reader the writer once it holds; an election's follower names a shared holder.
#[test]
fn redis_lists_the_shared_holders() {
    let server = common::redis_server::RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url()).ttl("2s").election("rw");
    let spawn = |name: &str, mode: Option<&str>| {
        let mut a = args.clone();
        if let Some(m) = mode {
            a = a.flag("--mode", m);
        }
        Sidecar::spawn(name, dir.path(), &a.build())
    };
    let mut cars: Vec<Sidecar> = (0..3)
        .map(|i| spawn(&format!("r-{i}"), Some("shared")))
        .collect();
    let held = eventually(Duration::from_secs(20), || {
        (leading(&cars) == [0, 1, 2]).then_some(())
    });
    assert!(held.is_some(), "three readers");
    cars.push(spawn("w-0", Some("exclusive")));
    cars.push(spawn("e-0", None));
    let listed = eventually(Duration::from_secs(10), || {
        let v = cars[3].leader()?;
        let list = v["holders"].as_array()?.clone();
        (list.len() == 3 && list.iter().all(|h| h["mode"] == "shared")).then_some(list)
    });
    assert!(listed.is_some(), "the writer lists: {:?}", cars[3].leader());
    let named = eventually(Duration::from_secs(10), || {
        let v = cars[4].leader()?;
        let name = v["leader"].as_str()?.to_owned();
        name.starts_with("r-").then_some(())
    });
    assert!(
        named.is_some(),
        "the election's follower: {:?}",
        cars[4].leader()
    );
    for c in &mut cars[..3] {
        c.terminate(Duration::from_secs(10));
    }
    cars.push(spawn("r-3", Some("shared")));
    let listed = eventually(Duration::from_secs(10), || {
        let v = cars[5].leader()?;
        let list = v["holders"].as_array()?.clone();
        (list.len() == 1 && list[0]["mode"] == "exclusive").then_some(())
    });
    assert!(listed.is_some(), "the reader lists: {:?}", cars[5].leader());
}

// The Redis read-write lock's rules, each reached directly: candidates built by the
// library and driven through the `Backend` trait one call at a time (no elector), so
// the script's condition under test is the only defence.
mod redis_rules {
    use std::time::Duration;

    use leasekeeper::backend::redis::rw::RwBackend;
    use leasekeeper::backend::redis::{Args, RedisBackend};
    use leasekeeper::backend::{Backend, Campaign, Candidacy, LockMode, Renewal, Wake};
    use leasekeeper::timing::Timing;

    use crate::common::backend_switchover::runtime;
    use crate::common::redis_server::RedisServer;

    fn candidacy<T>(
        url: &str,
        election: &str,
        identity: &str,
        ttl: Duration,
        mode: LockMode,
        make: impl FnOnce(&leasekeeper::backend::redis::RedisSettings, &Candidacy) -> T,
    ) -> T {
        let settings = Args {
            redis_url: vec![url.to_owned()],
            ..Default::default()
        }
        .single()
        .expect("redis settings");
        let timing = Timing::for_ttl(ttl);
        make(
            &settings,
            &Candidacy {
                election,
                identity,
                timing: &timing,
                mode,
            },
        )
    }

    fn reader(url: &str, id: &str, ttl: Duration) -> RwBackend {
        candidacy(url, "rw", id, ttl, LockMode::Shared, |s, c| {
            RwBackend::new(s, c).expect("backend")
        })
    }

    fn writer(url: &str, id: &str, ttl: Duration) -> RwBackend {
        candidacy(url, "rw", id, ttl, LockMode::Exclusive, |s, c| {
            RwBackend::new(s, c).expect("backend")
        })
    }

    fn elector(url: &str, id: &str, ttl: Duration) -> RedisBackend {
        candidacy(url, "rw", id, ttl, LockMode::Election, |s, c| {
            RedisBackend::new(s, c).expect("backend")
        })
    }

    async fn leads(who: &str, b: &mut impl Backend) -> u64 {
        match b.campaign().await {
            Ok(Campaign::Acquired { token }) => token,
            other => panic!("{who} should lead now, its campaign found {other:?}"),
        }
    }

    async fn does_not_lead(who: &str, b: &mut impl Backend) {
        let c = b.campaign().await.expect("campaign");
        assert!(
            !matches!(c, Campaign::Acquired { .. }),
            "{who} must not lead now: {c:?}"
        );
    }

    const READERS: &str = "leasekeeper:{rw}:readers";
    const LOCK: &str = "leasekeeper:{rw}:lock";

    /// Puts the entry of reader `id` in the past, as if it had not renewed for a ttl.
    fn expire_reader(server: &RedisServer, id: &str) {
        let listed = server.command(&format!("ZRANGE {READERS} 0 -1"));
        let listed = listed.unwrap_or_default();
        let member = (listed.lines())
            .find(|l| l.ends_with(&format!("|{id}")))
            .expect("the reader's entry");
        server.command(&format!("ZADD {READERS} XX 1 {member}"));
    }

    /// A live shared holder keeps out a writer and an election's candidate; once it
    /// expired (its score in the past, as if it were stopped for a ttl) it no longer
    /// does: the first of them in the queue takes.
    #[test]
    fn readers_keep_writers_out_until_they_expire() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut e = elector(&server.url(), "E", ttl);
            leads("R", &mut r).await;
            does_not_lead("W beside a reader", &mut w).await;
            does_not_lead("E beside a reader", &mut e).await;
            expire_reader(&server, "R");
            does_not_lead("E past an expired reader, behind W", &mut e).await;
            leads("W past an expired reader", &mut w).await;
            assert_eq!(r.renew().await.expect("renew"), Renewal::Lost, "R renewed");
        });
    }

    /// An exclusive holder (a writer, or an election's) keeps every reader out.
    #[test]
    fn writers_and_election_holders_keep_readers_out() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut e = elector(&server.url(), "E", ttl);
            leads("W", &mut w).await;
            does_not_lead("R beside a writer", &mut r).await;
            does_not_lead("E beside a writer", &mut e).await;
            w.release().await.expect("release");
            does_not_lead("E, behind R", &mut e).await;
            leads("R, first in line", &mut r).await;
            r.release().await.expect("release");
            leads("E", &mut e).await;
            does_not_lead("R beside an election's holder", &mut r).await;
            does_not_lead("W beside an election's holder", &mut w).await;
            e.release().await.expect("release");
            does_not_lead("W, queued after R", &mut w).await;
            leads("R, queued before W", &mut r).await;
        });
    }

    /// A waiting writer (and a waiting election's candidate) keeps new readers out,
    /// while the readers in keep renewing; its release takes its mark away.
    #[test]
    fn a_waiting_writer_keeps_new_readers_out() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut a = reader(&server.url(), "A", ttl);
            let mut b = reader(&server.url(), "B", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut e = elector(&server.url(), "E", ttl);
            leads("A", &mut a).await;
            does_not_lead("W", &mut w).await;
            does_not_lead("B behind a waiting writer", &mut b).await;
            assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
            w.release().await.expect("W stops waiting");
            leads("B once the writer stopped waiting", &mut b).await;
            b.release().await.expect("release");
            does_not_lead("E", &mut e).await;
            does_not_lead("B behind a waiting election's candidate", &mut b).await;
            e.release().await.expect("E stops waiting");
            leads("B once the election's candidate stopped waiting", &mut b).await;
        });
    }

    /// A shared holder renews only its own live entry, and only while nobody holds the
    /// lock exclusively; its release removes its own entry, not another reader's.
    #[test]
    fn a_reader_renews_and_releases_only_its_own_entry() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut a = reader(&server.url(), "A", ttl);
            let mut b = reader(&server.url(), "B", ttl);
            leads("A", &mut a).await;
            leads("B", &mut b).await;
            a.release().await.expect("release");
            assert_eq!(b.renew().await.expect("renew"), Renewal::Renewed, "B");
            assert_eq!(a.renew().await.expect("renew"), Renewal::Lost, "A revived");
            let mut c = reader(&server.url(), "C", ttl);
            leads("C", &mut c).await;
            expire_reader(&server, "C");
            assert_eq!(c.renew().await.expect("renew"), Renewal::Lost, "C expired");
            c.release().await.expect("release");
            let count = || {
                server
                    .command(&format!("ZCARD {READERS}"))
                    .unwrap_or_default()
            };
            assert_eq!(count().trim(), ":1", "entries left");
            server.command(&format!("SET {LOCK} ffff|99|X PX 30000"));
            assert_eq!(b.renew().await.expect("renew"), Renewal::Lost, "beside X");
            server.command(&format!("DEL {LOCK}"));
            server.command(&format!("DEL {READERS}"));
            assert_eq!(
                b.renew().await.expect("renew"),
                Renewal::Lost,
                "B's entry gone"
            );
            assert_eq!(count().trim(), ":0", "renew re-added");
        });
    }

    /// Invariant 9 for an exclusive holder: its own-key watch (`record_lost`) ends
    /// when another client overwrites or deletes the key, and not on its own renewals.
    #[test]
    fn a_writer_hears_its_key_taken_but_not_its_own_renewals() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(3);
        runtime().block_on(async {
            let within = Duration::from_millis(800);
            for tamper in ["SET {} 1|intruder|x PX 3000", "DEL {}"] {
                let mut w = writer(&server.url(), "W", ttl);
                leads("W", &mut w).await;
                for _ in 0..2 {
                    assert_eq!(w.renew().await.expect("renew"), Renewal::Renewed);
                    let own = tokio::time::timeout(within, w.record_lost()).await;
                    assert!(own.is_err(), "W's own renewal read as its key lost");
                }
                server.command(&tamper.replace("{}", LOCK));
                let heard = tokio::time::timeout(within, w.record_lost()).await;
                assert!(heard.is_ok(), "W never heard of {tamper:?}");
                server.command(&format!("DEL {LOCK}"));
                // From the take on, before any renewal.
                let mut v = writer(&server.url(), "V", ttl);
                leads("V", &mut v).await;
                server.command(&tamper.replace("{}", LOCK));
                let heard = tokio::time::timeout(within, v.record_lost()).await;
                assert!(
                    heard.is_ok(),
                    "V never heard of {tamper:?} before a renewal"
                );
                server.command(&format!("DEL {LOCK}"));
            }
        });
    }

    /// Tokens grow across every tenure, shared or exclusive, for candidates that
    /// never saw an earlier one (a fresh process each time).
    #[test]
    fn tokens_grow_across_shared_and_exclusive_tenures() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut last = 0;
            for round in 0..6 {
                let id = format!("P{round}");
                let token = match round % 3 {
                    0 => {
                        let mut b = reader(&server.url(), &id, ttl);
                        let t = leads(&id, &mut b).await;
                        b.release().await.expect("release");
                        t
                    }
                    1 => {
                        let mut b = writer(&server.url(), &id, ttl);
                        let t = leads(&id, &mut b).await;
                        b.release().await.expect("release");
                        t
                    }
                    _ => {
                        let mut b = elector(&server.url(), &id, ttl);
                        let t = leads(&id, &mut b).await;
                        b.release().await.expect("release");
                        t
                    }
                };
                assert!(token > last, "round {round}: token {token} after {last}");
                last = token;
            }
        });
    }

    /// Waiting candidates take in the order they came (the queue): of those that came
    /// while a writer held, a reader goes before an election's candidate that came
    /// after it, and a reader that came after that candidate waits behind it.
    #[test]
    fn waiting_candidates_take_in_arrival_order() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut w = writer(&server.url(), "W", ttl);
            let mut r = reader(&server.url(), "R", ttl);
            let mut e = elector(&server.url(), "E", ttl);
            let mut s = reader(&server.url(), "S", ttl);
            leads("W", &mut w).await;
            does_not_lead("R beside a writer", &mut r).await;
            does_not_lead("E beside a writer", &mut e).await;
            does_not_lead("S beside a writer", &mut s).await;
            w.release().await.expect("release");
            does_not_lead("E, come after R", &mut e).await;
            leads("R, come before E", &mut r).await;
            does_not_lead("E beside a reader", &mut e).await;
            does_not_lead("S, come after E", &mut s).await;
            r.release().await.expect("release");
            does_not_lead("S, still behind E", &mut s).await;
            leads("E, first in line", &mut e).await;
        });
    }

    /// The queue's order survives a crashed writer: once its key expired, the reader
    /// that came before the election's candidate goes first.
    #[test]
    fn the_order_survives_a_crashed_writer() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(2);
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            let mut e = elector(&server.url(), "E", ttl);
            {
                let mut w = writer(&server.url(), "W", ttl);
                leads("W", &mut w).await;
                does_not_lead("R beside a writer", &mut r).await;
                does_not_lead("E beside a writer", &mut e).await;
            }
            tokio::time::sleep(ttl + Duration::from_millis(200)).await;
            does_not_lead("E, come after R", &mut e).await;
            leads("R, come before E", &mut r).await;
        });
    }

    /// A waiting writer that sends nothing keeps its place while the readers renew
    /// (their renewals keep the queue alive): a reader that comes three ttl later is
    /// still kept out.
    #[test]
    fn a_silent_writer_keeps_its_place_while_readers_renew() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(1);
        runtime().block_on(async {
            let mut a = reader(&server.url(), "A", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut b = reader(&server.url(), "B", ttl);
            leads("A", &mut a).await;
            does_not_lead("W", &mut w).await;
            for _ in 0..9 {
                tokio::time::sleep(ttl / 3).await;
                assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
            }
            does_not_lead("B behind the silent writer", &mut b).await;
        });
    }

    /// A waiting candidate whose process is gone (its connections closed) keeps
    /// nobody out: the server no longer lists its presence, the holder's next renewal
    /// drops its place and wakes the reader that waited behind it.
    #[test]
    fn a_gone_writer_keeps_no_reader_out() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut a = reader(&server.url(), "A", ttl);
            let mut b = reader(&server.url(), "B", ttl);
            leads("A", &mut a).await;
            {
                let mut w = writer(&server.url(), "W", ttl);
                does_not_lead("W", &mut w).await;
                does_not_lead("B behind W", &mut b).await;
            }
            settle(&mut b).await;
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let (woke, renewed) = tokio::join!(
                tokio::time::timeout(Duration::from_secs(3), wakes(&mut b, ttl)),
                async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    a.renew().await.expect("renew")
                }
            );
            assert_eq!(renewed, Renewal::Renewed);
            assert_eq!(woke.ok(), Some(Wake::Changed), "B slept on");
            leads("B once W is gone", &mut b).await;
        });
    }

    /// A waiting writer that stops waiting (its release) wakes the reader queued
    /// behind it at once.
    #[test]
    fn a_writer_that_stops_waiting_wakes_the_reader_behind_it() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(60);
        runtime().block_on(async {
            let mut a = reader(&server.url(), "A", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut b = reader(&server.url(), "B", ttl);
            leads("A", &mut a).await;
            does_not_lead("W", &mut w).await;
            does_not_lead("B behind W", &mut b).await;
            settle(&mut b).await;
            let (woke, ()) = tokio::join!(
                tokio::time::timeout(Duration::from_secs(3), wakes(&mut b, ttl)),
                async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    w.release().await.expect("release")
                }
            );
            assert_eq!(woke.ok(), Some(Wake::Changed), "B slept on");
            leads("B once W stopped waiting", &mut b).await;
        });
    }

    /// Waits on `b` until nothing is pending (notices heard before now, such as the
    /// listener's look after it subscribed, wake a wait at once).
    async fn settle(b: &mut impl Backend) {
        for _ in 0..20 {
            let short = Duration::from_millis(100);
            if b.wait_for_change(short).await != Wake::Changed {
                return;
            }
        }
        panic!("a follower's wait never settled");
    }

    /// A follower's wait until it is told to look (a renewal heard, `Quiet`, is not).
    async fn wakes(b: &mut impl Backend, max: Duration) -> Wake {
        loop {
            let w = b.wait_for_change(max).await;
            if w != Wake::Quiet {
                return w;
            }
        }
    }

    /// Followers wait without polling and wake at once: the last reader's release wakes
    /// a waiting writer and (the baton) a waiting election's candidate; a writer's and
    /// an election holder's release wake a waiting reader. (The ttl is long: any
    /// other way to wake is many seconds away.)
    #[test]
    fn releases_wake_the_waiting_side_at_once() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(60);
        let soon = Duration::from_secs(3);
        let max = Duration::from_secs(40);
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            leads("R", &mut r).await;
            does_not_lead("W", &mut w).await;
            settle(&mut w).await;
            let waited = tokio::join!(tokio::time::timeout(soon, wakes(&mut w, max)), async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                r.release().await.expect("release")
            });
            assert_eq!(waited.0.ok(), Some(Wake::Changed), "the writer slept on");
            leads("W", &mut w).await;
            does_not_lead("R", &mut r).await;
            settle(&mut r).await;
            let waited = tokio::join!(tokio::time::timeout(soon, wakes(&mut r, max)), async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                w.release().await.expect("release")
            });
            assert_eq!(waited.0.ok(), Some(Wake::Changed), "the reader slept on");
            leads("R, queued", &mut r).await;
            r.release().await.expect("release");

            let mut e = elector(&server.url(), "E", ttl);
            leads("E", &mut e).await;
            does_not_lead("R", &mut r).await;
            settle(&mut r).await;
            let waited = tokio::join!(tokio::time::timeout(soon, wakes(&mut r, max)), async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                e.release().await.expect("release")
            });
            assert_eq!(waited.0.ok(), Some(Wake::Changed), "the reader slept on E");
            leads("R", &mut r).await;
            does_not_lead("E", &mut e).await;
            settle(&mut e).await;
            let waited = tokio::join!(tokio::time::timeout(soon, wakes(&mut e, max)), async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                r.release().await.expect("release")
            });
            assert_eq!(waited.0.ok(), Some(Wake::Changed), "E slept on");
            leads("E", &mut e).await;
        });
    }
}

/// What a waiting `--mode` candidate costs Redis at steady state (docs/slots.md):
/// nothing. It hears the holders' renewals (tracking pushes) and looks only when what
/// keeps it out would expire unheard-of; the holders keep its place in the queue. A
/// writer waiting for a reader and a reader waiting behind that writer send no
/// command in 8 s (four ttl) of MONITOR.
#[test]
fn a_waiting_candidate_sends_nothing_on_redis() {
    let server = common::redis_server::RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url()).ttl("2s").election("rw");
    let spawn = |name: &str, mode: &str| {
        Sidecar::spawn(name, dir.path(), &args.clone().flag("--mode", mode).build())
    };
    let mut cars = vec![spawn("r-0", "shared")];
    let held = eventually(Duration::from_secs(20), || {
        (leading(&cars) == [0]).then_some(())
    });
    assert!(held.is_some(), "the reader never led");
    cars.push(spawn("w-0", "exclusive"));
    cars[1].settles_in("follower", Duration::from_secs(20));
    cars.push(spawn("r-1", "shared"));
    cars[2].settles_in("follower", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(1));
    let seen = server.monitor(Duration::from_secs(8));
    for car in &cars {
        let ports = common::redis_server::client_ports(car.pid, server.port);
        let sent: Vec<&String> = (seen.iter())
            .filter(|(p, _)| ports.contains(p))
            .map(|(_, c)| c)
            .collect();
        eprintln!("{}: {} commands in 8 s", car.name, sent.len());
        if car.name == "r-0" {
            assert!(sent.len() >= 7, "the holder's renewals: {sent:?}");
        } else {
            assert!(sent.is_empty(), "{}: {sent:?}", car.name);
        }
    }
    assert_eq!(leading(&cars), [0], "only the reader holds");
}
