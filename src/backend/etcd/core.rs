//! The etcd campaign as a state machine: one explicit [`Phase`] (where this candidate
//! stands in the queue, and what it watches), moved on by the store's answers, and the
//! decisions taken from it: what a campaign sends beside its read of the queue
//! ([`Phase::begin`] -> [`Round`]), what it sends after that read ([`after_read`] ->
//! [`Next`]), and how a wait goes on ([`Phase::wait`] -> [`WaitFor`],
//! [`Phase::on_watch`] -> [`Heard`]). No I/O and no clock: `now` is an argument, and
//! the watches are opaque values (`W`: the backend's watch streams), so every case can
//! be driven by a plain test. The backend ([`super::EtcdBackend`]) does the I/O (lease
//! grants and keep-alives, the read of the queue, puts, deletes, watches) and asks this
//! core what to do with each answer.
//!
//! Invariants kept here:
//! - **refresh before claim**: a candidate claims only on a keep-alive answered after
//!   its campaign began: the next in line sends it beside the read of the queue
//!   ([`Round::refresh_beside_read`]), any other candidate after the read found it
//!   first ([`Next::RefreshThenClaim`], then [`after_refresh`]);
//! - a candidate whose key is gone, or whose lease the refresh found dead, starts
//!   over with a new lease and never claims in that round;
//! - a switchover's reservation that asks us to let the named key pass is obeyed
//!   before any claim;
//! - a follower looks again at once on news of its predecessor, the announcement or
//!   the next in line, and only after a stagger when the leader it does not wait for
//!   goes.

use std::time::Duration;

use tokio::time::Instant;

use super::super::queue::{Entry, HolderNews, Stand};

/// A follower's watches between campaigns: the key just ahead of ours, and the news
/// of a new holder (`queue::HolderNews`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Watches<W> {
    pub(super) predecessor: W,
    /// The leader's key, unless it is our predecessor (its delete: a stagger, then a
    /// look).
    pub(super) leader: Option<W>,
    /// The announcement, and the next in line's key: any event means look now.
    pub(super) announcement: Option<W>,
    pub(super) next: Option<W>,
}

/// Where this candidate stands in the queue, and what it watches.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) enum Phase<W> {
    /// No lease (none granted yet, or it expired, or it was revoked): the next
    /// campaign grants one, a wait ends at once.
    #[default]
    Unqueued,
    /// A lease (and maybe a key), nothing watched: after an error, during a
    /// campaign, or while leaving. A wait keeps the lease alive and polls.
    Queued,
    /// Behind another, not the next in line.
    Following(Watches<W>),
    /// The next in line (our predecessor leads): besides its predecessor, it watches
    /// its own key, so the claim that follows the leader's release needs no watch of
    /// its own (it is the leader's watch from then on).
    NextInLine { watches: Watches<W>, own: W },
    /// The leader's key went and it was not our predecessor: look once `until`
    /// passes, or when our predecessor's watch fires. Kept as a phase: the delete is
    /// consumed, so a wait dropped during the stagger resumes it, not waits anew.
    /// `watches`: `None` once the connection that carried them is gone.
    Staggering {
        until: Instant,
        watches: Option<Watches<W>>,
    },
    /// Leading: the watch on our own key from the read that made us leader; `None`
    /// when it is not open (broken, compacted): the next renew reads the key and
    /// watches it again.
    Leading { own: Option<W> },
}

/// What a campaign sends beside its read of the queue.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Round<W> {
    /// The keep-alive that refreshes the lease before a claim goes out with the read
    /// (the next in line: it is likely first now).
    pub(super) refresh_beside_read: bool,
    /// The next in line's watch on its own key, which becomes the leader's.
    pub(super) own: Option<W>,
}

/// What one read of the queue (and what went beside it) told a campaign.
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
    /// The answer of the keep-alive sent beside the read (alive or not); `None`: none
    /// was sent.
    pub(super) refreshed: Option<bool>,
}

