//! `--mode` on the SQL stores, on the backend itself (no sidecar, no timing): the
//! rules of the shared holders' rows (`backend::sql`'s module doc), each checked so
//! that it fails with the rule broken.

use std::time::Duration;

use leasekeeper::backend::sql::SqlSettings;
use leasekeeper::backend::{Backend, BackendError, Campaign, Candidacy, LockMode, Renewal};
use leasekeeper::status::Mode;
use leasekeeper::timing::Timing;

use super::sql_suite::{settings, SqlDb};

/// One candidate of `election` joining with `mode`.
pub fn moded<B>(
    db: &dyn SqlDb,
    new: &impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
    election: &str,
    identity: &str,
    mode: LockMode,
) -> B {
    let timing = Timing::for_ttl(Duration::from_secs(5));
    new(
        &settings(db),
        &Candidacy {
            election,
            identity,
            timing: &timing,
            mode,
        },
    )
    .expect("backend")
}

/// A campaign (or two: MySQL's first look at a missing row inserts it free) that must
/// take the lock; its token.
async fn takes<B: Backend>(who: &str, b: &mut B) -> u64 {
    for _ in 0..2 {
        match b.campaign().await {
            Ok(Campaign::Acquired { token }) => return token,
            Ok(Campaign::Held(None)) => {}
            other => panic!("{who} should hold now, its campaign found {other:?}"),
        }
    }
    panic!("{who} should hold now, its campaigns found nobody holding")
}

async fn kept_out<B: Backend>(who: &str, b: &mut B) {
    let c = b.campaign().await.expect("campaign");
    assert!(
        !matches!(c, Campaign::Acquired { .. }),
        "{who} must not hold now: {c:?}"
    );
}

/// The holders `b` lists after its last campaign (identity, shared).
fn listed<B: Backend>(b: &B) -> Vec<(String, bool)> {
    let slots = b.slots().expect("--mode lists its holders");
    let mut l: Vec<(String, bool)> = (slots.list.iter())
        .map(|h| (h.holder.identity.clone(), h.mode == Mode::Shared))
        .collect();
    l.sort();
    l
}

/// Shared holders coexist; a writer (`--mode exclusive`, and an election's candidate)
/// is kept out by them and, waiting, keeps a new shared candidate out; a shared
/// holder's release frees the row for the writer only when it is the last; a shared
/// holder whose row was deleted renews nothing (and the other still renews); shared
/// candidates are kept out by a writer that holds and by one that waits; tokens grow
/// across every tenure.
pub async fn shared_and_exclusive_rows<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let mut r1 = moded(db, &new, "rw", "R1", LockMode::Shared);
    let mut r2 = moded(db, &new, "rw", "R2", LockMode::Shared);
    let mut r3 = moded(db, &new, "rw", "R3", LockMode::Shared);
    let mut w = moded(db, &new, "rw", "W", LockMode::Exclusive);
    let mut e = moded(db, &new, "rw", "E", LockMode::Election);
    let t1 = takes("R1", &mut r1).await;
    let t2 = takes("R2 beside R1", &mut r2).await;
    assert!(t2 > t1, "shared tokens {t1} then {t2}");
    kept_out("W beside shared holders", &mut w).await;
    let both = [("R1".to_owned(), true), ("R2".to_owned(), true)];
    assert_eq!(listed(&w), both, "the waiting writer's holders");
    kept_out("E beside shared holders", &mut e).await;
    kept_out("R3 while writers wait", &mut r3).await;

    // R1's row expired by hand (as if R1 had been paused): R1 renews nothing (no
    // shared tenure comes back past the waiting writers), R2 still does; R1's release
    // leaves the row to R2.
    db.admin(&format!(
        "UPDATE leasekeeper_leases_shared SET expires_at = {} WHERE holder = 'R1'",
        if db.backend() == "postgres" {
            "now()"
        } else {
            "UTC_TIMESTAMP(6)"
        }
    ));
    assert_eq!(r1.renew().await.expect("renew"), Renewal::Lost, "R1");
    assert_eq!(r2.renew().await.expect("renew"), Renewal::Renewed, "R2");
    r1.release().await.expect("release");
    kept_out("W beside R2, after R1 left", &mut w).await;
    r2.release().await.expect("release");

    let tw = takes("W after the last shared holder", &mut w).await;
    assert!(tw > t2, "the writer's token {tw} after {t2}");
    assert_eq!(
        listed(&w),
        [("W".to_owned(), false)],
        "the writer's holders"
    );
    kept_out("R3 beside the writer", &mut r3).await;
    kept_out("E beside the writer", &mut e).await;
    w.release().await.expect("release");
    // E still waits (it marked itself): R3 stays out, E takes the row.
    kept_out("R3 while E waits", &mut r3).await;
    let te = takes("E after W", &mut e).await;
    assert!(te > tw, "E's token {te} after {tw}");
    kept_out("R3 beside E", &mut r3).await;
    e.release().await.expect("release");
    let t3 = takes("R3 after every writer", &mut r3).await;
    assert!(t3 > te, "R3's token {t3} after {te}");
    kept_out("E beside R3", &mut e).await;
    r3.release().await.expect("release");
    takes("E after R3", &mut e).await;
}

