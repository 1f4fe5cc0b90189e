//! The simulated world: N nodes, each the real [`Machine`] driven the way
//! `src/elector/driver.rs` drives it, the stores of one family, the network between
//! them, the faults, and one event queue ordered by (real time, sequence number).
//! Every random choice comes from one generator seeded by the run's seed.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;

use leasekeeper::backend::Wake;
use leasekeeper::elector::machine::{
    Answer, Config, Effect, Event, Failure, Flaws, LogLine, Machine, Next, Op, Publish, Time,
    WaitOn,
};
use leasekeeper::timing::Timing;

use super::client::{Client, Family, Out, SlotStore, SLOTS};
use super::oracle::{ms, Ns, Oracle, Violation};
use super::store::{LeaseStore, Push, Req, Resp, RlData, RlNode, RwRule, SessionStore, TtlStore};

pub const MS: Ns = 1_000_000;

/// The timing every simulated node runs with: ttl 1 s, intervals ttl/3, calls 200 ms,
/// a drift allowance of 2 % and a safety margin of 1 ms (small, so that a claim without
/// the drift factor is caught).
pub fn sim_timing() -> Timing {
    let mut t = Timing::for_ttl(Duration::from_secs(1));
    t.clock_drift = 0.02;
    t.safety_margin = Duration::from_millis(1);
    t
}

/// A clock: `local = offset + rate × real`.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub offset: f64,
    pub rate: f64,
}

impl Clock {
    pub fn local(&self, real: Ns) -> Time {
        Duration::from_nanos((self.offset + self.rate * real as f64) as u64)
    }

    /// The first real instant at which the clock shows `local`.
    pub fn real(&self, local: Time) -> Ns {
        let mut r = ((local.as_nanos() as f64 - self.offset) / self.rate).max(0.0) as Ns;
        while self.local(r) < local {
            r += 1;
        }
        r
    }
}

/// A message on the network.
#[derive(Clone, Debug)]
pub enum Msg {
    ToStore {
        store: usize,
        node: usize,
        inc: u32,
        call: u64,
        req: Req,
    },
    ToNode {
        store: usize,
        node: usize,
        inc: u32,
        call: u64,
        resp: Resp,
    },
    Push {
        store: usize,
        node: usize,
        inc: u32,
        push: Push,
    },
}

impl Msg {
    fn ends(&self) -> (usize, usize, bool) {
        match self {
            Msg::ToStore { store, node, .. } => (*node, *store, true),
            Msg::ToNode { store, node, .. } | Msg::Push { store, node, .. } => {
                (*node, *store, false)
            }
        }
    }
}

/// What happens next.
#[derive(Clone, Debug)]
pub enum Ev {
    Deliver(Msg),
    Timer {
        node: usize,
        inc: u32,
        gen: u64,
    },
    Wake {
        node: usize,
        inc: u32,
        gen: u64,
    },
    Budget {
        node: usize,
        inc: u32,
        id: u64,
    },
    Phase {
        node: usize,
        inc: u32,
        id: u64,
        phase: u8,
    },
    Done {
        node: usize,
        inc: u32,
        gen: u64,
    },
    StoreTick(usize),
    ResumeNode(usize),
    ResumeStore(usize),
    Fault(super::faults::Fault),
    Restart(usize),
    Heal,
    ReleaseCheck,
    /// The handover check's next step, and its release (see [`super::handover`]).
    Handover {
        left: u32,
    },
    HandoverRelease {
        node: usize,
        left: u32,
    },
    /// The client's own keep-alive to every store (see [`Client::ping`]).
    Ping {
        node: usize,
        inc: u32,
    },
}

/// The call id of a client's own keep-alives: never a machine's call.
const PING: u64 = u64::MAX;

/// What one store is.
#[derive(Clone, Debug)]
pub enum Kind {
    Ttl(TtlStore),
    Session(SessionStore),
    Lease(LeaseStore),
    Redlock(RlNode),
}

#[derive(Debug)]
pub struct Store {
    pub kind: Kind,
    pub clock: Clock,
    pub paused_until: Ns,
    pub held: Vec<Ev>,
    pub tick_at: Option<Ns>,
    pub snapshot: Option<RlData>,
}

