//! `mysql` backend (MySQL 5.7+/8, MariaDB 10.3+): the lease row (see [`super`]),
//! judged by the server's `UTC_TIMESTAMP(6)` (UTC, so no time zone or DST shift can
//! move an expiry).
//!
//! - **take**: when the row is free for a new tenure, a multi-table `UPDATE` of the
//!   election's token counter joined with the lease row reserves the next token
//!   (`greatest(counter, row token, floor) + 1`, one assignment: a multi-table UPDATE
//!   runs its assignments in no set order). Then one conditional `UPDATE … WHERE
//!   election = ? AND (tenure = ? OR (reserved AND expires_at <= UTC_TIMESTAMP(6)))`;
//!   its assignments run left to right, so every one reads the old `tenure` (assigned
//!   last), and the token comes back in the same answer through
//!   `LAST_INSERT_ID(expr)`. A candidate that did not win reads the row to learn the
//!   holder; a missing row is inserted (`INSERT IGNORE`) as a quarantine row when the
//!   counter shows tokens were handed out, else as a free one. Both the token's
//!   reservation and the take also need that no other candidate's switchover
//!   reservation lasts (see [`super`]); the read then shows the free row as nobody's,
//!   with the reservation's time left, and says that it is left to another.
//! - **renew**: `UPDATE … WHERE election = ? AND tenure = ?`.
//! - **release**: the same compare, emptying the row and expiring it now.
//! - **switchover**: the candidates' rows are an upsert each; the reservation is a
//!   multi-table `UPDATE` of `to`'s row joined with the lease row (only while its
//!   tenure is ours), then our own row is listed alive and unreserved, then the
//!   release. The new leader drops its used-up reservation at its first look at its
//!   own row, right after the take.
//!
//! **Wake-ups** (MySQL has no notifications): a MySQL/MariaDB named lock,
//! `GET_LOCK`, is used purely as a signal, on a connection of its own; the row alone
//! decides who leads. The leader holds the lock for its whole tenure. Followers wait
//! for it in `GET_LOCK(name, 20 ttl)`, queued only while the row's tenure is the one
//! their last campaign saw (one statement: a take they did not see wakes them at
//! once), and send nothing meanwhile: a follower queued behind a live holder answers
//! `Quiet` at the retry interval. When the leader releases (after its row is free) or
//! its session ends (a killed process's connection closes; a frozen one's sessions
//! are ended by the server, whose idle limit `wait_timeout` is the ttl on the
//! leader's connections, which ping well within it), the first follower in the
//! lock's queue gets it, campaigns at once while holding it, and keeps it if it
//! wins. A new leader that got the lock as a follower lets it go once and queues
//! again (a *roll call*): each follower queued behind it gets the lock in turn,
//! looks (it learns of the new tenure), and hands it on, so every follower wakes
//! once per new tenure and no follower keeps naming the old leader. A follower that
//! got the lock and found the row still held hands it on and queues again when
//! the holder's session lives (the leader's *presence lock* `<name>:p`, which it
//! holds on its statement connection), and keeps it for the row's expiry when it
//! does not (a crash); see [`signal`]. A follower that got the lock and found the
//! free row left to another candidate (a switchover) hands the lock on in any case,
//! so that the named candidate, further back in the queue, wakes and takes the row
//! holding it. A follower that is not queued (its lock connection is being renewed,
//! or it holds the lock) wakes at the observed holder's expiry and at the retry
//! interval. Named locks are server-wide: the name is `lk:` and a 64-bit
//! FNV-1a hash (hex) of `<database>/<table>/<election>`.
//!
//! **Shared and exclusive** (`--mode`): see [`shared`]; a shared holder takes neither
//! the named lock nor the presence lock, but a named lock of its own, for which a
//! writer kept out by shared holders waits on its signal connection (see [`signal`]).
//!
//! Named locks need a session: through a proxy that multiplexes statements over
//! shared connections (ProxySQL pins a connection that takes a named lock; a
//! transaction-mode pooler would not) the wake-ups are lost, and a silent follower
//! would learn of a new leader only at its 20-ttl backstop: connect directly or
//! through a proxy that pins the session. The lease statements keep no session
//! state and stay correct there.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::MySqlConnection;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout, Instant};

