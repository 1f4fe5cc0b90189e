//! The Lease's rules, as plain functions: what a candidate makes of a Lease's record
//! ([`seen`]), when it may take it, when it leaves it to others (`strategy`,
//! `preferredHolder`), whether a record its watch brings is still its tenure, who holds
//! it, and the fencing token of a new tenure. No I/O and no clock: `now` and the
//! instant the record last changed (by this process's clock) are arguments.

use std::collections::VecDeque;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

use super::answers::Refusal;
use crate::backend::record::Seen;
use crate::status::Holder;

/// Far enough to mean "until the Lease changes" (every change comes as a watch event).
pub(super) const UNTIL_CHANGED: Duration = Duration::from_secs(365 * 24 * 3600);

/// The fields of a Lease that make up client-go's leader-election record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) holder: String,
    pub(super) duration_secs: i32,
    pub(super) acquire: Option<MicroTime>,
    pub(super) renew: Option<MicroTime>,
    pub(super) transitions: i32,
}

impl Record {
    pub(super) fn of(lease: &Lease) -> Record {
        Record::of_spec(lease.spec.clone().unwrap_or_default())
    }

    pub(super) fn of_spec(spec: LeaseSpec) -> Record {
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            duration_secs: spec.lease_duration_seconds.unwrap_or(0),
            acquire: spec.acquire_time,
            renew: spec.renew_time,
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    pub(super) fn token(&self) -> u64 {
        u64::try_from(self.transitions).unwrap_or(0)
    }

    /// When a rival's record, last changed at `changed_at` by our clock, may be taken
    /// over: its `leaseDurationSeconds` later (client-go's observed-time rule).
    pub(super) fn expires_at(&self, changed_at: Instant) -> Instant {
        let secs = u64::try_from(self.duration_secs).unwrap_or(0);
        changed_at + Duration::from_secs(secs)
    }
}

/// A Lease's record as a candidate (`identity`, which wrote the records `written`)
/// sees it: [`Seen::Free`] without a holder (a release's empty `holderIdentity`);
/// [`Seen::Ours`], a record this process wrote (not merely one that carries our
/// name); [`Seen::Reserved`], handed to us without our having written it (our name
/// and no `acquireTime`, as the API server's coordinator writes a holder it elected,
/// KEP-4355, and as a switchover to us writes it), which we take with a conditional
/// write of our own; else [`Seen::Another`]: every holder's own write carries an
/// `acquireTime` (ours, client-go's), so a second process with our name is a rival.
pub(super) fn seen(record: &Record, identity: &str, written: &VecDeque<Record>) -> Seen {
    let wrote = written.contains(record);
    match () {
        _ if record.holder == identity && wrote => Seen::Ours,
        _ if record.holder == identity && record.acquire.is_none() => Seen::Reserved,
        _ if record.holder.is_empty() => Seen::Free,
        _ => Seen::Another,
    }
}

/// Whether a campaign may write its own tenure over a record seen as `seen` that
/// expires (for a rival) at `expires_at`.
pub(super) fn may_take(seen: Seen, now: Instant, expires_at: Instant) -> bool {
    match seen {
        Seen::Free | Seen::Ours | Seen::Reserved => true,
        Seen::Another => now >= expires_at,
    }
}

/// Whether a holder seen before the Lease was deleted may still be live (then nobody
/// creates it again before that holder's record expires).
pub(super) fn live_before_deletion(seen: Seen, now: Instant, expires_at: Instant) -> bool {
    matches!(seen, Seen::Reserved | Seen::Another) && now < expires_at
}

/// A Lease's `spec.strategy` and `spec.preferredHolder` (KEP-4355), absent when empty.
pub(super) fn coordination(lease: &Lease) -> (Option<&str>, Option<&str>) {
    fn field(f: Option<&String>) -> Option<&str> {
        f.map(String::as_str).filter(|v| !v.is_empty())
    }
    let spec = lease.spec.as_ref();
    (
        field(spec.and_then(|s| s.strategy.as_ref())),
        field(spec.and_then(|s| s.preferred_holder.as_ref())),
    )
}

/// How a candidate treats coordinated Leases.
#[derive(Clone, Copy, Debug)]
pub(super) struct Deference<'a> {
    pub(super) identity: &'a str,
    /// `--lease-strategy-mixed`: take Leases that `strategy` hands to others.
    pub(super) strategy_mixed: bool,
    pub(super) ttl: Duration,
}