/// The waiting candidates' queue (`backend::sql`'s `queue`): candidates kept out go
/// in the order they arrived once the row is free: a shared candidate queued before
/// the writers joins first (they are kept out of the free row), a writer queued before
/// another takes first, an election's candidate takes its turn as a writer, a newcomer
/// comes after every one; a row free for longer than the grace (a ttl) lets anyone in
/// past a candidate that does not take its turn (as if frozen).
pub async fn the_queue_admits_in_arrival_order<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let mut w = moded(db, &new, "q", "W", LockMode::Exclusive);
    let mut r = moded(db, &new, "q", "R", LockMode::Shared);
    let mut e = moded(db, &new, "q", "E", LockMode::Election);
    let mut x = moded(db, &new, "q", "X", LockMode::Exclusive);
    takes("W", &mut w).await;
    kept_out("R beside W", &mut r).await;
    kept_out("E beside W", &mut e).await;
    kept_out("X beside W", &mut x).await;
    w.release().await.expect("release");
    kept_out("X, behind R and E, on the free row", &mut x).await;
    kept_out("E, behind R, on the free row", &mut e).await;
    takes("R, first in the queue", &mut r).await;
    kept_out("E beside R", &mut e).await;
    kept_out("X beside R", &mut x).await;
    r.release().await.expect("release");
    kept_out("X, behind E, on the free row", &mut x).await;
    takes("E, next in the queue", &mut e).await;
    let mut n = moded(db, &new, "q", "N", LockMode::Shared);
    kept_out("N beside E", &mut n).await;
    e.release().await.expect("release");
    kept_out("N, behind X, on the free row", &mut n).await;
    // X does not take its turn: once the row has been free for longer than the grace,
    // N goes past it.
    db.admin(&format!(
        "UPDATE leasekeeper_leases SET expires_at = {} WHERE election = 'q'",
        if db.backend() == "postgres" {
            "now() - interval '6 seconds'"
        } else {
            "UTC_TIMESTAMP(6) - INTERVAL 6 SECOND"
        }
    ));
    takes("N, past X after the grace", &mut n).await;
    kept_out("X beside N", &mut x).await;
    n.release().await.expect("release");
    takes("X after N", &mut x).await;
}

/// Shared holders and a writer campaigning and releasing at once, round after round:
/// the writer never holds while a shared holder does (each take and release is judged
/// by the server against the row as it stands, not as a statement's snapshot showed it).
pub async fn concurrent_shared_and_exclusive<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let mut r1 = moded(db, &new, "race", "R1", LockMode::Shared);
    let mut r2 = moded(db, &new, "race", "R2", LockMode::Shared);
    let mut w = moded(db, &new, "race", "W", LockMode::Election);
    let (mut held, mut writer_held) = ([false; 2], 0);
    for round in 0..40 {
        // Each shared holder alternates between joining and leaving; the writer
        // campaigns meanwhile (and releases once it got in).
        let (a, b, c) = tokio::join!(step(&mut r1, held[0]), step(&mut r2, held[1]), w.campaign());
        held = [a.expect("r1"), b.expect("r2")];
        if matches!(c, Ok(Campaign::Acquired { .. })) {
            writer_held += 1;
            assert!(
                held == [false, false],
                "round {round}: the writer holds beside {held:?}"
            );
            w.release().await.expect("release");
        }
    }
    eprintln!("the writer held in {writer_held} of 40 rounds");
}

