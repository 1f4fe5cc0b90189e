//! The queue rules' table of cases (`src/backend/queue/cases.rs`, the specification of
//! `src/backend/queue.rs`) run through the real take scripts of the Redis read-write
//! lock and of Redlock (one node's decision) on a real redis-server: for every case,
//! the keys are laid out as the scripts lay them out for that queue, the candidate's
//! take script runs once, and its answer must be the table's.
//!
//! Each case is laid out twice: with every entry waiting in the queue (`…:writer-waits`,
//! a moment after a release, before anyone took), and with the case's holders holding
//! (the head, and every shared entry right behind a shared head: the exclusive one in
//! `…:lock`, the shared ones in `…:readers`) and the rest waiting. An entry is
//! `<order, 16 digits>|<r or w>|<name>|<name>`: its nonce (or Redlock's queue id) and
//! identity are its name, so that entries of one kind tied in order go by name, as the
//! table's do. Every name's presence channel has a subscriber (the test's), so no entry
//! counts as gone; a newcomer's entry is the script's own (Redis: the server's time) or
//! the wall clock's (Redlock's candidates choose it), after every entry of the table.

use crate::common;

use common::servers::redis_server::RedisServer;
use leasekeeper::backend::redis::{parse_value, rw, Keys};
use leasekeeper::backend::{redlock, LockMode};

#[path = "../../src/backend/queue/cases.rs"]
mod cases;
use cases::{Case, CASES};

/// The ttl the scripts are told; every place and holder outlives the test.
const TTL_MS: u64 = 10_000;
const LIVES_MS: u64 = 600_000;
/// How many shared holders a take lists.
const SHOWN: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Every entry waits; nobody holds.
    Waiting,
    /// The case's holders hold; the rest wait.
    Held,
}

/// Whose take script runs.
#[derive(Clone, Copy, Debug)]
enum Store {
    Redis,
    Redlock,
}

/// What a take script's answer says.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// Taken (or adopted): it holds.
    Holds,
    /// Kept out by this exclusive holder (its identity).
    HeldBy(String),
    /// Kept out while shared holders hold: those it named.
    BesideShared(Vec<String>),
    /// Kept out by a place ahead in the queue.
    PlaceAhead,
}

/// One entry of a case's queue.
#[derive(Clone, Copy, Debug)]
struct Entry {
    order: i64,
    name: &'static str,
    shared: bool,
}

impl Entry {
    fn member(&self) -> String {
        let kind = if self.shared { 'r' } else { 'w' };
        format!("{:016}|{kind}|{}|{}", self.order, self.name, self.name)
    }

    fn value(&self) -> String {
        format!("{}|1|{}", self.name, self.name)
    }
}

/// A case's entries in queue order: by order, ties by name.
fn in_order(case: &Case) -> Vec<Entry> {
    let mut queue: Vec<Entry> = (case.queue.iter())
        .map(|&(order, name, shared)| Entry {
            order,
            name,
            shared,
        })
        .collect();
    queue.sort_by(|a, b| (a.order, a.name).cmp(&(b.order, b.name)));
    queue
}

/// How many entries at the head hold: the head, and every shared entry right behind a
/// shared head.
fn holding(queue: &[Entry]) -> usize {
    match queue.first() {
        Some(head) if head.shared => queue.iter().take_while(|e| e.shared).count(),
        Some(_) => 1,
        None => 0,
    }
}

fn server_time(con: &mut redis::Connection) -> (u64, u64) {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(con).expect("TIME");
    (s * 1000 + us / 1000, s * 1_000_000 + us)
}

/// Lays a case's queue out on the server (empty first): holders hold in `Held`, every
/// other entry waits, with a place that lives long.
fn lay_out(con: &mut redis::Connection, keys: &Keys, queue: &[Entry], layout: Layout) {
    let () = redis::cmd("FLUSHALL").query(con).expect("FLUSHALL");
    let (now_ms, _) = server_time(con);
    let held = match layout {
        Layout::Held => holding(queue),
        Layout::Waiting => 0,
    };
    let mut pipe = redis::pipe();
    for e in &queue[..held] {
        match e.shared {
            true => pipe.zadd(&keys.readers, e.value(), now_ms + LIVES_MS),
            false => pipe.set_ex(&keys.lock, e.value(), LIVES_MS / 1000),
        };
    }
    for e in &queue[held..] {
        pipe.zadd(&keys.writer_waits, e.member(), now_ms + LIVES_MS);
    }
    if held > 0 && queue.len() > held {
        pipe.set_ex(&keys.busy, "1", LIVES_MS / 1000);
    }
    if !queue.is_empty() {
        let _: redis::Value = pipe.query(con).expect("lay out the queue");
    }
}

/// The Redis read-write lock's take, as a `--mode` candidate's `RedisBackend` runs it.
fn redis_take(con: &mut redis::Connection, keys: &Keys, case: &Case) -> Answer {
    let mode = if case.shared { "shared" } else { "exclusive" };
    let script = redis::Script::new(&rw::take_source());
    let answer: (i64, String, i64, u64, Vec<String>) = script
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.readers)
        .key(&keys.writer_waits)
        .key(&keys.to)
        .key(&keys.baton)
        .key(&keys.busy)
        .arg(format!("{}|", case.candidate))
        .arg(case.candidate)
        .arg(TTL_MS)
        .arg(0)
        .arg(&keys.events)
        .arg(0)
        .arg(mode)
        .arg(SHOWN)
        .arg(&keys.presence)
        .arg(&keys.rw)
        .invoke(con)
        .expect("the Redis take script");
    let (code, value, _, _, shown) = answer;
    let identities = |vs: &[String]| -> Vec<String> {
        vs.iter()
            .map(|v| parse_value(v).identity.to_owned())
            .collect()
    };
    match code {
        1 => Answer::Holds,
        0 if !value.is_empty() => Answer::HeldBy(identities(&[value]).concat()),
        3 => Answer::BesideShared(identities(&shown)),
        4 => Answer::PlaceAhead,
        _ => panic!("{}: the Redis take answered {code} {value:?}", case.name),
    }
}

