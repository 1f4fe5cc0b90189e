//! A follower's silent wait on PostgreSQL (see the parent module): the leader holds
//! the election's advisory lock on its statement connection, with the server's
//! `idle_session_timeout` set to the ttl there; a follower queues for a shared hold
//! of it on a connection of its own, in one statement that lets it go again at
//! once. That statement returns when the leader's session ends: a release (the
//! leader lets the lock go after freeing the row), a crash (its connection closes),
//! or a freeze (the server ends a session idle for a ttl, and a leader renews well
//! within one). Meanwhile the follower sends nothing. Only the row decides who
//! leads: the lock is a wake-up, never a claim.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use crate::backend::Wake;

/// The statement a follower waits in: a shared hold of the election's lock, let go
/// in the same statement (`CASE` orders the two calls), so that no follower ever
/// keeps it (a follower frozen holding it would keep the next leader from it).
pub(super) const WAIT: &str = "SELECT CASE WHEN pg_advisory_lock_shared($1) IS NULL THEN NULL ELSE pg_advisory_unlock_shared($1) END";

/// A writer's wait for the shared holders (`--mode`): an exclusive hold of the
/// readers' lock, which every shared holder holds shared on its statement connection
/// ([`HOLD_SHARED`]), let go in the same statement. It returns when every shared
/// holder's session let it go (their releases, crashes, or freezes ended by the idle
/// limit). While it waits, PostgreSQL grants no new shared hold (a conflicting
/// request waits in the queue): a shared holder whose connection was renewed holds
/// none until the writer's wait ends, and the writer then waits by the row's expiry.
pub(super) const WAIT_READERS: &str =
    "SELECT CASE WHEN pg_advisory_lock($1) IS NULL THEN NULL ELSE pg_advisory_unlock($1) END";

/// The leader's hold: the idle limit first, then the lock (`CASE` orders them; a
/// server without `idle_session_timeout`, before PostgreSQL 14, fails the statement
/// and no lock is taken, so no frozen leader can keep followers asleep there).
pub(super) const HOLD: &str = "SELECT CASE WHEN set_config('idle_session_timeout', $2, false) IS NOT NULL THEN pg_try_advisory_lock($1) END";

/// A shared holder's hold of the readers' lock, as the leader's [`HOLD`] (shared).
pub(super) const HOLD_SHARED: &str = "SELECT CASE WHEN set_config('idle_session_timeout', $2, false) IS NOT NULL THEN pg_try_advisory_lock_shared($1) END";

/// The leader's hold request (`hold`: [`HOLD`] or [`HOLD_SHARED`]) of lock `key`, with
/// its idle limit (ms, as text).
pub(super) fn hold<'q>(
    hold: &'q str,
    key: i64,
    idle_limit: &'q str,
) -> sqlx::query::QueryScalar<'q, sqlx::Postgres, Option<bool>, sqlx::postgres::PgArguments> {
    sqlx::query_scalar(hold).bind(key).bind(idle_limit)
}

/// The leader lets go: the lock and the idle limit.
pub(super) const LET_GO: &str =
    "SELECT pg_advisory_unlock_all()::text || set_config('idle_session_timeout', '0', false)";

/// A waiting candidate's turn lock (`presence`: its waiting row's key): a writer
/// holds it on its statement connection from its first wait in the queue until its
/// tenure ends, and a shared candidate queued behind it waits for it in [`WAIT`]
/// (see `super::super::queue`).
pub(super) fn turn_key(presence: &str) -> i64 {
    key_of("turn", presence, "")
}

/// A waiting writer takes its turn lock (`$1`), at once or not at all.
pub(super) const HOLD_TURN: &str = "SELECT pg_try_advisory_lock($1)";

/// The writer lets its turn lock (`$1`) go.
pub(super) const LET_TURN_GO: &str = "SELECT pg_advisory_unlock($1)";

/// The election's lock key: the 64 bits of its presence-style hash.
pub(super) fn lock_key(table: &str, election: &str) -> i64 {
    key_of("lease", table, election)
}

/// The election's readers' lock key (`--mode shared` holders; see [`WAIT_READERS`]).
pub(super) fn readers_key(table: &str, election: &str) -> i64 {
    key_of("readers", table, election)
}

fn key_of(kind: &str, table: &str, election: &str) -> i64 {
    let name = super::super::presence_name(&[kind, table, election]);
    let bits = u64::from_str_radix(name.trim_start_matches("lk:"), 16).unwrap_or(0);
    i64::from_ne_bytes(bits.to_ne_bytes())
}

