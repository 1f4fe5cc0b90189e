//! Shared and exclusive holders (`--mode`) on every store with a read-write lock,
//! against the real servers: the scenario of `common/scenarios/modes.rs` (three shared
//! holders, a writer that waits for them and keeps later readers out, an election's
//! candidate as a writer, kill -9, SIGTERM and SIGSTOP), checked on the transition
//! logs; and the settings refused. The cases every store runs alike are tables of
//! cases × stores (`store_matrix!`, `sql_mode_rules!`): `<case>::<store>`.

use crate::common;

use std::time::Duration;

use common::checks::checker::{self, Fault};
use common::scenarios::modes::{
    a_frozen_waiting_writer_keeps_shared_candidates_out_briefly,
    a_reader_behind_a_waiting_writer_is_silent_and_woken, a_waiting_writer_is_silent_and_woken,
    leading, shared_and_exclusive,
};
use common::scenarios::slots::logged_claims;
use common::scenarios::stores::{store_matrix, Store};
use common::servers::curator::{compile, Jvm};
use common::servers::etcd_server::EtcdCluster;
use common::servers::zk_server::ZkEnsemble;
use common::{eventually, run_to_exit, send_signal, Sidecar, SidecarArgs};
// The SQL stores' runs.
use common::scenarios::backend_switchover::runtime;
use common::scenarios::sql_modes::{self, sql_mode_rules};
use common::scenarios::sql_suite::{db_flags, SqlDb};
use common::servers::mariadb_server::MariaServer;
use common::servers::pg_server::PgServer;
use leasekeeper::backend::sql::mysql;
use leasekeeper::backend::sql::mysql::MysqlBackend;
use leasekeeper::backend::sql::postgres::PostgresBackend;

const GRACEFUL: Duration = Duration::from_secs(2);

store_matrix! {
    /// See [`common::scenarios::modes::shared_and_exclusive`] (the file store has no
    /// server to pause).
    fn shared_and_exclusive(store) on [file, etcd, zookeeper, postgres, mysql, redis, redlock] {
        let on = store.shared();
        let args = on.args().ttl("2s").election("rw");
        shared_and_exclusive(args, Duration::from_secs(2), GRACEFUL, store != Store::File);
    }

    /// A waiting writer lists every shared holder (`holders`, each `mode: shared`), and
    /// a reader the writer once it holds (on Redlock each confirmed on a majority of the
    /// nodes, not the one a campaign names).
    fn lists_the_shared_holders(store) on [etcd, redlock] {
        let on = store.shared();
        lists_the_shared_holders(on.args());
    }

    /// See [`exclusive_under_the_checker`], on a store of the test's own.
    fn exclusive_mode_survives_the_checker(store) on [etcd, zookeeper, postgres, mysql, redis, redlock] {
        let mut on = store.own();
        let args = on.args();
        exclusive_under_the_checker(args, on.control());
    }

    /// See [`common::scenarios::modes::a_frozen_waiting_writer_keeps_shared_candidates_out_briefly`]
    /// (on Redis the waiting writer's place goes stale 6 ttl after its last look, and a
    /// live one looks at least every 5 ttl: `quiet::QUEUE_TTLS`).
    fn a_frozen_waiting_writer_keeps_shared_candidates_out_briefly(store) on [postgres, mysql, redis] {
        let on = store.shared();
        let args = on.args().ttl("2s").election("frozen");
        a_frozen_waiting_writer_keeps_shared_candidates_out_briefly(args, Duration::from_secs(2));
    }

    /// See [`common::scenarios::modes::a_waiting_writer_is_silent_and_woken`]: the
    /// writer's user is `quiet`, whose statements the server logs
    /// ([`SqlDb::log_quiet_user`]).
    fn a_waiting_writer_is_silent_and_woken(store) on [postgres, mysql] {
        let on = store.own();
        let db = on.sql();
        db.log_quiet_user();
        let (reader, writer) = waiting_writer_args(db);
        let statements = || db.quiet_statements();
        a_waiting_writer_is_silent_and_woken(reader, writer, Duration::from_secs(4), &statements);
    }

    /// See [`common::scenarios::modes::a_reader_behind_a_waiting_writer_is_silent_and_woken`]:
    /// the late reader's user is `quiet`, whose statements the server logs. On MySQL the
    /// writer's turn lock, which the late reader waits for, is cut too
    /// ([`cut_the_turn_lock`]).
    fn a_reader_behind_a_waiting_writer_is_silent_and_woken(store) on [postgres, mysql] {
        let on = store.own();
        let db = on.sql();
        db.log_quiet_user();
        let statements = || db.quiet_statements();
        let cut = on.mariadb().map(|db| move || cut_the_turn_lock(db));
        let (plain, late) = waiting_writer_args(db);
        a_reader_behind_a_waiting_writer_is_silent_and_woken(
            plain,
            late,
            Duration::from_secs(4),
            &statements,
            cut.as_ref().map(|c| c as &dyn Fn()),
        );
    }
}

sql_mode_rules! {
    shared_and_exclusive_rows,
    the_queue_admits_in_arrival_order,
    concurrent_shared_and_exclusive,
    a_release_racing_a_join_keeps_the_row,
    past_a_writer_that_does_not_take_a_free_row,
    an_election_candidate_from_before_the_queue_takes_its_turn,
    a_shared_release_does_not_wait_for_the_election_lock,
    a_writer_lets_its_turn_lock_go_at_its_release,
}

/// Ends the connection that holds the MySQL writer `w-0`'s turn lock (KILL on the
/// server) and returns once the writer holds its turn lock again, on a new one.
fn cut_the_turn_lock(db: &MariaServer) {
    let turn = format!(
        "{}:t",
        mysql::candidate_lock(
            &mysql::lock_name(db.database(), "leasekeeper_leases", "quiet-rw"),
            "w-0"
        )
    );
    let holder = || {
        db.sql(&format!("SELECT IS_USED_LOCK('{turn}')"))
            .trim()
            .to_owned()
    };
    // The writer may replace its connection between the read and the KILL (a request
    // cut off by its deadline on a busy machine): the KILL of the one that went fails,
    // and the new holder is read and cut.
    let mut last = String::new();
    let killed = eventually(Duration::from_secs(4), || {
        let id = holder();
        if id.parse::<u64>().is_err() {
            last = format!("the writer holds no turn lock: {id}");
            return None;
        }
        match db.run_sql(&format!("KILL {id}")) {
            Ok(_) => Some(id),
            Err(e) => {
                last = format!("KILL {id}: {e}");
                None
            }
        }
    });
    let killed = killed.unwrap_or_else(|| panic!("no turn lock cut: {last}"));
    let again = eventually(Duration::from_secs(4), || {
        let now = holder();
        (now.parse::<u64>().is_ok() && now != killed).then_some(())
    });
    assert!(again.is_some(), "the writer never took its turn lock again");
}

