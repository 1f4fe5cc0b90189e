//! A holder's watch of its own record (invariant 9): `CLIENT TRACKING` of its key on
//! the command connection, and the wait for a change of it by anyone else
//! ([`on_own_push`]), with what a renewal's answer means to it ([`renewal_of`]); and
//! a follower's tracking of the holders' renewals ([`follower_tracking`]).

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{rw, Keys, REFUSED};
use crate::backend::protocol::Own;
use crate::backend::record::Seen;
use crate::backend::{BackendError, LockMode, Renewal};

/// How soon after a renewal's answer its own invalidation is expected.
pub(crate) const OWN_PUSH_WINDOW: Duration = Duration::from_millis(50);

/// A request the server refused because it arrived after its use-by: it did nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooLate;

/// What a renew script's answer (`kept`), received at `now`, means. A renewal's own
/// invalidation follows its answer: expected until `own_push_until` (see
/// [`on_own_push`]).
pub(crate) fn renewal_of(
    kept: i64,
    now: Instant,
    own_push_until: &mut Option<Instant>,
) -> Result<Renewal, TooLate> {
    match kept {
        1 => {
            *own_push_until = Some(now + OWN_PUSH_WINDOW);
            Ok(Renewal::Renewed)
        }
        REFUSED => Err(TooLate),
        _ => Ok(Renewal::Lost),
    }
}

/// Whether a holder takes an invalidation heard at `now` for its own renewal's (the
/// first one until `until`, see [`renewal_of`]).
pub(crate) fn own_push(until: Option<Instant>, now: Instant) -> bool {
    until.is_some_and(|u| now <= u)
}

/// One push of the command connection, as the core reads it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Push<'k> {
    /// The connection was lost, and its tracking with it.
    Lost,
    /// An invalidation of these keys (none: a flush of everything).
    Invalidated(&'k [Vec<u8>]),
    /// Anything else.
    Other,
}

/// What the command connection's `CLIENT TRACKING` covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tracking {
    /// Tracking is on for the current connection (a lost connection loses it).
    pub(super) on: bool,
    /// The last tracking turned on was a holder's, of the lock key (rather than a
    /// follower's, of the renewals): set from a claim until the next look.
    pub(super) lock: bool,
}

impl Tracking {
    /// What one push of the command connection means: `true` for a change of a key
    /// tracked (tracking on). A disconnect notice takes the tracking with it.
    pub(super) fn on_push(&mut self, kind: &PushKind) -> bool {
        match kind {
            PushKind::Disconnection => {
                self.on = false;
                false
            }
            PushKind::Invalidate => self.on,
            _ => false,
        }
    }
}

/// A holder, which hears of its record's changes by others through `CLIENT TRACKING`
/// (invariant 9): the lock key of the election's holder and of the read-write lock's
/// exclusive one, a shared holder's entry (see [`on_own_push`]).
pub(crate) trait OwnKey: Send {
    /// The pushes of the command connection.
    fn pushes(&mut self) -> &mut mpsc::UnboundedReceiver<PushInfo>;
    /// Records what one push means; `true` for a change of our key (tracking on).
    /// A disconnect notice means the tracking is gone with its connection.
    fn note_push(&mut self, push: &PushInfo) -> bool;
    /// Turns tracking of our key on and reads it in the same round trip: `true` while
    /// it holds our tenure's value.
    fn track_own_key(
        &mut self,
        op: &'static str,
    ) -> impl std::future::Future<Output = Result<bool, BackendError>> + Send;
    /// Takes the time until which a push is taken for the invalidation of our own
    /// last renewal (see [`own_push`]).
    fn take_own_push_until(&mut self) -> Option<Instant>;
    /// A read of the key after a push: whether it holds another value than ours.
    fn taken(&mut self) -> impl std::future::Future<Output = bool> + Send;
}

/// What one push of the command connection, heard at `now`, says of an exclusive
/// holder's key (its `record_lost`): the key gone or no longer ours is found by a read.
///
/// Redis (7.0.15 here) pushes an invalidation for a key a script of this very
/// connection changed, NOLOOP or not, right after the script's answer: the first
/// push within [`OWN_PUSH_WINDOW`](super::OWN_PUSH_WINDOW) of a renewal's answer is taken for that one,
/// so the holder sends one request per renewal. Any other push for our key is
/// looked at before concluding. (On a server that does not push our own changes,
/// someone else's change within that window is found by the next renewal instead.)
///
/// A disconnect notice (the tracking went with its connection) turns tracking on
/// again at once, on the connection the client opened since, with a read of our
/// key: waiting for the next renewal to do it left us blind to a takeover until
/// then, and when the notice came after a renewal had gone out on the new
/// connection, that renewal had not done it either. Cancel-safe: a wait dropped
/// during that read leaves tracking off, and the next renewal turns it on.
pub(crate) fn on_own_push(holder: &mut impl OwnKey, now: Instant, push: &PushInfo) -> Own<OwnLook> {
    if push.kind == PushKind::Disconnection {
        holder.note_push(push);
        return Own::Look(OwnLook::Track);
    }
    if !holder.note_push(push) {
        return Own::Quiet;
    }
    let own = holder.take_own_push_until();
    if push.kind == PushKind::Invalidate && own_push(own, now) {
        return Own::Quiet;
    }
    Own::Look(OwnLook::Read)
}

