//! What the sidecars logged: their tenures (claims) from the transition logs, and
//! the checks on them: no two claims overlap, tokens strictly grow, nobody panicked.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One tenure as its own process logged it, in CLOCK_MONOTONIC nanoseconds.
#[derive(Clone, Debug)]
pub struct LoggedClaim {
    pub pid: u64,
    pub identity: String,
    pub token: u64,
    pub start: u64,
    /// When the acquiring request was sent.
    pub sent: Option<u64>,
    pub deadline: u64,
    pub end: Option<u64>,
    /// The slot of an election of several holders (`--holders`).
    pub slot: Option<u64>,
}

impl LoggedClaim {
    /// The claim ends at its logged end or its last deadline, whichever is first.
    pub fn until(&self) -> u64 {
        self.end.map_or(self.deadline, |e| e.min(self.deadline))
    }
}

/// Parses transition-log lines into claims keyed by (pid, start): every
/// `claim_start` opens a tenure of its own, and `deadline`/`claim_end` lines belong to
/// that process's latest tenure, so two tenures that carry one token stay two claims
/// (and the token check sees them), instead of the second overwriting the first.
pub fn parse_claims(text: &str, out: &mut BTreeMap<(u64, u64), LoggedClaim>) {
    let mut open: HashMap<u64, (u64, u64)> = HashMap::new();
    for line in text.lines() {
        // A process killed mid-write leaves a torn last line; it never published it.
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(pid), Some(token), Some(at)) =
            (v["pid"].as_u64(), v["token"].as_u64(), v["at_ns"].as_u64())
        else {
            continue;
        };
        match v["event"].as_str() {
            Some("claim_start") => {
                let key = (pid, at);
                open.insert(pid, key);
                let deadline = v["deadline_ns"]
                    .as_u64()
                    .expect("claim_start has a deadline");
                out.insert(
                    key,
                    LoggedClaim {
                        pid,
                        identity: v["identity"].as_str().unwrap_or("").to_owned(),
                        token,
                        start: at,
                        sent: v["sent_ns"].as_u64(),
                        deadline,
                        end: None,
                        slot: v["slot"].as_u64(),
                    },
                );
            }
            Some("deadline") => {
                let c = open
                    .get(&pid)
                    .and_then(|k| out.get_mut(k))
                    .expect("deadline after claim_start");
                assert_eq!(c.token, token, "a deadline line of another tenure: {line}");
                let d = v["deadline_ns"].as_u64().expect("deadline value");
                assert!(d > c.deadline, "a deadline moved backwards: {line}");
                c.deadline = d;
            }
            Some("claim_end") => {
                let c = open
                    .get(&pid)
                    .and_then(|k| out.get_mut(k))
                    .expect("claim_end after claim_start");
                assert_eq!(c.token, token, "a claim_end line of another tenure: {line}");
                c.end = Some(at);
            }
            _ => {}
        }
    }
}

/// Every slot's claims; `to_host(pid, ns)` maps a process's logged time to the host's
/// monotonic clock (the identity unless its clocks were faked).
pub(super) fn read_claims(
    dir: &Path,
    slots: usize,
    killed: &HashMap<u64, u64>,
    to_host: &dyn Fn(u64, u64) -> u64,
) -> Vec<LoggedClaim> {
    let mut all = BTreeMap::new();
    for slot in 0..slots {
        let text =
            std::fs::read_to_string(dir.join(format!("slot-{slot}.jsonl"))).unwrap_or_default();
        parse_claims(&text, &mut all);
    }
    for c in all.values_mut() {
        let pid = c.pid;
        c.start = to_host(pid, c.start);
        c.sent = c.sent.map(|t| to_host(pid, t));
        c.deadline = to_host(pid, c.deadline);
        c.end = c.end.map(|t| to_host(pid, t));
        if let Some(&at) = killed.get(&c.pid) {
            if c.start < at {
                c.end = Some(c.end.map_or(at, |e| e.min(at)));
            }
        }
    }
    let mut claims: Vec<LoggedClaim> = all.into_values().collect();
    claims.sort_by_key(|c| c.start);
    claims
}

