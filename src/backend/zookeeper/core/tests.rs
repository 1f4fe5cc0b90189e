//! The ZooKeeper core's unit tests: every decision driven by plain values.

use super::*;

const OFF: Flaws = Flaws {
    next_in_line_claims: false,
    head_gone_queues: false,
    head_gone_unseen: false,
};

type P = Phase<&'static str, &'static str, &'static str>;
type Q = [Entry<&'static str>];

/// Latch nodes in order; a name starting with `r` is a reader's.
fn queue(names: &[&'static str]) -> Vec<Entry<&'static str>> {
    let entry = |(i, name): (usize, &&'static str)| Entry {
        order: i as i64,
        name: *name,
        shared: name.starts_with('r'),
    };
    names.iter().enumerate().map(entry).collect()
}

/// A listing of `queue` by `ours`, the reservation naming `reserved`, the
/// announcement naming `announced` (at mzxid 40).
fn list(queue: &Q, ours: &'static str, reserved: Option<&'static str>) -> Next<&'static str> {
    list_with(queue, ours, reserved, Some("a"), true)
}

fn list_with(
    queue: &Q,
    ours: &'static str,
    reserved: Option<&'static str>,
    announced: Option<&'static str>,
    may_requeue: bool,
) -> Next<&'static str> {
    let listed = Listed {
        queue,
        ours: &ours,
        reserved: reserved.as_ref(),
        announced: announced.as_ref().map(|a| (a, 40)),
        may_requeue,
        reader: ours.starts_with('r'),
        flaws: Flaws::default(),
    };
    // Every node announces but Curator's (`cur*`).
    after_list(listed, |e| !e.name.starts_with("cur"))
}

fn head(head: &'static str, predecessor: Option<&'static str>) -> Next<&'static str> {
    let seen = Some(40);
    Next::Follow(Follow::Head {
        head,
        predecessor,
        seen,
    })
}

fn following() -> P {
    follow(Some("turn"), Some("news"))
}

/// The phase a follower's opened watches make (a stagger of 100 ms from now).
fn follow(turn: Option<&'static str>, news: Option<&'static str>) -> P {
    P::following(
        turn,
        news,
        Instant::now(),
        || Duration::from_millis(100),
        OFF,
    )
}

fn leading() -> P {
    P::claimed("own", "check")
}

fn leading_with(own: Option<&'static str>, confirming: Option<&'static str>) -> P {
    P::Leading { own, confirming }
}

fn never() -> Duration {
    panic!("no stagger")
}

#[test]
fn only_a_deleted_head_that_was_our_predecessor_makes_the_shortcut() {
    assert_eq!(P::HeadGone.begin(), (P::Queued, Round::Shortcut));
    let staggering = P::Staggering {
        until: Instant::now(),
        turn: Some("turn"),
    };
    let others = [
        following(),
        P::NextInLine("h"),
        staggering,
        leading(),
        P::Queued,
    ];
    for phase in others {
        assert_eq!(phase.begin(), (P::Queued, Round::Full));
    }
    assert_eq!(P::Unqueued.begin(), (P::Unqueued, Round::Full));
    assert_eq!(
        (P::Unqueued.queued(), leading().queued()),
        (P::Queued, leading())
    );
}

#[test]
fn the_shortcut_claims_only_proven_and_unreserved_for_another() {
    let proven = || Ok::<_, &str>(Some("proof"));
    assert_eq!(after_shortcut(None, &"a", proven()), Ok(Some("proof")));
    assert_eq!(
        after_shortcut(Some(&"a"), &"a", proven()),
        Ok(Some("proof"))
    );
    // A reservation for another node wins over the proof: a full look decides.
    let reserved = after_shortcut(Some(&"b"), &"a", proven());
    assert_eq!(reserved, Ok(None), "claimed past a reservation for another");
    assert_eq!(
        after_shortcut(Some(&"b"), &"a", Err::<Option<&str>, _>("cut")),
        Ok(None)
    );
    let failed = Ok::<Option<&str>, &str>(None);
    assert_eq!(after_shortcut(None, &"a", failed), Ok(None));
    let cut = Err::<Option<&str>, _>("cut");
    assert_eq!(after_shortcut(None, &"a", cut), Err("cut"));
}

