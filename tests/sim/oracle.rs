//! The oracle, in simulated real time: who claimed when, and the checks.
//!
//! A node claims from the real instant its `ClaimStart` is applied until the earlier
//! of its `ClaimEnd` and its deadline mapped to real time through its own clock (a
//! paused node claims until its deadline, as its `/leader` answers by the deadline; a
//! crash ends the claim at the crash).

use std::fmt;

/// Real time, in nanoseconds since the simulation's start.
pub type Ns = u64;

/// One tenure as claimed.
#[derive(Clone, Debug)]
pub struct Claim {
    pub node: usize,
    pub incarnation: u32,
    pub token: u64,
    pub start: Ns,
    pub deadline: Ns,
    pub end: Option<Ns>,
    /// A shared holder's (the read-write family's readers).
    pub shared: bool,
    /// The slot claimed (the slots family).
    pub slot: Option<u32>,
}

impl Claim {
    /// The last instant (exclusive) of the claim.
    pub fn until(&self) -> Ns {
        self.end.unwrap_or(Ns::MAX).min(self.deadline)
    }
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two claims at one instant (invariant 1).
    Overlap {
        first: String,
        second: String,
        for_ns: Ns,
        at: Ns,
    },
    /// A tenure's token not above every earlier one's (invariant 4).
    TokenNotGreater { claim: String, earlier: u64, at: Ns },
    /// Nobody led within the bound after the faults healed.
    NoLeaderAfterHeal { healed_at: Ns, bound: Ns },
    /// A slot nobody claimed within the bound after the faults healed.
    SlotNotHeld { slot: u32, healed_at: Ns, bound: Ns },
    /// A released lease was not taken by another node within the bound.
    ReleaseNotTaken {
        node: usize,
        released_at: Ns,
        bound: Ns,
    },
    /// A release with candidates queued behind it, and no claim by another node
    /// within a few round trips and a stagger (a follower waited on nothing).
    HandoverSlow {
        node: usize,
        released_at: Ns,
        bound: Ns,
    },
    /// A candidate queued when a claim began did not name its holder within the
    /// bound (a follower lost the news of a new holder).
    NewsLate {
        node: usize,
        holder: usize,
        claimed_at: Ns,
        bound: Ns,
    },
}

impl Violation {
    /// The invariant's short name.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Overlap { .. } => "overlap",
            Violation::TokenNotGreater { .. } => "token",
            Violation::NoLeaderAfterHeal { .. } => "no-leader-after-heal",
            Violation::ReleaseNotTaken { .. } => "release-not-taken",
            Violation::HandoverSlow { .. } => "handover-slow",
            Violation::NewsLate { .. } => "news-late",
            Violation::SlotNotHeld { .. } => "slot-not-held",
        }
    }

    /// When it was seen (the trace up to here explains it).
    pub fn at(&self) -> Ns {
        match self {
            Violation::Overlap { at, .. } | Violation::TokenNotGreater { at, .. } => *at,
            Violation::NoLeaderAfterHeal { healed_at, bound }
            | Violation::SlotNotHeld {
                healed_at, bound, ..
            } => healed_at + bound,
            Violation::ReleaseNotTaken {
                released_at, bound, ..
            }
            | Violation::HandoverSlow {
                released_at, bound, ..
            } => released_at + bound,
            Violation::NewsLate {
                claimed_at, bound, ..
            } => claimed_at + bound,
        }
    }
}

