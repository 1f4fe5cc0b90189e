//! The etcd campaign as a state machine: one explicit [`Phase`] (where this candidate
//! stands in the queue, and what it watches), moved on by the store's answers, and the
//! decisions taken from it: what a campaign round starts with ([`Phase::begin`] ->
//! `round::Round`, which decides what the round sends after its read), and how a wait
//! goes on ([`Phase::wait`] -> [`WaitFor`], [`Phase::on_watch`] -> [`Heard`],
//! [`Waiting`]). No I/O and no clock: `now` is an argument, and the watches are opaque
//! values (`W`: the backend's watch streams), so every case can be driven by a plain
//! test. The backend ([`super::EtcdBackend`]) does the I/O (lease grants and
//! keep-alives, the read of the queue, puts, deletes, watches) and asks this core what
//! to do with each answer.
//!
//! Invariants kept here:
//! - **refresh before claim**, on every path to the front: a round begins with no
//!   keep-alive answered, whatever the phase (the next in line's sends one beside the
//!   read, any other's after it; see `round`);
//! - a follower looks again at once on news of its predecessor, the announcement or
//!   the next in line, and only after a stagger when the leader it does not wait for
//!   goes;
//! - a wait that heard the store (a watch answer, a keep-alive) ends quiet; one that
//!   lost the lease, or polled to its end, ends with a look.

use std::time::Duration;

use tokio::time::Instant;

use super::round::Round;
use crate::backend::Wake;

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

/// A wait between campaigns (a follower's on its watches, or a poll), until `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Waiting {
    until: Instant,
    /// The store answered during the wait (a watch answer that moved nothing, or a
    /// keep-alive).
    heard: bool,
}

/// What a wait does when its timer fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// The wait ends.
    Over(Wake),
    /// A keep-alive (not a read) proves the store and our lease alive; `over`: the
    /// wait is over once it is answered.
    KeepAlive { over: bool },
}

impl Waiting {
    /// A wait of `max` from `now`.
    pub(super) fn new(now: Instant, max: Duration) -> Waiting {
        Waiting {
            until: now + max,
            heard: false,
        }
    }

    /// When the timer fires: the end of the wait, or the next keep-alive's due time
    /// (`due`, while we hold a lease), whichever comes first.
    pub(super) fn timer(&self, due: Option<Instant>) -> Instant {
        due.map_or(self.until, |due| self.until.min(due))
    }

    /// The timer fired at `now`; `watching`: a follower's watches are open (else the
    /// wait polls).
    pub(super) fn on_timer(&self, now: Instant, watching: bool) -> Timer {
        let over = now >= self.until;
        match (watching, over) {
            // A poll that ran out: look.
            (false, true) => Timer::Over(Wake::Changed),
            (true, true) if self.heard => Timer::Over(Wake::Quiet),
            _ => Timer::KeepAlive { over },
        }
    }

    /// What the wait makes of an answer on a follower's watch: the wake it ends
    /// with (a stagger first, for [`Heard::Stagger`]), or `None`: nothing that
    /// moves us, the store is alive, wait on.
    pub(super) fn on_heard(&mut self, heard: Heard) -> Option<Heard> {
        match heard {
            Heard::Nothing => {
                self.heard = true;
                None
            }
            look => Some(look),
        }
    }

    /// The keep-alive of [`Timer::KeepAlive`] came back: `alive` (or it failed, or the
    /// lease is gone). How the wait ends, or `None`: it goes on.
    pub(super) fn on_keep_alive(&mut self, alive: bool, over: bool) -> Option<Wake> {
        match (alive, over) {
            (false, _) => Some(Wake::Changed),
            (true, true) => Some(Wake::Quiet),
            (true, false) => {
                self.heard = true;
                None
            }
        }
    }
}

