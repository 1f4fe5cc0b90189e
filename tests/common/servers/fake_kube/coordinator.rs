//! The API server's own coordinator of KEP-4355 (coordinated leader election), as
//! kube-apiserver 1.33 runs it with `--feature-gates=CoordinatedLeaderElection=true`
//! (`pkg/controlplane/controller/leaderelection`): a port of its
//! `reconcileElectionStep`, step for step, so that what our sidecars meet here is what
//! they meet on a real server.
//!
//! For a Lease that has LeaseCandidates (`spec.leaseName`, renewed within 30 min):
//! - an election is needed when the Lease is missing, expired (`renewTime +
//!   leaseDurationSeconds` before now, by the server's clock) or has no holder, when a
//!   candidate has not renewed for 15 min, or when the best candidate is not the holder;
//! - candidates not renewed for 5 s are pinged (`pingTime`); the vote waits until each
//!   pinged one acked (`renewTime >= pingTime`) or 5 s passed;
//! - the best acked candidate (oldest `emulationVersion`, then `binaryVersion`, then the
//!   oldest object) is written as `holderIdentity` of a missing, empty or expired Lease
//!   (`leaseDurationSeconds: 5`, `renewTime` now, no `acquireTime`, no
//!   `preferredHolder`), or as `preferredHolder` of a Lease another holds; `strategy` is
//!   set when it differs.
//! - It runs on every change of a Lease or LeaseCandidate (an ack wakes it), and again
//!   5 s after each step that asks for it, as the real workqueue requeues.
//!
//! A Lease with `strategy` and no `holderIdentity` at all makes the real coordinator
//! dereference nil and kube-apiserver 1.33.3 crash: here it stops coordinating and
//! [`super::FakeKube::coordinator_crashed`] says so.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::lease_rules::admit_lease;
use super::store::{write, Shared, Store};

const REQUEUE: Duration = Duration::from_secs(5);
const ELECTION: SignedDuration = SignedDuration::from_secs(5);
const CANDIDATE_VALID: SignedDuration = SignedDuration::from_secs(30 * 60);
const HOLDER_SECONDS: i64 = 5;

/// (namespace, Lease name)
type Key = (String, String);

/// The controller's workqueue: keys to reconcile now, and keys added "after" a delay
/// (the earliest such time per key; an immediate add does not cancel it, as in
/// client-go's delaying queue).
#[derive(Default)]
struct Queue {
    now: std::collections::BTreeSet<Key>,
    later: BTreeMap<Key, Instant>,
}

impl Queue {
    fn add_after(&mut self, key: Key, after: Duration) {
        let at = Instant::now() + after;
        let e = self.later.entry(key).or_insert(at);
        *e = (*e).min(at);
    }

    /// Moves the delayed keys whose time came to `now`.
    fn ripen(&mut self) {
        let t = Instant::now();
        let ripe: Vec<Key> = self
            .later
            .iter()
            .filter(|(_, at)| **at <= t)
            .map(|(k, _)| k.clone())
            .collect();
        for k in ripe {
            self.later.remove(&k);
            self.now.insert(k);
        }
    }
}

/// Runs until the fake stops (the task is dropped with its runtime).
pub(super) async fn run(shared: Arc<Shared>) {
    let mut changes = shared.changes.subscribe();
    let mut queue = Queue::default();
    {
        let store = shared.store.lock().expect("store");
        queue.now.extend(candidate_keys(&store));
    }
    loop {
        queue.ripen();
        while let Some(key) = queue.now.pop_first() {
            if shared
                .coordinator_crashed
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                return;
            }
            if let Some(after) = step(&shared, &key) {
                queue.add_after(key, after);
            }
            // Changes the step made (or others made meanwhile) wake their keys.
            while let Ok(c) = changes.try_recv() {
                enqueue(&mut queue, c.kind, &c.key.0, &c.object);
            }
        }
        let next = queue.later.values().min().copied();
        let change = match next {
            Some(at) => tokio::select! {
                c = changes.recv() => Some(c),
                _ = tokio::time::sleep_until(at) => None,
            },
            None => Some(changes.recv().await),
        };
        match change {
            Some(Ok(c)) => enqueue(&mut queue, c.kind, &c.key.0, &c.object),
            Some(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) | None => {}
            Some(Err(_)) => return,
        }
    }
}

/// The Lease names of every LeaseCandidate stored (the real controller's start).
fn candidate_keys(store: &Store) -> Vec<Key> {
    store
        .objects
        .iter()
        .filter(|((kind, _, _), _)| *kind == "leasecandidates")
        .filter_map(|((_, ns, _), lc)| {
            Some((ns.clone(), lc["spec"]["leaseName"].as_str()?.to_owned()))
        })
        .collect()
}

