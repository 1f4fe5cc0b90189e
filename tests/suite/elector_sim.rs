//! The deterministic simulator of the elector: N copies of the real
//! `Machine` (src/elector/machine.rs) against simulated stores of each family, under
//! faults drawn from one seed, judged by an oracle in simulated real time; and an
//! exhaustive search over small bounds. See docs/safety.md, "The simulator".
//!
//! - `sweep`: the default sweep (`cargo test`, `make test`): [`DEFAULT_SEEDS`] seeds on
//!   every family.
//! - `big_sweep` (ignored; `make sim`): `LK_SIM_SEEDS` seeds (default 100,000) on every
//!   family.
//! - `replay`: `LK_SIM_SEED=<n> LK_SIM_FAMILY=<ttl|session|lease|redlock>` prints the
//!   full trace of one run (`LK_SIM_FAMILY=rw` too: the read-write lock of `--mode`;
//!   `slots`: two slots of `--holders 2`;
//!   `LK_SIM_FLAWS=deadline_from_reply,...` to replay a flawed
//!   machine).
//! - one test per known-wrong variant of the machine, each expecting its violation.

#[path = "../sim/mod.rs"]
mod sim;

use std::time::Instant;

use std::time::Duration;

use leasekeeper::elector::machine::Flaws;
use sim::client::Family;
use sim::explore::{explore, Bounds};
use sim::Sweep;

/// Seeds per family in the default sweep.
const DEFAULT_SEEDS: u64 = 1_000;

/// Seeds found by the simulator that once broke something (each a regression test):
/// (seed, family, what broke). The default sweep runs seeds 0.., these come on top. A
/// seed names a run of this simulator's fault mix; see docs/safety.md, "The simulator".
const REGRESSION_SEEDS: &[(u64, &str, &str)] = &[];

fn env_flaws() -> Flaws {
    let mut f = Flaws::default();
    for name in std::env::var("LK_SIM_FLAWS").unwrap_or_default().split(',') {
        match name.trim() {
            "deadline_from_reply" => f.deadline_from_reply = true,
            "no_drift" => f.no_drift = true,
            "trust_late_answers" => f.trust_late_answers = true,
            "no_sit_out" => f.no_sit_out = true,
            "" => {}
            other => panic!("LK_SIM_FLAWS: unknown flaw {other:?}"),
        }
    }
    f
}

#[test]
fn sweep() {
    let started = Instant::now();
    let s = Sweep::run(0..DEFAULT_SEEDS, &Family::ALL, Flaws::default(), 2);
    println!("{}", s.summary(started.elapsed()));
    s.assert_clean();
}

#[test]
#[ignore = "make sim: LK_SIM_SEEDS (default 100,000) seeds on every family"]
fn big_sweep() {
    let seeds: u64 = std::env::var("LK_SIM_SEEDS")
        .ok()
        .map(|s| {
            s.replace(['_', ','], "")
                .parse()
                .expect("LK_SIM_SEEDS: a number")
        })
        .unwrap_or(100_000);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    // LK_SIM_FAMILY narrows the sweep to one family (redlock5 too).
    let families: Vec<Family> = match std::env::var("LK_SIM_FAMILY") {
        Ok(f) => {
            vec![Family::parse(&f).expect(
                "LK_SIM_FAMILY: ttl, session, lease, redlock, redlock5, rw, slots or slots-session (or a known-wrong one, e.g. ttl-SendsNoFloor)",
            )]
        }
        Err(_) => Family::ALL.to_vec(),
    };
    let started = Instant::now();
    let s = Sweep::run(0..seeds, &families, env_flaws(), threads);
    println!("{}", s.summary(started.elapsed()));
    s.assert_clean();
}