/// Three readers lead; a writer that comes then lists all three (`holders`, each
/// `mode: shared`); once they left and the writer holds, a reader lists the writer
/// alone (`mode: exclusive`). `args`: the store's, ttl and election set here.
fn lists_the_shared_holders(args: SidecarArgs) {
    let dir = tempfile::tempdir().expect("dir");
    let args = args.ttl("2s").election("rw");
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
    // Observed: 2 s in which the reader must not lead beside the Go writer.
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
    // Observed: 2 s in which nobody may lead beside the Go reader's queued writer.
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

/// Curator's `InterProcessReadWriteLock` on the election's node (the names
/// `_c_<uuid>-__READ__<n>` / `__WRIT__`, ordered by sequence): its write lock keeps
/// our shared candidate out until released; its read lock is held beside ours; our
/// exclusive holder keeps its read lock out until it goes.
#[test]
fn zookeeper_shares_the_lock_with_curators_read_write_lock() {
    let classes = compile("CuratorRwLock");
    let zk = ZkEnsemble::shared();
    let connect = zk.connect_string();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::zookeeper(&connect).ttl("2s").election("rw");
    let spawn = |name: &str, mode: &str| {
        let log = dir.path().join(format!("{name}.jsonl"));
        let args = (args.clone().flag("--mode", mode))
            .flag("--transition-log", &log.display().to_string());
        Sidecar::spawn(name, dir.path(), &args.build())
    };
    let mut curator = Jvm::start(
        classes.path(),
        "CuratorRwLock",
        &[&connect, "/leasekeeper/rw"],
    );
    let said = |c: &mut Jvm, want: &str| {
        let line = c.line(Duration::from_secs(10)).unwrap_or_default();
        assert_eq!(line.split(' ').next(), Some(want), "Curator: {line}");
    };
    curator.send("write");
    said(&mut curator, "held");
    let mut cars = vec![spawn("r-0", "shared")];
    cars[0].settles_in("follower", Duration::from_secs(20));
    // Observed: 2 s in which the reader must not lead beside Curator's writer.
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
    // Observed: 2 s in which the writer must not lead beside the readers.
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
    // Curator's read lock while our writer leads only once our writer's claim ended
    // (its session lapsed under load: it steps down before the server ends it).
    let early = curator.line(Duration::from_secs(2));
    if let Some(line) = &early {
        let at = (line.strip_prefix("held "))
            .and_then(|ns| ns.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("Curator: {line}"));
        let claims = logged_claims(dir.path());
        let beside =
            (claims.iter()).find(|c| c.identity == "w-0" && c.start < at && at < c.until());
        if beside.is_some() {
            for c in &cars {
                eprintln!("==== {}\n{}", c.name, c.stderr());
            }
        }
        assert!(
            beside.is_none(),
            "Curator read at {at} beside our writer's claim {beside:?}"
        );
        eprintln!("Curator read after our writer's claim ended: {claims:?}");
    }
    cars[1].terminate(Duration::from_secs(10));
    if early.is_none() {
        said(&mut curator, "held");
    }
    curator.close();
}

/// The election checker's faults (kill -9, SIGSTOP of the leader and of the store,
/// release, graceful stops) on three `--mode exclusive` candidates: the writer's side
/// of the read-write lock keeps invariant 1, tokens grow, and a new leader follows
/// every fault.
fn exclusive_under_the_checker(args: SidecarArgs, server: &mut dyn checker::ServerControl) {
    use Fault::*;
    let pattern = [Graceful, Kill9, PauseLeader, PauseServer, Release, Graceful];
    let run = checker::Run::new(1, checker::cycle(18, &pattern)).min_claims(14);
    let args = args.election("checker").flag("--mode", "exclusive");
    run.on("exclusive", args, server);
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

/// An election without `--mode` (the shared holders' table was never created) sends
/// no statement about the queue: its candidates' campaigns, taken and refused, leave
/// no error naming `<table>_shared` in the server's log.
#[test]
fn postgres_an_election_without_mode_leaves_the_queue_alone() {
    use leasekeeper::backend::{Backend, LockMode};
    let db = PgServer::start();
    runtime().block_on(async {
        let new = PostgresBackend::new;
        let mut a = sql_modes::moded(&db, &new, "plain", "A", LockMode::Election);
        let mut b = sql_modes::moded(&db, &new, "plain", "B", LockMode::Election);
        for _ in 0..2 {
            a.campaign().await.expect("A's campaign");
            b.campaign().await.expect("B's campaign");
        }
    });
    let log = db.log();
    assert!(!log.is_empty(), "the server logs");
    assert!(
        !log.contains("leasekeeper_leases_shared"),
        "a plain election touched the queue's table:\n{log}"
    );
}

/// The same on MySQL: the server's general log (as a table) holds no statement on
/// `<table>_shared` (the look for it names it as a value, not as a table).
#[test]
fn mysql_an_election_without_mode_leaves_the_queue_alone() {
    use leasekeeper::backend::{Backend, LockMode};
    let db = MariaServer::start();
    db.sql("SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1;");
    runtime().block_on(async {
        let new = MysqlBackend::new;
        let mut a = sql_modes::moded(&db, &new, "plain", "A", LockMode::Election);
        let mut b = sql_modes::moded(&db, &new, "plain", "B", LockMode::Election);
        for _ in 0..2 {
            a.campaign().await.expect("A's campaign");
            b.campaign().await.expect("B's campaign");
        }
    });
    // The log off first: the counts' own statements name the table too.
    db.sql("SET GLOBAL general_log = 0");
    let count = |like: &str| {
        db.sql(&format!(
            "SELECT COUNT(*) FROM mysql.general_log WHERE argument LIKE '{like}'"
        ))
        .trim()
        .parse::<usize>()
        .unwrap_or(0)
    };
    assert!(count("%leasekeeper_leases%") > 0, "the general log counts");
    let touched = count("%`leasekeeper_leases_shared`%");
    assert_eq!(
        touched, 0,
        "a plain election's statements on the queue's table"
    );
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

/// Invariant 9 for a shared holder, seen from outside: its entry removed or the
/// readers' set deleted behind its back, and a writer started right after, which
/// takes the free lock at its first campaign. The reader's claim must end within
/// 100 ms of the writer's first (before it watched its entry, it claimed on until its
/// next renewal, up to the 3 s renew interval), and the writer's token is higher.
#[test]
fn a_tampered_shared_entry_ends_the_readers_claim_on_redis() {
    use common::harness::tamper::{assert_recovered, outcome, Observer};
    let server = common::servers::redis_server::RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url())
        .ttl("6s")
        .election("rw")
        .flag("--renew-interval", "3s");
    let readers = "leasekeeper:{rw}:readers";
    for (round, tamper) in ["ZREMRANGEBYRANK {} 0 -1", "DEL {}"].iter().enumerate() {
        let spawn = |name: String, mode: &str| {
            Sidecar::spawn(
                &name,
                dir.path(),
                &args.clone().flag("--mode", mode).build(),
            )
        };
        let reader = spawn(format!("r-{round}"), "shared");
        let token = eventually(Duration::from_secs(15), || {
            let v = reader.leader()?;
            (v["is_leader"] == true).then(|| v["fencing_token"].as_u64().unwrap_or(0))
        })
        .expect("the reader leads");
        let on_reader = Observer::start(&[reader.port]);
        on_reader.wait_answered(&[reader.port], Duration::from_secs(10));
        let t0 = std::time::Instant::now();
        server.command(&tamper.replace("{}", readers));
        let writer = spawn(format!("w-{round}"), "exclusive");
        let on_writer = Observer::start(&[writer.port]);
        // Observed: the window after the tampering.
        std::thread::sleep(Duration::from_secs(3));
        let mut seen = on_reader.finish();
        seen.extend(on_writer.finish());
        let outcome = outcome(&seen, reader.port, token, t0);
        eprintln!("{tamper}: {outcome:?}");
        assert_recovered(&outcome, Duration::from_millis(100));
    }
}

/// The safety attack on Redlock's read-write lock: two shared and two exclusive
/// candidates (and an election's) compete on three nodes at ttl 1 s while, round
/// after round, whoever leads is stopped gracefully and replaced, and a node is
/// paused, restarted empty, or down for a while, a leading reader is frozen
/// (SIGSTOP) past its claim, a leading writer killed (-9). From the transition logs:
/// never an exclusive claim beside any other claim, tokens growing around every
/// exclusive claim ([`common::scenarios::modes::check_mode_claims`]); and both kinds led often.
#[test]
fn redlock_readers_and_writers_under_node_faults() {
    let mut cluster = common::checks::checker::RedisCluster::start(3);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redlock(&cluster.urls())
        .ttl("1s")
        .election("rw-faults");
    let spawn = |name: &str| {
        let log = dir.path().join(format!("{name}.jsonl"));
        let mut a = args
            .clone()
            .flag("--transition-log", &log.display().to_string());
        match &name[..1] {
            "r" => a = a.flag("--mode", "shared"),
            "w" => a = a.flag("--mode", "exclusive"),
            _ => {}
        }
        Sidecar::spawn(name, dir.path(), &a.build())
    };
    let mut cars: Vec<Sidecar> = ["r-0", "r-1", "w-0", "w-1", "e-0"]
        .iter()
        .map(|n| spawn(n))
        .collect();
    let mut killed = (0, 0);
    for round in 0..16 {
        // Observed: 1.2 s of the election between faults.
        std::thread::sleep(Duration::from_millis(1_200));
        let now = leading(&cars);
        let node = round % 3;
        match round % 5 {
            0 => {
                cluster.nodes[node].pause();
                // The fault: the node stays paused for 1.5 s.
                std::thread::sleep(Duration::from_millis(1_500));
                cluster.nodes[node].resume();
            }
            1 => cluster.nodes[node].restart(),
            2 => {
                cluster.nodes[node].kill();
                // The fault: the node stays down for 1.5 s.
                std::thread::sleep(Duration::from_millis(1_500));
                cluster.nodes[node].restart();
            }
            3 => {
                if let Some(&i) = now.iter().find(|&&i| cars[i].name.starts_with('r')) {
                    send_signal(cars[i].pid, libc::SIGSTOP);
                    // The fault: the leading reader stays stopped for 2.5 s.
                    std::thread::sleep(Duration::from_millis(2_500));
                    send_signal(cars[i].pid, libc::SIGCONT);
                }
            }
            _ => {
                let writer = now.iter().find(|&&i| cars[i].name.starts_with('w'));
                if let (Some(&i), (0, _)) = (writer, killed) {
                    killed = (
                        u64::from(cars[i].pid),
                        leasekeeper::clock::monotonic_now_ns(),
                    );
                    cars[i].kill();
                }
            }
        }
        // Whoever leads now steps down gracefully; a fresh one of its kind comes.
        for i in leading(&cars) {
            cars[i].terminate(Duration::from_secs(10));
            let kind = cars[i].name[..1].to_owned();
            cars.push(spawn(&format!("{kind}-{}", cars.len())));
        }
    }
    // Observed: 3 s of the last candidates before the claims are judged.
    std::thread::sleep(Duration::from_secs(3));
    common::scenarios::slots::finish_and_check(cars, dir.path(), killed, |claims| {
        common::scenarios::modes::check_mode_claims(claims, |id| id.starts_with("r-"));
        let shared = claims
            .iter()
            .filter(|c| c.identity.starts_with("r-"))
            .count();
        let exclusive = claims.len() - shared;
        eprintln!("{shared} shared and {exclusive} exclusive claims");
        assert!(
            shared >= 4 && exclusive >= 4,
            "too few tenures of a kind: {claims:?}"
        );
    });
}

/// A waiting writer lists every shared holder (`holders`, each `mode: shared`), and a
/// reader the writer once it holds; an election's follower names a shared holder.
#[test]
fn redis_lists_the_shared_holders() {
    let server = common::servers::redis_server::RedisServer::start();
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

    use leasekeeper::backend::redis::{Args, RedisBackend};
    use leasekeeper::backend::{Backend, Campaign, Candidacy, LockMode, Renewal, Wake};
    use leasekeeper::timing::Timing;

    use crate::common::scenarios::backend_switchover::runtime;
    use crate::common::servers::redis_server::RedisServer;

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

    /// One candidate of the election `rw`, joining it as `mode` says.
    fn candidate(url: &str, id: &str, ttl: Duration, mode: LockMode) -> RedisBackend {
        candidacy(url, "rw", id, ttl, mode, |s, c| {
            RedisBackend::new(s, c).expect("backend")
        })
    }

    fn reader(url: &str, id: &str, ttl: Duration) -> RedisBackend {
        candidate(url, id, ttl, LockMode::Shared)
    }

    fn writer(url: &str, id: &str, ttl: Duration) -> RedisBackend {
        candidate(url, id, ttl, LockMode::Exclusive)
    }

    fn elector(url: &str, id: &str, ttl: Duration) -> RedisBackend {
        candidate(url, id, ttl, LockMode::Election)
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
        let member = entry_of(server, id);
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

    /// The entry of reader `id` in the readers' set.
    fn entry_of(server: &RedisServer, id: &str) -> String {
        let listed = server.command(&format!("ZRANGE {READERS} 0 -1"));
        (listed.unwrap_or_default().lines())
            .find(|l| l.ends_with(&format!("|{id}")))
            .expect("the reader's entry")
            .to_owned()
    }

    /// Invariant 9 for a shared holder: its own-record watch (`record_lost`) ends
    /// when another client removes its entry, sets a lock value beside it or deletes
    /// the readers' set, and neither on its own renewals nor on another reader's
    /// (which change the same sorted set).
    #[test]
    fn a_reader_hears_its_entry_taken_but_not_the_renewals() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(3);
        let within = Duration::from_millis(800);
        let tampers = [
            "ZREM {readers} {own}",
            "SET {lock} 1|intruder|x PX 3000",
            "DEL {readers}",
        ];
        let tamper = |how: &str, id: &str| {
            let own = entry_of(&server, id);
            let how = how.replace("{readers}", READERS).replace("{lock}", LOCK);
            server.command(&how.replace("{own}", &own));
        };
        runtime().block_on(async {
            for how in tampers {
                let mut r = reader(&server.url(), "R", ttl);
                let mut s = reader(&server.url(), "S", ttl);
                leads("R", &mut r).await;
                leads("S", &mut s).await;
                for _ in 0..2 {
                    assert_eq!(r.renew().await.expect("renew"), Renewal::Renewed);
                    assert_eq!(s.renew().await.expect("renew"), Renewal::Renewed);
                    let own = tokio::time::timeout(within, r.record_lost()).await;
                    assert!(own.is_err(), "R read a renewal as its entry lost");
                }
                tamper(how, "R");
                let heard = tokio::time::timeout(within, r.record_lost()).await;
                assert!(heard.is_ok(), "R never heard of {how:?}");
                server.command(&format!("DEL {LOCK} {READERS}"));
                // From the take on, before any renewal.
                let mut v = reader(&server.url(), "V", ttl);
                leads("V", &mut v).await;
                tamper(how, "V");
                let heard = tokio::time::timeout(within, v.record_lost()).await;
                assert!(heard.is_ok(), "V never heard of {how:?} before a renewal");
                server.command(&format!("DEL {LOCK} {READERS}"));
            }
        });
    }

    /// The tracking connection of a shared holder killed, and no renewal after it
    /// (ttl 30 s): its wait for news of its entry tracks again by itself, so the
    /// entry's removal right after is heard at once, not at its next renewal.
    #[test]
    fn a_reader_tracks_its_entry_again_when_the_tracking_connection_dies() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            leads("R", &mut r).await;
            server.kill_the_tracking_connection();
            let waiting = r.record_lost();
            tokio::pin!(waiting);
            let early = tokio::time::timeout(Duration::from_millis(500), &mut waiting).await;
            assert!(early.is_err(), "R's wait ended with its entry untouched");
            let own = entry_of(&server, "R");
            server.command(&format!("ZREM {READERS} {own}"));
            let heard = tokio::time::timeout(Duration::from_secs(2), waiting).await;
            assert!(heard.is_ok(), "R did not hear its entry removed");
        });
    }

    /// The writer's twin of the election's
    /// `a_leader_tracks_its_key_again_when_the_tracking_connection_dies`
    /// (tests/suite/redis_backend.rs): the tracking connection killed while W holds, and no
    /// renewal after it (ttl 30 s): W's wait for news of its key (`record_lost`) turns
    /// tracking on again by itself, so a takeover right after is heard at once, not at
    /// W's next renewal.
    #[test]
    fn a_writer_tracks_its_key_again_when_the_tracking_connection_dies() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut w = writer(&server.url(), "W", ttl);
            leads("W", &mut w).await;
            server.kill_the_tracking_connection();
            let waiting = w.record_lost();
            tokio::pin!(waiting);
            // W waits (and hears of the lost connection) before anyone else writes.
            let early = tokio::time::timeout(Duration::from_millis(500), &mut waiting).await;
            assert!(early.is_err(), "W's wait ended with its key untouched");
            server.command(&format!("SET {LOCK} 1|intruder|x PX 30000"));
            let heard = tokio::time::timeout(Duration::from_secs(2), waiting).await;
            assert!(
                heard.is_ok(),
                "W did not hear its key taken after its tracking died"
            );
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
            // The rule: the dropped writer's place lapses a ttl after its look.
            tokio::time::sleep(ttl + Duration::from_millis(200)).await;
            does_not_lead("E, come after R", &mut e).await;
            leads("R, come before E", &mut r).await;
        });
    }

    /// A waiting writer keeps its place while the readers renew only as long as it
    /// looks (`quiet::QUEUE_TTLS`, 6): a live one, waiting as a sidecar does (it looks
    /// by itself at least every 5 ttl, whatever renewals it hears), keeps a reader out
    /// for 9 ttl (the reader behind it looks every ttl, so its own place stays older
    /// than any the writer could take again: were the writer's place dropped, the
    /// reader would take); once it stops looking (what a frozen one looks like) its
    /// place goes
    /// stale 6 ttl after its last look although the readers keep the queue, and the
    /// reader queued behind it, waiting without polling, is woken and leads then: not
    /// within 5 ttl of that look, within 7.
    #[test]
    fn a_waiting_writer_keeps_its_place_while_it_looks() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(1);
        runtime().block_on(async {
            let mut a = reader(&server.url(), "A", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut b = reader(&server.url(), "B", ttl);
            leads("A", &mut a).await;
            does_not_lead("W", &mut w).await;
            does_not_lead("B behind W", &mut b).await;
            let live_for = tokio::time::Instant::now() + ttl * 9;
            let (looks, _, ()) = tokio::join!(
                wait_out("W beside renewing readers", &mut w, live_for),
                async {
                    while tokio::time::Instant::now() < live_for {
                        // Pause: a look every ttl through the window.
                        tokio::time::sleep(ttl).await;
                        does_not_lead("B behind the live waiting writer", &mut b).await;
                    }
                },
                renew_until(&mut a, live_for, ttl),
            );
            does_not_lead("W, its last look", &mut w).await;
            let last = tokio::time::Instant::now();
            assert!((1..=3).contains(&looks), "W looked {looks} times in 9 ttl");
            let until = last + ttl * 8;
            let (led, ()) = tokio::join!(
                async {
                    while tokio::time::Instant::now() < until {
                        let left = until - tokio::time::Instant::now();
                        if wakes(&mut b, left).await == Wake::Changed {
                            if let Ok(Campaign::Acquired { .. }) = b.campaign().await {
                                return Some(last.elapsed());
                            }
                        }
                    }
                    None
                },
                renew_until(&mut a, until, ttl),
            );
            let led = led.expect("B never led past the silent writer");
            eprintln!("B led {led:?} after the writer's last look ({looks} looks in 9 ttl)");
            assert!(led > ttl * 5, "B led {led:?} after W's last look");
            assert!(led <= ttl * 7, "B led {led:?} after W's last look");
        });
    }

    /// A follower waiting as a sidecar does until `until` (it looks when its wait
    /// says so) and never leading: how many looks it took.
    async fn wait_out(who: &str, b: &mut RedisBackend, until: tokio::time::Instant) -> u32 {
        let mut looks = 0;
        while tokio::time::Instant::now() < until {
            let left = until - tokio::time::Instant::now();
            if b.wait_for_change(left).await == Wake::Changed {
                does_not_lead(who, b).await;
                looks += 1;
            }
        }
        looks
    }

    /// A shared holder renewing every third of a ttl until `until`.
    async fn renew_until(a: &mut RedisBackend, until: tokio::time::Instant, ttl: Duration) {
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(ttl / 3).await;
            assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
        }
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
            // The rule: places younger than a second are not checked for presence.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let (woke, renewed) = tokio::join!(
                tokio::time::timeout(Duration::from_secs(3), wakes(&mut b, ttl)),
                async {
                    // Unobserved: B sleeps in its wait (inside the backend) before the renewal.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    a.renew().await.expect("renew")
                }
            );
            assert_eq!(renewed, Renewal::Renewed);
            assert_eq!(woke.ok(), Some(Wake::Changed), "B slept on");
            leads("B once W is gone", &mut b).await;
        });
    }

    /// Waits as a follower, and campaigns whenever woken, until `who` leads, within
    /// `limit` of `since`; how long after `since` it led.
    async fn woken_to_lead(
        who: &str,
        b: &mut RedisBackend,
        since: tokio::time::Instant,
        limit: Duration,
    ) -> Duration {
        loop {
            let left = (since + limit).saturating_duration_since(tokio::time::Instant::now());
            assert!(!left.is_zero(), "{who} never led");
            if wakes(b, left).await == Wake::Changed {
                if let Ok(Campaign::Acquired { .. }) = b.campaign().await {
                    return since.elapsed();
                }
            }
        }
    }

    /// A reader behind an exclusive holder that stops renewing (killed) looks at the
    /// holder's expiry, also when it heard the last renewal late (a busy machine):
    /// the expiry of `…:alive` pushes the same invalidation as a renewal, and must
    /// not put the look off by a ttl, while an election's candidate queued behind the
    /// reader takes at the queue's next lapse (ttl 2 s).
    #[test]
    fn a_reader_looks_at_a_stopped_writers_expiry_though_it_heard_its_renewal_late() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(2);
        runtime().block_on(async {
            let mut w = writer(&server.url(), "W", ttl);
            let mut r = reader(&server.url(), "R", ttl);
            leads("W", &mut w).await;
            does_not_lead("R beside W", &mut r).await;
            settle(&mut r).await;
            // The rule: W renews a third of a ttl after R settled.
            tokio::time::sleep(ttl / 3).await;
            assert_eq!(w.renew().await.expect("renew"), Renewal::Renewed);
            let renewed = tokio::time::Instant::now();
            // Unobserved: the renewal's push reaches R (inside the backend) before it waits.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let heard = r.wait_for_change(ttl).await;
            assert_eq!(heard, Wake::Quiet, "R did not hear the renewal");
            let led = woken_to_lead("R", &mut r, renewed, ttl * 4).await;
            eprintln!("R led {led:?} after W's last renewal");
            assert!(led < ttl + ttl / 4, "R led {led:?} after W's last renewal");
        });
    }

    /// A reader queued behind a silent writer (stopped: its presence still listed)
    /// looks when the writer's place lapses, half a ttl after the last shared
    /// holder's release, although its own look after that release came late (a busy
    /// machine): with nobody holding, the expiry of the holders' keeping (`…:busy`)
    /// pushes the same invalidation as a keeping, and must not put the look off by two
    /// ttl (ttl 2 s).
    #[test]
    fn a_reader_behind_a_silent_writer_looks_at_its_lapse_though_it_looked_late() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(2);
        runtime().block_on(async {
            let mut a = reader(&server.url(), "A", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut b = reader(&server.url(), "B", ttl);
            leads("A", &mut a).await;
            does_not_lead("W", &mut w).await;
            does_not_lead("B behind W", &mut b).await;
            // W's place lapses (one and a half ttl after its look) while A keeps it.
            renew_until(&mut a, tokio::time::Instant::now() + ttl * 2, ttl).await;
            a.release().await.expect("release");
            let released = tokio::time::Instant::now();
            // Observed: 800 ms into the keeping's half ttl, B must not lead.
            tokio::time::sleep(Duration::from_millis(800)).await;
            does_not_lead("B behind W, within the keeping's half ttl", &mut b).await;
            let led = woken_to_lead("B", &mut b, released, ttl * 4).await;
            eprintln!("B led {led:?} after the last shared holder's release");
            assert!(led < ttl + ttl / 4, "B led {led:?} after the release");
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
                    // Unobserved: B sleeps in its wait (inside the backend) before the release.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    w.release().await.expect("release")
                }
            );
            assert_eq!(woke.ok(), Some(Wake::Changed), "B slept on");
            leads("B once W stopped waiting", &mut b).await;
        });
    }

    /// An election's candidate queued behind a writer (the reader gone, the writer not
    /// come yet) wakes at once when that writer stops waiting: a withdrawal hands no
    /// baton, only the read-write lock's channel tells (ttl 60 s: its own look is two
    /// ttl away, at the writer's place's lapse).
    #[test]
    fn an_election_candidate_queued_behind_a_writer_wakes_when_it_stops_waiting() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(60);
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut e = elector(&server.url(), "E", ttl);
            leads("R", &mut r).await;
            does_not_lead("W", &mut w).await;
            does_not_lead("E", &mut e).await;
            r.release().await.expect("release");
            does_not_lead("E behind W", &mut e).await;
            settle(&mut e).await;
            let (woke, ()) = tokio::join!(
                tokio::time::timeout(Duration::from_secs(3), wakes(&mut e, ttl)),
                async {
                    // Unobserved: E sleeps in its wait (inside the backend) before the release.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    w.release().await.expect("release")
                }
            );
            assert_eq!(woke.ok(), Some(Wake::Changed), "E slept on");
            leads("E once W stopped waiting", &mut e).await;
        });
    }

    /// A killed candidate at the head of the queue, with nobody holding (the reader
    /// left just before it went), is found within half a ttl by the one behind it,
    /// although its place (its last look two ttl ago at most) would last longer: a
    /// queued candidate looks again within half a ttl when no holder's keeping of the
    /// queue is heard, and its look drops a place whose presence channel has no
    /// subscriber (ttl 8 s: W's place lasts until 16 s after its look).
    #[test]
    fn a_killed_head_of_the_queue_is_found_within_half_a_ttl() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(8);
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            let mut s = reader(&server.url(), "S", ttl);
            leads("R", &mut r).await;
            let mut w = writer(&server.url(), "W", ttl);
            does_not_lead("W", &mut w).await;
            does_not_lead("S behind W", &mut s).await;
            // Places younger than a second are not checked for presence.
            tokio::time::sleep(Duration::from_millis(1_200)).await;
            r.release().await.expect("release");
            settle(&mut s).await;
            does_not_lead("S behind W", &mut s).await;
            drop(w);
            let woke =
                tokio::time::timeout(ttl / 2 + Duration::from_secs(1), wakes(&mut s, ttl * 2))
                    .await;
            assert_eq!(woke.ok(), Some(Wake::Changed), "S slept on");
            leads("S once W is found gone", &mut s).await;
        });
    }

    /// The queue's two lifetimes, read at the server (ttl 30 s): a waiting candidate's
    /// place lapses one and a half ttl after its look (unless the holders keep the
    /// queue), and a release that leaves the lock free, a reader's or a writer's or an
    /// election holder's, cuts the holders' keeping (`busy`, two ttl from their last
    /// renewal) to half a ttl.
    #[test]
    fn a_place_lasts_a_ttl_and_a_half_and_a_release_lets_the_queue_go() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        let busy_ms = || {
            let r = server
                .command("PTTL leasekeeper:{rw}:busy")
                .unwrap_or_default();
            r.trim()
                .trim_start_matches(':')
                .parse::<i64>()
                .expect("PTTL")
        };
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            let mut w = writer(&server.url(), "W", ttl);
            let mut s = reader(&server.url(), "S", ttl);
            let mut e = elector(&server.url(), "E", ttl);
            leads("R", &mut r).await;
            does_not_lead("W", &mut w).await;
            let places = server.command("ZRANGE leasekeeper:{rw}:writer-waits 0 -1 WITHSCORES");
            let time = server.command("TIME").unwrap_or_default();
            let secs: Vec<i64> = (time.lines()).filter_map(|l| l.parse().ok()).collect();
            let now_ms = secs[0] * 1000 + secs[1] / 1000;
            let score: i64 = (places.unwrap_or_default().lines())
                .filter_map(|l| l.parse().ok())
                .next()
                .expect("W's place");
            let life = score - now_ms;
            assert!(
                (44_000..=45_000).contains(&life),
                "W's place lasts {life} ms"
            );
            for (what, holder) in [("R", 0), ("W", 1), ("E", 2)] {
                match holder {
                    1 => {
                        leads("W", &mut w).await;
                        does_not_lead("S behind W", &mut s).await;
                        assert_eq!(w.renew().await.expect("renew"), Renewal::Renewed);
                    }
                    2 => {
                        s.release().await.expect("S stops waiting");
                        leads("E", &mut e).await;
                        does_not_lead("S behind E", &mut s).await;
                        assert_eq!(e.renew().await.expect("renew"), Renewal::Renewed);
                    }
                    _ => assert_eq!(r.renew().await.expect("renew"), Renewal::Renewed),
                }
                assert!(busy_ms() > 55_000, "{what} keeps the queue: {}", busy_ms());
                match holder {
                    1 => w.release().await.expect("release"),
                    2 => e.release().await.expect("release"),
                    _ => r.release().await.expect("release"),
                }
                let left = busy_ms();
                assert!(
                    (1..=15_000).contains(&left),
                    "after {what}'s release: {left}"
                );
            }
        });
    }

    /// A shared holder's renewal checks the presence of the first two queued
    /// candidates at most, in arrival order, whatever the queue's length (20 writers
    /// here: it checked every one of them before, 20 `PUBSUB NUMSUB` per renewal): the
    /// head is what keeps the readers behind it out while readers hold, and the places
    /// behind it are checked as they come to the head, and by every look. A killed
    /// head is still dropped by the next renewal.
    #[test]
    fn a_renewal_checks_the_presence_of_the_queues_head_only() {
        let server = RedisServer::start();
        let ttl = Duration::from_secs(30);
        runtime().block_on(async {
            let mut r = reader(&server.url(), "R", ttl);
            leads("R", &mut r).await;
            let mut writers = Vec::new();
            for i in 0..20 {
                let id = format!("W{i:02}");
                let mut w = writer(&server.url(), &id, ttl);
                does_not_lead(&id, &mut w).await;
                writers.push(w);
            }
            // Places younger than a second are not checked for presence.
            tokio::time::sleep(Duration::from_millis(1_200)).await;
            let before = server.calls("pubsub|numsub");
            assert_eq!(r.renew().await.expect("renew"), Renewal::Renewed);
            let checked = server.calls("pubsub|numsub") - before;
            eprintln!("one renewal checked {checked} places of 20");
            assert!(checked <= 2, "one renewal checked {checked} places of 20");
            // The head gone: the next renewal drops its place.
            drop(writers.remove(0));
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(r.renew().await.expect("renew"), Renewal::Renewed);
            let places = server
                .command("ZCARD leasekeeper:{rw}:writer-waits")
                .unwrap_or_default();
            assert_eq!(places.trim(), ":19", "the killed head's place");
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
                // Unobserved: W sleeps in its wait (inside the backend) before the release.
                tokio::time::sleep(Duration::from_millis(300)).await;
                r.release().await.expect("release")
            });
            assert_eq!(waited.0.ok(), Some(Wake::Changed), "the writer slept on");
            leads("W", &mut w).await;
            does_not_lead("R", &mut r).await;
            settle(&mut r).await;
            let waited = tokio::join!(tokio::time::timeout(soon, wakes(&mut r, max)), async {
                // Unobserved: R sleeps in its wait (inside the backend) before the release.
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
                // Unobserved: R sleeps in its wait (inside the backend) before the release.
                tokio::time::sleep(Duration::from_millis(300)).await;
                e.release().await.expect("release")
            });
            assert_eq!(waited.0.ok(), Some(Wake::Changed), "the reader slept on E");
            leads("R", &mut r).await;
            does_not_lead("E", &mut e).await;
            settle(&mut e).await;
            let waited = tokio::join!(tokio::time::timeout(soon, wakes(&mut e, max)), async {
                // Unobserved: E sleeps in its wait (inside the backend) before the release.
                tokio::time::sleep(Duration::from_millis(300)).await;
                r.release().await.expect("release")
            });
            assert_eq!(waited.0.ok(), Some(Wake::Changed), "E slept on");
            leads("E", &mut e).await;
        });
    }
}

