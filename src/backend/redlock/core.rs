//! The `redlock` campaign as a state machine: one explicit [`Phase`] (what this
//! candidate follows, waits beside or holds), moved on by the nodes' answers, and the
//! decisions taken from it: what a take round's answers add up to
//! ([`Core::after_take`] -> [`Look`]: a tenure at once, confirm, give back, follow),
//! whether the take round made a tenure by itself ([`Core::took`]) or a confirm round
//! made one ([`Core::confirmed`]), whom a look follows and when it looks
//! again ([`Core::follow`]), an announcement ([`Core::on_notice`],
//! [`Core::follow_announced`]), how a wait goes on and what a push means to it (see
//! [`wait`]), and a renew round's verdict ([`Core::after_renew_round`],
//! [`Core::renewed`]). No I/O and no clock: `now` is an argument.
//! [`super::RedlockTransport`] does the I/O and asks this core what to do with each
//! answer.
//!
//! Invariants kept here:
//! - a tenure exists only once a majority of trusted nodes confirmed it (their takes
//!   wrote one and the same token, or a confirm round wrote it), with a token above
//!   every token seen (`floor`), and the floor never goes down;
//! - a follower takes no announcement older than a token it knows, and a holder
//!   follows none;
//! - a failed campaign gives back on every node that took and every node that did not
//!   answer, and announces the give-back only for a value taken on a majority;
//! - a follower sends nothing while the holder's renewals come at their cadence from
//!   all but a minority of the nodes it follows the holder on, and looks when they do
//!   not (see [`super::handover`]); one kept out by shared holders looks once all but a
//!   minority of its nodes went a ttl without a change (see [`super::rw`]);
//! - a holder's watch of its own record loses the tenure only once the nodes that said
//!   "not ours" leave no majority (see [`super::own`]).

use std::time::Duration;

use redis::PushKind;
use tokio::time::Instant;

use super::own::OwnNode;
use super::rules::{
    after_ms, catch_up_targets, confirmed_by_majority, highest_token, lost, most_seen, quorum,
    renew_verdict, retry_in, token_of_take, Look, Renewed, Round, Take, Tally, SPARE, TRUSTED,
};
use crate::backend::redis::{announced_holder, Cadence};
use crate::backend::token_floor::TokenFloor;
use crate::backend::{Renewal, Wake};
use crate::status::{FencingToken, Holder};

mod wait;
pub(super) use self::wait::{on_timer, Heard, WaitFor};

/// A follower's knowledge of the holder a majority of nodes named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Follow {
    /// The holder's value (an announcement of it is nothing new).
    pub(super) value: String,
    /// Per node that holds it: the last sign of the holder there (the look's read, the
    /// announcement, or a renewal pushed since).
    pub(super) signs: Vec<Option<Instant>>,
    /// Per such node, when its key expires unless renewed, as the look found it, or a
    /// ttl after the last renewal pushed (unknown after an announcement).
    pub(super) expires: Vec<Option<Instant>>,
}

/// This candidate's tenure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tenure {
    /// Our full value on the nodes: `<nonce>|<token>|<identity>`.
    pub(super) value: String,
    /// Whether followers still need to hear of us: from the confirm until a majority
    /// of nodes took the announcement (an exclusive tenure only, see [`super::rw`]).
    pub(super) announce: bool,
    /// The watch of our own record, per node (see [`super::own`]).
    pub(super) own: Vec<OwnNode>,
}

/// What this candidate follows, waits beside or holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum Phase {
    /// Nothing to follow: no look yet, a split vote, too few nodes, or after a tenure.
    /// A wait hears the notices only.
    #[default]
    Idle,
    /// Following the holder a majority named (a look or an announcement).
    Following(Follow),
    /// Kept out by shared holders: per node whose trusted answer said so, the last
    /// sign of them there (the look's read, or a change of the readers' set pushed).
    KeptOut(Vec<Option<Instant>>),
    /// Holding a confirmed tenure.
    Leading(Tenure),
}

