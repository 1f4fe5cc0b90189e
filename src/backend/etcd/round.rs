//! One etcd campaign round as plain decisions: what goes beside the read of the
//! queue, what the read (and the refresh of the lease) lets the round do next, and
//! what a follower watches. The round begins in [`super::core::Phase::begin`]; the
//! backend sends what the round asks for and hands it each answer.
//!
//! Invariants kept here:
//! - **refresh before claim**: a round claims only on a keep-alive answered alive in
//!   that round ([`Round::refreshed`]): the next in line sends it beside the read of
//!   the queue ([`Round::refresh_beside_read`]), any other candidate after the read
//!   found it first ([`Next::RefreshThenClaim`], then [`Round::after_refresh`]). A
//!   round starts with no answer, whatever the phase it starts from;
//! - a candidate whose key is gone, or whose lease the refresh found dead, starts
//!   over with a new lease and never claims in that round;
//! - a switchover's reservation that asks us to let the named key pass is obeyed
//!   before any claim.

use super::super::queue::{Entry, HolderNews, Stand};

/// Known-wrong rules, each a switch the simulator turns on to show that it catches the
/// rule broken (`tests/suite/elector_sim.rs`); every one is off in the product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flaws {
    /// The next in line claims (after its refresh) as soon as a read shows it there,
    /// without waiting for the leader's key to go.
    pub next_in_line_claims: bool,
}

/// One campaign round: what goes beside its read of the queue, and what the refresh
/// of the lease answered in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Round<W> {
    /// The keep-alive that refreshes the lease before a claim goes out with the read
    /// (the next in line: it is likely first now).
    pub(super) refresh_beside_read: bool,
    /// The next in line's watch on its own key, which becomes the leader's.
    pub(super) own: Option<W>,
    /// The answer of the keep-alive sent in this round (alive or not); `None`: none
    /// answered yet.
    refreshed: Option<bool>,
    /// Off in the product.
    flaws: Flaws,
}

/// What one read of the queue told a campaign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Found<'q, N> {
    /// Our key is still there.
    pub(super) ours: bool,
    /// A switchover's reservation names a live key queued behind ours
    /// (`queue::lets_pass`; looked at only when it may ask us to requeue).
    pub(super) lets_pass: bool,
    pub(super) stand: Stand<'q, N>,
    /// How we hear of a new holder, should we follow (`queue::holder_news`).
    pub(super) news: HolderNews,
    /// The second key of the queue: the next in line.
    pub(super) next: Option<N>,
}

/// What a campaign sends after its read of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next<N> {
    /// Our key is gone, or our lease with it: forget the lease, report the leader
    /// read when `show_leader`, and the next campaign starts over.
    StartOver { show_leader: bool },
    /// Give our place up to the switchover's named key: delete ours, queue again.
    Requeue,
    /// We are first, and the lease was not refreshed in this round: a keep-alive,
    /// and claim on its answer ([`Round::after_refresh`]).
    RefreshThenClaim,
    /// We are first and the lease was refreshed in this round: claim.
    Claim,
    /// Behind another: watch what [`Follow`] says.
    Follow(Follow<N>),
}

/// What a follower watches (see `core::Watches`), by name; the announcement's key and
/// our own are the backend's to name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Follow<N> {
    pub(super) predecessor: N,
    pub(super) leader: Option<N>,
    pub(super) announcement: bool,
    pub(super) next: Option<N>,
    /// Our own key: the next in line only.
    pub(super) own: bool,
}

impl<W> Round<W> {
    /// The round of a candidate behind others, or with no place yet: nothing beside
    /// the read.
    pub(super) fn behind() -> Round<W> {
        Round {
            refresh_beside_read: false,
            own: None,
            refreshed: None,
            flaws: Flaws::default(),
        }
    }

    /// The round of the next in line (`own`: its watch on its own key): the
    /// refresh goes beside the read.
    pub(super) fn next_in_line(own: W) -> Round<W> {
        Round {
            refresh_beside_read: true,
            own: Some(own),
            refreshed: None,
            flaws: Flaws::default(),
        }
    }

