//! The checker's self-tests against misbehaving sidecars: for each fault kind, one
//! round with sidecars (debug builds of the real binary) switched to misbehave
//! (`src/sabotage.rs`), and the checker must fail the run for two leaders, seen from
//! outside, in the claim logs or against the store.
//!
//! Two misbehaviours cover the kinds: an *overclaim* (claim 2 s past the deadline, and
//! on every end of a tenure give the lease back first and claim 2 s more), for every
//! fault that moves the lease; and a *claim on error* (a failed campaign counts as won)
//! for the faults that cut a follower or a store node off while the leader stays.
//! Under kill -9 the victim cannot act at all; what the others do then is a takeover
//! like the ones above, and a takeover the store never granted is the recorder's own
//! self-test (`a_claim_the_store_never_granted_fails`). A restarted Redlock node while
//! the leader stays gives no misbehaving sidecar anything to do differently.

use crate::common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use common::checks::checker::{self, ElectionSpec, Extras, Fault, Links, RedisCluster};
use common::harness::recorder::Recorder;
use common::servers::etcd_server::EtcdCluster;
use common::servers::redis_server::RedisServer;
use common::SidecarArgs;

const TTL: Duration = Duration::from_secs(1);

fn overclaim() -> Vec<(String, String)> {
    vec![("LEASEKEEPER_TEST_OVERCLAIM".to_owned(), "2s".to_owned())]
}

fn claim_on_error() -> Vec<(String, String)> {
    vec![("LEASEKEEPER_TEST_CLAIM_ON_ERROR".to_owned(), "1".to_owned())]
}

/// Runs `f`, which must fail with one of the checker's verdicts on two leaders.
fn caught(what: &str, f: impl FnOnce()) {
    let verdicts = [
        "two leaders at once",
        "seen from outside",
        "seen against the store",
        "answered as leader",
        "says it leads",
        "fencing token did not grow",
    ];
    let Err(panic) = catch_unwind(AssertUnwindSafe(f)) else {
        panic!("{what}: the checker passed a misbehaving sidecar");
    };
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(
        verdicts.iter().any(|v| message.contains(v)),
        "{what}: the run failed, but not with a verdict on leaders: {message}"
    );
    eprintln!("{what}: caught: {}", message.lines().next().unwrap_or(""));
}

/// One Redis server, every sidecar through its own proxy, the Redis recorder, and
/// tampering by DEL/SET: `rounds` with `env` switched on.
fn redis_run(rounds: Vec<Fault>, env: Vec<(String, String)>) {
    redis_run_at(rounds, env, None);
}

/// [`redis_run`] with every sidecar's clocks at `clock_rate` × real speed.
fn redis_run_at(rounds: Vec<Fault>, env: Vec<(String, String)>, clock_rate: Option<f64>) {
    let mut server = RedisServer::start();
    let port = server.port;
    let election = "selftest";
    let lock = format!("leasekeeper:{{{election}}}:lock");
    checker::run_with(
        ElectionSpec {
            restart_loses_data: true,
            ..ElectionSpec::three_candidates(Vec::new(), TTL, rounds, Some(&mut server))
        },
        Extras {
            links: Some(Links {
                nodes: vec![([127, 0, 0, 1], port).into()],
                args: Box::new(move |a| {
                    SidecarArgs::redis(&format!("redis://{}", a[0]))
                        .ttl("1s")
                        .election(election)
                        .build()
                }),
            }),
            store: Some(Recorder::redis(port, election)),
            tamper: Some(Box::new(move |fault| {
                let command = match fault {
                    Fault::TamperDelete => format!("DEL {lock}"),
                    _ => format!("SET {lock} x|0|intruder PX 1000"),
                };
                common::servers::redis_server::command_at(port, &command);
            })),
            sidecar_env: env,
            clock_rate,
            ..Extras::default()
        },
    );
}

/// The clock-rate fault beyond the allowance: sidecars whose clocks (the monotonic one
/// too) run at 0.9× real speed, ten times the 1% `--clock-drift`, claim about 9% past
/// what the store grants them. A leader cut off from the store then still claims when
/// its successor starts: the checker must see it.
#[test]
fn a_clock_beyond_the_drift_allowance_is_caught() {
    caught("clocks at 0.9x", || {
        redis_run_at(
            vec![Fault::PartitionLeader, Fault::PartitionLeader],
            Vec::new(),
            Some(0.9),
        )
    });
}

