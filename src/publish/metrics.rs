//! Prometheus metrics of DESIGN §5.
//!
//! Counters and histograms are fed by the elector through [`Observer`]; the gauges
//! that say who leads (`is_leader`, `lease_remaining_seconds`, `fencing_token`) are
//! computed from `Status` at scrape time, with the same deadline check as every other
//! answer (invariant 3), so a scrape of a paused-and-woken process never says 1.
//!
//! Beside them, without our prefix, the two series client-go's and controller-runtime's
//! leader election export, so dashboards and alerts built for those work unchanged:
//! - `leader_election_master_status{name="<election>"}`: 1 while this candidate leads
//!   (the same deadline check as `leasekeeper_is_leader`), else 0.
//! - `leader_election_slowpath_total{name="<election>"}`: client-go counts each renewal
//!   whose optimistic update (a write from the Lease it cached) failed, so that it fell
//!   back to a GET and a second write. Ours counts the same event, reported by the
//!   backend through [`SlowPaths`]: a renew refused with a conflict and retried after a
//!   read of the record (the Kubernetes Lease; the other stores renew with one
//!   compare-and-act request and no cached copy, so they stay at 0).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::backend::SlowPaths;
use crate::elector::Observer;
use crate::status::{Role, Status};

type Labels = Vec<(&'static str, &'static str)>;

pub struct Metrics {
    registry: Registry,
    is_leader: Gauge,
    transitions: Family<Labels, Counter>,
    acquire_duration: Histogram,
    renew_total: Family<Labels, Counter>,
    renew_duration: Histogram,
    lease_remaining: Gauge<f64, AtomicU64>,
    backend_errors: Family<Labels, Counter>,
    fencing_token: Gauge,
    pod_label_patch: Family<Labels, Counter>,
    state: Family<Labels, Gauge>,
    /// client-go's names, without our prefix.
    drop_in: DropIn,
    per_slot: PerSlot,
}

