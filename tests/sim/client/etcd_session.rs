//! The etcd session family's campaign, decided by the etcd store's own round
//! (`leasekeeper::backend::etcd::driven`): the read of the queue (with a keep-alive
//! beside it for the next in line), the keep-alive before a claim, and the verdict.

use leasekeeper::elector::machine::Op;

use super::super::store::{Req, Resp, SHARED};
use super::{etcd, Client, Out};

impl Client {
    /// A campaign begins: the read of the queue, and beside it the next in line's
    /// keep-alive, as the core's round says.
    pub(super) fn etcd_start(&mut self, flaws: etcd::Flaws) -> Vec<Out> {
        let round = etcd::Round::new(self.next_in_line, flaws);
        let key = self.key;
        let mut out = vec![Out::Send(0, Req::Campaign { key })];
        if round.refresh_beside_read() {
            out.push(Out::Send(0, Req::Renew { key }));
        }
        self.etcd = Some(round);
        self.etcd_read = None;
        out
    }

    /// A reply to the current call: a campaign's read or keep-alive moves its round
    /// on; a renew's or release's answers as the session family's.
    pub(super) fn etcd_reply(&mut self, resp: Resp) -> Vec<Out> {
        let (op, phase) = self.run.as_ref().map(|r| (r.op, r.phase)).expect("a call");
        let reader = self.shared();
        if op != Op::Campaign {
            let answer = self.single(op, resp);
            return self.finish(answer);
        }
        let round = self.etcd.as_mut().expect("a campaign's round");
        match resp {
            Resp::Listing { ours, nodes } if phase == 0 => self.etcd_read = Some((ours, nodes)),
            Resp::Renewed(alive) => round.refreshed(alive),
            Resp::SessionGone => return self.etcd_decided(etcd::Decision::StartOver),
            // A duplicate of the read.
            _ => return Vec::new(),
        }
        if phase == 1 {
            let decision = round.after_refresh();
            return self.etcd_decided(decision);
        }
        let Some((ours, nodes)) = self.etcd_read.as_ref() else {
            return Vec::new();
        };
        if round.refresh_beside_read() && !round.has_refresh() {
            // The backend awaits the keep-alive beside the read with it.
            return Vec::new();
        }
        let listing: Vec<etcd::Node> = nodes
            .iter()
            .map(|&(seq, lease)| etcd::Node {
                seq,
                lease,
                shared: lease & SHARED != 0,
            })
            .collect();
        match round.after_read(&listing, *ours, reader) {
            etcd::Decision::Refresh => {
                self.run.as_mut().expect("a call").phase = 1;
                vec![Out::Send(0, Req::Renew { key: self.key })]
            }
            decision => self.etcd_decided(decision),
        }
    }

    /// The round's verdict, as the machine's answer.
    fn etcd_decided(&mut self, decision: etcd::Decision) -> Vec<Out> {
        self.etcd = None;
        self.etcd_read = None;
        self.next_in_line = false;
        let resp = match decision {
            etcd::Decision::Claim { token } => Resp::Acquired(token),
            etcd::Decision::Follow { head, next_in_line } => {
                self.next_in_line = next_in_line;
                Resp::Held(Some(head))
            }
            etcd::Decision::StartOver | etcd::Decision::Refresh => Resp::SessionGone,
        };
        let answer = self.single(Op::Campaign, resp);
        self.finish(answer)
    }
}
