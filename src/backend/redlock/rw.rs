//! The read-write lock over N Redis masters (`--backend redlock --mode
//! shared|exclusive`), on the keys of the one-server lock ([`crate::backend::redis::rw`])
//! held on each node, and Redlock's rules on top (see [`super`]).
//!
//! **On each node** one script decides, judged by that node's clock:
//! - an **exclusive** take (a `--mode exclusive` candidate, and an election's candidate
//!   without `--mode`: the same thing on the wire) sets the lock key `…:lock`, as the
//!   election's take always did, and now also only while no shared holder lives there
//!   (`…:readers`, a sorted set scored with each member's expiry in the node's ms);
//! - a **shared** take adds a member `<nonce>|pending|<identity>` to `…:readers` (score:
//!   now + ttl) only while the lock key is absent (whatever it holds: a pending or
//!   confirmed writer, a switchover's reservation) and no writer waits ahead of it.
//!
//! So on one node an exclusive value and a live shared member never exist at once, and
//! the rest is Redlock's argument, unchanged for both kinds: a tenure (shared or
//! exclusive) is made by the take on every node, then, when a majority of **trusted**
//! nodes took, the confirm with the token on the nodes taken (an exclusive take writes
//! its node's next token itself, and a majority that took with one token needs no
//! confirm, see [`super`]); it exists only once a majority of trusted nodes carries its
//! token in its value while that value is still there. Its claim (the elector's deadline, from the take's send time) ends
//! before its value can expire on any node of that majority. An exclusive tenure's
//! majority and any other tenure's majority share a node X; on X one of the two values
//! was taken only after the other was gone, so the two claims do not overlap and are
//! ordered as their values on X. Two shared tenures may overlap: on X both members
//! live side by side. A failed campaign gives back on every node, as for the election.
//! Restarted nodes count for nothing until they have been up a ttl and their counter is
//! caught up (the incarnation marker, see [`super`]); they have forgotten the shared
//! members and the lock alike, so the restart argument holds for both kinds.
//!
//! **Tokens.** Every confirm, shared or exclusive, and every exclusive take raises
//! each node's fence counter to its token, and every take reads the counters: the
//! token is one more than the highest counter of the nodes read (and than the highest
//! token this candidate has seen). On
//! X above, the later tenure's take read the counter after the earlier one's take or
//! confirm wrote its token there (that write needed its value on X, and the later take
//! needed it gone), so an exclusive tenure's token exceeds every earlier tenure's, and a
//! shared tenure's exceeds every earlier exclusive one's (and is below every later
//! exclusive one's). **Between shared holders nothing is promised**: two that overlap,
//! or follow each other closely, may carry the same token or any order of tokens
//! (neither excludes the other, so neither reads the other's counter after it).
//!
//! **Writers are not starved.** A candidate kept out on a node (by a holder, a
//! reservation, or a place ahead) leaves its place in that node's queue
//! (`…:writer-waits`, the entries of [`QUEUE`](crate::backend::redis::QUEUE): arrival,
//! `r` or `w`, a per-process queue id, the identity; a place lapses when its candidate's
//! presence channel has no subscriber on that node, or two ttl after its last look
//! unless the holders keep the queue by `…:busy`). A shared take is refused on a node
//! while a writer waits there ahead of it; an exclusive take (of a `--mode` candidate,
//! or of an election's candidate while the queue exists or readers hold) while anyone
//! waits ahead of it. Unlike on one server, the arrival in an entry is chosen by the
//! candidate (its clock, once per wait) and is the same on every node, so every node
//! orders two candidates alike: the first of those waiting is kept out by no place on
//! any node, and no two candidates can each be ahead on a different node and block
//! each other forever (with node-chosen arrivals they could, while a node is down). A
//! place is liveness only: the lock key and the readers' set alone decide safety.
//!
//! **Waiting** sends nothing at steady state. A candidate kept out by an exclusive
//! holder follows it as the election's followers do (tracking the renewals' `…:alive`
//! on a majority, see [`super::handover`]). One kept out by shared holders (a writer,
//! an election's candidate, or a reader behind a writer waiting for them: the take
//! names one of them, [`BESIDE_SHARED`]) tracks the readers' set `…:readers` on the
//! nodes that said so (`CLIENT TRACKING BCAST`, with `…:alive`, see
//! [`follower_tracking`]): every renewal there is pushed to it, and it looks by itself
//! only once all but a minority of those nodes went a ttl without a change (the
//! readers crashed or stopped, so their entries have expired). A release of the lock
//! while candidates wait, the last shared holder's release on a node, and a waiting
//! candidate's withdrawal publish on the events channel, which makes every follower
//! look at once. Left with a bounded look: a candidate kept out by a place ahead while
//! no shared holder holds (a writer about to take) looks at that place's lapse or its
//! retry interval.