/// Known-wrong rules, each a switch the simulator turns on to show that it catches the
/// rule broken (`tests/suite/elector_sim.rs`); every one is off in the product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flaws {
    /// Half the nodes (rounded down) count as a majority: with 3 nodes, one.
    pub minority_quorum: bool,
}

/// The campaign's state: the phase, the tracking per node, the highest token seen, an
/// announcement heard during a wait, and when a follower without pushes looks.
#[derive(Clone, Debug)]
pub(super) struct Core {
    pub(super) phase: Phase,
    /// Whether `CLIENT TRACKING` is on for each node's current connection.
    pub(super) tracking: Vec<bool>,
    /// The highest token seen; new tokens go above it.
    pub(super) floor: TokenFloor,
    /// An announced new holder (`<value>`) the next campaign follows without a request.
    pub(super) announced: Option<String>,
    /// When a follower that follows nothing by pushes looks at the latest (used once).
    pub(super) hint: Option<Instant>,
    ttl: Duration,
    cadence: Cadence,
    /// Off in the product.
    pub(super) flaws: Flaws,
}

impl Core {
    pub(super) fn new(nodes: usize, ttl: Duration, renew_interval: Duration) -> Core {
        Core {
            phase: Phase::Idle,
            tracking: vec![false; nodes],
            floor: TokenFloor::default(),
            announced: None,
            hint: None,
            ttl,
            cadence: Cadence {
                ttl,
                renew_interval,
            },
            flaws: Flaws::default(),
        }
    }

    fn nodes(&self) -> usize {
        self.tracking.len()
    }

    pub(super) fn quorum(&self) -> usize {
        match self.flaws.minority_quorum {
            true => self.nodes() / 2,
            false => quorum(self.nodes()),
        }
    }

    /// Our tenure's value, while we hold.
    pub(super) fn value(&self) -> Option<&str> {
        match &self.phase {
            Phase::Leading(t) => Some(&t.value),
            _ => None,
        }
    }

    /// Whether a wait arms the baton (a follower's; a holder waits for none).
    pub(super) fn arms_baton(&self) -> bool {
        !matches!(self.phase, Phase::Leading(_))
    }

    /// Per node, whether the phase follows someone there (the holder, or the shared
    /// holders).
    pub(super) fn holds(&self) -> Vec<bool> {
        match &self.phase {
            Phase::Following(f) => f.signs.iter().map(Option::is_some).collect(),
            Phase::KeptOut(signs) => signs.iter().map(Option::is_some).collect(),
            Phase::Idle | Phase::Leading(_) => vec![false; self.nodes()],
        }
    }

    /// Whether a follower's wait reads node `i`'s pushes itself (followed and tracked).
    pub(super) fn watches(&self, i: usize) -> bool {
        self.holds()[i] && self.tracking[i]
    }

    /// Node `i`'s connection was lost (its disconnect notice, heard at `now`): its
    /// tracking went with it, and so did what it showed of the holder and of our own
    /// record.
    pub(super) fn disconnected(&mut self, i: usize, now: Instant) {
        self.tracking[i] = false;
        match &mut self.phase {
            Phase::Following(f) => f.signs[i] = None,
            Phase::Leading(t) => {
                t.own[i].on_push(&PushKind::Disconnection, now);
            }
            Phase::Idle | Phase::KeptOut(_) => {}
        }
    }

    /// A campaign with an announced holder (heard before `now`) follows it without a
    /// request, on every node; `None`: nothing announced, a value that names nobody or
    /// an older tenure, or we hold.
    pub(super) fn follow_announced(&mut self, now: Instant) -> Option<Holder> {
        let value = self.announced.take()?;
        let holder = announced_holder(&value, self.floor.get())?;
        if self.value().is_some() {
            return None;
        }
        self.floor.raise_all(holder.token);
        let n = self.nodes();
        self.phase = Phase::Following(Follow {
            value,
            signs: vec![Some(now); n],
            expires: vec![None; n],
        });
        self.hint = Some(now + self.ttl + SPARE);
        Some(holder)
    }

