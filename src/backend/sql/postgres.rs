//! `postgres` backend: the lease row (see [`super`]) in PostgreSQL, each step one
//! statement, judged by the server's `now()`.
//!
//! - **take** is one `INSERT … ON CONFLICT (election) DO UPDATE … WHERE` (the row is
//!   ours already, or expired and not left to another candidate) inside a statement
//!   that also reads the election's token counter and raises it to the token handed
//!   out, drops the taker's own reservation, returns the row as it stands when the take
//!   did not apply (a free row left to another candidate as nobody's, with the
//!   reservation's time left), and calls `pg_notify` when it did: one round trip for
//!   winners and losers alike.
//! - **renew**: `UPDATE … WHERE election = $1 AND tenure = $2`.
//! - **release**: the same compare, emptying the row and expiring it now, with a
//!   `pg_notify` in the same statement; the notification is delivered when the
//!   statement commits, so a woken follower always finds the row free.
//! - **switchover**: the candidates' rows (see [`super`]) are an upsert each; the
//!   reservation is one statement (`to`'s row reserved when it is alive and the lease
//!   row is ours, our own row alive and unreserved, in data-modifying CTEs) sent before
//!   the release. The release's notification wakes everyone: the named candidate takes
//!   the row; the others are refused and sleep until the reservation's end or the
//!   named one's take, which notifies too.
//!
//! **Wake-ups**: a second connection `LISTEN`s on the channel named like the table,
//! with the election as payload. Followers wake on every take and release there, and
//! when the leader's session ends (see [`wake`]: the leader holds the election's
//! advisory lock on its statement connection, idle-limited to the ttl by the server, and
//! a follower that found the row held waits for it on a connection of its own, sending
//! nothing while the leader lives; after such a wake it waits for the row's expiry, a
//! crashed leader's row standing until then). The listener is opened again whenever the statement
//! connection had to be (a partition that broke one may have left the other
//! half-open), and wakes the follower once after every (re)connect, since
//! notifications may have been missed meanwhile. While leading, a notification for
//! the election makes the leader read its own row: a takeover it did not expect (a
//! server clock that jumped, a quarantine row after a `DELETE`) ends the claim at once.
//! Changes made without a notification (an operator's plain `UPDATE`) are seen by the
//! leader's look at its own row every [`super::OWN_ROW_EVERY`] (DESIGN invariant 9).
//!
//! **Shared and exclusive** (`--mode`): see [`shared`] for the shared holders'
//! statements; a shared holder holds the election's readers' advisory lock, shared, on
//! its statement connection, and a writer waits for those holds to end on a waiter
//! connection of its own ([`wake::WAIT_READERS`]), silently; a shared candidate kept
//! out by the queue behind a waiting writer waits for that writer's turn lock
//! ([`wake::turn_key`]) on its waiter connection, silently; else shared candidates
//! wait as the election's followers do.
//!
//! `LISTEN` needs a session: through a transaction-mode pooler (PgBouncer
//! `pool_mode=transaction`) notifications are never delivered and followers fall back
//! to the holder's expiry and the retry interval. The lease statements themselves keep
//! no session state (autocommit, one statement each) and stay correct there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnection;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::held::OnConnection;
use super::{
    LeaseRow, Session, SqlBackend, SqlConnect, SqlDialect, SqlSettings, SqlTransport, Table,
    TableError, Tenancy, WaitFor, Waiting, NO_ELECTION, NO_TENURE,
};
use crate::backend::protocol::Protocol;
use crate::backend::{BackendError, Candidacy, Wake};

mod listen;
mod shared;
mod statements;
mod wake;
use listen::{listen, Listener};
use statements::Statements;
/// The `postgres` backend.
pub type PostgresBackend = SqlBackend<Postgres>;

