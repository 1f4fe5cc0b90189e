//! An election of N holders (`--holders N`): N slots, each its own lease on the store.
//!
//! Slot 0 of election `E` is the lease `E` (today's single lease), slot `i > 0` the
//! lease `E-i`, each built by the store's own backend, so
//! each slot has everything a lease has (the conservative deadline, compare-and-act,
//! its own growing fencing token, the own-record watch, the release on shutdown).
//! [`Slots`] is one [`Backend`] over those N: the elector above it is unchanged and
//! runs one claim at a time, so a candidate holds at most one slot, and at most one
//! candidate holds each slot because each is a lease.
//!
//! - A campaign tries the slots that may have changed, from the one the identity picks
//!   ([`start_slot`]: a StatefulSet ordinal, else a hash), in order; the first taken
//!   ends it. A slot whose campaign was cut off (the future dropped) is asked first
//!   next time, so a take the store did make is recognised as ours.
//! - A follower waits on every slot's own wait at once (a watch per slot where the
//!   store has watches), so any slot freed wakes it, without polling.
//! - Once a slot is taken, the candidate withdraws from the others (their queue
//!   entries, waiters and sessions): a place it kept in another slot's queue would
//!   become that slot's holder in the store's eyes without ever being claimed.

use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};

use super::{Backend, BackendError, Campaign, LockMode, Renewal, Wake};
use crate::settings::{bad, ConfigError};
use crate::status::{Holder, SlotHolder};

/// The most slots an election may have: each is a lease of its own, with its own
/// connection or session per candidate on most stores.
pub const MAX_HOLDERS: u32 = 64;

/// The flag of an election of several holders.
#[derive(clap::Args, Debug, Default, Clone)]
#[group(skip)]
pub struct Args {
    /// Candidates that lead at once, each in its own slot [default: 1].
    #[arg(long, value_name = "N", env = "LEASEKEEPER_HOLDERS")]
    pub holders: Option<String>,
    /// shared or exclusive side of the read-write lock [default: none].
    #[arg(long, env = "LEASEKEEPER_MODE")]
    pub mode: Option<String>,
}

impl Args {
    /// N, from 1 to [`MAX_HOLDERS`].
    pub fn count(&self) -> Result<u32, ConfigError> {
        let Some(raw) = self.holders.as_deref() else {
            return Ok(1);
        };
        match raw.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_HOLDERS).contains(&n) => Ok(n),
            _ => Err(bad(format!(
                "--holders {raw:?} is not a number of slots from 1 to {MAX_HOLDERS}"
            ))),
        }
    }

    /// `--mode`: the election (not given), or a side of its read-write lock.
    pub fn mode(&self) -> Result<LockMode, ConfigError> {
        match self.mode.as_deref().map(str::trim) {
            None => Ok(LockMode::Election),
            Some("exclusive") => Ok(LockMode::Exclusive),
            Some("shared") => Ok(LockMode::Shared),
            Some(other) => Err(bad(format!(
                "--mode {other:?} is not one of: shared, exclusive"
            ))),
        }
    }
}

/// The store's lease name of slot `slot` of `election`: slot 0 is the election itself
/// (so one slot, the default, is unchanged on the wire, and a rollout from one holder
/// to several, or back, shares the one lease that both sides know), slot `i` is
/// `<election>-<i>`. The name does not depend on N, so every N agrees on every slot's
/// lease.
pub fn slot_election(election: &str, slot: u32) -> String {
    if slot == 0 {
        election.to_owned()
    } else {
        format!("{election}-{slot}")
    }
}

/// The slot a candidate tries first: a StatefulSet Pod's ordinal (`name-3` → 3 mod
/// N), so a Pod comes back to its own slot; else a stable hash of the identity
/// (FNV-1a), so candidates spread over the slots.
pub fn start_slot(identity: &str, count: u32) -> u32 {
    let count = count.max(1);
    let ordinal = identity
        .rsplit_once('-')
        .and_then(|(_, tail)| tail.parse::<u64>().ok());
    let key = ordinal.unwrap_or_else(|| {
        identity.bytes().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    });
    (key % u64::from(count)) as u32
}

