//! The simulated stores, server side: each judges by its own clock (`now` is the
//! store's local time when a request is processed) and answers with one reply, plus
//! the pushes it sends to the candidates (release or expiry notifications, watches).
//!
//! Modeled on `src/backend/*.rs`, reduced to what decides who leads:
//! - [`TtlStore`]: one record with a ttl judged by the store's clock, taken or renewed
//!   by compare-and-set on the candidate's nonce, token from a counter bumped on each
//!   new tenure (Redis; the SQL backends alike); a take carries the candidate's floor,
//!   and a restart without persistence (Redis) or a delete of the lease and counter
//!   rows (SQL) loses the record and the counter; SQL's row stays after a release or
//!   an expiry, as its take statement keeps it;
//! - [`SessionStore`]: sessions with a server-side timeout, kept alive by every request
//!   of the session, one ephemeral-sequential node per campaign, the lowest live node
//!   leads, token = its sequence number (ZooKeeper, etcd leases);
//! - [`LeaseStore`]: a Kubernetes Lease, written by the holder with its own clock's
//!   renewTime; the store judges nothing but resourceVersion (candidates judge expiry
//!   by their own clocks);
//! - [`RlNode`]: one Redlock node (a TTL store with a fence counter, a run id and an
//!   incarnation marker, restartable empty or from an older snapshot).

use std::time::Duration;

/// A store's local time.
pub type STime = Duration;

/// A request, as it travels to one store.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Req {
    /// TTL store and session store: take (or adopt) the lease for `key` (a nonce, or a
    /// session id).
    Campaign { key: u64 },
    /// Extend the lease (or touch the session) of `key`.
    Renew { key: u64 },
    /// Redis: the take script (`src/backend/redis/lua/acquire.lua`) for `key` with the
    /// candidate's `floor`, the highest token it has seen.
    RedisTake { key: u64, floor: u64 },
    /// SQL: the take statement (`src/backend/sql/postgres/statements.rs`, `take`) for
    /// the tenure `key` with the candidate's `floor`.
    SqlTake { key: u64, floor: u64 },
    /// Give back the lease of `key` (close the session).
    Release { key: u64 },
    /// Session store: the session `key` sets a watch on the node of each session in
    /// `nodes` (ZooKeeper's `exists` with a watch: it fires once, on the node's delete).
    Watch { key: u64, nodes: Vec<u64> },
    /// Redlock node: give back what a campaign that did not win took, quietly (no
    /// push: announcing it made waiting candidates wake each other in a storm).
    GiveBack { key: u64 },
    /// Lease: read the object.
    Get,
    /// Lease: write `rec` if the object is still at `expect_rv`.
    Update { expect_rv: u64, rec: LeaseRec },
    /// Redlock node: `SET NX PX` of our value with the node's next token, above its
    /// counter and `floor` (the counter raised to it), or adopt our own.
    Take { key: u64, floor: u64 },
    /// Redlock node: our value carries `token`, the fence counter at least `token`;
    /// `catch_up`: the run id to write into the marker (a settled node caught up).
    Confirm {
        key: u64,
        token: u64,
        catch_up: Option<u64>,
    },
}

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resp {
    /// The lease is ours with this token.
    Acquired(u64),
    /// Someone else holds it (their token, when known).
    Held(Option<u64>),
    /// TTL store that shows its row (SQL): the record a take left, its holder's key
    /// (the tenure id), its token and the ms left; the client decides.
    Row {
        key: u64,
        token: u64,
        left_ms: i64,
    },
    /// Session store that lists: the live nodes, as (sequence number, session), in
    /// no particular order, to the session `ours` that asked; the client decides.
    Listing {
        ours: u64,
        nodes: Vec<(u64, u64)>,
    },
    /// Whether each watched node stood when its watch was set (in the order asked).
    Watched(Vec<bool>),
    /// Renewed, or not ours any more.
    Renewed(bool),
    Released,
    /// The session is gone: the client must open a new one.
    SessionGone,
    /// Lease: the object and its resourceVersion.
    Lease(LeaseRec, u64),
    /// Lease: the write landed (its new resourceVersion), or a conflict (the object).
    Updated(Result<u64, (LeaseRec, u64)>),
    /// Redlock node: the take's outcome and the node's state.
    Took(RlState),
    /// Redlock node: our value confirmed, and the node trusted (caught up, if asked).
    Confirmed(bool, bool),
}

