//! Redlock's counting rules, as plain functions of the nodes' answers: the majority,
//! which restarted nodes a round may catch up, what a take round's answers add up to
//! ([`Tally`], [`Look`]: confirm, or give back where, and when to look again), whether
//! a confirm round made a tenure, what a renew round proves, and the holder a
//! majority names. [`super::core`] decides with them; no I/O here.

use std::time::Duration;

use crate::backend::redis::parse_value;
use crate::backend::Renewal;
use crate::status::{FencingToken, Holder};

/// Node states returned by the scripts (see `INCARNATION`): restarted less than a
/// ttl ago, settled but not caught up, trusted.
pub(super) const SETTLING: i64 = 0;
pub(super) const STALE: i64 = 1;
pub(super) const TRUSTED: i64 = 2;

/// One node's answer to phase 1 (the take).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Take {
    pub(super) won: bool,
    /// Kept out beside shared holders, `value` one of them (see [`super::rw`]).
    pub(super) beside_shared: bool,
    /// It came after its use-by and did nothing.
    pub(super) refused: bool,
    pub(super) value: String,
    pub(super) pttl: i64,
    pub(super) fence: FencingToken,
    pub(super) state: i64,
    pub(super) settle_ms: i64,
    pub(super) run_id: String,
    pub(super) store_ms: u64,
    /// The shared holders' members on the node, live (up to [`super::rw::SHOWN`]).
    pub(super) readers: Vec<String>,
}

/// One node's answer to a renewal: {ours (2: refused as late), state, fence, run_id,
/// store ms}.
pub(super) type Renewed = (i64, i64, FencingToken, String, u64);

/// Answers of one parallel round: one entry per node, `None` for no answer in time.
pub(super) type Round<T> = Vec<Option<T>>;

/// How many of `n` nodes make a majority: more than half (3 of 4, not 2).
pub(super) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The nodes one round may catch up, by the `run_id` it saw there: the settled
/// untrusted ones, when what the round read covers every confirmed tenure — a
/// majority (`quorum`) of trusted nodes answered, or every node answered and all
/// have been up for a ttl. `answers` holds (state, run_id) per node.
pub(super) fn catch_up_targets(
    quorum: usize,
    answers: &[Option<(i64, &str)>],
) -> Vec<Option<String>> {
    let trusted = answers
        .iter()
        .flatten()
        .filter(|(state, _)| *state == TRUSTED)
        .count();
    let all_settled = answers
        .iter()
        .all(|a| a.is_some_and(|(state, _)| state != SETTLING));
    let covered = trusted >= quorum || all_settled;
    answers
        .iter()
        .map(|a| match a {
            Some((STALE, run_id)) if covered => Some((*run_id).to_owned()),
            _ => None,
        })
        .collect()
}

/// Whether the nodes that did not say "not ours" (`gone` of `n`) can no longer make a
/// majority: the renewal's rule for a lost tenure. Silent nodes count as maybe ours.
pub(super) fn lost(gone: usize, n: usize) -> bool {
    n.saturating_sub(gone) < quorum(n)
}

/// What one renew round proves, from each node's (ours, state) answer (`None`: no
/// answer in time; ours 1: the node still held our value and extended it, 0: it holds
/// something else): renewed when a majority of *trusted* nodes extended our value (a
/// restarted node's yes proves nothing, DESIGN invariant 10); lost when so many nodes
/// hold something else that no majority can be ours again; otherwise unproven, with
/// how many trusted nodes said yes (`Err`).
pub(super) fn renew_verdict(answers: &[Option<(i64, i64)>]) -> Result<Renewal, usize> {
    let q = quorum(answers.len());
    let kept = answers
        .iter()
        .flatten()
        .filter(|(ours, state)| *ours == 1 && *state == TRUSTED)
        .count();
    let gone = answers
        .iter()
        .flatten()
        .filter(|(ours, _)| *ours == 0)
        .count();
    if kept >= q {
        Ok(Renewal::Renewed)
    } else if lost(gone, answers.len()) {
        Ok(Renewal::Lost)
    } else {
        Err(kept)
    }
}

/// Whether a campaign's confirm round made a tenure: a majority (`quorum`) of the
/// nodes confirmed our value while trusted (`(1, TRUSTED)`; a node that was caught up
/// in the same request counts as trusted).
pub(super) fn confirmed_by_majority(quorum: usize, confirmed: &[Option<(i64, i64)>]) -> bool {
    let yes = confirmed
        .iter()
        .filter(|c| **c == Some((1, TRUSTED)))
        .count();
    yes >= quorum
}