/// Until when a candidate leaves a Lease (seen as `seen`, with `coordination`, last
/// changed at `changed_at`) to others although it may be free: one whose strategy is
/// set and that is not handed to it (unless `--lease-strategy-mixed`), until it
/// changes; one whose `preferredHolder` names another candidate, for one ttl.
pub(super) fn left_to_others_until(
    seen: Seen,
    (strategy, preferred): (Option<&str>, Option<&str>),
    changed_at: Instant,
    d: Deference,
) -> Option<Instant> {
    if matches!(seen, Seen::Ours | Seen::Reserved) {
        return None;
    }
    let handed = preferred == Some(d.identity);
    if strategy.is_some() && !handed && !d.strategy_mixed {
        return Some(changed_at + UNTIL_CHANGED);
    }
    match preferred {
        Some(p) if p != d.identity => Some(changed_at + d.ttl),
        _ => None,
    }
}

/// Whether our tenure's Lease, naming `preferred` as `preferredHolder`, asks us to
/// hand over: it names another candidate than it did when the tenure began.
pub(super) fn asks_handover(
    preferred: Option<&str>,
    identity: &str,
    at_start: Option<&str>,
) -> bool {
    preferred.is_some_and(|p| p != identity && Some(p) != at_start)
}

/// Who holds `record`: nobody for a record that hands the Lease over and that we
/// wrote (a switchover's, until its candidate takes it with a write of its own).
pub(super) fn holder_of(record: &Record, written: &VecDeque<Record>) -> Option<Holder> {
    let unclaimed = record.acquire.is_none() && written.contains(record);
    (!record.holder.is_empty() && !unclaimed).then(|| Holder {
        identity: record.holder.clone(),
        token: Some(record.token()),
    })
}

/// Whether `lease`, seen by the leader's watch, is still our tenure (`held`, as our
/// last write left it): our holder and token, and a record we wrote, or a version our
/// last successful write came after (that write named the version it replaced, so it
/// has seen everything before).
pub(super) fn own_tenure(
    lease: &Lease,
    held: &Lease,
    identity: &str,
    written: &VecDeque<Record>,
) -> bool {
    let record = Record::of(lease);
    let mine = Record::of(held);
    if record.holder != identity || record.transitions != mine.transitions {
        return false;
    }
    let version = |l: &Lease| l.metadata.resource_version.as_deref()?.parse::<u64>().ok();
    let superseded = matches!((version(lease), version(held)), (Some(v), Some(h)) if v <= h);
    seen(&record, identity, written) == Seen::Ours || superseded
}

/// A resourceVersion as the etcd revision it is on every API server backed by etcd;
/// `None` when it is not an integer that fits a token.
pub(super) fn revision(version: Option<&str>) -> Option<i32> {
    version
        .and_then(|v| v.parse::<i64>().ok())
        .and_then(|v| i32::try_from(v).ok())
}

/// The token of a new tenure over a record that carries `transitions`, on a Lease (or
/// a list, for a create) at revision `revision`: `max(transitions + 1, revision + 1)`;
/// `None` when `leaseTransitions` cannot grow any further.
pub(super) fn token_over(transitions: i32, revision: Option<i32>) -> Option<i32> {
    let after = transitions.checked_add(1)?;
    Some(match revision {
        Some(rv) => after.max(rv.saturating_add(1)),
        None => after,
    })
}

/// Our record over `base` (its other fields, like `strategy`, are kept), written at
/// `now`: our tenure with token `transitions`, acquired at `acquire`, for `ttl_secs`.
pub(super) fn tenure_spec(
    base: Option<&LeaseSpec>,
    (identity, ttl_secs): (&str, i32),
    acquire: Option<MicroTime>,
    transitions: i32,
    now: MicroTime,
) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(ttl_secs),
        acquire_time: acquire,
        renew_time: Some(now),
        lease_transitions: Some(transitions),
        ..base.cloned().unwrap_or_default()
    }
}

