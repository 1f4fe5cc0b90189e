//! The faults of a run, all drawn from the run's one generator: a chaos window of
//! [`CHAOS_TTLS`] ttl with cut links (both ways or one way), slow links, process pauses
//! (SIGSTOP; the claiming process's past its ttl) and crashes (`kill -9`, then a
//! restart), store pauses, Redlock node
//! restarts (empty or from an older snapshot), single Redis server restarts without
//! persistence (the TTL family: record and fence counter gone), SQL's lease and counter
//! rows deleted (the SQL TTL family: the same loss), graceful shutdowns and
//! `POST /release`; on top, the seed's message loss, duplication and long delays. Then
//! everything heals, and the liveness checks run.
//!
//! A Redis server (or SQL table) that lost its counter is fenced only by candidates that have seen the
//! tokens handed out (the documented limit: a candidate started fresh cannot know of
//! the loss, and one that missed the latest tokens continues above what it saw). So
//! that restart comes only while every sidecar runs and has seen the latest token,
//! every take on its way carries it, and one sidecar neither exits on a loss nor shuts
//! down; until a take sets the counter again no sidecar crashes, shuts down or starts
//! afresh (a restart waits).

use std::time::Duration;

use rand::Rng;

use leasekeeper::timing::Timing;

use super::client::Family;
use super::oracle::Ns;
use super::store::RlData;
use super::world::{Ev, Kind, World, CHAOS_TTLS, MS};

/// One fault.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// The links between `node` and `store` (every store when `None`) cut, both ways
    /// or (`Some(toward the store)`) one way.
    Cut {
        node: usize,
        store: Option<usize>,
        dir: Option<bool>,
        dur: Ns,
    },
    /// Every message of `node` late by another 0.1–0.5 ttl.
    Slow { node: usize, dur: Ns },
    /// A congested link: every message of `node` late by another 20–150 ms (most
    /// answers still within the call's budget, but late).
    Congested { node: usize, dur: Ns },
    /// SIGSTOP, SIGCONT after `dur`: no event processed, the clock runs.
    Pause { node: usize, dur: Ns },
    /// SIGSTOP of whoever claims at that instant (nobody's, when none does), for 1.2
    /// to 2.5 ttl: another takes over while it is stopped, and it runs on after.
    PauseLeader { dur: Ns },
    /// `kill -9`, a new process after `down`.
    Crash { node: usize, down: Ns },
    /// The store stops answering for `dur` (its clock runs).
    PauseStore { store: usize, dur: Ns },
    /// Redlock node 0 restarts, empty or from its last snapshot; the single Redis
    /// server (the TTL family) restarts empty; SQL's lease and counter rows are deleted
    /// (the SQL TTL family).
    RestartStore { empty: bool },
    /// Redlock node 0 writes a snapshot (a later restore brings it back).
    Snapshot,
    /// SIGTERM: a graceful shutdown, then a new process.
    Shutdown { node: usize },
    /// `POST /release`.
    Release {
        node: usize,
        cooldown: Option<Duration>,
    },
}

/// Draws the chaos window's faults.
pub fn schedule(w: &mut World) {
    let ttl = w.timing.ttl.as_nanos() as Ns;
    let n = w.nodes.len();
    let stores = w.stores.len();
    let count = w.rng.random_range(2..=10);
    for _ in 0..count {
        let at = w.rng.random_range(0..CHAOS_TTLS * ttl);
        let node = w.rng.random_range(0..n);
        let dur = w.rng.random_range(ttl / 10..2 * ttl);
        let redlock = matches!(w.fam, Family::Redlock(..));
        let redis = matches!(w.fam, Family::Ttl(_) | Family::SqlTtl(_));
        let fault = match w.rng.random_range(0..100) {
            0..18 => Fault::Cut {
                node,
                store: w
                    .rng
                    .random_bool(0.5)
                    .then(|| w.rng.random_range(0..stores)),
                dir: [None, Some(true), Some(false)][w.rng.random_range(0..3)],
                dur,
            },
            18..30 => Fault::Slow { node, dur },
            30..40 => Fault::Congested { node, dur },
            40..46 => Fault::Pause { node, dur },
            46..52 => Fault::PauseLeader {
                dur: w.rng.random_range(ttl * 6 / 5..ttl * 5 / 2),
            },
            52..60 => Fault::Crash { node, down: dur },
            60..70 => Fault::PauseStore {
                store: w.rng.random_range(0..stores),
                dur,
            },
            70..76 if redlock => Fault::RestartStore {
                empty: w.rng.random_bool(0.5),
            },
            70..76 if redis => Fault::RestartStore { empty: true },
            76..82 if redlock => Fault::Snapshot,
            82..90 => Fault::Shutdown { node },
            _ => Fault::Release {
                node,
                cooldown: w
                    .rng
                    .random_bool(0.5)
                    .then(|| Duration::from_millis(w.rng.random_range(50..1000))),
            },
        };
        w.at(at, Ev::Fault(fault));
    }
}