/// A shared candidate's next step: leave when it holds, else campaign; whether it
/// holds afterwards.
async fn step<B: Backend>(b: &mut B, holds: bool) -> Result<bool, BackendError> {
    if holds {
        b.release().await.map(|()| false)
    } else {
        (b.campaign().await).map(|c| matches!(c, Campaign::Acquired { .. }))
    }
}

/// Statements on a connection of the test's own (the lease row locked in a
/// transaction, a shared holder's rows written by hand).
async fn on_own_connection(db: &dyn SqlDb, conn: &mut Own, sql: &str) {
    use sqlx::Executor;
    let done = match conn {
        Own::Pg(c) => c.execute(sql).await.map(|_| ()),
        Own::My(c) => c.execute(sql).await.map(|_| ()),
    };
    done.unwrap_or_else(|e| panic!("{} {sql}: {e}", db.backend()));
}

enum Own {
    Pg(sqlx::PgConnection),
    My(sqlx::MySqlConnection),
}

/// A shared holder's release that races another's join: R1's release reads the row
/// and the other shared rows, and is held up at the lease row (locked by the test)
/// while R9 joins (its row written, the row's version moved, committed); R1's release
/// must then leave the row shared, and the writer stays out beside R9.
pub async fn a_release_racing_a_join_keeps_the_row<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    use sqlx::Connection;
    let mut r1 = moded(db, &new, "ver", "R1", LockMode::Shared);
    let mut w = moded(db, &new, "ver", "W", LockMode::Election);
    takes("R1", &mut r1).await;
    let url = db.url_for("lk");
    let pg = db.backend() == "postgres";
    let mut own = if pg {
        Own::Pg(sqlx::PgConnection::connect(&url).await.expect("connect"))
    } else {
        Own::My(sqlx::MySqlConnection::connect(&url).await.expect("connect"))
    };
    let (now, ten_s, one_ms) = if pg {
        ("now()", "interval '10 seconds'", "interval '1 millisecond'")
    } else {
        (
            "UTC_TIMESTAMP(6)",
            "INTERVAL 10 SECOND",
            "INTERVAL 1000 MICROSECOND",
        )
    };
    on_own_connection(db, &mut own, "BEGIN").await;
    let lock = "SELECT 1 FROM leasekeeper_leases WHERE election = 'ver' FOR UPDATE";
    on_own_connection(db, &mut own, lock).await;
    let release = tokio::spawn(async move {
        r1.release().await.expect("release");
        r1
    });
    // R1's release waits at the lease row this session holds.
    let waiting = if pg {
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    } else {
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
    };
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while db.admin(waiting).trim().parse::<u64>().unwrap_or(0) == 0 {
        assert!(
            std::time::Instant::now() < until,
            "R1's release never waited at the lease row"
        );
        // Pause: between looks (the release goes on meanwhile).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let joined = format!(
        "INSERT INTO leasekeeper_leases_shared (election, tenure, holder, kind, token, expires_at)
         VALUES ('ver', 't9', 'R9', 'r', 99, {now} + {ten_s})"
    );
    on_own_connection(db, &mut own, &joined).await;
    let moved = format!(
        "UPDATE leasekeeper_leases SET token = token + 1, renewed_at = renewed_at + {one_ms},
           expires_at = {now} + {ten_s} WHERE election = 'ver'"
    );
    on_own_connection(db, &mut own, &moved).await;
    on_own_connection(db, &mut own, "COMMIT").await;
    let _r1 = release.await.expect("the release task");
    kept_out("W beside R9, who joined during R1's release", &mut w).await;
}