#[test]
fn replay() {
    let Some(seed) = std::env::var("LK_SIM_SEED").ok() else {
        println!("set LK_SIM_SEED (and LK_SIM_FAMILY, LK_SIM_FLAWS) to replay one run");
        return;
    };
    let seed: u64 = seed.parse().expect("LK_SIM_SEED: a number");
    let fam = std::env::var("LK_SIM_FAMILY").unwrap_or_else(|_| "ttl".into());
    let fam = Family::parse(&fam)
        .expect("LK_SIM_FAMILY: ttl, session, lease, redlock, redlock5, rw or slots");
    let (outcome, trace) = sim::run(seed, fam, env_flaws(), true);
    for line in &trace {
        println!("{line}");
    }
    println!("{}", outcome.report());
}

#[test]
fn regression_seeds() {
    for &(seed, fam, what) in REGRESSION_SEEDS {
        let fam = Family::parse(fam).expect("a family");
        let (outcome, _) = sim::run(seed, fam, Flaws::default(), false);
        assert!(
            outcome.violations.is_empty(),
            "seed {seed} ({what}) again: {}",
            sim::explain(&outcome)
        );
    }
}

/// The bug of seed 2374 (lease, in `make sim`'s first 100,000 seeds; the seed maps to
/// another run since the congested link joined the fault mix, and no seed of the new
/// mix reproduces it in 100,000): a leader whose command was never proven gone kept the
/// lease, rightly, but answered `POST /release` with `released: true`, so the caller
/// expected a hand-over that came a ttl later. The same steps, on one machine; a machine
/// that answers `released: true` there fails it.
#[test]
fn a_release_kept_for_a_command_not_proven_gone_is_not_answered_released() {
    use leasekeeper::backend::Campaign;
    use leasekeeper::elector::machine::{Answer, Config, Effect, Event, Machine, Next, WaitOn};
    let mut m = Machine::new(Config {
        timing: sim::world::sim_timing(),
        exit_on_loss: false,
        publishers: false,
        must_stop: true,
        drain: None,
        seed: 1,
        flaws: Flaws::default(),
    });
    let ms = Duration::from_millis;
    let Next::Call { id, .. } = m.on(ms(0), Event::Start).next else {
        panic!("no campaign")
    };
    let answer = Answer::Campaign {
        result: Ok(Campaign::Acquired { token: 1 }),
        ttl: Duration::from_secs(1),
        lease: 0,
    };
    m.on(ms(1), Event::Answer { id, answer });
    let release = Event::ReleaseRequested {
        id: 7,
        cooldown: None,
    };
    let Next::Wait {
        until: Some(until),
        on: WaitOn::Stopped,
    } = m.on(ms(2), release).next
    else {
        panic!("not waiting for the command")
    };
    // The command is never proven gone: the lease is kept, and the answer says so.
    let step = m.on(until, Event::Timer);
    let reply = step.effects.iter().find_map(|e| match e {
        Effect::Reply { id: 7, released } => Some(*released),
        _ => None,
    });
    assert_eq!(reply, Some(false), "{:?}", step.effects);
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    for fam in Family::ALL {
        let (_, a) = sim::run(7, fam, Flaws::default(), true);
        let (_, b) = sim::run(7, fam, Flaws::default(), true);
        assert!(
            a.len() > 100,
            "{}: a trace of {} lines",
            fam.name(),
            a.len()
        );
        assert_eq!(a, b, "{}: two runs of seed 7 differ", fam.name());
    }
}

/// Runs the default sweep with `flaws` and expects `kind` among its violations.
fn caught(flaws: Flaws, kind: &str) {
    let s = Sweep::run(0..DEFAULT_SEEDS, &Family::ALL, flaws, 2);
    println!("{flaws:?}: {}", s.counts());
    let first = s
        .failures
        .iter()
        .find(|o| o.violations.iter().any(|v| v.kind() == kind));
    let Some(first) = first else {
        panic!(
            "{flaws:?}: the default sweep found no {kind}; {}",
            s.counts()
        );
    };
    println!("first: {}", sim::explain(first));
}