pub fn ms(t: Ns) -> String {
    format!("{:.3}ms", t as f64 / 1e6)
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                first,
                second,
                for_ns,
                ..
            } => {
                write!(
                    f,
                    "two claims at once for {}: {first} and {second}",
                    ms(*for_ns)
                )
            }
            Violation::TokenNotGreater { claim, earlier, .. } => {
                write!(f, "token not above an earlier tenure's {earlier}: {claim}")
            }
            Violation::NoLeaderAfterHeal { healed_at, bound } => write!(
                f,
                "no leader within {} of the faults healing at {}",
                ms(*bound),
                ms(*healed_at)
            ),
            Violation::SlotNotHeld {
                slot,
                healed_at,
                bound,
            } => write!(
                f,
                "slot {slot} not claimed within {} of the faults healing at {}",
                ms(*bound),
                ms(*healed_at)
            ),
            Violation::ReleaseNotTaken {
                node,
                released_at,
                bound,
            } => write!(
                f,
                "n{node} released at {} and no other node claimed within {}",
                ms(*released_at),
                ms(*bound)
            ),
            Violation::HandoverSlow {
                node,
                released_at,
                bound,
            } => write!(
                f,
                "n{node} released at {} with candidates queued, and none claimed within {}",
                ms(*released_at),
                ms(*bound)
            ),
            Violation::NewsLate {
                node,
                holder,
                claimed_at,
                bound,
            } => write!(
                f,
                "n{holder} claimed at {} and n{node}, queued, did not name it within {}",
                ms(*claimed_at),
                ms(*bound)
            ),
        }
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n{}#{}{}{} token {} [{} .. {})",
            self.node,
            self.incarnation,
            if self.shared { " (shared)" } else { "" },
            self.slot.map_or(String::new(), |s| format!(" slot {s}")),
            self.token,
            ms(self.start),
            ms(self.until())
        )
    }
}

/// Every claim of a run.
#[derive(Clone, Debug, Default)]
pub struct Oracle {
    pub claims: Vec<Claim>,
    active: Vec<Option<usize>>,
}

impl Oracle {
    pub fn new(nodes: usize) -> Self {
        Oracle {
            claims: Vec::new(),
            active: vec![None; nodes],
        }
    }

    /// A claim begins (`at`: now and its deadline).
    /// (`how`: a shared claim, and the slot claimed.)
    pub fn start(
        &mut self,
        node: usize,
        incarnation: u32,
        token: u64,
        at: (Ns, Ns),
        how: (bool, Option<u32>),
    ) {
        let (now, deadline) = at;
        let (shared, slot) = how;
        self.end(node, now);
        self.active[node] = Some(self.claims.len());
        self.claims.push(Claim {
            node,
            incarnation,
            token,
            start: now,
            deadline,
            end: None,
            shared,
            slot,
        });
    }

    /// Whether a node other than `node` claims at `t`.
    pub fn other_claim_at(&self, node: usize, t: Ns) -> bool {
        (self.claims.iter()).any(|c| c.node != node && c.start <= t && t < c.until())
    }

    pub fn deadline(&mut self, node: usize, deadline: Ns) {
        if let Some(i) = self.active[node] {
            self.claims[i].deadline = self.claims[i].deadline.max(deadline);
        }
    }

    /// The claim ends (its `ClaimEnd`, or a crash).
    pub fn end(&mut self, node: usize, now: Ns) {
        if let Some(i) = self.active[node].take() {
            self.claims[i].end = Some(now);
        }
    }

    /// The claim at `now`, if any: its node and when it began.
    pub fn claim_at(&self, now: Ns) -> Option<(usize, Ns)> {
        self.claims
            .iter()
            .rev()
            .find(|c| c.start <= now && now < c.until())
            .map(|c| (c.node, c.start))
    }

    /// The node claiming at `now`, if any.
    pub fn leader_at(&self, now: Ns) -> Option<usize> {
        self.claims
            .iter()
            .rev()
            .find(|c| c.start <= now && now < c.until())
            .map(|c| c.node)
    }

