//! The metrics as a real Prometheus server sees them: three sidecars (file backend)
//! scraped every second, through two graceful handovers and one kill -9, each stopped
//! sidecar restarted on its own port as a Deployment would.
//!
//! Prometheus scrapes each target at its own offset within the interval, so right
//! after a handover it may still hold the old leader's last "1" next to the new
//! leader's first "1", or neither: for up to one interval the sum of
//! `leasekeeper_is_leader` says nothing about the election. Every evaluation outside
//! two intervals after a handover must show exactly one leader. That is what the chart's
//! alert rules allow for too (their `for:`).

use crate::common;

use std::time::Duration;

use common::servers::prometheus::{unix_now, Prometheus};
use common::{eventually, free_port, Sidecar, SidecarArgs};

const SCRAPE: f64 = 1.0;

#[test]
fn prometheus_sees_one_leader_through_handovers_and_a_kill() {
    handovers_under_prometheus(&[]);
}

/// The same run with sidecars that go on claiming 4 s after giving the lease back
/// (a debug-only misbehaviour switch): Prometheus must see two leaders.
#[test]
#[should_panic(expected = "sum(leasekeeper_is_leader) = 2")]
fn prometheus_sees_two_leaders_when_a_sidecar_overclaims() {
    handovers_under_prometheus(&[("LEASEKEEPER_TEST_OVERCLAIM".to_owned(), "4s".to_owned())]);
}

fn handovers_under_prometheus(env: &[(String, String)]) {
    let dir = tempfile::tempdir().expect("dir");
    let args = SidecarArgs::file(dir.path()).ttl("2s").build();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let prom = Prometheus::start(&ports, "prom");
    let name = |i: usize, gen: usize| format!("prom-{i}-g{gen}");
    let mut cars: Vec<Sidecar> = ports
        .iter()
        .enumerate()
        .map(|(i, &p)| Sidecar::spawn_on(&name(i, 0), dir.path(), &args, env, p))
        .collect();
    let instance = |i: usize| format!("127.0.0.1:{}", ports[i]);

    // Wait until Prometheus has scraped all three and sees the first leader.
    let seen = eventually(Duration::from_secs(30), || {
        let up = prom.scalar_at("sum(up{job=\"leasekeeper\"})", None)?;
        let leaders = prom.scalar_at("sum(leasekeeper_is_leader)", None)?;
        (up == 3.0 && leaders == 1.0).then_some(())
    });
    assert!(
        seen.is_some(),
        "prometheus never saw 3 targets and one leader"
    );
    let start = unix_now();
    // Observed: 3 s of steady leadership in Prometheus's series before the handovers.
    std::thread::sleep(Duration::from_secs(3));

    let leader_of = |cars: &[Sidecar]| {
        eventually(Duration::from_secs(10), || {
            cars.iter()
                .position(|c| c.leader().is_some_and(|v| v["is_leader"] == true))
        })
        .expect("a leader")
    };
    let token_of = |car: &Sidecar| {
        car.leader()
            .and_then(|v| v["fencing_token"].as_u64())
            .expect("a token")
    };
    let mut handovers = Vec::new();
    let mut tokens = Vec::new();
    for (round, kill) in [false, false, true].into_iter().enumerate() {
        let li = leader_of(&cars);
        let token = token_of(&cars[li]);
        // Before the handover: the leader's series, as Prometheus has them.
        let at = unix_now();
        let who = instance(li);
        let prom_token = prom
            .scalar_at(
                &format!("leasekeeper_fencing_token{{instance=\"{who}\"}}"),
                Some(at),
            )
            .expect("the leader's token series");
        assert_eq!(prom_token, token as f64, "the leader's token as scraped");
        let renews = prom
            .scalar_at(
                &format!(
                    "increase(leasekeeper_renew_total{{instance=\"{who}\",result=\"ok\"}}[3s])"
                ),
                Some(at),
            )
            .expect("renew series");
        assert!(renews > 0.0, "the leader's renew_total{{ok}} did not move");
        let remaining = prom
            .scalar_at(
                &format!("leasekeeper_lease_remaining_seconds{{instance=\"{who}\"}}"),
                Some(at),
            )
            .expect("remaining series");
        // (At most the ttl, unless misbehaving on purpose.)
        assert!(
            remaining > 0.0 && (remaining <= 2.0 || !env.is_empty()),
            "remaining {remaining}"
        );
        let acquired = prom
            .scalar_at(
                &format!("leasekeeper_leader_transitions_total{{instance=\"{who}\",direction=\"acquired\"}}"),
                Some(at),
            )
            .expect("transitions series");
        assert!(acquired >= 1.0, "acquired {acquired}");
        tokens.push(token);

        handovers.push(unix_now());
        if kill {
            cars[li].kill();
        } else {
            cars[li]
                .terminate(Duration::from_secs(10))
                .expect("graceful stop");
        }
        let others: Vec<usize> = (0..3).filter(|&i| i != li).collect();
        let next = eventually(Duration::from_secs(10), || {
            others
                .iter()
                .copied()
                .find(|&i| cars[i].leader().is_some_and(|v| v["is_leader"] == true))
        })
        .expect("a new leader");
        assert!(token_of(&cars[next]) > token, "token did not grow");
        cars[li] = Sidecar::spawn_on(&name(li, round + 1), dir.path(), &args, env, ports[li]);
        cars[li].settles_in("follower", Duration::from_secs(10));
        // Long enough for a few settled evaluations between handovers.
        std::thread::sleep(Duration::from_secs(5));
    }
    let end = unix_now() - 0.5;

    // Exactly one leader at every settled evaluation.
    let step = 0.25;
    let sums = prom.range("sum(leasekeeper_is_leader)", start, end, step);
    let states = prom.range("sum(leasekeeper_state{state=\"leader\"})", start, end, step);
    let settled = |t: f64| {
        !handovers
            .iter()
            .any(|&h| t >= h - 0.05 && t <= h + 2.0 * SCRAPE + 0.5)
    };
    let mut checked = 0;
    for (&(t, sum), &(_, state)) in sums.iter().zip(&states) {
        if settled(t) {
            assert_eq!(sum, 1.0, "sum(leasekeeper_is_leader) = {sum} at {t:.3}");
            assert_eq!(
                state, 1.0,
                "leasekeeper_state{{leader}} = {state} at {t:.3}"
            );
            checked += 1;
        } else {
            assert!(sum <= 2.0, "sum(leasekeeper_is_leader) = {sum} at {t:.3}");
        }
    }
    assert!(checked >= 24, "only {checked} settled evaluations");
    assert_eq!(sums.len(), states.len());

    // The token series of the leader only grows, handover after handover.
    let last = leader_of(&cars);
    tokens.push(token_of(&cars[last]));
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens {tokens:?}");
    let max_token = prom.range("max(leasekeeper_fencing_token)", start, end, step);
    assert!(
        max_token.windows(2).all(|w| w[0].1 <= w[1].1),
        "max(leasekeeper_fencing_token) went down: {max_token:?}"
    );
    // Each old leader came back as a new process behind the same target: its renew
    // counter starts again from zero, which Prometheus sees as a reset.
    let resets = prom
        .scalar_at(
            "sum(resets(leasekeeper_renew_total{result=\"ok\"}[1m]))",
            Some(end),
        )
        .expect("renew series");
    assert!(resets >= 3.0, "renew counter resets: {resets}");
    eprintln!(
        "prometheus: {checked} settled evaluations with one leader, tokens {tokens:?}, counter resets {resets}"
    );
}