#[test]
fn a_full_rounds_claim_needs_our_session_and_an_unwritten_node() {
    assert_eq!(after_claim(Some("proof")), Claimed::Lead("proof"));
    assert_eq!(after_claim::<&str>(None), Claimed::StartOver);
    assert!(proves(Some(7), Some(0), 7));
    // A node of an older session (CURATOR-1211), or another client's.
    assert!(
        !proves(Some(6), Some(0), 7),
        "another session's node proved"
    );
    assert!(!proves(None, None, 7), "a gone node proved");
    // Deleted and created again under our name, then written.
    assert!(!proves(Some(7), Some(1), 7), "a written node proved");
}

#[test]
fn a_reservation_for_a_node_behind_ours_requeues_once_before_any_claim() {
    let q = queue(&["a", "b", "c"]);
    // Our node vanished (the session expired): start over, before anything else.
    assert_eq!(list(&q, "z", Some("c")), Next::StartOver);
    assert_eq!(list(&q, "a", Some("c")), Next::Requeue, "claimed past it");
    assert_eq!(list(&q, "b", Some("c")), Next::Requeue);
    // The second round of a campaign never gives its place up again.
    let second = list_with(&q, "a", Some("c"), None, false);
    assert_eq!(second, Next::Claim { spend: false });
    // Named ourselves (spent once we lead), or a node ahead of ours: nothing asked.
    assert_eq!(list(&q, "a", Some("a")), Next::Claim { spend: true });
    assert_eq!(list(&q, "b", Some("a")), head("a", None));
    assert_eq!(list(&q, "a", None), Next::Claim { spend: false });
}

#[test]
fn the_next_in_line_watches_the_head_alone() {
    let q = queue(&["a", "b"]);
    assert_eq!(list(&q, "b", None), head("a", None));
}

#[test]
fn a_follower_behind_a_curator_next_in_line_watches_the_head() {
    let q = queue(&["a", "cur", "c"]);
    assert_eq!(list(&q, "c", None), head("a", Some("cur")));
    // An announcement that does not name the head: the head too.
    let q = queue(&["a", "b", "c"]);
    let stale = list_with(&q, "c", None, Some("x"), true);
    assert_eq!(stale, head("a", Some("b")));
}

#[test]
fn behind_an_announcing_next_in_line_the_announcement_replaces_the_head() {
    let q = queue(&["a", "b", "c", "d"]);
    let announced = |predecessor, next| {
        let seen = Some(40);
        let (head, next) = ("a", next);
        Next::Follow(Follow::Announcement {
            head,
            predecessor,
            next,
            seen,
        })
    };
    assert_eq!(list(&q, "d", None), announced("c", Some("b")));
    // The next in line is our predecessor: one watch serves both.
    assert_eq!(list(&q, "c", None), announced("b", None));
}

#[test]
fn a_reader_waits_for_the_last_writer_ahead_and_watches_the_head() {
    let q = queue(&["a", "r2", "w3", "r4"]);
    // News from the announcement once it changed since the listing (mzxid 40).
    let follow = |seen| {
        Next::Follow(Follow::Head {
            head: "a",
            predecessor: Some("w3"),
            seen,
        })
    };
    assert_eq!(list(&q, "r4", None), follow(Some(40)));
    assert_eq!(list_with(&q, "r4", None, None, true), follow(None));
    let q = queue(&["r1", "r2"]);
    assert_eq!(list(&q, "r2", None), Next::Claim { spend: false });
}