use super::held::OnConnection;
use super::{
    LeaseRow, Session, SqlBackend, SqlConnect, SqlDialect, SqlSettings, SqlTransport, Table,
    TableError, Tenancy, WaitFor, Waiting, NO_ELECTION, NO_TENURE,
};
use crate::backend::protocol::Protocol;
use crate::backend::{BackendError, Candidacy, Wake};

mod rules;
mod shared;
mod signal;
mod statements;
mod transport;
use rules::Applied;
use signal::{SignalParts, Want};
use statements::Statements;

/// The `mysql` backend (MySQL and MariaDB).
pub type MysqlBackend = SqlBackend<Mysql>;

/// MySQL's side of the lease row: its statements and its signal connection.
pub struct Mysql {
    table: Table,
    /// The shared holders' table beside it, when this candidate has `--mode`.
    shared: Option<Table>,
    /// Whether this candidate holds shared (`--mode shared`): it never takes the
    /// election's named lock nor the presence lock.
    reader: bool,
    election: String,
    user: String,
    statements: Statements,
    table_ready: bool,
    /// Whether the shared holders' table is there: this candidate takes its turn in
    /// the waiting candidates' queue (see [`super::queue`]).
    queue: bool,
    /// A waiting writer's turn lock ([`shared::turn_lock`]) on the statement
    /// connection.
    turn: OnConnection,
    /// The election's named lock, and the leader's presence lock.
    lock: String,
    presence: String,
    /// This candidate's presence lock (held by its signal connection): the key of
    /// its waiting writer's row.
    candidate: String,
    /// Our shared holder's lock, and the statement connection that holds it.
    reader_lock: Option<(String, u64)>,
    /// A shared holder's looks at its own row, on a connection of their own.
    look: Session<MySqlConnection>,
    want: watch::Sender<Want>,
    /// Whether the signal connection holds the named lock now.
    held: watch::Receiver<bool>,
    /// Woken when a follower's signal connection got the lock.
    woke: Arc<Notify>,
    /// Asks the signal connection to look whether the lock is still its own.
    check: Arc<Notify>,
    /// The signal connection's id at the server (0 while there is none).
    signal_id: Arc<AtomicU64>,
    /// Whether the signal connection is queued for the lock as a follower.
    queued: watch::Receiver<bool>,
    /// The server's idle limit on a leader's sessions (`wait_timeout`, whole seconds:
    /// the ttl, rounded up), and the statement connection that has it.
    idle_limit: u64,
    idle_limited: Option<u64>,
    /// Set by the signal connection at every (re)connect, once it holds this
    /// candidate's presence lock.
    renewed: Arc<AtomicBool>,
    /// What the last campaign saw of the row, as the signal connection queues with
    /// it (`seen`).
    sight: rules::Sight,
    seen: watch::Sender<String>,
    /// Our reservation, if any, is used up: drop it at the leader's first look.
    clear_mine: bool,
    /// The leader's next look at its own row is now (right after the take: it takes
    /// the presence lock).
    look_now: bool,
    op_timeout: Duration,
    signal: JoinHandle<()>,
}