/// What a Redlock node tells about itself with every answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RlState {
    pub took: bool,
    /// Another's value on the node: its key.
    pub holder: Option<u64>,
    pub counter: u64,
    /// The token of the value found (or written), if confirmed.
    pub holder_token: Option<u64>,
    pub run_id: u64,
    /// The marker holds the current run id.
    pub trusted: bool,
    pub uptime: STime,
}

/// A push from the store to every candidate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Push {
    /// The record (or node) of `key` is gone: released, expired, or taken over.
    Gone { key: u64 },
    /// Lease: the object changed (watch event).
    Lease(LeaseRec, u64),
    /// Session store: the watch the session `watcher` set on the node of `key` fired:
    /// the node is deleted.
    Fired { watcher: u64, key: u64 },
}

/// The Kubernetes Lease's fields that matter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseRec {
    /// holderIdentity (0: none).
    pub holder: u64,
    /// renewTime, in the holder's own clock (informational: nobody may compare it).
    pub renew_time: Duration,
    pub duration: Duration,
    pub transitions: u64,
}

/// One held record of a TTL store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub key: u64,
    pub token: u64,
    pub expiry: STime,
}

/// The key of the placeholder a Redis take writes into a lock whose fence counter is
/// gone (`quarantine|<floor>|`): nobody's.
pub const QUARANTINE: u64 = 0;

/// Redis / SQL: a record with a ttl and compare-and-set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TtlStore {
    pub record: Option<Record>,
    pub counter: u64,
    /// The fence counter is gone (a restart without persistence) and no take has set it
    /// since.
    pub fence_lost: bool,
    /// A campaign is answered with the row it left ([`Resp::Row`]), as a SQL take
    /// statement's `RETURNING` does, rather than with the store's verdict; the row
    /// stays after a release (nobody's) or an expiry, with its token.
    pub rows: bool,
}

impl TtlStore {
    /// Drops an expired record; the key that went, for the push. SQL's row stays,
    /// and nobody is told of its expiry: followers wait for it by their own timers.
    pub fn expire(&mut self, now: STime) -> Option<u64> {
        match self.record {
            Some(r) if r.expiry <= now && !self.rows => {
                self.record = None;
                Some(r.key)
            }
            _ => None,
        }
    }

    /// The next instant something may expire (and be pushed).
    pub fn next_expiry(&self) -> Option<STime> {
        self.record.filter(|_| !self.rows).map(|r| r.expiry)
    }

    /// A restart without persistence (a redis-server with no AOF or RDB), or SQL's
    /// lease and counter rows deleted: the record and the fence counter are gone.
    pub fn restart_empty(&mut self) {
        self.record = None;
        self.counter = 0;
        self.fence_lost = true;
    }

    /// The SQL take statement on `key` with the candidate's `floor`: a new tenure gets
    /// one more than the highest of the row's token, the floor and the counter, on a
    /// row that is ours, free or expired; a missing row is written as a quarantine row
    /// (nobody's, for a ttl, with that highest token) once tokens were handed out (the
    /// counter or the floor says so); the counter follows the row's token. Answered
    /// with the row it left, as the statement's `RETURNING` does.
    fn sql_take(&mut self, now: STime, ttl: Duration, key: u64, floor: u64) -> Resp {
        let n = self.counter.max(floor);
        let expiry = now + ttl;
        let row = match self.record {
            None if n > 0 => Record {
                key: QUARANTINE,
                token: n,
                expiry,
            },
            None => Record {
                key,
                token: 1,
                expiry,
            },
            Some(r) if r.key == key => Record { expiry, ..r },
            Some(r) if r.expiry <= now => Record {
                key,
                token: r.token.max(n) + 1,
                expiry,
            },
            Some(r) => r,
        };
        self.counter = self.counter.max(row.token);
        self.fence_lost = false;
        self.record = Some(row);
        Resp::Row {
            key: row.key,
            token: row.token,
            left_ms: i64::try_from(row.expiry.saturating_sub(now).as_millis()).unwrap_or(0),
        }
    }

    /// SQL: the release statement: our row made nobody's and expired, its token kept.
    fn sql_release(&mut self, now: STime, key: u64) -> bool {
        match self.record.as_mut() {
            Some(r) if r.key == key => {
                (r.key, r.expiry) = (QUARANTINE, now);
                true
            }
            _ => false,
        }
    }