/// The value seen most often among `seen`, and how often (the first of equals).
pub(super) fn most_seen(seen: &[String]) -> Option<(&str, usize)> {
    let mut best: Option<(&str, usize)> = None;
    for v in seen {
        let n = seen.iter().filter(|s| *s == v).count();
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((v.as_str(), n));
        }
    }
    best
}

/// The holder a lock value names (`None`: nobody, as an empty value).
pub(super) fn named(value: &str) -> Option<Holder> {
    let parsed = parse_value(value);
    (!parsed.identity.is_empty()).then(|| Holder {
        identity: parsed.identity.to_owned(),
        token: parsed.token,
    })
}

/// The highest token in one take round's answers: every counter counts, trusted or
/// not, since a higher token is never wrong.
pub(super) fn highest_token(answers: &Round<Take>) -> FencingToken {
    let mut top = 0;
    for a in answers.iter().flatten() {
        top = top.max(a.fence);
        if let Some(t) = parse_value(&a.value).token {
            top = top.max(t);
        }
    }
    top
}

/// The token a take round made by itself, with no confirm round: every node we took
/// answered our value with one and the same token `t`, the round catches up no node
/// (`targets`), and `t` is above `floor` (the highest token seen before the round) and
/// at least every counter and token the round read. Each exclusive take writes its
/// node's next token into the counter and the value at once, while the lock is ours
/// there, so a majority holding `t` is a tenure confirmed with `t`. `None`: the
/// confirm round writes a token above all of them instead (a shared take's pending
/// member carries no token).
pub(super) fn token_of_take(
    answers: &Round<Take>,
    targets: &[Option<String>],
    floor: FencingToken,
) -> Option<FencingToken> {
    if targets.iter().any(Option::is_some) {
        return None;
    }
    let mut tokens = answers
        .iter()
        .flatten()
        .filter(|a| a.won)
        .map(|a| parse_value(&a.value).token);
    let t = tokens.next()??;
    let agreed = tokens.all(|other| other == Some(t));
    (agreed && t > floor && t >= highest_token(answers)).then_some(t)
}

/// One campaign's answers, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    pub(super) answered: usize,
    /// Nodes where our value was set.
    pub(super) taken: Vec<usize>,
    /// Of those, the ones that count (trusted, or caught up in this round).
    pub(super) counted_taken: usize,
    /// Nodes that count at all.
    pub(super) usable: usize,
    /// Nodes restarted less than a ttl ago.
    pub(super) settling: Vec<usize>,
    /// When the first settling node counts again, in ms.
    pub(super) settled_in: Option<u64>,
    /// The values trusted nodes hold (someone else's).
    pub(super) seen: Vec<String>,
    pub(super) soonest_expiry: Option<i64>,
    /// The shared holders trusted nodes named (see [`super::rw`]).
    pub(super) shared: Vec<String>,
}

impl Tally {
    /// The answers of a take round, with the nodes the same round catches up
    /// (`targets`, which count as trusted).
    pub(super) fn of(answers: &Round<Take>, targets: &[Option<String>]) -> Tally {
        let counts = |i: usize| {
            answers[i]
                .as_ref()
                .is_some_and(|a| a.state == TRUSTED || targets[i].is_some())
        };
        let mut t = Tally {
            answered: answers.iter().filter(|a| a.is_some()).count(),
            usable: (0..answers.len()).filter(|&i| counts(i)).count(),
            ..Tally::default()
        };
        for (i, answer) in answers.iter().enumerate() {
            let Some(a) = answer else {
                continue;
            };
            if a.state == SETTLING {
                t.settling.push(i);
                let ms = a.settle_ms.max(0) as u64;
                t.settled_in = Some(t.settled_in.map_or(ms, |s| s.min(ms)));
            }
            if a.won {
                t.taken.push(i);
                continue;
            }
            if a.state == TRUSTED && a.beside_shared {
                // Kept out by the shared holders: nobody holds the lock itself.
                t.seen.push(String::new());
                t.shared.push(a.value.clone());
            } else if a.state == TRUSTED {
                t.seen.push(a.value.clone());
            }
            if a.pttl > 0 {
                t.soonest_expiry = Some(t.soonest_expiry.map_or(a.pttl, |s| s.min(a.pttl)));
            }
        }
        t.counted_taken = t.taken.iter().filter(|&&i| counts(i)).count();
        t
    }