#[test]
fn a_deadline_counted_from_the_reply_is_caught() {
    caught(
        Flaws {
            deadline_from_reply: true,
            ..Flaws::default()
        },
        "overlap",
    );
}

#[test]
fn a_claim_without_the_drift_factor_is_caught() {
    caught(
        Flaws {
            no_drift: true,
            ..Flaws::default()
        },
        "overlap",
    );
}

#[test]
fn a_late_answer_trusted_as_a_renewal_is_caught() {
    caught(
        Flaws {
            trust_late_answers: true,
            ..Flaws::default()
        },
        "overlap",
    );
}

#[test]
fn a_release_without_sit_out_is_caught() {
    caught(
        Flaws {
            no_sit_out: true,
            ..Flaws::default()
        },
        "release-not-taken",
    );
}

/// The exhaustive search's bounds: `nodes` machines, one TTL-CAS store, ticks of a
/// quarter ttl up to 3 s, `depth` steps, at most one message dropped, one crash and
/// one release request.
fn bounds(nodes: usize, depth: usize) -> Bounds {
    Bounds {
        nodes,
        tick: Duration::from_millis(250),
        horizon: Duration::from_secs(3),
        depth,
        drops: 1,
        crashes: 1,
        releases: 1,
    }
}

fn exhaustive(b: Bounds, flaws: Flaws) -> sim::explore::Found {
    let started = Instant::now();
    let found = explore(b, flaws);
    println!(
        "{b:?} {flaws:?}: {} states, {} transitions, deepest {}, {:?}, {:.1} s",
        found.states,
        found.transitions,
        found.deepest,
        found.violation,
        started.elapsed().as_secs_f64()
    );
    found
}

#[test]
fn every_interleaving_of_two_machines_is_safe() {
    let found = exhaustive(bounds(2, 10), Flaws::default());
    assert_eq!(found.violation, None);
    assert!(found.states > 100_000, "only {} states", found.states);
}

#[test]
fn every_interleaving_of_three_machines_is_safe() {
    let found = exhaustive(bounds(3, 8), Flaws::default());
    assert_eq!(found.violation, None);
    assert!(found.states > 100_000, "only {} states", found.states);
}

#[test]
fn the_exhaustive_search_catches_a_deadline_counted_from_the_reply() {
    let flaws = Flaws {
        deadline_from_reply: true,
        ..Flaws::default()
    };
    let found = exhaustive(bounds(2, 10), flaws);
    let (what, depth) = found.violation.expect("a violation");
    assert!(what.contains("while"), "{what} after {depth} steps");
}

#[test]
#[ignore = "make sim: the exhaustive search to deeper bounds"]
fn every_interleaving_to_deeper_bounds_is_safe() {
    for b in [bounds(2, 12), bounds(3, 9)] {
        let found = exhaustive(b, Flaws::default());
        assert_eq!(found.violation, None);
    }
}

/// The read-write family's known-wrong rules (`--mode`): each caught by the default
/// sweep on that family alone, as an overlap of an exclusive claim and another.
#[test]
fn wrong_read_write_rules_are_caught() {
    use sim::store::RwRule;
    for rule in [RwRule::ReadersIgnoreWriters, RwRule::WritersIgnoreReaders] {
        caught_on(Family::Rw(rule), "overlap");
    }
}

/// Runs the default sweep on `family` alone (a known-wrong rule of its store's) and
/// expects `kind` among its violations.
fn caught_on(family: Family, kind: &str) {
    let s = Sweep::run(0..DEFAULT_SEEDS, &[family], Flaws::default(), 2);
    let first = s
        .failures
        .iter()
        .find(|o| o.violations.iter().any(|v| v.kind() == kind));
    let name = family.name();
    let first = first.unwrap_or_else(|| panic!("{name} not caught: {}", s.counts()));
    println!("{name}: {}; first: {}", s.counts(), sim::explain(first));
}