/// What a waiting candidate on Redis may send in a MONITOR window shorter than 5
/// ttl: nothing, or one look (a take script) when its own look falls in it. Beside
/// renewing holders it looks at least every 5 ttl (`quiet::QUEUE_TTLS` - 1), so that
/// its place in the queue does not go stale (6 ttl after its last look), and one
/// queued behind another looks when the place ahead would go stale: one look per 5
/// ttl per waiting candidate at steady state (10 s at ttl 2 s).
fn at_most_one_look(name: &str, sent: &[&String]) {
    let looks = sent.iter().all(|c| c.to_ascii_uppercase().contains("EVAL"));
    assert!(sent.len() <= 1 && looks, "{name}: {sent:?}");
}

/// What a waiting `--mode` candidate costs Redis at steady state (docs/slots.md):
/// one look per 5 ttl. It hears the holders'
/// renewals (tracking pushes) and looks when what keeps it out would expire
/// unheard-of, and at least every 5 ttl so that its place in the queue, which the
/// holders keep only for 6 ttl after its last look, does not go stale
/// ([`at_most_one_look`]). A writer waiting for a reader and a reader waiting behind
/// that writer send at most one look each in 8 s (four ttl) of MONITOR.
#[test]
fn a_waiting_candidate_sends_a_look_per_5_ttl_on_redis() {
    let server = common::servers::redis_server::RedisServer::start();
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
    let waiting = [cars[1].pid, cars[2].pid];
    assert!(
        server.goes_quiet(&waiting, Duration::from_secs(20)),
        "the waiting candidates keep sending"
    );
    let seen = server.monitor(Duration::from_secs(8));
    for car in &cars {
        let ports = common::servers::redis_server::client_ports(car.pid, server.port);
        let sent: Vec<&String> = (seen.iter())
            .filter(|(p, _)| ports.contains(p))
            .map(|(_, c)| c)
            .collect();
        eprintln!("{}: {} commands in 8 s", car.name, sent.len());
        if car.name == "r-0" {
            assert!(sent.len() >= 7, "the holder's renewals: {sent:?}");
        } else {
            at_most_one_look(&car.name, &sent);
        }
    }
    assert_eq!(leading(&cars), [0], "only the reader holds");
}