/// The read of our key that a push calls for (see [`on_own_push`]): whether it shows
/// our tenure over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnLook {
    /// The tracking went with its connection: turn it on again, reading the key.
    Track,
    /// A change of our key by someone else, maybe: read it.
    Read,
}

/// The read `look` asks for: `true` when it shows our tenure over. A tracking refused
/// (the connection still down) says nothing: the next renewal tracks again.
pub(crate) async fn own_look(holder: &mut impl OwnKey, look: OwnLook) -> bool {
    match look {
        OwnLook::Track => matches!(holder.track_own_key("record_lost").await, Ok(false)),
        OwnLook::Read => holder.taken().await,
    }
}

/// After a push for the lock key: whether a read shows our tenure over (the key gone,
/// or holding another value than our tenure's `value`). A read that fails says
/// nothing (`false`): the renewals decide then.
pub(crate) async fn lock_taken(conn: &mut ConnectionManager, lock: &str, value: &str) -> bool {
    let current: Result<Option<String>, _> = redis::cmd("GET").arg(lock).query_async(conn).await;
    current.is_ok_and(|v| !Seen::of(v.as_deref(), value).still_ours())
}

/// After a push for a shared holder's keys (`--mode shared`): whether a read shows its
/// entry in the readers' set gone or a lock value beside it (one round trip, judged
/// by [`rw::seen`]). A read that fails says nothing (`false`): the renewals decide
/// then.
pub(crate) async fn shared_entry_lost(
    conn: &mut ConnectionManager,
    keys: &Keys,
    value: &str,
) -> bool {
    let read: Result<(Option<f64>, Option<String>), _> = redis::pipe()
        .cmd("ZSCORE")
        .arg(&keys.readers)
        .arg(value)
        .cmd("GET")
        .arg(&keys.lock)
        .query_async(conn)
        .await;
    let seen = |(score, lock): (Option<f64>, Option<String>)| {
        rw::seen(LockMode::Shared, value, score, lock.as_deref())
    };
    read.is_ok_and(|read| !seen(read).still_ours())
}

/// `CLIENT TRACKING` (re)started on a holder's own keys (the lock key; a shared
/// holder's also the readers' set). Off first: switching on again with the same prefix
/// is refused by some servers when tracking was left on (a failed turn-off at a
/// step-down).
pub(crate) fn tracking_pipe(own: &[&str]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    track_own(&mut pipe, own);
    pipe
}

/// The commands of [`tracking_pipe`], added to `pipe` (their answers ignored).
pub(crate) fn track_own(pipe: &mut redis::Pipeline, own: &[&str]) {
    pipe.cmd("CLIENT").arg("TRACKING").arg("OFF").ignore();
    let on = pipe.cmd("CLIENT").arg("TRACKING").arg("ON").arg("BCAST");
    for key in own {
        on.arg("PREFIX").arg(*key);
    }
    on.arg("NOLOOP").ignore();
}