    /// A shared holder the trusted nodes named (the one named most), for a follower
    /// kept out by them: nobody holds the lock itself.
    pub(super) fn shared_holder(&self) -> Option<Holder> {
        let (value, _) = most_seen(&self.shared)?;
        named(value)
    }

    /// The holder a majority (`quorum`) of nodes agree on, with its value.
    pub(super) fn majority_holder(&self, quorum: usize) -> Option<(&str, Holder)> {
        let (value, _) = most_seen(&self.seen).filter(|(_, n)| *n >= quorum)?;
        Some((value, named(value)?))
    }
}

/// A little after a key's expiry: its push comes only once the server gets round to
/// expiring it.
pub(super) const SPARE: Duration = Duration::from_millis(2);

/// What a take round's answers add up to: the nodes it catches up (by the `run_id`
/// seen there), the count, and the token the takes made by themselves (see
/// [`token_of_take`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Look {
    pub(super) targets: Vec<Option<String>>,
    pub(super) tally: Tally,
    pub(super) token: Option<FencingToken>,
}

/// A failed campaign's give-back: the nodes to release on, and whether to announce it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct GiveBack {
    pub(super) release_on: Vec<bool>,
    pub(super) announce: bool,
}

impl Look {
    /// Whether a majority (`quorum`) of counted nodes took: confirm.
    pub(super) fn wins(&self, quorum: usize) -> bool {
        self.tally.counted_taken >= quorum
    }

    /// After a look that made no tenure: give back wherever the take may have acted
    /// (taken, or no answer: a slow link may still deliver it), and catch up in the
    /// same requests the nodes this round may catch up. Only a value taken on a
    /// majority of nodes that count can have been seen as the holder (a take that
    /// won and whose confirm failed): a node restarted less than a ttl ago is no vote
    /// for anyone, and a settled one not caught up counts for no round until a round
    /// may catch it up (the same coverage this round lacked). So only that give-back
    /// is announced: an announcement wakes every waiting candidate, the campaigner
    /// too, and one after each take on nodes that do not count would have them all
    /// campaign in a loop until the nodes settle. `None`: nothing to send.
    pub(super) fn give_back(&self, answers: &Round<Take>, quorum: usize) -> Option<GiveBack> {
        let release_on: Vec<bool> = (0..answers.len())
            .map(|i| answers[i].is_none() || self.tally.taken.contains(&i))
            .collect();
        let catches_up = self.targets.iter().any(Option::is_some);
        if !release_on.iter().any(|r| *r) && !catches_up {
            return None;
        }
        Some(GiveBack {
            release_on,
            announce: self.tally.counted_taken >= quorum,
        })
    }

    /// Too few of `n` nodes answered to know anything: the campaign's error message.
    pub(super) fn too_few_answered(&self, n: usize) -> Option<String> {
        let (answered, q) = (self.tally.answered, quorum(n));
        (answered < q).then(|| {
            format!("only {answered} of {n} redlock nodes answered; a majority of {q} is needed")
        })
    }
}

/// `pttl` ms and a little after.
pub(super) fn after_ms(pttl: i64) -> Duration {
    Duration::from_millis(pttl.max(0) as u64) + SPARE
}