/// One series per slot of the election (`--holders`; one slot, `slot="0"`, by default).
struct PerSlot {
    /// This candidate's own slot, while it leads.
    held: Family<Vec<(&'static str, String)>, Gauge>,
    /// The fencing token of each slot's holder as last observed (0 when unknown).
    token: Family<Vec<(&'static str, String)>, Gauge>,
    count: Gauge,
}

impl PerSlot {
    fn new(registry: &mut Registry) -> PerSlot {
        let per_slot = PerSlot {
            held: Family::default(),
            token: Family::default(),
            count: Gauge::default(),
        };
        registry.register(
            "slots",
            "Number of slots of the election (--holders)",
            per_slot.count.clone(),
        );
        registry.register(
            "slot_held",
            "1 for the slot this candidate leads in (checked against its deadline), 0 for the others",
            per_slot.held.clone(),
        );
        registry.register(
            "slot_fencing_token",
            "Fencing token of each slot's holder as last observed (0 when unknown)",
            per_slot.token.clone(),
        );
        per_slot
    }

    fn update(&self, status: &Status, now: Instant) {
        let count = status.slots.count();
        self.count.set(i64::from(count));
        let mine = status.slot_at(now);
        let holders = status.holders_at(now);
        for slot in 0..count {
            let label = vec![("slot", slot.to_string())];
            self.held
                .get_or_create(&label)
                .set(i64::from(mine == Some(slot)));
            let token = (holders.iter())
                .find(|h| h.slot == slot)
                .and_then(|h| h.fencing_token)
                .unwrap_or(0);
            self.token
                .get_or_create(&label)
                .set(i64::try_from(token).unwrap_or(i64::MAX));
        }
    }
}

/// `leader_election_master_status` and `leader_election_slowpath_total`.
struct DropIn {
    registry: Registry,
    master_status: Family<Vec<(&'static str, String)>, Gauge>,
    slowpath: Family<Vec<(&'static str, String)>, Counter>,
    name: String,
    slow_paths: SlowPaths,
}

impl DropIn {
    fn new(election: &str, slow_paths: SlowPaths) -> DropIn {
        let mut registry = Registry::default();
        let master_status = Family::<Vec<(&'static str, String)>, Gauge>::default();
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            master_status.clone(),
        );
        let slowpath = Family::<Vec<(&'static str, String)>, Counter>::default();
        registry.register(
            "leader_election_slowpath",
            "Total number of slow path exercised in renewing leader leases. 'name' is the string used to identify the lease.",
            slowpath.clone(),
        );
        let name = election.to_owned();
        let _ = master_status.get_or_create(&vec![("name", name.clone())]);
        let _ = slowpath.get_or_create(&vec![("name", name.clone())]);
        DropIn {
            registry,
            master_status,
            slowpath,
            name,
            slow_paths,
        }
    }

    fn update(&self, leading: bool) {
        let labels = vec![("name", self.name.clone())];
        self.master_status
            .get_or_create(&labels)
            .set(i64::from(leading));
        let counter = self.slowpath.get_or_create(&labels);
        let seen = self.slow_paths.get();
        if seen > counter.get() {
            counter.inc_by(seen - counter.get());
        }
    }
}

impl Metrics {
    /// Our metrics for a candidate of `election` on `backend`; `slow_paths` is the
    /// backend's count of renewals that fell back to a read.
    pub fn new(backend: &'static str, election: &str, slow_paths: SlowPaths) -> Self {
        let mut registry = Registry::with_prefix("leasekeeper");
        let is_leader = Gauge::default();
        registry.register(
            "is_leader",
            "1 while this candidate leads (checked against its deadline at scrape time)",
            is_leader.clone(),
        );
        let transitions = Family::<Labels, Counter>::default();
        registry.register(
            "leader_transitions",
            "Tenure changes of this candidate, by direction",
            transitions.clone(),
        );
        let acquire_duration = Histogram::new(exponential_buckets(0.001, 4.0, 12));
        registry.register(
            "acquire_duration_seconds",
            "From starting to campaign to becoming leader",
            acquire_duration.clone(),
        );
        let renew_total = Family::<Labels, Counter>::default();
        registry.register("renew", "Renew attempts, by result", renew_total.clone());
        let renew_duration = Histogram::new(exponential_buckets(0.0001, 4.0, 10));
        registry.register(
            "renew_duration_seconds",
            "Renew round trip",
            renew_duration.clone(),
        );
        let lease_remaining = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "lease_remaining_seconds",
            "Own remaining claim while leader, 0 otherwise",
            lease_remaining.clone(),
        );
        let backend_errors = Family::<Labels, Counter>::default();
        registry.register(
            "backend_errors",
            "Failed backend operations, by operation",
            backend_errors.clone(),
        );
        let fencing_token = Gauge::default();
        registry.register(
            "fencing_token",
            "Fencing token of the current holder's tenure (0 when unknown)",
            fencing_token.clone(),
        );
        let pod_label_patch = Family::<Labels, Counter>::default();
        registry.register(
            "pod_label_patch",
            "Pod label updates, by result",
            pod_label_patch.clone(),
        );
        let state = Family::<Labels, Gauge>::default();
        registry.register(
            "state",
            "1 for this candidate's state as GET /leader reports it (leader, follower, candidate, unknown), 0 for the others",
            state.clone(),
        );
        let build_info = Family::<Labels, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the labels say what runs",
            build_info.clone(),
        );
        build_info
            .get_or_create(&vec![
                ("version", env!("CARGO_PKG_VERSION")),
                ("backend", backend),
            ])
            .set(1);
        // Pre-create the label values so every series is there from the first scrape.
        for direction in ["acquired", "lost", "released"] {
            let _ = transitions.get_or_create(&vec![("direction", direction)]);
        }
        for result in ["ok", "error"] {
            let _ = renew_total.get_or_create(&vec![("result", result)]);
            let _ = pod_label_patch.get_or_create(&vec![("result", result)]);
        }
        for op in ["campaign", "renew", "release"] {
            let _ = backend_errors.get_or_create(&vec![("op", op)]);
        }
        let per_slot = PerSlot::new(&mut registry);
        Metrics {
            per_slot,
            registry,
            is_leader,
            transitions,
            acquire_duration,
            renew_total,
            renew_duration,
            lease_remaining,
            backend_errors,
            fencing_token,
            pod_label_patch,
            state,
            drop_in: DropIn::new(election, slow_paths),
        }
    }

    /// The text exposition, with the leader gauges computed from `status` at `now`.
    pub fn render(&self, status: &Status, now: Instant) -> String {
        self.is_leader.set(i64::from(status.is_leader_at(now)));
        self.lease_remaining
            .set(status.remaining_at(now).map_or(0.0, |d| d.as_secs_f64()));
        let token = status.holder_at(now).and_then(|h| h.token).unwrap_or(0);
        self.fencing_token
            .set(i64::try_from(token).unwrap_or(i64::MAX));
        let role = status.role_at(now);
        for r in [Role::Leader, Role::Follower, Role::Candidate, Role::Unknown] {
            self.state
                .get_or_create(&vec![("state", r.as_str())])
                .set(i64::from(r == role));
        }
        self.drop_in.update(status.is_leader_at(now));
        self.per_slot.update(status, now);
        let mut out = String::new();
        let encoded = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &self.drop_in.registry))
            .and_then(|()| encode_eof(&mut out));
        if encoded.is_err() {
            out.clear();
        }
        out
    }

    /// Counts one Pod label update (used by the Pod labeler).
    pub fn pod_label_patched(&self, result: &'static str) {
        self.pod_label_patch
            .get_or_create(&vec![("result", result)])
            .inc();
    }
}

impl Observer for Metrics {
    fn acquired(&self, campaign_took: Duration) {
        self.transitions
            .get_or_create(&vec![("direction", "acquired")])
            .inc();
        self.acquire_duration.observe(campaign_took.as_secs_f64());
    }