/// What a campaign sends after its read of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next<N> {
    /// Our key is gone, or our lease with it: forget the lease, report the leader
    /// read when `show_leader`, and the next campaign starts over.
    StartOver { show_leader: bool },
    /// Give our place up to the switchover's named key: delete ours, queue again.
    Requeue,
    /// We are first, and the lease was not refreshed since the campaign began: a
    /// keep-alive, and claim on its answer ([`after_refresh`]).
    RefreshThenClaim,
    /// We are first and the lease was refreshed beside the read: claim.
    Claim,
    /// Behind another: watch what [`Follow`] says.
    Follow(Follow<N>),
}

/// What a follower watches (see [`Watches`]), by name; the announcement's key and our
/// own are the backend's to name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Follow<N> {
    pub(super) predecessor: N,
    pub(super) leader: Option<N>,
    pub(super) announcement: bool,
    pub(super) next: Option<N>,
    /// Our own key: the next in line only.
    pub(super) own: bool,
}

/// What a campaign does after one read of the queue (see the invariants above).
pub(super) fn after_read<N: Copy + PartialEq>(found: Found<'_, N>) -> Next<N> {
    if !found.ours {
        // Our lease expired (the store was unreachable for a ttl, say) and took our
        // key with it: queueing behind others with a vanished key would wait forever.
        return Next::StartOver { show_leader: true };
    }
    if found.lets_pass {
        return Next::Requeue;
    }
    match found.stand {
        Stand::First => match found.refreshed {
            Some(alive) => after_refresh(alive),
            None => Next::RefreshThenClaim,
        },
        Stand::Gone => Next::StartOver { show_leader: false },
        Stand::Behind { turn, head } => Next::Follow(follow(turn, head, found.news, found.next)),
    }
}

/// What a candidate that is first does once the keep-alive that refreshes its lease
/// is answered: claim, unless the lease is gone.
pub(super) fn after_refresh<N>(alive: bool) -> Next<N> {
    match alive {
        true => Next::Claim,
        false => Next::StartOver { show_leader: false },
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

/// How a wait goes on, by the phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WaitFor {
    /// Do not wait: campaign at once (no lease).
    Now,
    /// Finish the stagger (see [`Phase::Staggering`]), then look.
    Stagger,
    /// Wait on the follower's watches, keeping the lease alive.
    Watches,
    /// Nothing to watch: keep the lease alive, and look when the wait is over.
    Poll,
}

/// Which of a follower's watches an answer came on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    Predecessor,
    Leader,
    Announcement,
    Next,
}

/// What one answer on a watch says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WatchNews {
    /// The watch ended: broken with its connection, cancelled or compacted.
    Ended,
    /// Events (`any`: at least one), among them a delete or not.
    Events { any: bool, delete: bool },
}

/// What a follower's wait makes of an answer on its watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// Look now (read the queue again, and watch anew).
    Look,
    /// The leader (not our predecessor) went: the phase is [`Phase::Staggering`].
    Stagger,
    /// Nothing that moves us: the store is alive, wait on.
    Nothing,
}

/// What one answer on the leader's watch on its own key says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OwnNews {
    /// The watch ended: broken with its connection, cancelled or compacted.
    Ended,
    /// Events; `taken`: one of them says the key is no longer ours
    /// (`rules::seen_in_event`).
    Events { taken: bool },
}

impl<W> Phase<W> {
    /// A campaign begins: what goes beside its read. Every watch but the next in
    /// line's own goes (the read watches anew), and so does a stagger.
    pub(super) fn begin(self) -> (Phase<W>, Round<W>) {
        let quiet = Round {
            refresh_beside_read: false,
            own: None,
        };
        match self {
            Phase::Unqueued => (Phase::Unqueued, quiet),
            Phase::NextInLine { own, .. } => {
                let round = Round {
                    refresh_beside_read: true,
                    own: Some(own),
                };
                (Phase::Queued, round)
            }
            _ => (Phase::Queued, quiet),
        }
    }

    /// A lease was granted: queued (and nothing else changes).
    pub(super) fn queued(self) -> Phase<W> {
        match self {
            Phase::Unqueued => Phase::Queued,
            other => other,
        }
    }

