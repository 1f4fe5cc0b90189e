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
    /// it (only when it may be there); `None`, nothing.
    pub fn mark_step(&self, marks: bool, done: bool) -> Option<bool> {
        let on = marks && !done;
        let unmark = done && self.marked;
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
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    fn row(holder: &str, tenure: &str, token: i64, left_ms: i64) -> LeaseRow {
        LeaseRow {
            holder: holder.to_owned(),
            tenure: tenure.to_owned(),
            token,
            left_ms,
        }
    }

    fn tenancy(mode: LockMode) -> Tenancy {
        Tenancy::new("e", "me", TTL, mode)
    }

    fn ahead(presence: &str, stale_in_ms: Option<i64>) -> Ahead {
        Ahead {
            presence: presence.to_owned(),
            stale_in_ms,
        }
    }

    fn waiting(presence: &str, writer: bool, arrived: i64) -> Waiting {
        Waiting {
            presence: presence.to_owned(),
            writer,
            arrived,
            lapsed_ms: 0,
        }
    }

    fn at(now: Instant, ms: u64) -> Option<Instant> {
        Some(now + Duration::from_millis(ms))
    }

    /// The campaign a take's answer makes (no queue).
    fn judged(t: &mut Tenancy, now: Instant, r: Option<LeaseRow>) -> Campaign {
        t.after_take(now, r, false, None)
            .expect("an answer")
            .campaign
    }

    fn named(identity: &str, token: u64) -> Campaign {
        Campaign::Held(Some(Holder {
            identity: identity.to_owned(),
            token: Some(token),
        }))
    }

    /// The campaign's answer from the row the take left: ours (with its token), held
    /// by a live other (named, with the wait until its expiry), or held by nobody (an
    /// expired or free row, or none); the floor only grows, and a negative token is
    /// an error.
    #[test]
    fn a_campaign_is_judged_by_the_row_the_take_left() {
        let now = Instant::now();
        let mut t = tenancy(LockMode::Election);
        let mine = t.tenure.clone();
        let c = judged(&mut t, now, Some(row("me", &mine, 7, 10_000)));
        assert_eq!(c, Campaign::Acquired { token: 7 });
        assert!(t.holding());
        assert_eq!(t.floor.get(), 7);
        assert_eq!(
            judged(&mut t, now, Some(row("b", "x", 9, 500))),
            named("b", 9)
        );
        assert_eq!(
            t.phase,
            Phase::Held {
                expiry: at(now, 502)
            }
        );
        assert_eq!(t.floor.get(), 9);
        // Expired, or free: nobody is named, and nobody holds it.
        for (holder, left) in [("b", 0), ("", 300)] {
            let c = judged(&mut t, now, Some(row(holder, "x", 3, left)));
            assert_eq!(c, Campaign::Held(None), "{holder:?} {left}");
            let expiry = at(now, u64::try_from(left).unwrap() + 2);
            assert_eq!(t.phase, Phase::Free { expiry }, "{holder:?} {left}");
        }
        // A lower token never lowers the floor, and a take sends it.
        assert_eq!(t.floor.get(), 9);
        assert_eq!(t.floor_sent().get(), 9);
        t.flaws.sends_no_floor = true;
        assert_eq!(t.floor_sent().get(), 0, "the known-wrong rule sends none");
        t.flaws.sends_no_floor = false;
        let before = t.phase.clone();
        let negative = t.after_take(now, Some(row("b", "x", -1, 500)), false, None);
        assert!(negative.is_err());
        assert_eq!(t.phase, before, "an answer in error leaves the phase");
        assert_eq!(judged(&mut t, now, None), Campaign::Held(None));
        assert_eq!(t.phase, Phase::Free { expiry: None });
    }

    /// A row that shared holders hold is held, and named: a writer waits for their
    /// sessions, a shared candidate by the notifications and the row's expiry; an
    /// expired shared row holds nobody.
    #[test]
    fn a_shared_row_keeps_writers_waiting_for_the_readers() {
        let now = Instant::now();
        for (mode, wait) in [
            (LockMode::Election, WaitFor::Readers),
            (LockMode::Exclusive, WaitFor::Readers),
            (LockMode::Shared, WaitFor::Notice),
        ] {
            let mut t = tenancy(mode);
            let c = judged(&mut t, now, Some(row("r-1", SHARED, 5, 800)));
            assert_eq!(c, named("r-1", 5));
            assert_eq!(
                t.phase,
                Phase::Shared {
                    expiry: at(now, 802)
                }
            );
            assert_eq!(t.wait(TTL, now).0, wait, "{mode:?}");
            judged(&mut t, now, Some(row("w", "x", 6, 800)));
            assert_eq!(t.wait(TTL, now).0, WaitFor::Holder, "{mode:?}");
            judged(&mut t, now, Some(row("r-1", SHARED, 6, 0)));
            assert_eq!(t.wait(TTL, now).0, WaitFor::Notice, "expired: {mode:?}");
        }
    }

    /// A campaign that begins drops the silent wait of the last one (its expiry stays
    /// known); a wait behind a writer lasts until the queue is read again; our tenure
    /// stays ours.
    #[test]
    fn a_campaign_begins_without_a_silent_wait() {
        let now = Instant::now();
        let mut t = tenancy(LockMode::Shared);
        t.phase = Phase::Held { expiry: at(now, 5) };
        t.begin();
        assert_eq!(t.phase, Phase::Free { expiry: at(now, 5) });
        assert_eq!(t.wait(TTL, now).0, WaitFor::Notice);
        t.phase = Phase::Shared { expiry: None };
        t.begin();
        assert_eq!(t.phase, Phase::Free { expiry: None });
        let behind = Phase::Behind {
            writer: "w".to_owned(),
            stale_at: None,
            expiry: at(now, 7),
        };
        t.phase = behind.clone();
        t.begin();
        assert_eq!(t.phase, behind);
        assert_eq!(t.queue_verdict(None, "me"), None);
        assert_eq!(t.phase, Phase::Free { expiry: at(now, 7) });
        t.phase = Phase::Leading;
        t.begin();
        assert!(t.holding());
    }

    /// The queue keeps a candidate out when others are ahead of it: the row comes back
    /// as it stands (a free one nobody's until the grace ends), with the nearest
    /// writer ahead; its own tenure's row, an empty read, or its turn lets it take.
    #[test]
    fn the_queue_keeps_a_candidate_out_behind_those_ahead() {
        let mut t = tenancy(LockMode::Shared);
        let q = vec![waiting("w1", true, 5), waiting("me", false, 9)];
        let held = (row("b", "x", 4, 900), -1, q.clone());
        let (kept, writer) = t.queue_verdict(Some(held), "me").expect("behind w1");
        assert_eq!(kept, row("b", "x", 4, 900));
        assert_eq!(writer, Some(ahead("w1", None)));
        let free = (row("", "", 4, 0), 300, q.clone());
        let (kept, _) = t.queue_verdict(Some(free), "me").expect("w1 first");
        assert_eq!(kept, row("", "", 4, 9_700));
        let mine = row("me", &t.tenure.clone(), 4, 900);
        assert_eq!(t.queue_verdict(Some((mine, -1, q.clone())), "me"), None);
        assert_eq!(
            t.queue_verdict(Some((row("b", "x", 4, 900), -1, q)), "w1"),
            None
        );
        let mut writer = tenancy(LockMode::Exclusive);
        let q = vec![waiting("r1", false, 5)];
        let turn = writer.queue_verdict(Some((row("", "", 4, 0), 10, q)), "w2");
        assert_eq!(
            turn,
            Some((row("", "", 4, 9_990), None)),
            "a writer waits for all ahead"
        );
    }

    /// Beside shared holders, a waiting writer's row counts only until it goes stale
    /// (a few ttls past its expiry); the shared candidate behind it learns when.
    #[test]
    fn a_stale_waiting_writer_keeps_nobody_out_beside_shared_holders() {
        let mut t = tenancy(LockMode::Shared);
        let stale = t.ttl_ms() * i64::from(QUEUE_TTLS);
        let lapsed = |ms| Waiting {
            lapsed_ms: ms,
            ..waiting("w1", true, 5)
        };
        let shared = |q| Some((row("r", SHARED, 4, 900), -1, q));
        assert_eq!(t.queue_verdict(shared(vec![lapsed(stale + 1)]), "me"), None);
        let (_, writer) = t
            .queue_verdict(shared(vec![lapsed(100)]), "me")
            .expect("kept");
        assert_eq!(writer, Some(ahead("w1", Some(stale - 100))));
        // A writer's row holds: no staleness counts.
        let (_, writer) = t
            .queue_verdict(
                Some((row("b", "x", 4, 900), -1, vec![lapsed(stale + 1)])),
                "me",
            )
            .expect("kept by an old writer");
        assert_eq!(writer, Some(ahead("w1", None)));
    }

    /// A shared candidate kept out behind a waiting writer, the row held, waits for the
    /// writer's turn until its row goes stale, and a quiet end then is a change; kept
    /// out of a free row, or as a writer, it waits as without the queue.
    #[test]
    fn a_shared_candidate_behind_a_writer_waits_for_its_turn() {
        let now = Instant::now();
        let w1 = ahead("w1", Some(3000));
        let mut t = tenancy(LockMode::Shared);
        assert!(t
            .after_take(now, Some(row("r", SHARED, 4, 900)), true, Some(&w1))
            .is_ok());
        let stale = at(now, 3001);
        assert_eq!(
            t.phase,
            Phase::Behind {
                writer: "w1".to_owned(),
                stale_at: stale,
                expiry: at(now, 902)
            }
        );
        let turn = |ms| {
            (
                WaitFor::Turn {
                    writer: "w1".to_owned(),
                },
                Duration::from_millis(ms),
            )
        };
        assert_eq!(t.wait(TTL, now), turn(3001));
        assert_eq!(t.wait(Duration::from_secs(2), now), turn(2000));
        let later = now + Duration::from_secs(4);
        assert_eq!(t.wait(TTL, later), turn(0));
        assert_eq!(t.woke(Wake::Quiet, later), Wake::Changed);
        assert_eq!(t.woke(Wake::Quiet, now), Wake::Quiet);
        assert_eq!(t.woke(Wake::Waiting, later), Wake::Waiting);
        assert!(t
            .after_take(now, Some(row("", "", 4, 900)), true, Some(&w1))
            .is_ok());
        assert_eq!(
            t.wait(TTL, now).0,
            WaitFor::Notice,
            "a free row kept by the queue"
        );
        let mut writer = tenancy(LockMode::Exclusive);
        assert!(writer
            .after_take(now, Some(row("b", "x", 4, 900)), true, Some(&w1))
            .is_ok());
        assert_eq!(writer.wait(TTL, now), (WaitFor::Holder, TTL));
        assert_eq!(writer.woke(Wake::Quiet, later), Wake::Quiet);
    }

    /// A candidate that uses the queue writes its waiting row whenever its campaign
    /// left a row that is not its tenure's; one that knows of no queue looks for it
    /// once shared holders show.
    #[test]
    fn refused_candidates_queue_up() {
        let now = Instant::now();
        let mut t = tenancy(LockMode::Exclusive);
        let mine = t.tenure.clone();
        for other in [row("r", SHARED, 3, 500), row("w", "x", 3, 0)] {
            assert!(enqueues(true, Some(&other), &mine), "{other:?}");
            assert!(!enqueues(false, Some(&other), &mine), "{other:?}");
        }
        assert!(!enqueues(true, Some(&row("me", &mine, 3, 500)), &mine));
        assert!(!enqueues(true, None, &mine));
        let taken = t
            .after_take(now, Some(row("r", SHARED, 3, 500)), true, None)
            .unwrap();
        assert!(taken.marks && !taken.look_for_queue);
        let taken = t
            .after_take(now, Some(row("r", SHARED, 3, 500)), false, None)
            .unwrap();
        assert!(!taken.marks && taken.look_for_queue);
        let taken = t
            .after_take(now, Some(row("w", "x", 3, 500)), false, None)
            .unwrap();
        assert!(!taken.marks && !taken.look_for_queue);
        let taken = t
            .after_take(now, Some(row("me", &mine, 3, 500)), true, None)
            .unwrap();
        assert!(!taken.marks && taken.acquired);
    }

    /// The waiting row is written while refused, deleted once held or released (only
    /// when it may be there), and nothing is sent otherwise.
    #[test]
    fn the_waiting_row_is_written_while_refused_and_deleted_once_done() {
        let mut t = tenancy(LockMode::Exclusive);
        assert_eq!(t.mark_step(false, false), None);
        assert_eq!(t.mark_step(false, true), None, "never written");
        assert_eq!(t.mark_step(true, false), Some(true));
        t.marked(true);
        assert_eq!(
            t.mark_step(true, false),
            Some(true),
            "written again at each look"
        );
        assert_eq!(t.mark_step(false, true), Some(false));
        assert_eq!(t.mark_step(true, true), Some(false), "held: deleted");
        t.marked(false);
        assert_eq!(t.mark_step(false, true), None);
    }

    /// A candidate registers at its first campaign and after its presence came back,
    /// never otherwise; a failed registration is tried again.
    #[test]
    fn a_candidate_registers_once_per_presence() {
        let mut t = tenancy(LockMode::Election);
        assert!(t.registers(false));
        assert!(t.registers(false), "until it went through");
        t.registered();
        assert!(!t.registers(false));
        assert!(t.registers(true));
        t.registered();
        assert!(!t.registers(false));
    }

    /// The leader's look: its tenure in the row is ours; another tenure, or no row,
    /// ends the claim; a failed read says nothing.
    #[test]
    fn a_leader_looks_for_its_own_tenure() {
        let t = tenancy(LockMode::Election);
        let mine = Ok::<_, ()>(Some(t.tenure.clone()));
        assert_eq!(t.still_ours(mine), Look::Ours);
        assert_eq!(t.still_ours(Ok::<_, ()>(Some("x".to_owned()))), Look::Lost);
        assert_eq!(t.still_ours(Ok::<_, ()>(None)), Look::Lost);
        assert_eq!(t.still_ours(Err::<Option<String>, _>(())), Look::Ours);
        assert_eq!(Tenancy::still_shared(Ok::<_, ()>(true)), Look::Ours);
        assert_eq!(Tenancy::still_shared(Ok::<_, ()>(false)), Look::Lost);
        assert_eq!(Tenancy::still_shared(Err::<bool, _>(())), Look::Ours);
        assert_eq!(Tenancy::renewal(true), Renewal::Renewed);
        assert_eq!(Tenancy::renewal(false), Renewal::Lost);
    }

    /// A tenure ends with a fresh id, and the next campaign cannot adopt the old one;
    /// a follower's release keeps what it waits for.
    #[test]
    fn a_tenure_ends_with_a_fresh_id() {
        let now = Instant::now();
        let mut t = tenancy(LockMode::Election);
        let first = t.tenure.clone();
        assert!(t
            .after_take(now, Some(row("me", &first, 3, 900)), false, None)
            .is_ok());
        assert_eq!(t.rotate(), first);
        assert!(!t.holding());
        assert_eq!(t.phase, Phase::Free { expiry: None });
        assert_ne!(t.tenure, first);
        assert_eq!(t.tenure.len(), 32);
        let c = t.after_take(now, Some(row("me", &first, 3, 900)), false, None);
        assert!(
            matches!(
                c,
                Ok(Taken {
                    acquired: false,
                    ..
                })
            ),
            "{c:?}"
        );
        t.phase = Phase::Held { expiry: at(now, 9) };
        t.rotate();
        assert_eq!(t.phase, Phase::Held { expiry: at(now, 9) });
        assert_eq!(t.ttl_ms(), 10_000);
    }

    /// The row's expiry is there for one wait to take while following, never leading.
    #[test]
    fn the_rows_expiry_is_for_a_follower_to_wait_by() {
        let now = Instant::now();
        let mut t = tenancy(LockMode::Election);
        assert!(t
            .after_take(now, Some(row("b", "x", 3, 98)), false, None)
            .is_ok());
        assert_eq!(t.expiry().and_then(|e| e.take()), at(now, 100));
        assert_eq!(t.expiry().and_then(|e| e.take()), None);
        t.phase = Phase::Leading;
        assert!(t.expiry().is_none());
    }

    /// A row kept by the queue: a free one is nobody's until the grace ends; a held
    /// one stays as it is.
    #[test]
    fn a_row_kept_by_the_queue_is_free_for_nobody_until_the_grace_ends() {
        assert_eq!(kept_row(row("", "", 4, 0), Some(700)), row("", "", 4, 700));
        assert_eq!(
            kept_row(row("b", "x", 4, 0), Some(700)),
            row("", "x", 4, 700)
        );
        assert_eq!(kept_row(row("b", "x", 4, 300), None), row("b", "x", 4, 300));
    }
}
