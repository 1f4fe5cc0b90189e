//! The ZooKeeper campaign as a state machine: one explicit [`Phase`] (where this
//! candidate stands in the queue of latch nodes, and what it watches), moved on by the
//! store's answers, and the decisions taken from it: what a campaign sends first
//! ([`Phase::begin`] -> [`Round`]), what the one-round-trip claim of the next in line
//! makes of its answers ([`after_shortcut`]), what a campaign sends after its listing
//! of the queue ([`after_list`] -> [`Next`]), what a full round's claim makes of its
//! proof ([`after_claim`]), how a wait goes on ([`Phase::wait`] -> [`WaitFor`],
//! [`Phase::on_wake`] -> [`Heard`]), how a renew proves the claim ([`Phase::renewal`])
//! and what ends it ([`Phase::on_own`], [`Phase::on_confirmation`]). No I/O, no clock
//! (`now` is an argument), and opaque watches (`W`: on a node, `N`: a follower's news
//! of a new holder, `C`: a claim's confirmation on its way), so plain tests drive
//! every case; the backend ([`super::ZkBackend`]) does the I/O.
//!
//! Invariants kept here:
//! - **the lowest node, of this session, proven through the ensemble's leader**: a
//!   candidate claims only on a proof of its own node (`rules::seen_node` on the stat
//!   read behind a `sync` or a `multi` check); a full round whose proof fails starts
//!   over with a new session, the next in line's shortcut falls back to a full round;
//! - **a vanished node** (the session expired meanwhile) starts over, never claims;
//! - **a switchover's reservation** that asks us to let the named node pass is obeyed
//!   before any claim (once per campaign), and one that names another node keeps the
//!   next in line from claiming without a full look;
//! - **a follower** looks again at once when its predecessor's watch fires, on an
//!   announcement of the new holder, or when its session's state changes, and only
//!   after a stagger when the head it does not wait for changes; a deleted head that
//!   was its only predecessor makes it first (sequence numbers only grow);
//! - **the claim ends** on a change of our node by another client, on the session's
//!   end, and on a claim's `multi` check that failed or never answered; a mere
//!   disconnect ends neither.

use std::time::Duration;

use tokio::time::Instant;

use super::super::queue::{self, Entry, HolderNews, Stand};
use super::rules::{self, OwnEvent};

/// Where this candidate stands in the queue, and what it watches.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) enum Phase<W, N, C> {
    /// No node (none created yet, or the session ended, or we released): a wait ends
    /// at once, and the next campaign creates one.
    #[default]
    Unqueued,
    /// A node, nothing watched: after an error, during a campaign, after a look.
    Queued,
    /// Our predecessor is the head of the queue: one watch on its data serves both
    /// (our turn, and news of the holder).
    NextInLine(W),
    /// The head, our only predecessor, was deleted: we are first now, since sequence
    /// numbers only grow. The next campaign claims in one round trip ([`Round::Shortcut`]).
    HeadGone,
    /// Behind another than the head: the watch on the node we wait for (`turn`;
    /// `None`: it was gone already) and the news of a new holder (`news`; `None`: the
    /// head was gone already, and so was the node we wait for: a head gone alone
    /// staggers, see [`Phase::following`]).
    Following { turn: Option<W>, news: Option<N> },
    /// The head changed and we are not next in line: look once `until` passes, or when
    /// our turn's watch fires. Kept as a phase: the news is spent, so a wait dropped
    /// during the stagger resumes it, not waits anew.
    Staggering { until: Instant, turn: Option<W> },
    /// Leading: the watch on our own node (`None` once it fired without ending the
    /// claim: the next renew sets it again) and the claim's `multi` check on its way
    /// (`None` once it answered, or a renew proved the claim through the ensemble's
    /// leader).
    Leading {
        own: Option<W>,
        confirming: Option<C>,
    },
}

/// How a campaign begins: the proof of our node beside a read of the reservation,
/// without a listing (the head, our only predecessor, went; [`after_shortcut`]
/// decides), or a full round (our node, then the listing: [`after_list`] decides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Round {
    Shortcut,
    Full,
}

/// What a full round's claim makes of its proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claimed<P> {
    /// Proven: we lead on this proof.
    Lead(P),
    /// Our node is not ours (gone, another session's, written): a new session.
    StartOver,
}

/// What the next in line's one-round-trip claim makes of its answers: the reservation
/// (`reserved`: the node it names) and the proof of our node (`proof`: the proof, or
/// `None` when it failed). `Ok(Some(_))`: lead on that proof; `Ok(None)`: a full round
/// decides. A reservation for another node wins over the proof, even an error's.
pub(super) fn after_shortcut<N: PartialEq, P, E>(
    reserved: Option<&N>,
    ours: &N,
    proof: Result<Option<P>, E>,
) -> Result<Option<P>, E> {
    if queue::reserved_for_another(reserved, ours) {
        return Ok(None);
    }
    proof
}