/// PostgreSQL's side of the lease row: its statements and its listener.
pub struct Postgres {
    table: Table,
    /// The token counters' table beside it.
    counter: Table,
    /// The live candidates' table beside it.
    candidates: Table,
    /// The shared holders' table beside it, when this candidate has `--mode`.
    shared: Option<Table>,
    election: String,
    user: String,
    channel: String,
    statements: Statements,
    /// Woken by the listener for followers.
    wake: Arc<Notify>,
    /// Woken by the listener for the leader's look at its own row.
    own_changed: Arc<Notify>,
    /// Set by the listener at every (re)connect (see [`SqlDialect::presence_renewed`]).
    renewed: Arc<AtomicBool>,
    listener: JoinHandle<()>,
    table_ready: bool,
    /// Whether the shared holders' table is there: this candidate takes its turn in
    /// the waiting candidates' queue (see [`super::queue`]).
    queue: bool,
    /// A waiting writer's turn lock ([`wake::turn_key`]) on the statement connection.
    turn: OnConnection,
    /// The election's advisory lock (see [`wake`]).
    key: i64,
    /// The readers' lock, held shared by shared holders (see [`wake::WAIT_READERS`]).
    readers_key: i64,
    /// Whether this candidate holds shared (`--mode shared`).
    reader: bool,
    /// This candidate's presence (its listener's `application_name`): the key of its
    /// waiting writer's row.
    presence: String,
    /// The leader's `idle_session_timeout`, ms: the ttl.
    idle_limit: String,
    /// The election's lock (or the readers'), on the statement connection while we lead.
    guard: OnConnection,
    /// Our take's lock, to hold once the claim began ([`Postgres::after_take`]).
    hold_owed: bool,
    /// The leader's looks at its own row, on a connection of their own: the
    /// statement connection idles between renewals, for its idle limit.
    look: Session<PgConnection>,
    waiter: wake::Waiter,
    /// A writer's wait for the shared holders.
    readers: wake::Waiter,
}

impl PostgresBackend {
    /// Connects lazily: an unreachable server is not an error here, the elector retries.
    pub fn new(settings: &SqlSettings, lease: &Candidacy) -> Result<Self, BackendError> {
        let SqlConnect::Postgres(options) = &settings.connect else {
            return Err(BackendError::Store {
                op: "connect",
                message: "not PostgreSQL settings".to_owned(),
            });
        };
        let session = Session::new(options.clone());
        let wake = Arc::new(Notify::new());
        let own_changed = Arc::new(Notify::new());
        let channel = settings.table.name.clone();
        let renewed = Arc::new(AtomicBool::new(false));
        // The listener's connection is this candidate's presence (its name is listed
        // in `pg_stat_activity` while it lives).
        let presence = presence(&settings.table, lease.election, lease.identity);
        let listener = tokio::spawn(listen(Listener {
            options: options.clone().application_name(&presence),
            renewed: renewed.clone(),
            channel: channel.clone(),
            election: lease.election.to_owned(),
            wake: wake.clone(),
            own_changed: own_changed.clone(),
            reconnected: session.reconnected.clone(),
            op_timeout: lease.timing.backend_timeout,
        }));
        let key = wake::lock_key(&settings.table.display(), lease.election);
        let waiter = wake::Waiter::spawn(
            options.clone(),
            wake::WAIT,
            lease.timing.ttl * super::BACKSTOP_TTLS,
            lease.timing.backend_timeout,
        );
        let readers_key = wake::readers_key(&settings.table.display(), lease.election);
        let readers = wake::Waiter::spawn(
            options.clone(),
            wake::WAIT_READERS,
            lease.timing.ttl * super::QUEUE_TTLS,
            lease.timing.backend_timeout,
        );
        let dialect = Postgres {
            key,
            readers_key,
            reader: lease.mode == crate::backend::LockMode::Shared,
            presence,
            readers,
            idle_limit: millis(lease.timing.ttl).to_string(),
            guard: OnConnection::default(),
            hold_owed: false,
            look: Session::new(options.clone()),
            waiter,
            statements: Statements::for_tables(
                &settings.table.quoted('"'),
                &settings.table.counter().quoted('"'),
                &settings.table.candidates().quoted('"'),
                &settings.table.shared().quoted('"'),
            ),
            shared: lease.mode.flag().map(|_| settings.table.shared()),
            table: settings.table.clone(),
            counter: settings.table.counter(),
            candidates: settings.table.candidates(),
            election: lease.election.to_owned(),
            user: options.get_username().to_owned(),
            channel,
            wake,
            own_changed,
            renewed,
            listener,
            table_ready: false,
            queue: false,
            turn: OnConnection::default(),
        };
        Ok(Protocol::over(SqlTransport::with_dialect(
            session, lease, dialect,
        )))
    }
}

