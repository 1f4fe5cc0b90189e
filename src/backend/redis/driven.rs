//! The Redis campaign's decisions on a take's and a renewal's answers
//! ([`super::core::Core::after_take`], [`super::core::Core::claimed`],
//! [`super::core::Core::renewed`]) behind plain values, for a driver other than the
//! backend: the deterministic simulator (`tests/sim`) campaigns through them against
//! its model of a TTL store (one record taken or renewed by compare-and-set on the
//! candidate's nonce, a token from a counter bumped on each new tenure), under lost and
//! late answers, restarts and drifting clocks, as it drives the elector's machine. The
//! decisions are the backend's own: the same core, the same floor of tokens seen.

use std::time::Duration;

use tokio::time::Instant;

pub use super::core::Flaws;
use super::core::{Core, Next};
use super::requests::Take;
use crate::backend::{LockMode, Renewal};

/// What a campaign makes of its take's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Claim with this token.
    Claim { token: u64 },
    /// Another holds (its token, when the answer names one), or nobody.
    Held { token: Option<u64> },
    /// The answer lets us lead with nothing (too late, or no token): a failed call.
    Nothing,
}

/// One candidate's Redis core, an election's (not `--mode`).
#[derive(Clone, Debug)]
pub struct Candidate {
    core: Core,
}

impl Candidate {
    /// A candidate for a lease of `ttl`, with `flaws` on.
    pub fn new(ttl: Duration, flaws: Flaws) -> Candidate {
        let mut core = Core::new(ttl, ttl / 3, LockMode::Election);
        core.flaws = flaws;
        Candidate { core }
    }

    /// The highest token seen.
    pub fn floor(&self) -> u64 {
        self.core.floor.get()
    }

    /// The floor a take sends (the take script's `ARGV[4]`): the highest token seen.
    pub fn floor_sent(&self) -> u64 {
        self.core.floor_sent()
    }

    /// A take's answer: `won` (taken or adopted), the key's token as its value tells
    /// it (`None`: no value), the holder's expiry in ms (-1: unknown), read at
    /// `read_at`, answered at `now`. A won take claims on a tracking read that finds
    /// the key ours.
    pub fn after_take(
        &mut self,
        won: bool,
        token: Option<u64>,
        pttl_ms: i64,
        read_at: Instant,
        now: Instant,
    ) -> Decision {
        let value = token.map_or_else(String::new, |t| format!("nonce|{t}|holder"));
        let take = Take {
            won: i64::from(won),
            value,
            pttl: pttl_ms,
            why: 0,
            readers: Vec::new(),
        };
        match self.core.after_take(take, read_at, now) {
            Next::Claim { token } if self.core.claimed(true) => Decision::Claim { token },
            Next::Held(holder) => Decision::Held {
                token: holder.and_then(|h| h.token),
            },
            _ => Decision::Nothing,
        }
    }

    /// A renew script's answer (`kept`: the key was ours and is extended) at `now`.
    pub fn renewed(&mut self, kept: bool, now: Instant) -> Renewal {
        self.core
            .renewed(i64::from(kept), now)
            .unwrap_or(Renewal::Lost)
    }

    /// Our tenure ends (a release, whatever its answer).
    pub fn released(&mut self) {
        self.core.released();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(3);

    #[test]
    fn a_won_take_claims_with_its_token_and_raises_the_floor() {
        let now = Instant::now();
        let mut c = Candidate::new(TTL, Flaws::default());
        assert_eq!(
            c.after_take(false, Some(7), 1_000, now, now),
            Decision::Held { token: Some(7) }
        );
        assert_eq!(c.floor(), 7);
        assert_eq!(
            c.after_take(true, Some(8), -1, now, now),
            Decision::Claim { token: 8 }
        );
        assert_eq!(c.floor(), 8);
        assert_eq!(
            c.after_take(true, None, -1, now, now),
            Decision::Nothing,
            "a won take without a token"
        );
    }

    #[test]
    fn a_renewal_not_ours_is_lost() {
        let now = Instant::now();
        let mut c = Candidate::new(TTL, Flaws::default());
        c.after_take(true, Some(1), -1, now, now);
        assert_eq!(c.renewed(true, now), Renewal::Renewed);
        assert_eq!(c.renewed(false, now), Renewal::Lost);
    }

    #[test]
    fn the_known_wrong_rule_keeps_a_renewal_not_ours() {
        let now = Instant::now();
        let flawed = Flaws {
            renewal_not_ours_kept: true,
            ..Flaws::default()
        };
        let mut c = Candidate::new(TTL, flawed);
        c.after_take(true, Some(1), -1, now, now);
        assert_eq!(c.renewed(false, now), Renewal::Renewed);
    }

    #[test]
    fn the_known_wrong_rule_claims_on_a_holders_value() {
        let now = Instant::now();
        let flawed = Flaws {
            claims_on_value: true,
            ..Flaws::default()
        };
        let mut c = Candidate::new(TTL, flawed);
        assert_eq!(
            c.after_take(false, Some(7), 1_000, now, now),
            Decision::Claim { token: 7 }
        );
        assert_eq!(
            c.after_take(false, None, -1, now, now),
            Decision::Held { token: None }
        );
    }
}