use std::time::{SystemTime, UNIX_EPOCH};

use super::rules::{named, Round, Take, TRUSTED};
use super::RedlockTransport;
use crate::backend::redis::{parse_value, Keys};
use crate::backend::LockMode;
use crate::status::{FencingToken, Holder, Mode};

/// How many shared holders `/leader` lists (as on Redis, and etcd).
pub(super) const SHOWN: usize = 16;

/// The shared holders `/leader` lists, from the members each trusted node's take
/// listed (`lists`, one per node that answered): every *confirmed* member (with a
/// token, not `pending`) that a majority (`quorum`) of the N nodes listed, in the
/// order first listed, at most [`SHOWN`]. A shared tenure exists once a majority
/// confirmed it, so this lists every live one the nodes that answered can show; a
/// member on a minority only (a failed campaign's, or one whose other copies
/// expired) is no tenure.
pub(super) fn shared_holders(lists: &[&[String]], quorum: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in lists.iter().flat_map(|l| l.iter()) {
        if out.contains(m) || parse_value(m).token.is_none() {
            continue;
        }
        if lists.iter().filter(|l| l.contains(m)).count() >= quorum {
            out.push(m.clone());
        }
    }
    out.truncate(SHOWN);
    out
}

/// Lua prelude of the take scripts: `before(live, entry, writers)`, the first entry of
/// the sorted queue `live` ahead of `entry` (a writer's, with `writers`), or nil.
/// Entries sort by their arrival, which the candidate chose (16 digits), so this is
/// the same on every node.
pub(super) const ORDER: &str = include_str!("lua/rw_order.lua");

/// A take's answer: kept out while shared holders hold; its value names one of them.
pub(super) const BESIDE_SHARED: i64 = 3;

/// Phase 1 of an exclusive (or an election's) take on one node. KEYS: lock, fence,
/// marker, switchover reservation, readers, queue (writer-waits), busy. ARGV: our
/// `<nonce>|`, identity, ttl ms, settle ms, use-by, our queue entry, our queue id
/// `<id>|`, the presence channels' prefix, the events channel, `1` for a `--mode`
/// candidate (always queues when kept out), how many shared holders to list, the
/// highest token the candidate has seen. A lock it sets carries the node's next token,
/// `max(counter, ARGV[12]) + 1`, written into the counter too: `<nonce>|<token>|<identity>`
/// (published nowhere: a take on a minority wakes nobody; the new leader announces
/// itself, see [`super::handover`]). Returns {taken (2: refused as late;
/// [`BESIDE_SHARED`]: kept out while shared holders hold, value one of them), value,
/// pttl of what keeps it out, fence (after the take), state, ms until settled, run_id,
/// store ms}, and the live shared holders' members (up to `ARGV[11]`); kept out by a
/// place ahead, the value is empty.
pub(super) const TAKE_EXCLUSIVE: &str = include_str!("lua/rw_take_exclusive.lua");

/// Phase 1 of a shared take on one node: adopt our own live member, or add a pending
/// one while the lock key is absent, no reservation is left to another and no writer
/// waits ahead. KEYS and ARGV as [`TAKE_EXCLUSIVE`]'s; the answer too.
pub(super) const TAKE_SHARED: &str = include_str!("lua/rw_take_shared.lua");

