//! The TTL family's answers as the Redis store's own core makes them
//! (`leasekeeper::backend::redis::driven`): a take's outcome (claim with its token,
//! or held), a renewal's (kept or lost), a release; and the SQL TTL family's, as the
//! SQL store's core makes them of the row a take left (`backend::sql::driven`).

use leasekeeper::backend::Renewal;
use leasekeeper::elector::machine::{Op, Time};

use super::super::store::{Resp, QUARANTINE};
use super::{redis, sql, Client};

impl Client {
    /// A reply to call `id` (current or late), as the Redis core decides on it: the
    /// reply the family's answer is made from.
    pub(super) fn redis_judged(&mut self, id: u64, resp: Resp, now: Time) -> Resp {
        let op = self.ops.iter().find(|(i, _)| *i == id).map(|(_, op)| *op);
        let at = self.at(now);
        let Some(core) = self.redis.as_mut() else {
            return resp;
        };
        let decided = match (op, &resp) {
            (Some(Op::Campaign), Resp::Acquired(token)) => {
                core.after_take(true, Some(*token), -1, at, at)
            }
            (Some(Op::Campaign), Resp::Held(token)) => core.after_take(false, *token, -1, at, at),
            (Some(Op::Renew), Resp::Renewed(kept)) => {
                let renewal = core.renewed(*kept, at);
                return Resp::Renewed(renewal == Renewal::Renewed);
            }
            (Some(Op::Release), Resp::Released) => {
                core.released();
                return resp;
            }
            _ => return resp,
        };
        match decided {
            redis::Decision::Claim { token } => Resp::Acquired(token),
            redis::Decision::Held { token } => Resp::Held(token),
            redis::Decision::Nothing => Resp::SessionGone,
        }
    }

    /// A row a take left, as the SQL core judges it for our tenure (the nonce); any
    /// other reply as it is.
    pub(super) fn sql_judged(&mut self, resp: Resp, now: Time) -> Resp {
        let Resp::Row {
            key,
            token,
            left_ms,
        } = resp
        else {
            return resp;
        };
        let (at, tenure) = (self.at(now), self.key.to_string());
        let Some(core) = self.sql.as_mut() else {
            return resp;
        };
        // A quarantine row, or one released, is nobody's.
        let holder = match key {
            QUARANTINE => String::new(),
            _ => (key >> 40).to_string(),
        };
        let row = sql::Row {
            holder,
            tenure: key.to_string(),
            token,
            left_ms,
        };
        match core.after_take(&tenure, Some(row), at) {
            sql::Decision::Claim { token } => Resp::Acquired(token),
            sql::Decision::Held { token } => Resp::Held(token),
            sql::Decision::Failed => Resp::SessionGone,
        }
    }
}
