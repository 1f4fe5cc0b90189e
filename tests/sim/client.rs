//! The client side of each store family: what a node's backend sends for one call of
//! the machine, how the replies make the call's answer, and what a push means. A few
//! lines per family, modeled on `src/backend/*.rs`.

use std::time::Duration;

use leasekeeper::backend::etcd::driven as etcd;
use leasekeeper::backend::kubernetes::driven::{self, Campaigner, Decision, LeaseView};
use leasekeeper::backend::redis::driven as redis;
use leasekeeper::backend::redlock::driven as rl;
use leasekeeper::backend::slots::Picker;
use leasekeeper::backend::sql::driven as sql;
use leasekeeper::backend::zookeeper::driven as zk;
use leasekeeper::backend::{BackendError, Campaign, Renewal};
use leasekeeper::elector::machine::{Answer, Failure, Op, Time};
use leasekeeper::status::Holder;

use super::store::{LeaseRec, Push, Req, Resp, RwRule, SHARED};

mod etcd_session;
mod redis_ttl;
mod redlock;

/// The store families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// A TTL record with compare-and-set judged by the store's clock (Redis, SQL),
    /// the client deciding on the take's and the renewal's answers through the Redis
    /// store's own core (`redis::Candidate`) with these known-wrong rules on (none:
    /// the product's).
    Ttl(redis::Flaws),
    /// The TTL family on SQL's terms: the store answers a take with the row it left,
    /// and the client decides through the SQL store's own core (`sql::Candidate`: a row
    /// is ours only by its tenure id) with these known-wrong rules on (none: the
    /// product's).
    SqlTtl(sql::Flaws),
    /// A session-bound record with a server-side session timeout (ZooKeeper, etcd):
    /// the store answers a campaign with a listing of the latch nodes, and the client
    /// decides through the ZooKeeper store's own core (`zk::campaign`) with these
    /// known-wrong rules on (none: the product's).
    Session(zk::Flaws),
    /// The session family on etcd's terms: a campaign grants a lease (when it has
    /// none) and reads the queue, which extends no lease; only keep-alives do (the
    /// client's own, every ttl / 3, and a renew's). The client decides through the etcd
    /// store's own core (`etcd::Round`: the refresh before a claim) with these
    /// known-wrong rules on (none: the product's).
    EtcdSession(etcd::Flaws),
    /// A Kubernetes Lease: candidates judge expiry by their own clocks, deciding
    /// through the Kubernetes store's own core (`driven::Campaigner`) with these
    /// known-wrong rules on (none: the product's).
    Lease(driven::Flaws),
    /// A majority of N independent TTL stores (Redlock), the client counting their
    /// answers through the Redlock store's own core (`rl::Campaigner`) with these
    /// known-wrong rules on (none: the product's).
    Redlock(usize, rl::Flaws),
    /// The session family's read-write lock (`--mode`): node `i` is a reader when
    /// `i % 3 != 0`, a writer otherwise; the rule decides who may hold.
    Rw(RwRule),
    /// An election of [`SLOTS`] holders (`--holders`): one store per slot (a TTL
    /// store or a session store), the real [`Picker`] choosing which slot a campaign
    /// asks; the rule says what the backend tells the machine and the publishers.
    Slots(SlotRule, SlotStore),
}

/// The stores of the slots family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotStore {
    /// A TTL record per slot (Redis, SQL).
    Ttl,
    /// A session store per slot (ZooKeeper, etcd): a campaign leaves a node in the
    /// slot's queue, and the client keeps every session it has alive by itself (a
    /// ZooKeeper client's pings, an etcd follower's keep-alives), whatever the
    /// elector does.
    Session,
}

/// The slots of the slots family.
pub const SLOTS: usize = 2;

/// What a slots backend tells of the slot it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotRule {
    /// The slot taken, to the machine (whose token rule is per slot) and to the
    /// publishers.
    Right,
    /// Known-wrong: the machine is not told the slot, so its token rule compares a
    /// slot's token with another slot's.
    OneLease,
    /// Known-wrong: the publishers name the slot asked first, not the slot taken.
    WrongSlotNamed,
    /// Known-wrong: a candidate that took a slot keeps its places in the others'
    /// queues (the session store's nodes), so a slot freed passes, in the store's
    /// eyes, to a candidate that never claims it.
    NoWithdraw,
}