    /// A look begins: what was followed by pushes is of the wait before it (the value
    /// followed stays, for the announcements, until the look says otherwise).
    pub(super) fn begin(&mut self) {
        match &mut self.phase {
            Phase::Following(f) => {
                f.signs.fill(None);
                f.expires.fill(None);
            }
            Phase::KeptOut(_) => self.phase = Phase::Idle,
            Phase::Idle | Phase::Leading(_) => {}
        }
    }

    /// A take round answered: the tokens it showed raise the floor; the nodes it
    /// catches up and the count.
    pub(super) fn after_take(&mut self, answers: &Round<Take>) -> Look {
        let before = self.floor.get();
        self.floor.raise(highest_token(answers));
        let states: Vec<Option<(i64, &str)>> = answers
            .iter()
            .map(|a| a.as_ref().map(|a| (a.state, a.run_id.as_str())))
            .collect();
        let targets = catch_up_targets(self.quorum(), &states);
        let tally = Tally::of(answers, &targets);
        let token = token_of_take(answers, &targets, before);
        Look {
            targets,
            tally,
            token,
        }
    }

    /// A take round (`answers`, counted as `look`) that made a tenure by itself: a
    /// majority of counted nodes took with one token (see
    /// [`token_of_take`](super::rules::token_of_take)), announced to followers when
    /// `announce`. The token; `None`: the confirm round decides.
    pub(super) fn took(
        &mut self,
        answers: &Round<Take>,
        look: &Look,
        announce: bool,
    ) -> Option<FencingToken> {
        let token = look.token.filter(|_| look.wins(self.quorum()))?;
        let value = answers.iter().flatten().find(|a| a.won)?.value.clone();
        self.lead(token, value, announce);
        Some(token)
    }

    /// The token a confirm writes: one above every token seen.
    pub(super) fn next_token(&self) -> FencingToken {
        self.floor.next()
    }

    /// A confirm round of `token` in `value` answered: a tenure when a majority of
    /// trusted nodes confirmed it (announced to followers when `announce`).
    pub(super) fn confirmed(
        &mut self,
        confirmed: &[Option<(i64, i64)>],
        token: FencingToken,
        value: String,
        announce: bool,
    ) -> bool {
        if !confirmed_by_majority(self.quorum(), confirmed) {
            return false;
        }
        self.lead(token, value, announce);
        true
    }

    /// A tenure of `token` in `value` begins (announced to followers when `announce`).
    fn lead(&mut self, token: FencingToken, value: String, announce: bool) {
        self.floor.raise(token);
        let track = OwnNode {
            track: true,
            ..OwnNode::default()
        };
        self.phase = Phase::Leading(Tenure {
            value,
            announce,
            own: vec![track; self.nodes()],
        });
        self.hint = None;
    }

    /// A look that made no tenure (`read_at`: its send time; `now`): follows the holder
    /// a majority named on the nodes that hold it, or waits beside the shared holders,
    /// or nobody; and when to look again by itself (`split`: a split vote's short
    /// random delay). The holder, if any.
    pub(super) fn follow(
        &mut self,
        answers: &Round<Take>,
        tally: &Tally,
        read_at: Instant,
        now: Instant,
        split: impl FnOnce() -> Duration,
    ) -> Option<Holder> {
        let q = self.quorum();
        let holder = tally.majority_holder(q);
        self.phase = match &holder {
            Some((value, _)) => Phase::Following(follow_on(answers, value, read_at)),
            None => kept_out(answers, read_at),
        };
        // A value on fewer than a majority of the nodes that answered may still be on
        // a majority of all of them (a node we cannot reach holds it too): not a split
        // vote, so no quick retry while the holder lives, only at its expiry.
        let unanswered = answers.len() - tally.answered;
        let maybe_held = most_seen(&tally.seen).is_some_and(|(_, n)| n + unanswered >= q);
        let retry_in = retry_in(holder.is_some(), maybe_held, tally, q, self.ttl, split);
        self.hint = retry_in.map(|d| now + d);
        holder.map(|(_, h)| h)
    }