// The Redlock read-write lock's rules, each reached directly on three real nodes:
// candidates built by the library and driven through the `Backend` trait one call at
// a time (no elector), and nodes changed by hand between the calls.
mod redlock_rules {
    use std::time::{Duration, Instant};

    use leasekeeper::backend::redis::Args;
    use leasekeeper::backend::redlock::{node_settings, RedlockBackend};
    use leasekeeper::backend::{Backend, Campaign, Candidacy, LockMode, Renewal};
    use leasekeeper::timing::Timing;

    use crate::common::checks::checker::RedisCluster;
    use crate::common::scenarios::backend_switchover::runtime;
    use crate::common::servers::redis_server::RedisServer;

    const TTL: Duration = Duration::from_secs(30);
    const READERS: &str = "leasekeeper:{rw}:readers";
    const LOCK: &str = "leasekeeper:{rw}:lock";

    fn candidate(
        cluster: &RedisCluster,
        id: &str,
        mode: LockMode,
        ttl: Duration,
    ) -> RedlockBackend {
        let args = Args {
            redis_url: cluster.nodes.iter().map(|n| n.url()).collect(),
            ..Default::default()
        };
        let (nodes, _) = node_settings(&args).expect("redlock settings");
        let timing = Timing::for_ttl(ttl);
        let lease = Candidacy {
            election: "rw",
            identity: id,
            timing: &timing,
            mode,
        };
        RedlockBackend::new(&nodes, &lease).expect("backend")
    }