/// The order in which a candidate starting at `start` tries `count` slots.
fn preference(start: u32, count: u32) -> Vec<usize> {
    (0..count).map(|k| ((start + k) % count) as usize).collect()
}

/// How close to the end of its `max` a slot's "changed" counts as "time is up".
const AT_MAX: Duration = Duration::from_millis(20);

/// Which slot a candidate asks next, holds, and must leave: the decisions of
/// [`Slots`], without its I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picker {
    identity: String,
    order: Vec<usize>,
    /// The slot we hold (from its campaign until a renew, release or loss says no).
    held: Option<usize>,
    /// The slot whose campaign is under way (it may have taken the slot if cut off).
    in_flight: Option<usize>,
    /// Slots that may have changed since their last campaign.
    dirty: Vec<bool>,
    /// Slots to withdraw from once one is held.
    withdraw: Vec<usize>,
    observed: Vec<Option<Holder>>,
    last_own: Option<u32>,
}

impl Picker {
    pub fn new(count: usize, identity: &str) -> Picker {
        Picker {
            order: preference(start_slot(identity, count as u32), count as u32),
            identity: identity.to_owned(),
            held: None,
            in_flight: None,
            dirty: vec![true; count],
            withdraw: Vec::new(),
            observed: vec![None; count],
            last_own: None,
        }
    }

    /// The slots one campaign tries, in order: a held or cut-off one first, then the
    /// ones that may have changed (all of them when none is marked).
    pub fn round(&self) -> Vec<usize> {
        let first = self.held.or(self.in_flight);
        let any_dirty = self.dirty.iter().any(|d| *d);
        let rest = (self.order.iter().copied())
            .filter(|&i| Some(i) != first && (!any_dirty || self.dirty[i]));
        first.into_iter().chain(rest).collect()
    }

    /// Slot `i`'s campaign is about to be sent.
    pub fn asking(&mut self, i: usize) {
        self.in_flight = Some(i);
    }

    /// Slot `i`'s campaign answered: true when it was taken (the round ends, and the
    /// candidate is to withdraw from every other slot).
    pub fn answered(&mut self, i: usize, answer: &Result<Campaign, BackendError>) -> bool {
        self.in_flight = None;
        match answer {
            Ok(Campaign::Acquired { token }) => {
                self.dirty[i] = false;
                self.held = Some(i);
                self.last_own = Some(i as u32);
                self.observed[i] = Some(Holder {
                    identity: self.identity.clone(),
                    token: Some(*token),
                });
                self.withdraw = (0..self.dirty.len()).filter(|&j| j != i).collect();
                true
            }
            Ok(Campaign::Held(holder)) => {
                self.dirty[i] = false;
                if self.held == Some(i) {
                    self.held = None;
                }
                self.observed[i] = holder.clone();
                false
            }
            // Asked again next round.
            Err(_) => false,
        }
    }

    /// Slot `i`'s wait said "changed"; `time_is_up`: it said so at the end of its
    /// `max`, which means "ask again" for a store without pushed news: so would
    /// every other slot's wait now, and those waits end here, so every slot is asked
    /// (or a slot whose wait always came second would never be).
    pub fn changed(&mut self, i: usize, time_is_up: bool) {
        self.dirty[i] = true;
        if time_is_up {
            self.dirty.iter_mut().for_each(|d| *d = true);
        }
    }

    /// A wait must not start before the slots marked changed are asked.
    pub fn must_ask(&self) -> bool {
        self.dirty.iter().any(|d| *d)
    }

    /// The held slot's renew said it is lost.
    pub fn lost(&mut self) {
        self.held = None;
    }