/// Runs `seeds` on `family` alone and counts the runs that show `kind`; prints the
/// count and the first such run explained.
fn catches(family: Family, seeds: u64, kind: &str) -> usize {
    let started = Instant::now();
    let s = Sweep::run(0..seeds, &[family], Flaws::default(), 2);
    let shows = |o: &&sim::Outcome| o.violations.iter().any(|v| v.kind() == kind);
    let caught: Vec<&sim::Outcome> = s.failures.iter().filter(shows).collect();
    let name = family.name();
    let took = started.elapsed().as_secs_f64();
    println!(
        "{name}: {kind} in {} of {seeds} seeds ({took:.1} s)",
        caught.len()
    );
    if let Some(first) = caught.first() {
        println!("first: {}", sim::explain(first));
    }
    caught.len()
}

/// The ZooKeeper store's core known-wrong in a follower's wait: a next in line whose
/// head went between its listing and its watch stays queued, watching nothing, until
/// its retry interval ends. The handover check (releases with candidates queued,
/// some soon after a claim) catches it as a release not taken within a stagger and a
/// few round trips.
#[test]
fn a_next_in_line_that_waits_on_a_gone_head_is_caught() {
    use leasekeeper::backend::zookeeper::driven;
    let flaws = driven::Flaws {
        head_gone_queues: true,
        ..driven::Flaws::default()
    };
    assert!(catches(Family::Session(flaws), 100, "handover-slow") > 0);
}

/// The ZooKeeper store's core known-wrong in a follower's wait: a follower further
/// back whose head went between its listing and its watch waits for its turn alone,
/// and names the old holder until its turn or its retry interval comes. The handover
/// check catches it as a queued candidate that did not name a new holder within a
/// stagger and a few round trips.
#[test]
fn a_follower_that_loses_its_heads_delete_is_caught() {
    use leasekeeper::backend::zookeeper::driven;
    let flaws = driven::Flaws {
        head_gone_unseen: true,
        ..driven::Flaws::default()
    };
    assert!(catches(Family::Session(flaws), 100, "news-late") > 0);
}

/// The Lease family decides through the Kubernetes store's own core
/// (`leasekeeper::backend::kubernetes::driven`); its known-wrong rule, a rival's Lease
/// taken as soon as it is seen instead of once it stood still for its duration, is
/// caught by the default sweep on that family alone, as an overlap.
#[test]
fn a_lease_taken_before_it_expired_is_caught() {
    use leasekeeper::backend::kubernetes::driven;
    let flaws = driven::Flaws {
        takes_unexpired: true,
    };
    caught_on(Family::Lease(flaws), "overlap");
}

/// The ZooKeeper store's core known-wrong on the session family: a next in line that
/// claims as soon as a listing shows it there, before the head's node goes, is caught
/// by the default sweep on that family alone, as an overlap.
#[test]
fn a_next_in_line_that_claims_before_the_head_goes_is_caught() {
    use leasekeeper::backend::zookeeper::driven;
    let flaws = driven::Flaws {
        next_in_line_claims: true,
        ..driven::Flaws::default()
    };
    caught_on(Family::Session(flaws), "overlap");
}

/// The etcd store's core known-wrong on the etcd session family: a next in line that
/// claims (after its refresh) as soon as a read shows it there, before the leader's
/// key goes, is caught by the default sweep on that family alone, as an overlap.
#[test]
fn an_etcd_next_in_line_that_claims_before_the_leader_goes_is_caught() {
    use leasekeeper::backend::etcd::driven;
    let flaws = driven::Flaws {
        next_in_line_claims: true,
    };
    caught_on(Family::EtcdSession(flaws), "overlap");
}

/// The Redis store's core known-wrong on the TTL family: a take that claims on the
/// value its answer carries (a holder's, when the take did not win) is caught by the
/// default sweep on that family alone, as an overlap.
#[test]
fn a_redis_take_that_claims_on_a_holders_value_is_caught() {
    use leasekeeper::backend::redis::driven;
    let flaws = driven::Flaws {
        claims_on_value: true,
        ..driven::Flaws::default()
    };
    caught_on(Family::Ttl(flaws), "overlap");
}

