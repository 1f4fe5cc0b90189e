//! The ZooKeeper campaign's decision after its listing ([`super::core::after_list`])
//! behind plain values, for a driver other than the backend: the deterministic
//! simulator (`tests/sim`) campaigns through it against its model of a session store
//! (sessions with a server-side timeout, one ephemeral-sequential node per session),
//! under lost and late answers, restarts and drifting clocks, as it drives the
//! elector's machine. The decision is the backend's own: the same queue rules, the
//! same phase of the listing's outcome.

use super::super::queue::{self, Entry};
pub use super::core::Flaws;
use super::core::{after_list, Follow, Listed, Next};

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
    /// Behind another: the head holds (its sequence number).
    Follow { head: u64 },
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
        Next::Follow(Follow::Head { head, .. } | Follow::Announcement { head, .. }) => {
            Decision::Follow { head: seq_of(head) }
        }
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
        assert_eq!(
            campaign(&listing, 20, false, none),
            Decision::Follow { head: 5 }
        );
        assert_eq!(
            campaign(&listing, 30, false, none),
            Decision::Follow { head: 5 }
        );
        assert_eq!(campaign(&listing, 40, false, none), Decision::StartOver);
    }

    #[test]
    fn the_known_wrong_rule_claims_behind_the_head() {
        let listing = [node(5, 10), node(6, 20), node(7, 30)];
        let flawed = Flaws {
            next_in_line_claims: true,
        };
        assert_eq!(
            campaign(&listing, 20, false, flawed),
            Decision::Claim { token: 6 }
        );
        assert_eq!(
            campaign(&listing, 30, false, flawed),
            Decision::Follow { head: 5 }
        );
    }
}
