//! The MySQL/MariaDB wake-up: the election's named lock on a connection of its own,
//! held by the leader and queued for by the followers (see the parent module).
//!
//! Two things keep the followers in the lock's queue, so that a graceful handover
//! always has someone to wake:
//!
//! - the connection is not renewed when the statement connection is (a statement
//!   cut off by the elector's timeout, or by its `select`, costs that connection
//!   only); instead the task looks at once whether the lock is still its own;
//! - a follower that got the lock and found the row still held ("yield") hands the
//!   lock on and queues again when the holder's session lives (the leader's
//!   *presence lock*, held on its statement connection, or a tenure younger than
//!   [`YOUNG_TENURE`] whose leader may not have taken it yet): that leader lost its
//!   lock with a connection and is queued for it again. When the holder's session is
//!   gone (a crash) the follower keeps the lock and takes the row when it expires.
//!   Yields for one tenure in quick succession (nobody took the lock on) pause
//!   before queueing again, 10 ms doubling, so that they never spin;
//! - a follower that got the lock and found the row free but left to another
//!   candidate (a switchover's reservation: it may not take it) hands the lock on
//!   without looking at any session ("pass"), so that the named candidate, further
//!   back in the queue, wakes and takes it; passes in quick succession pause like
//!   yields.
//!
//! Three things keep silent followers current (they send nothing while queued):
//!
//! - a follower queues only while the row's tenure is the one it saw last, in the same
//!   statement ([`SignalParts::queue`]), so a take between its look and its queueing
//!   wakes it at once;
//! - a new leader that got the lock from its wait as a follower lets it go once and
//!   queues again as the leader ([`roll_call`]): every follower queued behind it gets
//!   the lock, looks and hands it on;
//! - the server ends a session of this connection that idles for a ttl
//!   (`wait_timeout`; it pings while it holds the lock or rests), so a frozen holder's
//!   lock goes to the next in the queue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::Connection;
use tokio::sync::{watch, Notify};
use tokio::time::{sleep, timeout, Instant};

use super::super::WaitFor;
use super::rules::{Absent, Waited, Yields};
use crate::backoff::Backoff;

/// A request whose answer is one column, as `O`.
type Scalar<'q, O> = sqlx::query::QueryScalar<'q, sqlx::MySql, O, sqlx::mysql::MySqlArguments>;

/// How young a tenure is taken for a live leader even before its presence lock shows
/// (it takes the lock with its first look at its own row, right after the take).
pub(super) const YOUNG_TENURE: Duration = Duration::from_secs(2);

/// What the signal connection should do with the named lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Want {
    /// Neither hold nor wait for it.
    Rest,
    /// Wait for it; when got, wake the follower and hold it until told otherwise.
    Follow,
    /// We hold it as a follower and found the row held by this tenure: hand it on to
    /// a leader whose session lives, and queue again; otherwise keep it.
    Yield(String),
    /// We hold it as a follower and found the free row left to another candidate:
    /// hand it on and queue again.
    Pass,
    /// Get it and hold it (we lead).
    Lead,
    /// A writer kept out by shared holders: let the lock go, and wait for the shared
    /// holders' own locks instead ([`wait_for_readers`]).
    Readers,
    /// A shared candidate kept out by the queue behind a waiting writer: let the lock
    /// go, and wait for that writer's turn lock (named here) instead ([`wait_for_turn`]).
    Turn(String),
}

impl Want {
    /// Whether a candidate waits on the signal: it follows (or was woken by the lock),
    /// or waits for shared holders or a waiting writer's turn.
    fn waits(&self) -> bool {
        matches!(
            self,
            Want::Follow | Want::Yield(_) | Want::Pass | Want::Readers | Want::Turn(_)
        )
    }
}