/// What a full round's claim makes of its proof (`None`: it failed): lead, or start
/// over with a new session (the lowest node must be ours *and* this session's:
/// CURATOR-1211).
pub(super) fn after_claim<P>(proof: Option<P>) -> Claimed<P> {
    match proof {
        Some(p) => Claimed::Lead(p),
        None => Claimed::StartOver,
    }
}

/// Whether a node, as the stat read behind our proof found it, proves our claim:
/// owned by this very session and never written (a node deleted and created again
/// under our name by another client is not ours, and has version 0 too).
pub(super) fn proves(owner: Option<i64>, version: Option<i32>, session: i64) -> bool {
    rules::seen_node(owner, session).still_ours() && version == Some(rules::OWN_VERSION)
}

/// Known-wrong rules, each a switch the simulator turns on to show that it catches the
/// rule broken (`tests/suite/elector_sim.rs`); every one is off in the product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flaws {
    /// The next in line claims as soon as a listing shows it there, without waiting
    /// for the head's node to go.
    pub next_in_line_claims: bool,
    /// The next in line whose head was gone before its watch was set stays queued,
    /// watching nothing, until its retry interval ends (rather than looking at once).
    pub head_gone_queues: bool,
    /// A follower further back whose head was gone before its watch was set waits for
    /// its turn's watch alone (rather than staggering, then looking).
    pub head_gone_unseen: bool,
}

/// What one listing of the queue (and what went beside it) told a campaign.
#[derive(Clone, Copy, Debug)]
pub(super) struct Listed<'q, N> {
    /// The latch nodes, lowest sequence first.
    pub(super) queue: &'q [Entry<N>],
    pub(super) ours: &'q N,
    /// The node the switchover's reservation names.
    pub(super) reserved: Option<&'q N>,
    /// The node the announcement names, and its mzxid.
    pub(super) announced: Option<(&'q N, i64)>,
    /// This round may give our place up to a switchover's named node (the first
    /// round of a campaign).
    pub(super) may_requeue: bool,
    /// We are a reader (`--mode shared`).
    pub(super) reader: bool,
    /// Off in the product.
    pub(super) flaws: Flaws,
}

/// What a campaign sends after its listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Next<N> {
    /// Our node is gone (the session expired meanwhile): forget the session.
    StartOver,
    /// Give our place up to the switchover's named node: delete ours, list again.
    Requeue,
    /// We are first: the claim's proof. `spend`: the reservation names our node
    /// (delete it once we lead).
    Claim { spend: bool },
    /// Behind another: watch what [`Follow`] says.
    Follow(Follow<N>),
}

/// What a follower reads and watches, by node name (the announcement's path is the
/// backend's to name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Follow<N> {
    /// The head's data, with a watch, and, when it is not the head, the node we wait
    /// for (`predecessor`), and then the announcement too: news once it changed since
    /// the listing read it at `seen` (its mzxid; `None`: not there), as a look at once.
    Head {
        head: N,
        predecessor: Option<N>,
        seen: Option<i64>,
    },
    /// Behind a next in line that announces its claims: the head read without a
    /// watch, and watches on the announcement (changed since `seen`), our predecessor
    /// and the next in line's node (`next`; `None`: it is our predecessor).
    Announcement {
        head: N,
        predecessor: N,
        next: Option<N>,
        seen: Option<i64>,
    },
}

/// What a campaign does after one listing (see the invariants above); `announces`:
/// whether a node's candidate announces its claims (`rules::announces`).
pub(super) fn after_list<N: Clone + PartialEq>(
    listed: Listed<'_, N>,
    announces: impl Fn(&Entry<N>) -> bool,
) -> Next<N> {
    let Listed {
        queue,
        ours,
        reserved,
        announced,
        ..
    } = listed;
    let stand = queue::stand(queue, ours);
    if stand == Stand::Gone {
        return Next::StartOver;
    }
    if listed.may_requeue && queue::lets_pass(queue, ours, reserved) {
        return Next::Requeue;
    }
    let (turn, head) = match stand {
        Stand::Behind { turn, head } if head.is_some() || !listed.flaws.next_in_line_claims => {
            (turn, head)
        }
        _ => {
            return Next::Claim {
                spend: reserved == Some(ours),
            }
        }
    };
    // The node we wait for, and the head when that is another.
    let (head, predecessor) = match head {
        Some(h) => (h.name.clone(), Some(turn.name.clone())),
        None => (turn.name.clone(), None),
    };
    let seen = announced.map(|a| a.1);
    if listed.reader {
        // A reader watches the last writer's node ahead (its turn may come when that
        // goes), and the head and the announcement for news.
        return Next::Follow(Follow::Head {
            head,
            predecessor,
            seen,
        });
    }
    match queue::holder_news(queue, ours, announced.map(|a| a.0), announces) {
        HolderNews::Head => Next::Follow(Follow::Head {
            head,
            predecessor,
            seen,
        }),
        HolderNews::Announcement => {
            let next = queue[1].name.clone();
            let predecessor = predecessor.unwrap_or_else(|| next.clone());
            let next = (next != predecessor).then_some(next);
            Next::Follow(Follow::Announcement {
                head,
                predecessor,
                next,
                seen,
            })
        }
    }
}