/// The follower's side: a task with its own connection that waits in [`WAIT`] when
/// asked (`arm`: the wait's number and lock key), and counts the waits that ended
/// (`done`).
pub(super) struct Waiter {
    arm: watch::Sender<(u64, i64)>,
    done: watch::Receiver<u64>,
    /// The wait asked for and not yet seen to end.
    armed: Option<u64>,
    /// The lock key of a wait that ended (its holder's session did): the next wait,
    /// when on that same lock, is by the row's expiry, and queues again only after
    /// the campaign after it; on another lock (another holder) it is by that lock.
    by_expiry: Option<i64>,
    task: JoinHandle<()>,
}

impl Waiter {
    /// `backstop`: how long one wait lasts at most (then the follower campaigns once:
    /// it also proves the connection is still there). `wait`: the statement waited
    /// in ([`WAIT`], or [`WAIT_READERS`]), on the lock key each wait names.
    pub(super) fn spawn(
        options: PgConnectOptions,
        wait: &'static str,
        backstop: Duration,
        op_timeout: Duration,
    ) -> Waiter {
        let (arm, arm_rx) = watch::channel((0, 0));
        let (done_tx, done) = watch::channel(0);
        let options = options.options([("lock_timeout", format!("{}ms", backstop.as_millis()))]);
        let task = tokio::spawn(run(options, wait, backstop + op_timeout, arm_rx, done_tx));
        Waiter {
            arm,
            done,
            armed: None,
            by_expiry: None,
            task,
        }
    }

    /// The follower's wait: by the lock while another candidate holds the row, else by
    /// the notification, the row's expiry and `max`. `max` passing while the
    /// lock is still waited for is [`Wake::Quiet`]: nothing to look at, and the
    /// observation is current (the holder's session holds the lock, so it has run a
    /// statement within its idle limit, the ttl; a follower reporting nothing current
    /// after a ttl would read `unknown` in `GET /leader` while a live leader renews).
    pub(super) async fn wait(
        &mut self,
        wake: &Notify,
        hint: &mut Option<Instant>,
        (held_by_other, key): (bool, i64),
        max: Duration,
    ) -> Wake {
        let n = match self.start((held_by_other, key)) {
            Start::Ended => return Wake::Changed,
            Start::ByNotice => {
                crate::backend::wait_for_wake(wake, hint, max).await;
                return Wake::Changed;
            }
            Start::Wait(n) => n,
        };
        let ended = tokio::select! {
            _ = wake.notified() => return Wake::Changed,
            _ = self.done.wait_for(|d| *d >= n) => true,
            _ = sleep(max) => false,
        };
        if ended {
            self.ended()
        } else {
            Wake::Quiet
        }
    }

    /// How a wait starts: a wait asked for that ended meanwhile ends now; without
    /// one, a row another holds (`held_by_other`) is waited for by the lock (wait
    /// `n`, asked for here, on lock `key`), unless the last wait, on this same lock,
    /// ended (then by the row's expiry, once); anything else by the notifications.
    fn start(&mut self, (held_by_other, key): (bool, i64)) -> Start {
        if let Some(n) = self.armed {
            if *self.done.borrow() >= n {
                self.ended();
                return Start::Ended;
            }
            return Start::Wait(n);
        }
        let by_expiry = self.by_expiry.take() == Some(key);
        if !held_by_other || by_expiry {
            return Start::ByNotice;
        }
        let n = self.arm.borrow().0 + 1;
        self.arm.send_replace((n, key));
        self.armed = Some(n);
        Start::Wait(n)
    }

    fn ended(&mut self) -> Wake {
        self.armed = None;
        self.by_expiry = Some(self.arm.borrow().1);
        Wake::Changed
    }
}

/// How a follower's wait starts (see [`Waiter::start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// The wait asked for ended (the holder's session did): a change.
    Ended,
    /// By the notifications, the row's expiry and the wait's end.
    ByNotice,
    /// By the lock: wait `n`'s end.
    Wait(u64),
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits in [`WAIT`] once per wait asked for, on a connection kept between waits; a
/// wait that failed or ran past `limit` ends too (the connection is renewed then).
async fn run(
    options: PgConnectOptions,
    wait: &'static str,
    limit: Duration,
    mut arm: watch::Receiver<(u64, i64)>,
    done: watch::Sender<u64>,
) {
    let mut conn: Option<PgConnection> = None;
    loop {
        let (asked, key) = loop {
            let a = *arm.borrow_and_update();
            if a.0 > *done.borrow() {
                break a;
            }
            if arm.changed().await.is_err() {
                return;
            }
        };
        if conn.is_none() {
            conn = connected(timeout(limit, PgConnection::connect_with(&options)).await);
        }
        if let Some(c) = conn.as_mut() {
            let waited = timeout(limit, sqlx::query(wait).bind(key).execute(c)).await;
            if !keeps_connection(waited.map(|w| w.map(|_| ()))) {
                conn = None;
            }
        } else {
            sleep(Duration::from_millis(100)).await;
        }
        done.send_replace(asked);
    }
}

