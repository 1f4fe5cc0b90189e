//! A follower's wait, as the core decides it: how it goes on by the phase
//! ([`Core::wait`] -> [`WaitFor`]), and what each push means to it: a renewal at its
//! cadence, a change of the shared holders' set, a lost connection
//! ([`Core::on_renewal_push`], [`Core::on_readers_push`] -> [`Heard`]).

use redis::PushKind;
use tokio::time::Instant;

use super::super::handover::holder_due;
use super::super::rules::SPARE;
use super::{Core, Phase};
use crate::backend::redis::Pushed;
use crate::backend::Wake;

/// How a wait goes on, by the phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::backend::redlock) enum WaitFor {
    /// Only the notices and the baton, until the hint (if any) or `max`.
    Notices,
    /// Tracking is off on too many of the nodes followed: turn it on there, then look
    /// (or wait for the notices if too few took it).
    Track,
    /// The holder's renewals pushed from the `watched` nodes: [`Core::on_renewal_push`]
    /// until `due`.
    Renewals { watched: Vec<usize>, due: Instant },
    /// The shared holders' changes pushed from the `watched` nodes:
    /// [`Core::on_readers_push`] until `due`.
    Readers { watched: Vec<usize>, due: Instant },
}

/// What a push (or the end of a node's pushes) means to a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::redlock) enum Heard {
    /// The wait ends so.
    Wake(Wake),
    /// Nothing for this wait: wait on.
    Nothing,
    /// That node's pushes are gone: wait for the notices instead.
    Notices,
}

impl Core {
    /// How the next wait goes on, from `holds` (as [`Core::holds`] said before the
    /// pushes not watched were drained) and the tracking after it.
    pub(in crate::backend::redlock) fn wait(&self, holds: &[bool], now: Instant) -> WaitFor {
        let q = self.quorum();
        if holds.iter().filter(|h| **h).count() < q {
            return WaitFor::Notices;
        }
        let watched: Vec<usize> = (0..holds.len())
            .filter(|&i| holds[i] && self.tracking[i])
            .collect();
        let dues: Vec<Instant> = match &self.phase {
            Phase::Following(f) => (watched.iter())
                .filter_map(|&i| Some(self.cadence.due(f.signs[i]?, f.expires[i])))
                .collect(),
            Phase::KeptOut(signs) => (watched.iter())
                .filter_map(|&i| Some(signs[i]? + self.ttl + SPARE))
                .collect(),
            Phase::Idle | Phase::Leading(_) => return WaitFor::Notices,
        };
        if watched.len() < q {
            return WaitFor::Track;
        }
        let due = holder_due(dues, q).unwrap_or(now);
        match self.phase {
            Phase::KeptOut(_) => WaitFor::Readers { watched, due },
            _ => WaitFor::Renewals { watched, due },
        }
    }

    /// Tracking was turned on (`started`) on some of the nodes followed (`holds`):
    /// whether enough of them track now that a new look is followed by pushes alone.
    pub(in crate::backend::redlock) fn started_tracking(
        &mut self,
        holds: &[bool],
        started: &[bool],
    ) -> bool {
        for (tracking, on) in self.tracking.iter_mut().zip(started) {
            *tracking |= on;
        }
        let tracked = (0..holds.len())
            .filter(|&i| holds[i] && self.tracking[i])
            .count();
        tracked >= self.quorum()
    }

    /// A push from node `i` while following the holder by its renewals (`None`: that
    /// node's pushes are gone), heard at `now`.
    pub(in crate::backend::redlock) fn on_renewal_push(
        &mut self,
        i: usize,
        kind: Option<&PushKind>,
        now: Instant,
    ) -> Heard {
        let (ttl, cadence) = (self.ttl, self.cadence);
        let follow = match &mut self.phase {
            Phase::Following(f) => Some(f),
            _ => None,
        };
        match kind {
            None | Some(PushKind::Disconnection) => {
                self.tracking[i] = false;
                if let Some(f) = follow {
                    f.signs[i] = None;
                }
                match kind {
                    None => Heard::Notices,
                    Some(_) => Heard::Wake(Wake::Changed),
                }
            }
            Some(PushKind::Invalidate) => {
                let Some(f) = follow else {
                    return Heard::Wake(Wake::Changed);
                };
                let Some(sign) = f.signs[i] else {
                    return Heard::Wake(Wake::Changed);
                };
                match cadence.read_push(now, sign, f.expires[i]) {
                    Pushed::Look | Pushed::TooSoon => Heard::Wake(Wake::Changed),
                    Pushed::Renewal => {
                        f.signs[i] = Some(now);
                        f.expires[i] = Some(now + ttl);
                        Heard::Wake(Wake::Quiet)
                    }
                }
            }
            Some(_) => Heard::Nothing,
        }
    }

    /// A push from node `i` while kept out by shared holders (`None`: that node's
    /// pushes are gone), heard at `now`: a change of the readers' set shows them alive
    /// there (`Quiet`); a lost connection asks for a look.
    pub(in crate::backend::redlock) fn on_readers_push(
        &mut self,
        i: usize,
        kind: Option<&PushKind>,
        now: Instant,
    ) -> Heard {
        let (sign, wake) = match kind {
            Some(PushKind::Invalidate) => (Some(now), Wake::Quiet),
            Some(PushKind::Disconnection) | None => {
                self.tracking[i] = false;
                (None, Wake::Changed)
            }
            Some(_) => return Heard::Nothing,
        };
        if let Phase::KeptOut(signs) = &mut self.phase {
            signs[i] = sign;
        }
        Heard::Wake(wake)
    }
}