/// What a follower's signal connection does while it waits as the core says (`wait`):
/// behind a waiting writer, wait for its turn lock; a writer kept out by shared
/// holders, for their locks; otherwise the election's lock, by whether it holds it
/// (`held`: woken by it) and what the campaign found (`left_to_another`: the free row is
/// a switchover's; `seen`: the row's tenure).
pub(super) fn want(wait: &WaitFor, held: bool, left_to_another: bool, seen: &str) -> Want {
    match wait {
        WaitFor::Turn { writer } => Want::Turn(super::shared::turn_lock(writer)),
        WaitFor::Readers => Want::Readers,
        // Woken by the lock, and the free row is left to another candidate (a
        // switchover): hand the lock on, so that the named candidate, queued behind
        // us, wakes.
        _ if held && left_to_another => Want::Pass,
        // Woken by the lock, and the row is someone else's: hand the lock on to a
        // leader whose session lives and queue again, or keep it for the expiry of a
        // crashed leader's row.
        _ if held => Want::Yield(seen.to_owned()),
        _ => Want::Follow,
    }
}

/// Whether a wait may be silent (queued for a lock whose holder lives, nothing
/// sent): for another's tenure (it holds the lock: a release, a crash or a freeze, by
/// the server's idle limit, ends its session and wakes the first in the queue; or a
/// follower that took it over and will take the row at its expiry), for shared
/// holders, or for a waiting writer's turn.
pub(super) fn signals(wait: &WaitFor) -> bool {
    !matches!(wait, WaitFor::Notice)
}

/// When a wait that ends at `until` looks anyway: at the row's `expiry` unless it is
/// silent.
pub(super) fn wake_at(silent: bool, expiry: Option<Instant>, until: Instant) -> Instant {
    match expiry {
        Some(e) if !silent => e.min(until),
        _ => until,
    }
}

/// What consecutive passes count under in [`Yields`] (never a tenure id).
const PASSED: &str = "\u{0}left to another";

/// What the signal task needs.
pub(super) struct SignalParts {
    pub options: MySqlConnectOptions,
    /// The election's named lock.
    pub name: String,
    /// The leader's presence lock (on its statement connection).
    pub presence: String,
    /// This candidate's presence lock, held by the signal connection for its whole
    /// life: it lists the candidate as alive (see the parent module).
    pub candidate: String,
    /// Set once a (re)connected signal connection holds `candidate`.
    pub renewed: Arc<AtomicBool>,
    /// A writer's wait for one shared holder's lock (binds the wait, the lock, the
    /// election, the lock; see `shared::readers`): 1 got, 0 timed out, -1 none held.
    pub readers: String,
    /// `SELECT` of whether a tenure is young (binds election, tenure; see [`YOUNG_TENURE`]).
    pub young: String,
    /// A follower's wait for the lock, queued only while the row's tenure is still
    /// the one it saw last (binds election, that tenure, the lock, the wait):
    /// 1 got, 0 timed out, -1 the row changed meanwhile.
    pub queue: String,
    /// The row's tenure as the follower's last campaign saw it.
    pub seen: watch::Receiver<String>,
    pub election: String,
    pub want: watch::Receiver<Want>,
    pub held: watch::Sender<bool>,
    /// Woken when a follower's signal connection got the lock.
    pub woke: Arc<Notify>,
    /// Look now whether the lock is still ours (the statement connection was renewed,
    /// or the leader's look saw another holder).
    pub check: Arc<Notify>,
    /// The signal connection's id at the server (0 while there is none).
    pub conn_id: Arc<AtomicU64>,
    /// Whether a follower's `GET_LOCK` is queued now (see [`Want::Follow`]).
    pub queued: watch::Sender<bool>,
    pub op_timeout: Duration,
    /// The longest pause between two hand-ons (the retry interval).
    pub follow_wait: Duration,
    /// How long a follower's `GET_LOCK` waits at most: then it wakes the follower
    /// once (a campaign, which also proves the statement connection stands).
    pub backstop: Duration,
    /// How long a waiting candidate's wait beside shared holders lasts at most (for
    /// them, or for a waiting writer's turn): then it looks, which writes its waiting
    /// row again (see `super::super::QUEUE_TTLS`).
    pub queue_backstop: Duration,
    pub check_every: Duration,
    /// The server ends this session when it idles this long (`wait_timeout`, whole
    /// seconds): a frozen holder's lock is freed a ttl after it froze.
    pub idle_limit: u64,
}

