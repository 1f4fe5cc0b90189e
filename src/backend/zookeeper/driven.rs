//! The ZooKeeper campaign's decision after its listing ([`super::core::after_list`])
//! behind plain values, for a driver other than the backend: the deterministic
//! simulator (`tests/sim`) campaigns through it against its model of a session store
//! (sessions with a server-side timeout, one ephemeral-sequential node per session),
//! under lost and late answers, restarts and drifting clocks, as it drives the
//! elector's machine. The decision is the backend's own: the same queue rules, the
//! same phase of the listing's outcome. So is a follower's wait ([`Follower`]): the
//! phase its watches make once armed, and what a fired watch makes of it.

use std::time::Duration;

use tokio::time::Instant;

use super::super::queue::{self, Entry};
pub use super::core::Flaws;
use super::core::{after_list, Follow, Heard, Listed, Next, NodeEvent, Phase, WaitFor, Woke};

/// One latch node, as a listing shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// Its sequence number.
    pub seq: u64,
    /// Its session: the node's name in the driver's model.
    pub session: u64,
    /// A shared candidate's (`--mode shared`).
    pub shared: bool,
}

/// What a campaign does with its listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Our node is gone (the session expired meanwhile): a new session.
    StartOver,
    /// Claim: we lead with our node's sequence number as the token.
    Claim { token: u64 },
    /// Behind another: the head holds (its sequence number); the follower watches
    /// the head's node (of session `watch`) and, further back, the node it waits for
    /// (of session `turn`; `None`: it is next in line).
    Follow {
        head: u64,
        watch: u64,
        turn: Option<u64>,
    },
}

/// What the candidate whose session is `ours` does with a listing of the latch nodes
/// (in any order): the backend's own decision after its full round, with no
/// reservation and no announcement beside the listing (every node announces its
/// claims), and `flaws` on.
pub fn campaign(listing: &[Node], ours: u64, reader: bool, flaws: Flaws) -> Decision {
    let entries = listing
        .iter()
        .map(|n| Entry {
            order: i64::try_from(n.seq).unwrap_or(i64::MAX),
            name: n.session,
            shared: n.shared,
        })
        .collect();
    let queue = queue::in_order(entries);
    let listed = Listed {
        queue: &queue,
        ours: &ours,
        reserved: None,
        announced: None,
        may_requeue: false,
        reader,
        flaws,
    };
    let seq_of = |session: u64| {
        listing
            .iter()
            .find(|n| n.session == session)
            .map_or(0, |n| n.seq)
    };
    match after_list(listed, |_| true) {
        Next::StartOver | Next::Requeue => Decision::StartOver,
        Next::Claim { .. } => Decision::Claim {
            token: seq_of(ours),
        },
        Next::Follow(Follow::Head {
            head, predecessor, ..
        }) => Decision::Follow {
            head: seq_of(head),
            watch: head,
            turn: predecessor,
        },
        Next::Follow(Follow::Announcement {
            head, predecessor, ..
        }) => Decision::Follow {
            head: seq_of(head),
            watch: head,
            turn: Some(predecessor),
        },
    }
}

/// A follower's wait, as the backend's core keeps it, over the watched nodes'
/// sessions: the next in line watches the head's node; a follower further back
/// watches the node it waits for (its turn) and the head's (the news of a new holder).
#[derive(Debug, PartialEq, Eq)]
pub struct Follower(Phase<u64, u64, ()>);

/// How a follower waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Look at once.
    Now,
    /// Look at this instant (the stagger's end), or at once when our turn's watch fires.
    Until(Instant),
    /// Wait for a watch to fire (or the retry interval to pass).
    Watches,
}

impl Follower {
    /// What the watches make once armed, at `now`: `head`, the head's session and
    /// whether its node stood when its watch was armed (a watch on a gone node never
    /// fires); `turn`, the same of the node we wait for (`None`: we are next in line);
    /// `stagger`: how long a follower further back lets the successor go first.
    pub fn armed(
        head: (u64, bool),
        turn: Option<(u64, bool)>,
        now: Instant,
        stagger: Duration,
        flaws: Flaws,
    ) -> Self {
        let stood = |(session, present): (u64, bool)| present.then_some(session);
        Follower(match turn {
            None => Phase::next_in_line(stood(head), flaws),
            Some(turn) => Phase::following(stood(turn), stood(head), now, || stagger, flaws),
        })
    }

