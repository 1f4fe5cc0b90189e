//! The etcd campaign round ([`super::round::Round`], begun by
//! [`super::core::Phase::begin`]) behind plain values, for a driver other than the
//! backend: the deterministic simulator (`tests/sim`) campaigns through it against its
//! model of an etcd store (leases with a server-side ttl that only a keep-alive
//! extends, one key per lease in the queue), under lost and late answers, restarts and
//! drifting clocks, as it drives the elector's machine. The decisions are the
//! backend's own: which round refreshes its lease beside the read, what the read lets
//! the round do, and that a claim waits for a keep-alive answered in its round.

use super::super::queue::{self, Entry};
use super::core::{Phase, Watches};
pub use super::round::Flaws;
use super::round::{Found, Next};

/// One key of the queue, as a read shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// Its create revision.
    pub seq: u64,
    /// Its lease: the key's name in the driver's model.
    pub lease: u64,
    /// A shared candidate's (`--mode shared`).
    pub shared: bool,
}

/// What a round does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Our key is gone, or our lease with it: a new lease.
    StartOver,
    /// We are first, and no keep-alive was answered in this round: send one, and
    /// decide on its answer ([`Round::after_refresh`]).
    Refresh,
    /// Claim: we lead with our key's create revision as the token.
    Claim { token: u64 },
    /// Behind another: the head holds (its create revision); `next_in_line`: our
    /// predecessor leads (the next round refreshes beside its read).
    Follow { head: u64, next_in_line: bool },
}

/// One campaign round, as the backend's phase begins it.
#[derive(Clone, Debug)]
pub struct Round {
    round: super::round::Round<()>,
    /// Our key's create revision, from the read.
    token: u64,
}

impl Round {
    /// The round of a candidate that is the next in line (`next_in_line`: its last
    /// round followed the leader as its predecessor) or not, with `flaws` on.
    pub fn new(next_in_line: bool, flaws: Flaws) -> Round {
        let phase = match next_in_line {
            true => Phase::NextInLine {
                watches: Watches {
                    predecessor: (),
                    leader: None,
                    announcement: None,
                    next: None,
                },
                own: (),
            },
            false => Phase::Queued,
        };
        let (_, round) = phase.begin();
        Round {
            round: round.flawed(flaws),
            token: 0,
        }
    }

    /// Whether a keep-alive goes beside the read (and is awaited with it).
    pub fn refresh_beside_read(&self) -> bool {
        self.round.refresh_beside_read
    }

    /// Whether a keep-alive was answered in this round.
    pub fn has_refresh(&self) -> bool {
        self.round.has_refresh()
    }

    /// A keep-alive of this round answered: the lease is `alive` or not.
    pub fn refreshed(&mut self, alive: bool) {
        self.round.refreshed(alive);
    }

    /// What the candidate whose lease is `ours` does with a read of the queue (in any
    /// order); every key announces its claims, and no switchover reserves.
    pub fn after_read(&mut self, listing: &[Node], ours: u64, reader: bool) -> Decision {
        let entries = listing
            .iter()
            .map(|n| Entry {
                order: i64::try_from(n.seq).unwrap_or(i64::MAX),
                name: n.lease,
                shared: n.shared || (n.lease == ours && reader),
            })
            .collect();
        let entries = queue::in_order(entries);
        let found = Found {
            ours: entries.iter().any(|e| e.name == ours),
            lets_pass: false,
            stand: queue::stand(&entries, &ours),
            news: queue::holder_news(&entries, &ours, None, |_| true),
            next: entries.get(1).map(|e| e.name),
        };
        let seq_of = |lease: u64| listing.iter().find(|n| n.lease == lease).map(|n| n.seq);
        self.token = seq_of(ours).unwrap_or(0);
        let head = entries.first().and_then(|e| seq_of(e.name)).unwrap_or(0);
        self.decision(self.round.after_read(found), head)
    }

    /// What a round that found itself first does once its keep-alive is answered.
    pub fn after_refresh(&self) -> Decision {
        self.decision(self.round.after_refresh(), 0)
    }

    fn decision(&self, next: Next<u64>, head: u64) -> Decision {
        match next {
            Next::StartOver { .. } | Next::Requeue => Decision::StartOver,
            Next::RefreshThenClaim => Decision::Refresh,
            Next::Claim => Decision::Claim { token: self.token },
            Next::Follow(f) => Decision::Follow {
                head,
                next_in_line: f.own,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(seq: u64, lease: u64) -> Node {
        Node {
            seq,
            lease,
            shared: false,
        }
    }

    #[test]
    fn the_first_key_claims_only_after_a_keep_alive_of_its_round() {
        let listing = [node(7, 30), node(5, 10), node(6, 20)];
        let mut round = Round::new(false, Flaws::default());
        assert!(!round.refresh_beside_read());
        assert_eq!(round.after_read(&listing, 10, false), Decision::Refresh);
        round.refreshed(true);
        assert_eq!(round.after_refresh(), Decision::Claim { token: 5 });
        let mut dead = Round::new(false, Flaws::default());
        assert_eq!(dead.after_read(&listing, 10, false), Decision::Refresh);
        dead.refreshed(false);
        assert_eq!(dead.after_refresh(), Decision::StartOver);
        let mut gone = Round::new(false, Flaws::default());
        assert_eq!(gone.after_read(&listing, 40, false), Decision::StartOver);
    }

    #[test]
    fn the_next_in_line_refreshes_beside_its_read_and_followers_follow_the_head() {
        let listing = [node(5, 10), node(6, 20), node(7, 30)];
        let mut second = Round::new(false, Flaws::default());
        let next = Decision::Follow {
            head: 5,
            next_in_line: true,
        };
        assert_eq!(second.after_read(&listing, 20, false), next);
        let mut third = Round::new(false, Flaws::default());
        let behind = Decision::Follow {
            head: 5,
            next_in_line: false,
        };
        assert_eq!(third.after_read(&listing, 30, false), behind);
        let mut round = Round::new(true, Flaws::default());
        assert!(round.refresh_beside_read());
        round.refreshed(true);
        assert_eq!(
            round.after_read(&listing[1..], 20, false),
            Decision::Claim { token: 6 }
        );
    }

    #[test]
    fn the_known_wrong_rule_claims_behind_the_leader() {
        let listing = [node(5, 10), node(6, 20), node(7, 30)];
        let flawed = Flaws {
            next_in_line_claims: true,
        };
        let mut round = Round::new(false, flawed);
        assert_eq!(round.after_read(&listing, 20, false), Decision::Refresh);
        round.refreshed(true);
        assert_eq!(round.after_refresh(), Decision::Claim { token: 6 });
        let mut third = Round::new(false, flawed);
        let behind = Decision::Follow {
            head: 5,
            next_in_line: false,
        };
        assert_eq!(third.after_read(&listing, 30, false), behind);
    }
}
