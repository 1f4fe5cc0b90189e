//! The Lease campaign as a state machine: one explicit [`Phase`] (what this candidate
//! knows of the Lease, and whether it holds it), moved on by the store's answers, and
//! the decisions taken from it: what a campaign sends next ([`Phase::campaign`] ->
//! [`Next`]) and how long a follower waits ([`Phase::wait`] -> [`Wait`]). No I/O and
//! no clock: `now` is an argument, so every case can be driven by a plain test. The
//! backend ([`super::KubeBackend`]) does the I/O (get, create, replace, list, watch)
//! and asks this core what to do with each answer.
//!
//! Invariants kept here:
//! - a rival's record is taken over only once it has stood still for its
//!   `leaseDurationSeconds` as seen here (the clock restarts only when the record
//!   changes: [`Observed::next`]);
//! - a deleted Lease is created again only when no holder seen before the deletion
//!   may still be live;
//! - a Lease left to another candidate (`strategy`, `preferredHolder`) is not taken
//!   before that time is over.

use std::collections::VecDeque;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;

use super::rules::{self, coordination, Deference, Record};
use crate::backend::record::Seen;
use crate::status::Holder;

/// How long a candidate whose write lost to another's waits for that write's event
/// before it reads the Lease instead.
pub(super) const OUTRUN_WAIT: Duration = Duration::from_secs(1);

/// The last Lease read or written, and when its record last changed as seen here.
#[derive(Clone, Debug)]
pub(super) struct Observed {
    pub(super) lease: Lease,
    pub(super) record: Record,
    pub(super) changed_at: Instant,
}

impl Observed {
    /// `lease` seen at `now`, after `before`: the clock restarts only when the record
    /// changed.
    pub(super) fn next(before: Option<&Observed>, lease: Lease, now: Instant) -> Observed {
        let record = Record::of(&lease);
        let changed_at = match before {
            Some(o) if o.record == record => o.changed_at,
            _ => now,
        };
        Observed {
            lease,
            record,
            changed_at,
        }
    }

    pub(super) fn resource_version(&self) -> String {
        self.lease
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default()
    }

    /// When a rival's record may be taken over, by our own clock.
    pub(super) fn expires_at(&self) -> Instant {
        self.record.expires_at(self.changed_at)
    }
}

/// Known-wrong rules, each a switch the simulator turns on to show that it catches the
/// rule broken (`tests/suite/elector_sim.rs`); every one is off in the product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flaws {
    /// A rival's record may be taken over as soon as it is seen, without waiting out
    /// its `leaseDurationSeconds`.
    pub takes_unexpired: bool,
}

/// The candidate that campaigns: its identity, the records it wrote, and how it
/// treats coordinated Leases.
#[derive(Clone, Copy, Debug)]
pub(super) struct Us<'a> {
    pub(super) identity: &'a str,
    pub(super) written: &'a VecDeque<Record>,
    pub(super) strategy_mixed: bool,
    pub(super) ttl: Duration,
    pub(super) flaws: Flaws,
}

impl Us<'_> {
    /// When a rival's record `o` may be taken over, by our own clock
    /// ([`Observed::expires_at`]).
    fn expires_at(&self, o: &Observed) -> Instant {
        if self.flaws.takes_unexpired {
            return o.changed_at;
        }
        o.expires_at()
    }

    /// What this candidate makes of `record` ([`rules::seen`]).
    pub(super) fn seen(&self, record: &Record) -> Seen {
        rules::seen(record, self.identity, self.written)
    }

    /// Until when this candidate leaves `o` to others although it may be free
    /// ([`rules::left_to_others_until`]).
    fn left_to_others_until(&self, o: &Observed) -> Option<Instant> {
        let deference = Deference {
            identity: self.identity,
            strategy_mixed: self.strategy_mixed,
            ttl: self.ttl,
        };
        let seen = self.seen(&o.record);
        rules::left_to_others_until(seen, coordination(&o.lease), o.changed_at, deference)
    }
}