impl Family {
    pub const ALL: [Family; 9] = [
        Family::Ttl(redis::Flaws {
            claims_on_value: false,
            sends_no_floor: false,
            renewal_not_ours_kept: false,
        }),
        Family::SqlTtl(sql::Flaws {
            adopts_own_identity: false,
            sends_no_floor: false,
        }),
        Family::Session(zk::Flaws {
            next_in_line_claims: false,
            head_gone_queues: false,
            head_gone_unseen: false,
        }),
        Family::EtcdSession(etcd::Flaws {
            next_in_line_claims: false,
        }),
        Family::Lease(driven::Flaws {
            takes_unexpired: false,
        }),
        Family::Redlock(
            3,
            rl::Flaws {
                minority_quorum: false,
            },
        ),
        Family::Rw(RwRule::Right),
        Family::Slots(SlotRule::Right, SlotStore::Ttl),
        Family::Slots(SlotRule::Right, SlotStore::Session),
    ];

    pub fn name(self) -> String {
        match self {
            Family::Ttl(f) if f.claims_on_value => "ttl-ClaimsOnValue".into(),
            Family::Ttl(f) if f.sends_no_floor => "ttl-SendsNoFloor".into(),
            Family::Ttl(f) if f.renewal_not_ours_kept => "ttl-RenewalNotOursKept".into(),
            Family::Ttl(_) => "ttl".into(),
            Family::SqlTtl(f) if f.adopts_own_identity => "sql-ttl-AdoptsOwnIdentity".into(),
            Family::SqlTtl(f) if f.sends_no_floor => "sql-ttl-SendsNoFloor".into(),
            Family::SqlTtl(_) => "sql-ttl".into(),
            Family::Session(f) if f.next_in_line_claims => "session-NextInLineClaims".into(),
            Family::Session(f) if f.head_gone_queues => "session-HeadGoneQueues".into(),
            Family::Session(f) if f.head_gone_unseen => "session-HeadGoneUnseen".into(),
            Family::Session(_) => "session".into(),
            Family::EtcdSession(f) if f.next_in_line_claims => {
                "etcd-session-NextInLineClaims".into()
            }
            Family::EtcdSession(_) => "etcd-session".into(),
            Family::Lease(f) if f.takes_unexpired => "lease-TakesUnexpired".into(),
            Family::Lease(_) => "lease".into(),
            Family::Redlock(n, f) if f.minority_quorum => format!("redlock{n}-MinorityQuorum"),
            Family::Redlock(n, _) => format!("redlock{n}"),
            Family::Rw(RwRule::Right) => "rw".into(),
            Family::Rw(rule) => format!("rw-{rule:?}"),
            Family::Slots(SlotRule::Right, SlotStore::Ttl) => "slots".into(),
            Family::Slots(SlotRule::Right, SlotStore::Session) => "slots-session".into(),
            Family::Slots(rule, SlotStore::Ttl) => format!("slots-{rule:?}"),
            Family::Slots(rule, SlotStore::Session) => format!("slots-session-{rule:?}"),
        }
    }

    pub fn parse(s: &str) -> Option<Family> {
        match s {
            "ttl" => Some(Family::Ttl(redis::Flaws::default())),
            "sql-ttl" => Some(Family::SqlTtl(sql::Flaws::default())),
            "sql-ttl-AdoptsOwnIdentity" => Some(Family::SqlTtl(sql::Flaws {
                adopts_own_identity: true,
                ..sql::Flaws::default()
            })),
            "sql-ttl-SendsNoFloor" => Some(Family::SqlTtl(sql::Flaws {
                sends_no_floor: true,
                ..sql::Flaws::default()
            })),
            "ttl-ClaimsOnValue" => Some(Family::Ttl(redis::Flaws {
                claims_on_value: true,
                ..redis::Flaws::default()
            })),
            "ttl-SendsNoFloor" => Some(Family::Ttl(redis::Flaws {
                sends_no_floor: true,
                ..redis::Flaws::default()
            })),
            "ttl-RenewalNotOursKept" => Some(Family::Ttl(redis::Flaws {
                renewal_not_ours_kept: true,
                ..redis::Flaws::default()
            })),
            "session" => Some(Family::Session(zk::Flaws::default())),
            "session-NextInLineClaims" => Some(Family::Session(zk::Flaws {
                next_in_line_claims: true,
                ..zk::Flaws::default()
            })),
            "session-HeadGoneQueues" => Some(Family::Session(zk::Flaws {
                head_gone_queues: true,
                ..zk::Flaws::default()
            })),
            "session-HeadGoneUnseen" => Some(Family::Session(zk::Flaws {
                head_gone_unseen: true,
                ..zk::Flaws::default()
            })),
            "etcd-session" => Some(Family::EtcdSession(etcd::Flaws::default())),
            "etcd-session-NextInLineClaims" => Some(Family::EtcdSession(etcd::Flaws {
                next_in_line_claims: true,
            })),
            "lease" => Some(Family::Lease(driven::Flaws::default())),
            "lease-TakesUnexpired" => Some(Family::Lease(driven::Flaws {
                takes_unexpired: true,
            })),
            "redlock" | "redlock3" => Some(Family::Redlock(3, rl::Flaws::default())),
            "redlock5" => Some(Family::Redlock(5, rl::Flaws::default())),
            "redlock3-MinorityQuorum" => Some(Family::Redlock(
                3,
                rl::Flaws {
                    minority_quorum: true,
                },
            )),
            "rw" => Some(Family::Rw(RwRule::Right)),
            "rw-ReadersIgnoreWriters" => Some(Family::Rw(RwRule::ReadersIgnoreWriters)),
            "rw-WritersIgnoreReaders" => Some(Family::Rw(RwRule::WritersIgnoreReaders)),
            "slots" => Some(Family::Slots(SlotRule::Right, SlotStore::Ttl)),
            "slots-OneLease" => Some(Family::Slots(SlotRule::OneLease, SlotStore::Ttl)),
            "slots-WrongSlotNamed" => Some(Family::Slots(SlotRule::WrongSlotNamed, SlotStore::Ttl)),
            "slots-session" => Some(Family::Slots(SlotRule::Right, SlotStore::Session)),
            "slots-session-NoWithdraw" => {
                Some(Family::Slots(SlotRule::NoWithdraw, SlotStore::Session))
            }
            _ => None,
        }
    }