/// Within the allowance (clocks at 0.995× real speed) the same rounds, and the leader's
/// other ends, pass: the claims are mapped back to the host's clock before they are
/// checked, so this run is judged as strictly as the one above.
#[test]
fn a_clock_within_the_drift_allowance_never_overlaps() {
    redis_run_at(
        vec![
            Fault::PartitionLeader,
            Fault::Kill9,
            Fault::PartitionLeader,
            Fault::SlowLeader,
            Fault::Graceful,
            Fault::PauseLeader,
        ],
        Vec::new(),
        Some(0.995),
    );
}

/// One round of `fault` on Redis with `env` switched on: the checker must fail it.
fn redis_round(fault: Fault, env: Vec<(String, String)>) {
    caught(fault.name(), || redis_run(vec![fault], env));
}

#[test]
fn an_overclaim_is_caught_under_a_graceful_stop() {
    redis_round(Fault::Graceful, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_a_release() {
    redis_round(Fault::Release, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_a_paused_leader() {
    redis_round(Fault::PauseLeader, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_a_paused_store() {
    redis_round(Fault::PauseServer, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_a_store_restart() {
    redis_round(Fault::RestartServer, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_a_partitioned_leader() {
    redis_round(Fault::PartitionLeader, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_a_slow_leader() {
    redis_round(Fault::SlowLeader, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_held_replies() {
    redis_round(Fault::LeaderRepliesHeld, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_a_deleted_record() {
    redis_round(Fault::TamperDelete, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_an_overwritten_record() {
    redis_round(Fault::TamperOverwrite, overclaim());
}

#[test]
fn a_claim_on_error_is_caught_under_a_partitioned_follower() {
    redis_round(Fault::PartitionFollower, claim_on_error());
}

/// Three Redis nodes (Redlock), every sidecar through its own proxies.
fn redlock_round(fault: Fault, env: Vec<(String, String)>) {
    let mut cluster = RedisCluster::start(3);
    let links = cluster.links("1s", "selftest");
    caught(fault.name(), || {
        checker::run_with(
            ElectionSpec {
                restart_loses_data: true,
                ..ElectionSpec::three_candidates(Vec::new(), TTL, vec![fault], Some(&mut cluster))
            },
            Extras {
                links: Some(links),
                sidecar_env: env,
                ..Extras::default()
            },
        );
    });
}

#[test]
fn an_overclaim_is_caught_under_minorities_cut_from_two_candidates() {
    redlock_round(Fault::MinorityCut, overclaim());
}

#[test]
fn an_overclaim_is_caught_under_a_paused_store_minority() {
    redlock_round(Fault::PauseMinority, overclaim());
}

/// An etcd member cut off from the others while it serves the sidecars (it is the
/// only endpoint they know, so they cannot move on): the candidates whose campaigns
/// fail there claim anyway.
#[test]
fn a_claim_on_error_is_caught_under_an_isolated_store_node() {
    let etcd = EtcdCluster::start_partitionable(3);
    let endpoints = etcd.endpoint(0);
    caught("isolate-node", || {
        checker::run_with(
            ElectionSpec::three_candidates(
                SidecarArgs::etcd(&endpoints)
                    .ttl("1s")
                    .election("selftest")
                    .build(),
                TTL,
                vec![Fault::IsolateStoreNode],
                None,
            ),
            Extras {
                isolate: Some(Box::new(move |node, cut| {
                    if cut {
                        etcd.isolate(node);
                    } else {
                        etcd.heal(node);
                    }
                })),
                isolate_nodes: vec![0],
                sidecar_env: claim_on_error(),
                ..Extras::default()
            },
        );
    });
}

/// Without the switches the same harness passes: the verdicts above come from the
/// misbehaviour, not from the harness.
#[test]
fn the_same_rounds_pass_with_well_behaved_sidecars() {
    redis_run(
        vec![
            Fault::Graceful,
            Fault::Release,
            Fault::PartitionLeader,
            Fault::PartitionFollower,
            Fault::TamperDelete,
        ],
        Vec::new(),
    );
}

/// The Lease on the fake Kubernetes API, with the fake's own record of every Lease
/// write as the store's truth.
#[test]
fn an_overclaim_is_caught_on_the_lease_backend() {
    let mut api = common::servers::fake_kube::FakeKube::start("team");
    let kubeconfig = api.kubeconfig();
    let store = api.lease_recorder("selftest");
    caught("kubernetes graceful", || {
        checker::run_with(
            ElectionSpec::three_candidates(
                SidecarArgs::kubernetes(&kubeconfig)
                    .ttl("2s")
                    .election("selftest")
                    .build(),
                Duration::from_secs(2),
                vec![Fault::Graceful],
                Some(&mut api),
            ),
            Extras {
                store: Some(store),
                sidecar_env: overclaim(),
                ..Extras::default()
            },
        );
    });
}
