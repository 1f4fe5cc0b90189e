//! The rounds: the candidates (real sidecars, one slot each, respawned after a fault
//! that ends them), how a round finds its leader, and one round per fault.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::claims::{read_claims, LoggedClaim};
use super::outside::{Observation, Poller};
use super::{ElectionSpec, Extras, Fault, Report};
use crate::common::harness::faults::{FaultProxy, Link};
use crate::common::{eventually, harness::http, Sidecar};

pub(super) struct Election<'a> {
    pub(super) spec: ElectionSpec<'a>,
    pub(super) extras: Extras,
    /// slot → its proxies, one per store node (with `Extras::links`).
    pub(super) proxies: Vec<Vec<FaultProxy>>,
    /// CLOCK_MONOTONIC ns of each tampering.
    pub(super) tampered: Vec<u64>,
    /// pid → CLOCK_MONOTONIC ns just before it was sent SIGKILL: a dead process
    /// asserts nothing, so its claim ends there at the latest.
    pub(super) killed: HashMap<u64, u64>,
    /// pid → (CLOCK_MONOTONIC, CLOCK_REALTIME) ns just before it was spawned, under
    /// the clock-rate fault (see `FakeClock`).
    pub(super) spawned: HashMap<u64, (u64, u64)>,
    pub(super) dir: tempfile::TempDir,
    pub(super) slots: Vec<Sidecar>,
    pub(super) poller: Option<Poller>,
    pub(super) generation: usize,
    /// Set by a fault of the store itself: the next round first waits for the leader
    /// to renew (its client may still be reconnecting to the store, a release that
    /// cannot reach the store hands over only by expiry, and a store that changed its
    /// own leader may have extended the lease past its ttl).
    pub(super) store_faulted: bool,
    /// When the store was last killed and restarted: every connection to it broke, so
    /// the next handover first waits for every follower to have heard from the store
    /// since (its follow re-established, its watches open again).
    pub(super) store_restarted: Option<std::time::SystemTime>,
}

impl<'a> Election<'a> {
    /// A temp dir (kept with `LK_KEEP_TEST_DIRS`), the outside poller, and every
    /// candidate started and listening.
    pub(super) fn start(spec: ElectionSpec<'a>, extras: Extras) -> Election<'a> {
        let candidates = spec.candidates;
        let mut dir = tempfile::tempdir().expect("temp dir");
        if std::env::var_os("LK_KEEP_TEST_DIRS").is_some() {
            // Kept even when a round panics, for the post-mortem.
            dir.disable_cleanup(true);
            eprintln!("test dir: {}", dir.path().display());
        }
        let mut e = Election {
            spec,
            extras,
            proxies: Vec::new(),
            tampered: Vec::new(),
            dir,
            slots: Vec::new(),
            poller: None,
            generation: 0,
            store_faulted: false,
            store_restarted: None,
            killed: HashMap::new(),
            spawned: HashMap::new(),
        };
        e.poller = Some(Poller::start(candidates));
        for slot in 0..candidates {
            let s = e.spawn(slot);
            e.slots.push(s);
        }
        e
    }
}

impl Election<'_> {
    /// Stops polling, then every candidate with SIGTERM, each of which must exit 0;
    /// what was seen from outside.
    pub(super) fn every_candidate_stops_cleanly(&mut self) -> Vec<Observation> {
        let observations = self.poller.take().map(Poller::finish).unwrap_or_default();
        for s in self.slots.iter_mut() {
            let status = s.terminate(Duration::from_secs(5));
            assert!(
                status.is_some_and(|st| st.success()),
                "{} did not stop cleanly: {status:?}",
                s.name
            );
        }
        observations
    }