    /// The safety checks over the whole run: no overlap, tokens strictly growing.
    pub fn check_safety(&self) -> Vec<Violation> {
        if self.claims.iter().any(|c| c.shared) {
            return self.check_read_write();
        }
        let mut slots: Vec<Option<u32>> = self.claims.iter().map(|c| c.slot).collect();
        slots.sort();
        slots.dedup();
        // Each slot is a lease of its own: one holder at a time, its own tokens.
        (slots.into_iter())
            .flat_map(|s| Self::check_exclusive(self.claims.iter().filter(|c| c.slot == s)))
            .collect()
    }

    /// One lease's claims: no overlap, tokens strictly growing.
    fn check_exclusive<'a>(claims: impl Iterator<Item = &'a Claim>) -> Vec<Violation> {
        let mut found = Vec::new();
        let mut by_start: Vec<&Claim> = claims.filter(|c| c.start < c.until()).collect();
        by_start.sort_by_key(|c| c.start);
        let mut latest: Option<&Claim> = None;
        let mut top_token: Option<u64> = None;
        for c in by_start {
            if let Some(l) = latest.filter(|l| c.start < l.until()) {
                found.push(Violation::Overlap {
                    first: l.to_string(),
                    second: c.to_string(),
                    for_ns: l.until().min(c.until()) - c.start,
                    at: c.start,
                });
            }
            if let Some(top) = top_token.filter(|t| c.token <= *t) {
                found.push(Violation::TokenNotGreater {
                    claim: c.to_string(),
                    earlier: top,
                    at: c.start,
                });
            }
            top_token = Some(top_token.map_or(c.token, |t| t.max(c.token)));
            if latest.is_none_or(|l| c.until() > l.until()) {
                latest = Some(c);
            }
        }
        found
    }

    /// The safety of a read-write lock: an exclusive claim overlaps no other claim; a
    /// claim that ended before an exclusive one began has a smaller token, one that
    /// began after it ended a greater one (shared claims may overlap each other, and
    /// their tokens say nothing of each other's order).
    fn check_read_write(&self) -> Vec<Violation> {
        let mut found = Vec::new();
        let live = || self.claims.iter().filter(|c| c.start < c.until());
        for x in live().filter(|c| !c.shared) {
            for t in live().filter(|t| !std::ptr::eq(*t, x)) {
                let (before, after) = (t.until() <= x.start, t.start >= x.until());
                // Two exclusive claims are reported once, from the earlier.
                if !before && !after && (t.shared || t.start >= x.start) {
                    let at = x.start.max(t.start);
                    found.push(Violation::Overlap {
                        first: x.to_string(),
                        second: t.to_string(),
                        for_ns: x.until().min(t.until()) - at,
                        at,
                    });
                }
                let (earlier, later) = if before { (t, x) } else { (x, t) };
                if (before || after) && later.token <= earlier.token {
                    found.push(Violation::TokenNotGreater {
                        claim: later.to_string(),
                        earlier: earlier.token,
                        at: later.start,
                    });
                }
            }
        }
        found
    }

    /// The slots of `count` that nobody claimed within `bound` of `healed_at`.
    pub fn slots_unheld(&self, healed_at: Ns, bound: Ns, count: u32) -> Vec<Violation> {
        (0..count)
            .filter(|&s| {
                !self.claims.iter().any(|c| {
                    c.slot == Some(s) && c.until() > healed_at && c.start <= healed_at + bound
                })
            })
            .map(|slot| Violation::SlotNotHeld {
                slot,
                healed_at,
                bound,
            })
            .collect()
    }

    /// How long after `t` someone first claimed (0 when a claim was running at `t`).
    pub fn first_claim_after(&self, t: Ns) -> Option<Ns> {
        self.claims
            .iter()
            .filter(|c| c.until() > t)
            .map(|c| c.start.saturating_sub(t))
            .min()
    }

    /// The first claim of a node other than `node` that started at or after `t`.
    pub fn other_claim_after(&self, node: usize, t: Ns) -> Option<Ns> {
        self.claims
            .iter()
            .filter(|c| c.node != node && c.start >= t)
            .map(|c| c.start - t)
            .min()
    }
}