    /// A wake-up of the listeners or the baton waiter: a request to look (`look`), or
    /// else the latest announcement (`latest`): `Changed`, and the next campaign looks
    /// or follows the announced holder. `None`: nothing new (an announcement of the
    /// holder already followed, or while we hold).
    pub(super) fn on_notice(&mut self, look: bool, latest: Option<String>) -> Option<Wake> {
        if look {
            self.announced = None;
            return Some(Wake::Changed);
        }
        let value = latest?;
        let followed = matches!(&self.phase, Phase::Following(f) if f.value == value);
        if self.value().is_some() || followed {
            return None;
        }
        self.announced = Some(value);
        Some(Wake::Changed)
    }

    /// Our tenure ends (a release, or a give-back anywhere, which drops our nonce).
    /// Whether we held one.
    pub(super) fn drop_tenure(&mut self) -> bool {
        let led = self.value().is_some();
        if led {
            self.phase = Phase::Idle;
        }
        led
    }

    /// The tenure's announcement, while followers still need it.
    pub(super) fn to_announce(&self) -> Option<&str> {
        match &self.phase {
            Phase::Leading(t) if t.announce => Some(&t.value),
            _ => None,
        }
    }

    /// A majority of nodes took the announcement.
    pub(super) fn announced_sent(&mut self) {
        if let Phase::Leading(t) = &mut self.phase {
            t.announce = false;
        }
    }

    /// A renew round answered: its counters raise the floor; the nodes it may catch up
    /// (by the `run_id` seen there), when what it read covers every confirmed tenure.
    pub(super) fn after_renew_round(&mut self, answers: &Round<Renewed>) -> Vec<Option<String>> {
        self.floor
            .raise_all(answers.iter().flatten().map(|(_, _, fence, ..)| *fence));
        let states: Vec<Option<(i64, &str)>> = answers
            .iter()
            .map(|a| {
                a.as_ref()
                    .map(|(_, state, _, run_id, _)| (*state, run_id.as_str()))
            })
            .collect();
        catch_up_targets(self.quorum(), &states)
    }

    /// What the renew round (done by `now`) proves (see
    /// [`renew_verdict`](super::rules::renew_verdict)), and what it tells the watch of
    /// our own record per node. `Err`: how many trusted nodes said yes.
    pub(super) fn renewed(
        &mut self,
        answers: &Round<Renewed>,
        now: Instant,
    ) -> Result<Renewal, usize> {
        if let Phase::Leading(t) = &mut self.phase {
            for (node, answer) in t.own.iter_mut().zip(answers) {
                node.renewed(answer.as_ref().map(|r| r.0 == 1), now);
            }
        }
        let seen: Vec<Option<(i64, i64)>> = answers
            .iter()
            .map(|a| a.as_ref().map(|(ours, state, ..)| (*ours, *state)))
            .collect();
        renew_verdict(&seen)
    }

    /// The watch of our own record, per node (empty unless we hold).
    pub(super) fn own(&self) -> &[OwnNode] {
        match &self.phase {
            Phase::Leading(t) => &t.own,
            _ => &[],
        }
    }

    /// A push from node `i` to a holder's watch, heard at `now` (a lost connection
    /// also ends that node's tracking).
    pub(super) fn on_own_push(&mut self, i: usize, kind: &PushKind, now: Instant) {
        if *kind == PushKind::Disconnection {
            self.disconnected(i, now);
        } else if let Phase::Leading(t) = &mut self.phase {
            t.own[i].on_push(kind, now);
        }
    }

    /// One look at node `i` for the watch (`still_ours`: what its read found, `None`:
    /// no answer), which also turned our tracking on there if it was to.
    pub(super) fn own_looked(&mut self, i: usize, still_ours: Option<bool>) {
        let Phase::Leading(t) = &mut self.phase else {
            return;
        };
        let node = &mut t.own[i];
        if node.track {
            // Tried: again at a lost connection or after the next renewal.
            node.track = false;
            node.tracked = still_ours.is_some();
            self.tracking[i] = false;
        }
        if let Some(ours) = still_ours {
            node.look = false;
            node.gone |= !ours;
        }
    }