impl MysqlBackend {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    pub fn new(settings: &SqlSettings, lease: &Candidacy) -> Result<Self, BackendError> {
        let SqlConnect::Mysql(options) = &settings.connect else {
            return Err(BackendError::Store {
                op: "connect",
                message: "not MySQL settings".to_owned(),
            });
        };
        let session = Session::new(options.clone());
        let database = settings
            .table
            .schema
            .clone()
            .or_else(|| options.get_database().map(str::to_owned))
            .unwrap_or_default();
        let (want, want_rx) = watch::channel(Want::Rest);
        let (held_tx, held) = watch::channel(false);
        let (queued_tx, queued) = watch::channel(false);
        let (seen, seen_rx) = watch::channel(String::new());
        let idle_limit = idle_limit(lease.timing.ttl);
        let woke = Arc::new(Notify::new());
        let signal_id = Arc::new(AtomicU64::new(0));
        let timing = lease.timing;
        let lock = lock_name(&database, &settings.table.name, lease.election);
        let presence = format!("{lock}:p");
        let renewed = Arc::new(AtomicBool::new(false));
        let statements = Statements::for_tables(
            &settings.table.quoted('`'),
            &settings.table.counter().quoted('`'),
            &settings.table.candidates().quoted('`'),
            &settings.table.shared().quoted('`'),
        );
        let candidate = candidate_lock(&lock, lease.identity);
        let signal = tokio::spawn(signal::signal(SignalParts {
            options: options.clone(),
            name: lock.clone(),
            presence: presence.clone(),
            candidate: candidate.clone(),
            readers: statements.shared.readers.clone(),
            renewed: renewed.clone(),
            young: statements.young.clone(),
            queue: statements.queue.clone(),
            seen: seen_rx,
            election: lease.election.to_owned(),
            want: want_rx,
            held: held_tx,
            woke: woke.clone(),
            check: session.reconnected.clone(),
            conn_id: signal_id.clone(),
            queued: queued_tx,
            op_timeout: timing.backend_timeout,
            follow_wait: timing.retry_interval,
            backstop: timing.ttl * super::BACKSTOP_TTLS,
            queue_backstop: timing.ttl * super::QUEUE_TTLS,
            check_every: timing.renew_interval,
            idle_limit,
        }));
        let dialect = Mysql {
            shared: lease.mode.flag().map(|_| settings.table.shared()),
            reader: lease.mode == crate::backend::LockMode::Shared,
            statements,
            election: lease.election.to_owned(),
            table: settings.table.clone(),
            user: options.get_username().to_owned(),
            table_ready: false,
            queue: false,
            turn: OnConnection::default(),
            lock,
            presence,
            candidate,
            reader_lock: None,
            look: Session::new(options.clone()),
            want,
            held,
            woke,
            check: session.reconnected.clone(),
            signal_id,
            queued,
            idle_limit,
            idle_limited: None,
            renewed,
            sight: rules::Sight::default(),
            seen,
            clear_mine: false,
            look_now: false,
            op_timeout: timing.backend_timeout,
            signal,
        };
        Ok(Protocol::over(SqlTransport::with_dialect(
            session, lease, dialect,
        )))
    }
}

/// The server's idle limit for a leader's sessions: the ttl in whole seconds, rounded
/// up (`wait_timeout` counts seconds, 1 at least).
fn idle_limit(ttl: Duration) -> u64 {
    let whole = ttl.as_secs();
    (if ttl.subsec_nanos() > 0 {
        whole + 1
    } else {
        whole
    })
    .max(1)
}