/// The end of a wait's time at `now` (`due`: as [`Core::wait`] said): a look once the
/// followed are due, else `Waiting` (the wait's `max`).
pub(in crate::backend::redlock) fn on_timer(now: Instant, due: Instant) -> Wake {
    if now >= due {
        Wake::Changed
    } else {
        Wake::Waiting
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::rules::tests::take;
    use super::super::super::rules::{Round, Take, STALE, TRUSTED};
    use super::super::tests::{core, ms, TTL};
    use super::*;
    use crate::status::Holder;

    /// A look at `answers` that made no tenure, read at `t0`, answered at `t0 + 4 ms`.
    fn looked(c: &mut Core, answers: &Round<Take>, t0: Instant) -> Option<Holder> {
        let look = c.after_take(answers);
        c.follow(answers, &look.tally, t0, t0 + ms(4), || ms(10))
    }

    #[test]
    fn a_follower_hears_renewals_at_their_cadence_and_looks_otherwise() {
        let mut c = core();
        let t0 = Instant::now();
        assert!(c.follow_announced(t0).is_none(), "nothing announced");
        c.announced = Some("o|5|other".into());
        assert!(c.follow_announced(t0).is_some());
        assert_eq!(c.hint, Some(t0 + TTL + SPARE));
        let WaitFor::Renewals { watched, due } = c.wait(&c.holds(), t0) else {
            panic!("not following the renewals")
        };
        assert_eq!((watched, due), (vec![0, 1, 2], t0 + ms(2_250)));
        let push = Some(&PushKind::Invalidate);
        assert_eq!(
            c.on_renewal_push(0, push, t0 + ms(1_000)),
            Heard::Wake(Wake::Quiet)
        );
        assert_eq!(
            c.on_renewal_push(1, push, t0 + ms(100)),
            Heard::Wake(Wake::Changed),
            "too soon"
        );
        assert_eq!(
            c.on_renewal_push(2, push, t0 + ms(2_300)),
            Heard::Wake(Wake::Changed),
            "late"
        );
        assert_eq!(
            c.on_renewal_push(0, Some(&PushKind::Message), t0),
            Heard::Nothing
        );
        // A node's pushes gone: its tracking and its sign too; too few tracked left.
        assert_eq!(c.on_renewal_push(1, None, t0), Heard::Notices);
        assert!(!c.tracking[1]);
        c.on_renewal_push(2, Some(&PushKind::Disconnection), t0);
        assert_eq!(c.wait(&c.holds(), t0), WaitFor::Notices);
        assert_eq!(on_timer(t0, t0 + ms(1)), Wake::Waiting);
        assert_eq!(on_timer(t0 + ms(1), t0 + ms(1)), Wake::Changed);
    }

    #[test]
    fn an_untracked_follower_turns_tracking_on_before_it_follows_by_pushes() {
        let mut c = Core::new(3, TTL, ms(1_000));
        let t0 = Instant::now();
        c.announced = Some("o|5|other".into());
        c.follow_announced(t0);
        let holds = c.holds();
        assert_eq!(c.wait(&holds, t0), WaitFor::Track);
        assert!(!c.started_tracking(&holds, &[true, false, false]));
        assert!(c.started_tracking(&holds, &[false, true, false]));
        assert!(c.watches(0) && c.watches(1) && !c.watches(2));
    }

    #[test]
    fn kept_out_by_shared_holders_it_follows_their_changes() {
        let mut c = core();
        let t0 = Instant::now();
        let beside = |v: &str, state| {
            let mut a = take(false, v, state);
            if let Some(a) = a.as_mut() {
                a.beside_shared = true;
            }
            a
        };
        let answers = vec![
            beside("a|3|r", TRUSTED),
            beside("a|3|r", TRUSTED),
            beside("a|3|r", STALE),
        ];
        assert_eq!(looked(&mut c, &answers, t0), None);
        assert_eq!(c.phase, Phase::KeptOut(vec![Some(t0), Some(t0), None]));
        let due = t0 + TTL + SPARE;
        assert_eq!(
            c.wait(&c.holds(), t0),
            WaitFor::Readers {
                watched: vec![0, 1],
                due
            }
        );
        let later = t0 + ms(500);
        let push = Some(&PushKind::Invalidate);
        assert_eq!(c.on_readers_push(0, push, later), Heard::Wake(Wake::Quiet));
        assert_eq!(c.phase, Phase::KeptOut(vec![Some(later), Some(t0), None]));
        assert_eq!(
            c.on_readers_push(1, None, later),
            Heard::Wake(Wake::Changed)
        );
        assert_eq!(c.wait(&c.holds(), t0), WaitFor::Notices, "one node left");
        // A look begins: the shared holders' signs are of the wait before it.
        c.begin();
        assert_eq!(c.phase, Phase::Idle);
    }
}