    /// The take script on `key` with the candidate's `floor`: our own record adopted,
    /// another's answered held; on a free lock, a fence counter gone (0) while the
    /// candidate has seen tokens fences the lock with a placeholder for one ttl and sets
    /// the counter to the floor (answered held, with the floor as the placeholder's
    /// token); else the next token, above the floor.
    fn redis_take(&mut self, now: STime, ttl: Duration, key: u64, floor: u64) -> Resp {
        match self.record.as_mut() {
            Some(r) if r.key == key => {
                r.expiry = now + ttl;
                return Resp::Acquired(r.token);
            }
            Some(r) => return Resp::Held(Some(r.token)),
            None => {}
        }
        self.fence_lost = false;
        let quarantine = floor > 0 && self.counter == 0;
        let (key, token) = match quarantine {
            true => (QUARANTINE, floor),
            false => (key, (self.counter + 1).max(floor + 1)),
        };
        self.counter = token;
        let expiry = now + ttl;
        self.record = Some(Record { key, token, expiry });
        match quarantine {
            true => Resp::Held(Some(token)),
            false => Resp::Acquired(token),
        }
    }

    pub fn handle(&mut self, now: STime, ttl: Duration, req: &Req) -> (Resp, Vec<Push>) {
        let mut pushes: Vec<Push> = self
            .expire(now)
            .map(|key| Push::Gone { key })
            .into_iter()
            .collect();
        let resp = match *req {
            Req::RedisTake { key, floor } => self.redis_take(now, ttl, key, floor),
            Req::SqlTake { key, floor } => self.sql_take(now, ttl, key, floor),
            Req::Campaign { key } => match self.record.as_mut() {
                None => {
                    self.counter += 1;
                    self.record = Some(Record {
                        key,
                        token: self.counter,
                        expiry: now + ttl,
                    });
                    Resp::Acquired(self.counter)
                }
                Some(r) if r.key == key => {
                    r.expiry = now + ttl;
                    Resp::Acquired(r.token)
                }
                Some(r) => Resp::Held(Some(r.token)),
            },
            Req::Renew { key } => match self.record.as_mut() {
                Some(r) if r.key == key => {
                    r.expiry = now + ttl;
                    Resp::Renewed(true)
                }
                _ => Resp::Renewed(false),
            },
            Req::Release { key } if self.rows => {
                if self.sql_release(now, key) {
                    pushes.push(Push::Gone { key });
                }
                Resp::Released
            }
            Req::Release { key } => {
                if self.record.is_some_and(|r| r.key == key) {
                    self.record = None;
                    pushes.push(Push::Gone { key });
                }
                Resp::Released
            }
            _ => unreachable!("not a TTL store request: {req:?}"),
        };
        (resp, pushes)
    }
}

/// A session of the session store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Session {
    pub id: u64,
    pub expiry: STime,
    pub alive: bool,
    /// The sequence number of its node, if it has one.
    pub node: Option<u64>,
}

/// The bit of a session id that marks a shared holder's (`--mode shared`, the
/// read-write family): the store tells readers from writers by it, as ZooKeeper and
/// etcd do by the node's name.
pub const SHARED: u64 = 1 << 62;

/// The read-write lock's rule of who may hold, right or known-wrong (each wrong one
/// must be caught by the oracle).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RwRule {
    /// A reader holds when no writer's node is ahead of its own; a writer when its
    /// node is the first.
    #[default]
    Right,
    /// Wrong: a reader holds whatever is ahead.
    ReadersIgnoreWriters,
    /// Wrong: a writer holds when no writer's node is ahead (readers ignored).
    WritersIgnoreReaders,
}

/// ZooKeeper / etcd: sessions with a server-side timeout, ephemeral-sequential nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SessionStore {
    pub sessions: Vec<Session>,
    pub seq: u64,
    /// Who may hold beside whom, for readers' sessions ([`SHARED`]), when the store
    /// decides (it does not list).
    pub rule: RwRule,
    /// A campaign is answered with a listing of the nodes ([`Resp::Listing`]), as
    /// ZooKeeper's `getChildren` does, rather than with the store's verdict.
    pub lists: bool,
    /// The sessions are etcd leases: a campaign grants one (when its session is
    /// new) and reads the queue, which extends nothing; only a keep-alive (a renew)
    /// does.
    pub leases: bool,
    /// The watches set and not fired yet: (the watcher's session, the watched node's).
    pub watches: Vec<(u64, u64)>,
}

impl SessionStore {
    /// The live node ahead of `me`'s that keeps it from holding (by [`RwRule`]): any
    /// node for a writer, a writer's for a reader.
    fn blocker(&self, me: Session) -> Option<&Session> {
        let reader = me.id & SHARED != 0;
        self.sessions
            .iter()
            .filter(|s| s.alive && s.node.is_some() && s.node < me.node)
            .filter(|s| match (reader, self.rule) {
                (true, RwRule::ReadersIgnoreWriters) => false,
                (true, _) => s.id & SHARED == 0,
                (false, RwRule::WritersIgnoreReaders) => s.id & SHARED == 0,
                (false, _) => true,
            })
            .min_by_key(|s| s.node)
    }

