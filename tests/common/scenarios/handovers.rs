//! Scenarios shared by the backend suites that need a fault proxy per sidecar.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::harness::faults::{FaultProxy, Link};
use crate::common::harness::tamper::leader_of;
use crate::common::{eventually, Sidecar};

/// DESIGN invariant 11 and a gray failure: the link between the leader and the
/// store turns slow (`link`: a long pipe, `Link::Delay`, or a congested queue,
/// `Link::Congested`). The leader must stop claiming and get out of the way: another
/// candidate leads within 2 × ttl of the link going bad, no two claims overlap, and
/// once the link is healthy again the slow candidate can lead again (here: when the
/// others stop).
///
/// `args(endpoints)` gives the backend flags for a sidecar whose store nodes are at
/// `endpoints` (`127.0.0.1:port` each, a proxy per node of `stores`).
pub fn slow_leader_is_replaced_and_recovers(
    stores: &[SocketAddr],
    ttl: Duration,
    link: Link,
    args: impl Fn(&[String]) -> Vec<String>,
) {
    slow_leader_is_replaced_within(stores, ttl, link, ttl * 2, args);
}

/// [`slow_leader_is_replaced_and_recovers`] with a bound of its own: a store that
/// refuses late requests (a use-by in every renewal and campaign) lets the next
/// candidate lead within ttl + 1 s, the slow leader's last timely renewal being its
/// last.
pub fn slow_leader_is_replaced_within(
    stores: &[SocketAddr],
    ttl: Duration,
    link: Link,
    within: Duration,
    args: impl Fn(&[String]) -> Vec<String>,
) {
    let dir = tempfile::tempdir().expect("dir");
    let proxies: Vec<Vec<FaultProxy>> = (0..3)
        .map(|_| stores.iter().map(|s| FaultProxy::start(*s)).collect())
        .collect();
    let set = |slot: usize, link: Link| proxies[slot].iter().for_each(|p| p.set(link));
    let mut sidecars: Vec<Sidecar> = proxies
        .iter()
        .enumerate()
        .map(|(i, ps)| {
            let endpoints: Vec<String> = ps.iter().map(FaultProxy::addr).collect();
            let mut args = args(&endpoints);
            let log = dir.path().join(format!("s{i}.jsonl"));
            args.extend(["--transition-log".to_owned(), log.display().to_string()]);
            Sidecar::spawn(&format!("s{i}"), dir.path(), &args)
        })
        .collect();
    let (slow, token) = leader_of(&sidecars, ttl * 3 + Duration::from_secs(5))
        .expect("a leader before the link slows down");
    // A leader that has renewed a few times (its scripts are cached at the store, its
    // connections settled): the link goes bad in the middle of a tenure.
    std::thread::sleep(ttl);
    assert_eq!(
        sidecars[slow].leader().map(|v| v["is_leader"] == true),
        Some(true),
        "the leader lost its claim before its link slowed down"
    );
    set(slow, link);
    let t0 = Instant::now();
    let others: Vec<usize> = (0..3).filter(|&i| i != slow).collect();
    let replaced = eventually(within, || {
        others.iter().find_map(|&i| {
            let v = sidecars[i].leader()?;
            (v["is_leader"] == true).then(|| v["fencing_token"].as_u64().unwrap_or(0))
        })
    });
    let took = t0.elapsed();
    let slow_view = sidecars[slow].leader();
    if replaced.is_none() {
        // Each sidecar's log and its transition log (claims, deadlines, releases).
        for (i, s) in sidecars.iter().enumerate() {
            let log = dir.path().join(format!("s{i}.jsonl"));
            let transitions = std::fs::read_to_string(log).unwrap_or_default();
            eprintln!("==== {}\n{}\n{transitions}", s.name, s.stderr());
        }
    }
    assert!(
        replaced.is_some(),
        "with the leader's link {link:?} (ttl {ttl:?}), nobody else led within {within:?}; the slow one says {slow_view:?}\n{}",
        sidecars[slow].stderr()
    );
    assert!(
        replaced > Some(token),
        "the new leader's token {replaced:?} is not above {token}"
    );
    eprintln!("slow leader replaced after {took:?}");
    // The slow one must not claim while its link stays slow.
    assert_ne!(
        sidecars[slow].leader().map(|v| v["is_leader"] == true),
        Some(true),
        "the slow candidate still claims"
    );

    set(slow, Link::Pass);
    // Observed: a ttl of the healed link before the others stop.
    std::thread::sleep(ttl);
    for &i in &others {
        let status = sidecars[i].terminate(Duration::from_secs(5));
        assert!(
            status.is_some_and(|s| s.success()),
            "graceful stop: {status:?}"
        );
    }
    let back = eventually(ttl * 2 + Duration::from_secs(2), || {
        sidecars[slow]
            .leader()
            .filter(|v| v["is_leader"] == true)
            .and_then(|v| v["fencing_token"].as_u64())
    });
    assert!(
        back.is_some_and(|t| t > replaced.unwrap_or(0)),
        "the once-slow candidate did not lead again with a higher token after its link healed: {back:?}\n{}",
        sidecars[slow].stderr()
    );
    sidecars.clear();
    let mut claims = std::collections::BTreeMap::new();
    for i in 0..3 {
        let text =
            std::fs::read_to_string(dir.path().join(format!("s{i}.jsonl"))).unwrap_or_default();
        crate::common::checks::checker::parse_claims(&text, &mut claims);
    }
    let mut claims: Vec<crate::common::checks::checker::LoggedClaim> =
        claims.into_values().collect();
    claims.sort_by_key(|c| c.start);
    assert!(claims.len() >= 3, "too few claims logged: {claims:?}");
    crate::common::checks::checker::check_claims_never_overlap(&claims);
    crate::common::checks::checker::check_tokens_strictly_grow(&claims);
}