/// Keeps the signal connection, reconnecting with backoff; at once after a connection
/// that served a while (a leader that lost its lock queues again before the followers
/// hand it on).
pub(super) async fn signal(mut p: SignalParts) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    let mut yields = Yields::default();
    loop {
        p.held.send_replace(false);
        p.conn_id.store(0, Ordering::SeqCst);
        match timeout(p.op_timeout, connect(&p)).await {
            Ok(Ok((mut conn, id))) => {
                p.conn_id.store(id, Ordering::SeqCst);
                if p.want.borrow().waits() {
                    // Releases may have happened while we were away.
                    p.woke.notify_one();
                }
                let started = Instant::now();
                serve(&mut conn, &mut p, &mut yields).await;
                p.held.send_replace(false);
                p.conn_id.store(0, Ordering::SeqCst);
                // Dropped, not closed: the server may be unreachable.
                drop(conn);
                if started.elapsed() >= Duration::from_secs(1) {
                    backoff.reset();
                    continue;
                }
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "mysql signal connection failed"),
            Err(_) => tracing::debug!("mysql signal connection timed out"),
        }
        sleep(backoff.next_wait()).await;
    }
}

async fn connect(p: &SignalParts) -> Result<(MySqlConnection, u64), sqlx::Error> {
    let mut conn = MySqlConnection::connect_with(&p.options).await?;
    // Idle for a ttl: the process froze (it pings while it holds the lock, and a
    // follower waits inside a statement, which is no idling).
    sqlx::query(&format!("SET SESSION wait_timeout = {}", p.idle_limit))
        .execute(&mut conn)
        .await?;
    // 0 when another session of the same identity holds it: that one is alive too.
    let id = sqlx::query_scalar::<_, i64>(
        "SELECT CAST(CONNECTION_ID() AS SIGNED) FROM (SELECT GET_LOCK(?, 0)) AS presence",
    )
    .bind(&p.candidate)
    .fetch_one(&mut conn)
    .await?;
    p.renewed.store(true, Ordering::SeqCst);
    Ok((conn, u64::try_from(id).unwrap_or(0)))
}

/// How often a session that holds the lock, or rests, shows the server it lives:
/// well within its idle limit.
fn ping_every(p: &SignalParts) -> Duration {
    p.check_every
        .min(Duration::from_secs(p.idle_limit) / 2)
        .max(Duration::from_millis(10))
}

/// Drives the named lock on one connection; returns when the connection must be
/// renewed.
async fn serve(conn: &mut MySqlConnection, p: &mut SignalParts, yields: &mut Yields) {
    let mut want = p.want.borrow_and_update().clone();
    // Whether the lock held now was asked for as the leader.
    let mut as_leader = false;
    // The silent wait that last found nobody holding the locks it waits for.
    let mut absent = Absent::default();
    loop {
        let held = *p.held.borrow();
        let step = step(&want, held, as_leader);
        if !step.waits_for_others() {
            absent.forget();
        }
        let next = match step {
            Step::Release => release(conn, p).await.then(|| want.clone()),
            Step::Rest => rest(conn, p).await,
            Step::YieldOrKeep(tenure) => yield_or_keep(conn, p, tenure, yields).await,
            Step::Pass => hand_on(conn, p, PASSED, yields).await,
            Step::WaitForReaders => wait_for_readers(conn, p, &mut absent).await,
            Step::WaitForTurn(turn) => wait_for_turn(conn, p, turn, &mut absent).await,
            Step::RollCall => roll_call(conn, p).await,
            Step::Hold => hold(conn, p).await,
            Step::WaitForLock => {
                let next = wait_for_lock(conn, p, &want).await;
                as_leader = want == Want::Lead;
                next
            }
        };
        match next {
            Some(w) => want = w,
            None => return,
        }
    }
}