/// Phase 2 of a shared take on one node: if our member is still there and live, raise
/// the counter to the token and put our value with the token in its place (same
/// expiry), catching the node up as [`super::CONFIRM`] does. KEYS: readers, fence,
/// marker. ARGV: our `<nonce>|`, token, value, (unused), settle ms, run_id to catch
/// up. Returns {ours, state}.
pub(super) const CONFIRM_SHARED: &str = include_str!("lua/rw_confirm_shared.lua");

/// A shared holder's renewal on one node: its own live member only, and only while
/// the lock key is absent; keeps the queue's places. KEYS: readers, fence, marker,
/// lock, queue, busy. ARGV: our value, ttl ms, settle ms, use-by. Returns as
/// [`super::RENEW`]: {ours (2: refused as late), state, fence, run_id, store ms}.
pub(super) const RENEW_SHARED: &str = include_str!("lua/rw_renew_shared.lua");

/// A shared holder's give-back on one node: our members go; with `ARGV[7]` (our queue
/// id, on a release) our place too, and then the release of the last shared holder
/// there (or the withdrawal of a place) is published on the events channel, so the
/// candidates waiting look. Catches up as [`super::GIVE_BACK`]. KEYS: readers, fence,
/// marker, queue, lock. ARGV: our `<nonce>|`, events channel, run_id to catch up,
/// counter, settle ms, (unused), our queue id `<id>|` or empty. Returns 1 when it
/// released a member.
pub(super) const GIVE_BACK_SHARED: &str = include_str!("lua/rw_give_back_shared.lua");

/// A follower's tracking on one node's command connection: every change of the
/// exclusive holder's renewals (`…:alive`, see [`super::handover`]) and of the shared
/// holders' set (`…:readers`) is pushed to it. Off first, as
/// [`tracking_pipe`](crate::backend::redis::tracking_pipe).
pub(super) fn follower_tracking(keys: &Keys) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("CLIENT").arg("TRACKING").arg("OFF").ignore();
    pipe.cmd("CLIENT").arg("TRACKING").arg("ON").arg("BCAST");
    for key in [&keys.alive, &keys.readers] {
        pipe.arg("PREFIX").arg(key);
    }
    pipe.arg("NOLOOP").ignore();
    pipe
}

/// A candidate's place in the nodes' queues: `<arrival µs, 16 digits>|<r or w>|<queue
/// id>|<identity>`, the same on every node (see the module doc). An election's
/// candidate queues as a writer.
pub(super) fn queue_entry(
    arrival_us: u128,
    mode: LockMode,
    queue_id: &str,
    identity: &str,
) -> String {
    let kind = if mode == LockMode::Shared { 'r' } else { 'w' };
    format!("{arrival_us:016}|{kind}|{queue_id}|{identity}")
}

/// Now, in µs of the wall clock, for a new place in the queues.
pub(super) fn arrival_now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

impl RedlockTransport {
    /// Our place in the queues: kept from the first look that did not take until we
    /// take or release, so every node orders us by the same arrival.
    pub(super) fn queue_entry(&mut self) -> String {
        let (mode, id, identity) = (self.mode, &self.queue_id, &self.identity);
        self.entry
            .get_or_insert_with(|| queue_entry(arrival_now(), mode, id, identity))
            .clone()
    }

    /// Who holds, for `/leader`'s holders with `--mode` ([`RedlockTransport::slots`]):
    /// after our take (`took`), we alone (exclusive) or we and the shared holders
    /// listed; else the `exclusive` holder a majority names, or the shared holders
    /// ([`shared_holders`]).
    pub(super) fn observe(
        &mut self,
        answers: &Round<Take>,
        exclusive: Option<Holder>,
        took: Option<FencingToken>,
    ) {
        self.observed = observed(
            self.mode,
            &self.identity,
            self.core.value(),
            (answers, self.core.quorum()),
            exclusive,
            took,
        );
    }
}

