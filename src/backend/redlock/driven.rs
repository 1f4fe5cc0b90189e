//! The Redlock campaign's counting ([`super::core::Core::after_take`],
//! [`super::core::Core::confirmed`], [`super::core::Core::follow`],
//! [`super::core::Core::renewed`], with the rules of [`super::rules`]) behind plain
//! values, for a driver other than the backend: the deterministic simulator
//! (`tests/sim`) campaigns through it against its model of N Redlock nodes (a TTL
//! record with a fence counter, a run id and an incarnation marker each, restartable
//! empty or from an older snapshot), under lost and late answers, restarts and drifting
//! clocks, as it drives the elector's machine. The counting is the backend's own: which
//! nodes count, the majority, the token above every one seen, the give-back and the
//! catch-up of restarted nodes, a renewal's verdict.

use std::time::Duration;

use tokio::time::Instant;

use super::core::Core;
pub use super::core::Flaws;
use super::rules::{Look, Renewed, Round, Take, SETTLING, STALE, TRUSTED};
use crate::backend::Renewal;

/// One node's answer to a take or a renewal, as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeAnswer {
    /// Our value is (or now is) on the node.
    pub ours: bool,
    /// Our value's token there, when its take wrote one (`None`: pending).
    pub token: Option<u64>,
    /// Another's value on the node: its holder (the driver's name for it) and its
    /// token, once confirmed.
    pub other: Option<(u64, Option<u64>)>,
    /// The node's fence counter.
    pub fence: u64,
    pub run_id: u64,
    /// The node's marker holds its current run id.
    pub trusted: bool,
    /// Untrusted: how long until it has been up for its settling time (`None`:
    /// settled).
    pub settling: Option<Duration>,
}

/// What a take round adds up to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterTake {
    /// A majority of counted nodes took with one token above every one seen: a tenure
    /// of `token`, with no confirm round.
    Acquired { token: u64 },
    /// A majority took: confirm `token` on these nodes (per node: `None` not there,
    /// `Some(catch_up)` there, catching up the node's run id when given).
    Confirm {
        token: u64,
        on: Vec<Option<Option<u64>>>,
    },
    /// No majority: give back where `give_back` says, catch up the nodes of
    /// `catch_up` (by run id) up to the floor, then follow ([`Campaigner::follow`]);
    /// `too_few`: too few nodes answered to know anything (a failed campaign).
    Lost {
        give_back: Vec<bool>,
        catch_up: Vec<Option<u64>>,
        floor: u64,
        too_few: bool,
    },
}

/// One candidate's Redlock core and its campaign's take round.
#[derive(Clone, Debug)]
pub struct Campaigner {
    core: Core,
    answers: Round<Take>,
    look: Option<Look>,
}

impl Campaigner {
    /// A candidate on `nodes` nodes for a lease of `ttl`, with `flaws` on.
    pub fn new(nodes: usize, ttl: Duration, flaws: Flaws) -> Campaigner {
        let mut core = Core::new(nodes, ttl, ttl / 3);
        core.flaws = flaws;
        Campaigner {
            core,
            answers: Vec::new(),
            look: None,
        }
    }

    /// A take round answered (`None`: no answer in time from that node).
    pub fn after_take(&mut self, answers: &[Option<NodeAnswer>]) -> AfterTake {
        self.core.begin();
        self.answers = answers.iter().map(|a| a.map(take)).collect();
        let look = self.core.after_take(&self.answers);
        let quorum = self.core.quorum();
        let run_id = |t: &Option<String>| t.as_ref().and_then(|r| r.parse().ok());
        let took = self.core.took(&self.answers, &look, false);
        let after = match (took, look.wins(quorum)) {
            (Some(token), _) => AfterTake::Acquired { token },
            (None, true) => AfterTake::Confirm {
                token: self.core.next_token(),
                on: (self.answers.iter().zip(&look.targets))
                    .map(|(a, t)| a.as_ref().filter(|a| a.won).map(|_| run_id(t)))
                    .collect(),
            },
            (None, false) => self.lost(&look),
        };
        self.look = Some(look);
        after
    }

    /// What a take round that made no tenure gives back and catches up.
    fn lost(&self, look: &Look) -> AfterTake {
        let n = self.answers.len();
        let give = look.give_back(&self.answers, self.core.quorum());
        AfterTake::Lost {
            give_back: give.map_or(vec![false; n], |g| g.release_on),
            catch_up: (look.targets.iter())
                .map(|t| t.as_ref().and_then(|r| r.parse().ok()))
                .collect(),
            floor: self.core.floor.get(),
            too_few: look.too_few_answered(n).is_some(),
        }
    }

    /// The confirm round of [`AfterTake::Confirm`] answered, per node (ours, trusted):
    /// `None` when it made a tenure, else what to give back ([`AfterTake::Lost`]), and
    /// then follow ([`Campaigner::follow`]).
    pub fn confirmed(
        &mut self,
        confirmed: &[Option<(bool, bool)>],
        token: u64,
    ) -> Option<AfterTake> {
        let seen: Vec<Option<(i64, i64)>> = confirmed
            .iter()
            .map(|c| c.map(|(ours, trusted)| (i64::from(ours), state(trusted, None))))
            .collect();
        let value = format!("ours|{token}|us");
        if self.core.confirmed(&seen, token, value, false) {
            return None;
        }
        let look = self.look.clone()?;
        Some(self.lost(&look))
    }