/// One node: the machine, its backend's client, and what the driver keeps.
#[derive(Debug)]
pub struct Node {
    pub clock: Clock,
    pub inc: u32,
    pub machine: Option<Machine>,
    pub client: Client,
    pub paused_until: Ns,
    pub held: Vec<Ev>,
    /// The call on its way, as the driver sees it.
    pub call: Option<(u64, Op)>,
    /// The current wait (none while a call is on its way).
    pub wait: Option<WaitOn>,
    pub gen: u64,
    pub shutdown: bool,
    /// A shutdown was asked of this process (it exits once it has released).
    pub stopping: bool,
    pub releases: Vec<(u64, Option<Duration>)>,
    pub next_request: u64,
    pub cfg: NodeCfg,
    /// Pushes that came while the node was not waiting for them, kept as a backend's
    /// channel keeps them: (the holder may have changed, our record is lost).
    pub heard: (bool, bool),
}

/// How a node is configured (drawn per node and seed).
#[derive(Clone, Copy, Debug)]
pub struct NodeCfg {
    pub publishers: bool,
    pub drain: Option<Duration>,
    pub must_stop: bool,
    pub exit_on_loss: bool,
}

/// The per-seed fault mix.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub loss: f64,
    pub dup: f64,
    pub long: f64,
}

pub struct World {
    pub fam: Family,
    pub timing: Timing,
    pub flaws: Flaws,
    pub rng: super::SimRng,
    pub now: Ns,
    seq: u64,
    queue: BTreeMap<(Ns, u64), Box<Ev>>,
    pub nodes: Vec<Node>,
    pub stores: Vec<Store>,
    pub oracle: Oracle,
    pub trace: Option<Vec<(Ns, String)>>,
    pub mix: Mix,
    /// Cut links: (node, store, toward the store?, until).
    pub cuts: Vec<(usize, usize, Option<bool>, Ns)>,
    pub slow_until: Vec<Ns>,
    pub congested_until: Vec<Ns>,
    pub heal_at: Ns,
    pub healed: bool,
    pub end_at: Ns,
    /// The release of the check: (node, request id, asked at, answered at).
    pub release: Option<(usize, u64, Ns, Option<Ns>)>,
    /// The releases of the handover check (the session family).
    pub handovers: Vec<super::handover::Handover>,
    pub news: super::handover::News,
    pub events: u64,
}

/// How long the chaos lasts, in ttl.
pub const CHAOS_TTLS: u64 = 6;