    fn reader(cluster: &RedisCluster, id: &str) -> RedlockBackend {
        candidate(cluster, id, LockMode::Shared, TTL)
    }

    fn writer(cluster: &RedisCluster, id: &str) -> RedlockBackend {
        candidate(cluster, id, LockMode::Exclusive, TTL)
    }

    fn elector(cluster: &RedisCluster, id: &str) -> RedlockBackend {
        candidate(cluster, id, LockMode::Election, TTL)
    }

    /// Fresh nodes count for nothing for a ttl (Redlock's delayed restart): a
    /// candidate with a one-second ttl campaigns until it leads, which catches every
    /// node up, and lets go.
    async fn trust_the_nodes(cluster: &RedisCluster) {
        let mut b = candidate(
            cluster,
            "settler",
            LockMode::Election,
            Duration::from_secs(1),
        );
        let until = Instant::now() + Duration::from_secs(6);
        while !matches!(b.campaign().await, Ok(Campaign::Acquired { .. })) {
            assert!(Instant::now() < until, "the nodes never settled");
            // Pause: between campaigns.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        b.release().await.expect("release");
    }

    async fn leads(who: &str, b: &mut RedlockBackend) -> u64 {
        match b.campaign().await {
            Ok(Campaign::Acquired { token }) => token,
            other => panic!("{who} should lead now, its campaign found {other:?}"),
        }
    }

    async fn does_not_lead(who: &str, b: &mut RedlockBackend) {
        let c = b.campaign().await;
        assert!(
            !matches!(c, Ok(Campaign::Acquired { .. })),
            "{who} must not lead now: {c:?}"
        );
    }

    fn on_nodes(nodes: &[RedisServer], cmd: &str) {
        for n in nodes {
            assert!(n.command(cmd).is_some(), "{cmd}");
        }
    }

    /// Shared holders hold together and keep writers and election candidates out; a
    /// waiting writer keeps later readers out; an exclusive holder (a writer or an
    /// election's) keeps every reader out; each release lets the next in.
    #[test]
    fn readers_and_writers_exclude_each_other() {
        let cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            let (mut r, mut s, mut t) = (
                reader(&cluster, "R"),
                reader(&cluster, "S"),
                reader(&cluster, "T"),
            );
            let (mut w, mut e) = (writer(&cluster, "W"), elector(&cluster, "E"));
            leads("R", &mut r).await;
            leads("S beside R", &mut s).await;
            does_not_lead("W beside readers", &mut w).await;
            does_not_lead("T behind a waiting writer", &mut t).await;
            assert_eq!(r.renew().await.expect("renew"), Renewal::Renewed);
            r.release().await.expect("release");
            does_not_lead("W beside S", &mut w).await;
            s.release().await.expect("release");
            leads("W once the readers left", &mut w).await;
            does_not_lead("T beside W", &mut t).await;
            does_not_lead("E beside W", &mut e).await;
            w.release().await.expect("release");
            leads("T, queued before E", &mut t).await;
            does_not_lead("E beside T", &mut e).await;
            t.release().await.expect("release");
            leads("E once T left", &mut e).await;
            does_not_lead("R beside an election's holder", &mut r).await;
        });
    }

    /// A writer that stops waiting takes its mark away: the reader behind it takes.
    #[test]
    fn a_waiting_writer_keeps_new_readers_out_until_it_leaves() {
        let cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            let (mut a, mut b, mut w) = (
                reader(&cluster, "A"),
                reader(&cluster, "B"),
                writer(&cluster, "W"),
            );
            leads("A", &mut a).await;
            does_not_lead("W", &mut w).await;
            for _ in 0..3 {
                does_not_lead("B behind the waiting writer", &mut b).await;
                assert_eq!(a.renew().await.expect("renew"), Renewal::Renewed);
            }
            w.release().await.expect("W stops waiting");
            leads("B once W stopped waiting", &mut b).await;
        });
    }

    /// What another holds on a majority keeps each kind out though the rest of the
    /// nodes are free: a writer's lock on nodes 1 and 2 keeps a reader out (node 0
    /// alone is no tenure); a reader's entry on nodes 1 and 2 keeps a writer and an
    /// election's candidate out, not a reader.
    #[test]
    fn a_minority_is_no_tenure_for_either_kind() {
        let cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            let (mut r, mut w, mut e) = (
                reader(&cluster, "R"),
                writer(&cluster, "W"),
                elector(&cluster, "E"),
            );
            on_nodes(
                &cluster.nodes[1..],
                &format!("SET {LOCK} ffff|900|X PX 60000"),
            );
            for _ in 0..3 {
                does_not_lead("R beside X's lock on 2 of 3", &mut r).await;
            }
            on_nodes(&cluster.nodes, &format!("DEL {LOCK}"));
            // R's place in the queues would keep the writers out by itself.
            r.release().await.expect("R stops waiting");
            let far = "99999999999999";
            on_nodes(
                &cluster.nodes[1..],
                &format!("ZADD {READERS} {far} ffff|901|Y"),
            );
            for _ in 0..3 {
                does_not_lead("W beside Y's share on 2 of 3", &mut w).await;
            }
            w.release().await.expect("W stops waiting");
            for _ in 0..3 {
                does_not_lead("E beside Y's share on 2 of 3", &mut e).await;
            }
            e.release().await.expect("E stops waiting");
            let t = leads("R beside Y", &mut r).await;
            assert!(t > 900, "a token above X's, which it saw: {t}");
        });
    }

    /// Tokens, for candidates that never saw an earlier tenure: an exclusive tenure's
    /// exceeds every earlier one's, a shared tenure's every earlier exclusive one's.
    #[test]
    fn tokens_grow_across_shared_and_exclusive_tenures() {
        let cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            let (mut all_before, mut exclusive_before) = (0, 0);
            let kinds = [LockMode::Shared, LockMode::Exclusive, LockMode::Shared];
            let kinds = kinds.iter().chain(&[LockMode::Election, LockMode::Shared]);
            for (round, mode) in kinds.enumerate() {
                let id = format!("P{round}");
                let mut b = candidate(&cluster, &id, *mode, TTL);
                let token = leads(&id, &mut b).await;
                b.release().await.expect("release");
                if *mode == LockMode::Shared {
                    assert!(
                        token > exclusive_before,
                        "{id}: {token} after {exclusive_before}"
                    );
                } else {
                    assert!(token > all_before, "{id}: {token} after {all_before}");
                    exclusive_before = token;
                }
                all_before = all_before.max(token);
            }
        });
    }

    /// Redlock's restart rule holds for both kinds: a holder keeps a bare majority
    /// (its value on node 2 gone, as if expired there), node 0 restarts empty, and a
    /// fresh candidate of the other kind, which could take nodes 0 and 2, must not
    /// lead while the holder's claim may still run.
    #[test]
    fn a_node_restarted_empty_is_no_vote_for_either_kind() {
        let mut cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            for (holds, other) in [
                (LockMode::Shared, LockMode::Exclusive),
                (LockMode::Exclusive, LockMode::Shared),
            ] {
                let mut h = candidate(&cluster, "H", holds, TTL);
                leads("H", &mut h).await;
                let forget = match holds {
                    LockMode::Shared => format!("DEL {READERS}"),
                    _ => format!("DEL {LOCK}"),
                };
                on_nodes(&cluster.nodes[2..], &forget);
                cluster.nodes[0].restart();
                let mut fresh = candidate(&cluster, "F", other, TTL);
                for _ in 0..5 {
                    does_not_lead("F with a restarted node's vote", &mut fresh).await;
                    // Pause: between campaigns through the window.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                fresh.release().await.expect("release");
                h.release().await.expect("release");
                trust_the_nodes(&cluster).await;
            }
        });
    }

    /// A shared holder renews only its own live entry, and not beside an exclusive
    /// value; its release takes its own entry only.
    #[test]
    fn a_reader_renews_only_its_own_entry() {
        let cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            let (mut a, mut b) = (reader(&cluster, "A"), reader(&cluster, "B"));
            leads("A", &mut a).await;
            leads("B", &mut b).await;
            a.release().await.expect("release");
            assert_eq!(a.renew().await.expect("renew"), Renewal::Lost, "A revived");
            assert_eq!(b.renew().await.expect("renew"), Renewal::Renewed, "B");
            on_nodes(
                &cluster.nodes[1..],
                &format!("SET {LOCK} ffff|900|X PX 60000"),
            );
            let renewed = b.renew().await;
            assert!(
                !matches!(renewed, Ok(Renewal::Renewed)),
                "B renewed beside X on 2 of 3: {renewed:?}"
            );
        });
    }

    // Invariant 9 on Redlock, reached directly: a holder's watch of its own record
    // (`record_lost`, see src/backend/redlock/own.rs) ends once its record was taken
    // on a majority of the nodes, not on a minority, not on its own renewals nor on
    // another shared holder's, and still after a tracking connection died. Ttl 30 s:
    // no renewal of the elector's can be what noticed.
    const WITHIN: Duration = Duration::from_millis(800);

    /// `MGET`s run on the nodes so far: the holders' reads of their record (no script
    /// sends one).
    fn reads(cluster: &RedisCluster) -> u64 {
        cluster.nodes.iter().map(|n| n.calls("mget")).sum()
    }

    async fn quiet(b: &mut RedlockBackend, why: &str) {
        let waited = tokio::time::timeout(WITHIN, b.record_lost()).await;
        assert!(waited.is_err(), "the watch ended: {why}");
    }

    async fn heard(b: &mut RedlockBackend, why: &str) {
        let waited = tokio::time::timeout(WITHIN, b.record_lost()).await;
        assert!(waited.is_ok(), "the watch went on: {why}");
    }

    /// Takes the record of the holder `id` on `node`: `del` or `set` its lock key,
    /// `zrem` its shared member, or `set` a lock key beside it.
    fn tamper(node: &RedisServer, how: &str, id: &str) {
        let cmd = match how {
            "del" => format!("DEL {LOCK}"),
            "set" => format!("SET {LOCK} ffff|900|X PX 30000"),
            _ => {
                let members = node.command(&format!("ZRANGE {READERS} 0 -1"));
                let members = members.unwrap_or_default();
                let m = (members.lines())
                    .find(|l| l.ends_with(&format!("|{id}")))
                    .unwrap_or_else(|| panic!("{id}'s member: {members:?}"));
                format!("ZREM {READERS} {m}")
            }
        };
        assert!(node.command(&cmd).is_some(), "{cmd}");
    }

    async fn renews(who: &str, b: &mut RedlockBackend) {
        assert_eq!(b.renew().await.expect("renew"), Renewal::Renewed, "{who}");
    }

    /// A holder of `mode` (with a second shared holder beside it when shared) whose
    /// record is taken by `how` on node 0, then node 1.
    async fn hears_its_record_taken(cluster: &RedisCluster, mode: LockMode, how: &str) {
        let mut h = candidate(cluster, "H", mode, TTL);
        leads("H", &mut h).await;
        quiet(&mut h, "its record untouched").await;
        let before = reads(cluster);
        for _ in 0..2 {
            renews("H", &mut h).await;
            quiet(&mut h, "after its own renewal").await;
        }
        assert_eq!(
            reads(cluster),
            before,
            "H read its record after its own renewals"
        );
        let mut s = reader(cluster, "S");
        if mode == LockMode::Shared {
            leads("S beside H", &mut s).await;
            for _ in 0..2 {
                renews("S", &mut s).await;
                quiet(&mut h, "after another shared holder's renewal").await;
            }
        }
        tamper(&cluster.nodes[0], how, "H");
        quiet(&mut h, &format!("{how} on 1 of 3 nodes")).await;
        renews("H on 2 of 3", &mut h).await;
        quiet(&mut h, &format!("{how} on 1 of 3 nodes, after a renewal")).await;
        tamper(&cluster.nodes[1], how, "H");
        heard(&mut h, &format!("{how} on 2 of 3 nodes")).await;
        assert_eq!(h.renew().await.expect("renew"), Renewal::Lost);
        h.release().await.expect("release");
        s.release().await.expect("release");
        on_nodes(&cluster.nodes, &format!("DEL {LOCK} {READERS}"));
    }

    #[test]
    fn the_election_leader_hears_its_key_taken_on_a_majority_only() {
        let cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            for how in ["del", "set"] {
                hears_its_record_taken(&cluster, LockMode::Election, how).await;
            }
        });
    }

    #[test]
    fn a_writer_hears_its_key_taken_on_a_majority_only() {
        let cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            for how in ["del", "set"] {
                hears_its_record_taken(&cluster, LockMode::Exclusive, how).await;
            }
        });
    }

    #[test]
    fn a_reader_hears_its_entry_taken_on_a_majority_only() {
        let cluster = RedisCluster::start(3);
        runtime().block_on(async {
            trust_the_nodes(&cluster).await;
            for how in ["zrem", "set"] {
                hears_its_record_taken(&cluster, LockMode::Shared, how).await;
            }
        });
    }

    /// Node 0's tracking connection killed while H holds, no renewal after it: the
    /// watch turns tracking on there again by itself, so a change on nodes 0 and 1
    /// is heard at once, for each kind of holder.
    #[test]
    fn a_holder_tracks_its_record_again_when_a_tracking_connection_dies() {
        for (mode, how) in [
            (LockMode::Election, "set"),
            (LockMode::Exclusive, "del"),
            (LockMode::Shared, "zrem"),
        ] {
            let cluster = RedisCluster::start(3);
            runtime().block_on(async {
                trust_the_nodes(&cluster).await;
                let mut h = candidate(&cluster, "H", mode, TTL);
                leads("H", &mut h).await;
                quiet(&mut h, "its record untouched").await;
                cluster.nodes[0].kill_the_tracking_connection();
                quiet(&mut h, "its connection lost, its record untouched").await;
                tamper(&cluster.nodes[0], how, "H");
                tamper(&cluster.nodes[1], how, "H");
                heard(
                    &mut h,
                    &format!("{mode:?}: {how} on 2 of 3 after a lost connection"),
                )
                .await;
            });
        }
    }

    /// A node that does not answer is no proof of loss: node 2 killed while H holds
    /// (its connection lost: the watch's try to track it again fails), then H's record
    /// taken on node 0: H keeps its tenure (node 1 holds it, node 2 may), for each kind
    /// of holder; taken on node 1 too, it is heard at once.
    #[test]
    fn a_node_that_does_not_answer_is_no_proof_of_loss() {
        for (mode, how) in [
            (LockMode::Election, "del"),
            (LockMode::Exclusive, "set"),
            (LockMode::Shared, "zrem"),
        ] {
            let mut cluster = RedisCluster::start(3);
            runtime().block_on(async {
                trust_the_nodes(&cluster).await;
                let mut h = candidate(&cluster, "H", mode, TTL);
                leads("H", &mut h).await;
                quiet(&mut h, "its record untouched").await;
                cluster.nodes[2].kill();
                quiet(&mut h, &format!("{mode:?}: node 2 down")).await;
                tamper(&cluster.nodes[0], how, "H");
                quiet(&mut h, &format!("{mode:?}: {how} on node 0, node 2 down")).await;
                tamper(&cluster.nodes[1], how, "H");
                heard(&mut h, &format!("{mode:?}: {how} on nodes 0 and 1")).await;
            });
        }
    }
}

