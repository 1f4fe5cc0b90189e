//! The candidates' table and the holders as `GET /leader` shows them: plain rules
//! over what the listing statements returned.

use crate::status::{FencingToken, Holder, Mode};

/// `GET /leader`'s holders from the listing (identity, token, whether shared); a
/// negative token is shown as unknown.
pub fn observed_holders(listed: Vec<(String, i64, bool)>) -> Vec<(Holder, Mode)> {
    (listed.into_iter())
        .map(|(identity, token, shared)| {
            let holder = Holder {
                identity,
                token: FencingToken::try_from(token).ok(),
            };
            let mode = if shared {
                Mode::Shared
            } else {
                Mode::Exclusive
            };
            (holder, mode)
        })
        .collect()
}

/// The live candidates among the `registered` ones (sorted, with `me` added: a
/// candidate that asks is alive), and the others.
pub fn split_live(registered: Vec<(String, bool)>, me: &str) -> (Vec<String>, Vec<String>) {
    let (live, gone): (Vec<_>, Vec<_>) = registered.into_iter().partition(|(_, up)| *up);
    let mut live: Vec<String> = live.into_iter().map(|(id, _)| id).collect();
    if !live.iter().any(|id| id == me) {
        live.push(me.to_owned());
    }
    live.sort();
    live.dedup();
    let gone = gone
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| id != me)
        .collect();
    (live, gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holders_listed_keep_their_mode_and_token() {
        let listed = vec![
            ("a".to_owned(), 4, true),
            ("b".to_owned(), -1, true),
            ("w".to_owned(), 9, false),
        ];
        let held = observed_holders(listed);
        assert_eq!(held.len(), 3);
        assert_eq!(
            (held[0].0.identity.as_str(), held[0].0.token),
            ("a", Some(4))
        );
        assert_eq!(held[0].1, Mode::Shared);
        assert_eq!(held[1].0.token, None);
        assert_eq!(held[2].1, Mode::Exclusive);
    }

    #[test]
    fn the_live_candidates_are_the_present_ones_and_the_asker() {
        let registered = vec![
            ("c".to_owned(), true),
            ("a".to_owned(), false),
            ("b".to_owned(), true),
            ("me".to_owned(), false),
        ];
        let (live, gone) = split_live(registered, "me");
        assert_eq!(live, ["b", "c", "me"]);
        assert_eq!(gone, ["a"]);
        let (live, gone) = split_live(vec![("me".to_owned(), true)], "me");
        assert_eq!((live, gone), (vec!["me".to_owned()], Vec::<String>::new()));
    }
}