/// Who holds, as [`RedlockTransport::observe`] says: `me` (our `identity`, our tenure's
/// `value`), the take round's `answers` (with the nodes' `quorum`).
fn observed(
    mode: LockMode,
    identity: &str,
    value: Option<&str>,
    (answers, quorum): (&Round<Take>, usize),
    exclusive: Option<Holder>,
    took: Option<FencingToken>,
) -> Vec<(Holder, Mode)> {
    let lists: Vec<&[String]> = (answers.iter().flatten())
        .filter(|a| a.state == TRUSTED)
        .map(|a| a.readers.as_slice())
        .collect();
    let mut shared = shared_holders(&lists, quorum);
    shared.retain(|m| Some(m.as_str()) != value);
    let shared = shared.iter().filter_map(|m| named(m));
    let me = took.map(|token| Holder {
        identity: identity.to_owned(),
        token: Some(token),
    });
    match (me, exclusive) {
        (Some(me), _) if mode == LockMode::Shared => (std::iter::once(me).chain(shared))
            .take(SHOWN)
            .map(|h| (h, Mode::Shared))
            .collect(),
        (Some(h), _) | (None, Some(h)) => vec![(h, Mode::Exclusive)],
        (None, None) => shared.map(|h| (h, Mode::Shared)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::rules::{Tally, STALE};
    use super::*;
    use crate::backend::redis::REFUSED;

    fn beside(value: &str, state: i64) -> Option<Take> {
        Some(Take {
            won: false,
            beside_shared: true,
            refused: false,
            value: value.to_owned(),
            pttl: 700,
            fence: 0,
            state,
            settle_ms: 0,
            run_id: String::new(),
            store_ms: 0,
            readers: Vec::new(),
        })
    }

    #[test]
    fn shared_holders_keep_a_writer_out_without_holding_the_lock() {
        let answers = vec![
            beside("a|3|r-a", TRUSTED),
            beside("b|4|r-b", TRUSTED),
            beside("a|3|r-a", TRUSTED),
        ];
        let t = Tally::of(&answers, &[None, None, None]);
        // Nobody holds the lock itself, but something does on every node: a wait for
        // the expiry, not a split vote's quick retry.
        assert_eq!(t.seen, vec![String::new(); 3]);
        assert_eq!(t.counted_taken, 0);
        assert_eq!(t.soonest_expiry, Some(700));
        let named = t.shared_holder().expect("a shared holder named");
        assert_eq!((named.identity.as_str(), named.token), ("r-a", Some(3)));
        // What an untrusted node says names nobody.
        let t = Tally::of(
            &vec![beside("a|3|r-a", STALE), None, None],
            &[None, None, None],
        );
        assert!(t.seen.is_empty() && t.shared_holder().is_none());
    }

    #[test]
    fn a_shared_holder_is_listed_once_confirmed_on_a_majority() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (n0, n1, n2) = (
            l(&["a|3|r-a", "b|4|r-b", "c|pending|r-c", "d|5|r-d"]),
            l(&["b|4|r-b", "a|3|r-a", "c|pending|r-c"]),
            l(&["a|3|r-a", "e|6|r-e"]),
        );
        let lists = [n0.as_slice(), n1.as_slice(), n2.as_slice()];
        assert_eq!(shared_holders(&lists, 2), l(&["a|3|r-a", "b|4|r-b"]));
        // Two nodes answered: each member still needs a majority of all three.
        assert_eq!(shared_holders(&lists[..2], 2), l(&["a|3|r-a", "b|4|r-b"]));
        assert_eq!(shared_holders(&lists[2..], 2), l(&[]));
        let many: Vec<String> = (0..40).map(|i| format!("n{i}|{i}|r-{i}")).collect();
        assert_eq!(shared_holders(&[&many, &many], 2).len(), SHOWN);
    }

    #[test]
    fn the_shared_answer_is_no_other_answer() {
        assert!(![0, 1, REFUSED].contains(&BESIDE_SHARED));
    }

    #[test]
    fn entries_sort_by_arrival_on_every_node_alike() {
        let early = queue_entry(9_000_000, LockMode::Shared, "q2", "r");
        let late = queue_entry(10_000_000, LockMode::Exclusive, "q1", "w");
        assert_eq!(early, "0000000009000000|r|q2|r");
        assert_eq!(late, "0000000010000000|w|q1|w");
        // Zero-padded: the string order (Lua's `<`) is the arrival's order.
        assert!(early < late);
        assert_eq!(
            queue_entry(1, LockMode::Election, "q", "e"),
            "0000000000000001|w|q|e",
            "an election's candidate waits as a writer"
        );
    }
}