/// A waiting writer's turn lock ends with its tenure: a writer that waited behind a
/// shared holder (holding its turn lock), then took the row and released it, lets the
/// lock go. A shared candidate that queued behind it while it waited (MySQL: waiting in
/// that lock) joins soon after its release, and the lock is free at the server then.
/// On PostgreSQL the election's lock is held by the test's own session meanwhile (as a
/// frozen former leader's session would hold it): the writer's hold of it fails, so
/// the release's letting go of every advisory lock is not what frees the turn lock.
pub async fn a_writer_lets_its_turn_lock_go_at_its_release<B: Backend + Send + 'static>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    use sqlx::Connection;
    let mut s = moded(db, &new, "turn", "S", LockMode::Shared);
    let mut w = moded(db, &new, "turn", "W", LockMode::Exclusive);
    let mut r = moded(db, &new, "turn", "R", LockMode::Shared);
    let url = db.url_for("lk");
    let pg = db.backend() == "postgres";
    let mut own = if pg {
        Own::Pg(sqlx::PgConnection::connect(&url).await.expect("connect"))
    } else {
        Own::My(sqlx::MySqlConnection::connect(&url).await.expect("connect"))
    };
    if pg {
        let key = advisory_key(&["lease", "leasekeeper_leases", "turn"]);
        on_own_connection(db, &mut own, &format!("SELECT pg_advisory_lock({key})")).await;
    }
    takes("S", &mut s).await;
    kept_out("W beside S", &mut w).await;
    kept_out("R behind the waiting W", &mut r).await;
    let turn = turn_lock_of(db, &mut own).await;
    assert!(
        !lock_free(&mut own, &turn).await,
        "W waits: its turn lock is held"
    );
    // R as its elector runs it: wait (at most 20 s), look, until it holds.
    let joined = tokio::spawn(async move {
        for _ in 0..50 {
            r.wait_for_change(Duration::from_secs(20)).await;
            if let Campaign::Acquired { .. } = r.campaign().await.expect("R's campaign") {
                return std::time::Instant::now();
            }
        }
        panic!("R never joined")
    });
    s.release().await.expect("release");
    takes("W after S", &mut w).await;
    // Observed: R must not join beside W for 1.5 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!joined.is_finished(), "R must not join beside W");
    let released = std::time::Instant::now();
    w.release().await.expect("release");
    let at = joined.await.expect("R's wait");
    let after = at.duration_since(released);
    assert!(
        after < Duration::from_secs(8),
        "R, queued behind W while W waited, joined {after:?} after W's release"
    );
    // Within 2 s: R's wait in it may hold it for an instant as W lets it go.
    let mut free = false;
    for _ in 0..20 {
        free = lock_free(&mut own, &turn).await;
        if free {
            break;
        }
        // Pause: between looks at the turn lock.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(free, "W's turn lock must be free after its release");
}

/// The 64-bit advisory lock key the PostgreSQL dialect names by `parts` (see
/// `leasekeeper::backend::sql::presence_name`).
fn advisory_key(parts: &[&str]) -> i64 {
    let name = leasekeeper::backend::sql::presence_name(parts);
    let bits = u64::from_str_radix(name.trim_start_matches("lk:"), 16).expect("hex");
    i64::from_ne_bytes(bits.to_ne_bytes())
}

/// The turn lock of the waiting writer `W` of election `turn`, as the server names it:
/// PostgreSQL's advisory key (as text), MySQL's lock name.
async fn turn_lock_of(db: &dyn SqlDb, own: &mut Own) -> String {
    let sql = "SELECT tenure FROM leasekeeper_leases_shared
               WHERE election = 'turn' AND holder = 'W' AND kind = 'w'";
    let key: String = match own {
        Own::Pg(c) => sqlx::query_scalar(sql).fetch_one(c).await,
        Own::My(c) => sqlx::query_scalar(sql).fetch_one(c).await,
    }
    .unwrap_or_else(|e| panic!("{}: W's waiting row: {e}", db.backend()));
    match own {
        Own::Pg(_) => advisory_key(&["turn", &key, ""]).to_string(),
        Own::My(_) => format!("{key}:t"),
    }
}

/// Whether no session holds the lock `name` (see [`turn_lock_of`]); PostgreSQL's is
/// tried and let go again at once.
async fn lock_free(own: &mut Own, name: &str) -> bool {
    match own {
        Own::Pg(c) => {
            let sql = format!(
                "SELECT CASE WHEN pg_try_advisory_lock({name}) THEN pg_advisory_unlock({name}) ELSE false END"
            );
            sqlx::query_scalar::<_, bool>(&sql).fetch_one(c).await
        }
        Own::My(c) => sqlx::query_scalar::<_, i64>("SELECT CAST(IS_FREE_LOCK(?) AS SIGNED)")
            .bind(name)
            .fetch_one(c)
            .await
            .map(|n| n == 1),
    }
    .expect("the turn lock's state")
}