    pub fn stores(self) -> usize {
        match self {
            Family::Redlock(n, _) => n,
            Family::Slots(..) => SLOTS,
            _ => 1,
        }
    }
}

/// What the client asks of the node's driver.
#[derive(Clone, Debug, PartialEq)]
pub enum Out {
    Send(usize, Req),
    /// The answer to the current call.
    Answer(Answer),
    /// An answer to a call the machine is no longer waiting for (late, or duplicate).
    Late(u64, Answer),
    /// Call `phase_timeout` with this phase after this much local time.
    PhaseTimer(Duration, u8),
}

/// What a push means for this node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heard {
    /// The holder may have changed (a follower campaigns).
    pub changed: bool,
    /// Our own record is gone or taken (a leader steps down).
    pub own_lost: bool,
    /// A session follower began a stagger (see [`Client::session_wait`]).
    pub stagger: bool,
}

/// One call on its way.
#[derive(Clone, Debug)]
struct Run {
    id: u64,
    op: Op,
    phase: u8,
    replies: Vec<Option<Resp>>,
    /// Requests of this phase still unanswered.
    waiting: usize,
    token: u64,
    done: bool,
    /// Slots: the slot asked now, the first one asked, and those left to ask.
    asked: usize,
    first: usize,
    round: Vec<usize>,
}

/// One node's backend.
#[derive(Debug)]
pub struct Client {
    fam: Family,
    ttl: Duration,
    drift: f64,
    /// Nonce (TTL, Redlock), session id (Session) or holder identity (Lease).
    pub key: u64,
    key_base: u64,
    keys: u64,
    /// Lease: the version of our last write, the transitions of our tenure.
    last_rv: u64,
    transitions: u64,
    highest_rv: u64,
    /// Lease: the Kubernetes store's core, and the write of ours in flight.
    campaigner: Option<Campaigner>,
    writing: LeaseRec,
    /// Lease: this node's local time 0 as the core's instant.
    origin: tokio::time::Instant,
    run: Option<Run>,
    /// Redlock: the last campaign was a split vote; try again soon.
    pub split: bool,
    /// The latest calls' operations, to read a late reply.
    ops: Vec<(u64, Op)>,
    /// Slots: the real picker, and the slot the last tenure claims (for the oracle).
    picker: Option<Picker>,
    pub slot: Option<u32>,
    /// Slots: the slots whose session the client keeps alive (see [`Client::ping`]).
    kept: [bool; SLOTS],
    /// etcd: the campaign's round, its read (the session that asked, the nodes), and
    /// whether the last round followed the leader as its predecessor.
    etcd: Option<etcd::Round>,
    /// Ttl: the Redis store's core.
    redis: Option<redis::Candidate>,
    /// Redlock: the Redlock store's core.
    redlock: Option<rl::Campaigner>,
    /// SqlTtl: the SQL store's core.
    sql: Option<sql::Candidate>,
    etcd_read: Option<(u64, Vec<(u64, u64)>)>,
    next_in_line: bool,
    /// Session: the follow decision whose watches are being set (the head's sequence
    /// number, the watched sessions), then the wait they make, as the ZooKeeper
    /// store's core keeps it.
    arming: Option<(u64, u64, Option<u64>)>,
    follower: Option<zk::Follower>,
    /// Session: deletes our watches told of before their answer came (ZooKeeper
    /// delivers a session's answers and events in order: the answer first), and a look
    /// a fired watch asked for.
    early: Vec<u64>,
    look: bool,
    /// Session: the state of the stagger's draws.
    draws: u64,
}