/// `enqueueLease` / `enqueueCandidate`: a change wakes the election of its Lease now,
/// but for a candidate that is waiting to ack a ping.
fn enqueue(queue: &mut Queue, kind: &str, ns: &str, obj: &Value) {
    let name = match kind {
        "leases" => obj["metadata"]["name"].as_str(),
        "leasecandidates" => {
            let (ping, renew) = (
                time(&obj["spec"]["pingTime"]),
                time(&obj["spec"]["renewTime"]),
            );
            if matches!((ping, renew), (Some(p), Some(r)) if r < p) {
                return;
            }
            obj["spec"]["leaseName"].as_str()
        }
        _ => None,
    };
    if let Some(name) = name {
        queue.now.insert((ns.to_owned(), name.to_owned()));
    }
}

fn time(v: &Value) -> Option<Timestamp> {
    v.as_str()?.parse().ok()
}

fn micro(t: Timestamp) -> Value {
    let us = Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t);
    json!(us.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string())
}

/// A semantic version as `semver.ParseTolerant` reads it (a leading `v`, missing
/// minor or patch as 0); `None` when it is none.
fn version(v: &Value) -> Option<(u64, u64, u64)> {
    let s = v.as_str()?.trim().trim_start_matches('v');
    let core = s.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>());
    let major = parts.next()?.ok()?;
    let minor = parts.next().transpose().ok()?.unwrap_or(0);
    let patch = parts.next().transpose().ok()?.unwrap_or(0);
    parts.next().is_none().then_some((major, minor, patch))
}

/// `compare`: the candidate the coordinator prefers first.
fn better(a: &Value, b: &Value) -> bool {
    let ev = |c: &Value| version(&c["spec"]["emulationVersion"]).unwrap_or_default();
    let bv = |c: &Value| version(&c["spec"]["binaryVersion"]).unwrap_or_default();
    let created = |c: &Value| time(&c["metadata"]["creationTimestamp"]);
    match ev(a).cmp(&ev(b)).then(bv(a).cmp(&bv(b))) {
        std::cmp::Ordering::Equal => created(a) <= created(b),
        o => o == std::cmp::Ordering::Less,
    }
}

/// `pickBestLeaderOldestEmulationVersion`.
fn electee(candidates: &[Value]) -> Option<&Value> {
    let valid = |c: &&Value| {
        version(&c["spec"]["emulationVersion"]).is_some()
            && version(&c["spec"]["binaryVersion"]).is_some()
    };
    candidates
        .iter()
        .filter(valid)
        .fold(None, |best, c| match best {
            Some(b) if better(b, c) => Some(b),
            _ => Some(c),
        })
}

/// `pickBestStrategy`: the strategy of the highest binary version (`None` when two
/// candidates of that version disagree).
fn best_strategy(candidates: &[Value]) -> Option<String> {
    let bv = |c: &Value| version(&c["spec"]["binaryVersion"]).unwrap_or_default();
    let first = candidates.first()?;
    let (mut strategy, mut highest) = (first["spec"]["strategy"].as_str()?.to_owned(), bv(first));
    for c in &candidates[1..] {
        let s = c["spec"]["strategy"].as_str().unwrap_or("");
        match highest.cmp(&bv(c)) {
            std::cmp::Ordering::Less => {
                strategy = s.to_owned();
                highest = bv(c);
            }
            std::cmp::Ordering::Equal if s != strategy => return None,
            _ => {}
        }
    }
    Some(strategy)
}

fn lease_expired(lease: &Value, now: Timestamp) -> bool {
    let (Some(renew), Some(secs)) = (
        time(&lease["spec"]["renewTime"]),
        lease["spec"]["leaseDurationSeconds"].as_i64(),
    ) else {
        return true;
    };
    renew + SignedDuration::from_secs(secs) < now
}

/// One `reconcileElectionStep` of Lease `key`; when to run again (None: on the next
/// change only).
fn step(shared: &Shared, key: &Key) -> Option<Duration> {
    let now = Timestamp::now();
    let mut store = shared.store.lock().expect("store");
    let candidates: Vec<Value> = store
        .objects
        .iter()
        .filter(|((kind, ns, _), lc)| {
            *kind == "leasecandidates" && *ns == key.0 && lc["spec"]["leaseName"] == key.1.as_str()
        })
        .map(|(_, lc)| lc.clone())
        .filter(|lc| time(&lc["spec"]["renewTime"]).is_some_and(|r| r + CANDIDATE_VALID >= now))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let lease = store
        .objects
        .get(&("leases", key.0.clone(), key.1.clone()))
        .cloned();
    if !election_needed(lease.as_ref(), &candidates, now) {
        return Some(REQUEUE);
    }
    if !ping_or_vote(shared, &mut store, &candidates, now) {
        return Some(REQUEUE);
    }
    let acked: Vec<Value> = candidates
        .into_iter()
        .filter(|c| time(&c["spec"]["renewTime"]).is_some_and(|r| r + ELECTION > now))
        .collect();
    let strategy = best_strategy(&acked)?;
    let holder = (strategy == "OldestEmulationVersion")
        .then(|| electee(&acked))
        .flatten()
        .and_then(|c| c["metadata"]["name"].as_str().map(str::to_owned));
    elect(shared, &mut store, key, lease, &strategy, holder, now)
}

