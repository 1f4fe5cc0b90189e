//! How a follower of the `redis` lock reads the holder's news (see [`super::baton`]):
//! its tracking pushes (a renewal at its cadence, one too soon: someone else's
//! change, or a late one or the key's expiry: look; also Redlock's, per node), and an
//! announcement it may take without a look.

use std::time::Duration;

use tokio::time::Instant;

use super::{parse_value, quiet};
use crate::status::{FencingToken, Holder};

/// A follower's knowledge of the holder of the lock key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Follow {
    /// The last sign of the holder's record: the look's read, the announcement, or the
    /// last renewal pushed (`None`: nothing to follow by pushes).
    pub(crate) last_sign: Option<Instant>,
    /// When the holder's key expires unless renewed: as a look found it, or a ttl
    /// after the last renewal heard.
    pub(crate) expires: Option<Instant>,
    /// When an untracked follower looks at the latest (used once).
    pub(crate) hint: Option<Instant>,
    /// A follower that saw the key change too soon looks by itself then, unless an
    /// announcement comes first (the stagger).
    pub(crate) grace: Option<Instant>,
}

impl Follow {
    /// The holder's expiry a follower looks at, 2 ms after (its push comes only once
    /// the server gets round to expiring the key).
    pub(crate) fn expiry(&self) -> Option<Instant> {
        self.expires.map(|e| e + Duration::from_millis(2))
    }
}

/// How a follower reads the holder's tracking pushes: they come at the renew
/// interval (this candidate's own, which a fleet shares; a holder with another one
/// costs looks, never safety). A push sooner than half of it after the last sign is
/// someone else's change; none by 9/4 of it (at most the ttl) means the holder
/// stopped renewing there. With the default renew interval (ttl/3): ttl/6 and 3/4 ttl.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cadence {
    pub(crate) ttl: Duration,
    pub(crate) renew_interval: Duration,
}

impl Cadence {
    /// (too soon, too late) after the last sign.
    pub(crate) fn bounds(&self) -> (Duration, Duration) {
        (
            self.renew_interval / 2,
            (self.renew_interval * 9 / 4).min(self.ttl),
        )
    }

    /// When a follower whose last sign of the holder was at `last` looks by itself:
    /// when the next renewal is late, or at `expires`, when the holder's key expires
    /// unless renewed (as read, or a ttl after the last renewal heard).
    pub(crate) fn due(&self, last: Instant, expires: Option<Instant>) -> Instant {
        let (_, late) = self.bounds();
        let due = last + late;
        expires.map_or(due, |e| due.min(e))
    }

    /// What a tracking push of the holder's `alive`, heard at `now`, means to such a
    /// follower. The key's expiry pushes the same invalidation as a renewal: a push
    /// less than [`quiet::DUE_WITHIN`] before `expires` is taken for the expiry (a
    /// renewal that late costs one look, never safety), one at its cadence for a
    /// renewal, one sooner for someone else's change.
    pub(crate) fn read_push(
        &self,
        now: Instant,
        last: Instant,
        expires: Option<Instant>,
    ) -> Pushed {
        let expiring = expires.is_some_and(|e| now + self.ttl / quiet::DUE_WITHIN >= e);
        if expiring || now >= self.due(last, expires) {
            return Pushed::Look;
        }
        let (too_soon, _) = self.bounds();
        if now.saturating_duration_since(last) < too_soon {
            return Pushed::TooSoon;
        }
        Pushed::Renewal
    }
}

/// What a push of the holder's `alive` means to a follower ([`Cadence::read_push`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// The holder's renewal is late or its key expired: look.
    Look,
    /// Sooner than a renewal: another holder's change, or one by hand.
    TooSoon,
    /// A renewal: the holder lives, its key expires a ttl later.
    Renewal,
}

/// The holder an announcement (`acquired|<value>`) names, for a follower that knows
/// of tokens up to `floor` to take without a look: `None` for a value that names
/// nobody, or an older tenure's announcement (a former holder's, delayed past its
/// successor's take), which a look settles instead.
pub(crate) fn announced_holder(value: &str, floor: FencingToken) -> Option<Holder> {
    let parsed = parse_value(value);
    let token = parsed.token.filter(|t| *t >= floor)?;
    (!parsed.identity.is_empty()).then(|| Holder {
        identity: parsed.identity.to_owned(),
        token: Some(token),
    })
}

/// Whether an invalidation naming `keys` concerns the holder of the lock key a
/// follower follows (its `alive`; a flush of everything, no keys, too), not the
/// read-write lock's keys.
pub(crate) fn names_alive(keys: &[Vec<u8>], alive: &str) -> bool {
    keys.is_empty() || keys.iter().any(|k| k == alive.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A follower's reading of the holder's pushes (ttl 3 s, renewals every second).
    #[test]
    fn a_push_at_the_holders_expiry_is_the_expiry_not_a_renewal() {
        let cadence = Cadence {
            ttl: ms(3_000),
            renew_interval: ms(1_000),
        };
        let t0 = Instant::now();
        let renewed = Some(t0 + ms(3_000));
        assert_eq!(
            cadence.read_push(t0 + ms(1_000), t0, renewed),
            Pushed::Renewal
        );
        assert_eq!(
            cadence.read_push(t0 + ms(200), t0, renewed),
            Pushed::TooSoon
        );
        // No renewal by 9/4 of the interval: the holder stopped renewing.
        assert_eq!(cadence.read_push(t0 + ms(2_300), t0, renewed), Pushed::Look);
        // A look at t0 found the key expiring 750 ms later: its expiry's push comes
        // at the holder's renewal cadence, yet it is the expiry, even a little early.
        let read = Some(t0 + ms(752));
        assert_eq!(cadence.read_push(t0 + ms(745), t0, read), Pushed::Look);
        // Likewise a ttl after the last renewal heard.
        assert_eq!(
            cadence.read_push(t0 + ms(2_990), t0 + ms(900), renewed),
            Pushed::Look
        );
        assert_eq!(cadence.due(t0, read), t0 + ms(752));
        assert_eq!(cadence.due(t0, renewed), t0 + ms(2_250));
    }

    #[test]
    fn only_a_push_of_the_holders_alive_or_a_flush_concerns_a_follower() {
        let alive = "leasekeeper:{e}:alive";
        assert!(names_alive(&[], alive));
        assert!(names_alive(&[alive.as_bytes().to_vec()], alive));
        assert!(!names_alive(&[b"leasekeeper:{e}:busy".to_vec()], alive));
    }

    #[test]
    fn a_follower_takes_no_announcement_older_than_a_token_it_knows() {
        let named = |identity: &str, token| Holder {
            identity: identity.to_owned(),
            token: Some(token),
        };
        assert_eq!(announced_holder("n|5|b", 4), Some(named("b", 5)));
        assert_eq!(announced_holder("n|5|b", 5), Some(named("b", 5)));
        // A former holder's announcement, delayed past its successor's take.
        assert_eq!(announced_holder("n|4|a", 5), None);
        assert_eq!(announced_holder("n|6|", 5), None);
        assert_eq!(announced_holder("n|x|a", 0), None);
    }
}
