//! The one value every publisher reads.
//!
//! The elector is the only writer of [`Status`] (through a `tokio::sync::watch`
//! channel). Publishers never trust the stored role alone: [`Status::is_leader_at`]
//! checks the local deadline at the instant of the answer (DESIGN §2, invariant 3),
//! so a process that wakes from SIGSTOP past its deadline answers "not leader" even
//! before the elector task has run again.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::time::Instant;

/// A fencing token: strictly greater for every later acquisition of the same election.
pub type FencingToken = u64;

/// Who holds the lease, as last observed from the backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    pub identity: String,
    pub token: Option<FencingToken>,
}

/// Who holds one slot of an election of several (`--holders N`), as last observed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlotHolder {
    pub slot: u32,
    pub holder: Holder,
    /// How it holds (`--mode`): several shared holders share slot 0.
    pub mode: Mode,
}

/// The election's slots as this candidate knows them: how many, which one it took
/// last, and who held each as last observed. With one slot (the default), `list`
/// stays empty and the holder is `Status::holder`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slots {
    /// N; 0 is read as 1.
    pub count: u32,
    /// The slot of this candidate's latest tenure (reported only while it leads).
    pub own: Option<u32>,
    pub list: Vec<SlotHolder>,
}

impl Slots {
    pub fn count(&self) -> u32 {
        self.count.max(1)
    }

    /// One lock held by `holders` (a read-write lock's, `--mode`): each in slot 0,
    /// with how it holds.
    pub fn one_lock(holders: impl IntoIterator<Item = (Holder, Mode)>) -> Slots {
        let list = (holders.into_iter())
            .map(|(holder, mode)| SlotHolder {
                slot: 0,
                holder,
                mode,
            })
            .collect();
        Slots {
            count: 1,
            own: None,
            list,
        }
    }
}

/// The share of a 64-bit hash space that slot `slot` of `count` owns:
/// `[slot·2⁶⁴/count, (slot+1)·2⁶⁴/count)`, the form of Kubernetes' sharded list/watch
/// proposal, so a controller can filter its objects by the hash of their key.
pub fn hash_range(slot: u32, count: u32) -> (u128, u128) {
    let (slot, count) = (u128::from(slot), u128::from(count.max(1)));
    let space = 1u128 << 64;
    (slot * space / count, (slot + 1) * space / count)
}

/// How a holder holds the election (`--mode`): alone (`exclusive`: every election
/// without `--mode`, and each slot of several), or beside other `shared` holders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// The role of this candidate as the elector last decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Unknown,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Unknown => "unknown",
        }
    }
}

/// This candidate's own claim while it leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Local monotonic instant after which the claim must no longer be asserted.
    pub deadline: Instant,
    pub token: FencingToken,
    pub since: SystemTime,
}

/// Everything the elector knows, published as one value.
#[derive(Clone, Debug)]
pub struct Status {
    pub election: String,
    pub identity: String,
    pub backend: &'static str,
    pub role: Role,
    pub claim: Option<Claim>,
    /// The holder as last observed (our own identity while we lead).
    pub holder: Option<Holder>,
    /// When the holder changed to the current one, as far as this candidate saw.
    pub holder_since: Option<SystemTime>,
    /// The last holder ever seen, to count transitions (`holder` may be cleared).
    pub last_seen_holder: Option<Holder>,
    /// Monotonic and wall time of the last answer from the backend.
    pub heard_at: Option<(Instant, SystemTime)>,
    /// Number of leader changes this candidate has observed (its own included).
    pub transitions: u64,
    /// Number of tenures this candidate has begun. A watch channel shows only the
    /// latest `Status`, so a publisher that must count every tenure (the Events) counts
    /// by this rather than by the roles it happened to see.
    pub own_tenures: u64,
    /// The first round against the backend completed (for `/readyz`).
    pub ready: bool,
    /// A holder observation older than this is not reported as current.
    pub stale_after: Duration,
    /// A graceful step-down is waiting for the app to drain (`publish::drain`).
    pub draining: bool,
    /// While draining: the instant the drain must end by (`--drain-timeout`; the lease
    /// is renewed meanwhile). `None` once the elector ended the drain, acknowledged or
    /// not (the app answered, the timeout passed, or the lease was lost first).
    pub drain_until: Option<Instant>,
    /// The election's slots (`--holders`), as the backend last reported them.
    pub slots: Slots,
    /// How this candidate holds when it leads (`--mode`).
    pub mode: Mode,
    /// While leading on a store whose lease is held by open descriptors (the file
    /// lock): that descriptor, for exec mode to lend to CMD's guard and init
    /// ([`TenureHold`]).
    pub tenure_hold: TenureHold,
}