/// The next want, pinging meanwhile (`None`: the task is going away, or the
/// connection must be renewed).
async fn rest(conn: &mut MySqlConnection, p: &mut SignalParts) -> Option<Want> {
    let every = ping_every(p);
    loop {
        tokio::select! {
            changed = p.want.changed() => {
                changed.ok()?;
                return Some(p.want.borrow_and_update().clone());
            }
            _ = sleep(every) => {}
        }
        let pinged = timeout(p.op_timeout, sqlx::query("SELECT 1").execute(&mut *conn)).await;
        if !matches!(pinged, Ok(Ok(_))) {
            return None;
        }
    }
}

/// A new leader that holds the lock from its wait as a follower: the other followers,
/// queued for the lock, still follow the tenure they saw last. It lets the lock go
/// and queues again as the leader, so that each of them gets the lock once, campaigns
/// (it learns of the new tenure), finds the leader alive and hands the lock on: a
/// roll call through the lock's queue, back to the leader.
async fn roll_call(conn: &mut MySqlConnection, p: &mut SignalParts) -> Option<Want> {
    tracing::debug!("letting the named lock go once, so that every follower looks");
    release(conn, p).await.then_some(Want::Lead)
}

/// Lets the lock go; false when the connection must be renewed.
async fn release(conn: &mut MySqlConnection, p: &SignalParts) -> bool {
    let freed = timeout(
        p.op_timeout,
        sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(&p.name)
            .execute(&mut *conn),
    )
    .await;
    p.held.send_replace(false);
    matches!(freed, Ok(Ok(_)))
}

/// Queues for the lock; once got, wakes a follower. A follower queues only while
/// the row is as it saw it last (a take it did not see wakes it at once), waits
/// silently for the backstop, then wakes once.
async fn wait_for_lock(
    conn: &mut MySqlConnection,
    p: &mut SignalParts,
    want: &Want,
) -> Option<Want> {
    let follower = *want != Want::Lead;
    let got = if follower {
        let seen = p.seen.borrow().clone();
        p.queued.send_replace(true);
        let queue = follow_request(p, seen).fetch_one(&mut *conn);
        let got = timeout(p.backstop + p.op_timeout, queue).await;
        p.queued.send_replace(false);
        got
    } else {
        let lead = lead_request(p).fetch_one(&mut *conn);
        timeout(p.check_every + p.op_timeout, lead).await
    };
    match answered(p, Got::of(got), follower, want) {
        After::Next(next) => Some(next),
        After::Rest => rest(conn, p).await,
        After::Renew => None,
    }
}

/// What a wait for the lock leads to (see [`answered`]).
#[derive(Debug, PartialEq, Eq)]
enum After {
    /// Go on with this want.
    Next(Want),
    /// The row changed: rest until the next want.
    Rest,
    /// Renew the connection.
    Renew,
}

/// What a wait for the lock that answered `got` leads to: the lock, when got, is
/// held; a follower that should look is woken; then the next want (the one asked for
/// meanwhile, or `want` again), a rest when the row changed, or a new connection.
fn answered(p: &mut SignalParts, got: Got, follower: bool, want: &Want) -> After {
    let next = if p.want.has_changed().unwrap_or(false) {
        p.want.borrow_and_update().clone()
    } else {
        want.clone()
    };
    if got == Got::Lock {
        p.held.send_replace(true);
    }
    if got.wakes(follower, &next) {
        p.woke.notify_one();
    }
    got.then(next)
}

/// A follower's wait for the lock, queued only while the row's tenure is still
/// `seen` (see [`SignalParts::queue`]).
fn follow_request(p: &SignalParts, seen: String) -> Scalar<'_, Option<i64>> {
    sqlx::query_scalar(&p.queue)
        .bind(&p.election)
        .bind(seen)
        .bind(&p.name)
        .bind(p.backstop.as_secs_f64())
}

