//! The elector: the state machine that turns backend answers into one `Status`.
//!
//! It is the only writer of `Status` and the only owner of time. Its decisions are a
//! pure state machine ([`machine`]: `now` and an event in, effects and the next call
//! or wait out), and [`driver`] runs that machine on tokio against a real backend.
//! The safety invariants of DESIGN §2 it keeps:
//!
//! 1. *At most one claim at a time* follows from 2 and from each backend's compare-
//!    and-act renew: a claim never outlives the lease the store granted.
//! 2. *The local deadline is conservative*: every deadline is the monotonic instant
//!    the acquire/renew request was **sent**, plus the ttl shrunk by the drift factor
//!    and the safety margin ([`Timing::claim_length`]). A reply that arrives at or
//!    after the current deadline never extends it: the candidate steps down instead.
//! 3. *Answers are checked at answer time*: `Status` carries the deadline, and
//!    publishers call [`crate::status::Status::is_leader_at`]; the role flag alone is
//!    never trusted. On stepping down the elector publishes "not leader" **before** it
//!    logs the end of the claim and before it releases, so no observer can see a
//!    leader after release.
//! 4. *Fencing tokens* come from the backend with every acquisition and are published
//!    with the claim; a token not greater than one already claimed is never claimed.
//! 5. *Release only what you hold* is the backend's compare-and-act.
//! 6. *Losing never kills the sidecar*: after a loss the machine campaigns again,
//!    unless `--exit-on-loss` asked for [`Exit::LostLeadership`].
//! 7. *Graceful shutdown releases*: shutdown publishes "not leader", then releases.
//! 9. *The leader hears about its own record*: between renewals the driver waits on
//!    [`crate::backend::Backend::record_lost`] too, and the machine steps down the
//!    moment the store shows the record deleted or taken.
//! 11. *A slow candidate does not block the election*: a candidate whose proof came
//!     too late releases whatever it may hold and sits out one ttl before it
//!     campaigns again. A campaign without an answer in time releases too, so that the
//!     next campaign never adopts what the unanswered one may have taken.
//!
//! Every backend call runs under a timeout (the backend timeout, and never past the
//! current deadline while leading), so a frozen store cannot stall a step-down.
//! `tests/suite/elector_sim.rs` runs many copies of the same machine against simulated
//! stores under every fault, from seeds.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::clock::to_monotonic_ns;
use crate::status::FencingToken;
use crate::timing::Timing;

pub mod driver;
pub mod machine;

pub use driver::{Elector, ElectorParts};

pub use machine::Exit;

/// Things the elector reports that are not part of `Status` (counters, histograms).
pub trait Observer: Send + Sync + 'static {
    fn acquired(&self, _campaign_took: Duration) {}
    fn lost(&self) {}
    fn released(&self) {}
    fn renewed(&self, _ok: bool, _took: Duration) {}
    fn backend_error(&self, _op: &'static str) {}
}

/// An observer that records nothing.
pub struct NoObserver;
impl Observer for NoObserver {}

/// A request to hand leadership over (`POST /release`), answered once released or
/// refused. `cooldown`: how long not to campaign again afterwards. `to`: a switchover
/// (`POST /release?to=ID`): the lease is left to that candidate, which must be alive
/// where the store can tell.
pub struct ReleaseRequest {
    pub reply: oneshot::Sender<Released>,
    pub cooldown: Option<Duration>,
    pub to: Option<String>,
}

/// The answer to a [`ReleaseRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Released {
    /// This candidate led and gave the lease back (to the named candidate, if any).
    Yes,
    /// Not leading (or the tenure ended otherwise meanwhile): nothing was released.
    NotLeader,
    /// A switchover to this candidate itself: nothing to do.
    ToSelf,
    /// A switchover to a candidate the store does not show alive; `live` lists those
    /// it does. Nothing was released.
    NotACandidate { live: Vec<String> },
    /// The store could not list its candidates: nothing was released.
    Unchecked(String),
    /// The store picks the next holder by its own rules (a coordinated Lease): nothing
    /// was released.
    Refused(String),
}

/// The last time the elector loop made progress, for `/healthz`.
#[derive(Debug)]
pub struct Heartbeat {
    last: Mutex<Instant>,
    stuck_after: Duration,
}