    /// The round with `flaws` on (the simulator's; the backend's rounds have none).
    pub(super) fn flawed(self, flaws: Flaws) -> Round<W> {
        Round { flaws, ..self }
    }

    /// Whether a keep-alive was answered in this round.
    pub(super) fn has_refresh(&self) -> bool {
        self.refreshed.is_some()
    }

    /// The keep-alive sent in this round (beside the read, or after it) is answered:
    /// the lease is `alive` or not.
    pub(super) fn refreshed(&mut self, alive: bool) {
        self.refreshed = Some(alive);
    }

    /// What the round does after one read of the queue (see the invariants above).
    pub(super) fn after_read<N: Copy + PartialEq>(&self, found: Found<'_, N>) -> Next<N> {
        if !found.ours {
            // Our lease expired (the store was unreachable for a ttl, say) and took our
            // key with it: queueing behind others with a vanished key would wait forever.
            return Next::StartOver { show_leader: true };
        }
        if found.lets_pass {
            return Next::Requeue;
        }
        match found.stand {
            Stand::First => self.after_refresh(),
            Stand::Behind { head: None, .. } if self.flaws.next_in_line_claims => {
                self.after_refresh()
            }
            Stand::Gone => Next::StartOver { show_leader: false },
            Stand::Behind { turn, head } => {
                Next::Follow(follow(turn, head, found.news, found.next))
            }
        }
    }

    /// What a round that found itself first does, by the refresh of this round:
    /// claim on an answer that the lease is alive, start over on one that it is
    /// gone, and refresh first while none came.
    pub(super) fn after_refresh<N>(&self) -> Next<N> {
        match self.refreshed {
            Some(true) => Next::Claim,
            Some(false) => Next::StartOver { show_leader: false },
            None => Next::RefreshThenClaim,
        }
    }
}