impl Client {
    /// Ttl and SqlTtl: the highest token the store's core has seen.
    pub fn floor(&self) -> Option<u64> {
        let sql = self.sql.as_ref().map(sql::Candidate::floor);
        self.redis.as_ref().map(redis::Candidate::floor).or(sql)
    }

    /// A reader's client (the read-write family).
    pub fn shared(&self) -> bool {
        self.key_base & SHARED != 0
    }

    pub fn new(fam: Family, ttl: Duration, drift: f64, node: usize, incarnation: u32) -> Self {
        let mut key_base = ((node as u64 + 1) << 40) | ((incarnation as u64) << 24);
        if matches!(fam, Family::Rw(_)) && !node.is_multiple_of(3) {
            key_base |= SHARED;
        }
        Client {
            fam,
            ttl,
            drift,
            key: key_base + 1,
            key_base,
            keys: 1,
            last_rv: 0,
            transitions: 0,
            highest_rv: 0,
            campaigner: match fam {
                Family::Lease(flaws) => {
                    Some(Campaigner::new(&(key_base + 1).to_string(), ttl, flaws))
                }
                _ => None,
            },
            writing: LeaseRec::default(),
            origin: tokio::time::Instant::now(),
            run: None,
            split: false,
            ops: Vec::new(),
            picker: matches!(fam, Family::Slots(..))
                .then(|| Picker::new(SLOTS, &format!("n-{node}"))),
            slot: None,
            kept: [false; SLOTS],
            etcd: None,
            redis: match fam {
                Family::Ttl(flaws) => Some(redis::Candidate::new(ttl, flaws)),
                _ => None,
            },
            sql: match fam {
                Family::SqlTtl(flaws) => {
                    let identity = (key_base >> 40).to_string();
                    Some(sql::Candidate::new(&identity, ttl, flaws))
                }
                _ => None,
            },
            redlock: match fam {
                Family::Redlock(n, flaws) => Some(rl::Campaigner::new(n, ttl, flaws)),
                _ => None,
            },
            etcd_read: None,
            next_in_line: false,
            arming: None,
            follower: None,
            early: Vec::new(),
            look: false,
            draws: key_base | 1,
        }
    }

    /// What the client sends by itself, whatever the elector does, and to which
    /// stores: the session store's keep-alive (the slots family on session stores),
    /// to every slot whose session it keeps (asked, and not withdrawn from since).
    pub fn ping(&self) -> Option<(Req, Vec<usize>)> {
        if let Family::EtcdSession(_) = self.fam {
            return Some((Req::Renew { key: self.key }, vec![0]));
        }
        if !matches!(self.fam, Family::Slots(_, SlotStore::Session)) {
            return None;
        }
        let kept = (0..SLOTS).filter(|&j| self.kept[j]).collect();
        Some((Req::Renew { key: self.key }, kept))
    }

    fn new_key(&mut self) {
        self.next_in_line = false;
        if !matches!(self.fam, Family::Lease(_)) {
            self.keys += 1;
            self.key = self.key_base + self.keys;
        }
    }

    fn all(&self, req: Req) -> Vec<Out> {
        (0..self.fam.stores())
            .map(|s| Out::Send(s, req.clone()))
            .collect()
    }

    /// Starts call `id`.
    pub fn start(&mut self, id: u64, op: Op, now: Time) -> Vec<Out> {
        let n = self.fam.stores();
        if self.ops.len() >= 16 {
            self.ops.remove(0);
        }
        self.ops.push((id, op));
        self.run = Some(Run {
            id,
            op,
            phase: 0,
            replies: vec![None; n],
            waiting: n,
            token: 0,
            done: false,
            asked: 0,
            first: 0,
            round: Vec::new(),
        });
        if let Family::Slots(..) = self.fam {
            return self.slots_start(op);
        }
        if op == Op::Campaign {
            // A campaign begins: the watches of the last go (the round sets them anew).
            (self.arming, self.follower, self.look) = (None, None, false);
            self.early.clear();
        }
        if let (Family::EtcdSession(flaws), Op::Campaign) = (self.fam, op) {
            return self.etcd_start(flaws);
        }
        let key = self.key;
        let mut out = match (self.fam, op) {
            (Family::Lease(_), Op::Campaign | Op::Release) => vec![Out::Send(0, Req::Get)],
            (Family::Lease(_), Op::Renew) => vec![Out::Send(
                0,
                self.lease_write(self.last_rv, now, self.transitions),
            )],
            (Family::Redlock(..), Op::Campaign) => {
                let floor = self.redlock.as_ref().map_or(0, rl::Campaigner::floor);
                let mut out = self.all(Req::Take { key, floor });
                out.push(Out::PhaseTimer(self.ttl / 10, 0));
                out
            }
            (Family::Ttl(_), Op::Campaign) => {
                let floor = self.redis.as_ref().map_or(0, redis::Candidate::floor_sent);
                vec![Out::Send(0, Req::RedisTake { key, floor })]
            }
            (Family::SqlTtl(_), Op::Campaign) => {
                let floor = self.sql.as_ref().map_or(0, sql::Candidate::floor_sent);
                vec![Out::Send(0, Req::SqlTake { key, floor })]
            }
            (_, Op::Campaign) => vec![Out::Send(0, Req::Campaign { key })],
            (_, Op::Renew) => self.all(Req::Renew { key }),
            (_, Op::Release) => self.all(Req::Release { key }),
        };
        if op == Op::Release && !matches!(self.fam, Family::Lease(_)) {
            // The next tenure has a fresh nonce (a fresh session).
            self.new_key();
        }
        if let (Family::Redlock(..), Op::Release) = (self.fam, op) {
            self.redlock.as_mut().map(rl::Campaigner::drop_tenure);
            out.push(Out::PhaseTimer(self.ttl / 10, 0));
        }
        out
    }