/// The leader's wait for the lock, a renewal's time at most.
fn lead_request(p: &SignalParts) -> Scalar<'_, Option<i64>> {
    sqlx::query_scalar("SELECT CAST(GET_LOCK(?, ?) AS SIGNED)")
        .bind(&p.name)
        .bind(p.check_every.as_secs_f64())
}

/// What the signal connection does next with the named lock, by what it is asked
/// (`want`), whether it holds the lock (`held`), and whether it got the lock it holds
/// as the leader (`as_leader`).
#[derive(Debug, PartialEq, Eq)]
enum Step<'w> {
    /// Let the lock go, and go on as asked.
    Release,
    /// Neither hold nor wait: ping until asked otherwise.
    Rest,
    /// A follower holding the lock found the row held by this tenure.
    YieldOrKeep(&'w str),
    /// A follower holding the lock found the free row left to another: hand it on.
    Pass,
    /// A writer kept out by shared holders: wait for their locks.
    WaitForReaders,
    /// A shared candidate behind a waiting writer: wait for this turn lock.
    WaitForTurn(&'w str),
    /// A new leader holding the lock from its wait as a follower: let it go once.
    RollCall,
    /// Hold the lock, looking that it is still ours.
    Hold,
    /// Queue for the lock.
    WaitForLock,
}

impl Step<'_> {
    /// Whether this is a silent wait for others' locks (any other step makes the next
    /// one start over: [`Absent::forget`]).
    fn waits_for_others(&self) -> bool {
        matches!(self, Step::WaitForReaders | Step::WaitForTurn(_))
    }
}

fn step(want: &Want, held: bool, as_leader: bool) -> Step<'_> {
    match (want, held) {
        (Want::Rest | Want::Readers | Want::Turn(_), true) => Step::Release,
        (Want::Rest, false) => Step::Rest,
        (Want::Yield(tenure), true) => Step::YieldOrKeep(tenure),
        (Want::Pass, true) => Step::Pass,
        (Want::Readers, false) => Step::WaitForReaders,
        (Want::Turn(turn), false) => Step::WaitForTurn(turn),
        (Want::Lead, true) if !as_leader => Step::RollCall,
        (_, true) => Step::Hold,
        (_, false) => Step::WaitForLock,
    }
}

/// What a wait for the lock answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Got {
    /// The lock is ours.
    Lock,
    /// A follower's wait: the row changed since it looked (it looks again, and queues
    /// with what it saw then).
    RowChanged,
    /// The wait ran out (a follower's: the backstop, one look).
    Nothing,
    /// The connection failed or the wait overran: renew it.
    Broken,
}

impl Got {
    fn of<E>(answer: Result<Result<Option<i64>, sqlx::Error>, E>) -> Got {
        match answer {
            Ok(Ok(Some(1))) => Got::Lock,
            Ok(Ok(Some(-1))) => Got::RowChanged,
            Ok(Ok(_)) => Got::Nothing,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "GET_LOCK failed");
                Got::Broken
            }
            Err(_) => Got::Broken,
        }
    }

    /// What follows the wait: the `next` want once the lock is got or the wait ran
    /// out, a rest when the row changed, a new connection when it broke.
    fn then(self, next: Want) -> After {
        match self {
            Got::Lock | Got::Nothing => After::Next(next),
            Got::RowChanged => After::Rest,
            Got::Broken => After::Renew,
        }
    }

    /// Whether the follower looks now: it got the lock (while it follows), the row
    /// changed, or its wait ran out.
    fn wakes(self, follower: bool, next: &Want) -> bool {
        match self {
            Got::Lock => matches!(next, Want::Follow | Want::Yield(_) | Want::Pass),
            Got::RowChanged => true,
            Got::Nothing => follower,
            Got::Broken => false,
        }
    }
}

