//! A lock or session setting held on the statement connection (an advisory or named
//! lock, an idle limit): it lasts as long as that connection, so it is asked for again
//! on a new one, and let go only on the one that holds it. Plain bookkeeping over the
//! connection's generation ([`super::Session::generation`]); the dialects send the
//! requests.

use std::fmt::Display;

/// Which connection holds it, if any.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OnConnection {
    /// The connection's generation; `Some(0)`: wanted, held on no connection yet
    /// (generation 0 is never a connection in use).
    held: Option<u64>,
}

impl OnConnection {
    /// Whether to ask for it: it is not held on the connection in use (`live`: whether
    /// a generation is still that connection, idle and sound). A hold on an older
    /// connection is forgotten; with `wanted`, it stays wanted meanwhile.
    pub fn asks(&mut self, live: impl Fn(u64) -> bool, wanted: bool) -> bool {
        if self.held.is_some_and(live) {
            return false;
        }
        self.held = wanted.then_some(0);
        true
    }

    /// The answer of the request that takes it (`what` names it in the log), on
    /// connection `generation`: held there when granted.
    pub fn answered<E: Display>(&mut self, answer: Result<bool, E>, generation: u64, what: &str) {
        match answer {
            Ok(true) => self.held = Some(generation),
            Ok(false) => tracing::debug!("{what} is busy"),
            Err(e) => tracing::debug!(error = %e, "could not take {what}"),
        }
    }

    /// Whether to let it go (it is held on the connection in use); afterwards it is
    /// neither held nor wanted.
    pub fn lets_go(&mut self, live: impl Fn(u64) -> bool) -> bool {
        self.held.take().is_some_and(live)
    }

    /// Whether it is held, or wanted.
    pub fn wanted(&self) -> bool {
        self.held.is_some()
    }

    /// Forgets it (its connection let it go with another request).
    pub fn forget(&mut self) {
        self.held = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_is_asked_for_once_per_connection_and_let_go_only_where_it_is_held() {
        let on = |g: u64| move |x: u64| x == g;
        let mut h = OnConnection::default();
        assert!(h.asks(on(1), false), "held nowhere: ask");
        assert!(!h.wanted());
        h.answered(Ok::<_, String>(true), 1, "it");
        assert!(!h.asks(on(1), false), "held on the connection in use");
        assert!(h.asks(on(2), false), "a new connection: ask again");
        h.answered(Ok::<_, String>(false), 2, "it");
        assert!(h.asks(on(2), false), "busy: ask again");
        h.answered(Err("broken"), 2, "it");
        assert!(
            !h.wanted() && !h.lets_go(on(2)),
            "never granted: nothing to let go"
        );
        h.answered(Ok::<_, String>(true), 2, "it");
        assert!(!h.lets_go(on(3)), "held on a connection no longer in use");
        assert!(!h.wanted(), "let go with its connection");
        h.answered(Ok::<_, String>(true), 3, "it");
        assert!(h.lets_go(on(3)));
        assert!(!h.lets_go(on(3)), "let go once");
    }

    #[test]
    fn a_wanted_hold_stays_wanted_until_it_is_let_go() {
        let none = |_: u64| false;
        let mut h = OnConnection::default();
        assert!(h.asks(none, true));
        assert!(h.wanted(), "wanted before its answer");
        h.answered(Ok::<_, String>(false), 1, "it");
        assert!(h.wanted(), "still wanted while busy");
        assert!(
            !h.lets_go(|g| g == 1),
            "wanted, held on no connection: nothing to let go"
        );
        assert!(!h.wanted());
        h.answered(Ok::<_, String>(true), 1, "it");
        h.forget();
        assert!(!h.wanted());
    }
}
