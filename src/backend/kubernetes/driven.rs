//! The Lease campaign's core ([`super::core`]) behind plain values, for a driver other
//! than the backend: the deterministic simulator (`tests/sim`) campaigns through it
//! against its model of the API server, under lost and late answers, restarts and
//! drifting clocks, as it drives the elector's machine. The decisions are the
//! backend's own: the same phase, the same rules, the same token.

use std::collections::VecDeque;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

pub use super::core::Flaws;
use super::core::{Event, FollowEvent, Next, Phase, Us, Wait};
use super::rules::{self, Record};

/// A Lease as a driver's model of the API server holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseView {
    /// `holderIdentity` (empty: none).
    pub holder: String,
    /// Whether `acquireTime` is set: every holder's own write sets it.
    pub acquired: bool,
    /// `renewTime`, by the writer's own clock (which nobody compares with theirs).
    pub renewed: Duration,
    pub duration_secs: i32,
    pub transitions: i32,
    /// `resourceVersion`.
    pub version: u64,
}

impl LeaseView {
    fn lease(&self) -> Lease {
        let at = |d: Duration| {
            let ns = i128::try_from(d.as_nanos()).unwrap_or(i128::MAX);
            MicroTime(Timestamp::from_nanosecond(ns).unwrap_or(Timestamp::UNIX_EPOCH))
        };
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(self.version.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.holder.clone()),
                acquire_time: self.acquired.then(|| at(self.renewed)),
                renew_time: Some(at(self.renewed)),
                lease_duration_seconds: Some(self.duration_secs),
                lease_transitions: Some(self.transitions),
                ..LeaseSpec::default()
            }),
        }
    }
}

/// What a campaign does with the Lease it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: the Lease is another's.
    Follow,
    /// Write our tenure over the Lease read, with this token (`leaseTransitions`).
    Take { token: i32 },
}

/// One candidate's campaign over a Lease: the core's phase and the records this
/// candidate wrote, moved on by plain calls.
#[derive(Clone, Debug)]
pub struct Campaigner {
    phase: Phase,
    identity: String,
    written: VecDeque<Record>,
    ttl: Duration,
    flaws: Flaws,
}

impl Campaigner {
    pub fn new(identity: &str, ttl: Duration, flaws: Flaws) -> Campaigner {
        Campaigner {
            phase: Phase::Unseen,
            identity: identity.to_owned(),
            written: VecDeque::new(),
            ttl,
            flaws,
        }
    }