    fn lowest(&self) -> Option<&Session> {
        self.sessions
            .iter()
            .filter(|s| s.alive && s.node.is_some())
            .min_by_key(|s| s.node)
    }

    /// The live nodes, (sequence number, session), in session order.
    fn listing(&self) -> Vec<(u64, u64)> {
        let nodes = self.sessions.iter().filter(|s| s.alive);
        nodes.filter_map(|s| Some((s.node?, s.id))).collect()
    }

    pub fn expire(&mut self, now: STime) -> Vec<Push> {
        let mut pushes = Vec::new();
        for s in self
            .sessions
            .iter_mut()
            .filter(|s| s.alive && s.expiry <= now)
        {
            s.alive = false;
            if s.node.take().is_some() {
                pushes.push(Push::Gone { key: s.id });
            }
        }
        let gone: Vec<u64> = pushes
            .iter()
            .filter_map(|p| match p {
                Push::Gone { key } => Some(*key),
                _ => None,
            })
            .collect();
        for key in gone {
            pushes.extend(self.fire(key));
        }
        pushes
    }

    /// The node of `key` is deleted: the watches on it fire, once.
    fn fire(&mut self, key: u64) -> Vec<Push> {
        let (fired, kept) = self.watches.iter().partition(|w| w.1 == key);
        self.watches = kept;
        let fired: Vec<(u64, u64)> = fired;
        let fired = fired.into_iter();
        fired
            .map(|(watcher, key)| Push::Fired { watcher, key })
            .collect()
    }

    /// The watches of `key` on `nodes`: whether each stood (a watch on a gone node
    /// never fires here: a session's node is never created again).
    fn watch(&mut self, key: u64, nodes: &[u64]) -> Resp {
        let stands = |n: &u64| {
            let s = self.sessions.iter().find(|s| s.id == *n);
            s.is_some_and(|s| s.alive && s.node.is_some())
        };
        let stood: Vec<bool> = nodes.iter().map(stands).collect();
        for (&n, &stood) in nodes.iter().zip(&stood) {
            if stood {
                self.watches.push((key, n));
            }
        }
        Resp::Watched(stood)
    }

    pub fn next_expiry(&self) -> Option<STime> {
        self.sessions
            .iter()
            .filter(|s| s.alive)
            .map(|s| s.expiry)
            .min()
    }

    pub fn handle(&mut self, now: STime, ttl: Duration, req: &Req) -> (Resp, Vec<Push>) {
        let mut pushes = self.expire(now);
        let key = match *req {
            Req::Campaign { key }
            | Req::Renew { key }
            | Req::Release { key }
            | Req::Watch { key, .. } => key,
            _ => unreachable!("not a session store request: {req:?}"),
        };
        let found = self.sessions.iter().position(|s| s.id == key);
        let i = match (found, req) {
            (Some(i), _) if self.sessions[i].alive => i,
            (Some(_), Req::Release { .. }) | (None, Req::Release { .. }) => {
                return (Resp::Released, pushes)
            }
            (Some(_), _) => return (Resp::SessionGone, pushes),
            (None, Req::Renew { .. } | Req::Watch { .. }) => return (Resp::SessionGone, pushes),
            (None, _) => {
                self.sessions.push(Session {
                    id: key,
                    expiry: now,
                    alive: true,
                    node: None,
                });
                self.sessions.len() - 1
            }
        };
        let read = self.leases && found.is_some() && matches!(req, Req::Campaign { .. });
        if !read {
            self.sessions[i].expiry = now + ttl;
        }
        let resp = match req {
            Req::Campaign { .. } => {
                if self.sessions[i].node.is_none() {
                    self.seq += 1;
                    self.sessions[i].node = Some(self.seq);
                }
                let me = self.sessions[i];
                if self.lists {
                    let nodes = self.listing();
                    return (Resp::Listing { ours: key, nodes }, pushes);
                }
                match self.blocker(me) {
                    None => Resp::Acquired(me.node.expect("a node")),
                    Some(_) => Resp::Held(self.lowest().and_then(|l| l.node)),
                }
            }
            Req::Renew { .. } => Resp::Renewed(self.sessions[i].node.is_some()),
            Req::Watch { nodes, .. } => self.watch(key, nodes),
            _ => {
                self.sessions[i].alive = false;
                if self.sessions[i].node.take().is_some() {
                    pushes.push(Push::Gone { key });
                    pushes.extend(self.fire(key));
                }
                Resp::Released
            }
        };
        (resp, pushes)
    }
}