/// When a look that made no tenure looks again by itself: at the soonest expiry while
/// a holder (or a value that may be held) lives, after a short random delay (`split`)
/// on a split vote, once the first restarted node has settled when too few count, or
/// never (the notices, the retry interval).
pub(super) fn retry_in(
    holder: bool,
    maybe_held: bool,
    tally: &Tally,
    quorum: usize,
    ttl: Duration,
    split: impl FnOnce() -> Duration,
) -> Option<Duration> {
    match (holder, tally.soonest_expiry) {
        (true, Some(pttl)) => Some(after_ms(pttl)),
        (true, None) => Some(ttl),
        (false, Some(pttl)) if maybe_held => Some(after_ms(pttl)),
        (false, _) if tally.usable >= quorum => Some(split()),
        (false, _) => tally.settled_in.map(|ms| Duration::from_millis(ms) + SPARE),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// What a take round's `answers` add up to.
    fn look_at(answers: &Round<Take>) -> Look {
        let states: Vec<Option<(i64, &str)>> = (answers.iter())
            .map(|a| a.as_ref().map(|a| (a.state, a.run_id.as_str())))
            .collect();
        let targets = catch_up_targets(quorum(answers.len()), &states);
        let tally = Tally::of(answers, &targets);
        let token = token_of_take(answers, &targets, 0);
        Look {
            targets,
            tally,
            token,
        }
    }

    fn targets(answers: &[Option<(i64, &str)>]) -> Vec<Option<String>> {
        catch_up_targets(answers.len() / 2 + 1, answers)
    }

    #[test]
    fn a_majority_of_trusted_nodes_vouches_for_a_settled_one() {
        let t = targets(&[
            Some((TRUSTED, "a")),
            Some((TRUSTED, "b")),
            Some((STALE, "c")),
        ]);
        assert_eq!(t, vec![None, None, Some("c".to_owned())]);
        // Even with a node silent or still settling.
        for other in [None, Some((SETTLING, "d"))] {
            let answers = [
                Some((TRUSTED, "a")),
                Some((STALE, "b")),
                Some((TRUSTED, "c")),
                other,
                Some((TRUSTED, "e")),
            ];
            let t = targets(&answers);
            assert_eq!(t, vec![None, Some("b".to_owned()), None, None, None]);
        }
    }

    #[test]
    fn without_a_trusted_majority_every_node_must_answer_settled() {
        // A fresh set of nodes (or all of them restarted): all answered, all settled.
        let t = targets(&[Some((STALE, "a")), Some((STALE, "b")), Some((TRUSTED, "c"))]);
        assert_eq!(t, vec![Some("a".to_owned()), Some("b".to_owned()), None]);
        // One silent: what the others hold may be older than what it holds.
        let t = targets(&[Some((STALE, "a")), None, Some((TRUSTED, "c"))]);
        assert_eq!(t, vec![None, None, None]);
        // One restarted less than a ttl ago: nobody is caught up from a minority.
        let t = targets(&[
            Some((STALE, "a")),
            Some((SETTLING, "b")),
            Some((TRUSTED, "c")),
        ]);
        assert_eq!(t, vec![None, None, None]);
    }

    #[test]
    fn a_majority_is_more_than_half_of_the_nodes() {
        assert_eq!(
            [1, 2, 3, 4, 5, 6, 7].map(quorum),
            [1, 2, 2, 3, 3, 4, 4],
            "n/2 would let two candidates hold 2 of 4 nodes each"
        );
    }

    #[test]
    fn a_renewal_counts_trusted_yes_answers_from_a_majority() {
        let yes = Some((1, TRUSTED));
        let no = Some((0, TRUSTED));
        let restarted = Some((1, STALE));
        assert_eq!(renew_verdict(&[yes, yes, None]), Ok(Renewal::Renewed));
        assert_eq!(renew_verdict(&[yes, yes, no, None]), Err(2), "2 of 4");
        assert_eq!(renew_verdict(&[yes, yes, yes, None]), Ok(Renewal::Renewed));
        // A restarted node's yes is no vote, settled or not.
        assert_eq!(renew_verdict(&[yes, restarted, None]), Err(1));
        assert_eq!(
            renew_verdict(&[yes, Some((1, SETTLING)), Some((1, STALE))]),
            Err(1)
        );
        // Lost once no majority can be ours again; silence is no "no".
        assert_eq!(renew_verdict(&[yes, no, no]), Ok(Renewal::Lost));
        assert_eq!(renew_verdict(&[yes, no, None]), Err(1));
        assert_eq!(renew_verdict(&[yes, yes, no, no]), Ok(Renewal::Lost));
        assert_eq!(renew_verdict(&[yes, yes, no, None, None]), Err(2));
        assert_eq!(renew_verdict(&[yes, yes, no, no, no]), Ok(Renewal::Lost));
    }

    #[test]
    fn lost_once_the_rest_cannot_make_a_majority() {
        assert!(!lost(0, 3));
        assert!(!lost(1, 3), "a minority changed is no loss");
        assert!(lost(2, 3));
        assert!(!lost(1, 4));
        assert!(lost(2, 4), "2 of 4 left are no majority of 4");
        assert!(!lost(2, 5));
        assert!(lost(3, 5));
    }

    #[test]
    fn a_tenure_needs_a_trusted_majority_of_confirms() {
        let yes = Some((1, TRUSTED));
        assert!(confirmed_by_majority(quorum(3), &[yes, yes, None]));
        assert!(!confirmed_by_majority(
            quorum(3),
            &[yes, Some((1, STALE)), None]
        ));
        assert!(!confirmed_by_majority(
            quorum(3),
            &[yes, Some((0, TRUSTED)), None]
        ));
        assert!(!confirmed_by_majority(quorum(4), &[yes, yes, None, None]));
        assert!(confirmed_by_majority(quorum(4), &[yes, yes, yes, None]));
    }

    pub(in crate::backend::redlock) fn take(won: bool, value: &str, state: i64) -> Option<Take> {
        Some(Take {
            won,
            beside_shared: false,
            refused: false,
            value: value.to_owned(),
            pttl: if won { -1 } else { 900 },
            fence: 0,
            state,
            settle_ms: if state == SETTLING { 400 } else { 0 },
            run_id: String::new(),
            store_ms: 0,
            readers: Vec::new(),
        })
    }

    /// A take that wrote `value` (with its token in the node's counter too).
    fn took(value: &str) -> Option<Take> {
        let mut t = take(true, value, TRUSTED)?;
        t.fence = parse_value(value).token.unwrap_or(0);
        Some(t)
    }

    #[test]
    fn a_take_round_makes_its_token_only_when_every_take_agrees_above_all_seen() {
        let none = [None, None, None];
        let mut answers = vec![
            took("n|7|me"),
            took("n|7|me"),
            take(false, "o|6|x", TRUSTED),
        ];
        if let Some(a) = answers[2].as_mut() {
            a.fence = 6;
        }
        assert_eq!(token_of_take(&answers, &none, 6), Some(7));
        assert_eq!(
            token_of_take(&answers, &none, 7),
            None,
            "not above the floor"
        );
        let caught_up = [None, None, Some("r".to_owned())];
        assert_eq!(
            token_of_take(&answers, &caught_up, 6),
            None,
            "a node to catch up needs the confirm"
        );
        let mut disagree = answers.clone();
        disagree[1] = took("n|8|me");
        assert_eq!(token_of_take(&disagree, &none, 6), None, "two tokens");
        // The higher first: a later tenure that shares only the node of 7 with this
        // majority could make 8 again.
        disagree.swap(0, 1);
        assert_eq!(token_of_take(&disagree, &none, 6), None, "the higher first");
        let mut higher = answers.clone();
        if let Some(a) = higher[2].as_mut() {
            a.fence = 7;
            a.value = "o|8|x".into();
        }
        assert_eq!(token_of_take(&higher, &none, 6), None, "a token above ours");
        let pending = vec![took("n|pending|me"), took("n|pending|me"), None];
        assert_eq!(token_of_take(&pending, &none, 0), None, "a shared take");
        let held = vec![take(false, "o|6|x", TRUSTED), None, None];
        assert_eq!(token_of_take(&held, &none, 0), None, "nothing taken");
    }

    #[test]
    fn a_campaign_counts_only_trusted_or_caught_up_nodes() {
        // Taken on a settling node and a trusted one: one vote.
        let answers = vec![
            take(true, "n|pending|me", SETTLING),
            take(true, "n|pending|me", TRUSTED),
            take(false, "o|3|other", TRUSTED),
        ];
        let t = Tally::of(&answers, &[None, None, None]);
        assert_eq!((t.answered, t.usable, t.counted_taken), (3, 2, 1));
        assert_eq!(t.taken, vec![0, 1]);
        assert_eq!((t.settling.clone(), t.settled_in), (vec![0], Some(400)));
        assert_eq!(t.seen, vec!["o|3|other".to_owned()]);
        assert_eq!(t.soonest_expiry, Some(900));
        // A settled node this round catches up counts.
        let answers = vec![
            take(true, "n|pending|me", STALE),
            take(true, "n|pending|me", TRUSTED),
            None,
        ];
        let t = Tally::of(&answers, &[Some("r".to_owned()), None, None]);
        assert_eq!((t.answered, t.usable, t.counted_taken), (2, 2, 2));
        let t = Tally::of(&answers, &[None, None, None]);
        assert_eq!((t.usable, t.counted_taken), (1, 1));
        // What an untrusted node holds is not seen as anyone's.
        let answers = vec![take(false, "o|3|other", STALE), None, None];
        let t = Tally::of(&answers, &[None, None, None]);
        assert!(t.seen.is_empty());
    }

    #[test]
    fn the_value_most_seen_wins_and_the_first_of_equals() {
        let seen = ["a", "b", "b", "c"].map(str::to_owned);
        assert_eq!(most_seen(&seen), Some(("b", 2)));
        let seen = ["a", "b"].map(str::to_owned);
        assert_eq!(most_seen(&seen), Some(("a", 1)));
        assert_eq!(most_seen(&[]), None);
    }

    #[test]
    fn a_settling_node_is_never_caught_up() {
        let t = targets(&[
            Some((TRUSTED, "a")),
            Some((TRUSTED, "b")),
            Some((SETTLING, "c")),
        ]);
        assert_eq!(t, vec![None, None, None]);
    }

    #[test]
    fn the_highest_token_counts_every_counter_and_every_value() {
        let mut answers = vec![
            take(false, "o|7|other", STALE),
            take(true, "n|pending|me", TRUSTED),
            None,
        ];
        assert_eq!(highest_token(&answers), 7, "an untrusted node's value");
        if let Some(a) = answers[1].as_mut() {
            a.fence = 9;
        }
        assert_eq!(highest_token(&answers), 9, "a counter");
    }

    #[test]
    fn a_majority_holder_is_named_by_a_majority_of_all_the_nodes() {
        let answers = vec![
            take(false, "o|3|other", TRUSTED),
            take(false, "o|3|other", TRUSTED),
            None,
        ];
        let t = Tally::of(&answers, &[None, None, None]);
        let (value, h) = t.majority_holder(2).expect("a holder");
        assert_eq!(
            (value, h.identity.as_str(), h.token),
            ("o|3|other", "other", Some(3))
        );
        assert!(t.majority_holder(3).is_none(), "2 of 5 is no majority");
    }

    #[test]
    fn a_failed_look_gives_back_where_it_may_have_taken_and_announces_a_majority_only() {
        let q = 2;
        let minority = vec![
            take(true, "n|pending|me", TRUSTED),
            None,
            take(false, "o|3|x", TRUSTED),
        ];
        let look = look_at(&minority);
        let give = look.give_back(&minority, q).expect("given back");
        assert_eq!(give.release_on, vec![true, true, false], "taken or silent");
        assert!(!give.announce, "a minority given back aloud");
        // Taken on a majority of nodes restarted less than a ttl ago: no vote for
        // anyone, given back quietly (or every campaign would wake the next).
        let settling = take(true, "n|pending|me", SETTLING);
        let majority = vec![
            settling.clone(),
            settling.clone(),
            take(false, "o|3|x", TRUSTED),
        ];
        let look = look_at(&majority);
        assert!(!look.wins(q));
        let give = look.give_back(&majority, q).expect("given back");
        assert_eq!(give.release_on, vec![true, true, false]);
        assert!(!give.announce, "a take on settling nodes given back aloud");
        // Taken on two settled nodes not caught up and one still settling: none
        // counts for any round until the last one settles, given back quietly.
        let stale = take(true, "n|pending|me", STALE);
        let fresh = vec![stale.clone(), stale.clone(), settling];
        let look = look_at(&fresh);
        assert!(!look.wins(q), "{look:?}");
        let give = look.give_back(&fresh, q).expect("given back");
        assert!(
            !give.announce,
            "a take on nodes that count for nobody given back aloud"
        );
        // Taken on a majority that counts (a confirm that failed after it): announced.
        let trusted = take(true, "n|pending|me", TRUSTED);
        let won = vec![stale, trusted.clone(), trusted];
        let look = look_at(&won);
        assert!(look.wins(q), "{look:?}");
        assert!(look.give_back(&won, q).expect("given back").announce);
        // Nothing taken, everyone answered, nobody to catch up: nothing to send.
        let held = vec![take(false, "o|3|x", TRUSTED); 3];
        let look = look_at(&held);
        assert_eq!(look.give_back(&held, q), None);
        assert_eq!(look.too_few_answered(3), None);
        let silent = vec![take(false, "o|3|x", TRUSTED), None, None];
        let look = look_at(&silent);
        assert!(look
            .too_few_answered(3)
            .is_some_and(|m| m.contains("only 1 of 3")));
    }
}