/// What a waiting `--mode` candidate costs Redlock at steady state: nothing. A reader
/// waiting behind a writer tracks the writer's renewals; a writer waiting for a shared
/// holder, and a reader waiting behind that writer, track the readers' set. MONITOR
/// on the three nodes over 16 s (four ttl), every command of each candidate's
/// connections counted; then the reader's SIGTERM wakes the writer within 1.5 s (a
/// writer left to look by itself would look a ttl after the readers' last change).
#[test]
fn what_a_waiting_candidate_sends_on_redlock() {
    let cluster = common::checks::checker::RedisCluster::start(3);
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redlock(&cluster.urls())
        .ttl("4s")
        .election("rw");
    let spawn = |name: &str, mode: &str| {
        Sidecar::spawn(name, dir.path(), &args.clone().flag("--mode", mode).build())
    };
    let count = |cars: &[Sidecar]| -> Vec<usize> {
        let window = Duration::from_secs(16);
        let seen: Vec<Vec<(u16, String)>> = std::thread::scope(|s| {
            let watches: Vec<_> = (cluster.nodes.iter())
                .map(|n| s.spawn(move || n.monitor(window)))
                .collect();
            (watches.into_iter())
                .map(|w| w.join().expect("monitor"))
                .collect()
        });
        (cars.iter())
            .map(|car| {
                let sent = cluster.nodes.iter().zip(&seen).map(|(n, seen)| {
                    let ports = common::servers::redis_server::client_ports(car.pid, n.port);
                    seen.iter().filter(|(p, _)| ports.contains(p)).count()
                });
                let sent: usize = sent.sum();
                eprintln!("{}: {sent} commands in 16 s", car.name);
                sent
            })
            .collect()
    };
    let start = Duration::from_secs(20);
    // A writer holds; a reader waits behind it.
    let mut cars = vec![spawn("w-0", "exclusive")];
    let held = eventually(start, || (leading(&cars) == [0]).then_some(()));
    assert!(held.is_some(), "the writer never led");
    cars.push(spawn("r-0", "shared"));
    cars[1].settles_in("follower", start);
    // Observed: the count starts a second after the reader joined (a join's last
    // commands come late on a busy machine).
    std::thread::sleep(Duration::from_secs(1));
    let sent = count(&cars);
    assert!(sent[0] >= 7, "the writer's renewals: {sent:?}");
    assert_eq!(sent[1], 0, "the reader waiting behind a writer: {sent:?}");
    // The reader holds; a writer waits for it and a second reader behind the writer.
    cars[0].terminate(Duration::from_secs(10));
    let held = eventually(start, || (leading(&cars) == [1]).then_some(()));
    assert!(held.is_some(), "the reader never led");
    cars.push(spawn("w-1", "exclusive"));
    cars[2].settles_in("follower", start);
    cars.push(spawn("r-1", "shared"));
    cars[3].settles_in("follower", start);
    // Observed: the count starts a second after the last one joined.
    std::thread::sleep(Duration::from_secs(1));
    let sent = count(&cars[1..]);
    assert_eq!(leading(&cars), [1], "only the first reader holds");
    assert!(sent[0] >= 7, "the reader's renewals: {sent:?}");
    assert_eq!(sent[1..], [0, 0], "the waiting writer and reader: {sent:?}");
    // Silent, and still woken at once by the last reader's release.
    let t0 = std::time::Instant::now();
    cars[1].signal(libc::SIGTERM);
    // A writer that slept on would look only once the readers' set went a ttl without
    // a change: 2.67 s or more after the SIGTERM (the reader's last renewal at most a
    // renew interval, 1.33 s, before it).
    let led = eventually(Duration::from_millis(1_500), || {
        (leading(&cars) == [2]).then_some(())
    });
    eprintln!(
        "the writer led {:?} after the reader's SIGTERM",
        t0.elapsed()
    );
    assert!(led.is_some(), "the writer slept on: {:?}", leading(&cars));
}