pub fn apply(w: &mut World, f: Fault) {
    w.note(|| format!("fault: {f:?}"));
    match f {
        Fault::Cut {
            node,
            store,
            dir,
            dur,
        } => {
            let until = w.now + dur;
            for s in 0..w.stores.len() {
                if store.is_none_or(|x| x == s) {
                    w.cuts.push((node, s, dir, until));
                }
            }
        }
        Fault::PauseLeader { dur } => match w.oracle.leader_at(w.now) {
            Some(node) => apply(w, Fault::Pause { node, dur }),
            None => w.note(|| "skipped: nobody claims".into()),
        },
        Fault::Slow { node, dur } => w.slow_until[node] = w.slow_until[node].max(w.now + dur),
        Fault::Congested { node, dur } => {
            w.congested_until[node] = w.congested_until[node].max(w.now + dur)
        }
        Fault::Pause { node, dur } if w.nodes[node].machine.is_some() => {
            let until = w.nodes[node].paused_until.max(w.now + dur);
            w.nodes[node].paused_until = until;
            w.at(until, Ev::ResumeNode(node));
        }
        Fault::Crash { .. } | Fault::Shutdown { .. } if w.fence_lost() => {
            w.note(|| "skipped: the store's fence counter is not back yet".into());
        }
        Fault::Crash { node, down } if w.nodes[node].machine.is_some() => {
            w.crash(node);
            w.at(w.now + down, Ev::Restart(node));
        }
        Fault::PauseStore { store, dur } => {
            let until = w.stores[store].paused_until.max(w.now + dur);
            w.stores[store].paused_until = until;
            w.at(until, Ev::ResumeStore(store));
        }
        Fault::RestartStore { empty } => restart_store(w, empty),
        Fault::Snapshot => {
            if let Kind::Redlock(r) = &w.stores[0].kind {
                w.stores[0].snapshot = Some(r.data.clone());
            }
        }
        Fault::Shutdown { node } if w.nodes[node].machine.is_some() => {
            w.nodes[node].shutdown = true;
            w.nodes[node].stopping = true;
            poke(w, node);
        }
        Fault::Release { node, cooldown } if w.nodes[node].machine.is_some() => {
            ask_release(w, node, cooldown);
        }
        _ => {}
    }
}

fn restart_store(w: &mut World, empty: bool) {
    if let Kind::Ttl(_) = &w.stores[0].kind {
        return restart_empty(w);
    }
    let local = w.stores[0].clock.local(w.now);
    let snapshot = w.stores[0].snapshot.clone();
    if let Kind::Redlock(r) = &mut w.stores[0].kind {
        let data = if empty {
            RlData::default()
        } else {
            snapshot.unwrap_or_default()
        };
        r.restart(local, data);
    }
    w.stores[0].tick_at = None;
}

/// The single Redis server restarts empty (or SQL's lease and counter rows are
/// deleted), while every sidecar runs and has seen the latest token, every take on its
/// way carries it, and one sidecar stays (see the module doc); else the fault is
/// skipped.
fn restart_empty(w: &mut World) {
    let Kind::Ttl(st) = &w.stores[0].kind else {
        return;
    };
    let latest = st.counter;
    let unseen = (0..w.nodes.len()).find(|&i| {
        let n = &w.nodes[i];
        n.machine.is_none() || n.client.floor().is_none_or(|f| f < latest)
    });
    if let Some(i) = unseen {
        w.note(|| format!("skipped: n{i} is down or has not seen token {latest}"));
        return;
    }
    if w.nodes.iter().all(|n| n.cfg.exit_on_loss || n.stopping) {
        w.note(|| "skipped: every sidecar may exit".into());
        return;
    }
    if w.takes_below(latest) {
        w.note(|| format!("skipped: a take below token {latest} is on its way"));
        return;
    }
    if let Kind::Ttl(st) = &mut w.stores[0].kind {
        st.restart_empty();
    }
    w.stores[0].tick_at = None;
}