/// A writer waiting for the shared holders: waits, silently, for one live shared
/// holder's lock, which its session lets go when it releases, crashes or is ended by
/// the server's idle limit (a freeze); then wakes the writer (it looks, and waits
/// for the next one), and once when the wait ran out (the backstop). When no live
/// shared holder holds its lock it wakes the writer once (they may have let go since
/// its look), and nobody when that wait finds the same again (one that crashed, or an
/// older version): the writer waits by the row's expiry ([`Absent`]). Then the
/// connection rests, pinging, until the writer's next want.
async fn wait_for_readers(
    conn: &mut MySqlConnection,
    p: &mut SignalParts,
    absent: &mut Absent<Want>,
) -> Option<Want> {
    p.queued.send_replace(true);
    let readers = readers_request(p).fetch_one(&mut *conn);
    let got = timeout(p.queue_backstop + p.op_timeout, readers).await;
    p.queued.send_replace(false);
    let waited = Waited::of(got, "the shared holders");
    after_silent_wait(conn, p, absent.settle(Want::Readers, waited)).await
}

/// A writer's wait for one live shared holder's lock (see [`SignalParts::readers`]).
fn readers_request(p: &SignalParts) -> Scalar<'_, Option<i64>> {
    sqlx::query_scalar(&p.readers)
        .bind(p.queue_backstop.as_secs_f64())
        .bind(&p.name)
        .bind(&p.election)
        .bind(&p.name)
}

/// A shared candidate's wait for a waiting writer's `turn` lock: -1 when nobody holds
/// it, 1 once got (and let go at once), 0 when the wait ran out.
fn turn_request<'q>(p: &SignalParts, turn: &'q str) -> Scalar<'q, Option<i64>> {
    sqlx::query_scalar(
        "SELECT CAST(IF(IS_USED_LOCK(?) IS NULL, -1,
            IF(GET_LOCK(?, ?) = 1, RELEASE_LOCK(?), 0)) AS SIGNED)",
    )
    .bind(turn)
    .bind(turn)
    .bind(p.queue_backstop.as_secs_f64())
    .bind(turn)
}

/// After a silent wait for others' locks (`waited`, settled by [`Absent`]): the
/// candidate looks when the wait ended or ran out, and the connection rests until the
/// next want (or is renewed when it broke).
async fn after_silent_wait(
    conn: &mut MySqlConnection,
    p: &mut SignalParts,
    waited: Waited,
) -> Option<Want> {
    match waited {
        Waited::Woke => {
            p.woke.notify_one();
            rest(conn, p).await
        }
        Waited::Rest | Waited::Nobody => rest(conn, p).await,
        Waited::Broken => None,
    }
}

/// A shared candidate behind a waiting writer: waits, silently, for the writer's turn
/// lock, which its session lets go when its tenure ends (a release, a crash, the
/// server ending a frozen one's idle session); then wakes the candidate (it looks),
/// and once when the wait ran out (the backstop). When nobody holds the turn lock it
/// wakes the candidate once (the writer's tenure may have ended since its look), and
/// nobody when the wait for that turn lock finds the same again: the candidate waits
/// by the row's expiry and the retry interval ([`Absent`]). Then the connection
/// rests, pinging, until the next want.
async fn wait_for_turn(
    conn: &mut MySqlConnection,
    p: &mut SignalParts,
    turn: &str,
    absent: &mut Absent<Want>,
) -> Option<Want> {
    p.queued.send_replace(true);
    let waiting = turn_request(p, turn).fetch_one(&mut *conn);
    let got = timeout(p.queue_backstop + p.op_timeout, waiting).await;
    p.queued.send_replace(false);
    let waited = Waited::of(got, "a waiting writer's turn");
    after_silent_wait(conn, p, absent.settle(Want::Turn(turn.to_owned()), waited)).await
}