/// Redlock's take on one node, as `redlock::RedlockBackend` runs it on each.
fn redlock_take(con: &mut redis::Connection, keys: &Keys, case: &Case, entry: &str) -> Answer {
    let mode = if case.shared {
        LockMode::Shared
    } else {
        LockMode::Exclusive
    };
    let script = redis::Script::new(&redlock::take_source(mode));
    type Take = (i64, String, i64, i64, i64, i64, String, u64, Vec<String>);
    let answer: Take = script
        .key(&keys.lock)
        .key(&keys.fence)
        .key("leasekeeper:{queue}:incarnation")
        .key(&keys.to)
        .key(&keys.readers)
        .key(&keys.writer_waits)
        .key(&keys.busy)
        .arg(format!("{}|", case.candidate))
        .arg(case.candidate)
        .arg(TTL_MS)
        .arg(0)
        .arg(0)
        .arg(entry)
        .arg(format!("{}|", case.candidate))
        .arg(&keys.presence)
        .arg(&keys.events)
        .arg("1")
        .arg(SHOWN)
        .invoke(con)
        .expect("the Redlock take script");
    let (code, value, ..) = answer;
    let identity = parse_value(&value).identity.to_owned();
    match code {
        1 => Answer::Holds,
        0 if value.is_empty() => Answer::PlaceAhead,
        0 => Answer::HeldBy(identity),
        3 => Answer::BesideShared(vec![identity]),
        _ => panic!("{}: the Redlock take answered {code} {value:?}", case.name),
    }
}

/// Whether `answer` is what the table says of `case`, laid out as `layout`; what is
/// wrong, if not.
fn judge(case: &Case, queue: &[Entry], layout: Layout, answer: &Answer) -> Result<(), String> {
    let held = match layout {
        Layout::Held => &queue[..holding(queue)],
        Layout::Waiting => &[],
    };
    let holder = |name: &String| held.iter().any(|e| e.name == name);
    let exclusive_holder = held.first().filter(|h| !h.shared);
    match (case.holds, answer) {
        (true, Answer::Holds) => Ok(()),
        (true, kept) => Err(format!("kept out ({kept:?}), but its turn has come")),
        (false, Answer::Holds) => Err(format!(
            "took, but it waits for {}",
            case.waits_for.unwrap_or("?")
        )),
        (false, Answer::HeldBy(name)) if exclusive_holder.is_some_and(|h| h.name == name) => Ok(()),
        (false, Answer::BesideShared(names))
            if !names.is_empty() && names.iter().all(holder) && exclusive_holder.is_none() =>
        {
            Ok(())
        }
        (false, Answer::PlaceAhead) if exclusive_holder.is_none() => Ok(()),
        (false, kept) => Err(format!(
            "kept out, but by {kept:?}: the holders are {:?}",
            held.iter().map(|e| e.name).collect::<Vec<_>>()
        )),
    }
}

/// Runs one case, laid out as `layout`, through the take script of `store`.
fn run(
    con: &mut redis::Connection,
    keys: &Keys,
    case: &Case,
    layout: Layout,
    store: Store,
) -> Result<(), String> {
    let queue = in_order(case);
    lay_out(con, keys, &queue, layout);
    let own = queue.iter().find(|e| e.name == case.candidate);
    let answer = match (store, own) {
        (Store::Redis, _) => redis_take(con, keys, case),
        (Store::Redlock, Some(own)) => redlock_take(con, keys, case, &own.member()),
        (Store::Redlock, None) => {
            let (_, now_us) = server_time(con);
            let newcomer = Entry {
                order: i64::try_from(now_us).expect("µs fit"),
                name: case.candidate,
                shared: case.shared,
            };
            redlock_take(con, keys, case, &newcomer.member())
        }
    };
    judge(case, &queue, layout, &answer).map_err(|wrong| {
        let mode = if case.shared { "shared" } else { "exclusive" };
        let names: Vec<_> = queue.iter().map(|e| e.member()).collect();
        format!(
            "{store:?}, {layout:?}: {}: {} ({mode}) in {names:?}: {wrong}",
            case.name, case.candidate
        )
    })
}

#[test]
fn the_take_scripts_keep_the_queue_rules_of_every_case() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).expect("client");
    let mut con = client.get_connection().expect("connect");
    let keys = Keys::for_election("queue");
    // Every entry's candidate is present: a listener on each presence channel.
    let mut listener = client.get_connection().expect("connect");
    let mut presence = listener.as_pubsub();
    for case in CASES {
        for &(_, name, _) in case.queue {
            let channel = format!("{}{name}", keys.presence);
            presence.subscribe(channel).expect("SUBSCRIBE");
        }
    }
    let mut wrong = Vec::new();
    let mut runs = 0;
    for case in CASES {
        for layout in [Layout::Waiting, Layout::Held] {
            for store in [Store::Redis, Store::Redlock] {
                runs += 1;
                if let Err(e) = run(&mut con, &keys, case, layout, store) {
                    wrong.push(e);
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {runs} runs disagree with the table:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    eprintln!("{runs} runs of {} cases agree with the table", CASES.len());
}