/// A follower that is not next in line waits a little before it looks at a new holder
/// (the stagger, etcd and ZooKeeper). The elector drops that wait whenever a release
/// request comes (`POST /release` to a follower answers "not leader") and waits again:
/// the new wait must resume the stagger. Seen broken twice: ZooKeeper polled its spent
/// holder watch again and the sidecar died ("async fn resumed after completion"); etcd
/// had consumed the leader's Delete and its followers named the departed leader until
/// their own predecessor moved.
///
/// Five candidates, three rounds: the leader stops gracefully, and as soon as its
/// successor leads, every other follower is sent one release request. Every one must
/// stay up and name the new leader.
pub fn followers_survive_release_requests_during_a_handover(args: &[String]) {
    let mut args = args.to_vec();
    args.push("--enable-release-endpoint".into());
    let args = &args[..];
    let dir = tempfile::tempdir().expect("dir");
    let mut sidecars: Vec<Sidecar> = (0..5)
        .map(|i| Sidecar::spawn(&format!("r{i}"), dir.path(), args))
        .collect();
    for _ in 0..3 {
        // Every sidecar answers first (a leader can be chosen before the last one
        // started listening, and a refused connection would test nothing).
        let answering = eventually(Duration::from_secs(10), || {
            sidecars.iter().all(|s| s.leader().is_some()).then_some(())
        });
        assert!(answering.is_some(), "not every sidecar answers /leader");
        let (leader, _) = leader_of(&sidecars, Duration::from_secs(20)).expect("a leader");
        let others: Vec<usize> = (0..sidecars.len()).filter(|&i| i != leader).collect();
        let settled = |sidecars: &[Sidecar], others: &[usize]| {
            eventually(Duration::from_secs(10), || {
                let views: Vec<serde_json::Value> = others
                    .iter()
                    .map(|&i| sidecars[i].leader())
                    .collect::<Option<_>>()?;
                let new = views.iter().find(|v| v["is_leader"] == true)?["identity"].clone();
                views.iter().all(|v| v["leader"] == new).then_some(())
            })
        };
        sidecars[leader].signal(libc::SIGTERM);
        // As soon as the successor leads, the others are inside their stagger (50 ms
        // at least): one release request each drops that wait.
        let successor = eventually(Duration::from_secs(10), || {
            others
                .iter()
                .copied()
                .find(|&i| sidecars[i].leader().is_some_and(|v| v["is_leader"] == true))
        })
        .expect("a successor");
        for &i in others.iter().filter(|&&i| i != successor) {
            let answer = crate::common::harness::http::post_within(
                sidecars[i].port,
                "/release",
                Duration::from_secs(2),
            );
            // The request must reach the elector ("not leader"), or this tests nothing.
            let (code, body) = answer.expect("an answer to POST /release");
            assert_eq!(code, 409, "{body}");
        }
        for &i in &others {
            assert!(
                sidecars[i].is_running(),
                "{} died while following a handover: {}",
                sidecars[i].name,
                sidecars[i].stderr()
            );
        }
        let views: Vec<_> = others.iter().map(|&i| sidecars[i].leader()).collect();
        assert!(
            settled(&sidecars, &others).is_some(),
            "the followers never all named the new leader: {views:?}"
        );
        // The stopped one comes back as a follower for the next round.
        sidecars[leader].wait_exit(Duration::from_secs(5));
        let name = sidecars[leader].name.clone();
        sidecars[leader] = Sidecar::spawn(&name, dir.path(), args);
    }
}

