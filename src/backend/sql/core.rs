//! The SQL campaign as a state machine, shared by PostgreSQL and MySQL: one explicit
//! [`Phase`] (what the last campaign found, or our tenure), moved on by the store's
//! answers, and the decisions taken from it: whether the queue lets a campaign take
//! ([`Tenancy::queue_verdict`]), what the row a take left means
//! ([`Tenancy::after_take`] -> [`Taken`]), how a follower waits ([`Tenancy::wait`] ->
//! [`WaitFor`], [`Tenancy::woke`]), whether the leader's record is still its own
//! ([`Tenancy::still_ours`]), and the bookkeeping of the waiting row and the
//! candidates' listing. No I/O and no clock: `now` is an argument, so every case is a
//! plain test. The backend ([`super::SqlBackend`]) and the dialects do the I/O (the
//! statements, the wake-up connections) and ask this core what each answer means.
//!
//! Invariants kept here:
//! - **a tenure is ours only by its id**: a take's answer makes us the holder only when
//!   the row carries our tenure id; the id is fresh after every release, so a leftover
//!   of an earlier tenure is never adopted;
//! - **tokens only grow**: the floor (the highest token seen) never goes down, and a
//!   negative token is an error, never a token;
//! - **silence needs a live signal**: a follower waits without sending only while the
//!   row is held by a live holder whose session signals its end (another writer's
//!   tenure, shared holders for a writer, a waiting writer's turn for a shared
//!   candidate); a free or expired row is waited on by the notifications and its expiry;
//! - **a frozen waiting writer is passed**: a shared candidate behind a waiting writer
//!   looks once that writer's waiting row goes stale, and a wait that ran out then is a
//!   change.

use std::time::Duration;

use tokio::time::Instant;

use super::queue::{behind_for, behind_woke, grace_left, stale_at, turn};
use super::queue::{Ahead, Turn, Waiting};
use super::{new_tenure_id, QUEUE_TTLS, SHARED};
use crate::backend::token_floor::TokenFloor;
use crate::backend::{BackendError, Campaign, LockMode, Renewal, Wake};
use crate::status::{FencingToken, Holder};

/// The row as one statement saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub holder: String,
    pub tenure: String,
    pub token: i64,
    /// How long until the row expires, by the server's clock (0 when expired).
    pub left_ms: i64,
}

/// What the last campaign found, or our tenure. The row's `expiry` (when the answer
/// showed one) is used once by a wait: a crashed holder sends nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Nobody holds the row as the last answer showed it (free, expired, quarantined,
    /// missing), or no campaign was answered yet: a follower waits by the
    /// notifications, the row's expiry and the retry interval.
    Free { expiry: Option<Instant> },
    /// Another candidate's live tenure holds the row: a follower waits for the holder's
    /// session to end, silently (the dialect's signal).
    Held { expiry: Option<Instant> },
    /// Live shared holders hold the row ([`SHARED`]): a writer waits for their
    /// sessions; a shared candidate waits as on a free row.
    Shared { expiry: Option<Instant> },
    /// A shared candidate kept out by the queue behind a waiting writer (`writer`, its
    /// presence), the row held: it waits for that writer's tenure to end, until the
    /// writer's waiting row goes stale (`stale_at`) at most.
    Behind {
        writer: String,
        stale_at: Option<Instant>,
        expiry: Option<Instant>,
    },
    /// Our tenure: from the take that made us holder until its release.
    Leading,
}

/// How a follower waits, by the phase (the dialects map each to their signal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitFor {
    /// Behind a waiting writer: for its turn (its presence named).
    Turn { writer: String },
    /// A writer kept out by live shared holders: for their sessions.
    Readers,
    /// Another's live tenure: for the holder's session, silently.
    Holder,
    /// Nothing that signals: the notifications, the row's expiry, and the wait's end.
    Notice,
}