/// `POST /release` to node `i`; its request id.
pub fn ask_release(w: &mut World, i: usize, cooldown: Option<Duration>) -> u64 {
    let node = &mut w.nodes[i];
    node.next_request += 1;
    let id = node.next_request;
    node.releases.push((id, cooldown));
    poke(w, i);
    id
}

/// A shutdown or release request reaches a node that waits (as the driver's select).
pub fn poke(w: &mut World, i: usize) {
    let node = &mut w.nodes[i];
    if node.machine.is_none() || node.paused_until > w.now || node.wait.is_none() {
        return;
    }
    if std::mem::take(&mut node.shutdown) {
        w.feed(i, leasekeeper::elector::machine::Event::Shutdown);
    } else if !node.releases.is_empty() {
        let (id, cooldown) = node.releases.remove(0);
        w.feed(
            i,
            leasekeeper::elector::machine::Event::ReleaseRequested { id, cooldown },
        );
    }
}

/// Every fault ends: links restored, processes resumed or restarted, stores resumed;
/// from now on no loss, no duplicates, delays under 2 ms.
pub fn heal(w: &mut World) {
    w.note(|| "heal".into());
    w.healed = true;
    w.cuts.clear();
    w.slow_until.iter_mut().for_each(|s| *s = 0);
    w.congested_until.iter_mut().for_each(|s| *s = 0);
    for i in 0..w.nodes.len() {
        if w.nodes[i].paused_until > w.now {
            w.nodes[i].paused_until = w.now;
            w.at(w.now, Ev::ResumeNode(i));
        }
        w.restart(i);
    }
    for s in 0..w.stores.len() {
        if w.stores[s].paused_until > w.now {
            w.stores[s].paused_until = w.now;
            w.at(w.now, Ev::ResumeStore(s));
        }
    }
    w.at(w.now + heal_bound(&w.timing), Ev::ReleaseCheck);
}

/// Once a leader is back: `POST /release` to it, and the run ends a while later.
pub fn release_check(w: &mut World) {
    let ttl = w.timing.ttl.as_nanos() as Ns;
    w.end_at = w.now + release_bound(&w.timing) + 2 * ttl;
    let Some(leader) = w.oracle.leader_at(w.now) else {
        return;
    };
    let id = ask_release(w, leader, None);
    w.note(|| format!("release check: POST /release to n{leader} (request {id})"));
    w.release = Some((leader, id, w.now, None));
    if let Family::Session(_) = w.fam {
        let after = release_bound(&w.timing) + 10 * MS;
        w.at(
            w.now + after,
            Ev::Handover {
                left: super::handover::RELEASES,
            },
        );
    }
}

/// Some node claims within this long after the faults heal. Every message of the
/// chaos has arrived a ttl after healing (longest delay: half a ttl, plus half a ttl
/// on a slow link); a record a late request kept alive expires one ttl (+ drift) after
/// it (a Lease: unchanged for its duration on the candidate's clock); a follower
/// campaigns within 1.2 × retry interval (its longest wait, jittered), or at once on a
/// push; the campaign takes a few round trips (2 ms each at most after healing).
pub fn heal_bound(t: &Timing) -> Ns {
    let ttl = t.ttl.as_nanos() as Ns;
    let wait = (t.retry_interval.as_nanos() as f64 * 1.2) as Ns;
    ttl + (ttl as f64 * (1.0 + t.clock_drift)) as Ns + wait + 20 * MS
}

/// After a release answered `released: true`, another node claims within this long:
/// the releaser sits out a renew interval, and a follower woken by the store's push
/// needs a few round trips.
pub fn release_bound(t: &Timing) -> Ns {
    t.renew_interval.as_nanos() as Ns
}