    /// Lease: our record over version `rv`, noted by the core before it is sent.
    fn lease_write(&mut self, rv: u64, now: Time, transitions: u64) -> Req {
        let rec = LeaseRec {
            holder: self.key,
            renew_time: now,
            duration: self.ttl,
            transitions,
        };
        self.lease_send(rv, rec)
    }

    fn lease_send(&mut self, rv: u64, rec: LeaseRec) -> Req {
        self.writing = rec;
        let view = lease_view(rec, rv);
        self.core().writing(&view);
        Req::Update { expect_rv: rv, rec }
    }

    fn core(&mut self) -> &mut Campaigner {
        self.campaigner
            .as_mut()
            .expect("the Lease family has a core")
    }

    /// A local time as the core's instant.
    fn at(&self, now: Time) -> tokio::time::Instant {
        self.origin + now
    }

    /// The machine gave up on the call (its budget passed).
    pub fn abandon(&mut self, id: u64) {
        if self.run.as_ref().is_some_and(|r| r.id == id) {
            self.run = None;
        }
    }

    /// A reply from store `store` to call `id`.
    pub fn reply(&mut self, id: u64, store: usize, resp: Resp, now: Time) -> Vec<Out> {
        let current = self.run.as_ref().is_some_and(|r| r.id == id && !r.done);
        if let (Family::Session(flaws), true) = (self.fam, current) {
            if let Some(outs) = self.follow(resp.clone(), now, flaws) {
                return outs;
            }
        }
        let resp = self.judged(resp);
        let resp = self.redis_judged(id, resp, now);
        let resp = self.sql_judged(resp, now);
        let current = self.run.as_ref().is_some_and(|r| r.id == id && !r.done);
        if !current {
            return self.late(id, resp);
        }
        match self.fam {
            Family::Ttl(_) | Family::SqlTtl(_) | Family::Session(_) | Family::Rw(_) => {
                let op = self.run.as_ref().map(|r| r.op).expect("a call");
                self.run = None;
                vec![Out::Answer(self.single(op, resp))]
            }
            Family::EtcdSession(_) => self.etcd_reply(resp),
            Family::Lease(_) => self.lease_reply(resp, now),
            Family::Redlock(..) => self.redlock_reply(store, resp, now),
            Family::Slots(rule, _) => self.slots_reply(store, resp, rule),
        }
    }

    /// A reply to a call no longer current: a single-request family's late answer.
    fn late(&mut self, id: u64, resp: Resp) -> Vec<Out> {
        match (self.fam, &resp) {
            // The client's own keep-alives answer no call; a read alone decides nothing.
            (Family::EtcdSession(_), Resp::Renewed(_)) if self.ops.contains(&(id, Op::Renew)) => {
                vec![Out::Late(id, self.single(Op::Renew, resp))]
            }
            (Family::EtcdSession(_), _) => Vec::new(),
            (
                Family::Ttl(_) | Family::SqlTtl(_) | Family::Session(_) | Family::Rw(_),
                Resp::Acquired(_) | Resp::Held(_),
            ) => {
                vec![Out::Late(id, self.single(Op::Campaign, resp))]
            }
            (
                Family::Ttl(_) | Family::SqlTtl(_) | Family::Session(_) | Family::Rw(_),
                Resp::Renewed(_),
            ) => {
                vec![Out::Late(id, self.single(Op::Renew, resp))]
            }
            (Family::Lease(_), Resp::Updated(r)) if self.ops.contains(&(id, Op::Renew)) => {
                let result = Ok(if r.is_ok() {
                    Renewal::Renewed
                } else {
                    Renewal::Lost
                });
                vec![Out::Late(
                    id,
                    Answer::Renew {
                        result,
                        ttl: self.ttl,
                    },
                )]
            }
            _ => Vec::new(),
        }
    }