    fn us(&self) -> Us<'_> {
        Us {
            identity: &self.identity,
            written: &self.written,
            strategy_mixed: false,
            ttl: self.ttl,
            flaws: self.flaws,
        }
    }

    /// A campaign read `found` at `now`: take it over, or follow.
    pub fn campaign(&mut self, found: &LeaseView, now: Instant) -> Decision {
        let phase = std::mem::take(&mut self.phase);
        let (phase, next) = phase.campaign(Some(found.lease()), now, self.us());
        self.phase = phase;
        let over = match next {
            Next::Follow(_) => return Decision::Follow,
            Next::Create { above } => above,
            Next::Take { over } => over,
        };
        let version = found.version.to_string();
        match rules::token_over(over, rules::revision(Some(&version))) {
            Some(token) => Decision::Take { token },
            None => Decision::Follow,
        }
    }

    /// A write of ours is about to be sent (a take-over, a renew, a release): noted
    /// first, as the backend notes it, so that we know our records when we see them.
    pub fn writing(&mut self, record: &LeaseView) {
        if self.written.len() == 8 {
            self.written.pop_front();
        }
        self.written.push_back(Record::of(&record.lease()));
    }

    /// Our take-over was written as `written`: our tenure.
    pub fn took(&mut self, written: &LeaseView, now: Instant) {
        let phase = std::mem::take(&mut self.phase);
        self.phase = phase.taken(written.lease(), now);
    }

    /// Our take-over lost to another's write (a conflict).
    pub fn outrun(&mut self) {
        self.phase = std::mem::take(&mut self.phase).outrun();
    }

    /// A renew wrote `written` over our tenure.
    pub fn renewed(&mut self, written: &LeaseView) {
        self.phase = std::mem::take(&mut self.phase).renewed(written.lease());
    }

    /// Our tenure ended (released, or lost).
    pub fn ended(&mut self) {
        self.phase = std::mem::take(&mut self.phase).end_tenure().0;
    }

    /// Whether we hold the Lease, as far as the core knows.
    pub fn leads(&self) -> bool {
        self.phase.held().is_some()
    }

    /// The watch brought `lease` at `now`; whether a follower should look now (the
    /// holder or the tenure changed). A leader only notes it.
    pub fn heard(&mut self, lease: &LeaseView, now: Instant) -> bool {
        let phase = std::mem::take(&mut self.phase);
        if phase.held().is_some() {
            self.phase = phase.observe(lease.lease(), now);
            return false;
        }
        let event = FollowEvent::Written(Box::new(lease.lease()));
        let (phase, event) = phase.on_follow_event(event, now);
        self.phase = phase;
        event == Event::Changed
    }

    /// Until when a follower waits at `now` (for `max` at most) before it campaigns
    /// again, unless the watch brings news first.
    pub fn wait(&mut self, now: Instant, max: Duration) -> Instant {
        let phase = std::mem::take(&mut self.phase);
        let (phase, wait) = phase.wait(now, max, self.us());
        self.phase = phase;
        match wait {
            Wait::Now => now,
            Wait::Watch { until, .. } => until,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(holder: &str, renewed_s: u64, transitions: i32, version: u64) -> LeaseView {
        LeaseView {
            holder: holder.into(),
            acquired: !holder.is_empty(),
            renewed: Duration::from_secs(renewed_s),
            duration_secs: 2,
            transitions,
            version,
        }
    }

    #[test]
    fn a_rivals_lease_is_taken_only_once_it_stood_still_for_its_duration() {
        let t0 = Instant::now();
        let mut c = Campaigner::new("b", Duration::from_secs(2), Flaws::default());
        let held = view("a", 100, 3, 7);
        assert_eq!(c.campaign(&held, t0), Decision::Follow);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            c.wait(later, Duration::from_secs(10)),
            t0 + Duration::from_secs(2)
        );
        // Renewed meanwhile: the clock starts again.
        assert!(!c.heard(&view("a", 101, 3, 8), later));
        let at = t0 + Duration::from_secs(2);
        assert_eq!(c.campaign(&view("a", 101, 3, 8), at), Decision::Follow);
        let after = later + Duration::from_secs(2);
        assert_eq!(
            c.campaign(&view("a", 101, 3, 8), after),
            Decision::Take { token: 9 },
            "the token is above the version as well as the transitions"
        );
    }

    #[test]
    fn the_known_wrong_rule_takes_a_rivals_lease_at_once() {
        let flaws = Flaws {
            takes_unexpired: true,
        };
        let mut c = Campaigner::new("b", Duration::from_secs(2), flaws);
        assert_eq!(
            c.campaign(&view("a", 100, 3, 7), Instant::now()),
            Decision::Take { token: 8 }
        );
    }

    #[test]
    fn our_own_record_is_ours_and_a_take_leads() {
        let t0 = Instant::now();
        let mut c = Campaigner::new("b", Duration::from_secs(2), Flaws::default());
        let free = view("", 0, 3, 7);
        let Decision::Take { token } = c.campaign(&free, t0) else {
            panic!("a free Lease is taken");
        };
        let ours = view("b", 1, token, 8);
        c.writing(&ours);
        c.took(&ours, t0);
        assert!(c.leads());
        assert!(!c.heard(&ours, t0), "a leader only notes its own write");
        c.ended();
        assert!(!c.leads());
        assert_eq!(c.campaign(&ours, t0), Decision::Take { token: 9 });
    }
}