/// Where this candidate stands with the Lease.
#[derive(Clone, Debug, Default)]
pub(super) enum Phase {
    /// Nothing of the Lease seen yet (or a read found none and nothing was seen
    /// before): a campaign reads, a wait ends at once.
    #[default]
    Unseen,
    /// Following the Lease as a read, or a write's answer, showed it.
    Read(Observed),
    /// Following the Lease as the follower's watch brought it in the event that ended
    /// the last wait: the next campaign writes over it without reading the Lease
    /// again (a stale version only makes the write fail with a conflict).
    Watched(Observed),
    /// Our campaign's write lost to another's (a conflict): its write is on the way to
    /// our watch, so the next wait waits for it instead of reading at once.
    Outrun(Observed),
    /// The Lease was deleted after this was seen (at the deletion's version).
    Deleted(Observed),
    /// Leading: `held` is our tenure as our last write left it.
    Leading {
        held: Box<Lease>,
        observed: Observed,
    },
}

/// What a campaign sends next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Nothing: the Lease is another's (who, when known) or left to another.
    Follow(Option<Holder>),
    /// The Lease is missing: create it, with a token above `above` and the list's
    /// version (-1: nothing is known).
    Create { above: i32 },
    /// Write our tenure over the Lease found, with a token above `over` and its version.
    Take { over: i32 },
}

/// How a follower waits for the Lease to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    /// Do not wait: campaign at once.
    Now,
    /// Watch the Lease from `version` until `until`; before `expires`, nothing can
    /// change without an event on the watch.
    Watch {
        until: Instant,
        expires: Instant,
        version: String,
    },
}

/// Where a follower's watch event leaves the wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// The holder or tenure changed (or the Lease is newly gone): campaign.
    Changed,
    /// The same tenure renewed: the observation is fresh, nothing to do.
    Renewed,
    /// Nothing new (a deletion known already): wait on.
    Nothing,
}

impl Phase {
    /// The Lease as last seen, in any phase.
    pub(super) fn observed(&self) -> Option<&Observed> {
        match self {
            Phase::Unseen => None,
            Phase::Read(o) | Phase::Watched(o) | Phase::Outrun(o) | Phase::Deleted(o) => Some(o),
            Phase::Leading { observed, .. } => Some(observed),
        }
    }

    /// Our tenure, while leading.
    pub(super) fn held(&self) -> Option<&Lease> {
        match self {
            Phase::Leading { held, .. } => Some(&**held),
            _ => None,
        }
    }

    fn into_observed(self) -> Option<Observed> {
        match self {
            Phase::Unseen => None,
            Phase::Read(o) | Phase::Watched(o) | Phase::Outrun(o) | Phase::Deleted(o) => Some(o),
            Phase::Leading { observed, .. } => Some(observed),
        }
    }

    /// A read or a write's answer showed `lease` at `now`: a leader goes on leading,
    /// a follower follows what it saw.
    pub(super) fn observe(self, lease: Lease, now: Instant) -> Phase {
        let observed = Observed::next(self.observed(), lease, now);
        match self {
            Phase::Leading { held, .. } => Phase::Leading { held, observed },
            _ => Phase::Read(observed),
        }
    }

    /// A read found no Lease, or a write was answered 404: it is gone, and whatever
    /// tenure we had with it.
    pub(super) fn missing(self) -> Phase {
        match self.into_observed() {
            Some(o) => Phase::Deleted(o),
            None => Phase::Unseen,
        }
    }

    /// A read (not taken as an observation: a release looking for a tenure of ours, a
    /// switchover's probe) found no Lease: a follower notes it gone; a leader's tenure
    /// ends only with its renew or its release.
    pub(super) fn absent(self) -> Phase {
        match self {
            leading @ Phase::Leading { .. } => leading,
            other => other.missing(),
        }
    }