/// (a) No two claims overlap on the host's monotonic clock.
pub fn check_claims_never_overlap(claims: &[LoggedClaim]) {
    check_claims_never_overlap_but(claims, &[], 0);
}

/// (a), except that a claim whose record was tampered with (a time in `tampered`
/// falls inside it) may overlap the next by up to `tolerance_ns`.
pub fn check_claims_never_overlap_but(claims: &[LoggedClaim], tampered: &[u64], tolerance_ns: u64) {
    let mut latest: Option<&LoggedClaim> = None;
    for c in claims {
        assert!(
            c.start < c.deadline,
            "a claim started at or after its own deadline: {c:?}"
        );
        if let Some(prev) = latest {
            let excused = if tampered
                .iter()
                .any(|&t| prev.start <= t && t <= prev.until())
            {
                tolerance_ns
            } else {
                0
            };
            assert!(
                c.start + excused >= prev.until(),
                "two leaders at once: {prev:?} held until {} but {c:?} started at {} ({} µs overlap)",
                prev.until(),
                c.start,
                (prev.until() - c.start) / 1000
            );
        }
        if latest.is_none_or(|p| c.until() > p.until()) {
            latest = Some(c);
        }
    }
}

/// (c) Later tenures carry greater tokens.
pub fn check_tokens_strictly_grow(claims: &[LoggedClaim]) {
    for pair in claims.windows(2) {
        assert!(
            pair[1].token > pair[0].token,
            "fencing token did not grow: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
}

pub(super) fn check_no_panics(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "stderr") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                !text.contains("panicked"),
                "{} panicked:\n{text}",
                path.display()
            );
        }
    }
}

#[cfg(test)]
mod self_test {
    use super::*;

    fn claim(pid: u64, token: u64, start: u64, deadline: u64, end: Option<u64>) -> LoggedClaim {
        LoggedClaim {
            pid,
            identity: String::new(),
            token,
            start,
            sent: None,
            deadline,
            end,
            slot: None,
        }
    }

    #[test]
    #[should_panic(expected = "two leaders at once")]
    fn the_checker_catches_overlapping_claims() {
        check_claims_never_overlap(&[claim(1, 1, 0, 100, None), claim(2, 2, 99, 200, None)]);
    }

    #[test]
    fn a_claim_ends_at_its_end_or_its_deadline() {
        check_claims_never_overlap(&[claim(1, 1, 0, 100, Some(50)), claim(2, 2, 60, 200, None)]);
        check_claims_never_overlap(&[claim(1, 1, 0, 100, Some(150)), claim(2, 2, 101, 200, None)]);
    }

    #[test]
    #[should_panic(expected = "fencing token did not grow")]
    fn the_checker_catches_tokens_that_do_not_grow() {
        check_tokens_strictly_grow(&[claim(1, 5, 0, 10, None), claim(2, 5, 20, 30, None)]);
    }

    #[test]
    #[should_panic(expected = "fencing token did not grow")]
    fn two_tenures_of_one_process_with_one_token_are_two_claims() {
        // Before claims were keyed by (pid, start), the second tenure replaced the
        // first and the repeated token went unseen.
        let log = [
            r#"{"event":"claim_start","pid":7,"token":4,"at_ns":100,"deadline_ns":200}"#,
            r#"{"event":"claim_end","pid":7,"token":4,"at_ns":150}"#,
            r#"{"event":"claim_start","pid":7,"token":4,"at_ns":300,"deadline_ns":400}"#,
            r#"{"event":"claim_end","pid":7,"token":4,"at_ns":350}"#,
        ]
        .join("\n");
        let mut claims = BTreeMap::new();
        parse_claims(&log, &mut claims);
        assert_eq!(claims.len(), 2, "both tenures are kept");
        let claims: Vec<LoggedClaim> = claims.into_values().collect();
        check_tokens_strictly_grow(&claims);
    }
}