/// The SQLSTATEs of a `CREATE TABLE IF NOT EXISTS` that lost to another session's
/// creation of the same table: the catalog's unique index (23505), the table (42P07),
/// or its row type ("type … already exists", 42710).
fn lost_a_creation_race(e: &sqlx::Error) -> bool {
    code_of(e).is_some_and(|c| matches!(c.as_str(), "23505" | "42P07" | "42710"))
}

impl Postgres {
    /// Whether `table` is there; a user who may not even look is bad input.
    async fn exists(
        &self,
        session: &mut Session<PgConnection>,
        table: &Table,
    ) -> Result<bool, TableError> {
        let conn = session.begin("prepare").await?;
        let exists = (self.statements.exists(table.quoted('"')))
            .fetch_one(&mut *conn)
            .await;
        let exists = session.end_preparing(exists, (table, &self.user), (is_denied, |_| false));
        Ok(exists?.unwrap_or(false))
    }

    /// Creates `table` with `create` if it is missing.
    async fn ensure(
        &self,
        session: &mut Session<PgConnection>,
        (table, create): (&Table, &str),
    ) -> Result<(), TableError> {
        if self.exists(session, table).await? {
            return Ok(());
        }
        let conn = session.begin("prepare").await?;
        let created = sqlx::query(create).execute(&mut *conn).await.map(|_| ());
        // Two candidates creating it at once: one loses a catalog race.
        let who = (table, self.user.as_str());
        if (session.end_preparing(created, who, (is_denied, lost_a_creation_race)))?.is_some() {
            tracing::info!(table = %table.display(), "created the table");
        }
        Ok(())
    }

    /// The tables a candidate creates when they are missing, each with its statement:
    /// the lease table, the counters', the candidates', and with `--mode` the shared
    /// holders'.
    fn tables(&self) -> Vec<(&Table, &str)> {
        let st = &self.statements;
        let mut tables = vec![
            (&self.table, st.create.as_str()),
            (&self.counter, &st.create_counter),
            (&self.candidates, &st.create_candidates),
        ];
        tables.extend(self.shared.as_ref().map(|s| (s, st.shared.create.as_str())));
        tables
    }
}

impl Postgres {
    /// While we lead: the election's lock on the statement connection, with its idle
    /// limit (see [`wake`]); once per connection. Best effort: without it followers
    /// fall back to the row's expiry.
    async fn hold(&mut self, session: &mut Session<PgConnection>) {
        if !self.guard.asks(|g| session.still(g), false) {
            return;
        }
        let (hold, key) = self.lock_to_hold();
        let held = session.one("hold", wake::hold(hold, key, &self.idle_limit));
        let held = held.await.map(|h| h == Some(true));
        (self.guard).answered(held, session.generation(), "the election's lock");
    }

    /// The lock a holder holds: a shared holder the readers' lock, shared; a writer
    /// the election's.
    fn lock_to_hold(&self) -> (&'static str, i64) {
        if self.reader {
            (wake::HOLD_SHARED, self.readers_key)
        } else {
            (wake::HOLD, self.key)
        }
    }

    /// Lets the lock and the idle limit go, if we hold them (and our turn lock with
    /// every other).
    async fn let_go(&mut self, session: &mut Session<PgConnection>) {
        if !self.guard.lets_go(|g| session.still(g)) {
            return;
        }
        let _ = session.execute("release", sqlx::query(wake::LET_GO)).await;
        self.turn.forget();
    }

    /// A waiting writer's turn lock on the statement connection, once per
    /// connection, kept until its tenure ends (see [`wake::turn_key`]). Best effort:
    /// without it, the shared candidates behind it wait by the retry interval.
    async fn hold_turn(&mut self, session: &mut Session<PgConnection>) {
        if !self.turn.asks(|g| session.still(g), false) {
            return;
        }
        let key = wake::turn_key(&self.presence);
        let held = session.one("campaign", sqlx::query_scalar(wake::HOLD_TURN).bind(key));
        let held = held.await;
        self.turn
            .answered(held, session.generation(), "our turn lock");
    }