    /// A keep-alive was answered: a lease that is gone took our key (and our place)
    /// with it.
    pub(super) fn kept_alive(self, alive: bool) -> Phase<W> {
        match alive {
            true => self,
            false => Phase::Unqueued,
        }
    }

    /// The follower's watches were opened after a read: `own`, the next in line's.
    /// Without a lease (the keep-alive beside the read found it gone) there is nothing
    /// to follow with: the next wait ends at once, and the campaign after it starts
    /// over.
    pub(super) fn follow(self, watches: Watches<W>, own: Option<W>) -> Phase<W> {
        match (self, own) {
            (Phase::Unqueued, _) => Phase::Unqueued,
            (_, Some(own)) => Phase::NextInLine { watches, own },
            (_, None) => Phase::Following(watches),
        }
    }

    /// The claim is made, with the watch on our own key.
    pub(super) fn claimed(own: W) -> Phase<W> {
        Phase::Leading { own: Some(own) }
    }

    /// The watch on our own key was opened again (by a renew that read it).
    pub(super) fn own_watched(self, own: W) -> Phase<W> {
        match self {
            Phase::Unqueued => Phase::Unqueued,
            _ => Phase::Leading { own: Some(own) },
        }
    }

    /// The connection went (an error, a timeout): its watches with it; the lease
    /// lives on in the cluster.
    pub(super) fn connection_lost(self) -> Phase<W> {
        match self {
            Phase::Following(_) | Phase::NextInLine { .. } => Phase::Queued,
            Phase::Staggering { until, .. } => Phase::Staggering {
                until,
                watches: None,
            },
            Phase::Leading { .. } => Phase::Leading { own: None },
            other => other,
        }
    }

    /// Leaving (a release or a switchover): nothing watched any more.
    pub(super) fn quiet(self) -> Phase<W> {
        match self {
            Phase::Unqueued => Phase::Unqueued,
            _ => Phase::Queued,
        }
    }

    /// How a wait goes on.
    pub(super) fn wait(&self) -> WaitFor {
        match self {
            Phase::Unqueued => WaitFor::Now,
            Phase::Staggering { .. } => WaitFor::Stagger,
            Phase::Following(_) | Phase::NextInLine { .. } => WaitFor::Watches,
            Phase::Queued | Phase::Leading { .. } => WaitFor::Poll,
        }
    }

    /// The follower's watches, to wait on.
    pub(super) fn watches_mut(&mut self) -> Option<&mut Watches<W>> {
        match self {
            Phase::Following(w) | Phase::NextInLine { watches: w, .. } => Some(w),
            _ => None,
        }
    }

    /// An answer on a follower's watch (`from`), at `now`; `stagger`: how long the
    /// next in line is let go first when the leader goes.
    pub(super) fn on_watch(
        self,
        from: Source,
        news: WatchNews,
        now: Instant,
        stagger: impl FnOnce() -> Duration,
    ) -> (Phase<W>, Heard) {
        let WatchNews::Events { any, delete } = news else {
            // Compacted, cancelled or broken: read again and watch anew.
            return (self, Heard::Look);
        };
        if any && matches!(from, Source::Announcement | Source::Next) {
            // A new leader announced itself (its claim is made), or the next in line
            // went: look now.
            return (self, Heard::Look);
        }
        if !delete {
            return (self, Heard::Nothing);
        }
        match (from, self) {
            // The leader went, and it was not our predecessor: let the next in line
            // go first, unless our own turn comes.
            (Source::Leader, Phase::Following(watches)) => {
                let until = now + stagger();
                let watches = Some(watches);
                (Phase::Staggering { until, watches }, Heard::Stagger)
            }
            (_, phase) => (phase, Heard::Look),
        }
    }

    /// The predecessor's watch, while staggering (when still open).
    pub(super) fn staggering_mut(&mut self) -> Option<(Instant, Option<&mut W>)> {
        match self {
            Phase::Staggering { until, watches } => {
                Some((*until, watches.as_mut().map(|w| &mut w.predecessor)))
            }
            _ => None,
        }
    }

    /// The stagger is over (or our predecessor's watch fired): a follower again,
    /// until the look that follows.
    pub(super) fn stagger_over(self) -> Phase<W> {
        match self {
            Phase::Staggering {
                watches: Some(w), ..
            } => Phase::Following(w),
            Phase::Staggering { watches: None, .. } => Phase::Queued,
            other => other,
        }
    }