    /// A read that is not taken as an observation (a release looking for a tenure of
    /// ours) found the Lease: it is no longer missing.
    pub(super) fn present(self) -> Phase {
        match self {
            Phase::Deleted(o) => Phase::Read(o),
            other => other,
        }
    }

    /// A watch told that the Lease was deleted at `version`: the record is kept (its
    /// holder may still be live) at the deletion's version, so a watch goes on from
    /// after it. A leader stays one until its tenure is released.
    pub(super) fn deleted_at(self, version: Option<String>) -> Phase {
        let at = |mut o: Observed| {
            o.lease.metadata.resource_version = version;
            o
        };
        match self {
            Phase::Unseen => Phase::Unseen,
            Phase::Leading { held, observed } => Phase::Leading {
                held,
                observed: at(observed),
            },
            other => other
                .into_observed()
                .map_or(Phase::Unseen, |o| Phase::Deleted(at(o))),
        }
    }

    /// One event of the follower's watch on the Lease.
    pub(super) fn on_follow_event(self, event: FollowEvent, now: Instant) -> (Phase, Event) {
        match event {
            FollowEvent::Written(lease) => {
                let before = self.observed().map(|o| o.record.clone());
                let observed = Observed::next(self.observed(), *lease, now);
                let same = before.is_some_and(|b| {
                    b.holder == observed.record.holder
                        && b.transitions == observed.record.transitions
                });
                if same {
                    (Phase::Read(observed), Event::Renewed)
                } else {
                    (Phase::Watched(observed), Event::Changed)
                }
            }
            FollowEvent::Deleted(version) => {
                let known = matches!(self, Phase::Deleted(_));
                let wake = if known {
                    Event::Nothing
                } else {
                    Event::Changed
                };
                (self.deleted_at(version), wake)
            }
        }
    }

    /// The Lease a campaign decides on without reading: the watch's event that ended
    /// the last wait (a write over its version is compare-and-act like one over a
    /// read's; it spares a herd of followers a read each on a release). `None`: read.
    pub(super) fn fresh(self) -> (Phase, Option<Lease>) {
        match self {
            Phase::Watched(o) => {
                let lease = o.lease.clone();
                (Phase::Read(o), Some(lease))
            }
            other => (other, None),
        }
    }

    /// A campaign's decision at `now` over `found`, the Lease as it stands (`None`:
    /// missing).
    pub(super) fn campaign(self, found: Option<Lease>, now: Instant, us: Us) -> (Phase, Next) {
        let Some(lease) = found else {
            let phase = self.missing();
            let next = match phase.observed() {
                None => Next::Create { above: -1 },
                Some(o) => {
                    let seen = us.seen(&o.record);
                    if rules::live_before_deletion(seen, now, us.expires_at(o)) {
                        Next::Follow(rules::holder_of(&o.record, us.written))
                    } else {
                        Next::Create {
                            above: o.record.transitions,
                        }
                    }
                }
            };
            return (phase, next);
        };
        let phase = self.observe(lease, now);
        let Some(o) = phase.observed() else {
            return (phase, Next::Follow(None));
        };
        let free = rules::may_take(us.seen(&o.record), now, us.expires_at(o));
        let left = us.left_to_others_until(o).is_some_and(|until| now < until);
        let next = if free && !left {
            Next::Take {
                over: o.record.transitions,
            }
        } else {
            Next::Follow(rules::holder_of(&o.record, us.written))
        };
        (phase, next)
    }

    /// Our write (a take-over or a create) came back as `written`: our tenure.
    pub(super) fn taken(self, written: Lease, now: Instant) -> Phase {
        let observed = Observed::next(self.observed(), written.clone(), now);
        Phase::Leading {
            held: Box::new(written),
            observed,
        }
    }

    /// Our take-over was refused with a conflict: somebody wrote since we read.
    pub(super) fn outrun(self) -> Phase {
        match self {
            Phase::Read(o) | Phase::Watched(o) => Phase::Outrun(o),
            other => other,
        }
    }