/// What the row a take left means for the campaign.
#[derive(Debug)]
pub struct Taken {
    pub campaign: Campaign,
    /// The row is ours: the dialect holds its leader's signal.
    pub acquired: bool,
    /// Our waiting row goes into (or stays in) the queue ([`enqueues`]).
    pub marks: bool,
    /// Shared holders hold and this candidate knew of no queue: look for the shared
    /// holders' table at the next campaign.
    pub look_for_queue: bool,
}

/// What a leader's look at its own record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Still ours, or the look failed (a read that fails says nothing; the renewals
    /// decide then).
    Ours,
    /// Gone, overwritten or taken: the claim ends now.
    Lost,
}

/// Known-wrong rules, each a switch the simulator turns on to show that it catches the
/// rule broken (`tests/suite/elector_sim.rs`); every one is off in the product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flaws {
    /// A row held under our identity is ours, whatever its tenure id.
    pub adopts_own_identity: bool,
    /// A take sends no floor (0), whatever tokens were seen: after the lease row and
    /// the counter row are gone, the next tenure's token starts again at 1 and nothing
    /// fences the old claim.
    pub sends_no_floor: bool,
}

/// This candidate's side of the lease row: its tenure id, the highest token it has
/// seen, and the [`Phase`]. Shared by both dialects.
pub struct Tenancy {
    pub election: String,
    pub identity: String,
    pub ttl: Duration,
    /// How it joins the election (`--mode`).
    pub mode: LockMode,
    /// This tenure's id; rotated on every release, so a leftover of an earlier tenure
    /// is never adopted as a new one.
    pub tenure: String,
    /// The highest token seen; new tokens never go below it.
    pub floor: TokenFloor,
    pub phase: Phase,
    /// Whether this candidate's row is registered in the candidates' table.
    registered: bool,
    /// Whether our waiting row may be in the shared holders' table.
    marked: bool,
    /// Off in the product.
    pub flaws: Flaws,
}

impl Tenancy {
    pub fn new(election: &str, identity: &str, ttl: Duration, mode: LockMode) -> Self {
        Tenancy {
            election: election.to_owned(),
            identity: identity.to_owned(),
            ttl,
            mode,
            tenure: new_tenure_id(),
            floor: TokenFloor::default(),
            phase: Phase::Free { expiry: None },
            registered: false,
            marked: false,
            flaws: Flaws::default(),
        }
    }

    pub fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Whether a campaign made us the holder (until the release).
    pub fn holding(&self) -> bool {
        self.phase == Phase::Leading
    }

    fn shared(&self) -> bool {
        self.mode == LockMode::Shared
    }

    /// A campaign begins: only a campaign that finds another holder lets a follower
    /// wait silently (the row's expiry stays known until then). A wait behind a
    /// waiting writer lasts until the queue is read again.
    pub fn begin(&mut self) {
        if let Phase::Held { expiry } | Phase::Shared { expiry } = self.phase {
            self.phase = Phase::Free { expiry };
        }
    }

    /// The queue's verdict (see [`super::queue`]) from its read (`seen`: the lease row,
    /// how long it has been free, the live waiting candidates; `me`: our presence):
    /// `Some`, the row as a take refused by the queue leaves it, and the nearest
    /// waiting writer ahead; `None`: take. A candidate whose tenure the row is goes on
    /// (a campaign whose answer was lost). The read ends any wait behind a writer.
    pub fn queue_verdict(
        &mut self,
        seen: Option<(LeaseRow, i64, Vec<Waiting>)>,
        me: &str,
    ) -> Option<(LeaseRow, Option<Ahead>)> {
        if let Phase::Behind { expiry, .. } = self.phase {
            self.phase = Phase::Free { expiry };
        }
        let (row, free_ms, waiting) = seen?;
        if row.tenure == self.tenure {
            return None;
        }
        let grace = self.ttl_ms();
        let stale = (row.tenure == SHARED && free_ms < 0).then(|| grace * i64::from(QUEUE_TTLS));
        let Turn::Wait { writer } = turn(self.shared(), me, &waiting, (free_ms, grace), stale)
        else {
            return None;
        };
        Some((kept_row(row, grace_left(free_ms, grace)), writer))
    }