/// The release of our tenure (token `transitions`) over `base`, written at `now`:
/// without `to`, client-go's `ReleaseOnCancel` form (no holder, a one-second duration);
/// with `to` (a switchover), the Lease handed to `to`: `holderIdentity: to`, no
/// `acquireTime`, our ttl (`ttl_secs`) as duration, as the API server's coordinator
/// hands a Lease to the candidate it elected. Every other field is kept.
pub(super) fn release_spec(
    base: LeaseSpec,
    to: Option<&str>,
    ttl_secs: i32,
    transitions: i32,
    now: MicroTime,
) -> LeaseSpec {
    // Always a holderIdentity, even "": a Lease with a strategy and no such field
    // crashes kube-apiserver 1.33's coordinator.
    match to {
        Some(to) => LeaseSpec {
            holder_identity: Some(to.to_owned()),
            lease_duration_seconds: Some(ttl_secs),
            acquire_time: None,
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..base
        },
        None => LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..base
        },
    }
}

/// Whether a switchover can name the next holder of a Lease.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Coordinated {
    /// It can.
    No,
    /// It cannot, for this reason.
    Yes(String),
    /// Ask the API server: a dry-run write of this Lease (ours as `preferredHolder`).
    Probe(Box<Lease>),
}

/// Whether a switchover can name the next holder of `lease`: not when the Lease has a
/// `strategy` (the API server's coordinator elects its holders); with
/// `--lease-candidate` (`with_candidate`), the API server is asked whether it runs that
/// coordinator ([`probed`]), which would elect its own pick again.
pub(super) fn coordinated(lease: &Lease, with_candidate: bool, identity: &str) -> Coordinated {
    if let (Some(strategy), _) = coordination(lease) {
        return Coordinated::Yes(format!(
            "the Lease is coordinated (strategy {strategy}): the API server's coordinator elects its holder"
        ));
    }
    if !with_candidate {
        return Coordinated::No;
    }
    let mut probe = lease.clone();
    if let Some(spec) = probe.spec.as_mut() {
        spec.preferred_holder = Some(identity.to_owned());
    }
    Coordinated::Probe(Box::new(probe))
}