    /// A renew wrote `lease` over our tenure.
    pub(super) fn renewed(self, lease: Lease) -> Phase {
        match self {
            Phase::Leading { observed, .. } => Phase::Leading {
                held: Box::new(lease),
                observed,
            },
            other => other,
        }
    }

    /// Our tenure ends (released, or found lost): the tenure as our last write left it,
    /// and the Lease followed from what was seen last.
    pub(super) fn end_tenure(self) -> (Phase, Option<Lease>) {
        match self {
            Phase::Leading { held, observed } => (Phase::Read(observed), Some(*held)),
            other => (other, None),
        }
    }

    /// How a follower waits at `now`, for `max` at most.
    pub(super) fn wait(self, now: Instant, max: Duration, us: Us) -> (Phase, Wait) {
        let (phase, outrun) = match self {
            Phase::Outrun(o) => (Phase::Read(o), true),
            other => (other, false),
        };
        let Some(o) = phase.observed() else {
            return (phase, Wait::Now);
        };
        let left = us.left_to_others_until(o).filter(|t| *t > now);
        let seen = us.seen(&o.record);
        // No holder: nothing to wait for (unless the Lease is left to another, or our
        // write just lost to another's, which the watch is about to bring); handed to
        // us: take it.
        let free = o.record.holder.is_empty() && left.is_none();
        if !outrun && (free || seen == Seen::Reserved) {
            return (phase, Wait::Now);
        }
        let mut until = now + max;
        // Until then nothing can change without an event on the watch.
        let mut expires = now;
        if outrun {
            until = until.min(now + OUTRUN_WAIT);
        } else if seen != Seen::Ours {
            // A rival's record may be taken over once it has stood still for its
            // duration, and a Lease left to another once that time is over.
            expires = us.expires_at(o).max(left.unwrap_or(now));
            until = until.min(expires);
        }
        if until <= now {
            return (phase, Wait::Now);
        }
        let wait = Wait::Watch {
            until,
            expires,
            version: o.resource_version(),
        };
        (phase, wait)
    }
}

/// What a follower's watch brought of the Lease.
#[derive(Clone, Debug)]
pub(super) enum FollowEvent {
    /// Added or modified: the Lease as written.
    Written(Box<Lease>),
    /// Deleted, at this version.
    Deleted(Option<String>),
}

#[cfg(test)]
mod tests {
    use super::super::rules::tests::{lease, record};
    use super::*;