    fn lost(&self) {
        self.transitions
            .get_or_create(&vec![("direction", "lost")])
            .inc();
    }

    fn released(&self) {
        self.transitions
            .get_or_create(&vec![("direction", "released")])
            .inc();
    }

    fn renewed(&self, ok: bool, took: Duration) {
        let result = if ok { "ok" } else { "error" };
        self.renew_total
            .get_or_create(&vec![("result", result)])
            .inc();
        if ok {
            self.renew_duration.observe(took.as_secs_f64());
        }
    }

    fn backend_error(&self, op: &'static str) {
        self.backend_errors.get_or_create(&vec![("op", op)]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{Claim, Holder};
    use std::time::SystemTime;

    #[tokio::test(start_paused = true)]
    async fn every_design_metric_is_exposed_and_leader_gauges_follow_the_deadline() {
        let slow = SlowPaths::default();
        let m = Metrics::new("file", "e", slow.clone());
        slow.add();
        m.acquired(Duration::from_millis(3));
        m.renewed(true, Duration::from_millis(1));
        m.backend_error("renew");
        let now = Instant::now();
        let mut s = Status::new("e", "me", "file", Duration::from_secs(15));
        s.role = Role::Leader;
        s.claim = Some(Claim {
            deadline: now + Duration::from_secs(2),
            token: 11,
            since: SystemTime::now(),
        });
        s.holder = Some(Holder {
            identity: "me".into(),
            token: Some(11),
        });
        s.heard_at = Some((now, SystemTime::now()));
        let text = m.render(&s, now);
        for name in [
            "leasekeeper_is_leader 1",
            "leasekeeper_leader_transitions_total{direction=\"acquired\"} 1",
            "leasekeeper_leader_transitions_total{direction=\"lost\"} 0",
            "leasekeeper_acquire_duration_seconds_count 1",
            "leasekeeper_renew_total{result=\"ok\"} 1",
            "leasekeeper_renew_duration_seconds_count 1",
            "leasekeeper_lease_remaining_seconds 2",
            "leasekeeper_backend_errors_total{op=\"renew\"} 1",
            "leasekeeper_fencing_token 11",
            "leasekeeper_pod_label_patch_total{result=\"ok\"} 0",
            "leasekeeper_build_info{version=",
            "leasekeeper_state{state=\"leader\"} 1",
            "leasekeeper_state{state=\"unknown\"} 0",
            "leader_election_master_status{name=\"e\"} 1",
            "leader_election_slowpath_total{name=\"e\"} 1",
        ] {
            assert!(text.contains(name), "missing {name:?} in\n{text}");
        }
        let later = m.render(&s, now + Duration::from_secs(2));
        assert!(
            later.contains("leader_election_master_status{name=\"e\"} 0"),
            "{later}"
        );
        assert_eq!(later.matches("# EOF").count(), 1, "{later}");
        assert!(later.contains("leasekeeper_is_leader 0"), "{later}");
        assert!(
            later.contains("leasekeeper_state{state=\"unknown\"} 1"),
            "{later}"
        );
        assert!(
            later.contains("leasekeeper_state{state=\"leader\"} 0"),
            "{later}"
        );
        assert!(
            later.contains("leasekeeper_lease_remaining_seconds 0"),
            "{later}"
        );
    }
}