/// `electionNeeded`.
fn election_needed(lease: Option<&Value>, candidates: &[Value], now: Timestamp) -> bool {
    let Some(lease) = lease else {
        return true;
    };
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or("");
    if lease_expired(lease, now) || holder.is_empty() {
        return true;
    }
    let stale = candidates
        .iter()
        .any(|c| time(&c["spec"]["renewTime"]).is_some_and(|r| r + CANDIDATE_VALID / 2 < now));
    if stale {
        return true;
    }
    if best_strategy(candidates).as_deref() != Some("OldestEmulationVersion") {
        return false;
    }
    electee(candidates).is_some_and(|e| e["metadata"]["name"] != holder)
}

/// The ping round of `reconcileElectionStep`: true when the vote may go on now.
fn ping_or_vote(shared: &Shared, store: &mut Store, candidates: &[Value], now: Timestamp) -> bool {
    let mut can_vote = true;
    for c in candidates {
        let ping = time(&c["spec"]["pingTime"]);
        let renew = time(&c["spec"]["renewTime"]);
        let waiting = matches!((ping, renew), (Some(p), Some(r)) if p + ELECTION > now && r < p);
        if waiting {
            can_vote = false;
            continue;
        }
        if renew.is_some_and(|r| r + ELECTION > now) {
            continue;
        }
        let acked_last = matches!((ping, renew), (Some(p), Some(r)) if r >= p);
        let ping_again = match ping {
            None => true,
            Some(p) => p + ELECTION < now && acked_last,
        };
        if ping_again {
            let mut pinged = c.clone();
            pinged["spec"]["pingTime"] = micro(now);
            let (ns, name) = (
                c["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                c["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            );
            write(
                shared,
                store,
                "leasecandidates",
                &ns,
                &name,
                pinged,
                "MODIFIED",
            );
            can_vote = false;
        }
    }
    can_vote
}

/// The vote's write: create the Lease, or update its holder or `preferredHolder`.
fn elect(
    shared: &Shared,
    store: &mut Store,
    key: &Key,
    lease: Option<Value>,
    strategy: &str,
    holder: Option<String>,
    now: Timestamp,
) -> Option<Duration> {
    let Some(existing) = lease else {
        let mut spec = json!({
            "strategy": strategy, "leaseDurationSeconds": HOLDER_SECONDS, "renewTime": micro(now),
        });
        if let Some(h) = &holder {
            spec["holderIdentity"] = json!(h);
        }
        let obj = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": key.1, "namespace": key.0}, "spec": spec,
        });
        write(shared, store, "leases", &key.0, &key.1, obj, "ADDED");
        return Some(REQUEUE);
    };
    let mut updated = existing.clone();
    let spec = &mut updated["spec"];
    let current = existing["spec"]["holderIdentity"].as_str();
    let expired = lease_expired(&existing, now);
    if expired && holder.is_some() && current.is_none() {
        // `*existing.Spec.HolderIdentity` on a nil pointer: the real server crashes.
        shared
            .coordinator_crashed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        return None;
    }
    let no_holder = holder.is_some() && current.is_none_or(str::is_empty);
    let expired_new = expired && holder.is_some() && current != holder.as_deref();
    let different = holder.is_some() && current != holder.as_deref();
    if spec["strategy"].as_str() != Some(strategy) {
        spec["strategy"] = json!(strategy);
    }
    if no_holder || expired_new {
        if let Some(fields) = spec.as_object_mut() {
            fields.remove("preferredHolder");
            fields.remove("acquireTime");
        }
        spec["holderIdentity"] = json!(holder);
        spec["renewTime"] = micro(now);
        spec["leaseDurationSeconds"] = json!(HOLDER_SECONDS);
    } else if different {
        spec["preferredHolder"] = json!(holder);
    }
    if updated == existing {
        return Some(REQUEUE);
    }
    if admit_lease(true, &key.1, Some(&existing), &mut updated).is_err() {
        return None;
    }
    write(shared, store, "leases", &key.0, &key.1, updated, "MODIFIED");
    Some(REQUEUE)
}
