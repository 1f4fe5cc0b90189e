//! The handover check of the session family: once the release check is done, the
//! holder is asked to release again and again, in turns once every candidate is
//! queued, and soon after it claimed (while the followers behind it stagger, or look
//! again, so a head goes between a follower's listing and its watch). Every release
//! with candidates queued behind it is taken by another node within a stagger and a
//! few round trips ([`bound`]), far below the retry interval: a follower that waits on
//! nothing (its watch set on a node gone already) misses it. And every candidate
//! queued when a claim begins names its holder within the same bound (a follower
//! further back that lost the news of its head's delete waits for its turn instead).

use std::time::Duration;

use rand::Rng;

use super::faults::ask_release;
use super::oracle::{Ns, Violation};
use super::world::{Ev, Kind, World, MS};

/// The news the check follows: the claims that began while it ran (when, whose,
/// their token, the nodes whose candidates were queued then), and every holder a
/// node named (when, its token).
#[derive(Debug, Default)]
pub struct News {
    claims: Vec<(Ns, usize, u64, Vec<usize>)>,
    named: Vec<(usize, Ns, Option<u64>)>,
}

/// How long a released holder sits out before it queues again.
const COOLDOWN: Duration = Duration::from_millis(20);

/// How often a step looks for the claim it waits for.
const POLL: Ns = 2 * MS;

/// How many releases the check asks.
pub const RELEASES: u32 = 40;

/// One release of the check.
#[derive(Clone, Copy, Debug)]
pub struct Handover {
    pub node: usize,
    pub id: u64,
    pub asked: Ns,
    /// When it answered `released: true`, and whether candidates were queued then.
    pub answered: Option<(Ns, bool)>,
}

/// Another node claims within this long after a release with candidates queued: the
/// longest stagger (50 ms in the simulator) and a few round trips (2 ms each at most
/// after healing).
pub fn bound() -> Ns {
    70 * MS
}

/// The nodes whose candidates are queued in the session store (live sessions with a
/// node; a session's id names its node, see `Client::new`).
fn queue(w: &World) -> Vec<usize> {
    match &w.stores[0].kind {
        Kind::Session(st) => (st.sessions.iter())
            .filter(|s| s.alive && s.node.is_some())
            .map(|s| ((s.id >> 40) as usize).saturating_sub(1))
            .collect(),
        _ => Vec::new(),
    }
}

fn queued(w: &World) -> usize {
    queue(w).len()
}

/// Node `node` claims with `token`, while the check runs.
pub fn claimed(w: &mut World, node: usize, token: u64) {
    if !w.handovers.is_empty() {
        let queue = queue(w);
        w.news.claims.push((w.now, node, token, queue));
    }
}

/// Node `node` names the holder of `token` (`None`: none), while the check runs.
pub fn named(w: &mut World, node: usize, token: Option<u64>) {
    if !w.handovers.is_empty() {
        w.news.named.push((node, w.now, token));
    }
}

/// The candidates queued when a claim began that did not name its holder within
/// the bound, while it lasted.
fn late_news(w: &World) -> Vec<Violation> {
    let bound = bound();
    let mut late = Vec::new();
    for (start, holder, token, queue) in &w.news.claims {
        let by = start + bound;
        let lasted = (w.oracle.claims.iter())
            .any(|c| c.node == *holder && c.start == *start && c.until() >= by);
        if !lasted {
            continue;
        }
        for &node in queue.iter().filter(|&&n| n != *holder) {
            let named = (w.news.named.iter())
                .rev()
                .find(|(n, at, _)| *n == node && *at <= by);
            if named.is_none_or(|(_, _, t)| *t != Some(*token)) {
                late.push(Violation::NewsLate {
                    node,
                    holder: *holder,
                    claimed_at: *start,
                    bound,
                });
            }
        }
    }
    late
}

/// The next step of the check, `left` releases to go: once a new claim stands (and,
/// on even turns, every candidate is queued), its release is asked: on odd turns
/// within 60 ms of now (the longest stagger and a few round trips: the followers
/// behind may be looking again), on even turns once the claim has lasted the bound
/// (so that the news check sees it).
pub fn step(w: &mut World, left: u32) {
    if left == 0 {
        return;
    }
    let ttl = w.timing.ttl.as_nanos() as Ns;
    w.end_at = w.end_at.max(w.now + 2 * ttl);
    let since = w.handovers.last().map_or(0, |h| h.asked);
    let claim = w.oracle.claim_at(w.now).filter(|&(_, start)| start > since);
    let soon = left % 2 == 1;
    match claim {
        Some((node, _)) if soon => {
            let after = w.rng.random_range(0..60 * MS);
            w.at(w.now + after, Ev::HandoverRelease { node, left });
        }
        Some((node, start)) if queued(w) == w.nodes.len() => {
            let lasted = (start + bound() + 5 * MS).saturating_sub(w.now);
            let after = lasted + w.rng.random_range(0..5 * MS);
            w.at(w.now + after, Ev::HandoverRelease { node, left });
        }
        _ => w.at(w.now + POLL, Ev::Handover { left }),
    }
}

/// The release of turn `left`, to `node` if it still holds.
pub fn release(w: &mut World, node: usize, left: u32) {
    if w.oracle.leader_at(w.now) == Some(node) {
        // A short cooldown (`POST /release?cooldown=`): the releaser queues again soon,
        // behind the others.
        let id = ask_release(w, node, Some(COOLDOWN));
        w.note(|| format!("handover check: POST /release to n{node} (request {id})"));
        let asked = w.now;
        w.handovers.push(Handover {
            node,
            id,
            asked,
            answered: None,
        });
    }
    w.at(w.now + POLL, Ev::Handover { left: left - 1 });
}

/// Node `node` answered request `id` (`released`): noted, with the queue behind it.
pub fn answered(w: &mut World, node: usize, id: u64, released: bool) {
    let queued = queued(w) > 0;
    let now = w.now;
    let asked = w
        .handovers
        .iter_mut()
        .find(|h| h.node == node && h.id == id);
    if let Some(h) = asked.filter(|h| released && h.answered.is_none()) {
        h.answered = Some((now, queued));
    }
}

/// The releases with candidates queued that no other node took within the bound.
pub fn verdict(w: &World) -> Vec<Violation> {
    let bound = bound();
    let slow = w.handovers.iter().filter_map(|h| {
        let (at, queued) = h.answered?;
        let taken = w
            .oracle
            .other_claim_after(h.node, h.asked)
            .map(|d| h.asked + d);
        (queued && taken.is_none_or(|t| t > at + bound)).then_some(Violation::HandoverSlow {
            node: h.node,
            released_at: at,
            bound,
        })
    });
    let mut found: Vec<Violation> = slow.collect();
    found.extend(late_news(w));
    found
}