    /// How many nodes said our record is not ours, once they leave no majority.
    pub(super) fn own_lost(&self) -> Option<usize> {
        let gone = self.own().iter().filter(|n| n.gone).count();
        (self.value().is_some() && lost(gone, self.nodes())).then_some(gone)
    }
}

/// The nodes that hold the holder's `value`, as a look read at `read_at` found them.
fn follow_on(answers: &Round<Take>, value: &str, read_at: Instant) -> Follow {
    let mut f = Follow {
        value: value.to_owned(),
        signs: vec![None; answers.len()],
        expires: vec![None; answers.len()],
    };
    for (i, a) in answers.iter().enumerate() {
        let Some(a) = a else { continue };
        if !a.won && a.value == value {
            f.signs[i] = Some(read_at);
            f.expires[i] = (a.pttl > 0).then(|| read_at + after_ms(a.pttl));
        }
    }
    f
}

/// Kept out by the shared holders on the nodes whose trusted answer said so, or
/// nothing to follow.
fn kept_out(answers: &Round<Take>, read_at: Instant) -> Phase {
    let signs: Vec<Option<Instant>> = answers
        .iter()
        .map(|a| {
            a.as_ref()
                .is_some_and(|a| a.beside_shared && a.state == TRUSTED)
                .then_some(read_at)
        })
        .collect();
    match signs.iter().any(Option::is_some) {
        true => Phase::KeptOut(signs),
        false => Phase::Idle,
    }
}

#[cfg(test)]
mod tests {
    use super::super::rules::tests::take;
    use super::super::rules::{SETTLING, STALE};
    use super::*;

    pub(super) const TTL: Duration = Duration::from_millis(3_000);

    pub(super) fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A candidate over three nodes, tracking on all (ttl 3 s, renewals every second).
    pub(super) fn core() -> Core {
        let mut c = Core::new(3, TTL, ms(1_000));
        c.tracking.fill(true);
        c
    }

    fn never() -> Duration {
        panic!("no split vote here")
    }

    /// A look at `answers` that made no tenure, read at `t0`, answered at `t0 + 4 ms`.
    fn looked(c: &mut Core, answers: &Round<Take>, t0: Instant) -> Option<Holder> {
        let look = c.after_take(answers);
        c.follow(answers, &look.tally, t0, t0 + ms(4), || ms(10))
    }

    #[test]
    fn a_tenure_needs_a_counted_majority_and_a_token_above_every_one_seen() {
        let mut c = core();
        let mut answers = vec![
            take(true, "n|pending|me", TRUSTED),
            take(true, "n|pending|me", SETTLING),
            take(false, "o|4|other", STALE),
        ];
        if let Some(a) = answers[1].as_mut() {
            a.fence = 6;
        }
        let look = c.after_take(&answers);
        assert_eq!(
            c.floor.get(),
            6,
            "a settling node's counter is a token seen"
        );
        assert!(!look.wins(c.quorum()), "a settling node's take is no vote");
        answers[1] = take(true, "n|pending|me", TRUSTED);
        let look = c.after_take(&answers);
        assert!(look.wins(c.quorum()));
        assert_eq!(c.next_token(), 7);
        let (yes, stale) = (Some((1, TRUSTED)), Some((1, STALE)));
        assert!(!c.confirmed(&[yes, stale, None], 7, "n|7|me".into(), true));
        assert_eq!(c.phase, Phase::Idle, "a tenure from one trusted confirm");
        assert_eq!(c.floor.get(), 6);
        assert!(c.confirmed(&[yes, yes, None], 7, "n|7|me".into(), true));
        assert_eq!(
            (c.value(), c.floor.get(), c.hint),
            (Some("n|7|me"), 7, None)
        );
        assert_eq!(c.to_announce(), Some("n|7|me"));
        assert!(
            c.own().iter().all(|n| n.track),
            "the watch starts everywhere"
        );
        c.announced_sent();
        assert_eq!(c.to_announce(), None);
        // A shared tenure announces nothing.
        let mut c = core();
        assert!(c.confirmed(&[yes, yes, yes], 1, "n|1|r".into(), false));
        assert_eq!(c.to_announce(), None);
    }