    fn single(&mut self, op: Op, resp: Resp) -> Answer {
        let ttl = self.ttl;
        let other = |token| {
            Some(Holder {
                identity: "other".into(),
                token,
            })
        };
        match (op, resp) {
            (Op::Campaign, Resp::Acquired(token)) => Answer::Campaign {
                result: Ok(Campaign::Acquired { token }),
                ttl,
                lease: 0,
            },
            (Op::Campaign, Resp::Held(token)) => Answer::Campaign {
                result: Ok(Campaign::Held(other(token))),
                ttl,
                lease: 0,
            },
            (Op::Campaign, _) => {
                self.new_key();
                Answer::Campaign {
                    result: Err(Failure { timed_out: false }),
                    ttl,
                    lease: 0,
                }
            }
            (Op::Renew, Resp::Renewed(true)) => Answer::Renew {
                result: Ok(Renewal::Renewed),
                ttl,
            },
            (Op::Renew, _) => Answer::Renew {
                result: Ok(Renewal::Lost),
                ttl,
            },
            (Op::Release, _) => Answer::Release,
        }
    }

    /// Session family (and the read-write family's right rule): a listing to the
    /// session `ours` as the verdict the ZooKeeper store's core makes of it, a reader's
    /// by the core's shared rule (any other reply as it is).
    fn judged(&self, resp: Resp) -> Resp {
        let Resp::Listing { ours, nodes } = &resp else {
            return resp;
        };
        if let Family::EtcdSession(_) = self.fam {
            return resp;
        }
        let flaws = match self.fam {
            Family::Session(flaws) => flaws,
            _ => zk::Flaws::default(),
        };
        let nodes: Vec<zk::Node> = nodes
            .iter()
            .map(|&(seq, session)| zk::Node {
                seq,
                session,
                shared: session & SHARED != 0,
            })
            .collect();
        match zk::campaign(&nodes, *ours, self.shared(), flaws) {
            zk::Decision::Claim { token } => Resp::Acquired(token),
            zk::Decision::Follow { head, .. } => Resp::Held(Some(head)),
            zk::Decision::StartOver => Resp::SessionGone,
        }
    }

    /// Session: a listing that makes us a follower sets the watches the core names
    /// (the campaign goes on); their answer makes the wait, and the campaign answers
    /// that the head holds. `None`: any other reply, as it is.
    fn follow(&mut self, resp: Resp, now: Time, flaws: zk::Flaws) -> Option<Vec<Out>> {
        match resp {
            Resp::Listing { ours, ref nodes } => {
                let nodes: Vec<zk::Node> = (nodes.iter())
                    .map(|&(seq, session)| zk::Node {
                        seq,
                        session,
                        shared: false,
                    })
                    .collect();
                let zk::Decision::Follow { head, watch, turn } =
                    zk::campaign(&nodes, ours, false, flaws)
                else {
                    return None;
                };
                self.arming = Some((head, watch, turn));
                let watched = std::iter::once(watch).chain(turn).collect();
                let req = Req::Watch {
                    key: ours,
                    nodes: watched,
                };
                Some(vec![Out::Send(0, req)])
            }
            Resp::Watched(stood) => {
                let (head, watch, turn) = self.arming.take()?;
                let turn = turn.map(|t| (t, stood.get(1).copied().unwrap_or(false)));
                let head_stood = stood.first().copied().unwrap_or(false);
                let (at, stagger) = (self.at(now), self.stagger());
                let mut armed = zk::Follower::armed((watch, head_stood), turn, at, stagger, flaws);
                for key in std::mem::take(&mut self.early) {
                    self.look |= armed.deleted(key, at, stagger) == Some(true);
                }
                self.follower = Some(armed);
                self.run = None;
                Some(vec![Out::Answer(
                    self.single(Op::Campaign, Resp::Held(Some(head))),
                )])
            }
            _ => None,
        }
    }

    /// Session: how long a follower further back lets the successor go first (5 to 50
    /// ms: the backend's 50 to 500 ms, scaled to the simulated ttl).
    fn stagger(&mut self) -> Duration {
        // xorshift64: deterministic per node and incarnation.
        let mut x = self.draws;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.draws = x;
        Duration::from_millis(5 + x % 46)
    }

    /// Session: until when a follower waits at `now` before it looks again, as the
    /// core decides (`None`: on its watches, or the retry interval).
    pub fn session_wait(&mut self, now: Time) -> Option<Time> {
        let origin = self.origin;
        if self.look {
            return Some(now);
        }
        match self.follower.as_mut()?.wait() {
            zk::Wait::Now => Some(now),
            zk::Wait::Until(until) => Some(until.saturating_duration_since(origin)),
            zk::Wait::Watches => None,
        }
    }