/// How a renew proves the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Renew {
    /// The `multi` check and the stat behind it (our node's watch is set).
    Prove,
    /// The same, with a watch on our node set in the same round trip (it fired
    /// without ending the claim, or we never set it).
    ProveAndWatch,
}

/// How a wait goes on, by the phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WaitFor {
    /// Do not wait: campaign at once (no node).
    Now,
    /// Finish the stagger (see [`Phase::Staggering`]), then look.
    Stagger,
    /// Wait on what the phase watches, the session's state and the wait's end.
    Watches,
}

/// What a node's watch event was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NodeEvent {
    Deleted,
    /// Its data changed, it was created, or its session's state changed.
    Other,
}

/// What ended a follower's wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Woke {
    /// The watch on the node we wait for fired.
    Turn(NodeEvent),
    /// News of a new holder: `true` from the announcement or the next in line (the
    /// claim is made), `false` from the head's watch (the successor may not have
    /// claimed yet).
    News(bool),
    /// The session's state changed (expired, disconnected, reconnected).
    Session,
    /// The wait's time is over; `connected`: the session is connected now.
    Timeout { connected: bool },
}

/// What a wait makes of what ended it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// Look now (list again, and watch anew).
    Look,
    /// The head changed and we are not next in line: the phase is
    /// [`Phase::Staggering`].
    Stagger,
    /// Both watches stood and the session is connected (its pings are the
    /// keep-alive): the observation is current, no request needed.
    Quiet,
}

impl<W, N, C> Phase<W, N, C> {
    /// A campaign begins: every follower's watch goes (the round watches anew), and
    /// so does a stagger; a deleted head that was our only predecessor makes the
    /// round a shortcut.
    pub(super) fn begin(self) -> (Self, Round) {
        match self {
            Phase::Unqueued => (Phase::Unqueued, Round::Full),
            Phase::HeadGone => (Phase::Queued, Round::Shortcut),
            _ => (Phase::Queued, Round::Full),
        }
    }

    /// Our node was created (or found again): queued.
    pub(super) fn queued(self) -> Self {
        match self {
            Phase::Unqueued => Phase::Queued,
            other => other,
        }
    }

    /// After the watches of a [`Follow::Head`] without a predecessor: the head's
    /// watch, when the head was still there; when it was gone already, our only
    /// predecessor went between the listing and the watch, and we are first.
    pub(super) fn next_in_line(head: Option<W>, flaws: Flaws) -> Self {
        match head {
            Some(w) => Phase::NextInLine(w),
            None if flaws.head_gone_queues => Phase::Queued,
            None => Phase::HeadGone,
        }
    }

    /// After a follower's other watches: the one on the node we wait for, and the news.
    /// A head gone before its watch was set, while our turn's watch stands, is a head
    /// that changed: as when the head's watch fires ([`Phase::on_wake`]), the
    /// successor is let go first (`stagger` from `now`), then a look.
    pub(super) fn following(
        turn: Option<W>,
        news: Option<N>,
        now: Instant,
        stagger: impl FnOnce() -> Duration,
        flaws: Flaws,
    ) -> Self {
        match (turn, news) {
            (turn @ Some(_), None) if !flaws.head_gone_unseen => {
                let head_gone = Phase::Following { turn, news: None };
                head_gone.on_wake(Woke::News(false), now, stagger).0
            }
            (turn, news) => Phase::Following { turn, news },
        }
    }

    /// The claim is made: our node's watch and the claim's check on its way.
    pub(super) fn claimed(own: W, confirming: C) -> Self {
        Phase::Leading {
            own: Some(own),
            confirming: Some(confirming),
        }
    }