    /// Lets our turn lock go, if we hold it: our tenure (or our wait) ended.
    async fn let_turn_go(&mut self, session: &mut Session<PgConnection>) {
        if !self.turn.lets_go(|g| session.still(g)) {
            return;
        }
        let key = wake::turn_key(&self.presence);
        let let_go = sqlx::query(wake::LET_TURN_GO).bind(key);
        let _ = session.execute("release", let_go).await;
    }

    /// What a take statement's answer (`row`) found; our tenure in it holds the
    /// advisory lock that goes with it (see [`Postgres::hold`]), any other lets it go.
    /// With `at_once`, before the answer (a shared holder's: a writer's wait counts
    /// on it); else as soon as the claim began ([`SqlDialect::settle`]), so that the
    /// claim starts on the take's answer, one round trip sooner.
    async fn after_take(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
        row: Result<Option<sqlx::postgres::PgRow>, BackendError>,
        at_once: bool,
    ) -> Result<Option<LeaseRow>, BackendError> {
        let row = taken(row?)?;
        let ours = row.as_ref().is_some_and(|r| r.tenure == t.tenure);
        self.hold_owed = ours && !at_once;
        if !self.hold_owed {
            self.keep_lock(session, ours).await;
        }
        Ok(row)
    }

    /// Holds the election's lock while the row is ours (`ours`), lets it go otherwise.
    async fn keep_lock(&mut self, session: &mut Session<PgConnection>, ours: bool) {
        if ours {
            self.hold(session).await;
        } else {
            self.let_go(session).await;
        }
    }
}

/// The row a take statement's answer carries.
fn taken(row: Option<sqlx::postgres::PgRow>) -> Result<Option<LeaseRow>, BackendError> {
    (row.as_ref().map(LeaseRow::from_row).transpose()).map_err(super::sql("campaign"))
}

impl Postgres {
    /// Creates the tables this candidate needs, when missing, and seeds the counter.
    async fn ready_tables(
        &mut self,
        session: &mut Session<PgConnection>,
    ) -> Result<(), TableError> {
        for table in self.tables() {
            self.ensure(session, table).await?;
        }
        // An election's candidate takes its turn too once `--mode` candidates created
        // the table.
        self.queue = self.shared.is_some() || self.exists(session, &self.table.shared()).await?;
        // The counter at least as high as the row (a table from before the counter, a
        // counter row deleted while the lease row stayed).
        let request = self.statements.seed(&self.election);
        session.execute("prepare", request).await?;
        self.table_ready = true;
        Ok(())
    }
}

impl Postgres {
    /// A release statement (`statement`: the lease row's, or the shared holders' last
    /// step) for `(election, tenure)`, which notifies the waiting on our channel.
    async fn release_by(
        &self,
        session: &mut Session<PgConnection>,
        statement: &str,
        (election, tenure): (&str, &str),
    ) -> Result<(), BackendError> {
        let request = Statements::release(statement, (election, tenure), &self.channel);
        session.execute("release", request).await.map(|_| ())
    }
}

impl Postgres {
    /// The `registered` identities, each with whether its presence is among the
    /// `present` connections' names.
    fn present(
        &self,
        election: &str,
        registered: Vec<String>,
        present: &[String],
    ) -> Vec<(String, bool)> {
        (registered.into_iter())
            .map(|id| {
                let up = present.contains(&presence(&self.table, election, &id));
                (id, up)
            })
            .collect()
    }