/// A shared candidate that finds a free row and a waiting writer ahead of it goes
/// past that writer once the row has been free for the grace (a ttl), when the writer
/// does not take its turn (as if frozen; here it only sends nothing): on a free row it
/// waits by the grace, not in the writer's turn lock (which the writer holds until its
/// tenure ends). As its elector runs it (wait at most 20 s, look), it must join within
/// 10 s of the row's release (ttl 5 s).
pub async fn past_a_writer_that_does_not_take_a_free_row<B: Backend + Send + 'static>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let mut s = moded(db, &new, "idle", "S", LockMode::Shared);
    let mut w = moded(db, &new, "idle", "W", LockMode::Exclusive);
    let mut r = moded(db, &new, "idle", "R", LockMode::Shared);
    takes("S", &mut s).await;
    kept_out("W beside S", &mut w).await;
    let released = std::time::Instant::now();
    s.release().await.expect("release");
    kept_out("R behind the waiting W, on the free row", &mut r).await;
    let joined = tokio::spawn(async move {
        for _ in 0..50 {
            r.wait_for_change(Duration::from_secs(20)).await;
            if let Campaign::Acquired { .. } = r.campaign().await.expect("R's campaign") {
                return std::time::Instant::now();
            }
        }
        panic!("R never joined")
    });
    let after = joined.await.expect("R's wait").duration_since(released);
    assert!(
        after < Duration::from_secs(10),
        "R joined {after:?} after the free row's grace began, past a W that did not take it"
    );
    drop(w);
}

/// An election's candidate (no `--mode`) that prepared before any `--mode` candidate
/// created the queue's table takes its turn from the campaign after it found shared
/// holders: it then waits in the queue, and a shared candidate that comes after it
/// is kept out.
pub async fn an_election_candidate_from_before_the_queue_takes_its_turn<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let mut e = moded(db, &new, "pre", "E", LockMode::Election);
    takes("E, before any --mode candidate", &mut e).await;
    e.release().await.expect("release");
    let mut r = moded(db, &new, "pre", "R", LockMode::Shared);
    takes("R", &mut r).await;
    kept_out("E beside R (it learns of the queue)", &mut e).await;
    kept_out("E beside R (it queues)", &mut e).await;
    let mut n = moded(db, &new, "pre", "N", LockMode::Shared);
    kept_out("N behind the waiting E", &mut n).await;
    r.release().await.expect("release");
    takes("E after R", &mut e).await;
}

/// A release does not wait for a lock its candidate does not hold: a shared holder
/// (which holds no election's lock) releases in well under its backend timeout (ttl
/// 20 s: 4 s; bound 2 s, typically milliseconds).
pub async fn a_shared_release_does_not_wait_for_the_election_lock<B: Backend>(
    db: &dyn SqlDb,
    new: impl Fn(&SqlSettings, &Candidacy) -> Result<B, BackendError>,
) {
    let timing = Timing::for_ttl(Duration::from_secs(20));
    let lease = Candidacy {
        election: "quick",
        identity: "S",
        timing: &timing,
        mode: LockMode::Shared,
    };
    let mut s = new(&settings(db), &lease).expect("backend");
    takes("S", &mut s).await;
    let started = std::time::Instant::now();
    s.release().await.expect("release");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "a shared holder's release took {took:?} (backend timeout 4 s)"
    );
}

/// A table of these rules × the SQL stores: each case named here runs as one test per
/// store, `<case>::postgres` and `<case>::mysql`, each on the run's shared server.
#[allow(unused_macros)]
macro_rules! sql_mode_rules {
    ($($(#[$doc:meta])* $case:ident),+ $(,)?) => {$(
        $(#[$doc])*
        mod $case {
            use $crate::common::scenarios::backend_switchover::runtime;
            use $crate::common::scenarios::sql_modes;
            use $crate::common::servers::{mariadb_server::MariaServer, pg_server::PgServer};
            use leasekeeper::backend::sql::{mysql::MysqlBackend, postgres::PostgresBackend};

            #[test]
            fn postgres() {
                let db = PgServer::shared();
                runtime().block_on(sql_modes::$case(&db, PostgresBackend::new));
            }

            #[test]
            fn mysql() {
                let db = MariaServer::shared();
                runtime().block_on(sql_modes::$case(&db, MysqlBackend::new));
            }
        }
    )+};
}

#[allow(unused_imports)]
pub(crate) use sql_mode_rules;