/// An election's candidate (no `--mode`) waiting for shared holders costs Redis
/// one look per 5 ttl at most too ([`at_most_one_look`]): it hears the
/// readers' renewals (tracking pushes of the readers' set) as a `--mode exclusive`
/// waiter does, and looks when they would expire unheard-of or its place in the queue
/// would go stale. At most one look of it in 8 s (four ttl) of MONITOR while two readers
/// renew; then the last reader's SIGTERM lets it in within a second (the release
/// hands it the baton and tells the read-write lock's channel; a look at 3/4 ttl
/// would be up to 1.5 s late, but this bound only asks that it be woken at all).
/// Then a writer and a second election's candidate wait for it, and send at most one
/// look each in 6 s either.
#[test]
fn a_waiting_election_candidate_sends_a_look_per_5_ttl_on_redis() {
    let server = common::servers::redis_server::RedisServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::redis(&server.url()).ttl("2s").election("rw");
    let spawn = |name: &str, mode: Option<&str>| {
        let a = match mode {
            Some(m) => args.clone().flag("--mode", m),
            None => args.clone(),
        };
        Sidecar::spawn(name, dir.path(), &a.build())
    };
    let mut cars = vec![spawn("r-0", Some("shared")), spawn("r-1", Some("shared"))];
    let held = eventually(Duration::from_secs(20), || {
        (leading(&cars) == [0, 1]).then_some(())
    });
    assert!(held.is_some(), "the readers never led");
    cars.push(spawn("e-0", None));
    cars[2].settles_in("follower", Duration::from_secs(20));
    assert!(
        server.goes_quiet(&[cars[2].pid], Duration::from_secs(20)),
        "the waiting candidate keeps sending"
    );
    let seen = server.monitor(Duration::from_secs(8));
    for car in &cars {
        let ports = common::servers::redis_server::client_ports(car.pid, server.port);
        let sent: Vec<&String> = (seen.iter())
            .filter(|(p, _)| ports.contains(p))
            .map(|(_, c)| c)
            .collect();
        eprintln!("{}: {} commands in 8 s", car.name, sent.len());
        if car.name.starts_with("r-") {
            assert!(sent.len() >= 7, "{}'s renewals: {sent:?}", car.name);
        } else {
            at_most_one_look(&car.name, &sent);
        }
    }
    assert_eq!(leading(&cars), [0, 1], "only the readers hold");
    let view = cars[2].leader().expect("/leader");
    let named = view["leader"].as_str().unwrap_or("");
    assert!(
        named.starts_with("r-"),
        "the waiting candidate names a reader: {view}"
    );
    cars[1].terminate(Duration::from_secs(10));
    let t0 = std::time::Instant::now();
    cars[0].signal(libc::SIGTERM);
    let led = eventually(Duration::from_secs(10), || {
        (leading(&cars) == [2]).then_some(())
    });
    let took = t0.elapsed();
    eprintln!("the election's candidate led {took:?} after the last reader's SIGTERM");
    assert!(led.is_some(), "the election's candidate never led");
    assert!(
        took < Duration::from_secs(1),
        "led {took:?} after the SIGTERM"
    );

    // The other way round: a writer waits for the election's holder, whose renewals
    // now also keep the queue (`busy`); an election's follower tracks that key too
    // (for when readers hold), but follows the holder by its `alive` alone.
    cars.push(spawn("w-0", Some("exclusive")));
    cars[3].settles_in("follower", Duration::from_secs(20));
    cars.push(spawn("e-1", None));
    cars[4].settles_in("follower", Duration::from_secs(20));
    let waiting = [cars[3].pid, cars[4].pid];
    assert!(
        server.goes_quiet(&waiting, Duration::from_secs(20)),
        "the waiting candidates keep sending"
    );
    let seen = server.monitor(Duration::from_secs(6));
    for car in &cars[3..] {
        let ports = common::servers::redis_server::client_ports(car.pid, server.port);
        let sent: Vec<&String> = (seen.iter())
            .filter(|(p, _)| ports.contains(p))
            .map(|(_, c)| c)
            .collect();
        eprintln!("{}: {} commands in 6 s", car.name, sent.len());
        at_most_one_look(&car.name, &sent);
    }
    assert_eq!(leading(&cars), [2], "only the election's holder holds");
}