    /// Every candidate's tenures from the transition logs, in order of their start (a
    /// killed process's claim ends at its kill); printed with `LK_KEEP_TEST_DIRS`.
    pub(super) fn claims(&self) -> Vec<LoggedClaim> {
        let rate = self.extras.clock_rate;
        let to_host = |pid: u64, ns: u64| match (rate, self.spawned.get(&pid)) {
            (Some(rate), Some(&spawned)) => fake_to_host(rate, spawned, ns),
            _ => ns,
        };
        let claims = read_claims(
            self.dir.path(),
            self.spec.candidates,
            &self.killed,
            &to_host,
        );
        if std::env::var_os("LK_KEEP_TEST_DIRS").is_some() {
            for c in &claims {
                eprintln!("{c:?}");
            }
        }
        claims
    }

    pub(super) fn log_path(&self, slot: usize) -> PathBuf {
        self.dir.path().join(format!("slot-{slot}.jsonl"))
    }

    pub(super) fn spawn(&mut self, slot: usize) -> Sidecar {
        self.generation += 1;
        let mut args = self.spec.args.clone();
        if let Some(links) = &self.extras.links {
            while self.proxies.len() <= slot {
                self.proxies
                    .push(links.nodes.iter().map(|n| FaultProxy::start(*n)).collect());
            }
            let addrs: Vec<String> = self.proxies[slot].iter().map(|p| p.addr()).collect();
            args = (links.args)(&addrs);
        }
        args.extend([
            "--transition-log".to_owned(),
            self.log_path(slot).display().to_string(),
            "--enable-release-endpoint".to_owned(),
        ]);
        let name = format!("cand-{slot}-g{}", self.generation);
        if let Some(extra) = &self.extras.sidecar_args {
            args.extend(extra(&name));
        }
        let mut env = self.extras.sidecar_env.clone();
        if let Some(rate) = self.extras.clock_rate {
            assert!(
                std::path::Path::new(super::LIBFAKETIME).exists(),
                "the clock-rate fault needs libfaketime (scripts/install-test-deps)"
            );
            env.push(("LD_PRELOAD".to_owned(), super::LIBFAKETIME.to_owned()));
            env.push(("FAKETIME".to_owned(), format!("+0 x{rate}")));
        }
        let before = (leasekeeper::clock::monotonic_now_ns(), realtime_now_ns());
        let sidecar = Sidecar::spawn_with_env(&name, self.dir.path(), &args, &env);
        self.spawned.insert(u64::from(sidecar.pid), before);
        assert!(
            sidecar.wait_listening(Duration::from_secs(10)),
            "{name} never listened:\n{}",
            sidecar.stderr()
        );
        if let Some(p) = &self.poller {
            p.set(slot, Some(sidecar.port));
        }
        sidecar
    }

    pub(super) fn respawn(&mut self, slot: usize) {
        if let Some(p) = &self.poller {
            p.set(slot, None);
        }
        self.slots[slot].kill();
        let fresh = self.spawn(slot);
        self.slots[slot] = fresh;
    }

    /// The first live sidecar (other than `except`) that says it leads, within `limit`.
    /// A store whose leases
    /// restart when it changes its own consensus leader ([`ServerControl::leader_changes`])
    /// and changed it meanwhile gets `limit` again from then, up to three times: the
    /// bound holds for a store that keeps its leader.
    pub(super) fn find_leader(&self, except: Option<u16>, limit: Duration) -> Option<(usize, u64)> {
        let changes = || self.spec.server.as_deref().and_then(|s| s.leader_changes());
        let mut seen = changes();
        for _ in 0..4 {
            if let Some(found) = eventually(limit, || self.leader_other_than(except)) {
                return Some(found);
            }
            let now = changes();
            if now == seen {
                return None;
            }
            eprintln!("the store changed its own leader meanwhile ({seen:?} -> {now:?} changes seen): its leases restarted, the bound counts again");
            seen = now;
        }
        None
    }

