//! A holder's watch of its own record (DESIGN invariant 9) on `redlock`: the
//! election's leader, a `--mode exclusive` holder and a `--mode shared` one hear of a
//! change of their record between renewals, as the `redis` backend's holders do
//! ([`own_key_lost`](crate::backend::redis::own_key_lost)), over N nodes.
//!
//! - **What is tracked.** Once a tenure begins, its first wait between renewals
//!   (`record_lost`) turns `CLIENT TRACKING BCAST NOLOOP` on, on every node's command
//!   connection, for the record: the lock key (`…:lock`) for an exclusive tenure, the
//!   readers' set (`…:readers`) *and* the lock key for a shared one (a lock key beside
//!   a shared member means the member no longer counts: a shared renewal is refused
//!   there). The same request reads the record, so that a change after it is pushed
//!   and nothing before it is missed. The follower's tracking (of `…:alive` and
//!   the readers' set) is replaced meanwhile, and turned on again by the next wait as a
//!   follower.
//! - **A push** from a node (other than the one a renewal of ours causes, which Redis
//!   pushes right after the renewal's answer: the first push within
//!   [`OWN_PUSH_WINDOW`] of it is taken for that one) is looked at with one read of that
//!   node, one round trip (`MGET` of the lock key, `ZMSCORE` of our member, `TIME`;
//!   plain commands, so they are told apart from the scripts' in `INFO commandstats`). A node that answers "not ours" (gone, overwritten, expired, or a
//!   lock key beside our shared member) stays lost for the rest of the tenure (nobody
//!   writes our value back); so do the nodes a renewal found not ours.
//! - **The verdict** is the renewal's: lost once so many nodes said "not ours" that the
//!   others can no longer make a majority of the N nodes
//!   ([`lost`](super::rules::lost)). A node that does not answer is no proof of
//!   anything; a change on a minority does not end the tenure.
//! - **A lost connection** (the client's disconnect notice: the tracking went with it)
//!   turns tracking on again at once on the new connection, with a read; if that fails
//!   too, the next renewal's wait tries again (as on `redis`).
//!
//! Costs: one round trip per node per tenure to turn tracking on; none per renewal of
//! an exclusive holder (its own renewal's push is skipped). A shared holder's member
//! lives in the one sorted set every shared holder's renewal changes, so each shared
//! holder reads every node after every *other* shared holder's renewal there: with R
//! shared holders, R·(R−1) reads per node per renew interval (holders renew anyway;
//! waiting candidates still send nothing). Cancel-safe: the elector drops the wait when
//! a renewal is due; what a push asked for stays noted per node until a read or the
//! renewal has answered for that node.

use std::convert::Infallible;

use futures_util::future::{join_all, select_all};
use redis::{PushInfo, PushKind};
use tokio::time::{timeout, Instant};

use super::RedlockTransport;
use crate::backend::protocol::Own;
use crate::backend::record::Seen;
use crate::backend::redis::OWN_PUSH_WINDOW;
use crate::backend::LockMode;

/// What the watch knows of one node during a tenure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct OwnNode {
    /// Tracking of our record is on for this node's current connection.
    pub(super) tracked: bool,
    /// Turn tracking on (with a read) at the next chance: a new tenure, a lost
    /// connection, a renewal after a failed try.
    pub(super) track: bool,
    /// A change was pushed that no read (or renewal) has answered for yet.
    pub(super) look: bool,
    /// The node said our record is not ours (for the rest of the tenure).
    pub(super) gone: bool,
    /// Until when a push from this node is taken for our own last renewal's.
    pub(super) own_push_until: Option<Instant>,
}

/// What one push from a node means to the watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// Not ours to look at (a push while our tracking is off on that node, or of
    /// another kind).
    Nothing,
    /// The invalidation our own renewal causes there.
    OwnRenewal,
    /// Someone changed the record there: read it.
    Change,
    /// The connection (and its tracking) is gone: track again.
    Disconnected,
}

/// What a push of `kind` from `node` means at `now` (see the module doc).
pub(super) fn heard(kind: &PushKind, node: &OwnNode, now: Instant) -> Heard {
    match kind {
        PushKind::Disconnection => Heard::Disconnected,
        PushKind::Invalidate if !node.tracked => Heard::Nothing,
        PushKind::Invalidate if node.own_push_until.is_some_and(|u| now <= u) => Heard::OwnRenewal,
        PushKind::Invalidate => Heard::Change,
        _ => Heard::Nothing,
    }
}

impl OwnNode {
    /// Notes one push; returns what it meant.
    pub(super) fn on_push(&mut self, kind: &PushKind, now: Instant) -> Heard {
        let h = heard(kind, self, now);
        match h {
            Heard::Disconnected => {
                self.tracked = false;
                self.track = true;
            }
            Heard::OwnRenewal => self.own_push_until = None,
            Heard::Change => self.look = true,
            Heard::Nothing => {}
        }
        h
    }