/// The waiter's connection, if it could be opened in time.
fn connected<E>(opened: Result<Result<PgConnection, sqlx::Error>, E>) -> Option<PgConnection> {
    match opened {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "postgres waiter connection failed");
            None
        }
        Err(_) => {
            tracing::debug!("postgres waiter connection timed out");
            None
        }
    }
}

/// Whether the connection a wait ran on is kept: it is after the wait ended, or the
/// server refused it (an SQL error, such as `lock_timeout`); a wait that failed below
/// SQL or ran past its limit (`Err`) renews it.
fn keeps_connection<E>(waited: Result<Result<(), sqlx::Error>, E>) -> bool {
    match waited {
        Ok(Ok(())) | Ok(Err(sqlx::Error::Database(_))) => true,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "postgres waiter failed");
            false
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_are_stable_and_distinct() {
        let k = lock_key("leasekeeper_leases", "my-app");
        assert_ne!(k, lock_key("leasekeeper_leases", "my-app2"));
        assert_ne!(k, lock_key("other", "my-app"));
        assert_eq!(k, lock_key("leasekeeper_leases", "my-app"));
        assert_ne!(k, readers_key("leasekeeper_leases", "my-app"));
        assert_ne!(turn_key("lk:1"), turn_key("lk:2"));
        assert_eq!(turn_key("lk:1"), turn_key("lk:1"));
    }

    /// A waiter with no wait asked for yet, whose task does nothing: the waits' ends
    /// are sent by hand (`ends`), and the waits asked for kept (`asked`).
    fn waiter() -> (Waiter, watch::Sender<u64>, watch::Receiver<(u64, i64)>) {
        let (arm, asked) = watch::channel((0, 0));
        let (ends, done) = watch::channel(0);
        let task = tokio::spawn(async {});
        let w = Waiter {
            arm,
            done,
            armed: None,
            by_expiry: None,
            task,
        };
        (w, ends, asked)
    }

    /// A follower waits by the lock while another holds the row, once per wait asked
    /// for; after a holder's session ended, the next wait is by the row's expiry (once),
    /// and a row nobody holds is waited on by the notifications.
    #[tokio::test]
    async fn a_wait_by_the_lock_is_asked_for_once_and_followed_by_one_by_the_expiry() {
        let (mut w, ends, _asked) = waiter();
        assert_eq!(w.start((false, 7)), Start::ByNotice, "nobody holds");
        assert_eq!(w.start((true, 7)), Start::Wait(1));
        assert_eq!(*w.arm.borrow(), (1, 7), "wait 1 asked for, on lock 7");
        assert_eq!(w.start((true, 7)), Start::Wait(1), "still the same wait");
        ends.send_replace(1);
        assert_eq!(w.start((true, 7)), Start::Ended);
        assert_eq!(
            w.start((true, 7)),
            Start::ByNotice,
            "by the row's expiry, once"
        );
        assert_eq!(w.start((true, 8)), Start::Wait(2));
        assert_eq!(*w.arm.borrow(), (2, 8));
    }

    /// The wait after one by a lock that ended is by the row's expiry only for that
    /// same lock: a shared candidate whose waited-on writer stopped, and that finds
    /// another writer ahead, waits on that writer's turn lock at once.
    #[tokio::test]
    async fn a_wait_that_ended_on_one_lock_waits_on_another_by_the_lock() {
        let (mut w, ends, _asked) = waiter();
        assert_eq!(w.start((true, 7)), Start::Wait(1));
        ends.send_replace(1);
        assert_eq!(w.start((true, 7)), Start::Ended);
        assert_eq!(
            w.start((true, 8)),
            Start::Wait(2),
            "lock 8 waited by notice"
        );
        assert_eq!(*w.arm.borrow(), (2, 8));
    }

    /// A wait that ended or that the server refused keeps its connection; one that
    /// failed below SQL, or overran, renews it.
    #[test]
    fn the_waiter_keeps_its_connection_unless_the_wait_broke() {
        assert!(keeps_connection(Ok::<_, ()>(Ok(()))));
        assert!(!keeps_connection(Ok::<_, ()>(Err(sqlx::Error::PoolClosed))));
        assert!(!keeps_connection(Err::<Result<(), sqlx::Error>, _>(())));
        assert!(connected(Err::<Result<PgConnection, sqlx::Error>, _>(())).is_none());
    }
}