/// A follower's `CLIENT TRACKING` (restarted, as [`tracking_pipe`]): every change of
/// the holders' renewals (the exclusive holder's `alive`, the readers' set) and of
/// their keeping of the queue (`busy`) is pushed to it, so that it needs to ask
/// nothing while they renew: an election's follower (see [`baton`], [`quiet`]) and a
/// `--mode` one (see [`rw`]).
pub(crate) fn follower_tracking(keys: &Keys) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("CLIENT").arg("TRACKING").arg("OFF").ignore();
    pipe.cmd("CLIENT").arg("TRACKING").arg("ON").arg("BCAST");
    for key in [&keys.readers, &keys.alive, &keys.busy] {
        pipe.arg("PREFIX").arg(key);
    }
    pipe.arg("NOLOOP").ignore();
    pipe
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder whose pushes say what the test says, with tracking on.
    struct Holder {
        pushes: mpsc::UnboundedReceiver<PushInfo>,
        tracking: Tracking,
        own_push_until: Option<Instant>,
        track_answer: Result<bool, ()>,
        taken: bool,
    }

    impl Holder {
        fn new(own_push_until: Option<Instant>) -> Holder {
            Holder {
                pushes: mpsc::unbounded_channel().1,
                tracking: Tracking {
                    on: true,
                    lock: true,
                },
                own_push_until,
                track_answer: Ok(true),
                taken: false,
            }
        }
    }

    impl OwnKey for Holder {
        fn pushes(&mut self) -> &mut mpsc::UnboundedReceiver<PushInfo> {
            &mut self.pushes
        }
        fn note_push(&mut self, push: &PushInfo) -> bool {
            self.tracking.on_push(&push.kind)
        }
        async fn track_own_key(&mut self, op: &'static str) -> Result<bool, BackendError> {
            (self.track_answer).map_err(|()| BackendError::Store {
                op,
                message: "down".into(),
            })
        }
        fn take_own_push_until(&mut self) -> Option<Instant> {
            self.own_push_until.take()
        }
        async fn taken(&mut self) -> bool {
            self.taken
        }
    }

    fn push(kind: PushKind) -> PushInfo {
        PushInfo { kind, data: vec![] }
    }

    #[tokio::test]
    async fn a_holder_looks_at_its_key_after_any_push_but_its_renewals_own() {
        let t0 = Instant::now();
        let mut h = Holder::new(Some(t0 + OWN_PUSH_WINDOW));
        // The renewal's own invalidation, within its window: nothing to look at.
        let own = on_own_push(&mut h, t0, &push(PushKind::Invalidate));
        assert_eq!(own, Own::Quiet);
        // Any later one is read, and the read decides.
        let other = on_own_push(&mut h, t0, &push(PushKind::Invalidate));
        assert_eq!(other, Own::Look(OwnLook::Read));
        assert!(!own_look(&mut h, OwnLook::Read).await);
        h.taken = true;
        assert!(own_look(&mut h, OwnLook::Read).await);
        // One past the window is someone else's too.
        let mut late = Holder::new(Some(t0));
        let pushed = on_own_push(&mut late, t0 + OWN_PUSH_WINDOW, &push(PushKind::Invalidate));
        assert_eq!(pushed, Own::Look(OwnLook::Read));
        // Pushes that are not of a key tracked say nothing.
        let message = on_own_push(&mut late, t0, &push(PushKind::Message));
        assert_eq!(message, Own::Quiet);
    }

    #[tokio::test]
    async fn a_disconnection_turns_tracking_on_again_and_its_read_decides() {
        let mut h = Holder::new(None);
        let lost = on_own_push(&mut h, Instant::now(), &push(PushKind::Disconnection));
        assert_eq!(lost, Own::Look(OwnLook::Track));
        assert!(!h.tracking.on, "the tracking went with the connection");
        assert!(!own_look(&mut h, OwnLook::Track).await, "still ours");
        h.track_answer = Ok(false);
        assert!(own_look(&mut h, OwnLook::Track).await, "gone");
        // Refused (the connection still down): the next renewal tracks again.
        h.track_answer = Err(());
        assert!(!own_look(&mut h, OwnLook::Track).await);
        // With tracking off, an invalidation is not of a key tracked.
        let after = on_own_push(&mut h, Instant::now(), &push(PushKind::Invalidate));
        assert_eq!(after, Own::Quiet);
    }

    #[test]
    fn a_holder_takes_one_push_within_the_window_for_its_renewals_own() {
        let t0 = Instant::now();
        let mut until = None;
        assert_eq!(renewal_of(1, t0, &mut until), Ok(Renewal::Renewed));
        assert_eq!(until, Some(t0 + OWN_PUSH_WINDOW));
        assert!(own_push(until, t0 + Duration::from_millis(50)));
        assert!(!own_push(until, t0 + Duration::from_millis(51)));
        assert!(!own_push(None, t0));
        let mut untouched = None;
        assert_eq!(renewal_of(REFUSED, t0, &mut untouched), Err(TooLate));
        assert_eq!(renewal_of(0, t0, &mut untouched), Ok(Renewal::Lost));
        assert_eq!(untouched, None);
    }

    #[test]
    fn a_lost_connection_takes_the_tracking_with_it() {
        let mut tracking = Tracking {
            on: true,
            lock: true,
        };
        assert!(tracking.on_push(&PushKind::Invalidate));
        assert!(!tracking.on_push(&PushKind::Disconnection));
        assert!(!tracking.on_push(&PushKind::Invalidate), "tracking gone");
    }
}
