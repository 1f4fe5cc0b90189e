//! The SQL core's unit tests: every decision driven by plain values.

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

/// A write of the waiting row that was sent and never answered (the campaign cut off
/// by its deadline, between the write and its answer or before the turn lock) may
/// still have landed: the row is deleted once the candidate holds, or releases. Kept,
/// it would name the holder as the first waiting candidate while its presence lives,
/// and after its release the queue would keep every other writer out for the grace
/// while the releasing candidate, first in it, takes the row back.
#[test]
fn a_waiting_row_write_never_answered_is_deleted_once_held() {
    let mut t = tenancy(LockMode::Exclusive);
    assert_eq!(t.mark_step(true, false), Some(true));
    // No answer: the campaign was cut off.
    assert_eq!(
        t.mark_step(false, true),
        Some(false),
        "may be there: deleted"
    );
    t.marked(false);
    assert_eq!(t.mark_step(false, true), None, "deleted: nothing to send");
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
