//! The SQL campaign's verdict on the row a take left ([`super::core::Tenancy`]'s
//! `after_take`) behind plain values, for a driver other than the backend: the
//! deterministic simulator (`tests/sim`) campaigns through it against its model of a
//! lease row (one record taken or renewed by compare-and-set on the tenure id, a token
//! from a counter bumped on each new tenure), under lost and late answers, restarts and
//! drifting clocks, as it drives the elector's machine. The verdict is the backend's
//! own, shared by PostgreSQL and MySQL: a row is ours only by its tenure id, and the
//! floor of tokens seen.

use std::time::Duration;

use tokio::time::Instant;

pub use super::core::Flaws;
use super::core::{LeaseRow, Tenancy};
use crate::backend::{Campaign, LockMode, Renewal};

/// The lease row as a take statement left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The holder's identity.
    pub holder: String,
    /// The holder's tenure id.
    pub tenure: String,
    pub token: u64,
    /// How long until the row expires, by the server's clock (0 when expired).
    pub left_ms: i64,
}

/// What a campaign makes of the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Ours: claim with this token.
    Claim { token: u64 },
    /// Another holds (its token), or nobody.
    Held { token: Option<u64> },
    /// The row is not one to lead with (a failed campaign).
    Failed,
}

/// One candidate's side of the lease row (an election's, not `--mode`).
pub struct Candidate {
    tenancy: Tenancy,
}

impl std::fmt::Debug for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = &self.tenancy;
        write!(
            f,
            "Candidate({}, floor {}, {:?})",
            t.identity, t.floor, t.phase
        )
    }
}

impl Candidate {
    /// The candidate `identity` for a lease of `ttl`, with `flaws` on.
    pub fn new(identity: &str, ttl: Duration, flaws: Flaws) -> Candidate {
        let mut tenancy = Tenancy::new("election", identity, ttl, LockMode::Election);
        tenancy.flaws = flaws;
        Candidate { tenancy }
    }

    /// The highest token seen.
    pub fn floor(&self) -> u64 {
        self.tenancy.floor.get()
    }

    /// The floor a take sends (none with the known-wrong rule).
    pub fn floor_sent(&self) -> u64 {
        self.tenancy.floor_sent().get()
    }

    /// The row a take of our tenure `tenure` left (`None`: none), at `now`.
    pub fn after_take(&mut self, tenure: &str, row: Option<Row>, now: Instant) -> Decision {
        tenure.clone_into(&mut self.tenancy.tenure);
        let row = row.map(|r| LeaseRow {
            holder: r.holder,
            tenure: r.tenure,
            token: i64::try_from(r.token).unwrap_or(i64::MAX),
            left_ms: r.left_ms,
        });
        match self.tenancy.after_take(now, row, false, None) {
            Ok(t) => match t.campaign {
                Campaign::Acquired { token } => Decision::Claim { token },
                Campaign::Held(h) => Decision::Held {
                    token: h.and_then(|h| h.token),
                },
            },
            Err(_) => Decision::Failed,
        }
    }

    /// A renew statement's answer: `ours`, the row was still our tenure's.
    pub fn renewal(ours: bool) -> Renewal {
        Tenancy::renewal(ours)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(holder: &str, tenure: &str, token: u64) -> Option<Row> {
        Some(Row {
            holder: holder.into(),
            tenure: tenure.into(),
            token,
            left_ms: 1_000,
        })
    }

    #[test]
    fn a_row_is_ours_only_by_its_tenure_id() {
        let now = Instant::now();
        let mut c = Candidate::new("a", Duration::from_secs(3), Flaws::default());
        assert_eq!(
            c.after_take("t2", row("a", "t2", 4), now),
            Decision::Claim { token: 4 }
        );
        assert_eq!(
            c.after_take("t3", row("a", "t2", 4), now),
            Decision::Held { token: Some(4) },
            "a leftover of our earlier tenure adopted"
        );
        assert_eq!(c.floor(), 4);
        assert_eq!(Candidate::renewal(false), Renewal::Lost);
    }

    #[test]
    fn the_known_wrong_rule_adopts_a_row_of_our_identity() {
        let now = Instant::now();
        let flawed = Flaws {
            adopts_own_identity: true,
            ..Flaws::default()
        };
        let mut c = Candidate::new("a", Duration::from_secs(3), flawed);
        assert_eq!(
            c.after_take("t3", row("a", "t2", 4), now),
            Decision::Claim { token: 4 }
        );
        assert_eq!(
            c.after_take("t3", row("b", "t9", 5), now),
            Decision::Held { token: Some(5) }
        );
    }
}