impl<W> Phase<W> {
    /// A campaign begins: what goes beside its read. Every watch but the next in
    /// line's own goes (the read watches anew), and so does a stagger.
    pub(super) fn begin(self) -> (Phase<W>, Round<W>) {
        match self {
            Phase::Unqueued => (Phase::Unqueued, Round::behind()),
            Phase::NextInLine { own, .. } => (Phase::Queued, Round::next_in_line(own)),
            _ => (Phase::Queued, Round::behind()),
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
    use super::super::super::queue::{HolderNews, Stand};
    use super::super::round::{Found, Next};
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

    fn first() -> Found<'static, &'static str> {
        Found {
            ours: true,
            lets_pass: false,
            stand: Stand::First,
            news: HolderNews::Head,
            next: None,
        }
    }

    /// Every phase a campaign may begin from.
    fn every_phase() -> Vec<P> {
        let until = Instant::now();
        let staggering = P::Staggering {
            until,
            watches: Some(watches()),
        };
        let next_in_line = P::NextInLine {
            watches: watches(),
            own: "own",
        };
        vec![
            P::Unqueued,
            P::Queued,
            P::Following(watches()),
            next_in_line,
            staggering,
            P::Leading { own: Some("own") },
        ]
    }

    /// One round from `phase`, driven as the backend drives it, with a read that
    /// finds us first: the keep-alive beside the read when the round asks for one,
    /// then one after the read when the round asks for it, each answered `alive`.
    /// How many keep-alives went out, and what the round does.
    fn claim_round(phase: P, alive: bool) -> (u32, Next<&'static str>) {
        let (_, mut round) = phase.begin();
        let mut sent = 0;
        if round.refresh_beside_read {
            sent += 1;
            round.refreshed(alive);
        }
        let mut next = round.after_read(first());
        if next == Next::RefreshThenClaim {
            sent += 1;
            round.refreshed(alive);
            next = round.after_refresh();
        }
        (sent, next)
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
    fn every_path_to_a_claim_refreshes_the_lease_in_its_round() {
        for phase in every_phase() {
            let name = format!("{phase:?}");
            let next_in_line = matches!(phase, P::NextInLine { .. });
            // A round begins with no answer: whatever it starts from, a read that
            // finds us first is no claim yet.
            let (_, round) = phase.begin();
            let early = round.after_read(first());
            assert_eq!(
                early,
                Next::RefreshThenClaim,
                "{name}: claim before a refresh"
            );
            assert_eq!(round.refresh_beside_read, next_in_line, "{name}");
        }
        for phase in every_phase() {
            let name = format!("{phase:?}");
            // One keep-alive, answered alive: the claim (the next in line's beside
            // the read, one round trip; any other's after it).
            assert_eq!(claim_round(phase, true), (1, Next::Claim), "{name}");
        }
        for phase in every_phase() {
            let name = format!("{phase:?}");
            // A lease the refresh found gone: never a claim.
            let over = Next::StartOver { show_leader: false };
            assert_eq!(claim_round(phase, false), (1, over), "{name}");
        }
    }

    #[test]
    fn the_next_in_line_claims_on_the_keep_alive_beside_its_read() {
        let next_in_line = P::NextInLine {
            watches: watches(),
            own: "own",
        };
        let (phase, mut round) = next_in_line.begin();
        assert_eq!(phase, P::Queued);
        assert!(round.refresh_beside_read, "no keep-alive beside the read");
        assert_eq!(round.own, Some("own"));
        round.refreshed(true);
        assert_eq!(round.after_read(first()), Next::Claim);
        let (_, mut dead) = P::NextInLine {
            watches: watches(),
            own: "own",
        }
        .begin();
        dead.refreshed(false);
        let over = Next::StartOver { show_leader: false };
        assert_eq!(dead.after_read(first()), over, "a claim on a dead lease");
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
    fn a_wait_keeps_the_lease_alive_and_ends_quiet_only_when_the_store_answered() {
        let now = Instant::now();
        let mut wait = Waiting::new(now, ms(1000));
        assert_eq!(wait.timer(None), now + ms(1000));
        assert_eq!(wait.timer(Some(now + ms(300))), now + ms(300));
        assert_eq!(wait.timer(Some(now + ms(3000))), now + ms(1000));
        let due = now + ms(300);
        // A keep-alive is due before the end: send it, and wait on.
        let early = Timer::KeepAlive { over: false };
        assert_eq!(wait.on_timer(due, true), early);
        assert_eq!(wait.on_timer(due, false), early);
        // A poll that ran out looks; a follower that heard nothing yet keeps its
        // lease alive first.
        let end = now + ms(1000);
        assert_eq!(wait.on_timer(end, false), Timer::Over(Wake::Changed));
        assert_eq!(wait.on_timer(end, true), Timer::KeepAlive { over: true });
        assert_eq!(wait.on_keep_alive(true, true), Some(Wake::Quiet));
        assert_eq!(wait.on_keep_alive(false, false), Some(Wake::Changed));
        assert_eq!(wait.on_keep_alive(false, true), Some(Wake::Changed));
        // An answered keep-alive before the end is news the store is alive.
        assert_eq!(wait.on_keep_alive(true, false), None);
        assert_eq!(wait.on_timer(end, true), Timer::Over(Wake::Quiet));
        let mut watched = Waiting::new(now, ms(1000));
        assert_eq!(watched.on_heard(Heard::Look), Some(Heard::Look));
        assert_eq!(watched.on_heard(Heard::Stagger), Some(Heard::Stagger));
        assert_eq!(watched.on_timer(end, true), Timer::KeepAlive { over: true });
        assert_eq!(watched.on_heard(Heard::Nothing), None);
        assert_eq!(watched.on_timer(end, true), Timer::Over(Wake::Quiet));
        assert_eq!(watched.on_timer(end, false), Timer::Over(Wake::Changed));
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