    fn finish(&mut self, answer: Answer) -> Vec<Out> {
        self.run = None;
        vec![Out::Answer(answer)]
    }

    fn lease_reply(&mut self, resp: Resp, now: Time) -> Vec<Out> {
        let ttl = self.ttl;
        let (op, phase) = self.run.as_ref().map(|r| (r.op, r.phase)).expect("a call");
        match (op, phase, resp) {
            (Op::Campaign, 0, Resp::Lease(rec, rv)) => {
                self.highest_rv = self.highest_rv.max(rv);
                let at = self.at(now);
                let decision = self.core().campaign(&lease_view(rec, rv), at);
                let Decision::Take { token } = decision else {
                    let held = Campaign::Held(Some(Holder {
                        identity: "other".into(),
                        token: Some(rec.transitions),
                    }));
                    return self.finish(Answer::Campaign {
                        result: Ok(held),
                        ttl,
                        lease: 0,
                    });
                };
                let transitions = u64::try_from(token).unwrap_or(0);
                let run = self.run.as_mut().expect("a call");
                run.phase = 1;
                run.token = transitions;
                vec![Out::Send(0, self.lease_write(rv, now, transitions))]
            }
            (Op::Campaign, _, Resp::Updated(Ok(rv))) => {
                let token = self.run.as_ref().map_or(0, |r| r.token);
                let at = self.at(now);
                let written = lease_view(self.writing, rv);
                self.core().took(&written, at);
                self.last_rv = rv;
                self.transitions = token;
                self.highest_rv = self.highest_rv.max(rv);
                let result = Ok(Campaign::Acquired { token });
                self.finish(Answer::Campaign {
                    result,
                    ttl,
                    lease: 0,
                })
            }
            (Op::Campaign, _, _) => {
                // Another wrote since we read.
                self.core().outrun();
                self.finish(Answer::Campaign {
                    result: Ok(Campaign::Held(None)),
                    ttl,
                    lease: 0,
                })
            }
            (Op::Renew, _, Resp::Updated(Ok(rv))) => {
                let written = lease_view(self.writing, rv);
                self.core().renewed(&written);
                self.last_rv = rv;
                self.highest_rv = self.highest_rv.max(rv);
                self.finish(Answer::Renew {
                    result: Ok(Renewal::Renewed),
                    ttl,
                })
            }
            (Op::Renew, 0, Resp::Updated(Err((rec, rv)))) if rec.holder == self.key => {
                // Our own earlier write landed meanwhile: write again on top of it.
                self.run.as_mut().expect("a call").phase = 1;
                vec![Out::Send(0, self.lease_write(rv, now, self.transitions))]
            }
            (Op::Renew, _, _) => {
                self.core().ended();
                self.finish(Answer::Renew {
                    result: Ok(Renewal::Lost),
                    ttl,
                })
            }
            (Op::Release, 0, Resp::Lease(rec, rv)) if rec.holder == self.key => {
                self.run.as_mut().expect("a call").phase = 1;
                let give_back = self.lease_send(rv, LeaseRec { holder: 0, ..rec });
                vec![Out::Send(0, give_back)]
            }
            (Op::Release, _, _) => {
                self.core().ended();
                self.finish(Answer::Release)
            }
        }
    }

    /// What a push means to this node.
    pub fn push(&mut self, store: usize, push: &Push, now: Time) -> Heard {
        if let (Some(p), Push::Gone { key }) = (self.picker.as_mut(), push) {
            p.changed(store, false);
            return Heard {
                changed: true,
                own_lost: *key == self.key && p.held() == Some(store),
                ..Heard::default()
            };
        }
        match *push {
            // A session follower hears of a delete only through its watches.
            Push::Gone { key } if matches!(self.fam, Family::Session(_)) => Heard {
                own_lost: key == self.key,
                ..Heard::default()
            },
            Push::Gone { key } => Heard {
                changed: true,
                own_lost: key == self.key && !matches!(self.fam, Family::Redlock(..)),
                ..Heard::default()
            },
            Push::Fired { watcher, key } if watcher == self.key && self.arming.is_some() => {
                self.early.push(key);
                Heard::default()
            }
            Push::Fired { watcher, key } => {
                let (at, stagger) = (self.at(now), self.stagger());
                let follower = self.follower.as_mut().filter(|_| watcher == self.key);
                let heard = follower.and_then(|f| f.deleted(key, at, stagger));
                Heard {
                    changed: heard == Some(true),
                    stagger: heard == Some(false),
                    ..Heard::default()
                }
            }
            Push::Lease(rec, rv) => {
                if rv <= self.highest_rv {
                    // An older event than one already seen (watches are ordered).
                    return Heard::default();
                }
                self.highest_rv = rv;
                let at = self.at(now);
                let leads = self.core().leads();
                let news = self.core().heard(&lease_view(rec, rv), at);
                let ours = rec.holder == self.key;
                Heard {
                    changed: !ours && (news || leads),
                    own_lost: !ours,
                    ..Heard::default()
                }
            }
        }
    }