    /// What a release lets go of: the held (or cut-off) slot first, then every other
    /// one (together); afterwards nothing is held and every slot is asked again.
    pub fn release_order(&mut self) -> (Option<usize>, Vec<usize>) {
        let first = self.held.or(self.in_flight);
        let rest = (0..self.dirty.len())
            .filter(|&i| Some(i) != first)
            .collect();
        self.held = None;
        self.in_flight = None;
        self.withdraw.clear();
        self.dirty.iter_mut().for_each(|d| *d = true);
        (first, rest)
    }

    /// The next slot to withdraw from, while one is held.
    pub fn to_withdraw(&self) -> Option<usize> {
        self.withdraw.last().copied()
    }

    pub fn withdrawn(&mut self, j: usize) {
        self.dirty[j] = true;
        self.withdraw.retain(|&k| k != j);
    }

    pub fn held(&self) -> Option<usize> {
        self.held
    }

    fn first_holder(&self) -> Option<Holder> {
        self.order.iter().find_map(|&i| self.observed[i].clone())
    }

    fn view(&self) -> crate::status::Slots {
        let list = (self.observed.iter().enumerate())
            .filter_map(|(i, h)| {
                h.clone().map(|holder| SlotHolder {
                    slot: i as u32,
                    holder,
                    mode: crate::status::Mode::Exclusive,
                })
            })
            .collect();
        crate::status::Slots {
            count: self.dirty.len() as u32,
            own: self.last_own,
            list,
        }
    }
}

/// N slots of one election, as one backend.
pub struct Slots<B: Backend> {
    slots: Vec<B>,
    picker: Picker,
}

impl<B: Backend> Slots<B> {
    /// `slots[i]` is the backend of the lease `slot_election(election, i)`.
    pub fn new(slots: Vec<B>, identity: &str) -> Self {
        Slots {
            picker: Picker::new(slots.len(), identity),
            slots,
        }
    }

    /// Withdraws from every slot but the held one (each a release of what the
    /// candidate may have left there); resumable if dropped.
    async fn withdraw_from_others(&mut self) {
        while let Some(j) = self.picker.to_withdraw() {
            if let Err(e) = self.slots[j].release().await {
                tracing::debug!(slot = j, error = %e, "could not withdraw from a slot");
            }
            self.picker.withdrawn(j);
        }
    }

    fn held_slot(&mut self) -> Option<&mut B> {
        self.picker.held().map(|i| &mut self.slots[i])
    }
}

/// One slot's wait, handing the slot back so it can wait again.
async fn wait_one<B: Backend>(i: usize, slot: &mut B, max: Duration) -> (usize, Wake, &mut B) {
    let wake = slot.wait_for_change(max).await;
    (i, wake, slot)
}