    /// Our waiting row's write (`on`) or delete, keyed by our presence: the row keeps
    /// shared candidates out while our listener's session lives, without writes (see
    /// `shared`).
    fn mark<'q>(&'q self, t: &'q Tenancy, on: bool) -> statements::Request<'q> {
        let shared = &self.statements.shared;
        if on {
            shared.mark(t, &self.presence, self.reader)
        } else {
            shared.unmark(&t.election, &self.presence)
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Which waiter a follower waits on (`true`: the readers'), and for which lock, held
/// by another (`true`) or not (`key`: the election's lock, `readers_key`: the
/// readers'): behind a waiting writer, its tenure's end (its turn lock); a writer kept
/// out by shared holders, their sessions (the readers' lock); another's tenure, the
/// holder's session (the election's lock); else the notifications.
fn wait_on(wait: WaitFor, (key, readers_key): (i64, i64)) -> (bool, (bool, i64)) {
    match wait {
        WaitFor::Turn { writer } => (false, (true, wake::turn_key(&writer))),
        WaitFor::Readers => (true, (true, readers_key)),
        WaitFor::Holder => (false, (true, key)),
        WaitFor::Notice => (false, (false, key)),
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn code_of(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
}

/// `insufficient_privilege`.
fn is_denied(e: &sqlx::Error) -> bool {
    code_of(e).is_some_and(|c| c == "42501")
}

/// The `application_name` of `identity`'s listener connection (see [`super::presence_name`]).
fn presence(table: &Table, election: &str, identity: &str) -> String {
    super::presence_name(&[&table.display(), election, identity])
}
impl SqlDialect for Postgres {
    type Conn = PgConnection;
    const NAME: &'static str = "postgres";

    async fn prepare(&mut self, session: &mut Session<PgConnection>) -> Result<(), TableError> {
        if !self.table_ready {
            self.ready_tables(session).await?;
        }
        Ok(())
    }

    /// Readies a fresh statement connection for a handover: its prepared statements
    /// keep one generic plan (each lease statement finds its rows by primary key:
    /// planning it at every execution, as PostgreSQL does for a statement's first
    /// five, costs more than running it), and our release is prepared and planned
    /// ahead, run for an election and a tenure no row carries ([`NO_ELECTION`],
    /// [`NO_TENURE`]): it matches no row and notifies nobody. That takes the election:
    /// a shared holder's release frees a row held shared whenever no other shared row
    /// is live, whatever the tenure it names. Best effort: a server that refuses any of
    /// it plans as it would.
    async fn warm(&mut self, session: &mut Session<PgConnection>) {
        let generic = sqlx::query("SET plan_cache_mode = force_generic_plan");
        if let Err(e) = session.execute("prepare", generic).await {
            tracing::debug!(error = %e, "the server keeps its own plan cache mode");
        }
        let readied = match self.reader {
            true => self.release_shared(session, NO_ELECTION, NO_TENURE).await,
            false => self.release(session, NO_ELECTION, NO_TENURE).await,
        };
        if let Err(e) = readied {
            tracing::debug!(error = %e, "the release is prepared at its first use");
        }
    }

    async fn take(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        let request = self.statements.take(t, &self.channel);
        let row = session.row("campaign", request).await;
        self.after_take(session, t, row, false).await
    }

    async fn renew(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let done = session.execute("renew", self.statements.renew(t)).await;
        let ours = done?.rows_affected() == 1;
        self.keep_lock(session, ours).await;
        Ok(ours)
    }

    async fn release(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        self.release_by(session, &self.statements.release, (election, tenure))
            .await
    }

    async fn list(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
        alive: Duration,
    ) -> Result<(), BackendError> {
        let request = self.statements.list(t, millis(alive));
        session.execute("candidates", request).await.map(|_| ())
    }

    async fn live(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
    ) -> Result<Vec<(String, bool)>, BackendError> {
        let request = self.statements.live(election);
        let registered = session.values("candidates", request).await?;
        let request = self.statements.present();
        let present = session.values("candidates", request).await?;
        Ok(self.present(election, registered, &present))
    }

    fn presence_renewed(&mut self) -> bool {
        self.renewed.swap(false, Ordering::SeqCst)
    }

    async fn reserve(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
        to: &str,
        alive: Duration,
    ) -> Result<bool, BackendError> {
        let reserved = session
            .one(
                "release",
                self.statements.reserve(
                    t,
                    (to, presence(&self.table, &t.election, to)),
                    millis(alive),
                ),
            )
            .await;
        Ok(reserved? > 0)
    }

    async fn prune(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
        identity: &str,
    ) -> Result<(), BackendError> {
        let request = self.statements.prune(election, identity);
        session.execute("candidates", request).await.map(|_| ())
    }

    async fn own_tenure(
        &mut self,
        _session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<Option<String>, BackendError> {
        // On the look connection: see `look`.
        let request = self.statements.own(&t.election);
        (self.look).maybe("watch", request).await
    }

    async fn settle(&mut self, session: &mut Session<PgConnection>) {
        if std::mem::take(&mut self.hold_owed) {
            self.hold(session).await;
        }
    }

    async fn released(&mut self, session: &mut Session<PgConnection>) {
        self.hold_owed = false;
        self.let_go(session).await;
        self.let_turn_go(session).await;
    }

    async fn next_look(&mut self) {
        // A notification (someone took or freed the row), or the next look: a plain
        // UPDATE or DELETE by someone else notifies nobody.
        tokio::select! {
            _ = self.own_changed.notified() => {}
            _ = tokio::time::sleep(super::OWN_ROW_EVERY) => {}
        }
    }

    async fn wait_for_change(
        &mut self,
        tenancy: &mut Tenancy,
        wait: WaitFor,
        max: Duration,
    ) -> Wake {
        let (readers, held) = wait_on(wait, (self.key, self.readers_key));
        let waiter = if readers {
            &mut self.readers
        } else {
            &mut self.waiter
        };
        let mut none = None;
        let expiry = tenancy.expiry().unwrap_or(&mut none);
        waiter.wait(&self.wake, expiry, held, max).await
    }

    async fn take_shared(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<Option<LeaseRow>, BackendError> {
        // A shared holder holds the readers' lock (shared): writers wait for it.
        let request = self.statements.shared.take(t);
        let row = session.row("campaign", request).await;
        self.after_take(session, t, row, true).await
    }

    async fn renew_shared(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        let done = session.one("renew", self.statements.shared.renew(t)).await;
        let ours = done? == 1;
        self.keep_lock(session, ours).await;
        Ok(ours)
    }

    async fn release_shared(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
        tenure: &str,
    ) -> Result<(), BackendError> {
        let request = self.statements.shared.sweep(election, tenure);
        session.execute("release", request).await?;
        self.release_by(session, &self.statements.shared.release, (election, tenure))
            .await
    }

    async fn mark_waiting(
        &mut self,
        session: &mut Session<PgConnection>,
        t: &Tenancy,
        on: bool,
    ) -> Result<(), BackendError> {
        session.execute("campaign", self.mark(t, on)).await?;
        if on && !self.reader {
            self.hold_turn(session).await;
        }
        Ok(())
    }

    async fn own_shared(
        &mut self,
        _session: &mut Session<PgConnection>,
        t: &Tenancy,
    ) -> Result<bool, BackendError> {
        // On the look connection, as the writers' look.
        Ok(self
            .look
            .one("watch", self.statements.shared.own(t))
            .await?
            > 0)
    }

    fn queued(&self) -> bool {
        self.queue
    }

    fn look_for_queue(&mut self) {
        self.table_ready = false;
    }

    fn queue_key(&self) -> &str {
        &self.presence
    }

    async fn waiting(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
    ) -> Result<Option<(LeaseRow, i64, Vec<Waiting>)>, BackendError> {
        let request = self.statements.shared.queue(election);
        let rows = session.rows("campaign", request).await?;
        super::queue_from_rows(&rows).map_err(super::sql("campaign"))
    }

    async fn holders(
        &mut self,
        session: &mut Session<PgConnection>,
        election: &str,
    ) -> Result<Vec<(String, i64, bool)>, BackendError> {
        let request = self.statements.shared.holders(election);
        session.tuples("campaign", request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Behind a waiting writer a follower waits for its turn lock, a writer kept out
    /// by shared holders for the readers' lock (on the readers' waiter), a follower of
    /// another's tenure for the election's lock; else nothing holds what it waits on.
    #[test]
    fn a_follower_waits_on_the_lock_of_what_keeps_it_out() {
        let keys = (1, 2);
        let writer = "lk:w".to_owned();
        let turn = WaitFor::Turn {
            writer: writer.clone(),
        };
        assert_eq!(
            wait_on(turn, keys),
            (false, (true, wake::turn_key(&writer)))
        );
        assert_eq!(wait_on(WaitFor::Readers, keys), (true, (true, 2)));
        assert_eq!(wait_on(WaitFor::Holder, keys), (false, (true, 1)));
        assert_eq!(wait_on(WaitFor::Notice, keys), (false, (false, 1)));
    }
}
