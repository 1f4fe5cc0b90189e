//! The exhaustive search: every interleaving, within small bounds, of 2–3 copies of
//! the real machine against one TTL-CAS store (the Redis/SQL family), breadth first.
//!
//! Time is discrete (ticks of [`Bounds::tick`]); clocks are exact. At each state any
//! of these may happen: a message in flight is delivered (in any order: reordering and
//! any delay) or dropped (up to `drops`); a node's timer fires (at or after its
//! instant: a node may be slow or paused); a follower's wait ends (a push, or its
//! maximum); a leader is asked to release (up to `releases`); a node crashes (up to
//! `crashes`); time advances one tick (up to `horizon`). A call whose budget has passed
//! is answered with a time-out before that node does anything else, as the driver does.
//! States are deduplicated on the machines' `state()`, the drivers' calls and waits,
//! the store and the network (a 128-bit hash). Checked at every claim: no other claim
//! runs at that instant, and its token is above every earlier one.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use leasekeeper::backend::{Campaign, Renewal, Wake};
use leasekeeper::elector::machine::{
    Answer, Config, Effect, Event, Flaws, LogLine, Machine, Next, Op, Time, WaitOn,
};
use leasekeeper::status::Holder;

use super::store::{Req, Resp, TtlStore};
use super::world::sim_timing;

/// The search's bounds.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub nodes: usize,
    pub tick: Duration,
    /// Time stops here.
    pub horizon: Duration,
    /// At most this many steps from the start.
    pub depth: usize,
    pub drops: u8,
    pub crashes: u8,
    pub releases: u8,
}

