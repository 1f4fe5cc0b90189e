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
    /// A wait ended (the leader's session did): the next wait is by the row's
    /// expiry, and queues again only after the campaign after it.
    by_expiry: bool,
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
            by_expiry: false,
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
        if let Some(n) = self.armed {
            if *self.done.borrow() >= n {
                return self.ended();
            }
        } else {
            let by_expiry = std::mem::take(&mut self.by_expiry);
            if !held_by_other || by_expiry {
                crate::backend::wait_for_wake(wake, hint, max).await;
                return Wake::Changed;
            }
            let n = self.arm.borrow().0 + 1;
            self.arm.send_replace((n, key));
            self.armed = Some(n);
        }
        let n = self.armed.unwrap_or_default();
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

    fn ended(&mut self) -> Wake {
        self.armed = None;
        self.by_expiry = true;
        Wake::Changed
    }
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
            match timeout(limit, PgConnection::connect_with(&options)).await {
                Ok(Ok(c)) => conn = Some(c),
                Ok(Err(e)) => tracing::debug!(error = %e, "postgres waiter connection failed"),
                Err(_) => tracing::debug!("postgres waiter connection timed out"),
            }
        }
        if let Some(c) = conn.as_mut() {
            let waited = timeout(limit, sqlx::query(wait).bind(key).execute(c)).await;
            match waited {
                Ok(Ok(_)) | Ok(Err(sqlx::Error::Database(_))) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "postgres waiter failed");
                    conn = None;
                }
                Err(_) => conn = None,
            }
        } else {
            sleep(Duration::from_millis(100)).await;
        }
        done.send_replace(asked);
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
}
