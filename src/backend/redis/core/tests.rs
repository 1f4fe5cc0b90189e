//! The Redis core's unit tests: every decision driven by plain values.

use super::*;

const TTL: Duration = Duration::from_millis(3_000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A candidate with tracking on (ttl 3 s, renewals every second).
fn core() -> Core {
    let mut c = Core::new(TTL, ms(1_000), LockMode::Election);
    c.follower_tracking(true);
    c
}

fn take(won: i64, value: &str, pttl: i64, why: i64) -> Take {
    Take {
        won,
        value: value.to_owned(),
        pttl,
        why,
        readers: Vec::new(),
    }
}

fn held(identity: &str, token: u64) -> Next {
    Next::Held(Some(Holder {
        identity: identity.to_owned(),
        token: Some(token),
    }))
}

#[test]
fn a_take_that_came_too_late_changes_nothing() {
    let mut c = core();
    let t0 = Instant::now();
    assert_eq!(
        c.after_take(take(0, "n|5|b", 2_000, 0), t0, t0),
        held("b", 5)
    );
    let before = format!("{:?}", c.phase);
    let late = c.after_take(take(REFUSED, "n|9|c", 2_000, 3), t0, t0 + ms(5));
    assert_eq!(late, Next::TooLate);
    assert_eq!(c.floor.get(), 5, "a refused take raised the floor");
    assert_eq!(
        format!("{:?}", c.phase),
        before,
        "a refused take moved the phase"
    );
}

#[test]
fn a_won_take_leads_only_once_the_tracking_read_finds_it_ours() {
    let mut c = core();
    let t0 = Instant::now();
    let next = c.after_take(take(1, "n|7|a", -1, 0), t0, t0);
    assert_eq!(next, Next::Claim { token: 7 });
    assert_eq!(c.floor.get(), 7);
    assert_eq!(c.value(), Some("n|7|a"));
    assert_eq!(c.to_announce(), None, "announced before the tracking read");
    assert!(!c.arms_baton(), "a holder waits for no baton");
    assert!(c.claimed(true));
    c.own_tracking();
    assert_eq!(c.to_announce(), Some("n|7|a"));
    c.announced_sent();
    assert_eq!(
        c.to_announce(),
        None,
        "announced twice once the server took it"
    );
    // Taken between the take and the tracking read: not ours to claim.
    let mut c = core();
    c.after_take(take(1, "n|8|a", -1, 0), t0, t0);
    assert!(!c.claimed(false));
    assert!(matches!(c.phase, Phase::Idle));
    assert_eq!(c.value(), None);
    // A won value without a token is no tenure.
    let mut c = core();
    let no_token = c.after_take(take(1, "n|x|a", -1, 0), t0, t0);
    assert_eq!(no_token, Next::NoToken("n|x|a".into()));
    assert_eq!(c.value(), None);
}

#[test]
fn a_take_sends_the_highest_token_seen_as_its_floor() {
    let mut c = core();
    let t0 = Instant::now();
    assert_eq!(c.floor_sent(), 0, "no token seen yet");
    c.after_take(take(0, "n|9|b", 2_000, 0), t0, t0);
    c.after_take(take(0, "n|4|a", 2_000, 0), t0, t0);
    assert_eq!(c.floor_sent(), 9);
    c.flaws.sends_no_floor = true;
    assert_eq!(c.floor_sent(), 0, "the known-wrong rule sends none");
}

#[test]
fn tokens_never_go_below_the_highest_seen() {
    let mut c = core();
    let t0 = Instant::now();
    c.after_take(take(0, "n|9|b", 2_000, 0), t0, t0);
    c.after_take(take(0, "n|4|a", 2_000, 0), t0, t0);
    assert_eq!(c.floor.get(), 9);
    // A former holder's announcement, delayed past its successor's take.
    assert_eq!(c.follow_announced("n|8|a", t0), None);
    assert_eq!(c.floor.get(), 9);
    let followed = c.follow_announced("n|10|c", t0).expect("followed");
    assert_eq!(followed.token, Some(10));
    assert_eq!(c.floor.get(), 10);
}

#[test]
fn a_follower_of_a_tracked_holder_looks_when_its_renewal_is_late_or_its_key_expires() {
    let mut c = core();
    let (read_at, now) = (Instant::now(), Instant::now() + ms(4));
    assert_eq!(
        c.after_take(take(0, "n|5|b", 2_000, 0), read_at, now),
        held("b", 5)
    );
    // Due at the read's expiry (2 s, 2 ms after), sooner than 9/4 of the interval.
    assert_eq!(
        c.wait(),
        WaitFor::Renewals {
            due: read_at + ms(2_002)
        }
    );
    assert!(c.arms_baton());
    // A holder read with its full ttl left: due when its renewal is late.
    c.after_take(take(0, "n|5|b", 3_000, 0), read_at, now);
    assert_eq!(
        c.wait(),
        WaitFor::Renewals {
            due: read_at + ms(2_250)
        }
    );
}

#[test]
fn an_untracked_follower_waits_for_the_holders_expiry_once() {
    let mut c = Core::new(TTL, ms(1_000), LockMode::Election);
    let (read_at, now) = (Instant::now(), Instant::now() + ms(4));
    c.after_take(take(0, "n|5|b", 2_000, 0), read_at, now);
    assert_eq!(
        c.wait(),
        WaitFor::Notices {
            hint: Some(now + ms(2_002))
        }
    );
    assert_eq!(
        c.wait(),
        WaitFor::Notices { hint: None },
        "the hint used twice"
    );
    // Tracking lost: the same follower waits on its notices.
    let mut c = core();
    c.after_take(take(0, "n|5|b", 2_000, 0), read_at, now);
    c.tracking.on_push(&redis::PushKind::Disconnection);
    assert!(matches!(c.wait(), WaitFor::Notices { hint: Some(_) }));
    // A free lock: nothing to follow, no time to look by itself.
    let mut c = core();
    assert_eq!(
        c.after_take(take(0, "", -2, 0), read_at, now),
        Next::Held(None)
    );
    assert_eq!(c.wait(), WaitFor::Notices { hint: None });
}

#[test]
fn renewals_at_their_cadence_keep_a_follower_quiet() {
    let mut c = core();
    let t0 = Instant::now();
    c.after_take(take(0, "n|5|b", 3_000, 0), t0, t0);
    let never = || -> Duration { panic!("no stagger for a renewal") };
    assert_eq!(c.on_alive_push(t0 + ms(1_000), never), Some(Wake::Quiet));
    // The renewal moved the last sign and the expiry on.
    assert_eq!(
        c.wait(),
        WaitFor::Renewals {
            due: t0 + ms(3_250)
        }
    );
    // None by 9/4 of the interval: the holder stopped renewing.
    assert_eq!(c.on_alive_push(t0 + ms(3_300), never), Some(Wake::Changed));
}

#[test]
fn a_push_too_soon_staggers_the_look_unless_news_comes_first() {
    let mut c = core();
    let t0 = Instant::now();
    c.after_take(take(0, "n|5|b", 3_000, 0), t0, t0);
    let WaitFor::Renewals { due } = c.wait() else {
        panic!("not following the renewals")
    };
    let max = t0 + ms(10_000);
    assert_eq!(c.on_alive_push(t0 + ms(100), || ms(300)), None);
    assert_eq!(c.renewals_until(max.min(due)), t0 + ms(400));
    // A second push within the stagger does not move it.
    assert_eq!(c.on_alive_push(t0 + ms(200), || ms(999)), None);
    assert_eq!(c.renewals_until(max.min(due)), t0 + ms(400));
    assert_eq!(c.on_timer(t0 + ms(400), due), Wake::Changed);
    assert_eq!(c.renewals_until(max), max, "the stagger outlived its look");
    // Before it is due and without a stagger: the wait's `max`.
    assert_eq!(c.on_timer(t0 + ms(500), due), Wake::Waiting);
    assert_eq!(c.on_timer(due, due), Wake::Changed);
    // A campaign forgets the stagger and the last sign.
    assert_eq!(c.on_alive_push(t0 + ms(100), || ms(300)), None);
    assert!(!c.begin(), "tracking on: no new tracking");
    assert_eq!(c.renewals_until(max), max);
    assert!(matches!(c.wait(), WaitFor::Notices { .. }));
}

#[test]
fn an_announcement_is_followed_without_a_look_by_a_follower_only() {
    let mut c = core();
    let t0 = Instant::now();
    let h = c.follow_announced("n|3|b", t0).expect("followed");
    assert_eq!(h.identity, "b");
    assert_eq!(
        c.wait(),
        WaitFor::Renewals {
            due: t0 + ms(2_250)
        }
    );
    // Names nobody: a look settles it.
    assert_eq!(c.follow_announced("quarantine|4|", t0), None);
    // A candidate that led since its last look looks once.
    let mut c = core();
    c.after_take(take(1, "n|7|a", -1, 0), t0, t0);
    assert_eq!(c.follow_announced("n|8|b", t0), None, "a holder followed");
    c.claimed(true);
    c.own_tracking();
    c.released();
    c.tracking.on = false;
    assert!(matches!(c.phase, Phase::Idle));
    assert_eq!(
        c.follow_announced("n|8|b", t0),
        None,
        "a former holder followed"
    );
    // Its next look turns the follower's tracking on, and then it follows.
    assert!(c.begin());
    c.follower_tracking(true);
    assert!(c.follow_announced("n|9|b", t0).is_some());
}

#[test]
fn a_holders_tracking_is_replaced_by_a_followers_at_the_next_look() {
    let mut c = core();
    assert!(!c.begin());
    c.own_tracking();
    assert!(c.begin(), "a holder's tracking kept by a follower");
    c.follower_tracking(false);
    assert!(c.begin(), "refused tracking not asked again");
}

#[test]
fn kept_out_of_the_read_write_lock_it_waits_quietly_and_hears_its_channel() {
    let mut c = core();
    let t0 = Instant::now();
    let next = c.after_take(take(0, "r|6|", 2_000, 3), t0, t0);
    assert_eq!(next, Next::Held(None));
    assert_eq!(c.floor.get(), 6);
    assert!(c.kept_out());
    assert_eq!(
        c.wait(),
        WaitFor::Quietly {
            look_at: t0 + ms(2_002)
        }
    );
    // The read-write lock's channel asks for a look only now.
    assert_eq!(c.on_notice(false, true, || None), Some(Wake::Changed));
    let readers = [b"leasekeeper:{e}:readers".to_vec()];
    let busy = "leasekeeper:{e}:busy";
    let renewed = Push::Invalidated(&readers);
    assert_eq!(
        c.on_quiet_push(renewed, busy, t0 + ms(400)),
        Some(Wake::Quiet)
    );
    // Queued behind a place ahead: half a ttl at the latest.
    c.after_take(take(0, "", 60_000, 4), t0, t0);
    assert_eq!(
        c.wait(),
        WaitFor::Quietly {
            look_at: t0 + ms(1_500)
        }
    );
    // Following a holder again: the channel says nothing to it.
    c.after_take(take(0, "n|7|b", 2_000, 0), t0, t0);
    assert!(!c.kept_out());
    assert_eq!(c.on_notice(false, true, || None), None);
    assert_eq!(c.on_quiet_push(renewed, busy, t0), None);
}

#[test]
fn a_wake_up_looks_or_keeps_the_announcement_for_the_next_campaign() {
    let mut c = core();
    let announced = || Some("n|3|b".to_owned());
    assert_eq!(c.on_notice(false, false, announced), Some(Wake::Changed));
    assert_eq!(c.announced.as_deref(), Some("n|3|b"));
    // A request to look wins over the announcement, which stays unread.
    let unread = || -> Option<String> { panic!("announcement taken") };
    assert_eq!(c.on_notice(true, false, unread), Some(Wake::Changed));
    assert_eq!(c.announced, None);
    assert_eq!(c.on_notice(false, false, || None), None);
}

#[test]
fn a_renewals_answer_is_kept_lost_or_too_late_and_its_own_push_expected() {
    let mut c = core();
    let t0 = Instant::now();
    c.after_take(take(1, "n|7|a", -1, 0), t0, t0);
    assert_eq!(c.renewed(1, t0), Ok(Renewal::Renewed));
    let until = c.take_own_push_until();
    assert_eq!(until, Some(t0 + OWN_PUSH_WINDOW));
    assert_eq!(
        c.take_own_push_until(),
        None,
        "one push taken for our own twice"
    );
    assert_eq!(c.renewed(REFUSED, t0), Err(TooLate));
    assert_eq!(c.renewed(0, t0), Ok(Renewal::Lost));
}