impl World {
    pub fn new(seed: u64, fam: Family, flaws: Flaws, trace: bool) -> Self {
        let mut rng = super::SimRng::seed_from_u64(seed);
        let timing = sim_timing();
        let ttl = timing.ttl.as_nanos() as Ns;
        let n = rng.random_range(2..=4usize);
        let mix = Mix {
            loss: [0.0, 0.01, 0.05, 0.2][rng.random_range(0..4)],
            dup: [0.0, 0.02, 0.1][rng.random_range(0..3)],
            long: [0.0, 0.01, 0.05, 0.15][rng.random_range(0..4)],
        };
        let mut w = World {
            fam,
            timing,
            flaws,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            nodes: Vec::new(),
            stores: Vec::new(),
            oracle: Oracle::new(n),
            trace: trace.then(Vec::new),
            mix,
            cuts: Vec::new(),
            slow_until: vec![0; n],
            congested_until: vec![0; n],
            heal_at: CHAOS_TTLS * ttl,
            healed: false,
            end_at: 0,
            release: None,
            handovers: Vec::new(),
            news: Default::default(),
            events: 0,
        };
        for s in 0..fam.stores() {
            let clock = w.clock();
            let local = clock.local(0);
            let kind = match fam {
                Family::Ttl(_) => Kind::Ttl(TtlStore::default()),
                Family::SqlTtl(_) => Kind::Ttl(TtlStore {
                    rows: true,
                    ..TtlStore::default()
                }),
                // Each slot counts its own tokens, from wherever its history left it.
                Family::Slots(_, SlotStore::Ttl) => Kind::Ttl(TtlStore {
                    counter: w.rng.random_range(0..1000),
                    ..TtlStore::default()
                }),
                Family::Slots(_, SlotStore::Session) => Kind::Session(SessionStore {
                    seq: w.rng.random_range(0..1000),
                    ..SessionStore::default()
                }),
                Family::Session(_) => Kind::Session(SessionStore {
                    lists: true,
                    ..SessionStore::default()
                }),
                Family::EtcdSession(_) => Kind::Session(SessionStore {
                    lists: true,
                    leases: true,
                    ..SessionStore::default()
                }),
                Family::Rw(rule) => Kind::Session(SessionStore {
                    rule,
                    lists: rule == RwRule::Right,
                    ..SessionStore::default()
                }),
                Family::Lease(_) => Kind::Lease(LeaseStore::default()),
                Family::Redlock(..) => Kind::Redlock(RlNode::new(local)),
            };
            let snapshot = match &kind {
                Kind::Redlock(r) if s == 0 => Some(r.data.clone()),
                _ => None,
            };
            w.stores.push(Store {
                kind,
                clock,
                paused_until: 0,
                held: Vec::new(),
                tick_at: None,
                snapshot,
            });
        }
        for i in 0..n {
            let node = w.new_node(i, 0);
            w.nodes.push(node);
        }
        let mix = w.mix;
        w.note(|| {
            format!(
                "seed {seed} family {} nodes {n} mix {mix:?} flaws {flaws:?}",
                fam.name()
            )
        });
        for i in 0..n {
            let cfg = w.nodes[i].cfg;
            w.note(|| format!("n{i}: {cfg:?}"));
        }
        super::faults::schedule(&mut w);
        w.at(w.heal_at, Ev::Heal);
        w
    }

    /// A clock within ±drift/2 of real time, with an offset.
    fn clock(&mut self) -> Clock {
        let d = self.timing.clock_drift;
        Clock {
            offset: self.rng.random_range(0.0..10e9),
            rate: 1.0 + d * self.rng.random_range(-0.5..0.5),
        }
    }

    fn new_node(&mut self, i: usize, inc: u32) -> Node {
        let clock = if inc == 0 {
            self.clock()
        } else {
            self.nodes[i].clock
        };
        let cfg = NodeCfg {
            publishers: self.rng.random_bool(0.25),
            drain: self
                .rng
                .random_bool(0.25)
                .then(|| Duration::from_millis(self.rng.random_range(20..300))),
            must_stop: self.rng.random_bool(0.2),
            exit_on_loss: self.rng.random_bool(0.1),
        };
        let machine = Machine::new(Config {
            timing: self.timing,
            exit_on_loss: cfg.exit_on_loss,
            publishers: cfg.publishers,
            must_stop: cfg.must_stop,
            drain: cfg.drain,
            seed: self.rng.random(),
            flaws: self.flaws,
        });
        Node {
            clock,
            inc,
            machine: Some(machine),
            client: Client::new(self.fam, self.timing.ttl, self.timing.clock_drift, i, inc),
            paused_until: 0,
            held: Vec::new(),
            call: None,
            wait: None,
            gen: 0,
            shutdown: false,
            stopping: false,
            releases: Vec::new(),
            next_request: 0,
            cfg,
            heard: (false, false),
        }
    }

    pub fn at(&mut self, t: Ns, ev: Ev) {
        self.seq += 1;
        self.queue.insert((t.max(self.now), self.seq), Box::new(ev));
    }