    /// Lease: until when a follower waits at `now` (`max` at most) before it
    /// campaigns again, as the core decides (a rival's record once it has stood still
    /// for its duration, at once when the Lease is free).
    pub fn lease_wait(&mut self, now: Time, max: Duration) -> Option<Time> {
        let at = self.at(now);
        let origin = self.origin;
        let until = self.campaigner.as_mut()?.wait(at, max);
        Some(until.saturating_duration_since(origin))
    }

    // ---- slots ---------------------------------------------------------------------

    /// A slots call begins: a campaign asks the picker's first slot (the others one
    /// by one as the answers come), a renew the held slot, a release every slot.
    fn slots_start(&mut self, op: Op) -> Vec<Out> {
        let key = self.key;
        let picker = self.picker.as_mut().expect("the slots family has a picker");
        match op {
            Op::Campaign => {
                let mut round = picker.round();
                let first = round.remove(0);
                picker.asking(first);
                self.kept[first] = true;
                if let Some(r) = self.run.as_mut() {
                    (r.asked, r.first, r.round) = (first, first, round);
                }
                vec![Out::Send(first, Req::Campaign { key })]
            }
            Op::Renew => vec![Out::Send(picker.held().unwrap_or(0), Req::Renew { key })],
            Op::Release => {
                picker.release_order();
                self.kept = [false; SLOTS];
                self.new_key();
                self.all(Req::Release { key })
            }
        }
    }

    /// A slot's answer: a campaign goes on to the next slot until one is taken (then
    /// it gives back whatever an earlier ask may have taken elsewhere, as the real
    /// backend withdraws); a renew's or release's first answer decides.
    fn slots_reply(&mut self, store: usize, resp: Resp, rule: SlotRule) -> Vec<Out> {
        let Some(run) = self.run.as_ref() else {
            return Vec::new();
        };
        let (op, asked, first) = (run.op, run.asked, run.first);
        if op != Op::Campaign {
            let answer = self.single(op, resp);
            if let Answer::Renew {
                result: Ok(Renewal::Lost),
                ..
            } = answer
            {
                self.picker.as_mut().map(Picker::lost);
            }
            return self.finish(answer);
        }
        if store != asked {
            // A duplicate answer from a slot asked before.
            return Vec::new();
        }
        let Answer::Campaign { result, ttl, .. } = self.single(op, resp) else {
            unreachable!("a campaign's answer");
        };
        let seen = result.clone().map_err(|_| BackendError::Store {
            op: "campaign",
            message: "refused".into(),
        });
        let key = self.key;
        let picker = self.picker.as_mut().expect("the slots family has a picker");
        if picker.answered(store, &seen) {
            self.slot = Some(match rule {
                SlotRule::WrongSlotNamed => first as u32,
                _ => store as u32,
            });
            let lease = match rule {
                SlotRule::OneLease => 0,
                _ => store as u32,
            };
            let withdraw: Vec<usize> = (0..SLOTS)
                .filter(|&j| j != store && rule != SlotRule::NoWithdraw)
                .collect();
            // Withdrawn, a slot's session is given up (a ZooKeeper client closed, an
            // etcd lease no longer kept alive) even when the release is lost.
            withdraw.iter().for_each(|&j| self.kept[j] = false);
            let mut out: Vec<Out> = (withdraw.into_iter())
                .map(|j| Out::Send(j, Req::Release { key }))
                .collect();
            out.extend(self.finish(Answer::Campaign { result, ttl, lease }));
            return out;
        }
        let next = self.run.as_mut().and_then(|r| {
            let next = (!r.round.is_empty()).then(|| r.round.remove(0))?;
            r.asked = next;
            Some(next)
        });
        match next {
            Some(j) => {
                picker.asking(j);
                self.kept[j] = true;
                vec![Out::Send(j, Req::Campaign { key })]
            }
            None => self.finish(Answer::Campaign {
                result,
                ttl,
                lease: 0,
            }),
        }
    }
}

/// A Lease of the model as the Kubernetes core sees it (holder 0: none; every holder's
/// write carries an `acquireTime`).
fn lease_view(rec: LeaseRec, rv: u64) -> LeaseView {
    LeaseView {
        holder: match rec.holder {
            0 => String::new(),
            h => h.to_string(),
        },
        acquired: rec.holder != 0,
        renewed: rec.renew_time,
        duration_secs: i32::try_from(rec.duration.as_secs()).unwrap_or(i32::MAX),
        transitions: i32::try_from(rec.transitions).unwrap_or(i32::MAX),
        version: rv,
    }
}
