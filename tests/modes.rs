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
use common::modes::{leading, shared_and_exclusive, shared_and_exclusive_on};
use common::zk_server::ZkEnsemble;
use common::{eventually, run_to_exit, Sidecar, SidecarArgs};
// The SQL stores' runs.
use common::backend_switchover::runtime;
use common::mariadb_server::MariaServer;
use common::pg_server::PgServer;
use common::sql_modes;
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
    shared_and_exclusive_on(args, Duration::from_secs(2), GRACEFUL, true, false);
}

#[test]
fn shared_and_exclusive_on_mysql() {
    let db = MariaServer::start();
    let args = SidecarArgs::mysql(&db.url()).ttl("2s").election("rw");
    shared_and_exclusive_on(args, Duration::from_secs(2), GRACEFUL, true, false);
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
                "redis",
                "--redis-url",
                "redis://127.0.0.1:1",
                "--mode",
                "exclusive",
            ],
            "--mode exclusive: the redis backend",
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