/// Holds the lock until the want changes, looking now and then (and when asked) that
/// it is still ours; it is not when the connection was cut and replaced in between.
async fn hold(conn: &mut MySqlConnection, p: &mut SignalParts) -> Option<Want> {
    let every = ping_every(p);
    loop {
        tokio::select! {
            changed = p.want.changed() => {
                changed.ok()?;
                return Some(p.want.borrow_and_update().clone());
            }
            _ = p.check.notified() => {}
            _ = sleep(every) => {}
        }
        let ours = timeout(
            p.op_timeout,
            sqlx::query_scalar::<_, i64>(
                "SELECT CAST(COALESCE(IS_USED_LOCK(?) = CONNECTION_ID(), 0) AS SIGNED)",
            )
            .bind(&p.name)
            .fetch_one(&mut *conn),
        )
        .await;
        match ours {
            Ok(Ok(1)) => {}
            Ok(Ok(_)) => {
                p.held.send_replace(false);
                return Some(p.want.borrow_and_update().clone());
            }
            _ => return None,
        }
    }
}

/// A follower holding the lock found the row held by `tenure` (see the module doc).
async fn yield_or_keep(
    conn: &mut MySqlConnection,
    p: &mut SignalParts,
    tenure: &str,
    yields: &mut Yields,
) -> Option<Want> {
    let live = timeout(
        p.op_timeout,
        sqlx::query_scalar::<_, i64>(&p.young)
            .bind(&p.presence)
            .bind(&p.election)
            .bind(tenure)
            .fetch_one(&mut *conn),
    )
    .await;
    match live {
        Ok(Ok(1)) => tracing::debug!(tenure, "handing the named lock on to a live leader"),
        Ok(Ok(_)) => {
            tracing::debug!(
                tenure,
                "keeping the named lock: the holder's session is gone"
            );
            return hold(conn, p).await;
        }
        _ => return None,
    }
    hand_on(conn, p, tenure, yields).await
}