/// Waits up to 15 s until exactly one of `cars` leads and every other one follows.
pub fn one_leads_the_rest_follow(cars: &[Sidecar]) -> bool {
    eventually(Duration::from_secs(15), || {
        let s: Vec<serde_json::Value> = cars.iter().map(|c| c.leader()).collect::<Option<_>>()?;
        let leaders = s.iter().filter(|v| v["state"] == "leader").count();
        let followers = s.iter().filter(|v| v["state"] == "follower").count();
        (leaders == 1 && followers == cars.len() - 1).then_some(())
    })
    .is_some()
}

/// The end of a "followers send nothing" test: every follower still names a holder, a
/// graceful stop of the leader is followed at once, and a kill -9 of the next leader
/// within 6 s (these tests run at ttl 2 s).
pub fn handover_and_crash_still_followed(cars: &mut Vec<Sidecar>) {
    for c in cars.iter() {
        let v = c.leader().expect("status");
        assert!(v["leader"].is_string(), "{}: stale holder {v}", c.name);
    }
    let li = cars
        .iter()
        .position(|c| c.leader().is_some_and(|v| v["is_leader"] == true))
        .expect("leader");
    let mut old = cars.remove(li);
    let t0 = Instant::now();
    old.terminate(Duration::from_secs(5)).expect("stopped");
    assert!(
        one_leads_the_rest_follow(cars),
        "no new leader after a graceful stop"
    );
    eprintln!("graceful handover seen after {:?}", t0.elapsed());
    let li = cars
        .iter()
        .position(|c| c.leader().is_some_and(|v| v["is_leader"] == true))
        .expect("leader");
    let t0 = Instant::now();
    cars[li].kill();
    let next = eventually(Duration::from_secs(6), || {
        cars.iter()
            .find(|c| c.leader().is_some_and(|v| v["is_leader"] == true))
            .map(|_| ())
    });
    assert!(
        next.is_some(),
        "no new leader within 6 s of a kill -9 (ttl 2 s)"
    );
    eprintln!("failover after a kill seen after {:?}", t0.elapsed());
}

/// How often `car` has begun a tenure so far (its "acquired leadership" log lines).
fn tenures_begun(car: &Sidecar) -> usize {
    car.stderr().matches("acquired leadership").count()
}

/// `leasekeeper switchover --to TO` against the sidecar at `port`: exit code and
/// everything it printed.
fn switchover(port: u16, to: &str) -> (Option<i32>, String) {
    let url = format!("http://127.0.0.1:{port}");
    let (code, out, err) = crate::common::run_to_exit(
        &["switchover", "--to", to, "--url", &url, "--timeout", "30s"],
        &[],
    );
    (code, format!("{out}{err}"))
}

