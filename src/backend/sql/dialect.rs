//! What differs between PostgreSQL and MySQL, as one trait: the statements, the
//! table's creation and how followers are woken.

use std::future::Future;
use std::time::Duration;

use super::core::{LeaseRow, Tenancy, WaitFor};
use super::queue::Waiting;
use super::session::{Session, TableError};
use crate::backend::{BackendError, Wake};

/// What differs between PostgreSQL and MySQL: the statements, the table's creation
/// and how followers are woken. Each method runs one request on the shared
/// [`Session`]; the lease-row rules around them live in the core (`sql/core.rs`), and
/// [`super::SqlBackend`] drives both.
pub trait SqlDialect: Send + 'static {
    type Conn: sqlx::Connection;

    /// The backend's name in `Status` and metrics.
    const NAME: &'static str;

    /// Creates the lease table if it is missing.
    fn prepare(
        &mut self,
        session: &mut Session<Self::Conn>,
    ) -> impl Future<Output = Result<(), TableError>> + Send;

    /// Readies a fresh statement connection for a handover (once a connection, after
    /// [`SqlDialect::prepare`]; best effort). Nothing by default.
    fn warm(&mut self, _session: &mut Session<Self::Conn>) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The take statement (see the module doc); the row as it stands afterwards.
    fn take(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<Option<LeaseRow>, BackendError>> + Send;

    /// Moves our row's expiry; true when the row was ours.
    fn renew(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Frees the row if its tenure is `tenure`.
    fn release(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
        tenure: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Registers this candidate's identity: an upsert of its own row in the
    /// candidates' table, kept for `alive` from now at least (its reservation, if any,
    /// stays). Whether it is alive is its session's presence (see the module doc).
    fn list(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
        alive: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The identities the candidates' table registers, each with whether its session's
    /// presence is there now.
    fn live(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
    ) -> impl Future<Output = Result<Vec<(String, bool)>, BackendError>> + Send;

    /// Whether this candidate's presence session was (re)opened since the last call:
    /// then its row is registered again (a prune may have deleted it meanwhile).
    fn presence_renewed(&mut self) -> bool {
        false
    }

    /// A switchover's reservation, before the release: `to`'s row reserved for one ttl
    /// from now, only when `to` is listed alive and the lease row's tenure is ours; our
    /// own row listed alive for `alive` and its reservation, if any, dropped. True when
    /// `to` got the reservation.
    fn reserve(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
        to: &str,
        alive: Duration,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Deletes the row of `identity`, whose presence is gone, once its registration is
    /// older than [`super::PRUNE_AFTER`] and it holds no reservation (a candidate gone for
    /// good: a pod name never seen again).
    fn prune(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
        identity: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The tenure in the election's row now, if the row exists (the leader's look).
    fn own_tenure(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<Option<String>, BackendError>> + Send;

    /// This candidate just took the row.
    fn acquired(&mut self) {}

    /// After the release statement, whatever its fate.
    fn released(&mut self, _session: &mut Session<Self::Conn>) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// While leading, before each wait for a look: what the take left for after the
    /// claim began (PostgreSQL's advisory lock).
    fn settle(&mut self, _session: &mut Session<Self::Conn>) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Resolves when the leader should look at its own row again.
    fn next_look(&mut self) -> impl Future<Output = ()> + Send;

    /// A follower's wait for a change of holder, as the core says (`wait`), for `max`
    /// at most; the row's expiry is the tenancy's ([`Tenancy::expiry`]).
    fn wait_for_change(
        &mut self,
        tenancy: &mut Tenancy,
        wait: WaitFor,
        max: Duration,
    ) -> impl Future<Output = Wake> + Send;

    /// `--mode shared`: the shared take (see the module doc); our own row (our tenure,
    /// our token, a ttl left) when we hold, else the lease row as it stands, with the
    /// time until a waiting writer's or a reservation's end when that is later.
    fn take_shared(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<Option<LeaseRow>, BackendError>> + Send;

    /// Moves our shared row's expiry and the lease row's; true when both were ours
    /// to move (our row live, the lease row shared and live).
    fn renew_shared(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Deletes our shared row `tenure`; the last live shared holder frees the lease row
    /// (see the module doc).
    fn release_shared(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
        tenure: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Whether this candidate takes its turn in the waiting candidates' queue (see
    /// [`super::queue`]): the shared holders' table is there (a `--mode` candidate creates
    /// it; an election's candidate looks for it when it prepares).
    fn queued(&self) -> bool;

    /// Looks for the shared holders' table again at the next campaign (an election's
    /// candidate that found shared holders while it knew of no queue).
    fn look_for_queue(&mut self);

    /// This candidate's presence: the key of its waiting row.
    fn queue_key(&self) -> &str;

    /// The queue's read: the lease row (as a refused take returns it), how long it has
    /// been free (ms; negative while it is held), and the live waiting candidates;
    /// `None` without a lease row.
    #[allow(clippy::type_complexity)]
    fn waiting(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
    ) -> impl Future<Output = Result<Option<(LeaseRow, i64, Vec<Waiting>)>, BackendError>> + Send;

    /// The queue kept this candidate out at this campaign: the take was skipped, the
    /// row as it stands is `row`.
    fn kept_by_queue(&mut self, _row: &LeaseRow) {}

    /// Our waiting row in the queue (a writer's `w`, a shared candidate's `q`): written
    /// for a ttl from now, its arrival kept (`on`), or deleted.
    fn mark_waiting(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
        on: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Whether our shared row is there and the lease row still shared (a shared
    /// holder's look at its own rows).
    fn own_shared(
        &mut self,
        session: &mut Session<Self::Conn>,
        tenancy: &Tenancy,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Who holds now: the writer that holds the lease row, or up to [`super::HOLDERS_SHOWN`]
    /// live shared holders (identity, token, whether shared).
    fn holders(
        &mut self,
        session: &mut Session<Self::Conn>,
        election: &str,
    ) -> impl Future<Output = Result<Vec<(String, i64, bool)>, BackendError>> + Send;
}