    /// The first live sidecar (other than `except`) that says it leads, now.
    fn leader_other_than(&self, except: Option<u16>) -> Option<(usize, u64)> {
        self.slots.iter().enumerate().find_map(|(i, s)| {
            if !s.is_running() || Some(s.port) == except {
                return None;
            }
            let v = s.leader()?;
            (v["is_leader"] == true).then(|| (i, v["fencing_token"].as_u64().unwrap_or(0)))
        })
    }

    /// A leader, once every other running candidate reports it follows that leader.
    pub(super) fn settled(&self, limit: Duration) -> Option<(usize, u64)> {
        eventually(limit, || {
            let views: Vec<_> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.is_running())
                .map(|(i, s)| Some((i, s.leader()?)))
                .collect::<Option<_>>()?;
            let (li, lv) = views.iter().find(|(_, v)| v["is_leader"] == true)?;
            let all_follow = views.iter().all(|(i, v)| {
                i == li || (v["state"] == "follower" && v["leader"] == lv["identity"])
            });
            all_follow.then(|| (*li, lv["fencing_token"].as_u64().unwrap_or(0)))
        })
    }

    /// [`Self::settled`], once the leader's remaining claim was seen to grow (a renew
    /// answered by the store).
    pub(super) fn renewed(&self, limit: Duration) -> Option<(usize, u64)> {
        let mut last: Option<(usize, u64, u64)> = None;
        eventually(limit, || {
            let (li, token) = self.settled(Duration::ZERO)?;
            let left = self.slots[li].leader()?["lease_expires_in_ms"].as_u64()?;
            match last.replace((li, token, left)) {
                Some((i, t, before)) if (i, t) == (li, token) && left > before => Some((li, token)),
                _ => None,
            }
        })
    }

    /// Whether every running follower's last observation of the store (`observed_at`)
    /// is from `at` or later.
    fn followers_heard_since(&self, at: std::time::SystemTime) -> bool {
        self.slots.iter().filter(|s| s.is_running()).all(|s| {
            s.leader().is_some_and(|v| {
                let heard = v["observed_at"].as_str().map(humantime::parse_rfc3339);
                v["is_leader"] == true || heard.is_some_and(|h| h.is_ok_and(|h| h >= at))
            })
        })
    }

    /// Every candidate's view and log, for a failed round.
    pub(super) fn dump(&self) {
        for s in &self.slots {
            eprintln!("==== {}: {:?}\n{}", s.name, s.leader(), s.stderr());
        }
    }

    /// A liveness bound: when it failed, every candidate's view and log, then the panic.
    pub(super) fn must(&self, held: bool, what: std::fmt::Arguments) {
        if !held {
            self.dump();
            panic!("{what}");
        }
    }

    pub(super) fn nobody_leads(&self) -> Result<(), String> {
        for s in self.slots.iter().filter(|s| s.is_running()) {
            if let Some((200, _)) = http::get(s.port, "/is-leader") {
                return Err(format!("{} says it leads", s.name));
            }
        }
        Ok(())
    }

    /// Sets every link of one slot.
    pub(super) fn links(&self, slot: usize, link: impl Fn() -> Link) {
        for p in self.proxies.get(slot).into_iter().flatten() {
            p.set(link());
        }
    }

    /// Waits for a leader other than the one on `old_port`, and records how long it took.
    pub(super) fn takeover(
        &self,
        fault: Fault,
        old_port: u16,
        limit: Duration,
        report: &mut Report,
    ) -> Option<(usize, u64)> {
        let t0 = Instant::now();
        let new = self.find_leader(Some(old_port), limit);
        if new.is_some() {
            report
                .takeover_ms
                .entry(fault.name())
                .or_default()
                .push(t0.elapsed().as_secs_f64() * 1e3);
        }
        new
    }

    /// The crash bound: a new leader within ttl + 1 s of losing the old one.
    pub(super) fn crash_bound(&self) -> Duration {
        self.spec.ttl + Duration::from_secs(1)
    }

    /// One round: a leader stands, `fault` strikes, and what must follow it does.
    pub(super) fn round(&mut self, fault: Fault, report: &mut Report) {
        *report.faults.entry(fault.name()).or_default() += 1;
        let (li, token) = self.a_leader_stands_before(fault);
        let old_port = self.slots[li].port;
        self.store_faulted |= fault.strikes_the_store();
        match fault {
            Fault::Graceful => self.a_graceful_stop_hands_over_within_a_second(li, report),
            Fault::Kill9 => self.a_killed_leader_is_replaced_within_the_crash_bound(li, report),
            Fault::Release => self.a_release_hands_over_within_a_second(old_port, report),
            Fault::PauseLeader => {
                self.a_paused_leader_never_answers_for_its_old_tenure(li, token, report)
            }
            Fault::PauseServer => self.nobody_leads_while_the_store_is_paused(report),
            Fault::RestartServer => self.a_leader_is_back_after_the_store_restarts(token, report),
            Fault::PauseMinority => self.the_majority_elects_while_a_minority_hangs(li, report),
            Fault::RestartOneNode => self.a_leader_stays_while_one_node_restarts(report),
            Fault::PartitionLeader | Fault::LeaderRepliesHeld => {
                self.a_leader_cut_off_is_replaced(fault, li, report)
            }
            Fault::SlowLeader | Fault::CongestedLeader => {
                self.a_slowed_leader_is_replaced(fault, li, report)
            }
            Fault::MinorityCut => self.minorities_cut_leave_a_leader_and_a_handover(li, report),
            Fault::PartitionFollower => self.a_follower_cut_off_leaves_the_leader_be(li),
            Fault::TamperDelete | Fault::TamperOverwrite => {
                self.a_tampered_record_gives_way_to_a_greater_token(fault, token, report)
            }
            Fault::IsolateStoreNode => self.a_leader_stays_while_one_store_node_is_cut_off(report),
        }
    }

    /// The leader the round starts from, and its token. A handover in milliseconds is
    /// promised to followers that follow: after a store fault a candidate may still be
    /// backing off or sitting out, and the leader that released would then (rightly)
    /// take its lease back.
    /// The wait is the round's precondition, not a bound of the program's: after a
    /// fault a candidate may sit out or back off for a few ttl, longer on a loaded
    /// machine, so it allows 5 ttl and 10 s. A run that never gets there fails with
    /// every candidate's view and log.
    fn a_leader_stands_before(&mut self, fault: Fault) -> (usize, u64) {
        let limit = self.spec.ttl * 5 + Duration::from_secs(10);
        // After a fault of the store, every round starts from a claim renewed since: a
        // lease the store extended meanwhile (etcd, on a new raft leader) is renewed
        // to its plain ttl before a bound counts from it.
        let found = if std::mem::take(&mut self.store_faulted) {
            let restarted = self.store_restarted.take();
            let heard = restarted.is_none_or(|at| {
                eventually(limit, || self.followers_heard_since(at).then_some(())).is_some()
            });
            heard.then(|| self.renewed(limit)).flatten()
        } else if !matches!(fault, Fault::Graceful | Fault::Release) {
            self.find_leader(None, limit)
        } else {
            self.settled(limit)
        };
        found.unwrap_or_else(|| {
            self.dump();
            panic!("no leader with every other candidate following it (and, after a fault of the store, its claim renewed and, after a restart of the store, every follower heard from it since) before {fault:?}")
        })
    }
}

fn realtime_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A faked CLOCK_MONOTONIC reading of a process spawned at `spawned` (host monotonic
/// and realtime ns) under libfaketime at `rate`, on the host's monotonic clock.
/// libfaketime starts a faked monotonic clock at the wall-clock time of the process's
/// start and runs it at `rate`: fake = wall₀ + (host − mono₀) × rate.
fn fake_to_host(rate: f64, (mono0, wall0): (u64, u64), fake: u64) -> u64 {
    let since = fake as f64 - wall0 as f64;
    (mono0 as f64 + since / rate).max(0.0) as u64
}
