//! A graceful handover on `redlock` wakes one follower, not all of them,
//! with the pieces of the `redis` backend's handover ([`baton`]) over N nodes:
//!
//! - **One baton, on the first configured node.** A plain release gives the lock back
//!   on every node and then leaves one element in `leasekeeper:{<election>}:baton` on
//!   node 0 of `--redis-url` (the order every candidate of a fleet is configured with,
//!   so every follower blocks on the same list). Every waiting follower keeps one
//!   `BLPOP` open there; Redis hands the element to one of them, which looks (the take
//!   on every node). A baton per node would hand three followers one node each, a split
//!   vote; a node chosen by hashing the holder's value would move every follower's
//!   `BLPOP` at each handover (a request per follower), and "the first reachable node"
//!   is not a choice every candidate makes alike. The baton only decides who looks
//!   first, never who leads: every take is the majority compare-and-act script with
//!   its fencing counter, and a baton handed after the release round cannot meet the
//!   old lock on a node still.
//! - **What followers track.** Every renewal also writes
//!   `leasekeeper:{<election>}:alive` (the holder's value, PX one ttl) on each node
//!   where it renewed, and a follower's `CLIENT TRACKING` watches that key, not the
//!   lock: a release's `DEL` and a new holder's `SET` on each node, and the other
//!   candidates' looks that take a free node and give it back, push nothing.
//! - **The announcement.** A new leader publishes `acquired|<value>` on
//!   `leasekeeper:{<election>}:leader` on every node once its tenure is confirmed
//!   (again before its next renewal until a majority of nodes took it), and followers
//!   name it from that message without a request (one message per node: the second
//!   and third name the holder already followed and wake nobody).
//! - **Fallbacks.** With node 0 down, or the baton lost (its follower died before its
//!   look), nobody is woken by the release: followers look when the renewals they
//!   track stop on all but a minority of the nodes they follow the holder on (9/4 of
//!   the renew interval after the last renewal, 3/4 ttl by default), as after a
//!   crashed holder. A switchover (`release_to`) and a campaign that gives back a
//!   majority announce `released|…` on the events channel, which makes every
//!   follower look at once.

use tokio::time::{timeout, Instant};

use super::rules::Round;
use super::RedlockTransport;
use crate::backend::{Campaign, Wake};

/// The node the baton lives on: the first configured one.
pub(super) const BATON_NODE: usize = 0;

/// When a holder seen at `dues` (per node it holds, when that node is due a sign of
/// it) is presumed gone: once fewer than `quorum` of them are still not due, the
/// `quorum`-th latest due. `None` with fewer than `quorum` nodes.
pub(super) fn holder_due(mut dues: Vec<Instant>, quorum: usize) -> Option<Instant> {
    dues.sort_unstable_by(|a, b| b.cmp(a));
    dues.get(quorum.checked_sub(1)?).copied()
}

impl RedlockTransport {
    /// What the listeners and the baton waiter asked for since the last time: a look
    /// (`Changed`, the campaign runs the take), a new holder announced (`Changed`,
    /// the campaign follows it without a request), or nothing new (`None`: an
    /// announcement of the holder already followed, or of ourselves).
    pub(super) fn on_notice(&mut self) -> Option<Wake> {
        let mut look = false;
        let mut latest: Option<(Instant, String)> = None;
        for node in &self.nodes {
            look |= node.notices.take_look();
            if let Some((at, value)) = node.notices.take_announcement() {
                if latest.as_ref().is_none_or(|(seen, _)| at >= *seen) {
                    latest = Some((at, value));
                }
            }
        }
        self.core.on_notice(look, latest.map(|(_, value)| value))
    }

    /// Forgets what the listeners heard so far (a tenure of our own begins or ends).
    pub(super) fn clear_notices(&mut self) {
        for node in &self.nodes {
            node.notices.clear();
        }
        self.core.announced = None;
    }

    /// A follower takes an announced holder as its observation, without a request:
    /// followed on every node (the renewals pushed from a majority of them show it
    /// alive). `None` when nothing was announced, or for a value that names nobody.
    pub(super) fn follow_announced(&mut self) -> Option<Campaign> {
        let holder = self.core.follow_announced(Instant::now())?;
        // Only exclusive holders announce themselves (see `rw`).
        self.observed = vec![(holder.clone(), crate::status::Mode::Exclusive)];
        Some(Campaign::Held(Some(holder)))
    }

    /// A new leader's announcement on every node, once its tenure is confirmed; sent
    /// again (before the next renewal, see `record_lost`) until a majority took it.
    pub(super) async fn announce_once(&mut self) {
        let Some(publish) = self.core.to_announce().map(|v| self.req.announce(v)) else {
            return;
        };
        let sent: Round<(i64,)> = self.on_each_plain(&publish).await;
        if sent.iter().flatten().count() >= self.core.quorum() {
            self.core.announced_sent();
        }
    }

    /// A new tenure: no baton is for us, nor is anything heard so far, nor do we wait
    /// in the queues; followers are told once it is confirmed.
    pub(super) async fn on_acquired(&mut self) {
        self.stop_waiting().await;
        self.clear_notices();
        self.entry = None;
    }

    /// Ends our `BLPOP` on the baton node if one may still be open (we lead, or stop).
    pub(super) async fn stop_waiting(&self) {
        let Some(unblock) = self.waiter.disarm() else {
            return;
        };
        let mut conn = self.nodes[BATON_NODE].conn.clone();
        let sent = timeout(self.node_timeout, unblock.query_async::<()>(&mut conn)).await;
        if !matches!(sent, Ok(Ok(()))) {
            tracing::debug!("redlock baton wait not unblocked; a baton it pops goes back");
        }
    }

    /// A plain release's last step: one baton on the baton node, for one follower.
    pub(super) async fn hand_baton(&self) {
        let mut conn = self.nodes[BATON_NODE].conn.clone();
        let hand_out = self.req.hand_out();
        let sent = timeout(self.node_timeout, hand_out.invoke_async::<()>(&mut conn)).await;
        if !matches!(sent, Ok(Ok(()))) {
            tracing::info!(
                node = BATON_NODE,
                "redlock baton not handed out; followers look when the renewals stop"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_holder_is_gone_once_fewer_than_a_majority_of_its_nodes_are_not_due() {
        let t = Instant::now();
        let at = |s: u64| t + Duration::from_secs(s);
        assert_eq!(holder_due(vec![at(1), at(3), at(2)], 2), Some(at(2)));
        assert_eq!(holder_due(vec![at(5), at(1), at(3)], 3), Some(at(1)));
        assert_eq!(
            holder_due(vec![at(4), at(1), at(3), at(2), at(5)], 3),
            Some(at(3))
        );
        assert_eq!(holder_due(vec![at(1)], 2), None);
        assert_eq!(holder_due(vec![at(1)], 0), None);
    }
}