    /// A renewal's answer from this node (`Some(true)`: it extended our record, at
    /// `at`; `Some(false)`: not ours there; `None`: no answer).
    pub(super) fn renewed(&mut self, ours: Option<bool>, at: Instant) {
        match ours {
            Some(true) => {
                self.look = false;
                self.own_push_until = Some(at + OWN_PUSH_WINDOW);
            }
            Some(false) => {
                self.look = false;
                self.gone = true;
            }
            None => {}
        }
        self.track |= !self.tracked;
    }
}

/// One read of a node: the lock key, our member's score in the readers'
/// set, and the node's clock (`TIME`: seconds, microseconds).
pub(super) type Read = (Vec<Option<String>>, Vec<Option<f64>>, Vec<u64>);

/// Our tenure's record `value` as one read of a node found it: ours while the lock
/// key holds it (exclusive), or while our member is live (its score, the expiry in
/// the node's ms, after the node's now) with no lock key beside it (shared). An
/// expired member, or a read without the node's clock, shows no record of ours.
pub(super) fn seen(mode: LockMode, value: &str, read: &Read) -> Seen {
    let (lock, score, time) = read;
    let lock = lock.first().cloned().flatten();
    if mode != LockMode::Shared {
        return Seen::of(lock.as_deref(), value);
    }
    if lock.is_some() {
        return Seen::Another;
    }
    let now_ms = match time.as_slice() {
        [s, us, ..] => s * 1000 + us / 1000,
        _ => return Seen::Free,
    };
    let live = score
        .first()
        .copied()
        .flatten()
        .is_some_and(|s| s > now_ms as f64);
    match live {
        true => Seen::Ours,
        false => Seen::Free,
    }
}

impl RedlockTransport {
    /// The keys of our record, tracked.
    fn record_keys(&self) -> Vec<&str> {
        let keys = &self.req.keys;
        match self.mode {
            LockMode::Shared => vec![&keys.readers, &keys.lock],
            _ => vec![&keys.lock],
        }
    }

    /// `MGET` lock, `ZMSCORE` readers our value, `TIME`, added to `pipe`.
    fn add_read(&self, pipe: &mut redis::Pipeline, value: &str) {
        pipe.cmd("MGET").arg(&self.req.keys.lock);
        pipe.cmd("ZMSCORE").arg(&self.req.keys.readers).arg(value);
        pipe.cmd("TIME");
    }

    /// The holder's next news between renewals, after the looks at the nodes the core
    /// asks for: the nodes still holding our record (or silent) can no longer make a
    /// majority, or a push from one of them (`None`: no tenure, or no node's pushes
    /// left).
    pub(super) async fn own_record_news(&mut self) -> Option<OwnNews> {
        let value = self.core.value()?.to_owned();
        self.look_at_nodes(&value).await;
        if let Some(gone) = self.core.own_lost() {
            return Some(OwnNews::Lost { gone });
        }
        let (i, push) = self.next_own_push().await?;
        Some(OwnNews::Push {
            node: i,
            kind: push.map_or(PushKind::Disconnection, |p| p.kind),
        })
    }

    /// What the core makes of `news` heard at `now`: a push is noted (the next news
    /// looks at the nodes it calls for); too few nodes left is the record lost.
    pub(super) fn on_own_news(&mut self, now: Instant, news: OwnNews) -> Own<Infallible> {
        match news {
            OwnNews::Lost { gone } => {
                tracing::warn!(
                    gone,
                    nodes = self.nodes.len(),
                    "redlock: our record was deleted or taken on too many nodes"
                );
                Own::Lost
            }
            OwnNews::Push { node, kind } => {
                self.core.on_own_push(node, &kind, now);
                Own::Quiet
            }
        }
    }

    async fn look_at_nodes(&mut self, value: &str) {
        let calls = self.core.own().iter().enumerate().map(|(i, node)| {
            let mut pipe = redis::pipe();
            if node.track {
                holder_tracking(&mut pipe, &self.record_keys());
            }
            let wanted = node.track || (node.look && node.tracked && !node.gone);
            self.add_read(&mut pipe, value);
            let mut conn = self.nodes[i].conn.clone();
            let limit = self.node_timeout;
            async move {
                if !wanted {
                    return None;
                }
                match timeout(limit, pipe.query_async::<Read>(&mut conn)).await {
                    Ok(Ok(read)) => Some(read),
                    _ => None,
                }
            }
        });
        let reads = join_all(calls).await;
        for (i, read) in reads.into_iter().enumerate() {
            let still_ours = read.map(|read| seen(self.mode, value, &read).still_ours());
            self.core.own_looked(i, still_ours);
        }
    }