fn ttl_us(t: &Tenancy) -> i64 {
    micros(t.ttl)
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The row as this candidate just took it (the server passed the token on).
fn ours(t: &Tenancy, token: i64) -> LeaseRow {
    LeaseRow {
        holder: t.identity.clone(),
        tenure: t.tenure.clone(),
        token,
        left_ms: t.ttl_ms(),
    }
}

impl Mysql {
    /// The tables a candidate creates when they are missing, each with its statement:
    /// the lease table, the counters', the candidates', and with `--mode` the shared
    /// holders'.
    fn tables(&self) -> Vec<(Table, &str)> {
        let st = &self.statements;
        let mut tables = vec![
            (self.table.clone(), st.create.as_str()),
            (self.table.counter(), &st.create_counter),
            (self.table.candidates(), &st.cands.create),
        ];
        tables.extend((self.shared.clone()).map(|s| (s, st.shared.create.as_str())));
        tables
    }

    /// The leader's look at its own row (`row`: its tenure, whether the presence lock
    /// is ours, who holds the named lock): the row's tenure, and whether it is ours.
    /// A signal connection that lost the lock unnoticed (and likely itself) is asked
    /// to look.
    fn looked(
        &self,
        row: Option<(String, Option<i64>, Option<i64>)>,
        t: &Tenancy,
    ) -> (Option<String>, bool) {
        let Some((tenure, _, lock_holder)) = row else {
            return (None, false);
        };
        let ours = self.signal_id.load(Ordering::SeqCst);
        if rules::lock_slipped(*self.held.borrow(), lock_holder, ours) {
            self.check.notify_one();
        }
        let mine = tenure == t.tenure;
        (Some(tenure), mine)
    }

    /// Tells the signal connection how to wait, as the core says (`wait`), with what
    /// the last campaign saw.
    fn ask_signal(&mut self, wait: &WaitFor) {
        let held = *self.held.borrow();
        let want = signal::want(wait, held, self.sight.left_to_another, &self.sight.tenure);
        self.seen.send_replace(self.sight.tenure.clone());
        self.want.send_replace(want);
    }
}

/// A follower's wait that ran out (`silent`: queued for a lock whose holder lives):
/// silent, nothing to look at; else a look, the row's expiry used up.
fn ran_out(silent: bool, tenancy: &mut Tenancy) -> Wake {
    if silent {
        return Wake::Quiet;
    }
    if let Some(e) = tenancy.expiry() {
        *e = None;
    }
    Wake::Changed
}

impl Drop for Mysql {
    fn drop(&mut self) {
        self.signal.abort();
    }
}

/// Access denied: `ER_TABLEACCESS_DENIED_ERROR`, `ER_DBACCESS_DENIED_ERROR`,
/// `ER_ACCESS_DENIED_ERROR`, `ER_SPECIFIC_ACCESS_DENIED_ERROR`.
fn is_denied(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|d| matches!(d.number(), 1142 | 1044 | 1045 | 1227))
}

/// The named lock of one election: short and fixed-length (MySQL allows 64
/// characters), the same in every leasekeeper version.
pub fn lock_name(database: &str, table: &str, election: &str) -> String {
    super::presence_name(&[database, table, election])
}

/// The presence lock of candidate `identity` in the election whose lock is `lock`:
/// held by its signal connection while that session lives (38 characters).
pub fn candidate_lock(lock: &str, identity: &str) -> String {
    let hash = super::presence_name(&[identity]);
    format!("{lock}:c{}", &hash[3..])
}

impl Mysql {
    /// Creates the tables this candidate needs, when missing, and seeds the counter.
    async fn ready_tables(
        &mut self,
        session: &mut Session<MySqlConnection>,
    ) -> Result<(), TableError> {
        for (table, create) in self.tables() {
            self.ensure(session, &table, create).await?;
        }
        // An election's candidate takes its turn too once `--mode` candidates created
        // the table.
        self.queue = self.shared.is_some() || self.found(session, &self.table.shared()).await?;
        // The counter's row, at least as high as the lease row (a table from before
        // the counter, a counter row deleted while the lease row stayed).
        self.seed(session, 0).await?;
        self.table_ready = true;
        Ok(())
    }
}

impl SqlDialect for Mysql {
    type Conn = MySqlConnection;
    const NAME: &'static str = "mysql";

    async fn prepare(&mut self, session: &mut Session<MySqlConnection>) -> Result<(), TableError> {
        if !self.table_ready {
            self.ready_tables(session).await?;
        }
        Ok(())
    }

    /// The release prepared ahead of the handover that needs it, run for an election
    /// and a tenure no row carries ([`NO_ELECTION`], [`NO_TENURE`]): it matches no
    /// row; a shared holder's by [`Mysql::ready_leave`]. Failing, it is prepared at its
    /// first use.
    async fn warm(&mut self, session: &mut Session<MySqlConnection>) {
        let readied = match self.reader {
            true => self.ready_leave(session).await,
            false => self.release(session, NO_ELECTION, NO_TENURE).await,
        };
        if let Err(e) = readied {
            tracing::debug!(error = %e, "the release is prepared at its first use");
        }
    }