    /// A trace line (made only when tracing).
    pub fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(tr) = self.trace.as_mut() {
            tr.push((self.now, format!("{:>12} {}", ms(self.now), line())));
        }
    }

    pub fn tracing(&self) -> bool {
        self.trace.is_some()
    }

    /// Runs to the end; the violations found.
    pub fn run(&mut self) -> Vec<Violation> {
        for i in 0..self.nodes.len() {
            self.feed(i, Event::Start);
            let inc = self.nodes[i].inc;
            self.at(self.now, Ev::Ping { node: i, inc });
        }
        while let Some(((t, _), ev)) = self.queue.pop_first() {
            if self.end_at != 0 && t > self.end_at {
                break;
            }
            self.now = t;
            self.events += 1;
            self.dispatch(*ev);
        }
        self.verdict()
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver(msg) => self.deliver(msg),
            Ev::Timer { node, inc, .. }
            | Ev::Wake { node, inc, .. }
            | Ev::Budget { node, inc, .. }
            | Ev::Phase { node, inc, .. }
            | Ev::Done { node, inc, .. }
            | Ev::Ping { node, inc } => self.node_event(node, inc, ev),
            Ev::StoreTick(s) => self.store_tick(s),
            Ev::ResumeNode(i) => self.resume_node(i),
            Ev::ResumeStore(s) => self.resume_store(s),
            Ev::Fault(f) => super::faults::apply(self, f),
            Ev::Restart(i) => self.restart(i),
            Ev::Heal => super::faults::heal(self),
            Ev::ReleaseCheck => super::faults::release_check(self),
            Ev::Handover { left } => super::handover::step(self, left),
            Ev::HandoverRelease { node, left } => super::handover::release(self, node, left),
        }
    }

    /// An event for node `i`'s incarnation `inc`: held while paused, dropped after a
    /// crash or restart.
    fn node_event(&mut self, i: usize, inc: u32, ev: Ev) {
        let node = &mut self.nodes[i];
        if node.inc != inc || node.machine.is_none() {
            return;
        }
        if node.paused_until > self.now {
            node.held.push(ev);
            return;
        }
        match ev {
            Ev::Timer { gen, .. } if gen == node.gen && node.wait.is_some() => {
                self.feed(i, Event::Timer)
            }
            Ev::Wake { gen, .. }
                if gen == node.gen && matches!(node.wait, Some(WaitOn::Change { .. })) =>
            {
                self.feed(i, Event::Woke(Wake::Changed))
            }
            Ev::Done { gen, .. } if gen == node.gen && node.wait.is_some() => {
                self.feed(i, Event::Done)
            }
            Ev::Budget { id, .. } => self.budget(i, id),
            Ev::Phase { id, phase, .. } => {
                let outs = self.nodes[i].client.phase_timeout(id, phase);
                self.client_outs(i, id, outs);
            }
            Ev::Deliver(msg) => self.at_node(i, msg),
            Ev::Ping { .. } => self.ping(i),
            _ => {}
        }
    }

    /// Node `i`'s client keeps its sessions alive by itself, every ttl / 3.
    fn ping(&mut self, i: usize) {
        let Some((req, stores)) = self.nodes[i].client.ping() else {
            return;
        };
        let inc = self.nodes[i].inc;
        for store in stores {
            self.send(Msg::ToStore {
                store,
                node: i,
                inc,
                call: PING,
                req: req.clone(),
            });
        }
        let every = self.timing.ttl / 3;
        self.at(self.now + every.as_nanos() as Ns, Ev::Ping { node: i, inc });
    }

    pub fn local(&self, i: usize) -> Time {
        self.nodes[i].clock.local(self.now)
    }

    fn budget(&mut self, i: usize, id: u64) {
        let Some((call, op)) = self.nodes[i].call else {
            return;
        };
        if call != id {
            return;
        }
        self.nodes[i].call = None;
        self.nodes[i].client.abandon(id);
        let answer = timed_out(op, self.timing.ttl);
        self.feed(i, Event::Answer { id, answer });
    }

    /// The machine of node `i` sees `event` now; its step is applied.
    pub fn feed(&mut self, i: usize, event: Event) {
        let local = self.local(i);
        let Some(m) = self.nodes[i].machine.as_mut() else {
            return;
        };
        let step = m.on(local, event.clone());
        if self.tracing() {
            let line = format!(
                "n{i} @{} {event:?} -> {:?} {:?}",
                fmt_local(local),
                step.effects,
                step.next
            );
            self.note(|| line);
        }
        for effect in step.effects {
            self.effect(i, effect);
        }
        self.next(i, step.next);
    }

    fn effect(&mut self, i: usize, effect: Effect) {
        let (clock, inc) = (self.nodes[i].clock, self.nodes[i].inc);
        match effect {
            Effect::Log(LogLine::ClaimStart {
                token, deadline, ..
            }) => {
                let (shared, slot) = (self.nodes[i].client.shared(), self.nodes[i].client.slot);
                let at = (self.now, clock.real(deadline));
                (self.oracle).start(i, inc, token, at, (shared, slot));
                super::handover::claimed(self, i, token);
            }
            Effect::Publish(Publish::Observed(holder)) => {
                super::handover::named(self, i, holder.and_then(|h| h.token));
            }
            Effect::Log(LogLine::Deadline { deadline, .. }) => {
                self.oracle.deadline(i, clock.real(deadline))
            }
            Effect::Log(LogLine::ClaimEnd { .. }) => self.oracle.end(i, self.now),
            Effect::Reply { id, released } => {
                super::handover::answered(self, i, id, released);
                if let Some((node, req, asked, None)) = self.release {
                    if node == i && req == id && released {
                        self.release = Some((node, req, asked, Some(self.now)));
                    }
                }
            }
            _ => {}
        }
    }

    fn next(&mut self, i: usize, next: Next) {
        match next {
            Next::Exit(e) => {
                self.note(|| format!("n{i} exits: {e:?}"));
                let node = &mut self.nodes[i];
                node.machine = None;
                node.call = None;
                node.wait = None;
                let down = self.rng.random_range(20 * MS..500 * MS);
                self.at(self.now + down, Ev::Restart(i));
            }
            Next::Call { id, op, budget } => {
                let local = self.local(i);
                let node = &mut self.nodes[i];
                node.call = Some((id, op));
                node.wait = None;
                if op == Op::Campaign {
                    node.heard = (false, false);
                }
                node.gen += 1;
                let (inc, at) = (node.inc, node.clock.real(local + budget));
                self.at(at, Ev::Budget { node: i, inc, id });
                let outs = self.nodes[i].client.start(id, op, local);
                self.client_outs(i, id, outs);
            }
            Next::Wait {
                on: WaitOn::Answer, ..
            } => {}
            Next::Wait { until, on } => self.wait(i, until, on),
        }
    }

    fn wait(&mut self, i: usize, until: Option<Time>, on: WaitOn) {
        let local = self.local(i);
        let node = &mut self.nodes[i];
        node.call = None;
        node.wait = Some(on);
        node.gen += 1;
        let (inc, gen, clock) = (node.inc, node.gen, node.clock);
        if let Some(u) = until {
            self.at(clock.real(u), Ev::Timer { node: i, inc, gen });
        }
        match on {
            WaitOn::Change { max } => {
                let mut wake = local + max;
                if std::mem::take(&mut self.nodes[i].client.split) {
                    // A split vote: the backend tries again after a short random delay.
                    wake = local + Duration::from_millis(self.rng.random_range(2..25));
                }
                let client = &mut self.nodes[i].client;
                let until = (client.lease_wait(local, max)).or_else(|| client.session_wait(local));
                if let Some(until) = until {
                    wake = wake.min(until.max(local));
                }
                self.at(clock.real(wake), Ev::Wake { node: i, inc, gen });
            }
            // The publishers, the app's drain, the command: done after a while, or
            // (now and then, for the command) never.
            WaitOn::Publishers | WaitOn::Drained | WaitOn::Stopped
                if on != WaitOn::Stopped || self.rng.random_bool(0.9) =>
            {
                let after = self.rng.random_range(0..300 * MS);
                self.at(self.now + after, Ev::Done { node: i, inc, gen });
            }
            _ => {}
        }
        // As the driver: a shutdown first, then a release request, only in a wait.
        super::faults::poke(self, i);
        // Then what a backend's channel kept meanwhile.
        let (gen_now, heard) = (self.nodes[i].gen, self.nodes[i].heard);
        if gen_now == gen && self.nodes[i].machine.is_some() {
            match on {
                WaitOn::Change { .. } if heard.0 => {
                    self.nodes[i].heard.0 = false;
                    self.feed(i, Event::Woke(Wake::Changed));
                }
                WaitOn::Lead if heard.1 => {
                    self.nodes[i].heard.1 = false;
                    self.feed(i, Event::RecordLost);
                }
                _ => {}
            }
        }
    }

    pub fn client_outs(&mut self, i: usize, id: u64, outs: Vec<Out>) {
        let (inc, clock) = (self.nodes[i].inc, self.nodes[i].clock);
        for out in outs {
            match out {
                Out::Send(store, req) => self.send(Msg::ToStore {
                    store,
                    node: i,
                    inc,
                    call: id,
                    req,
                }),
                Out::Answer(answer) => {
                    if self.nodes[i].call.is_some_and(|(c, _)| c == id) {
                        self.nodes[i].call = None;
                    }
                    self.feed(i, Event::Answer { id, answer });
                }
                Out::Late(late, answer) => {
                    self.note(|| format!("n{i} late answer to call {late}"));
                    self.feed(i, Event::Answer { id: late, answer });
                }
                Out::PhaseTimer(d, phase) => {
                    let at = clock.real(self.local(i) + d);
                    self.at(
                        at,
                        Ev::Phase {
                            node: i,
                            inc,
                            id,
                            phase,
                        },
                    );
                }
            }
            if self.nodes[i].inc != inc || self.nodes[i].machine.is_none() {
                return;
            }
        }
    }

    fn at_node(&mut self, i: usize, msg: Msg) {
        let local = self.local(i);
        match msg {
            Msg::ToNode {
                store, call, resp, ..
            } => {
                let outs = self.nodes[i].client.reply(call, store, resp, local);
                self.client_outs(i, call, outs);
            }
            Msg::Push { store, push, .. } => {
                let heard = self.nodes[i].client.push(store, &push, local);
                if let (Some(WaitOn::Change { .. }), true) = (self.nodes[i].wait, heard.stagger) {
                    // A stagger began: the wait ends with it (or at once, when a
                    // watch fires).
                    let node = &self.nodes[i];
                    let (inc, gen, clock) = (node.inc, node.gen, node.clock);
                    if let Some(until) = self.nodes[i].client.session_wait(local) {
                        self.at(clock.real(until.max(local)), Ev::Wake { node: i, inc, gen });
                    }
                }
                match self.nodes[i].wait {
                    Some(WaitOn::Change { .. }) if heard.changed => {
                        self.feed(i, Event::Woke(Wake::Changed))
                    }
                    Some(WaitOn::Lead) if heard.own_lost => self.feed(i, Event::RecordLost),
                    _ => {
                        let kept = &mut self.nodes[i].heard;
                        kept.0 |= heard.changed;
                        kept.1 |= heard.own_lost;
                    }
                }
            }
            Msg::ToStore { .. } => unreachable!(),
        }
    }

    fn deliver(&mut self, msg: Msg) {
        match msg {
            Msg::ToStore { store, .. } => self.at_store(store, msg),
            Msg::ToNode { node, inc, .. } | Msg::Push { node, inc, .. } => {
                self.node_event(node, inc, Ev::Deliver(msg))
            }
        }
    }

    fn at_store(&mut self, s: usize, msg: Msg) {
        if self.stores[s].paused_until > self.now {
            self.stores[s].held.push(Ev::Deliver(msg));
            return;
        }
        let Msg::ToStore {
            node,
            inc,
            call,
            req,
            ..
        } = msg
        else {
            unreachable!()
        };
        let local = self.stores[s].clock.local(self.now);
        let ttl = self.timing.ttl;
        let (resp, pushes) = match &mut self.stores[s].kind {
            Kind::Ttl(st) => st.handle(local, ttl, &req),
            Kind::Session(st) => st.handle(local, ttl, &req),
            Kind::Lease(st) => st.handle(&req),
            Kind::Redlock(st) => st.handle(local, ttl, &req),
        };
        if self.tracing() {
            self.note(|| {
                format!(
                    "s{s} @{} n{node} call {call}: {req:?} -> {resp:?} {pushes:?}",
                    fmt_local(local)
                )
            });
        }
        self.send(Msg::ToNode {
            store: s,
            node,
            inc,
            call,
            resp,
        });
        self.push_all(s, pushes);
        self.schedule_tick(s);
    }

    fn push_all(&mut self, s: usize, pushes: Vec<Push>) {
        for push in pushes {
            for node in 0..self.nodes.len() {
                let inc = self.nodes[node].inc;
                self.send(Msg::Push {
                    store: s,
                    node,
                    inc,
                    push: push.clone(),
                });
            }
        }
    }

    fn schedule_tick(&mut self, s: usize) {
        let next = match &self.stores[s].kind {
            Kind::Ttl(st) => st.next_expiry(),
            Kind::Session(st) => st.next_expiry(),
            Kind::Redlock(st) => st.data.store.next_expiry(),
            Kind::Lease(_) => None,
        };
        let Some(next) = next else { return };
        let at = self.stores[s].clock.real(next);
        if self.stores[s]
            .tick_at
            .is_none_or(|t| t <= self.now || at < t)
        {
            self.stores[s].tick_at = Some(at);
            self.at(at, Ev::StoreTick(s));
        }
    }

    fn store_tick(&mut self, s: usize) {
        if self.stores[s].paused_until > self.now {
            self.stores[s].held.push(Ev::StoreTick(s));
            return;
        }
        if self.stores[s].tick_at.is_some_and(|t| t <= self.now) {
            self.stores[s].tick_at = None;
        }
        let local = self.stores[s].clock.local(self.now);
        let pushes: Vec<Push> = match &mut self.stores[s].kind {
            Kind::Ttl(st) => st
                .expire(local)
                .map(|key| Push::Gone { key })
                .into_iter()
                .collect(),
            Kind::Session(st) => st.expire(local),
            Kind::Redlock(st) => st
                .expire(local)
                .map(|key| Push::Gone { key })
                .into_iter()
                .collect(),
            Kind::Lease(_) => Vec::new(),
        };
        if !pushes.is_empty() {
            self.note(|| format!("s{s} expired: {pushes:?}"));
        }
        self.push_all(s, pushes);
        self.schedule_tick(s);
    }

    fn resume_node(&mut self, i: usize) {
        if self.nodes[i].paused_until > self.now {
            return;
        }
        self.note(|| format!("n{i} resumed"));
        for ev in std::mem::take(&mut self.nodes[i].held) {
            self.at(self.now, ev);
        }
        super::faults::poke(self, i);
    }

    fn resume_store(&mut self, s: usize) {
        if self.stores[s].paused_until > self.now {
            return;
        }
        self.note(|| format!("s{s} resumed"));
        for ev in std::mem::take(&mut self.stores[s].held) {
            self.at(self.now, ev);
        }
    }

    /// A new process for node `i`: a new machine (new seed, empty memory), the same
    /// identity and clock, a new nonce and session.
    pub fn restart(&mut self, i: usize) {
        if self.nodes[i].machine.is_some() {
            return;
        }
        if self.fence_lost() {
            // A fresh process has seen no token (see `faults`): it waits.
            self.at(self.now + 10 * MS, Ev::Restart(i));
            return;
        }
        let inc = self.nodes[i].inc + 1;
        let node = self.new_node(i, inc);
        self.nodes[i] = node;
        self.note(|| format!("n{i} restarted as #{inc}"));
        self.feed(i, Event::Start);
        self.at(self.now, Ev::Ping { node: i, inc });
    }

    /// Whether a Redis take with a floor below `token` is on its way to a store (or
    /// held by a paused one).
    pub fn takes_below(&self, token: u64) -> bool {
        let held = self.stores.iter().flat_map(|s| s.held.iter());
        let mut evs = self.queue.values().map(|e| &**e).chain(held);
        evs.any(|ev| {
            matches!(ev, Ev::Deliver(Msg::ToStore { req: Req::RedisTake { floor, .. } | Req::SqlTake { floor, .. }, .. }) if *floor < token)
        })
    }

    /// Whether the single Redis server (or SQL's counter row) lost its fence counter
    /// and no take set it since.
    pub fn fence_lost(&self) -> bool {
        matches!(&self.stores[0].kind, Kind::Ttl(st) if st.fence_lost)
    }

    /// A crash (`kill -9`): the claim ends now, nothing more is processed.
    pub fn crash(&mut self, i: usize) {
        self.oracle.end(i, self.now);
        let node = &mut self.nodes[i];
        node.machine = None;
        node.call = None;
        node.wait = None;
        node.held.clear();
        node.paused_until = 0;
    }

    /// Sends `msg` through the network: cut links drop it, the rest may be lost,
    /// delayed, reordered (independent delays) or duplicated.
    pub fn send(&mut self, msg: Msg) {
        let (node, store, up) = msg.ends();
        let cut = self.cuts.iter().any(|&(n, s, dir, until)| {
            n == node && s == store && until > self.now && dir.is_none_or(|d| d == up)
        });
        if cut || (!self.healed && self.rng.random_bool(self.mix.loss)) {
            if self.tracing() {
                self.note(|| format!("lost: {msg:?}"));
            }
            return;
        }
        let copies = if !self.healed && self.rng.random_bool(self.mix.dup) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let d = self.delay(node);
            self.at(self.now + d, Ev::Deliver(msg.clone()));
        }
    }

    /// Mostly well under a millisecond; sometimes tens of ms; with the seed's `long`
    /// share up to half a ttl; on a slow node's link another 0.1–0.5 ttl, on a
    /// congested one another 20–150 ms.
    fn delay(&mut self, node: usize) -> Ns {
        let ttl = self.timing.ttl.as_nanos() as Ns;
        if self.healed {
            return self.rng.random_range(MS / 10..2 * MS);
        }
        let r: f64 = self.rng.random();
        let mut d = if r < self.mix.long {
            self.rng.random_range(20 * MS..ttl / 2)
        } else if r < self.mix.long + 0.1 {
            self.rng.random_range(2 * MS..20 * MS)
        } else {
            self.rng.random_range(MS / 10..2 * MS)
        };
        if self.slow_until[node] > self.now {
            d += self.rng.random_range(ttl / 10..ttl / 2);
        }
        if self.congested_until[node] > self.now {
            d += self.rng.random_range(20 * MS..150 * MS);
        }
        d
    }

    fn verdict(&mut self) -> Vec<Violation> {
        let mut found = self.oracle.check_safety();
        let bound = super::faults::heal_bound(&self.timing);
        match self.oracle.first_claim_after(self.heal_at) {
            Some(d) if d <= bound => {}
            _ => found.push(Violation::NoLeaderAfterHeal {
                healed_at: self.heal_at,
                bound,
            }),
        }
        if let Family::Slots(..) = self.fam {
            found.extend(self.oracle.slots_unheld(self.heal_at, bound, SLOTS as u32));
        }
        if let Some((node, _, asked, Some(answered))) = self.release {
            let bound = super::faults::release_bound(&self.timing);
            let taken = self
                .oracle
                .other_claim_after(node, asked)
                .map(|d| asked + d);
            // A shared holder's release leaves the others holding: nothing to take.
            let others_hold = self.oracle.other_claim_at(node, answered);
            if !others_hold && taken.is_none_or(|t| t > answered + bound) {
                found.push(Violation::ReleaseNotTaken {
                    node,
                    released_at: answered,
                    bound,
                });
            }
        }
        found.extend(super::handover::verdict(self));
        found
    }
}

pub fn fmt_local(t: Time) -> String {
    format!("{:.3}ms", t.as_nanos() as f64 / 1e6)
}

/// What the driver hands the machine when a call's budget passes first.
pub fn timed_out(op: Op, ttl: Duration) -> Answer {
    let failed = Failure { timed_out: true };
    match op {
        Op::Campaign => Answer::Campaign {
            result: Err(failed),
            ttl,
            lease: 0,
        },
        Op::Renew => Answer::Renew {
            result: Err(failed),
            ttl,
        },
        Op::Release => Answer::Release,
    }
}