    #[test]
    fn a_take_round_with_one_token_on_a_counted_majority_is_a_tenure() {
        let mut c = core();
        c.floor.raise(5);
        let took = |value: &str, state| {
            let mut a = take(true, value, state)?;
            a.fence = 6;
            Some(a)
        };
        let answers = vec![
            took("n|6|me", TRUSTED),
            took("n|6|me", TRUSTED),
            take(false, "o|5|other", TRUSTED),
        ];
        let look = c.after_take(&answers);
        assert_eq!(look.token, Some(6));
        assert_eq!(c.took(&answers, &look, true), Some(6));
        assert_eq!((c.value(), c.floor.get()), (Some("n|6|me"), 6));
        assert_eq!(c.to_announce(), Some("n|6|me"));
        // One of the two does not count: the confirm round decides.
        let mut c = core();
        let answers = vec![
            took("n|6|me", TRUSTED),
            took("n|6|me", SETTLING),
            take(false, "o|5|other", TRUSTED),
        ];
        let look = c.after_take(&answers);
        assert_eq!(c.took(&answers, &look, true), None);
        assert_eq!(c.phase, Phase::Idle);
        // Tokens that differ: the confirm goes above both.
        let mut c = core();
        let mut answers = vec![took("n|6|me", TRUSTED), took("n|7|me", TRUSTED), None];
        if let Some(a) = answers[1].as_mut() {
            a.fence = 7;
        }
        let look = c.after_take(&answers);
        assert!(look.wins(c.quorum()));
        assert_eq!(c.took(&answers, &look, true), None);
        assert_eq!((c.phase.clone(), c.next_token()), (Phase::Idle, 8));
    }

    #[test]
    fn a_look_follows_the_majority_holder_on_the_nodes_that_hold_it() {
        let mut c = core();
        let t0 = Instant::now();
        let answers = vec![
            take(false, "o|5|other", TRUSTED),
            take(false, "o|5|other", TRUSTED),
            take(false, "p|4|third", TRUSTED),
        ];
        let holder = looked(&mut c, &answers, t0).expect("a holder");
        assert_eq!((holder.identity.as_str(), holder.token), ("other", Some(5)));
        let Phase::Following(f) = &c.phase else {
            panic!("not following: {:?}", c.phase)
        };
        assert_eq!(f.value, "o|5|other");
        assert_eq!(f.signs, vec![Some(t0), Some(t0), None]);
        assert_eq!(f.expires[0], Some(t0 + ms(902)));
        assert_eq!(
            c.hint,
            Some(t0 + ms(4) + ms(902)),
            "looks at the soonest expiry"
        );
        assert_eq!(c.floor.get(), 5);
        // Due when the second of its two nodes is due: the read's expiry, 902 ms.
        let due = t0 + ms(902);
        let want = WaitFor::Renewals {
            watched: vec![0, 1],
            due,
        };
        assert_eq!(c.wait(&c.holds(), t0), want);
        // A split vote retries after the short random delay; too few that count, once
        // the first restarted node has settled.
        let split = vec![
            take(false, "o|5|a", TRUSTED),
            take(false, "p|6|b", TRUSTED),
            None,
        ];
        let mut c = core();
        let look = c.after_take(&split);
        assert_eq!(c.follow(&split, &look.tally, t0, t0, || ms(10)), None);
        assert_eq!(
            (c.hint, c.phase.clone()),
            (Some(t0 + ms(902)), Phase::Idle),
            "a value on 1 of 2 answered may be on a majority"
        );
        let few = vec![
            take(false, "", SETTLING),
            take(false, "o|5|a", TRUSTED),
            None,
        ];
        let look = c.after_take(&few);
        c.follow(&few, &look.tally, t0, t0, never);
        assert_eq!(c.hint, Some(t0 + ms(902)), "the soonest expiry first");
        let mut few = few;
        for a in few.iter_mut().flatten() {
            a.pttl = -2;
        }
        let look = c.after_take(&few);
        c.follow(&few, &look.tally, t0, t0, never);
        assert_eq!(c.hint, Some(t0 + ms(402)), "the first settled node");
        let tied = vec![
            take(false, "o|5|a", TRUSTED),
            take(false, "p|6|b", TRUSTED),
            take(false, "", TRUSTED),
        ];
        let look = c.after_take(&tied);
        c.follow(&tied, &look.tally, t0, t0, || ms(17));
        assert_eq!(c.hint, Some(t0 + ms(17)), "a split vote of all three");
    }

