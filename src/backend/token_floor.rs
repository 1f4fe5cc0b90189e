//! The token floor: the highest fencing token a candidate has seen, in any answer of
//! its store (a holder's token, a counter, a token it was handed). A take request
//! carries it, so that the store never hands out a token at or below it, even after
//! the store lost its counter (a Redis server restarted without persistence, a SQL
//! counter row deleted): tokens only grow. The Redis, Redlock and SQL cores keep one;
//! what they send is [`TokenFloor::get`], a Redlock confirm's token is
//! [`TokenFloor::next`], and a SQL statement binds [`TokenFloor::sql_param`].

use std::fmt;

use crate::status::FencingToken;

/// The highest token seen; it only ever grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenFloor(FencingToken);

impl TokenFloor {
    /// The highest token seen (0: none).
    pub fn get(self) -> FencingToken {
        self.0
    }

    /// A token seen: the floor rises to it, and never goes down.
    pub fn raise(&mut self, token: FencingToken) {
        self.0 = self.0.max(token);
    }

    /// Every token of `tokens` seen.
    pub fn raise_all(&mut self, tokens: impl IntoIterator<Item = FencingToken>) {
        tokens.into_iter().for_each(|t| self.raise(t));
    }

    /// The next token above every token seen (saturating: the floor `u64::MAX` has
    /// none above it, and no take goes past it).
    pub fn next(self) -> FencingToken {
        self.0.saturating_add(1)
    }

    /// The floor as a SQL statement's `BIGINT` parameter (saturating at `i64::MAX`).
    pub fn sql_param(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for TokenFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_only_grows() {
        let mut f = TokenFloor::default();
        assert_eq!((f.get(), f.next()), (0, 1));
        f.raise(7);
        assert_eq!(f.get(), 7);
        f.raise(3);
        assert_eq!(f.get(), 7, "a lower token never lowers the floor");
        f.raise_all([9, 4, 8]);
        assert_eq!(f.get(), 9, "the highest of several, not the last");
        f.raise_all([]);
        assert_eq!((f.get(), f.next()), (9, 10));
    }

    #[test]
    fn the_floor_is_bound_saturating_and_its_next_never_wraps() {
        let mut f = TokenFloor::default();
        f.raise(41);
        assert_eq!(f.sql_param(), 41);
        f.raise(u64::MAX);
        assert_eq!(f.sql_param(), i64::MAX);
        assert_eq!(f.next(), u64::MAX);
        assert_eq!(f.to_string(), u64::MAX.to_string());
    }
}