/// A descriptor that keeps this candidate's lease held for as long as any copy of it
/// is open (the file backend's locked open file description). Exec mode passes a
/// copy to CMD's guard and to the init of CMD's PID namespace, so the lease outlives
/// every process of CMD whatever dies first. Weak: the elector owns the one strong
/// copy and drops it as the tenure ends, so no reader of `Status` keeps the lease held
/// past its release. Empty on every other store (their leases outlive a dead holder
/// by the ttl).
pub type TenureHold = std::sync::Weak<std::os::fd::OwnedFd>;

/// The JSON shape of DESIGN §3; field names are part of the contract.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StatusView {
    pub election: String,
    pub identity: String,
    pub backend: &'static str,
    pub state: Role,
    pub is_leader: bool,
    pub leader: Option<String>,
    pub fencing_token: Option<FencingToken>,
    pub leader_since: Option<String>,
    pub lease_expires_in_ms: Option<u64>,
    pub observed_at: Option<String>,
    pub transitions: u64,
    /// The slot this candidate holds (null when it does not lead).
    pub slot: Option<u32>,
    /// The number of slots (`--holders`).
    pub slots: u32,
    /// How this candidate holds when it leads: `exclusive` (alone in its slot) or
    /// `shared` (beside other shared holders, `--mode shared`).
    pub mode: Mode,
    /// Who held each slot, as last observed (empty when nothing current is known).
    pub holders: Vec<HolderView>,
    /// While leading: the own slot's share of a 64-bit hash space, as decimal strings
    /// (`end` exclusive, and 2⁶⁴ for the last slot, past a JSON reader's integers).
    pub hash_range: Option<HashRange>,
}

/// One entry of `StatusView::holders`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HolderView {
    pub slot: u32,
    pub mode: Mode,
    pub identity: String,
    pub fencing_token: Option<FencingToken>,
}

/// `StatusView::hash_range`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HashRange {
    pub start: String,
    pub end: String,
}

impl Status {
    pub fn new(
        election: &str,
        identity: &str,
        backend: &'static str,
        stale_after: Duration,
    ) -> Self {
        Status {
            election: election.to_owned(),
            identity: identity.to_owned(),
            backend,
            role: Role::Unknown,
            claim: None,
            holder: None,
            holder_since: None,
            last_seen_holder: None,
            heard_at: None,
            transitions: 0,
            own_tenures: 0,
            ready: false,
            draining: false,
            drain_until: None,
            stale_after,
            slots: Slots::default(),
            mode: Mode::Exclusive,
            tenure_hold: TenureHold::new(),
        }
    }

    /// The slot this candidate holds at `now`, if it leads.
    pub fn slot_at(&self, now: Instant) -> Option<u32> {
        if !self.is_leader_at(now) {
            return None;
        }
        Some(self.slots.own.unwrap_or(0))
    }

    /// Who holds which slot, as may be reported at `now`: with one slot, the holder;
    /// with several, the backend's list (our own slot is ours while we lead, and
    /// nobody's after).
    pub fn holders_at(&self, now: Instant) -> Vec<HolderView> {
        let view = |slot: u32, mode: Mode, h: &Holder| HolderView {
            slot,
            mode,
            identity: h.identity.clone(),
            fencing_token: h.token,
        };
        if self.role_at(now) == Role::Unknown {
            return Vec::new();
        }
        let mine = self.slot_at(now);
        if self.slots.count() == 1 && self.slots.list.is_empty() {
            return self
                .holder
                .iter()
                .map(|h| view(0, Mode::Exclusive, h))
                .collect();
        }
        (self.slots.list.iter())
            .filter(|s| s.holder.identity != self.identity || Some(s.slot) == mine)
            .map(|s| view(s.slot, s.mode, &s.holder))
            .collect()
    }

    /// Invariant 3: leading means the elector decided so *and* the deadline has not passed now.
    pub fn is_leader_at(&self, now: Instant) -> bool {
        self.role == Role::Leader && self.claim.is_some_and(|c| now < c.deadline)
    }

    /// The remaining own claim, if this candidate leads at `now`.
    pub fn remaining_at(&self, now: Instant) -> Option<Duration> {
        if !self.is_leader_at(now) {
            return None;
        }
        self.claim
            .map(|c| c.deadline.saturating_duration_since(now))
    }