    /// How the wait goes on.
    pub fn wait(&mut self) -> Wait {
        match self.0.wait() {
            WaitFor::Now => Wait::Now,
            WaitFor::Stagger => self
                .0
                .staggering_mut()
                .map_or(Wait::Now, |(until, _)| Wait::Until(until)),
            WaitFor::Watches => Wait::Watches,
        }
    }

    /// The node of `session` was deleted, at `now`: `Some(true)` to look now,
    /// `Some(false)` to wait on (the stagger it began, see [`Follower::wait`]), `None`
    /// when no standing watch of ours was on it.
    pub fn deleted(&mut self, session: u64, now: Instant, stagger: Duration) -> Option<bool> {
        let (turn, news) = match &mut self.0 {
            Phase::Staggering { turn, .. } => (turn.as_mut(), None),
            phase => phase.watches_mut(),
        };
        let woke = if turn.is_some_and(|t| *t == session) {
            Woke::Turn(NodeEvent::Deleted)
        } else if news.is_some_and(|n| *n == session) {
            Woke::News(false)
        } else {
            return None;
        };
        let phase = std::mem::take(&mut self.0);
        let (phase, heard) = phase.on_wake(woke, now, || stagger);
        self.0 = phase;
        Some(heard != Heard::Stagger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(seq: u64, session: u64) -> Node {
        Node {
            seq,
            session,
            shared: false,
        }
    }

    #[test]
    fn the_lowest_node_claims_and_the_others_follow_the_head() {
        let listing = [node(7, 30), node(5, 10), node(6, 20)];
        let none = Flaws::default();
        assert_eq!(
            campaign(&listing, 10, false, none),
            Decision::Claim { token: 5 }
        );
        let next = Decision::Follow {
            head: 5,
            watch: 10,
            turn: None,
        };
        assert_eq!(campaign(&listing, 20, false, none), next);
        let behind = Decision::Follow {
            head: 5,
            watch: 10,
            turn: Some(20),
        };
        assert_eq!(campaign(&listing, 30, false, none), behind);
        assert_eq!(campaign(&listing, 40, false, none), Decision::StartOver);
    }

    #[test]
    fn the_known_wrong_rule_claims_behind_the_head() {
        let listing = [node(5, 10), node(6, 20), node(7, 30)];
        let flawed = Flaws {
            next_in_line_claims: true,
            ..Flaws::default()
        };
        assert_eq!(
            campaign(&listing, 20, false, flawed),
            Decision::Claim { token: 6 }
        );
        assert!(matches!(
            campaign(&listing, 30, false, flawed),
            Decision::Follow { head: 5, .. }
        ));
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_next_in_line_waits_on_the_head_or_looks_at_once() {
        let (now, off) = (Instant::now(), Flaws::default());
        let mut next = Follower::armed((10, true), None, now, MS, off);
        assert_eq!(next.wait(), Wait::Watches);
        assert_eq!(next.deleted(30, now, MS), None, "not watched");
        assert_eq!(next.deleted(10, now, MS), Some(true));
        assert_eq!(next.wait(), Wait::Now);
        let mut gone = Follower::armed((10, false), None, now, MS, off);
        assert_eq!(gone.wait(), Wait::Now, "the head went before its watch");
        let queues = Flaws {
            head_gone_queues: true,
            ..off
        };
        let mut flawed = Follower::armed((10, false), None, now, MS, queues);
        assert_eq!(flawed.wait(), Wait::Watches, "a wait on nothing");
    }

    #[test]
    fn a_follower_further_back_staggers_on_the_heads_delete() {
        let (now, off) = (Instant::now(), Flaws::default());
        let mut behind = Follower::armed((10, true), Some((20, true)), now, MS, off);
        assert_eq!(behind.wait(), Wait::Watches);
        assert_eq!(behind.deleted(10, now, MS), Some(false));
        assert_eq!(behind.wait(), Wait::Until(now + MS));
        assert_eq!(behind.deleted(20, now, MS), Some(true), "our turn");
        let mut gone = Follower::armed((10, false), Some((20, true)), now, MS, off);
        assert_eq!(gone.wait(), Wait::Until(now + MS), "the head's news kept");
        let mut both = Follower::armed((10, false), Some((20, false)), now, MS, off);
        assert_eq!(both.wait(), Wait::Now);
        let unseen = Flaws {
            head_gone_unseen: true,
            ..off
        };
        let mut flawed = Follower::armed((10, false), Some((20, true)), now, MS, unseen);
        assert_eq!(flawed.wait(), Wait::Watches, "the head's news lost");
    }
}