#[test]
fn opened_watches_make_a_follower_or_the_next_in_line() {
    assert_eq!(P::next_in_line(Some("head"), OFF), P::NextInLine("head"));
    assert_eq!(
        P::next_in_line(None, OFF),
        P::HeadGone,
        "the head went before its watch"
    );
    assert!(P::NextInLine("head").watched());
    assert!(following().watched());
    for (turn, news) in [(None, Some("news")), (Some("turn"), None), (None, None)] {
        assert!(!follow(turn, news).watched(), "{turn:?} {news:?}");
    }
    assert!(!P::Queued.watched());
    assert!(!leading().watched());
}

#[test]
fn each_phase_waits_its_own_way() {
    let until = Instant::now();
    // Nothing would wake a wait: no node, or our turn came or may have (the node we
    // wait for was gone before its watch was set).
    for phase in [P::Unqueued, P::HeadGone, follow(None, Some("news"))] {
        assert_eq!(phase.wait(), WaitFor::Now, "{phase:?}");
    }
    let staggering = P::Staggering { until, turn: None };
    assert_eq!(staggering.wait(), WaitFor::Stagger);
    for phase in [following(), P::NextInLine("h"), P::Queued, leading()] {
        assert_eq!(phase.wait(), WaitFor::Watches, "{phase:?}");
    }
    assert_eq!(P::NextInLine("h").watches_mut(), (Some(&mut "h"), None));
    let (turn, news) = (&mut "turn", &mut "news");
    assert_eq!(following().watches_mut(), (Some(turn), Some(news)));
    assert_eq!(leading().watches_mut(), (None, None));
}

#[test]
fn the_heads_delete_makes_the_next_in_line_first() {
    let now = Instant::now();
    let (deleted, changed) = (Woke::Turn(NodeEvent::Deleted), Woke::Turn(NodeEvent::Other));
    let first = P::NextInLine("head").on_wake(deleted, now, never);
    assert_eq!(first, (P::HeadGone, Heard::Look), "no shortcut");
    // A change of the head's data: look, no shortcut.
    let changed = P::NextInLine("head").on_wake(changed, now, never);
    assert_eq!(changed, (P::Queued, Heard::Look));
    // A predecessor that is not the head: others may be ahead still.
    let behind = following().on_wake(deleted, now, never);
    assert_eq!(behind, (P::Queued, Heard::Look), "a shortcut from behind");
}

#[test]
fn a_change_of_the_head_staggers_a_follower_further_back() {
    let now = Instant::now();
    let stagger = || Duration::from_millis(100);
    let (mut phase, heard) = following().on_wake(Woke::News(false), now, stagger);
    assert_eq!(heard, Heard::Stagger, "no stagger");
    let (until, turn) = phase.staggering_mut().expect("staggering");
    assert_eq!((until, turn.copied()), (now + stagger(), Some("turn")));
    assert_eq!(phase.looked(), P::Queued);
    assert!(P::Queued.staggering_mut().is_none());
}

#[test]
fn a_head_gone_before_its_watch_staggers_a_follower_further_back() {
    let now = Instant::now();
    let stagger = || Duration::from_millis(100);
    // As a fired watch on the head: the successor goes first, our turn's watch stays.
    let gone = P::following(Some("turn"), None, now, stagger, OFF);
    let (fired, _) = following().on_wake(Woke::News(false), now, stagger);
    assert_eq!(gone, fired, "the head's news lost");
    let until = now + stagger();
    assert_eq!(
        gone,
        P::Staggering {
            until,
            turn: Some("turn")
        }
    );
    assert_eq!(gone.wait(), WaitFor::Stagger);
    // Both gone: a look at once; the news standing: a follower.
    assert_eq!(
        P::following(None, None, now, never, OFF).wait(),
        WaitFor::Now
    );
    let news = P::following(None, Some("news"), now, never, OFF);
    assert_eq!(
        news,
        P::Following {
            turn: None,
            news: Some("news")
        }
    );
}

#[test]
fn a_follower_looks_at_once_on_an_announcement_or_a_session_change() {
    let now = Instant::now();
    for woke in [
        Woke::News(true),
        Woke::Session,
        Woke::Turn(NodeEvent::Other),
    ] {
        let heard = following().on_wake(woke, now, never);
        assert_eq!(heard, (P::Queued, Heard::Look), "{woke:?}");
    }
}