/// A queued writer that is gone keeps the readers out only briefly, ttl 2 s:
/// a reader holds, a writer waits, a second reader waits behind the writer.
/// - Killed while the reader renews: the reader's next renewal (every ttl/3) finds the
///   writer's presence channel without a subscriber, drops its place and wakes the
///   reader behind it, which leads beside the first within a ttl.
/// - Stopped (SIGSTOP: its connections stay open, so the server cannot tell it from a
///   live silent waiter), then the holder's SIGTERM: the release cuts the holders'
///   keeping of the queue to half a ttl, the stopped writer's place (silent since it
///   came) lapses then, and the reader behind it, which looks at that lapse, leads
///   within a ttl of the SIGTERM (half a ttl, one look, the margin), not two ttl
///   after the last renewal.
#[test]
fn a_gone_queued_writer_keeps_the_readers_out_briefly_on_redis() {
    let ttl = Duration::from_secs(2);
    for stopped in [false, true] {
        let server = common::servers::redis_server::RedisServer::start();
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
        // Places younger than a second are not checked for presence; the writer's own
        // place (one and a half ttl after its look) has lapsed by the SIGTERM.
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(leading(&cars), [0], "r-1 waits behind the writer");
        let (t0, want) = if stopped {
            cars[1].signal(libc::SIGSTOP);
            // The fault: the writer is stopped 300 ms before the holder's SIGTERM.
            std::thread::sleep(Duration::from_millis(300));
            let t0 = std::time::Instant::now();
            cars[0].signal(libc::SIGTERM);
            (t0, vec![2])
        } else {
            let t0 = std::time::Instant::now();
            cars[1].kill();
            (t0, vec![0, 2])
        };
        let led = eventually(Duration::from_secs(10), || {
            (leading(&cars) == want).then_some(())
        });
        let took = t0.elapsed();
        eprintln!("stopped {stopped}: r-1 led {took:?} after");
        if stopped {
            cars[1].signal(libc::SIGCONT);
        }
        if led.is_none() || took >= ttl {
            for c in &cars {
                eprintln!("==== {}\n{}", c.name, c.stderr());
            }
        }
        assert!(led.is_some(), "stopped {stopped}: r-1 never led");
        assert!(took < ttl, "stopped {stopped}: r-1 led {took:?} after");
    }
}