    /// Turns the row a take statement left (or the queue kept: `behind`, the nearest
    /// waiting writer ahead) into the campaign's answer; `queued`: this candidate takes
    /// its turn in the queue.
    pub fn after_take(
        &mut self,
        now: Instant,
        row: Option<LeaseRow>,
        queued: bool,
        behind: Option<&Ahead>,
    ) -> Result<Taken, BackendError> {
        let marks = enqueues(queued, row.as_ref(), &self.tenure);
        let look_for_queue = !queued && row.as_ref().is_some_and(|r| r.tenure == SHARED);
        let campaign = self.judge(now, row, behind)?;
        Ok(Taken {
            acquired: matches!(campaign, Campaign::Acquired { .. }),
            campaign,
            marks,
            look_for_queue,
        })
    }

    /// The campaign's answer from the row, and the phase it leaves.
    fn judge(
        &mut self,
        now: Instant,
        row: Option<LeaseRow>,
        behind: Option<&Ahead>,
    ) -> Result<Campaign, BackendError> {
        let Some(row) = row else {
            // Inserted meanwhile by someone whose row our snapshot did not show: the
            // notification (or the retry) brings the next look.
            self.phase = Phase::Free { expiry: None };
            return Ok(Campaign::Held(None));
        };
        let token = FencingToken::try_from(row.token).map_err(|_| BackendError::Store {
            op: "campaign",
            message: format!("the lease row carries a negative token {}", row.token),
        })?;
        self.floor.raise(token);
        let own = self.flaws.adopts_own_identity && row.holder == self.identity;
        if row.tenure == self.tenure || own {
            self.phase = Phase::Leading;
            return Ok(Campaign::Acquired { token });
        }
        let left = u64::try_from(row.left_ms).unwrap_or(0);
        let expiry = Some(now + Duration::from_millis(left + 2));
        let held = left > 0 && !row.holder.is_empty();
        // Shared holders hold no election's signal: a writer waits for their own
        // sessions' signal instead (see the dialects), a shared candidate by the
        // notifications, the row's expiry and the retry interval.
        self.phase = match (held, row.tenure == SHARED, behind) {
            (false, _, _) => Phase::Free { expiry },
            (true, _, Some(writer)) if self.shared() => Phase::Behind {
                writer: writer.presence.clone(),
                stale_at: stale_at(now, Some(writer)),
                expiry,
            },
            (true, true, _) => Phase::Shared { expiry },
            (true, false, _) => Phase::Held { expiry },
        };
        Ok(Campaign::Held(held.then_some(Holder {
            identity: row.holder,
            token: Some(token),
        })))
    }

    /// Ends this tenure whatever the release statement's fate: the next one gets a
    /// fresh id. Returns the id to release.
    pub fn rotate(&mut self) -> String {
        if self.holding() {
            self.phase = Phase::Free { expiry: None };
        }
        std::mem::replace(&mut self.tenure, new_tenure_id())
    }

    /// The floor a take sends: the highest token seen, so that the statement hands
    /// out none at or below it, and answers a missing row with a quarantine row for a
    /// ttl once tokens were handed out.
    pub fn floor_sent(&self) -> TokenFloor {
        match self.flaws.sends_no_floor {
            true => TokenFloor::default(),
            false => self.floor,
        }
    }

    /// A renew statement's answer: `ours`, the row was still our tenure's.
    pub fn renewal(ours: bool) -> Renewal {
        if ours {
            Renewal::Renewed
        } else {
            Renewal::Lost
        }
    }

    /// A leader's look at the row's tenure (`None`: no row); a failed read says nothing.
    pub fn still_ours<E>(&self, seen: Result<Option<String>, E>) -> Look {
        match seen {
            Ok(Some(t)) if t == self.tenure => Look::Ours,
            Ok(_) => Look::Lost,
            Err(_) => Look::Ours,
        }
    }