/// The API server's answer to the probe of [`coordinated`]: with the
/// `CoordinatedLeaderElection` gate, a `preferredHolder` without `strategy` is refused
/// with 422 (without the gate, the field is silently dropped). `Some`: the reason a
/// switchover cannot name the next holder.
pub(super) fn probed(answer: Result<(), Refusal>) -> Result<Option<String>, Refusal> {
    match answer {
        Ok(()) => Ok(None),
        Err(e) if e.code == Some(422) => Ok(Some(
            "the API server coordinates this election (CoordinatedLeaderElection is on and the candidates publish LeaseCandidates): its coordinator elects the holder and would undo a switchover".to_owned(),
        )),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// A record of `holder` (renewed, and acquired when `acquire`) for 15 s; the core's
    /// tests use it too.
    pub(in crate::backend::kubernetes) fn record(
        holder: &str,
        acquire: bool,
        transitions: i32,
    ) -> Record {
        let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).expect("time");
        Record {
            holder: holder.to_owned(),
            duration_secs: 15,
            acquire: acquire.then_some(MicroTime(t)),
            renew: Some(MicroTime(t)),
            transitions,
        }
    }

    /// The Lease that carries `r`, at `version`.
    pub(in crate::backend::kubernetes) fn lease(r: &Record, version: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(r.holder.clone()),
                lease_duration_seconds: Some(r.duration_secs),
                acquire_time: r.acquire.clone(),
                renew_time: r.renew.clone(),
                lease_transitions: Some(r.transitions),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_record_is_free_ours_handed_or_anothers() {
        let ours = record("a", true, 3);
        let written = VecDeque::from([ours.clone()]);
        assert_eq!(seen(&record("", true, 3), "a", &written), Seen::Free);
        assert_eq!(seen(&ours, "a", &written), Seen::Ours);
        // Our name, no acquireTime, not written by us: handed to us.
        assert_eq!(seen(&record("a", false, 4), "a", &written), Seen::Reserved);
        // Our name with an acquireTime we did not write: a second process, a rival.
        assert_eq!(seen(&record("a", true, 4), "a", &written), Seen::Another);
        assert_eq!(seen(&record("b", true, 3), "a", &written), Seen::Another);
        // A switchover's record we wrote for another is that other's.
        let handed_on = record("b", false, 3);
        assert_eq!(
            seen(&handed_on, "a", &VecDeque::from([handed_on.clone()])),
            Seen::Another
        );
    }

    #[test]
    fn only_a_rivals_record_waits_for_its_expiry() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        for s in [Seen::Free, Seen::Ours, Seen::Reserved] {
            assert!(may_take(s, now, later), "{s:?}");
        }
        assert!(!may_take(Seen::Another, now, later));
        assert!(may_take(Seen::Another, later, later));
        let r = record("b", true, 1);
        assert_eq!(r.expires_at(now), now + Duration::from_secs(15));
    }

    #[test]
    fn a_deleted_lease_waits_for_a_holder_seen_before_it() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        assert!(live_before_deletion(Seen::Another, now, later));
        assert!(live_before_deletion(Seen::Reserved, now, later));
        assert!(!live_before_deletion(Seen::Another, later, later));
        assert!(!live_before_deletion(Seen::Free, now, later));
        assert!(!live_before_deletion(Seen::Ours, now, later));
    }

    #[test]
    fn coordinated_leases_are_left_to_others() {
        let t = Instant::now();
        let ttl = Duration::from_secs(10);
        let d = Deference {
            identity: "a",
            strategy_mixed: false,
            ttl,
        };
        let free = Seen::Free;
        assert_eq!(left_to_others_until(free, (None, None), t, d), None);
        // A strategy: until the Lease changes, unless it is handed to us.
        let until = left_to_others_until(free, (Some("OldestEmulationVersion"), None), t, d);
        assert_eq!(until, Some(t + UNTIL_CHANGED));
        let to_us = (Some("OldestEmulationVersion"), Some("a"));
        assert_eq!(left_to_others_until(free, to_us, t, d), None);
        let mixed = Deference {
            strategy_mixed: true,
            ..d
        };
        let strategy = (Some("OldestEmulationVersion"), None);
        assert_eq!(left_to_others_until(free, strategy, t, mixed), None);
        // Another preferred holder: for one ttl.
        assert_eq!(
            left_to_others_until(free, (None, Some("b")), t, d),
            Some(t + ttl)
        );
        // Our own or handed records are never left.
        for s in [Seen::Ours, Seen::Reserved] {
            assert_eq!(left_to_others_until(s, (None, Some("b")), t, d), None);
        }
    }

    #[test]
    fn a_new_preferred_holder_asks_for_a_handover() {
        assert!(asks_handover(Some("b"), "a", None));
        assert!(asks_handover(Some("c"), "a", Some("b")));
        assert!(!asks_handover(Some("b"), "a", Some("b")));
        assert!(!asks_handover(Some("a"), "a", None));
        assert!(!asks_handover(None, "a", Some("b")));
    }

    #[test]
    fn a_handover_we_wrote_has_no_holder_until_taken() {
        let handed_on = record("b", false, 3);
        assert_eq!(
            holder_of(&handed_on, &VecDeque::from([handed_on.clone()])),
            None
        );
        let holder = holder_of(&handed_on, &VecDeque::new()).expect("b holds");
        assert_eq!((holder.identity.as_str(), holder.token), ("b", Some(3)));
        assert_eq!(holder_of(&record("", true, 3), &VecDeque::new()), None);
    }

    #[test]
    fn our_tenure_is_our_record_or_a_version_we_wrote_over() {
        let ours = record("a", true, 5);
        let held = lease(&ours, "100");
        let written = VecDeque::from([ours.clone()]);
        assert!(own_tenure(&lease(&ours, "101"), &held, "a", &written));
        // A record we did not write with our name and token: ours only at or before
        // the version our last write replaced.
        let other_write = record("a", true, 5);
        let mut renewed = other_write.clone();
        renewed.duration_secs = 30;
        assert!(own_tenure(&lease(&renewed, "99"), &held, "a", &written));
        assert!(!own_tenure(&lease(&renewed, "101"), &held, "a", &written));
        // Another holder, or another token.
        assert!(!own_tenure(
            &lease(&record("b", true, 5), "101"),
            &held,
            "a",
            &written
        ));
        assert!(!own_tenure(
            &lease(&record("a", true, 6), "99"),
            &held,
            "a",
            &written
        ));
    }

    fn at(s: i64) -> MicroTime {
        MicroTime(k8s_openapi::jiff::Timestamp::from_second(s).expect("time"))
    }

    fn coordinated_spec() -> LeaseSpec {
        LeaseSpec {
            strategy: Some("OldestEmulationVersion".to_owned()),
            preferred_holder: Some("b".to_owned()),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn our_tenure_is_written_over_the_other_fields() {
        let base = coordinated_spec();
        let spec = tenure_spec(Some(&base), ("a", 15), Some(at(1)), 7, at(2));
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(
            (spec.acquire_time, spec.renew_time),
            (Some(at(1)), Some(at(2)))
        );
        assert_eq!(spec.lease_transitions, Some(7));
        assert_eq!(spec.strategy, base.strategy);
        assert_eq!(spec.preferred_holder, base.preferred_holder);
    }

    #[test]
    fn a_release_empties_the_holder_and_a_switchover_hands_it_on() {
        let released = release_spec(coordinated_spec(), None, 15, 7, at(3));
        // client-go's ReleaseOnCancel: an empty holder (never none), one second.
        assert_eq!(released.holder_identity.as_deref(), Some(""));
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.acquire_time, Some(at(3)));
        assert_eq!(released.lease_transitions, Some(7));
        assert_eq!(released.strategy, coordinated_spec().strategy);
        // Handed to "c": its name, no acquireTime (it takes it with a write of its
        // own), our ttl, the same token.
        let handed = release_spec(coordinated_spec(), Some("c"), 15, 7, at(3));
        assert_eq!(handed.holder_identity.as_deref(), Some("c"));
        assert_eq!(handed.lease_duration_seconds, Some(15));
        assert_eq!(handed.acquire_time, None);
        assert_eq!(handed.renew_time, Some(at(3)));
        assert_eq!(handed.lease_transitions, Some(7));
        let r = Record::of_spec(handed);
        assert_eq!(seen(&r, "c", &VecDeque::new()), Seen::Reserved);
    }

    #[test]
    fn a_switchover_is_refused_on_a_coordinated_lease() {
        let mut plain = lease(&record("a", true, 3), "9");
        assert_eq!(coordinated(&plain, false, "a"), Coordinated::No);
        // With a LeaseCandidate: the API server is asked, with ours as preferredHolder.
        let Coordinated::Probe(probe) = coordinated(&plain, true, "a") else {
            panic!("a probe");
        };
        let preferred = probe.spec.as_ref().and_then(|s| s.preferred_holder.clone());
        assert_eq!(preferred.as_deref(), Some("a"));
        if let Some(spec) = plain.spec.as_mut() {
            spec.strategy = Some("OldestEmulationVersion".to_owned());
        }
        assert!(matches!(
            coordinated(&plain, false, "a"),
            Coordinated::Yes(_)
        ));
        let refusal = |code| Refusal {
            code: Some(code),
            message: String::new(),
        };
        assert_eq!(probed(Ok(())), Ok(None));
        assert!(matches!(probed(Err(refusal(422))), Ok(Some(_))));
        assert_eq!(probed(Err(refusal(403))), Err(refusal(403)));
    }

    #[test]
    fn tokens_grow_past_transitions_and_revisions() {
        assert_eq!(token_over(4, None), Some(5));
        assert_eq!(token_over(4, Some(2)), Some(5));
        assert_eq!(token_over(4, Some(80)), Some(81));
        assert_eq!(token_over(-1, None), Some(0));
        assert_eq!(token_over(i32::MAX, None), None);
        assert_eq!(revision(Some("81")), Some(81));
        assert_eq!(revision(Some("x")), None);
        assert_eq!(revision(Some("9999999999")), None);
        assert_eq!(revision(None), None);
    }
}