/// Kubernetes: one Lease object with optimistic concurrency.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaseStore {
    pub rec: LeaseRec,
    pub rv: u64,
}

impl LeaseStore {
    pub fn handle(&mut self, req: &Req) -> (Resp, Vec<Push>) {
        match *req {
            Req::Get => (Resp::Lease(self.rec, self.rv), Vec::new()),
            Req::Update { expect_rv, rec } if expect_rv == self.rv => {
                self.rv += 1;
                self.rec = rec;
                (Resp::Updated(Ok(self.rv)), vec![Push::Lease(rec, self.rv)])
            }
            Req::Update { .. } => (Resp::Updated(Err((self.rec, self.rv))), Vec::new()),
            _ => unreachable!("not a Lease request: {req:?}"),
        }
    }
}

/// What a Redlock node keeps (and a snapshot restores).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RlData {
    pub store: TtlStore,
    /// The value's token (written by its take, or by a confirm).
    pub value_token: Option<u64>,
    pub marker: u64,
}

/// One Redlock node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RlNode {
    pub data: RlData,
    pub run_id: u64,
    /// Store-clock time of its (re)start.
    pub started: STime,
}

impl RlNode {
    /// A node of a fresh set: trusted from the start.
    pub fn new(now: STime) -> Self {
        RlNode {
            data: RlData {
                marker: 1,
                ..RlData::default()
            },
            run_id: 1,
            started: now,
        }
    }

    /// A restart with `data` (empty, or an older snapshot): a new run id.
    pub fn restart(&mut self, now: STime, data: RlData) {
        self.run_id += 1;
        self.data = data;
        self.started = now;
    }

    fn state(&self, now: STime, took: bool) -> RlState {
        let holder_token = self.data.store.record.and(self.data.value_token);
        RlState {
            took,
            holder: self.data.store.record.map(|r| r.key).filter(|_| !took),
            counter: self.data.store.counter,
            holder_token,
            run_id: self.run_id,
            trusted: self.data.marker == self.run_id,
            uptime: now.saturating_sub(self.started),
        }
    }

    pub fn expire(&mut self, now: STime) -> Option<u64> {
        let gone = self.data.store.expire(now);
        if gone.is_some() {
            self.data.value_token = None;
        }
        gone
    }

    pub fn handle(&mut self, now: STime, ttl: Duration, req: &Req) -> (Resp, Vec<Push>) {
        let mut pushes: Vec<Push> = self
            .expire(now)
            .map(|key| Push::Gone { key })
            .into_iter()
            .collect();
        let ours = |d: &RlData, key: u64| d.store.record.is_some_and(|r| r.key == key);
        let resp = match *req {
            Req::Take { key, floor } => {
                let took = match self.data.store.record.as_mut() {
                    None => {
                        self.data.store.record = Some(Record {
                            key,
                            token: 0,
                            expiry: now + ttl,
                        });
                        let token = self.data.store.counter.max(floor) + 1;
                        self.data.store.counter = token;
                        self.data.value_token = Some(token);
                        true
                    }
                    Some(r) if r.key == key => {
                        r.expiry = now + ttl;
                        true
                    }
                    Some(_) => false,
                };
                Resp::Took(self.state(now, took))
            }
            Req::Confirm {
                key,
                token,
                catch_up,
            } => {
                let mine = ours(&self.data, key);
                let caught_up = catch_up == Some(self.run_id);
                if mine || caught_up {
                    self.data.store.counter = self.data.store.counter.max(token);
                }
                if mine {
                    self.data.value_token = Some(token);
                }
                if caught_up {
                    self.data.marker = self.run_id;
                }
                Resp::Confirmed(mine, self.data.marker == self.run_id)
            }
            Req::Renew { key } => {
                let mine = ours(&self.data, key);
                if let Some(r) = self.data.store.record.as_mut().filter(|_| mine) {
                    r.expiry = now + ttl;
                }
                Resp::Took(self.state(now, mine))
            }
            Req::Release { key } | Req::GiveBack { key } => {
                if ours(&self.data, key) {
                    self.data.store.record = None;
                    self.data.value_token = None;
                    if matches!(req, Req::Release { .. }) {
                        pushes.push(Push::Gone { key });
                    }
                }
                Resp::Released
            }
            _ => unreachable!("not a Redlock request: {req:?}"),
        };
        (resp, pushes)
    }
}