/// The switchover: three candidates; `leasekeeper switchover --to ID` run
/// against the leader makes ID lead next, and no other candidate leads in between —
/// twice, each time naming the candidate that would *not* come next on its own where
/// the store keeps a queue (the last to join, then the old leader's predecessor).
/// Refused without releasing anything: an unknown candidate (where the store can
/// tell), the leader itself, and a sidecar that does not lead.
pub fn switchover_goes_to_the_named_candidate(args: &[String]) {
    let mut args = args.to_vec();
    args.push("--enable-release-endpoint".into());
    let dir = tempfile::tempdir().expect("dir");
    let mut cars: Vec<Sidecar> = Vec::new();
    for i in 0..3 {
        // One after the other, so that a queue holds them in this order.
        cars.push(Sidecar::spawn(&format!("s{i}"), dir.path(), &args));
        let joined = eventually(Duration::from_secs(20), || {
            let state = cars[i].leader()?["state"].clone();
            (state == "leader" || state == "follower").then_some(())
        });
        assert!(joined.is_some(), "s{i} never joined:\n{}", cars[i].stderr());
    }
    assert!(super::handovers::one_leads_the_rest_follow(&cars));
    let (leader, _) = leader_of(&cars, Duration::from_secs(20)).expect("a leader");
    let follower = (leader + 1) % 3;
    let (code, out) = switchover(cars[follower].port, "s9");
    assert_eq!(code, Some(3), "a follower asked: {out}");
    let (code, out) = switchover(cars[leader].port, &cars[leader].name.clone());
    assert_eq!(code, Some(4), "the leader named itself: {out}");
    let (code, out) = switchover(cars[leader].port, "nobody-here");
    if out.contains("is not a live candidate") {
        assert_eq!(code, Some(4), "{out}");
    } else {
        // A store with no list of candidates: released, and nobody named takes it.
        assert_eq!(code, Some(5), "an unknown candidate named: {out}");
        assert!(super::handovers::one_leads_the_rest_follow(&cars));
    }
    let (mut leader, _) = leader_of(&cars, Duration::from_secs(20)).expect("a leader");
    // More rounds by hand (`LK_SWITCHOVER_ROUNDS=30`, say, on a real API server).
    let rounds = std::env::var("LK_SWITCHOVER_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    for round in 0..rounds {
        let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
        let to = if round % 2 == 0 { others[1] } else { others[0] };
        let bystander = if round % 2 == 0 { others[0] } else { others[1] };
        let before = tenures_begun(&cars[bystander]);
        let (port, name) = (cars[leader].port, cars[to].name.clone());
        let asked = Instant::now();
        let command = std::thread::spawn(move || switchover(port, &name));
        // How soon the named candidate itself says it leads, from the command's start.
        let led = eventually(Duration::from_secs(30), || {
            let leads = cars[to].leader().is_some_and(|v| v["is_leader"] == true);
            leads.then(|| asked.elapsed())
        });
        let (code, out) = command.join().expect("the command's thread");
        assert_eq!(code, Some(0), "round {round}, to {}: {out}", cars[to].name);
        eprintln!(
            "switchover round {round}: {} leads {led:?} after the command started; the command: {}",
            cars[to].name,
            out.trim()
        );
        assert!(
            cars[to].leader().is_some_and(|v| v["is_leader"] == true),
            "{} does not lead after the switchover: {out}",
            cars[to].name
        );
        assert_eq!(
            tenures_begun(&cars[bystander]),
            before,
            "{} led in between",
            cars[bystander].name
        );
        leader = to;
    }
}

/// The leader of `cars` hands over to one of its followers (`POST /release?to=`), which
/// leads within 5 s: a follower the store shows no traffic from is still a live
/// candidate.
pub fn a_switchover_to_a_follower_works(cars: &[Sidecar]) {
    let leader = cars
        .iter()
        .find(|c| c.leader().is_some_and(|v| v["is_leader"] == true))
        .expect("leader");
    let to = cars
        .iter()
        .find(|c| c.name != leader.name)
        .expect("follower");
    let answer =
        crate::common::harness::http::post(leader.port, &format!("/release?to={}", to.name));
    assert_eq!(answer.as_ref().map(|r| r.0), Some(200), "{answer:?}");
    let led = eventually(Duration::from_secs(5), || {
        to.leader().filter(|v| v["is_leader"] == true)
    });
    assert!(led.is_some(), "{} did not take over", to.name);
}