    #[test]
    fn an_announcement_is_news_to_a_follower_of_another_holder_only() {
        let mut c = core();
        let t0 = Instant::now();
        c.floor.raise(6);
        assert_eq!(
            c.on_notice(false, Some("o|5|old".into())),
            Some(Wake::Changed)
        );
        assert_eq!(c.follow_announced(t0), None, "an older tenure followed");
        assert_eq!(
            c.on_notice(false, Some("o|7|new".into())),
            Some(Wake::Changed)
        );
        assert!(c.follow_announced(t0).is_some());
        assert_eq!(c.floor.get(), 7);
        assert_eq!(
            c.on_notice(false, Some("o|7|new".into())),
            None,
            "the holder followed"
        );
        assert_eq!(c.on_notice(false, None), None);
        assert_eq!(c.on_notice(true, Some("o|8|x".into())), Some(Wake::Changed));
        assert_eq!(c.announced, None, "a look takes no announcement");
        // A look begins: the value followed stays, the signs go.
        c.begin();
        assert_eq!(c.holds(), vec![false; 3]);
        assert_eq!(c.on_notice(false, Some("o|7|new".into())), None);
        // A holder follows nobody.
        assert!(c.confirmed(&[Some((1, TRUSTED)); 3], 9, "n|9|me".into(), true));
        assert_eq!(c.on_notice(false, Some("o|10|y".into())), None);
        c.announced = Some("o|10|y".into());
        assert_eq!(c.follow_announced(t0), None);
        assert!(c.drop_tenure());
        assert_eq!(c.phase, Phase::Idle);
        assert!(!c.drop_tenure());
    }

    #[test]
    fn a_renew_round_raises_the_floor_catches_up_and_watches_our_record() {
        let mut c = core();
        let t0 = Instant::now();
        assert!(c.confirmed(&[Some((1, TRUSTED)); 3], 4, "n|4|me".into(), true));
        let renewed = |ours, state, fence: u64, run_id: &str| {
            Some((ours, state, fence, run_id.to_owned(), 0))
        };
        let answers = vec![
            renewed(1, TRUSTED, 4, "a"),
            renewed(1, TRUSTED, 9, "b"),
            renewed(1, STALE, 0, "c"),
        ];
        assert_eq!(
            c.after_renew_round(&answers),
            vec![None, None, Some("c".into())]
        );
        assert_eq!(c.floor.get(), 9);
        assert_eq!(c.renewed(&answers, t0), Ok(Renewal::Renewed));
        assert_eq!(
            c.own()[0].own_push_until,
            Some(t0 + crate::backend::redis::OWN_PUSH_WINDOW)
        );
        let answers = vec![
            renewed(1, TRUSTED, 9, "a"),
            renewed(0, TRUSTED, 9, "b"),
            None,
        ];
        assert_eq!(c.renewed(&answers, t0), Err(1));
        assert!(c.own()[1].gone);
        assert_eq!(c.own_lost(), None, "one node of three");
        c.own_looked(2, Some(false));
        assert_eq!(c.own_lost(), Some(2));
        // A lost connection: tracked again with a read.
        c.on_own_push(0, &PushKind::Disconnection, t0);
        assert!(c.own()[0].track && !c.tracking[0]);
    }
}