    /// A shared holder's look at its own rows (`true`: our row is there and the lease
    /// row still shared); a failed read says nothing.
    pub fn still_shared<E>(seen: Result<bool, E>) -> Look {
        match seen {
            Ok(false) => Look::Lost,
            _ => Look::Ours,
        }
    }

    /// How a follower waits, and for how long at most (`max`, shorter behind a
    /// waiting writer whose row goes stale first), from `now`.
    pub fn wait(&self, max: Duration, now: Instant) -> (WaitFor, Duration) {
        let how = match &self.phase {
            Phase::Behind {
                writer, stale_at, ..
            } => {
                let writer = writer.clone();
                return (WaitFor::Turn { writer }, behind_for(max, *stale_at, now));
            }
            Phase::Shared { .. } if !self.shared() => WaitFor::Readers,
            Phase::Held { .. } => WaitFor::Holder,
            _ => WaitFor::Notice,
        };
        (how, max)
    }

    /// What a wait's end (`wake`, at `now`) tells the elector: a wait behind a writer
    /// that ran out once the writer's row went stale is a change (it looks, and goes
    /// past a frozen writer).
    pub fn woke(&self, wake: Wake, now: Instant) -> Wake {
        match &self.phase {
            Phase::Behind { stale_at, .. } => behind_woke(wake, *stale_at, now),
            _ => wake,
        }
    }

    /// The row's expiry as the last campaign showed it, for one wait to use (and take);
    /// `None` while leading.
    pub fn expiry(&mut self) -> Option<&mut Option<Instant>> {
        match &mut self.phase {
            Phase::Free { expiry }
            | Phase::Held { expiry }
            | Phase::Shared { expiry }
            | Phase::Behind { expiry, .. } => Some(expiry),
            Phase::Leading => None,
        }
    }

    /// Whether this campaign registers the candidate in the candidates' table: at its
    /// first campaign, and after its presence session was opened again (`renewed`: a
    /// prune may have deleted its row meanwhile); never periodically.
    pub fn registers(&mut self, renewed: bool) -> bool {
        if renewed {
            self.registered = false;
        }
        !self.registered
    }

    /// The registration went through.
    pub fn registered(&mut self) {
        self.registered = true;
    }

    /// What to send for our waiting row after a campaign (`marks`: it enqueues;
    /// `done`: it holds, or releases): `Some(true)`, write it; `Some(false)`, delete
    /// it (only when it may be there); `None`, nothing. A write may be there from the
    /// moment it is asked for, whatever becomes of its answer: a campaign cut off by
    /// its deadline between the write and its answer (or before the turn lock that
    /// follows it) leaves the row in the table, first in the queue while our presence
    /// lives, and only a delete that went through ([`Tenancy::marked`]) takes it out.
    pub fn mark_step(&mut self, marks: bool, done: bool) -> Option<bool> {
        let on = marks && !done;
        let unmark = done && self.marked;
        self.marked |= on;
        (on || unmark).then_some(on)
    }

    /// The waiting row's write (`true`) or delete went through.
    pub fn marked(&mut self, on: bool) {
        self.marked = on;
    }
}

/// Whether a candidate whose campaign left `row` writes (or keeps) its waiting row in
/// the queue (see [`super::queue`]): when it uses the queue (`queued`) and the row is
/// not its own tenure's (refused by the row or by the queue).
pub fn enqueues(queued: bool, row: Option<&LeaseRow>, tenure: &str) -> bool {
    queued && row.is_some_and(|r| r.tenure != tenure)
}

/// The row a take refused by the queue leaves: as it stands, but free for nobody
/// until the grace ends when it is free (`grace_left`; see [`grace_left`]).
pub fn kept_row(row: LeaseRow, grace_left: Option<i64>) -> LeaseRow {
    match grace_left {
        Some(left_ms) => LeaseRow {
            holder: String::new(),
            left_ms,
            ..row
        },
        None => row,
    }
}

#[cfg(test)]
mod tests;