impl Heartbeat {
    pub fn new(timing: &Timing) -> Arc<Self> {
        let longest_wait =
            timing.retry_interval.max(timing.renew_interval) + timing.backend_timeout;
        Arc::new(Heartbeat {
            last: Mutex::new(Instant::now()),
            stuck_after: longest_wait * 2 + Duration::from_secs(1),
        })
    }

    pub(crate) fn beat(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = Instant::now();
        }
    }

    /// True while the loop has made progress recently enough.
    pub fn is_alive_at(&self, now: Instant) -> bool {
        self.last
            .lock()
            .map(|last| now.saturating_duration_since(*last) <= self.stuck_after)
            .unwrap_or(false)
    }
}

/// One line of the transition log (JSON). Times are `CLOCK_MONOTONIC` nanoseconds.
#[derive(Serialize)]
struct TransitionRecord<'a> {
    event: &'a str,
    identity: &'a str,
    pid: u32,
    token: FencingToken,
    at_ns: u64,
    /// For `claim_start`: when the acquiring request was sent; for `release`: when the
    /// release was sent (`at_ns` is its answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    sent_ns: Option<u64>,
    /// For `claim_start`: when the wait for a change of holder that led to the
    /// acquiring request ended (the store's notice heard), if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    woke_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    /// With several slots (`--holders`): the slot of the tenure.
    #[serde(skip_serializing_if = "Option::is_none")]
    slot: Option<u32>,
}

/// The times and the reason a transition log line carries beside its own.
#[derive(Default)]
pub(crate) struct Marks<'a> {
    pub sent: Option<Instant>,
    pub woke: Option<Instant>,
    pub deadline: Option<Instant>,
    pub reason: Option<&'a str>,
}

/// Append-only JSON-lines log of claims, for the election checker and post-mortems.
/// Each line is one `write` on an `O_APPEND` file. `claim_start` and `deadline` lines
/// are written *before* the matching `Status` is published, `claim_end` *after* "not
/// leader" is published: either way the logged claim covers every moment the process
/// could have answered "leader", so a process killed at any point never asserted more
/// than its log shows.
pub struct TransitionLog {
    file: Option<std::fs::File>,
    identity: String,
    slot: Option<u32>,
}

impl TransitionLog {
    pub fn open(path: Option<&Path>, identity: &str) -> std::io::Result<Self> {
        let file = match path {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
            None => None,
        };
        Ok(TransitionLog {
            file,
            identity: identity.to_owned(),
            slot: None,
        })
    }

    pub fn disabled() -> Self {
        TransitionLog {
            file: None,
            identity: String::new(),
            slot: None,
        }
    }

    /// The slot the following lines are about (an election of several holders).
    pub(crate) fn set_slot(&mut self, slot: Option<u32>) {
        self.slot = slot;
    }

    pub(crate) fn record(&mut self, event: &str, token: FencingToken, at: Instant, marks: Marks) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let rec = TransitionRecord {
            event,
            identity: &self.identity,
            pid: std::process::id(),
            token,
            at_ns: to_monotonic_ns(at),
            sent_ns: marks.sent.map(to_monotonic_ns),
            woke_ns: marks.woke.map(to_monotonic_ns),
            deadline_ns: marks.deadline.map(to_monotonic_ns),
            reason: marks.reason,
            slot: self.slot,
        };
        let Ok(mut line) = serde_json::to_vec(&rec) else {
            return;
        };
        line.push(b'\n');
        if let Err(e) = file.write_all(&line) {
            tracing::warn!(error = %e, "could not write the transition log");
        }
    }
}

/// Waits, at most `within` in all, until each publisher says (`true`) that it shows
/// "not leader".
pub async fn await_shown(published: &mut [watch::Receiver<bool>], within: Duration) {
    let limit = Instant::now() + within;
    for shown in published {
        match tokio::time::timeout_at(limit, shown.wait_for(|shown| *shown)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => tracing::warn!("a publisher is gone; going on without it"),
            Err(_) => tracing::warn!("a publisher did not show \"not leader\" in time"),
        }
    }
}

#[cfg(test)]
mod tests;