/// What a follower waiting for `turn` watches (`head`: the leader, when it is not
/// `turn`), as `news` says.
fn follow<N: Copy + PartialEq>(
    turn: &Entry<N>,
    head: Option<&Entry<N>>,
    news: HolderNews,
    next: Option<N>,
) -> Follow<N> {
    let (predecessor, leader) = (turn.name, head.map(|h| h.name));
    // Next in line (our predecessor leads): our own key too.
    let own = leader.is_none();
    match news {
        // Behind the next in line, the announcement too: once it names the leader,
        // we may leave the leader's key alone.
        HolderNews::Head => Follow {
            predecessor,
            leader,
            announcement: leader.is_some(),
            next: None,
            own,
        },
        HolderNews::Announcement => Follow {
            predecessor,
            leader: None,
            announcement: true,
            next: next.filter(|n| *n != predecessor),
            own,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type R = Round<&'static str>;

    fn entry(name: &'static str, order: i64) -> Entry<&'static str> {
        Entry {
            order,
            name,
            shared: false,
        }
    }

    fn found<'a>(stand: Stand<'a, &'static str>) -> Found<'a, &'static str> {
        Found {
            ours: true,
            lets_pass: false,
            stand,
            news: HolderNews::Head,
            next: None,
        }
    }

    /// A round answered `alive` by its keep-alive.
    fn refreshed(mut round: R, alive: bool) -> R {
        round.refreshed(alive);
        round
    }

    #[test]
    fn first_but_not_next_in_line_refreshes_after_the_read_then_claims() {
        let round = R::behind();
        assert!(!round.refresh_beside_read);
        assert_eq!(round.own, None);
        // First, and the lease not refreshed in this round: never a claim straight
        // away.
        let next = round.after_read(found(Stand::First));
        assert_eq!(next, Next::RefreshThenClaim, "a claim without the refresh");
        assert_eq!(round.after_refresh::<&str>(), Next::RefreshThenClaim);
        let alive = refreshed(R::behind(), true);
        assert_eq!(alive.after_refresh::<&str>(), Next::Claim);
        let dead = refreshed(R::behind(), false);
        let over = Next::StartOver { show_leader: false };
        assert_eq!(dead.after_refresh::<&str>(), over);
        assert_eq!(dead.after_read(found(Stand::First)), over);
    }

    #[test]
    fn the_next_in_line_refreshes_beside_the_read_then_claims() {
        let round = R::next_in_line("own");
        assert!(round.refresh_beside_read, "no keep-alive beside the read");
        assert_eq!(round.own, Some("own"));
        // Its read answered before the keep-alive beside it: no claim yet.
        let early = round.after_read(found(Stand::First));
        assert_eq!(early, Next::RefreshThenClaim, "a claim without the refresh");
        let alive = refreshed(R::next_in_line("own"), true);
        assert_eq!(alive.after_read(found(Stand::First)), Next::Claim);
        // The keep-alive beside the read found the lease gone: no claim.
        let dead = refreshed(R::next_in_line("own"), false);
        let over = Next::StartOver { show_leader: false };
        assert_eq!(dead.after_read(found(Stand::First)), over);
    }

    #[test]
    fn a_vanished_key_starts_over_before_anything_else() {
        let gone = Found {
            ours: false,
            lets_pass: true,
            ..found(Stand::First)
        };
        let round = refreshed(R::behind(), true);
        assert_eq!(
            round.after_read(gone),
            Next::StartOver { show_leader: true }
        );
        let missing = round.after_read(found(Stand::Gone));
        assert_eq!(missing, Next::StartOver { show_leader: false });
    }

    #[test]
    fn a_reservation_for_a_key_behind_ours_requeues_before_any_claim() {
        let reserved = Found {
            lets_pass: true,
            ..found(Stand::First)
        };
        let round = refreshed(R::next_in_line("own"), true);
        assert_eq!(round.after_read(reserved), Next::Requeue);
        let leader = entry("a", 1);
        let behind = Found {
            lets_pass: true,
            ..found(Stand::Behind {
                turn: &leader,
                head: None,
            })
        };
        assert_eq!(R::behind().after_read(behind), Next::Requeue);
    }

    #[test]
    fn the_next_in_line_watches_the_leader_and_its_own_key() {
        let leader = entry("a", 1);
        let stand = Stand::Behind {
            turn: &leader,
            head: None,
        };
        let expected = Next::Follow(Follow {
            predecessor: "a",
            leader: None,
            announcement: false,
            next: None,
            own: true,
        });
        assert_eq!(R::behind().after_read(found(stand)), expected);
        // Refreshed beside the read, but the leader is still there: follow.
        let round = refreshed(R::next_in_line("own"), true);
        assert_eq!(round.after_read(found(stand)), expected);
    }

    #[test]
    fn a_follower_further_back_watches_the_leader_and_the_announcement() {
        let (leader, pred) = (entry("a", 1), entry("b", 2));
        let stand = Stand::Behind {
            turn: &pred,
            head: Some(&leader),
        };
        let expected = Follow {
            predecessor: "b",
            leader: Some("a"),
            announcement: true,
            next: None,
            own: false,
        };
        let next = R::behind().after_read(found(stand));
        assert_eq!(next, Next::Follow(expected));
    }

    #[test]
    fn behind_an_announcing_next_in_line_the_announcement_replaces_the_leader() {
        let (leader, pred) = (entry("a", 1), entry("c", 3));
        let stand = Stand::Behind {
            turn: &pred,
            head: Some(&leader),
        };
        let announced = |next| Found {
            news: HolderNews::Announcement,
            next,
            ..found(stand)
        };
        let expected = |next| {
            Next::Follow(Follow {
                predecessor: "c",
                leader: None,
                announcement: true,
                next,
                own: false,
            })
        };
        let round = R::behind();
        assert_eq!(round.after_read(announced(Some("b"))), expected(Some("b")));
        // The next in line is our predecessor: one watch serves both.
        assert_eq!(round.after_read(announced(Some("c"))), expected(None));
    }
}