    /// Whether what we last heard from the backend is recent enough to report.
    fn is_fresh_at(&self, now: Instant) -> bool {
        self.heard_at
            .is_some_and(|(at, _)| now.saturating_duration_since(at) <= self.stale_after)
    }

    /// The role as it may be reported at `now`: a leader past its deadline, or a
    /// follower that has not heard from the backend for a TTL, knows nothing for sure.
    pub fn role_at(&self, now: Instant) -> Role {
        match self.role {
            Role::Leader if self.is_leader_at(now) => Role::Leader,
            Role::Leader => Role::Unknown,
            role if self.is_fresh_at(now) => role,
            _ => Role::Unknown,
        }
    }

    /// The holder as it may be reported at `now` (none when stale or unknown).
    pub fn holder_at(&self, now: Instant) -> Option<&Holder> {
        match self.role_at(now) {
            Role::Unknown => None,
            _ => self.holder.as_ref(),
        }
    }

    pub fn view_at(&self, now: Instant) -> StatusView {
        let state = self.role_at(now);
        let holder = self.holder_at(now);
        StatusView {
            election: self.election.clone(),
            identity: self.identity.clone(),
            backend: self.backend,
            state,
            is_leader: self.is_leader_at(now),
            leader: holder.map(|h| h.identity.clone()),
            fencing_token: holder.and_then(|h| h.token),
            leader_since: holder.and(self.holder_since).map(rfc3339),
            lease_expires_in_ms: self
                .remaining_at(now)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            observed_at: self.heard_at.map(|(_, wall)| rfc3339(wall)),
            transitions: self.transitions,
            slot: self.slot_at(now),
            slots: self.slots.count(),
            mode: self.mode,
            holders: self.holders_at(now),
            hash_range: self.slot_at(now).map(|slot| {
                let (start, end) = hash_range(slot, self.slots.count());
                HashRange {
                    start: start.to_string(),
                    end: end.to_string(),
                }
            }),
        }
    }
}

/// Formats a wall-clock time as RFC 3339 in UTC with millisecond precision.
/// True when `identity` can name a candidate: 1 to 253 characters, no control
/// characters and no '|' (the transition log's separator).
pub fn identity_is_usable(identity: &str) -> bool {
    !identity.is_empty()
        && identity.len() <= 253
        && !identity.chars().any(|c| c.is_control() || c == '|')
}

pub fn rfc3339(t: SystemTime) -> String {
    let odt = time::OffsetDateTime::from(t);
    let odt = odt
        .replace_nanosecond(odt.millisecond() as u32 * 1_000_000)
        .unwrap_or(odt);
    odt.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leading(deadline: Instant) -> Status {
        let mut s = Status::new("e", "me", "file", Duration::from_secs(15));
        s.role = Role::Leader;
        s.claim = Some(Claim {
            deadline,
            token: 7,
            since: SystemTime::now(),
        });
        s.holder = Some(Holder {
            identity: "me".into(),
            token: Some(7),
        });
        s.heard_at = Some((Instant::now(), SystemTime::now()));
        s
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_past_its_deadline_answers_no_even_if_nobody_cleared_the_role() {
        let now = Instant::now();
        let s = leading(now + Duration::from_secs(1));
        assert!(s.is_leader_at(now));
        let later = now + Duration::from_secs(1);
        assert!(!s.is_leader_at(later));
        let v = s.view_at(later);
        assert_eq!(v.state, Role::Unknown);
        assert!(!v.is_leader);
        assert_eq!(v.leader, None);
        assert_eq!(v.lease_expires_in_ms, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_that_has_not_heard_for_a_ttl_reports_unknown() {
        let now = Instant::now();
        let mut s = Status::new("e", "me", "redis", Duration::from_secs(2));
        s.role = Role::Follower;
        s.holder = Some(Holder {
            identity: "other".into(),
            token: Some(3),
        });
        s.heard_at = Some((now, SystemTime::now()));
        assert_eq!(s.view_at(now).leader.as_deref(), Some("other"));
        let v = s.view_at(now + Duration::from_secs(3));
        assert_eq!(v.state, Role::Unknown);
        assert_eq!(v.leader, None);
        assert_eq!(v.fencing_token, None);
    }

    #[test]
    fn rfc3339_is_utc_with_millis() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123Z");
    }
}
