//! Elections of several holders (`--holders N`): the scenario every store runs, and
//! the checks on what the sidecars logged.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::checks::checker::{parse_claims, LoggedClaim, ServerControl};
use crate::common::harness::faults::{FaultProxy, Link};
use crate::common::{eventually, send_signal, Sidecar, SidecarArgs};

/// The slots each sidecar says it holds now: (sidecar index, slot, token).
pub fn slot_leaders(cars: &[Sidecar]) -> Vec<(usize, u64, u64)> {
    cars.iter()
        .enumerate()
        .filter(|(_, c)| c.is_running())
        .filter_map(|(i, c)| {
            let v = c.leader()?;
            (v["is_leader"] == true).then(|| {
                let slot = v["slot"].as_u64().expect("a leader names its slot");
                (i, slot, v["fencing_token"].as_u64().unwrap_or(0))
            })
        })
        .collect()
}

/// Waits until every slot of `n` is held by one of `cars`, each by a different one.
pub fn all_slots_held(cars: &[Sidecar], n: u64, limit: Duration) -> Vec<(usize, u64, u64)> {
    eventually(limit, || {
        let mut held = slot_leaders(cars);
        held.sort_by_key(|h| h.1);
        let slots: Vec<u64> = held.iter().map(|h| h.1).collect();
        (slots == (0..n).collect::<Vec<_>>()).then_some(held)
    })
    .unwrap_or_else(|| {
        for c in cars {
            eprintln!("==== {} {:?}\n{}", c.name, c.leader(), c.stderr());
        }
        panic!(
            "the {n} slots were never all held: {:?}",
            slot_leaders(cars)
        )
    })
}

/// Every claim the sidecars logged in `dir` (`<name>.jsonl`), by start.
pub fn logged_claims(dir: &Path) -> Vec<LoggedClaim> {
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("dir").flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            parse_claims(
                &std::fs::read_to_string(&path).unwrap_or_default(),
                &mut all,
            );
        }
    }
    let mut claims: Vec<LoggedClaim> = all.into_values().collect();
    claims.sort_by_key(|c| c.start);
    claims
}