impl<B: Backend> Backend for Slots<B> {
    fn name(&self) -> &'static str {
        self.slots[0].name()
    }

    fn lease_ttl(&self) -> Duration {
        self.slots[self.picker.held().unwrap_or(0)].lease_ttl()
    }

    fn lease_index(&self) -> u32 {
        self.picker.held().unwrap_or(0) as u32
    }

    fn tenure_hold(&self) -> Option<std::os::fd::OwnedFd> {
        self.slots[self.picker.held()?].tenure_hold()
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        let mut failed = None;
        for i in self.picker.round() {
            self.picker.asking(i);
            let answer = self.slots[i].campaign().await;
            if self.picker.answered(i, &answer) {
                return answer;
            }
            if let Err(e) = answer {
                failed = failed.or(Some(e));
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(Campaign::Held(self.picker.first_holder())),
        }
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        let Some(slot) = self.held_slot() else {
            return Ok(Renewal::Lost);
        };
        let renewed = slot.renew().await;
        if matches!(renewed, Ok(Renewal::Lost)) {
            self.picker.lost();
        }
        renewed
    }

    /// The held slot first (the handover), then every other one at once: a follower
    /// that stops (or whose campaign was cut off) leaves every slot's queue, as a
    /// single lease's follower does, so no slot waits for its place to expire; one
    /// slow store answer delays no other slot's withdrawal.
    async fn release(&mut self) -> Result<(), BackendError> {
        let (first, rest) = self.picker.release_order();
        let mut result = Ok(());
        if let Some(i) = first {
            result = self.slots[i].release().await;
        }
        let rest = (self.slots.iter_mut().enumerate())
            .filter(|(i, _)| rest.contains(i))
            .map(|(_, slot)| slot.release());
        for released in futures_util::future::join_all(rest).await {
            result = result.and(released);
        }
        result
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        if self.picker.must_ask() {
            return Wake::Changed;
        }
        if let [one] = self.slots.as_mut_slice() {
            let wake = one.wait_for_change(max).await;
            if wake == Wake::Changed {
                self.picker.changed(0, false);
            }
            return wake;
        }
        let until = tokio::time::Instant::now() + max;
        let mut waits: FuturesUnordered<_> = (self.slots.iter_mut().enumerate())
            .map(|(i, slot)| wait_one(i, slot, max))
            .collect();
        let mut heard = true;
        while let Some((i, wake, slot)) = waits.next().await {
            match wake {
                Wake::Changed => {
                    drop(waits);
                    let time_is_up = tokio::time::Instant::now() + AT_MAX >= until;
                    self.picker.changed(i, time_is_up);
                    return Wake::Changed;
                }
                Wake::Waiting => heard = false,
                Wake::Quiet => {}
            }
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if !left.is_zero() {
                waits.push(wait_one(i, slot, left));
            }
        }
        if heard {
            Wake::Quiet
        } else {
            Wake::Waiting
        }
    }

    async fn record_lost(&mut self) {
        self.withdraw_from_others().await;
        match self.held_slot() {
            Some(slot) => slot.record_lost().await,
            None => std::future::pending().await,
        }
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        self.slots[self.picker.held().unwrap_or(0)]
            .candidates()
            .await
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        let released = match self.held_slot() {
            Some(slot) => slot.release_to(to).await,
            None => Ok(()),
        };
        self.picker.lost();
        released
    }

    fn handover_requested(&mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let requested = self.held_slot().map(|slot| slot.handover_requested());
        async move {
            match requested {
                Some(requested) => requested.await,
                None => std::future::pending().await,
            }
        }
    }

    async fn retire(&mut self) {
        for slot in &mut self.slots {
            slot.retire().await;
        }
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        // One lease shared by several holders (`--mode shared`): its own list.
        if let [one] = self.slots.as_slice() {
            if let Some(shared) = one.slots() {
                return Some(shared);
            }
        }
        Some(self.picker.view())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statefulset_ordinal_picks_its_own_slot_and_other_names_spread() {
        assert_eq!(start_slot("web-0", 3), 0);
        assert_eq!(start_slot("web-4", 3), 1);
        assert_eq!(start_slot("anything", 1), 0);
        let picked: std::collections::HashSet<u32> = (0..40)
            .map(|k| start_slot(&format!("pod-{k}x"), 4))
            .collect();
        assert_eq!(
            picked.len(),
            4,
            "a hash of 40 names misses a slot: {picked:?}"
        );
    }

    #[test]
    fn slot_zero_is_the_election_itself_and_the_others_get_a_suffix() {
        assert_eq!(slot_election("e", 0), "e");
        assert_eq!(slot_election("e", 2), "e-2");
    }

    #[test]
    fn the_preference_goes_round_from_the_start() {
        assert_eq!(preference(2, 4), vec![2, 3, 0, 1]);
        assert_eq!(preference(0, 1), vec![0]);
    }

    fn held_by(who: &str, token: u64) -> Result<Campaign, BackendError> {
        Ok(Campaign::Held(Some(Holder {
            identity: who.into(),
            token: Some(token),
        })))
    }

    fn acquired(token: u64) -> Result<Campaign, BackendError> {
        Ok(Campaign::Acquired { token })
    }

    fn failed() -> Result<Campaign, BackendError> {
        Err(BackendError::Store {
            op: "campaign",
            message: "down".into(),
        })
    }

    /// web-1 of 3 slots starts at slot 1: a first round asks every slot from there;
    /// answered, a round asks only what changed since.
    #[test]
    fn a_round_asks_from_the_own_slot_then_only_what_changed() {
        let mut p = Picker::new(3, "web-1");
        assert_eq!(p.round(), vec![1, 2, 0]);
        for (i, who) in [(1, "a"), (2, "b"), (0, "c")] {
            p.asking(i);
            assert!(!p.answered(i, &held_by(who, 1)));
        }
        assert!(!p.must_ask());
        // Nothing marked: a round (after a timer, say) asks them all again.
        assert_eq!(p.round(), vec![1, 2, 0]);
        p.changed(0, false);
        assert!(p.must_ask());
        assert_eq!(p.round(), vec![0]);
        // A failed answer leaves its slot to be asked again.
        p.asking(0);
        assert!(!p.answered(0, &failed()));
        assert_eq!(p.round(), vec![0]);
        assert_eq!(p.first_holder().map(|h| h.identity), Some("a".to_owned()));
    }

    /// "Changed" at the end of a wait's time marks every slot: the others' waits end
    /// with it, unheard.
    #[test]
    fn changed_when_the_time_is_up_marks_every_slot() {
        let mut p = Picker::new(3, "x-0");
        for i in p.round() {
            p.asking(i);
            p.answered(i, &held_by("h", 1));
        }
        p.changed(2, false);
        assert_eq!(p.round(), vec![2]);
        p.asking(2);
        p.answered(2, &held_by("h", 1));
        p.changed(2, true);
        assert_eq!(p.round(), vec![0, 1, 2]);
    }

    /// Taking a slot: held, reported as ours, every other slot to withdraw from (and
    /// asked again afterwards); a campaign cut off is asked first next round.
    #[test]
    fn a_taken_slot_is_held_and_every_other_is_left() {
        let mut p = Picker::new(3, "x-0");
        p.asking(0);
        p.answered(0, &held_by("h", 4));
        p.asking(1);
        assert!(p.answered(1, &acquired(9)));
        assert_eq!(p.held(), Some(1));
        let mut left = Vec::new();
        while let Some(j) = p.to_withdraw() {
            left.push(j);
            p.withdrawn(j);
        }
        left.sort();
        assert_eq!(left, vec![0, 2]);
        assert!(
            p.must_ask(),
            "the slots left are asked again after the tenure"
        );
        let v = p.view();
        assert_eq!((v.count, v.own), (3, Some(1)));
        assert!(v
            .list
            .iter()
            .any(|s| s.slot == 1 && s.holder.identity == "x-0"));
        // A renew says lost: nothing held; a cut-off campaign of slot 2 comes first.
        p.lost();
        assert_eq!(p.held(), None);
        p.asking(2);
        assert_eq!(p.round()[0], 2);
    }

    /// A release lets go of the held slot first, then of every other (a follower's
    /// places in the queues too), and holds nothing after.
    #[test]
    fn a_release_lets_go_of_the_held_slot_first_then_of_all() {
        let mut p = Picker::new(3, "x-0");
        p.asking(2);
        p.answered(2, &acquired(1));
        assert_eq!(p.release_order(), (Some(2), vec![0, 1]));
        assert_eq!(p.held(), None);
        assert_eq!(p.to_withdraw(), None);
        let mut follower = Picker::new(2, "y-1");
        assert_eq!(follower.release_order(), (None, vec![0, 1]));
    }

    #[test]
    fn the_hash_ranges_tile_the_space() {
        use crate::status::hash_range;
        assert_eq!(hash_range(0, 1), (0, 1u128 << 64));
        let mut at = 0;
        for s in 0..7 {
            let (start, end) = hash_range(s, 7);
            assert_eq!(start, at);
            assert!(end > start);
            at = end;
        }
        assert_eq!(at, 1u128 << 64);
    }
}