    async fn take(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        // Left over from a tenure that ended without a release (best effort).
        self.lift_idle_limit(session).await;
        let reserved = self.count_token(session, t).await?;
        self.sight.left_to_another = false;
        let answer = self.update_take(session, t, reserved.unwrap_or(0)).await?;
        match rules::applied(reserved, answer) {
            Applied::Ours { token, raise } => {
                if raise {
                    self.raise(session, token).await?;
                }
                self.clear_mine |= reserved.is_some();
                return Ok(Some(ours(t, token)));
            }
            // No token in the answer (a server that does not pass it on): look.
            Applied::Look => {
                self.clear_mine |= reserved.is_some();
                return Ok(self.read(session, t).await?.map(|(row, _)| row));
            }
            Applied::Refused => {}
        }
        let Some((row, left_to_another)) = self.read(session, t).await? else {
            let found = self.insert_missing(session, t).await?;
            let left = found.as_ref().is_some_and(|(_, l)| *l);
            let row = found.map(|(row, _)| row);
            self.sight.saw(row.as_ref(), left);
            return Ok(row);
        };
        self.sight.saw(Some(&row), left_to_another);
        if rules::counter_gone(reserved.is_some(), false, &row, &t.tenure) {
            self.seed(session, t.floor_sent().sql_param()).await?;
        }
        Ok(Some(row))
    }

    async fn renew(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let done = session.execute("renew", self.statements.renew(t)).await;
        Ok(done?.rows_affected() == 1)
    }

    async fn release(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        let request = self.statements.release(election, tenure);
        session.execute("release", request).await.map(|_| ())
    }

    async fn list(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
        alive: Duration,
    ) -> Result<(), BackendError> {
        let request = self.statements.cands.list(t, alive);
        session.execute("candidates", request).await.map(|_| ())
    }

    async fn live(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
    ) -> Result<Vec<(String, bool)>, BackendError> {
        let request = self.statements.cands.live(election);
        let registered = session.values("candidates", request).await?;
        let mut live = Vec::with_capacity(registered.len());
        for id in registered {
            let up = session
                .one(
                    "candidates",
                    self.statements
                        .cands
                        .present(candidate_lock(&self.lock, &id)),
                )
                .await;
            let up = up? == 1;
            live.push((id, up));
        }
        Ok(live)
    }

    fn presence_renewed(&mut self) -> bool {
        self.renewed.swap(false, Ordering::SeqCst)
    }

    async fn reserve(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
        to: &str,
        alive: Duration,
    ) -> Result<bool, BackendError> {
        let done = session
            .execute(
                "release",
                self.statements
                    .cands
                    .reserve_to(t, to, candidate_lock(&self.lock, to)),
            )
            .await;
        // Matched rows (the client asks for found rows, not changed ones).
        let reserved = done?.rows_affected() > 0;
        if to != t.identity {
            // Best effort: we campaign again soon, and list ourselves then.
            let request = self.statements.cands.mine(t, alive);
            let done = session.execute("release", request).await;
            if let Err(e) = done {
                tracing::debug!(error = %e, "could not list ourselves alive at the switchover");
            }
        }
        Ok(reserved)
    }

    async fn prune(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
        identity: &str,
    ) -> Result<(), BackendError> {
        let request = self.statements.cands.prune(election, identity);
        session.execute("candidates", request).await.map(|_| ())
    }