    /// The leader's watch on its own key, while open.
    pub(super) fn own_mut(&mut self) -> Option<&mut W> {
        match self {
            Phase::Leading { own } => own.as_mut(),
            _ => None,
        }
    }

    /// Whether the leader's watch on its own key is open.
    pub(super) fn watches_own(&self) -> bool {
        matches!(self, Phase::Leading { own: Some(_) })
    }

    /// An answer on the leader's watch on its own key; `true`: the claim is lost.
    /// A watch that ended is dropped: the next renew reads the key and watches again.
    pub(super) fn on_own(self, news: OwnNews) -> (Phase<W>, bool) {
        match (self, news) {
            (Phase::Leading { own }, OwnNews::Events { taken: false }) => {
                (Phase::Leading { own }, false)
            }
            (Phase::Leading { .. }, OwnNews::Events { taken: true }) => {
                (Phase::Leading { own: None }, true)
            }
            (Phase::Leading { .. }, OwnNews::Ended) => (Phase::Leading { own: None }, false),
            (other, _) => (other, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type P = Phase<&'static str>;

    fn watches() -> Watches<&'static str> {
        Watches {
            predecessor: "pred",
            leader: Some("leader"),
            announcement: None,
            next: None,
        }
    }

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
            refreshed: None,
        }
    }