    /// The next push from any node (`None` for a push channel gone: that node's
    /// pushes end), or `None` once no node has pushes left.
    async fn next_own_push(&mut self) -> Option<(usize, Option<PushInfo>)> {
        let open: Vec<_> = (self.pushes.iter_mut().enumerate())
            .filter(|(_, rx)| !rx.is_closed() || !rx.is_empty())
            .map(|(i, rx)| Box::pin(async move { (i, rx.recv().await) }))
            .collect();
        if open.is_empty() {
            return None;
        }
        let ((i, push), _, _) = select_all(open).await;
        Some((i, push))
    }
}

/// The holder's tracking of its record, (re)started: off first, as
/// [`tracking_pipe`](crate::backend::redis::tracking_pipe).
fn holder_tracking(pipe: &mut redis::Pipeline, keys: &[&str]) {
    pipe.cmd("CLIENT").arg("TRACKING").arg("OFF").ignore();
    pipe.cmd("CLIENT").arg("TRACKING").arg("ON").arg("BCAST");
    for key in keys {
        pipe.arg("PREFIX").arg(*key);
    }
    pipe.arg("NOLOOP").ignore();
}

/// What a Redlock holder hears of its own record.
#[derive(Clone, Debug)]
pub enum OwnNews {
    /// Our record is gone or taken on `gone` nodes: too many for a majority.
    Lost { gone: usize },
    /// A push from node `node` (a disconnection when its pushes ended).
    Push { node: usize, kind: PushKind },
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn tracked() -> OwnNode {
        OwnNode {
            tracked: true,
            ..OwnNode::default()
        }
    }

    #[test]
    fn the_first_push_after_a_renewal_is_its_own_and_only_the_first() {
        let t = Instant::now();
        let mut node = tracked();
        node.renewed(Some(true), t);
        let inv = PushKind::Invalidate;
        assert_eq!(
            node.on_push(&inv, t + Duration::from_millis(5)),
            Heard::OwnRenewal
        );
        assert_eq!(
            node.on_push(&inv, t + Duration::from_millis(6)),
            Heard::Change
        );
        assert!(node.look);
        // Past the window, even the first is someone else's.
        let mut node = tracked();
        node.renewed(Some(true), t);
        let late = t + OWN_PUSH_WINDOW + Duration::from_millis(1);
        assert_eq!(node.on_push(&inv, late), Heard::Change);
    }

    #[test]
    fn untracked_pushes_say_nothing_and_a_lost_connection_tracks_again() {
        let t = Instant::now();
        let mut node = OwnNode::default();
        assert_eq!(node.on_push(&PushKind::Invalidate, t), Heard::Nothing);
        assert!(!node.look);
        let mut node = tracked();
        assert_eq!(
            node.on_push(&PushKind::Disconnection, t),
            Heard::Disconnected
        );
        assert!(!node.tracked && node.track);
    }

    #[test]
    fn a_renewal_answers_for_a_pushed_change_and_marks_what_is_gone() {
        let t = Instant::now();
        let mut node = tracked();
        node.look = true;
        node.renewed(Some(false), t);
        assert!(node.gone && !node.look);
        let mut node = tracked();
        node.look = true;
        node.renewed(None, t);
        assert!(node.look && !node.gone, "silence answers for nothing");
        let mut node = OwnNode::default();
        node.renewed(Some(true), t);
        assert!(node.track, "an untracked node is tracked after a renewal");
    }

    fn read(lock: Option<&str>, score: Option<f64>, now_ms: u64) -> Read {
        (
            vec![lock.map(str::to_owned)],
            vec![score],
            vec![now_ms / 1000, (now_ms % 1000) * 1000],
        )
    }

    #[test]
    fn ours_is_the_lock_or_a_live_member_with_no_lock_beside_it() {
        let v = "n|3|me";
        for mode in [LockMode::Election, LockMode::Exclusive] {
            assert_eq!(seen(mode, v, &read(Some(v), None, 5_000)), Seen::Ours);
            let another = read(Some("o|4|x"), None, 5_000);
            assert_eq!(seen(mode, v, &another), Seen::Another);
            assert_eq!(seen(mode, v, &read(None, Some(9e9), 5_000)), Seen::Free);
        }
        let shared = LockMode::Shared;
        let live = read(None, Some(6_000.0), 5_000);
        assert_eq!(seen(shared, v, &live), Seen::Ours);
        let removed = read(None, None, 5_000);
        assert_eq!(seen(shared, v, &removed), Seen::Free, "removed");
        let expired = read(None, Some(5_000.0), 5_000);
        assert_eq!(seen(shared, v, &expired), Seen::Free, "expired");
        let locked = read(Some("o|4|w"), Some(6_000.0), 5_000);
        assert_eq!(
            seen(shared, v, &locked),
            Seen::Another,
            "a lock key beside it"
        );
        let no_clock = (vec![None], vec![Some(6_000.0)], vec![]);
        assert_eq!(seen(shared, v, &no_clock), Seen::Free, "no clock");
    }
}