    /// After a take round that made no tenure (read at `read_at`, now `now`): the
    /// holder a majority names (its token), and whether the round was a split vote.
    pub fn follow(&mut self, read_at: Instant, now: Instant) -> (Option<Option<u64>>, bool) {
        let Some(look) = self.look.take() else {
            return (None, false);
        };
        let mut split = false;
        let holder = self
            .core
            .follow(&self.answers, &look.tally, read_at, now, || {
                split = true;
                Duration::from_millis(10)
            });
        (holder.map(|h| h.token), split)
    }

    /// A renew round's answers so far (`None`: none yet from that node), at `now`:
    /// renewed, lost, or `None`: not proven either way.
    pub fn renewed(&mut self, answers: &[Option<NodeAnswer>], now: Instant) -> Option<Renewal> {
        let round: Round<Renewed> = answers
            .iter()
            .map(|a| {
                a.map(|a| {
                    let st = state(a.trusted, a.settling);
                    (i64::from(a.ours), st, a.fence, a.run_id.to_string(), 0)
                })
            })
            .collect();
        self.core.after_renew_round(&round);
        self.core.renewed(&round, now).ok()
    }

    /// Our tenure ends (a release, or a give-back).
    pub fn drop_tenure(&mut self) {
        self.core.drop_tenure();
    }

    /// The highest token seen, which a take's token goes above.
    pub fn floor(&self) -> u64 {
        self.core.floor.get()
    }
}

/// A node's state as its scripts answer it.
fn state(trusted: bool, settling: Option<Duration>) -> i64 {
    match (trusted, settling) {
        (true, _) => TRUSTED,
        (false, Some(_)) => SETTLING,
        (false, None) => STALE,
    }
}

/// A take's answer as the take script gives it: another's value is
/// `<holder>|<token>|<holder>`, ours `us|<token>|us` (a token empty until written).
fn take(a: NodeAnswer) -> Take {
    let token = |t: Option<u64>| t.map_or_else(String::new, |t| t.to_string());
    let value = match a.other {
        Some((holder, t)) => format!("{holder}|{}|{holder}", token(t)),
        None if a.ours => format!("us|{}|us", token(a.token)),
        None => String::new(),
    };
    Take {
        won: a.ours,
        beside_shared: false,
        refused: false,
        value,
        pttl: -1,
        fence: a.fence,
        state: state(a.trusted, a.settling),
        settle_ms: a
            .settling
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        run_id: a.run_id.to_string(),
        store_ms: 0,
        readers: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(3);

    fn answer(ours: bool, other: Option<(u64, Option<u64>)>, fence: u64) -> NodeAnswer {
        NodeAnswer {
            ours,
            token: None,
            other,
            fence,
            run_id: 1,
            trusted: true,
            settling: None,
        }
    }

    #[test]
    fn a_majority_of_trusted_takes_confirms_above_every_token_seen() {
        let mut c = Campaigner::new(3, TTL, Flaws::default());
        let round = [
            Some(answer(true, None, 4)),
            Some(answer(true, None, 6)),
            Some(answer(false, Some((9, Some(5))), 5)),
        ];
        let on = vec![Some(None), Some(None), None];
        assert_eq!(c.after_take(&round), AfterTake::Confirm { token: 7, on });
        assert_eq!(
            c.confirmed(&[Some((true, true)), Some((true, true)), None], 7),
            None
        );
        let now = Instant::now();
        let renewal = c.renewed(
            &[
                Some(answer(true, None, 7)),
                Some(answer(true, None, 7)),
                None,
            ],
            now,
        );
        assert_eq!(renewal, Some(Renewal::Renewed));
        let lost = [Some(answer(false, Some((9, None)), 7)); 2];
        assert_eq!(
            c.renewed(&[lost[0], lost[1], None], now),
            Some(Renewal::Lost)
        );
    }

    #[test]
    fn a_majority_of_takes_with_one_token_is_a_tenure_without_a_confirm() {
        let mut c = Campaigner::new(3, TTL, Flaws::default());
        let ours = |token| NodeAnswer {
            token: Some(token),
            ..answer(true, None, token)
        };
        let round = [Some(ours(6)), Some(ours(6)), None];
        assert_eq!(c.after_take(&round), AfterTake::Acquired { token: 6 });
        assert_eq!(c.floor(), 6);
        // Not above a token seen elsewhere: confirmed above it.
        let mut c = Campaigner::new(3, TTL, Flaws::default());
        let round = [
            Some(ours(6)),
            Some(ours(6)),
            Some(answer(false, Some((9, Some(7))), 7)),
        ];
        let on = vec![Some(None), Some(None), None];
        assert_eq!(c.after_take(&round), AfterTake::Confirm { token: 8, on });
    }

    #[test]
    fn a_minority_gives_back_and_follows_the_holder_a_majority_names() {
        let mut c = Campaigner::new(3, TTL, Flaws::default());
        let held = Some(answer(false, Some((9, Some(5))), 5));
        let round = [Some(answer(true, None, 5)), held, held];
        let AfterTake::Lost {
            give_back, too_few, ..
        } = c.after_take(&round)
        else {
            panic!("a minority confirms");
        };
        assert_eq!((give_back, too_few), (vec![true, false, false], false));
        let now = Instant::now();
        assert_eq!(c.follow(now, now), (Some(Some(5)), false));
    }

    #[test]
    fn the_known_wrong_rule_confirms_on_a_minority() {
        let flawed = Flaws {
            minority_quorum: true,
        };
        let mut c = Campaigner::new(3, TTL, flawed);
        let held = Some(answer(false, Some((9, Some(5))), 5));
        let round = [Some(answer(true, None, 5)), held, held];
        let AfterTake::Confirm { token, .. } = c.after_take(&round) else {
            panic!("the flawed count confirms one node of three");
        };
        assert_eq!(c.confirmed(&[Some((true, true)), None, None], token), None);
    }
}