/// The Redis store's core known-wrong on the TTL family: a take that sends no floor
/// (the highest token seen) lets a server restarted without persistence count again
/// from 1 while the old claim may still run, unfenced; caught by the default sweep on
/// that family alone, as a token not above an earlier tenure's.
#[test]
fn a_redis_take_without_its_floor_is_caught() {
    use leasekeeper::backend::redis::driven;
    let flaws = driven::Flaws {
        sends_no_floor: true,
        ..driven::Flaws::default()
    };
    caught_on(Family::Ttl(flaws), "token");
}

/// The Redis store's core known-wrong on the TTL family: a renewal answered "not
/// ours" counted as kept, caught by the default sweep on that family alone as an
/// overlap (the server restarted without persistence answers the leader's renewals
/// so, and a take follows the placeholder's ttl; without that restart the machine's
/// own deadline ends the claim first).
#[test]
fn a_redis_renewal_not_ours_counted_as_kept_is_caught() {
    use leasekeeper::backend::redis::driven;
    let flaws = driven::Flaws {
        renewal_not_ours_kept: true,
        ..driven::Flaws::default()
    };
    caught_on(Family::Ttl(flaws), "overlap");
}

/// The Redlock store's core known-wrong on the Redlock family: half the nodes (one of
/// three) counted as a majority is caught by the default sweep on that family alone,
/// as an overlap.
#[test]
fn a_redlock_minority_counted_as_a_majority_is_caught() {
    use leasekeeper::backend::redlock::driven;
    let flaws = driven::Flaws {
        minority_quorum: true,
    };
    caught_on(Family::Redlock(3, flaws), "overlap");
}

/// The SQL store's core known-wrong on the SQL TTL family: a row held under our
/// identity adopted whatever its tenure id (a leftover of an earlier tenure, or of a
/// process before a restart) is caught by the default sweep on that family alone, as
/// an overlap.
#[test]
fn a_sql_row_adopted_by_identity_is_caught() {
    use leasekeeper::backend::sql::driven;
    let flaws = driven::Flaws {
        adopts_own_identity: true,
        ..driven::Flaws::default()
    };
    caught_on(Family::SqlTtl(flaws), "overlap");
}

/// The SQL store's core known-wrong on the SQL TTL family: a take that sends no floor,
/// caught by the default sweep on that family alone as a token that did not grow
/// (the lease and counter rows deleted, the next take starts again at 1).
#[test]
fn a_sql_take_without_its_floor_is_caught() {
    use leasekeeper::backend::sql::driven;
    let flaws = driven::Flaws {
        sends_no_floor: true,
        ..driven::Flaws::default()
    };
    caught_on(Family::SqlTtl(flaws), "token");
}

/// The slots family's known-wrong rules (`--holders`): each caught by the default
/// sweep on that family alone. The machine not told which slot answered compares
/// a slot's token with another's: a candidate that moves to a slot whose counter
/// is lower refuses it again and again, and the slot stays unclaimed after the
/// faults heal (`slots.rs`
/// `a_candidate_that_lost_a_slot_leads_another_with_its_lower_token` pins the same rule). Publishers
/// naming the slot asked first instead of the slot taken show two holders of one
/// slot.
#[test]
fn wrong_slot_rules_are_caught() {
    use sim::client::{SlotRule, SlotStore};
    for (rule, store, kind) in [
        (SlotRule::OneLease, SlotStore::Ttl, "slot-not-held"),
        (SlotRule::WrongSlotNamed, SlotStore::Ttl, "overlap"),
        (SlotRule::NoWithdraw, SlotStore::Session, "slot-not-held"),
    ] {
        caught_on(Family::Slots(rule, store), kind);
    }
}