    const TTL: Duration = Duration::from_secs(15);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn us(written: &VecDeque<Record>) -> Us<'_> {
        Us {
            identity: "a",
            written,
            strategy_mixed: false,
            ttl: TTL,
            flaws: Flaws::default(),
        }
    }

    /// A follower that read `r` at `at`.
    fn read(r: &Record, version: &str, at: Instant) -> Phase {
        Phase::Unseen.observe(lease(r, version), at)
    }

    fn holder(identity: &str, token: u64) -> Option<Holder> {
        Some(Holder {
            identity: identity.to_owned(),
            token: Some(token),
        })
    }

    #[test]
    fn a_missing_lease_seen_by_nobody_is_created_at_once() {
        let none = VecDeque::new();
        let (phase, next) = Phase::Unseen.campaign(None, Instant::now(), us(&none));
        assert_eq!(next, Next::Create { above: -1 });
        assert!(matches!(phase, Phase::Unseen));
    }

    #[test]
    fn a_deleted_lease_waits_out_a_live_holder_seen_before() {
        let none = VecDeque::new();
        let t = Instant::now();
        let rival = record("b", true, 4);
        let (phase, next) = read(&rival, "10", t).campaign(None, t + secs(1), us(&none));
        assert_eq!(next, Next::Follow(holder("b", 4)));
        assert!(matches!(phase, Phase::Deleted(_)));
        // Once the holder's duration is over, as seen here: create, above its token.
        let (_, next) = phase.campaign(None, t + TTL, us(&none));
        assert_eq!(next, Next::Create { above: 4 });
        // A record of our own (or a free one) does not hold a create back.
        let ours = record("a", true, 7);
        let written = VecDeque::from([ours.clone()]);
        let (_, next) = read(&ours, "10", t).campaign(None, t, us(&written));
        assert_eq!(next, Next::Create { above: 7 });
        let (_, next) = read(&record("", true, 2), "10", t).campaign(None, t, us(&none));
        assert_eq!(next, Next::Create { above: 2 });
    }

    #[test]
    fn a_free_or_handed_lease_is_taken_at_once() {
        let none = VecDeque::new();
        let t = Instant::now();
        for r in [record("", true, 3), record("a", false, 3)] {
            let (phase, next) = Phase::Unseen.campaign(Some(lease(&r, "9")), t, us(&none));
            assert_eq!(next, Next::Take { over: 3 }, "{r:?}");
            assert!(matches!(phase, Phase::Read(_)));
        }
    }

    #[test]
    fn a_rivals_lease_is_taken_only_after_standing_still_for_its_duration() {
        let none = VecDeque::new();
        let t = Instant::now();
        let rival = record("b", true, 4);
        let (phase, next) = Phase::Unseen.campaign(Some(lease(&rival, "9")), t, us(&none));
        assert_eq!(next, Next::Follow(holder("b", 4)));
        // The same record, read again later: the clock runs from its first sight.
        let (phase, next) = phase.campaign(Some(lease(&rival, "9")), t + secs(14), us(&none));
        assert_eq!(next, Next::Follow(holder("b", 4)));
        let (phase, next) = phase.campaign(Some(lease(&rival, "9")), t + TTL, us(&none));
        assert_eq!(next, Next::Take { over: 4 });
        // A renewal restarts the clock.
        let mut renewed = rival.clone();
        renewed.renew = None;
        let later = t + TTL + secs(1);
        let (phase, next) = phase.campaign(Some(lease(&renewed, "11")), later, us(&none));
        assert_eq!(next, Next::Follow(holder("b", 4)));
        assert_eq!(phase.observed().map(|o| o.changed_at), Some(later));
    }

    #[test]
    fn a_second_process_with_our_name_is_a_rival() {
        let t = Instant::now();
        let ours = record("a", true, 4);
        let written = VecDeque::from([ours.clone()]);
        let (_, next) = Phase::Unseen.campaign(Some(lease(&ours, "9")), t, us(&written));
        assert_eq!(next, Next::Take { over: 4 });
        let twin = record("a", true, 5);
        let (_, next) = Phase::Unseen.campaign(Some(lease(&twin, "9")), t, us(&written));
        assert_eq!(next, Next::Follow(holder("a", 5)));
    }

    #[test]
    fn a_lease_left_to_another_is_followed_for_one_ttl() {
        let none = VecDeque::new();
        let t = Instant::now();
        let mut left = lease(&record("", true, 2), "9");
        if let Some(spec) = left.spec.as_mut() {
            spec.preferred_holder = Some("b".to_owned());
        }
        let (phase, next) = Phase::Unseen.campaign(Some(left.clone()), t, us(&none));
        assert_eq!(next, Next::Follow(None));
        let (_, next) = phase.campaign(Some(left), t + TTL, us(&none));
        assert_eq!(next, Next::Take { over: 2 });
    }

    #[test]
    fn a_take_or_create_answered_leads_and_a_conflict_outruns() {
        let none = VecDeque::new();
        let t = Instant::now();
        let free = record("", true, 3);
        let (phase, _) = Phase::Unseen.campaign(Some(lease(&free, "9")), t, us(&none));
        let mine = lease(&record("a", true, 10), "12");
        let leading = phase.clone().taken(mine.clone(), t);
        assert_eq!(leading.held(), Some(&mine));
        assert_eq!(
            leading.observed().map(|o| o.resource_version()),
            Some("12".into())
        );
        assert!(matches!(phase.clone().outrun(), Phase::Outrun(_)));
        // A create's conflict leaves the phase as it was; its answer leads.
        let (gone, _) = Phase::Unseen.campaign(None, t, us(&none));
        assert!(matches!(
            gone.clone().taken(mine.clone(), t),
            Phase::Leading { .. }
        ));
        assert!(matches!(gone.outrun(), Phase::Unseen));
    }

    #[test]
    fn a_tenure_goes_on_with_renewals_and_ends_with_what_was_seen() {
        let t = Instant::now();
        let first = lease(&record("a", true, 10), "12");
        let leading = Phase::Unseen.taken(first.clone(), t);
        let renewed = lease(&record("a", true, 10), "13");
        let leading = leading
            .observe(renewed.clone(), t + secs(1))
            .renewed(renewed.clone());
        assert_eq!(leading.held(), Some(&renewed));
        let (phase, held) = leading.clone().end_tenure();
        assert_eq!(held, Some(renewed));
        assert!(matches!(phase, Phase::Read(_)));
        assert_eq!(phase.clone().end_tenure().1, None);
        // Gone (404, or a read that found none): no tenure left to release.
        let gone = leading.clone().missing();
        assert!(matches!(gone, Phase::Deleted(_)));
        assert_eq!(gone.held(), None);
        // The leader's watch tells of a deletion: it leads until it releases.
        let deleted = leading.deleted_at(Some("20".to_owned()));
        assert!(deleted.held().is_some());
        let version = deleted.observed().map(|o| o.resource_version());
        assert_eq!(version, Some("20".to_owned()));
    }

    #[test]
    fn a_read_for_a_release_only_says_the_lease_is_there() {
        let t = Instant::now();
        let deleted = read(&record("b", true, 1), "5", t).missing();
        assert!(matches!(deleted.present(), Phase::Read(_)));
        assert!(matches!(Phase::Unseen.present(), Phase::Unseen));
        assert!(matches!(Phase::Unseen.missing(), Phase::Unseen));
        let follower = read(&record("b", true, 1), "5", t);
        assert!(matches!(follower.absent(), Phase::Deleted(_)));
        let leading = Phase::Unseen.taken(lease(&record("a", true, 2), "6"), t);
        assert!(leading.absent().held().is_some());
    }

    #[test]
    fn the_watchs_event_spares_the_campaign_a_read() {
        let t = Instant::now();
        let before = read(&record("b", true, 1), "5", t);
        let released = lease(&record("", true, 1), "6");
        let (phase, event) =
            before.on_follow_event(FollowEvent::Written(Box::new(released.clone())), t);
        assert_eq!(event, Event::Changed);
        assert!(matches!(phase, Phase::Watched(_)));
        let (phase, fresh) = phase.fresh();
        assert_eq!(fresh, Some(released));
        // Only once: the next campaign reads.
        assert!(matches!(phase, Phase::Read(_)));
        assert_eq!(phase.fresh().1, None);
    }

    #[test]
    fn a_renewal_by_the_same_holder_is_a_quiet_event() {
        let t = Instant::now();
        let before = read(&record("b", true, 1), "5", t);
        let mut r = record("b", true, 1);
        r.renew = None;
        let (phase, event) =
            before.on_follow_event(FollowEvent::Written(Box::new(lease(&r, "6"))), t);
        assert_eq!(event, Event::Renewed);
        assert!(matches!(phase, Phase::Read(_)));
        assert_eq!(phase.observed().map(|o| o.changed_at), Some(t));
    }

    #[test]
    fn a_deletion_wakes_a_follower_once() {
        let t = Instant::now();
        let before = read(&record("b", true, 1), "5", t);
        let (phase, event) = before.on_follow_event(FollowEvent::Deleted(Some("7".into())), t);
        assert_eq!(event, Event::Changed);
        assert!(matches!(phase, Phase::Deleted(_)));
        let version = phase.observed().map(|o| o.resource_version());
        assert_eq!(version, Some("7".to_owned()));
        let (phase, event) = phase.on_follow_event(FollowEvent::Deleted(Some("8".into())), t);
        assert_eq!(event, Event::Nothing);
        // A write brings it back.
        let back = FollowEvent::Written(Box::new(lease(&record("c", true, 9), "9")));
        let (phase, event) = phase.on_follow_event(back, t);
        assert_eq!(event, Event::Changed);
        assert!(matches!(phase, Phase::Watched(_)));
    }

    #[test]
    fn nothing_seen_free_or_handed_is_no_wait() {
        let none = VecDeque::new();
        let t = Instant::now();
        assert_eq!(Phase::Unseen.wait(t, secs(5), us(&none)).1, Wait::Now);
        for r in [record("", true, 1), record("a", false, 1)] {
            assert_eq!(read(&r, "5", t).wait(t, secs(5), us(&none)).1, Wait::Now);
        }
        // A rival whose record has stood still for its duration: campaign.
        let rival = read(&record("b", true, 1), "5", t);
        assert_eq!(rival.wait(t + TTL, secs(5), us(&none)).1, Wait::Now);
    }

    #[test]
    fn a_follower_watches_a_rival_until_its_record_expires() {
        let none = VecDeque::new();
        let t = Instant::now();
        let rival = record("b", true, 1);
        let (_, wait) = read(&rival, "5", t).wait(t + secs(10), secs(30), us(&none));
        let expected = Wait::Watch {
            until: t + TTL,
            expires: t + TTL,
            version: "5".to_owned(),
        };
        assert_eq!(wait, expected);
        // At most `max`.
        let (_, wait) = read(&rival, "5", t).wait(t, secs(2), us(&none));
        assert!(matches!(wait, Wait::Watch { until, .. } if until == t + secs(2)));
    }

    #[test]
    fn a_lease_left_to_another_is_watched_until_that_time_is_over() {
        let none = VecDeque::new();
        let t = Instant::now();
        let mut left = lease(&record("", true, 2), "9");
        if let Some(spec) = left.spec.as_mut() {
            spec.preferred_holder = Some("b".to_owned());
        }
        let phase = Phase::Unseen.observe(left, t);
        let (_, wait) = phase.clone().wait(t, secs(60), us(&none));
        assert!(matches!(wait, Wait::Watch { until, .. } if until == t + TTL));
        assert_eq!(phase.wait(t + TTL, secs(60), us(&none)).1, Wait::Now);
    }

    #[test]
    fn an_outrun_candidate_waits_a_moment_for_the_winners_event() {
        let none = VecDeque::new();
        let t = Instant::now();
        let free = record("", true, 1);
        let outrun = read(&free, "5", t).outrun();
        let (phase, wait) = outrun.wait(t, secs(30), us(&none));
        let expected = Wait::Watch {
            until: t + OUTRUN_WAIT,
            expires: t,
            version: "5".to_owned(),
        };
        assert_eq!(wait, expected);
        // Once: the wait after it no longer waits for a free Lease.
        assert!(matches!(phase, Phase::Read(_)));
        assert_eq!(phase.wait(t, secs(30), us(&none)).1, Wait::Now);
    }

    #[test]
    fn our_own_record_is_watched_for_the_whole_wait() {
        let t = Instant::now();
        let ours = record("a", true, 4);
        let written = VecDeque::from([ours.clone()]);
        let (_, wait) = read(&ours, "5", t).wait(t + secs(60), secs(30), us(&written));
        let expected = Wait::Watch {
            until: t + secs(90),
            expires: t + secs(60),
            version: "5".to_owned(),
        };
        assert_eq!(wait, expected);
    }
}