    const EVENTS: WatchNews = WatchNews::Events {
        any: true,
        delete: false,
    };
    const DELETE: WatchNews = WatchNews::Events {
        any: true,
        delete: true,
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn first_but_not_next_in_line_refreshes_after_the_read_then_claims() {
        // Whatever a follower watched, its round sends nothing beside the read.
        let (phase, round) = P::Following(watches()).begin();
        assert_eq!(phase, P::Queued);
        assert!(!round.refresh_beside_read);
        assert_eq!(round.own, None);
        // First, and the lease not refreshed since the campaign began: never a claim
        // straight away.
        let next = after_read(found(Stand::First));
        assert_eq!(next, Next::RefreshThenClaim, "a claim without the refresh");
        assert_eq!(after_refresh::<&str>(true), Next::Claim);
        assert_eq!(
            after_refresh::<&str>(false),
            Next::StartOver { show_leader: false }
        );
    }

    #[test]
    fn the_next_in_line_refreshes_beside_the_read_then_claims() {
        let next_in_line = P::NextInLine {
            watches: watches(),
            own: "own",
        };
        let (phase, round) = next_in_line.begin();
        assert_eq!(phase, P::Queued);
        assert!(round.refresh_beside_read, "no keep-alive beside the read");
        assert_eq!(round.own, Some("own"));
        let refreshed = |r| Found {
            refreshed: r,
            ..found(Stand::First)
        };
        assert_eq!(after_read(refreshed(Some(true))), Next::Claim);
        // The keep-alive beside the read found the lease gone: no claim.
        let dead = after_read(refreshed(Some(false)));
        assert_eq!(dead, Next::StartOver { show_leader: false });
    }

    #[test]
    fn a_campaign_from_any_other_phase_watches_anew() {
        let until = Instant::now();
        let staggering = P::Staggering {
            until,
            watches: Some(watches()),
        };
        for phase in [staggering, P::Leading { own: Some("own") }, P::Queued] {
            let (phase, round) = phase.begin();
            assert_eq!(phase, P::Queued);
            assert!(!round.refresh_beside_read);
            assert_eq!(round.own, None);
        }
        let (phase, round) = P::Unqueued.begin();
        assert_eq!(phase, P::Unqueued);
        assert!(!round.refresh_beside_read);
        assert_eq!(P::Unqueued.queued(), P::Queued);
        assert_eq!(P::Leading { own: None }.queued(), P::Leading { own: None });
    }

    #[test]
    fn a_vanished_key_starts_over_before_anything_else() {
        let gone = Found {
            ours: false,
            lets_pass: true,
            refreshed: Some(true),
            ..found(Stand::First)
        };
        assert_eq!(after_read(gone), Next::StartOver { show_leader: true });
        let missing = after_read(found(Stand::Gone));
        assert_eq!(missing, Next::StartOver { show_leader: false });
    }

    #[test]
    fn a_reservation_for_a_key_behind_ours_requeues_before_any_claim() {
        let reserved = Found {
            lets_pass: true,
            refreshed: Some(true),
            ..found(Stand::First)
        };
        assert_eq!(after_read(reserved), Next::Requeue);
        let leader = entry("a", 1);
        let behind = Found {
            lets_pass: true,
            ..found(Stand::Behind {
                turn: &leader,
                head: None,
            })
        };
        assert_eq!(after_read(behind), Next::Requeue);
    }

    #[test]
    fn the_next_in_line_watches_the_leader_and_its_own_key() {
        let leader = entry("a", 1);
        let stand = Stand::Behind {
            turn: &leader,
            head: None,
        };
        let expected = Follow {
            predecessor: "a",
            leader: None,
            announcement: false,
            next: None,
            own: true,
        };
        assert_eq!(after_read(found(stand)), Next::Follow(expected));
        // Refreshed beside the read, but the leader is still there: follow.
        let refreshed = Found {
            refreshed: Some(true),
            ..found(stand)
        };
        assert_eq!(after_read(refreshed), Next::Follow(expected));
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
        assert_eq!(after_read(found(stand)), Next::Follow(expected));
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
        assert_eq!(after_read(announced(Some("b"))), expected(Some("b")));
        // The next in line is our predecessor: one watch serves both.
        assert_eq!(after_read(announced(Some("c"))), expected(None));
    }

    #[test]
    fn opened_watches_make_a_follower_or_the_next_in_line_and_a_claim_leads() {
        assert_eq!(P::Queued.follow(watches(), None), P::Following(watches()));
        let next_in_line = P::Queued.follow(watches(), Some("own"));
        let expected = P::NextInLine {
            watches: watches(),
            own: "own",
        };
        assert_eq!(next_in_line, expected);
        assert_eq!(P::claimed("own"), P::Leading { own: Some("own") });
        // The keep-alive beside the read found the lease gone: nothing to follow.
        let unqueued = P::Unqueued.follow(watches(), Some("own"));
        assert_eq!(unqueued, P::Unqueued);
        assert_eq!(unqueued.wait(), WaitFor::Now);
    }

    #[test]
    fn a_dead_lease_unqueues_whatever_the_phase() {
        let phases = [
            P::Queued,
            P::Following(watches()),
            P::Leading { own: Some("own") },
        ];
        for phase in phases {
            assert_eq!(phase.kept_alive(false), P::Unqueued);
        }
        let following = P::Following(watches());
        assert_eq!(following.kept_alive(true), P::Following(watches()));
    }

    #[test]
    fn each_phase_waits_its_own_way() {
        let until = Instant::now();
        assert_eq!(P::Unqueued.wait(), WaitFor::Now);
        let staggering = P::Staggering {
            until,
            watches: None,
        };
        assert_eq!(staggering.wait(), WaitFor::Stagger);
        assert_eq!(P::Following(watches()).wait(), WaitFor::Watches);
        let next_in_line = P::NextInLine {
            watches: watches(),
            own: "own",
        };
        assert_eq!(next_in_line.wait(), WaitFor::Watches);
        assert_eq!(P::Queued.wait(), WaitFor::Poll);
        assert_eq!(P::Leading { own: None }.wait(), WaitFor::Poll);
        assert!(P::Following(watches()).watches_mut().is_some());
        assert!(P::Queued.watches_mut().is_none());
    }

    #[test]
    fn the_leaders_delete_staggers_a_follower_behind_the_next_in_line() {
        let now = Instant::now();
        let following = P::Following(watches());
        let (phase, heard) = following.on_watch(Source::Leader, DELETE, now, || ms(100));
        assert_eq!(heard, Heard::Stagger);
        let mut staggering = P::Staggering {
            until: now + ms(100),
            watches: Some(watches()),
        };
        assert_eq!(phase, staggering);
        let (until, predecessor) = staggering.staggering_mut().expect("staggering");
        assert_eq!((until, predecessor.copied()), (now + ms(100), Some("pred")));
        assert_eq!(staggering.stagger_over(), P::Following(watches()));
        let cut = P::Staggering {
            until: now,
            watches: None,
        };
        assert_eq!(cut.stagger_over(), P::Queued);
        assert_eq!(P::Queued.stagger_over(), P::Queued);
    }

    #[test]
    fn a_follower_looks_at_once_on_its_predecessor_or_any_news() {
        let now = Instant::now();
        let never = || -> Duration { panic!("no stagger") };
        let look = |from, news| {
            let (phase, heard) = P::Following(watches()).on_watch(from, news, now, never);
            assert_eq!(phase, P::Following(watches()), "{from:?} {news:?}");
            heard
        };
        assert_eq!(look(Source::Predecessor, DELETE), Heard::Look);
        assert_eq!(look(Source::Announcement, EVENTS), Heard::Look);
        assert_eq!(look(Source::Next, EVENTS), Heard::Look);
        assert_eq!(look(Source::Next, DELETE), Heard::Look);
        for from in [Source::Predecessor, Source::Leader, Source::Announcement] {
            assert_eq!(look(from, WatchNews::Ended), Heard::Look, "{from:?}");
        }
        // A put (the leader's key renewed, say), or no events at all: wait on.
        assert_eq!(look(Source::Predecessor, EVENTS), Heard::Nothing);
        assert_eq!(look(Source::Leader, EVENTS), Heard::Nothing);
        let empty = WatchNews::Events {
            any: false,
            delete: false,
        };
        assert_eq!(look(Source::Announcement, empty), Heard::Nothing);
    }

    #[test]
    fn a_lost_connection_takes_its_watches_and_keeps_the_lease() {
        let until = Instant::now();
        assert_eq!(P::Following(watches()).connection_lost(), P::Queued);
        let next_in_line = P::NextInLine {
            watches: watches(),
            own: "own",
        };
        assert_eq!(next_in_line.connection_lost(), P::Queued);
        let staggering = P::Staggering {
            until,
            watches: Some(watches()),
        };
        let cut = P::Staggering {
            until,
            watches: None,
        };
        assert_eq!(staggering.connection_lost(), cut);
        let leading = P::Leading { own: Some("own") };
        assert_eq!(leading.connection_lost(), P::Leading { own: None });
        assert_eq!(P::Queued.connection_lost(), P::Queued);
        assert_eq!(P::Unqueued.connection_lost(), P::Unqueued);
    }

    #[test]
    fn the_leader_loses_its_claim_only_on_news_that_its_key_is_taken() {
        let leading = || P::Leading { own: Some("own") };
        let (phase, lost) = leading().on_own(OwnNews::Events { taken: false });
        assert_eq!((phase, lost), (leading(), false));
        let (phase, lost) = leading().on_own(OwnNews::Events { taken: true });
        assert_eq!((phase, lost), (P::Leading { own: None }, true));
        // An ended watch is no news: the next renew reads the key again.
        let (mut phase, lost) = leading().on_own(OwnNews::Ended);
        assert_eq!((&phase, lost), (&P::Leading { own: None }, false));
        assert!(!phase.watches_own());
        assert!(phase.own_mut().is_none());
        let mut phase = phase.own_watched("again");
        assert!(phase.watches_own());
        assert_eq!(phase.own_mut().copied(), Some("again"));
        // Not leading: nothing to lose.
        let (phase, lost) = P::Queued.on_own(OwnNews::Events { taken: true });
        assert_eq!((phase, lost), (P::Queued, false));
        assert_eq!(P::Unqueued.own_watched("x"), P::Unqueued);
    }

    #[test]
    fn leaving_stops_every_watch() {
        let next_in_line = P::NextInLine {
            watches: watches(),
            own: "own",
        };
        assert_eq!(next_in_line.quiet(), P::Queued);
        assert_eq!(P::Leading { own: Some("own") }.quiet(), P::Queued);
        assert_eq!(P::Unqueued.quiet(), P::Unqueued);
    }
}