/// Lets the lock go to the next in its queue and queues again, after a pause when
/// the lock was handed on for `key` (a tenure, or [`PASSED`]) just before.
async fn hand_on(
    conn: &mut MySqlConnection,
    p: &mut SignalParts,
    key: &str,
    yields: &mut Yields,
) -> Option<Want> {
    if !release(conn, p).await {
        return None;
    }
    let pause = yields.pause(key, Instant::now(), p.follow_wait);
    if !pause.is_zero() {
        tokio::select! {
            changed = p.want.changed() => {
                changed.ok()?;
                return Some(p.want.borrow_and_update().clone());
            }
            _ = sleep(pause) => {}
        }
    }
    Some(Want::Follow)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signal connection's want, by the core's wait and the lock.
    #[test]
    fn a_follower_hands_the_lock_on_or_keeps_it_by_what_it_found() {
        let turn = WaitFor::Turn {
            writer: "lk:w".to_owned(),
        };
        let lock = super::super::shared::turn_lock("lk:w");
        assert_eq!(want(&turn, true, true, "t"), Want::Turn(lock));
        assert_eq!(want(&WaitFor::Readers, true, false, "t"), Want::Readers);
        for wait in [WaitFor::Holder, WaitFor::Notice] {
            assert_eq!(want(&wait, true, true, "t"), Want::Pass);
            assert_eq!(want(&wait, true, false, "t"), Want::Yield("t".to_owned()));
            assert_eq!(want(&wait, false, true, "t"), Want::Follow);
            assert_eq!(want(&wait, false, false, "t"), Want::Follow);
        }
        assert!(signals(&WaitFor::Holder) && signals(&WaitFor::Readers) && signals(&turn));
        assert!(!signals(&WaitFor::Notice));
        let now = Instant::now();
        let (soon, later) = (now + Duration::from_millis(5), now + Duration::from_secs(1));
        assert_eq!(wake_at(false, Some(soon), later), soon);
        assert_eq!(wake_at(true, Some(soon), later), later, "silent: no expiry");
        assert_eq!(wake_at(false, None, later), later);
        assert_eq!(wake_at(false, Some(later), soon), soon);
    }

    /// The lock is let go when not wanted (or a follower waits for other locks),
    /// handed on or kept by what the follower found, let go once by a leader that got
    /// it as a follower, and held otherwise; without it, the connection waits for what
    /// it is asked to.
    #[test]
    fn the_signal_steps_by_what_it_is_asked_and_holds() {
        let turn = Want::Turn("t".to_owned());
        let tenure = Want::Yield("x".to_owned());
        for want in [Want::Rest, Want::Readers, turn.clone()] {
            assert_eq!(step(&want, true, false), Step::Release, "{want:?}");
        }
        assert_eq!(step(&Want::Rest, false, false), Step::Rest);
        assert_eq!(step(&tenure, true, false), Step::YieldOrKeep("x"));
        assert_eq!(step(&Want::Pass, true, false), Step::Pass);
        assert_eq!(step(&Want::Readers, false, false), Step::WaitForReaders);
        assert_eq!(step(&turn, false, true), Step::WaitForTurn("t"));
        assert_eq!(step(&Want::Lead, true, false), Step::RollCall);
        assert_eq!(step(&Want::Lead, true, true), Step::Hold);
        assert_eq!(step(&Want::Follow, true, false), Step::Hold);
        for want in [Want::Lead, Want::Follow, tenure, Want::Pass] {
            assert_eq!(step(&want, false, false), Step::WaitForLock, "{want:?}");
        }
        assert!(
            Step::WaitForReaders.waits_for_others() && Step::WaitForTurn("t").waits_for_others()
        );
        for other in [
            Step::Release,
            Step::Rest,
            Step::Hold,
            Step::WaitForLock,
            Step::RollCall,
        ] {
            assert!(!other.waits_for_others(), "{other:?}");
        }
    }

    /// A follower wakes when it gets the lock, when the row changed, and at its
    /// backstop; a leader's wait wakes nobody, nor does a broken one.
    #[test]
    fn a_wait_for_the_lock_wakes_the_follower_when_it_should() {
        let got = |n: Option<i64>| Got::of(Ok::<_, ()>(Ok(n)));
        assert_eq!(got(Some(1)), Got::Lock);
        assert_eq!(got(Some(-1)), Got::RowChanged);
        assert_eq!(got(Some(0)), Got::Nothing);
        assert_eq!(got(None), Got::Nothing);
        assert_eq!(
            Got::of(Err::<Result<Option<i64>, sqlx::Error>, _>(())),
            Got::Broken
        );
        let yielding = Want::Yield("x".to_owned());
        for next in [Want::Follow, yielding, Want::Pass] {
            assert!(Got::Lock.wakes(true, &next), "{next:?}");
        }
        assert!(!Got::Lock.wakes(false, &Want::Lead));
        assert!(
            !Got::Lock.wakes(true, &Want::Rest),
            "asked to rest meanwhile"
        );
        assert!(Got::RowChanged.wakes(true, &Want::Follow));
        assert!(Got::Nothing.wakes(true, &Want::Follow));
        assert!(!Got::Nothing.wakes(false, &Want::Lead));
        assert!(!Got::Broken.wakes(true, &Want::Follow));
        assert_eq!(Got::Lock.then(Want::Lead), After::Next(Want::Lead));
        assert_eq!(Got::Nothing.then(Want::Follow), After::Next(Want::Follow));
        assert_eq!(Got::RowChanged.then(Want::Follow), After::Rest);
        assert_eq!(Got::Broken.then(Want::Follow), After::Renew);
    }

    /// A (re)connected signal connection wakes a candidate that waits on it: releases
    /// may have happened while it was away.
    #[test]
    fn a_new_signal_connection_wakes_the_waiting() {
        for want in [
            Want::Follow,
            Want::Pass,
            Want::Readers,
            Want::Turn("t".to_owned()),
        ] {
            assert!(want.waits(), "{want:?}");
        }
        assert!(Want::Yield("x".to_owned()).waits());
        assert!(!Want::Rest.waits() && !Want::Lead.waits());
    }
}