    async fn own_tenure(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<String>, BackendError> {
        if std::mem::take(&mut self.clear_mine) {
            self.drop_reservation(session, t).await;
        }
        let request = self.statements.own(t, (&self.presence, &self.lock));
        let row = session.tuple("watch", request).await?;
        let (tenure, ours) = self.looked(row, t);
        if ours {
            self.limit_idle(session).await;
            if self.turn.wanted() {
                // A writer that queued keeps its turn lock through its tenure; a new
                // connection (the old one cut or replaced) takes it again, so that
                // the readers behind it wait silently again after one look.
                self.hold_turn(session).await;
            }
        }
        Ok(tenure)
    }

    fn acquired(&mut self) {
        if self.reader {
            // A shared holder holds no lock: one it got as a follower goes on to the
            // next in the queue (each wakes and looks in turn).
            self.want.send_replace(Want::Rest);
            return;
        }
        self.look_now = true;
        self.want.send_replace(Want::Lead);
    }

    async fn released(&mut self, session: &mut Session<MySqlConnection>) {
        // Even when the row could not be freed, the lock is no use to us now.
        self.want.send_replace(Want::Rest);
        let mut held = self.held.clone();
        let _ = timeout(self.op_timeout, held.wait_for(|h| !*h)).await;
        // Then the presence lock: a follower woken meanwhile found the row free.
        let request = sqlx::query("SELECT RELEASE_LOCK(?)").bind(&self.presence);
        let _ = session.execute("release", request).await;
        self.let_reader_lock_go(session).await;
        self.let_turn_go(session).await;
        self.lift_idle_limit(session).await;
    }

    async fn next_look(&mut self) {
        if !std::mem::take(&mut self.look_now) {
            sleep(super::OWN_ROW_EVERY).await;
        }
    }

    async fn take_shared(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        self.join(session, t).await
    }

    async fn renew_shared(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let ours = self.renew_share(session, t).await?;
        if ours {
            self.hold_reader_lock(session, t).await;
        }
        Ok(ours)
    }

    async fn release_shared(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        self.leave(session, election, tenure).await
    }

    async fn mark_waiting(
        &mut self,
        session: &mut Session<MySqlConnection>,
        t: &Tenancy,
        on: bool,
    ) -> Result<(), BackendError> {
        self.mark(session, t, on).await
    }

    async fn own_shared(
        &mut self,
        _session: &mut Session<MySqlConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        self.still_shared(t).await
    }

    async fn holders(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
    ) -> Result<Vec<(String, i64, bool)>, BackendError> {
        self.list_holders(session, election).await
    }

    fn queued(&self) -> bool {
        self.queue
    }

    fn look_for_queue(&mut self) {
        self.table_ready = false;
    }

    fn queue_key(&self) -> &str {
        &self.candidate
    }

    async fn waiting(
        &mut self,
        session: &mut Session<MySqlConnection>,
        election: &str,
    ) -> Result<Option<(LeaseRow, i64, Vec<Waiting>)>, BackendError> {
        self.read_queue(session, election).await
    }

    fn kept_by_queue(&mut self, row: &LeaseRow) {
        // As a take that found the row: the signal connection queues with its tenure;
        // a free row left to the candidates ahead hands the lock on to them.
        self.sight.kept(row);
    }

    async fn wait_for_change(
        &mut self,
        tenancy: &mut Tenancy,
        wait: WaitFor,
        max: Duration,
    ) -> Wake {
        self.ask_signal(&wait);
        let until = Instant::now() + max;
        let signals = signal::signals(&wait);
        let mut queue_known = true;
        loop {
            // Silent while queued for a lock whose holder lives (see `signal::signals`).
            let silent = signals && *self.queued.borrow();
            let expiry = tenancy.expiry().and_then(|e| *e);
            tokio::select! {
                _ = self.woke.notified() => return Wake::Changed,
                changed = self.queued.changed(), if queue_known => {
                    queue_known = changed.is_ok();
                    continue;
                }
                _ = sleep_until(signal::wake_at(silent, expiry, until)) => {}
            }
            return ran_out(silent, tenancy);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_limit_is_the_ttl_in_whole_seconds_rounded_up() {
        assert_eq!(idle_limit(Duration::from_secs(2)), 2);
        assert_eq!(idle_limit(Duration::from_millis(2001)), 3);
        assert_eq!(idle_limit(Duration::from_millis(1500)), 2);
        assert_eq!(idle_limit(Duration::from_millis(300)), 1);
        assert_eq!(idle_limit(Duration::ZERO), 1);
    }

    #[test]
    fn lock_names_are_short_and_stable() {
        let n = lock_name("app", "leasekeeper_leases", "my-app");
        assert_eq!(n.len(), 19);
        assert_eq!(n, lock_name("app", "leasekeeper_leases", "my-app"));
        assert_ne!(n, lock_name("app", "leasekeeper_leases", "other"));
        // Pinned: every version must name the lock of an election alike.
        assert_eq!(lock_name("", "", ""), "lk:07d69907b49d2e23");
    }
}