/// The safety of an election of `n` slots, from the claims: every claim names a slot
/// below `n` (a claim of a sidecar with one slot names none: it is slot 0's); no two claims of one slot overlap; no process holds two at once; never
/// more than `n` claims at one instant; each slot's tokens strictly grow.
pub fn check_slot_claims(claims: &[LoggedClaim], n: u64) {
    let mut by_slot: BTreeMap<u64, Vec<&LoggedClaim>> = BTreeMap::new();
    let mut by_pid: BTreeMap<u64, Vec<&LoggedClaim>> = BTreeMap::new();
    for c in claims {
        let slot = c.slot.unwrap_or(0);
        assert!(slot < n, "a claim of slot {slot} of {n}: {c:?}");
        by_slot.entry(slot).or_default().push(c);
        by_pid.entry(c.pid).or_default().push(c);
    }
    for (slot, list) in &by_slot {
        for w in list.windows(2) {
            assert!(
                w[1].start >= w[0].until(),
                "two claims of slot {slot} overlap: {:?} and {:?}",
                w[0],
                w[1]
            );
            assert!(
                w[1].token > w[0].token,
                "slot {slot}'s token did not grow: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
    }
    for (pid, list) in &by_pid {
        for w in list.windows(2) {
            assert!(
                w[1].start >= w[0].until(),
                "process {pid} held two slots at once: {:?} and {:?}",
                w[0],
                w[1]
            );
        }
    }
    let mut edges: Vec<(u64, i64)> = claims
        .iter()
        .flat_map(|c| [(c.start, 1), (c.until(), -1)])
        .collect();
    edges.sort();
    let mut open = 0;
    for (at, d) in edges {
        open += d;
        assert!(
            open <= n as i64,
            "{open} claims at once at {at} ns, of {n} slots"
        );
    }
}

/// Two slots, five candidates: both slots held by two of them, each a different slot;
/// a holder's SIGTERM hands its slot to a waiting one within `graceful` (at once,
/// short of a store's own delay), and then the other slot's holder's SIGTERM too; a holder's kill -9 and a holder's SIGSTOP each
/// lose their slot to a waiting one after the ttl; the stopped one, continued, does
/// not lead in that slot again while its successor does; and the logged claims keep
/// every rule of [`check_slot_claims`].
pub fn two_slots_five_candidates(args: SidecarArgs, ttl: Duration, graceful: Duration) {
    slots_scenario(args, ttl, graceful, true, None);
}

/// The store's faults for [`two_slots_five_candidates_and_the_store_struck`].
pub struct Strikes<'a> {
    pub store: &'a mut dyn ServerControl,
    /// The store's nodes (client addresses): every sidecar reaches each through a
    /// proxy of its own, so a holder can be cut off alone.
    pub nodes: Vec<SocketAddr>,
    /// Whether the store keeps its data across a kill -9 (then it is restarted too).
    pub restart: bool,
    /// The slowed links a holder gets in turn, each for its own phase (`Link::Delay`,
    /// `Link::Congested`).
    pub slowed: Vec<Link>,
    /// Whether each store node is cut off from the others in turn
    /// ([`ServerControl::isolate_node`]: a store of several nodes in network namespaces).
    pub isolate: bool,
}

impl<'a> Strikes<'a> {
    /// The store paused, a holder cut off, and the store restarted when `restart`.
    pub fn new(store: &'a mut dyn ServerControl, nodes: Vec<SocketAddr>, restart: bool) -> Self {
        Strikes {
            store,
            nodes,
            restart,
            slowed: Vec::new(),
            isolate: false,
        }
    }

    /// A holder's links slowed too, each `link` in a phase of its own.
    pub fn slowed(mut self, links: &[Link]) -> Self {
        self.slowed = links.to_vec();
        self
    }

    /// Each store node in turn cut off from the others too.
    pub fn isolated(mut self) -> Self {
        self.isolate = true;
        self
    }
}

/// [`two_slots_five_candidates`], then the faults the election checker strikes an
/// election with: the store paused past the ttl (a majority of its nodes, for a store
/// of several), during which no slot is held, then resumed; a slot's holder cut off
/// from the store (every byte held both ways, its connections kept open) past the
/// ttl, its slot taken by a waiting candidate, then healed; a holder's links slowed
/// (each of `Strikes::slowed`: late past the backend timeout, or congested) until a
/// waiting candidate takes its slot; each store node cut off from the others, while
/// both slots stay held (`Strikes::isolate`); and the store killed (-9) and started
/// again, when it keeps its data. After each, every slot is held again, and the
/// transition logs are checked over the whole run.
pub fn two_slots_five_candidates_and_the_store_struck(
    args: SidecarArgs,
    ttl: Duration,
    graceful: Duration,
    strikes: Strikes,
) {
    slots_scenario(args, ttl, graceful, true, Some(strikes));
}

/// [`two_slots_five_candidates`] without the SIGSTOP part, for the file backend: a
/// stopped process keeps its lock (the kernel's), so its slot is not lost.
pub fn two_slots_five_candidates_no_pause(args: SidecarArgs, ttl: Duration, graceful: Duration) {
    slots_scenario(args, ttl, graceful, false, None);
}

fn slots_scenario(
    args: SidecarArgs,
    ttl: Duration,
    graceful: Duration,
    pause: bool,
    mut strikes: Option<Strikes>,
) {
    let built = args.clone().build();
    let backend = built
        .iter()
        .position(|a| a == "--backend")
        .and_then(|i| built.get(i + 1))
        .cloned()
        .unwrap_or_default();
    let dir = tempfile::tempdir().expect("dir");
    let args = args.flag("--holders", "2");
    let nodes = strikes
        .as_ref()
        .map(|s| s.nodes.clone())
        .unwrap_or_default();
    let proxies = Proxies::default();
    let spawn = |i: usize| {
        let name = format!("w-{i}");
        let log = dir.path().join(format!("{name}.jsonl"));
        let a = args
            .clone()
            .flag("--transition-log", &log.display().to_string());
        let (built, links) = through_proxies(a.build(), &nodes);
        let car = Sidecar::spawn(&name, dir.path(), &built);
        proxies.borrow_mut().insert(car.pid, links);
        car
    };
    let start_bound = ttl * 3 + Duration::from_secs(15);
    let mut cars = both_slots_filled(&spawn, ttl, start_bound);
    let gone = sigterm_each_holder(&mut cars, graceful, start_bound, &backend);
    cars[gone] = spawn(5);

    // kill -9: after the ttl.
    let held = all_slots_held(&cars, 2, start_bound);
    let (victim, slot, token) = held[1];
    // A killed process's claim ends with it (the lock of a file or a session may go
    // at once): its last deadline is not its end.
    let killed = (
        u64::from(cars[victim].pid),
        leasekeeper::clock::monotonic_now_ns(),
    );
    cars[victim].kill();
    let within = ttl * 3 + Duration::from_secs(5);
    let next = taken(&cars, None, (slot, token), within);
    assert!(
        next.is_some(),
        "slot {slot} not taken after its holder's kill -9: {:?}",
        slot_leaders(&cars)
    );

    // SIGSTOP: the slot goes on without the stopped one, which does not come back.
    let held = all_slots_held(&cars, 2, start_bound);
    if !pause {
        return finish(cars, dir.path(), killed);
    }
    let (stopped, slot, token) = held[0];
    send_signal(cars[stopped].pid, libc::SIGSTOP);
    let next = taken(&cars, Some(stopped), (slot, token), within);
    assert!(
        next.is_some(),
        "slot {slot} not taken while its holder was stopped: {:?}",
        slot_leaders(&cars)
    );
    send_signal(cars[stopped].pid, libc::SIGCONT);
    // Observed: a ttl after the stopped holder wakes, before the slots are counted.
    std::thread::sleep(ttl);
    all_slots_held(&cars, 2, start_bound);
    if let Some(strikes) = strikes.as_mut() {
        the_store_paused(&cars, ttl, strikes.store, start_bound);
        a_holder_cut_off(&cars, &proxies, ttl, Link::Blackhole, start_bound);
        for link in strikes.slowed.clone() {
            a_holder_cut_off(&cars, &proxies, ttl, link, start_bound);
        }
        if strikes.isolate {
            each_store_node_cut_off(&cars, ttl, strikes.store, start_bound);
        }
        if strikes.restart {
            strikes.store.restart();
            all_slots_held(&cars, 2, start_bound);
        }
    }
    finish(cars, dir.path(), killed);
}

/// A holder of `slot` other than `not` with a token above `token` (the slot's new
/// tenure), within `within`.
fn taken(
    cars: &[Sidecar],
    not: Option<usize>,
    (slot, token): (u64, u64),
    within: Duration,
) -> Option<(usize, u64, u64)> {
    eventually(within, || {
        slot_leaders(cars)
            .into_iter()
            .find(|h| Some(h.0) != not && h.1 == slot && h.2 > token)
    })
}

/// Five candidates, both slots held, a follower listing both holders. w-0 takes a
/// slot (its ordinal's, slot 0, unless that one's campaign failed: on Redlock nodes
/// that are still settling, the next slot's may succeed first); the second candidate
/// is one whose ordinal picks that same slot (w-2 for slot 0, w-3 for slot 1): it
/// tries it first (a place in its queue, where the store keeps one) and takes the
/// other slot: it must leave the first one's queue then, or that slot would pass to
/// it, unclaimed, when w-0 goes, and stay stuck while it lives.
fn both_slots_filled(
    spawn: &dyn Fn(usize) -> Sidecar,
    ttl: Duration,
    start_bound: Duration,
) -> Vec<Sidecar> {
    let mut cars = vec![spawn(0)];
    let first =
        eventually(start_bound, || slot_leaders(&cars).first().map(|h| h.1)).expect("w-0 leads");
    let second = if first == 0 { 2 } else { 3 };
    cars.push(spawn(second));
    let held = all_slots_held(&cars, 2, start_bound);
    let by = |slot: u64| held.iter().find(|h| h.1 == slot).map(|h| h.0);
    assert_eq!(
        (by(first), by(1 - first)),
        (Some(0), Some(1)),
        "w-0 in slot {first}, w-{second} in the other: {held:?}"
    );
    cars.extend((1..5).filter(|&i| i != second).map(spawn));
    let held = all_slots_held(&cars, 2, start_bound);
    let follower = (0..5)
        .find(|i| !held.iter().any(|h| h.0 == *i))
        .expect("a follower");
    let listed = eventually(ttl * 2, || {
        let v = cars[follower].leader()?;
        (v["holders"].as_array()?.len() == 2).then_some(v)
    });
    assert!(
        listed.is_some(),
        "a follower does not list both holders: {:?}",
        cars[follower].leader()
    );
    cars
}

/// SIGTERM to one slot's holder: the slot goes to a waiting candidate, fast; then to
/// the other slot's holder: that slot too goes to a waiting candidate at once, never
/// lost to the one that took the first slot while it still waited on this one. Both
/// have exited at the end; the second one's index.
fn sigterm_each_holder(
    cars: &mut [Sidecar],
    graceful: Duration,
    bound: Duration,
    backend: &str,
) -> usize {
    let held = all_slots_held(cars, 2, bound);
    let (gone, slot, token) = held[0];
    let t0 = Instant::now();
    cars[gone].signal(libc::SIGTERM);
    let next = taken(cars, Some(gone), (slot, token), graceful);
    let took = t0.elapsed();
    assert!(
        next.is_some(),
        "slot {slot} not taken within {graceful:?} of its holder's SIGTERM: {:?}",
        slot_leaders(cars)
    );
    eprintln!("{backend}: slot {slot} handed over on SIGTERM in {took:?}");
    assert!(cars[gone].wait_exit(Duration::from_secs(10)).is_some());

    let held = all_slots_held(cars, 2, bound);
    let &(gone, slot, token) = held.iter().find(|h| h.1 != slot).expect("the other slot");
    cars[gone].signal(libc::SIGTERM);
    let next = taken(cars, Some(gone), (slot, token), graceful);
    assert!(
        next.is_some(),
        "the other slot {slot} not taken within {graceful:?} of its holder's SIGTERM: {:?}",
        slot_leaders(cars)
    );
    assert!(cars[gone].wait_exit(Duration::from_secs(10)).is_some());
    gone
}

/// Each sidecar's proxies to the store's nodes, by pid.
type Proxies = std::cell::RefCell<BTreeMap<u32, Vec<FaultProxy>>>;

/// `args` with every store node's address (`127.0.0.1:<port>`) turned into a proxy's
/// of its own; the proxies.
fn through_proxies(args: Vec<String>, nodes: &[SocketAddr]) -> (Vec<String>, Vec<FaultProxy>) {
    let proxies: Vec<FaultProxy> = nodes.iter().map(|n| FaultProxy::start(*n)).collect();
    let args = args
        .into_iter()
        .map(|mut a| {
            for (node, proxy) in nodes.iter().zip(&proxies) {
                a = replace_address(&a, &node.to_string(), &proxy.addr());
            }
            a
        })
        .collect();
    (args, proxies)
}

/// `text` with `from` (an address) replaced by `to` wherever no digit follows it (a
/// port `1234` is not the start of `12345`).
fn replace_address(text: &str, from: &str, to: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let after = &rest[i + from.len()..];
        let whole = !after.starts_with(|c: char| c.is_ascii_digit());
        out.push_str(&rest[..i]);
        out.push_str(if whole { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// A slot's holder cut off from the store past the ttl (`link`: its links hold every
/// byte both ways, or are slowed past the backend timeout or congested): it steps down
/// by its deadline and a waiting candidate takes its slot; healed, it leads no slot
/// its successor holds (the logs' check at the end), and every slot is held again.
fn a_holder_cut_off(
    cars: &[Sidecar],
    proxies: &Proxies,
    ttl: Duration,
    link: Link,
    start_bound: Duration,
) {
    let held = all_slots_held(cars, 2, start_bound);
    // The slot of the first holder, then the other's: each phase strikes another.
    let (cut, slot, token) = held[CUTS.fetch_add(1, Ordering::Relaxed) % held.len()];
    let links = |link: Link| {
        for p in proxies.borrow().get(&cars[cut].pid).into_iter().flatten() {
            p.set(link);
        }
    };
    links(link);
    let next = taken(
        cars,
        Some(cut),
        (slot, token),
        ttl * 3 + Duration::from_secs(5),
    );
    let still = slot_leaders(cars).into_iter().find(|h| h.0 == cut);
    links(Link::Pass);
    assert!(
        next.is_some(),
        "slot {slot} not taken while its holder's links were {link:?}: {:?}",
        slot_leaders(cars)
    );
    assert!(
        still.is_none(),
        "the holder whose links were {link:?} still says it holds {still:?} beside {next:?}"
    );
    // Observed: a ttl after the link heals, before the slots are counted.
    std::thread::sleep(ttl);
    all_slots_held(cars, 2, start_bound);
}

/// Which holder the next [`a_holder_cut_off`] strikes.
static CUTS: AtomicUsize = AtomicUsize::new(0);

/// Each of the store's nodes in turn cut off from the others past the ttl: the others
/// are a majority, so both slots stay held (or are held again within the bound, by
/// whoever reaches the majority); then healed.
fn each_store_node_cut_off(
    cars: &[Sidecar],
    ttl: Duration,
    store: &mut dyn ServerControl,
    start_bound: Duration,
) {
    for node in 0..store.nodes() {
        all_slots_held(cars, 2, start_bound);
        eprintln!("store node {node} cut off from the others");
        store.isolate_node(node, true);
        // The fault: the store node stays cut off for ttl + 300 ms.
        std::thread::sleep(ttl + Duration::from_millis(300));
        let during = eventually(ttl * 3 + Duration::from_secs(5), || {
            (slot_leaders(cars).len() == 2).then_some(())
        });
        store.isolate_node(node, false);
        assert!(
            during.is_some(),
            "the slots were not both held while store node {node} was cut off: {:?}",
            slot_leaders(cars)
        );
    }
    all_slots_held(cars, 2, start_bound);
}

/// The store paused past the ttl: every slot's holder steps down by its deadline, so
/// no slot is held a second after the ttl; once the store resumes, every slot is held
/// again (the logs' check at the end: each by a new tenure with a greater token).
fn the_store_paused(
    cars: &[Sidecar],
    ttl: Duration,
    store: &mut dyn ServerControl,
    start_bound: Duration,
) {
    store.pause();
    // The fault: the store stays paused for ttl + 1 s.
    std::thread::sleep(ttl + Duration::from_secs(1));
    let during = slot_leaders(cars);
    // Observed: 500 ms more of the paused store; the holders must not change.
    std::thread::sleep(Duration::from_millis(500));
    let later = slot_leaders(cars);
    store.resume();
    assert!(
        during.is_empty() && later.is_empty(),
        "slots held while the store was paused past the ttl: {during:?}, then {later:?}"
    );
    all_slots_held(cars, 2, start_bound);
}

/// Stops every sidecar and checks what they logged (`killed`: the pid killed, and
/// when, CLOCK_MONOTONIC ns).
fn finish(cars: Vec<Sidecar>, dir: &Path, killed: (u64, u64)) {
    finish_and_check(cars, dir, killed, |claims| {
        assert!(claims.len() >= 4, "too few tenures logged: {claims:?}");
        check_slot_claims(claims, 2);
    });
}

/// Stops every sidecar, reads the claims they logged in `dir` (a killed process's
/// claims end when it was killed: `killed`, its pid and when, CLOCK_MONOTONIC ns) and
/// runs `check` on them; a failed check prints every sidecar's log first.
pub fn finish_and_check(
    mut cars: Vec<Sidecar>,
    dir: &Path,
    killed: (u64, u64),
    check: impl FnOnce(&[LoggedClaim]) + std::panic::UnwindSafe,
) {
    for c in &mut cars {
        c.terminate(Duration::from_secs(10));
    }
    let mut claims = logged_claims(dir);
    for c in claims
        .iter_mut()
        .filter(|c| c.pid == killed.0 && c.start < killed.1)
    {
        c.end = Some(c.end.map_or(killed.1, |e| e.min(killed.1)));
    }
    if let Err(e) = std::panic::catch_unwind(|| check(&claims)) {
        for c in &cars {
            eprintln!("==== {} (pid {})\n{}", c.name, c.pid, c.stderr());
        }
        std::panic::resume_unwind(e);
    }
}