#[test]
fn a_quiet_wait_needs_every_watch_and_a_connected_session() {
    let now = Instant::now();
    let (quiet, cut) = (
        Woke::Timeout { connected: true },
        Woke::Timeout { connected: false },
    );
    assert_eq!(
        following().on_wake(quiet, now, never),
        (following(), Heard::Quiet)
    );
    let next = P::NextInLine("h").on_wake(quiet, now, never);
    assert_eq!(next, (P::NextInLine("h"), Heard::Quiet));
    let disconnected = following().on_wake(cut, now, never);
    assert_eq!(
        disconnected,
        (P::Queued, Heard::Look),
        "quiet while disconnected"
    );
    let half = follow(None, Some("news")).on_wake(quiet, now, never);
    assert_eq!(half, (P::Queued, Heard::Look), "quiet with a watch missing");
    // A shortcut owed and a claim survive a look.
    let owed = P::HeadGone.on_wake(Woke::Session, now, never);
    assert_eq!(owed, (P::HeadGone, Heard::Look));
    assert_eq!(
        leading().on_wake(quiet, now, never),
        (leading(), Heard::Look)
    );
}

#[test]
fn a_renew_sets_the_watch_on_our_node_again_once_it_fired() {
    assert_eq!(leading().renewal(), Renew::Prove);
    let (phase, lost) = leading().on_own(OwnEvent::Session { ended: false });
    assert!(!lost, "a disconnect ended the claim");
    assert_eq!(phase.renewal(), Renew::ProveAndWatch);
    assert_eq!(P::Queued.renewal(), Renew::ProveAndWatch);
    assert_eq!(
        phase.renewed(Some("again")),
        leading_with(Some("again"), None)
    );
    // Proven through the ensemble's leader: the claim's check is not needed.
    assert_eq!(leading().renewed(None), leading_with(Some("own"), None));
}

#[test]
fn the_claim_ends_on_a_change_of_our_node_or_the_sessions_end() {
    let (phase, lost) = leading().on_own(OwnEvent::Changed);
    assert!(lost, "our node changed and the claim went on");
    assert_eq!(phase, leading_with(None, Some("check")));
    let (_, lost) = leading().on_own(OwnEvent::Session { ended: true });
    assert!(lost, "the session ended and the claim went on");
    assert!(!leading().on_own(OwnEvent::Other).1);
    assert_eq!(P::Queued.on_own(OwnEvent::Changed), (P::Queued, false));
}

#[test]
fn the_claim_ends_when_its_check_fails() {
    let (mut phase, lost) = leading().on_confirmation(false);
    assert!(lost, "a failed check kept the claim");
    assert_eq!(phase.claim_mut(), (Some(&mut "own"), None));
    let confirmed = leading().on_confirmation(true);
    assert_eq!(confirmed, (leading_with(Some("own"), None), false));
    assert_eq!(P::Queued.on_confirmation(false), (P::Queued, false));
}

#[test]
fn the_known_wrong_wait_rules_wait_on_less() {
    let now = Instant::now();
    let stagger = || Duration::from_millis(100);
    let queues = Flaws {
        head_gone_queues: true,
        ..OFF
    };
    let gone = P::next_in_line(None, queues);
    assert_eq!(gone, P::Queued);
    assert_eq!(gone.wait(), WaitFor::Watches, "a wait on nothing");
    assert_eq!(P::next_in_line(Some("head"), queues), P::NextInLine("head"));
    let unseen = Flaws {
        head_gone_unseen: true,
        ..OFF
    };
    let missed = P::following(Some("turn"), None, now, stagger, unseen);
    let turn_only = P::Following {
        turn: Some("turn"),
        news: None,
    };
    assert_eq!(missed, turn_only);
    assert_eq!(missed.wait(), WaitFor::Watches, "the head's news lost");
}