    /// Whether nothing about the holder or our turn can change unseen: every watch a
    /// follower needs is set.
    pub(super) fn watched(&self) -> bool {
        match self {
            Phase::NextInLine(_) => true,
            Phase::Following { turn, news } => turn.is_some() && news.is_some(),
            _ => false,
        }
    }

    /// A look (or a campaign) is next: a follower's watches go. A shortcut still owed
    /// and a claim stay.
    pub(super) fn looked(self) -> Self {
        match self {
            Phase::NextInLine(_) | Phase::Following { .. } | Phase::Staggering { .. } => {
                Phase::Queued
            }
            other => other,
        }
    }

    /// How a wait goes on.
    pub(super) fn wait(&self) -> WaitFor {
        match self {
            // No node; or our turn came, or may have (the node we wait for was gone
            // before its watch was set): nothing would wake a wait, look now.
            Phase::Unqueued | Phase::HeadGone | Phase::Following { turn: None, .. } => WaitFor::Now,
            Phase::Staggering { .. } => WaitFor::Stagger,
            _ => WaitFor::Watches,
        }
    }

    /// The watches a wait polls: our turn's (the head's for the next in line) and the
    /// news of a new holder.
    pub(super) fn watches_mut(&mut self) -> (Option<&mut W>, Option<&mut N>) {
        match self {
            Phase::NextInLine(w) => (Some(w), None),
            Phase::Following { turn, news } => (turn.as_mut(), news.as_mut()),
            _ => (None, None),
        }
    }

    /// What ended a wait, at `now`; `stagger`: how long the successor is let go first
    /// when the head changes.
    pub(super) fn on_wake(
        self,
        woke: Woke,
        now: Instant,
        stagger: impl FnOnce() -> Duration,
    ) -> (Self, Heard) {
        match (woke, self) {
            // Our only predecessor, the head, was deleted: first now.
            (Woke::Turn(NodeEvent::Deleted), Phase::NextInLine(_)) => {
                (Phase::HeadGone, Heard::Look)
            }
            // The head changed, and we are not next in line: let the successor go
            // first, unless our own turn comes.
            (Woke::News(false), Phase::Following { turn, .. }) => {
                let until = now + stagger();
                (Phase::Staggering { until, turn }, Heard::Stagger)
            }
            (Woke::Timeout { connected: true }, phase) if phase.watched() => (phase, Heard::Quiet),
            // A watch that fired is spent (the round sets them again); an announced
            // holder has claimed already; a session's change means look again.
            (_, phase) => (phase.looked(), Heard::Look),
        }
    }

    /// The stagger's end and our turn's watch, while staggering.
    pub(super) fn staggering_mut(&mut self) -> Option<(Instant, Option<&mut W>)> {
        match self {
            Phase::Staggering { until, turn } => Some((*until, turn.as_mut())),
            _ => None,
        }
    }

    /// How a renew proves the claim.
    pub(super) fn renewal(&self) -> Renew {
        match self {
            Phase::Leading { own: Some(_), .. } => Renew::Prove,
            _ => Renew::ProveAndWatch,
        }
    }

    /// A renew proved the claim through the ensemble's leader: that confirms it (the
    /// claim's check is no longer needed). `own`: the watch it set on our node.
    pub(super) fn renewed(self, own: Option<W>) -> Self {
        let kept = match self {
            Phase::Leading { own, .. } => own,
            _ => None,
        };
        Phase::Leading {
            own: own.or(kept),
            confirming: None,
        }
    }

    /// The leader's watch on its own node and the claim's check, while on their way.
    pub(super) fn claim_mut(&mut self) -> (Option<&mut W>, Option<&mut C>) {
        match self {
            Phase::Leading { own, confirming } => (own.as_mut(), confirming.as_mut()),
            _ => (None, None),
        }
    }

    /// An event on the leader's watch on its own node; `true`: the claim is lost.
    /// The watch is spent either way (the next renew sets it again).
    pub(super) fn on_own(self, event: OwnEvent) -> (Self, bool) {
        match self {
            Phase::Leading { confirming, .. } => {
                let phase = Phase::Leading {
                    own: None,
                    confirming,
                };
                (phase, rules::ends_claim(event))
            }
            other => (other, false),
        }
    }

    /// The claim's `multi` check answered (`ran`: the ensemble's leader ran it);
    /// `true`: the claim is lost.
    pub(super) fn on_confirmation(self, ran: bool) -> (Self, bool) {
        match self {
            Phase::Leading { own, .. } => {
                let phase = Phase::Leading {
                    own,
                    confirming: None,
                };
                (phase, !ran)
            }
            other => (other, false),
        }
    }
}

#[cfg(test)]
mod tests;
