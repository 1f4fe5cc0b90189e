//! The Redlock family's campaign and renewal, counted by the Redlock store's own core
//! (`leasekeeper::backend::redlock::driven`): the take round on every node (a tenure
//! by itself when a majority took with one token), else the confirm on a majority, the give-back and catch-up of a campaign that did not win,
//! the holder a majority names, a renew round's verdict.

use leasekeeper::backend::{Campaign, Renewal};
use leasekeeper::elector::machine::{Answer, Failure, Op, Time};
use leasekeeper::status::Holder;

use super::super::store::{Req, Resp};
use super::{rl, Client, Out};

impl Client {
    fn rl(&mut self) -> &mut rl::Campaigner {
        self.redlock
            .as_mut()
            .expect("the Redlock family has a core")
    }

    /// A reply from node `store` to the current call.
    pub(super) fn redlock_reply(&mut self, store: usize, resp: Resp, now: Time) -> Vec<Out> {
        let run = self.run.as_mut().expect("a call");
        if run.replies[store].is_none() {
            run.replies[store] = Some(resp);
            run.waiting = run.waiting.saturating_sub(1);
        }
        let (op, phase, waiting) = (run.op, run.phase, run.waiting);
        match op {
            Op::Renew => {
                let answers = self.node_answers();
                let at = self.at(now);
                let result = match self.rl().renewed(&answers, at) {
                    Some(renewal) => renewal,
                    None if waiting == 0 => Renewal::Lost,
                    None => return Vec::new(),
                };
                let ttl = self.ttl;
                self.finish(Answer::Renew {
                    result: Ok(result),
                    ttl,
                })
            }
            Op::Release if waiting == 0 => self.finish(Answer::Release),
            Op::Campaign if waiting == 0 => self.redlock_phase_over(phase),
            _ => Vec::new(),
        }
    }

    /// Each node's answer to the round, as the core reads it.
    fn node_answers(&self) -> Vec<Option<rl::NodeAnswer>> {
        let settle = self.ttl.mul_f64(1.0 + self.drift);
        let run = self.run.as_ref().expect("a call");
        (run.replies.iter())
            .map(|r| match r {
                Some(Resp::Took(s)) => Some(rl::NodeAnswer {
                    ours: s.took,
                    token: s.holder_token.filter(|_| s.took),
                    other: s.holder.map(|h| (h, s.holder_token)),
                    fence: s.counter,
                    run_id: s.run_id,
                    trusted: s.trusted,
                    settling: (!s.trusted && s.uptime < settle).then(|| settle - s.uptime),
                }),
                _ => None,
            })
            .collect()
    }

    /// The phase timer of call `id` (Redlock: stop waiting for slow nodes).
    pub fn phase_timeout(&mut self, id: u64, phase: u8) -> Vec<Out> {
        match self.run.as_ref() {
            Some(r) if r.id == id && r.phase == phase && !r.done => {}
            _ => return Vec::new(),
        }
        match self.run.as_ref().map(|r| r.op) {
            Some(Op::Campaign) => self.redlock_phase_over(phase),
            Some(Op::Release) => self.finish(Answer::Release),
            _ => Vec::new(),
        }
    }

    /// The take (phase 0) or the confirm (phase 1) of a Redlock campaign is over.
    fn redlock_phase_over(&mut self, phase: u8) -> Vec<Out> {
        let run = self.run.as_ref().expect("a call");
        if phase == 1 {
            let confirmed: Vec<Option<(bool, bool)>> = (run.replies.iter())
                .map(|r| match r {
                    Some(Resp::Confirmed(mine, trusted)) => Some((*mine, *trusted)),
                    _ => None,
                })
                .collect();
            let token = run.token;
            return match self.rl().confirmed(&confirmed, token) {
                None => {
                    let (result, ttl) = (Ok(Campaign::Acquired { token }), self.ttl);
                    self.finish(Answer::Campaign {
                        result,
                        ttl,
                        lease: 0,
                    })
                }
                Some(lost) => self.redlock_lost(lost),
            };
        }
        let answers = self.node_answers();
        let (token, on) = match self.rl().after_take(&answers) {
            rl::AfterTake::Confirm { token, on } => (token, on),
            rl::AfterTake::Acquired { token } => {
                let (result, ttl) = (Ok(Campaign::Acquired { token }), self.ttl);
                return self.finish(Answer::Campaign {
                    result,
                    ttl,
                    lease: 0,
                });
            }
            lost => return self.redlock_lost(lost),
        };
        let key = self.key;
        let mut out: Vec<Out> = (on.iter().enumerate())
            .filter_map(|(i, c)| c.map(|catch_up| (i, catch_up)))
            .map(|(i, catch_up)| {
                let req = Req::Confirm {
                    key,
                    token,
                    catch_up,
                };
                Out::Send(i, req)
            })
            .collect();
        let run = self.run.as_mut().expect("a call");
        run.phase = 1;
        run.token = token;
        run.waiting = out.len();
        run.replies = vec![None; run.replies.len()];
        out.push(Out::PhaseTimer(self.ttl / 10, 1));
        out
    }

    /// A Redlock campaign that did not win gives back and catches up as `lost` says,
    /// and follows the holder a majority names, with a new nonce from now.
    fn redlock_lost(&mut self, lost: rl::AfterTake) -> Vec<Out> {
        let rl::AfterTake::Lost {
            give_back,
            catch_up,
            floor,
            too_few,
        } = lost
        else {
            unreachable!("a campaign that did not win");
        };
        let key = self.key;
        let mut out: Vec<Out> = (catch_up.iter().enumerate())
            .filter_map(|(i, c)| c.map(|run_id| (i, run_id)))
            .map(|(i, run_id)| {
                let req = Req::Confirm {
                    key: 0,
                    token: floor,
                    catch_up: Some(run_id),
                };
                Out::Send(i, req)
            })
            .collect();
        out.extend(
            (give_back.iter().enumerate())
                .filter(|(_, g)| **g)
                .map(|(i, _)| Out::Send(i, Req::GiveBack { key })),
        );
        self.new_key();
        let origin = self.origin;
        let (holder, split) = self.rl().follow(origin, origin);
        self.split = split;
        let result = match too_few {
            true => Err(Failure { timed_out: false }),
            false => Ok(Campaign::Held(holder.map(|token| Holder {
                identity: "other".into(),
                token,
            }))),
        };
        let ttl = self.ttl;
        out.extend(self.finish(Answer::Campaign {
            result,
            ttl,
            lease: 0,
        }));
        out
    }
}