/// What the search found.
#[derive(Debug, Default)]
pub struct Found {
    pub states: u64,
    pub transitions: u64,
    pub deepest: usize,
    pub claims: u64,
    /// The first violation, and after how many steps.
    pub violation: Option<(String, usize)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Msg {
    node: usize,
    call: u64,
    /// To the store (a request) or back (a reply).
    req: Req,
    resp: Option<Resp>,
}

#[derive(Clone, Debug)]
struct Node {
    machine: Option<Machine>,
    call: Option<(u64, Op, Time)>,
    wait: Option<(Option<Time>, WaitOn)>,
    claim: Option<(u64, Time)>,
    key: u64,
}

#[derive(Clone, Debug)]
struct State {
    now: Time,
    nodes: Vec<Node>,
    store: TtlStore,
    net: Vec<Msg>,
    drops: u8,
    crashes: u8,
    releases: u8,
    top_token: u64,
    depth: usize,
}

impl State {
    fn key(&self) -> (u64, u64) {
        let mut a = DefaultHasher::new();
        let mut b = DefaultHasher::new();
        0xA5u8.hash(&mut b);
        for h in [&mut a, &mut b] {
            self.now.hash(h);
            for n in &self.nodes {
                n.machine.as_ref().map(|m| m.state()).hash(h);
                (n.call, n.wait, n.claim, n.key).hash(h);
            }
            self.store.hash(h);
            self.net.hash(h);
            (self.drops, self.crashes, self.releases, self.top_token).hash(h);
        }
        (a.finish(), b.finish())
    }
}

/// Runs the search.
pub fn explore(bounds: Bounds, flaws: Flaws) -> Found {
    let timing = sim_timing();
    let mut start = State {
        now: Duration::ZERO,
        nodes: Vec::new(),
        store: TtlStore::default(),
        net: Vec::new(),
        drops: bounds.drops,
        crashes: bounds.crashes,
        releases: bounds.releases,
        top_token: 0,
        depth: 0,
    };
    for i in 0..bounds.nodes {
        let machine = Machine::new(Config {
            timing,
            exit_on_loss: false,
            publishers: false,
            must_stop: false,
            drain: None,
            seed: i as u64,
            flaws,
        });
        start.nodes.push(Node {
            machine: Some(machine),
            call: None,
            wait: None,
            claim: None,
            key: (i as u64 + 1) << 32,
        });
    }
    let mut found = Found::default();
    let mut violation = None;
    for i in 0..bounds.nodes {
        feed(&mut start, i, Event::Start, &mut violation);
    }
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    seen.insert(start.key());
    let mut queue = VecDeque::from([start]);
    while let Some(s) = queue.pop_front() {
        found.states += 1;
        found.deepest = found.deepest.max(s.depth);
        if s.depth >= bounds.depth {
            continue;
        }
        for next in successors(&s, &bounds) {
            found.transitions += 1;
            let (next, violated) = next;
            if let Some(v) = violated {
                found.violation = Some((v, next.depth));
                return found;
            }
            found.claims += next.nodes.iter().filter(|n| n.claim.is_some()).count() as u64;
            if seen.insert(next.key()) {
                queue.push_back(next);
            }
        }
    }
    found
}

type Next2 = (State, Option<String>);

/// One step from a state: it changes the copy, and says what it broke, if anything.
type Action<'a> = &'a dyn Fn(&mut State, &mut Option<String>);

fn successors(s: &State, b: &Bounds) -> Vec<Next2> {
    let mut out = Vec::new();
    let mut step = |f: Action| {
        let mut n = s.clone();
        n.depth += 1;
        let mut v = None;
        f(&mut n, &mut v);
        out.push((n, v));
    };
    for k in 0..s.net.len() {
        step(&|n, v| {
            let m = n.net.remove(k);
            deliver(n, m, v);
        });
        if s.drops > 0 {
            step(&|n, _| {
                n.net.remove(k);
                n.drops -= 1;
            });
        }
    }
    for i in 0..s.nodes.len() {
        node_steps(s, i, &mut step);
    }
    if s.now + b.tick <= b.horizon {
        step(&|n, _| n.now += b.tick);
    }
    out
}

fn node_steps(s: &State, i: usize, step: &mut dyn FnMut(Action)) {
    let node = &s.nodes[i];
    if node.machine.is_none() {
        return;
    }
    if let Some((id, op, budget)) = node.call {
        if s.now >= budget {
            // The driver's timeout comes first.
            step(&|n, v| {
                n.nodes[i].call = None;
                let answer = super::world::timed_out(op, sim_timing().ttl);
                feed(n, i, Event::Answer { id, answer }, v);
            });
            return;
        }
    }
    if let Some((until, on)) = node.wait {
        if until.is_some_and(|u| s.now >= u) {
            step(&|n, v| feed(n, i, Event::Timer, v));
        }
        if matches!(on, WaitOn::Change { .. }) {
            step(&|n, v| feed(n, i, Event::Woke(Wake::Changed), v));
        }
        if s.releases > 0 && node.claim.is_some() {
            step(&|n, v| {
                n.releases -= 1;
                feed(
                    n,
                    i,
                    Event::ReleaseRequested {
                        id: 1,
                        cooldown: None,
                    },
                    v,
                );
            });
        }
    }
    if s.crashes > 0 {
        step(&|n, _| {
            n.crashes -= 1;
            let node = &mut n.nodes[i];
            node.machine = None;
            node.call = None;
            node.wait = None;
            node.claim = None;
        });
    }
}

fn deliver(s: &mut State, m: Msg, v: &mut Option<String>) {
    let ttl = sim_timing().ttl;
    let Some(resp) = m.resp else {
        let (resp, _pushes) = s.store.handle(s.now, ttl, &m.req);
        s.net.push(Msg {
            resp: Some(resp),
            ..m
        });
        s.net.sort();
        return;
    };
    let i = m.node;
    if s.nodes[i].machine.is_none() {
        return;
    }
    let answer = match (&m.req, resp) {
        (Req::Campaign { .. }, Resp::Acquired(token)) => Answer::Campaign {
            result: Ok(Campaign::Acquired { token }),
            ttl,
            lease: 0,
        },
        (Req::Campaign { .. }, Resp::Held(token)) => Answer::Campaign {
            result: Ok(Campaign::Held(Some(Holder {
                identity: "other".into(),
                token,
            }))),
            ttl,
            lease: 0,
        },
        (Req::Renew { .. }, Resp::Renewed(ok)) => Answer::Renew {
            result: Ok(if ok { Renewal::Renewed } else { Renewal::Lost }),
            ttl,
        },
        _ => Answer::Release,
    };
    if s.nodes[i].call.is_some_and(|(id, _, _)| id == m.call) {
        s.nodes[i].call = None;
    }
    feed(s, i, Event::Answer { id: m.call, answer }, v);
}

/// Node `i`'s machine sees `event` now; its effects and next step are applied.
fn feed(s: &mut State, i: usize, event: Event, v: &mut Option<String>) {
    let now = s.now;
    let Some(m) = s.nodes[i].machine.as_mut() else {
        return;
    };
    let step = m.on(now, event);
    for effect in step.effects {
        match effect {
            Effect::Log(LogLine::ClaimStart {
                token, deadline, ..
            }) => {
                let other = s
                    .nodes
                    .iter()
                    .enumerate()
                    .find(|(j, n)| *j != i && n.claim.is_some_and(|(_, d)| now < d));
                if let Some((j, _)) = other {
                    *v = Some(format!(
                        "n{i} claims token {token} at {now:?} while n{j} claims"
                    ));
                }
                if token <= s.top_token && v.is_none() {
                    *v = Some(format!(
                        "n{i} claims token {token}, not above {}",
                        s.top_token
                    ));
                }
                s.top_token = s.top_token.max(token);
                s.nodes[i].claim = Some((token, deadline));
            }
            Effect::Log(LogLine::Deadline { token, deadline }) => {
                s.nodes[i].claim = Some((token, deadline))
            }
            Effect::Log(LogLine::ClaimEnd { .. }) => s.nodes[i].claim = None,
            _ => {}
        }
    }
    let node = &mut s.nodes[i];
    match step.next {
        Next::Exit(_) => {
            node.machine = None;
            node.call = None;
            node.wait = None;
        }
        Next::Call { id, op, budget } => {
            node.call = Some((id, op, now + budget));
            node.wait = None;
            let key = node.key;
            let req = match op {
                Op::Campaign => Req::Campaign { key },
                Op::Renew => Req::Renew { key },
                Op::Release => {
                    node.key += 1;
                    Req::Release { key }
                }
            };
            s.net.push(Msg {
                node: i,
                call: id,
                req,
                resp: None,
            });
            s.net.sort();
        }
        Next::Wait {
            on: WaitOn::Answer, ..
        } => {}
        Next::Wait { until, on } => {
            node.call = None;
            node.wait = Some((until, on));
        }
    }
}
