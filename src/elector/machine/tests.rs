//! Unit tests of the machine's rules, event by event, with `now` given by hand.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const TTL: Duration = Duration::from_secs(3);

fn timing() -> Timing {
    Timing {
        ttl: TTL,
        renew_interval: ms(1000),
        retry_interval: ms(1000),
        backend_timeout: ms(500),
        clock_drift: 0.01,
        safety_margin: ms(30),
    }
}

fn config() -> Config {
    Config {
        timing: timing(),
        exit_on_loss: false,
        publishers: false,
        must_stop: false,
        drain: None,
        seed: 7,
        flaws: Flaws::default(),
    }
}

/// 3 s × 0.99 − 30 ms.
const CLAIM: Duration = Duration::from_millis(2940);

fn call_id(next: &Next, want: Op) -> u64 {
    match next {
        Next::Call { id, op, .. } if *op == want => *id,
        other => panic!("expected a {want:?} call, got {other:?}"),
    }
}

fn campaign_answer(id: u64, result: Result<Campaign, Failure>) -> Event {
    Event::Answer {
        id,
        answer: Answer::Campaign {
            result,
            ttl: TTL,
            lease: 0,
        },
    }
}

fn renew_answer(id: u64, result: Result<Renewal, Failure>) -> Event {
    Event::Answer {
        id,
        answer: Answer::Renew { result, ttl: TTL },
    }
}

fn released(id: u64) -> Event {
    Event::Answer {
        id,
        answer: Answer::Release,
    }
}

const TIMED_OUT: Failure = Failure { timed_out: true };
const REFUSED: Failure = Failure { timed_out: false };

/// A machine that acquired token 5 with a campaign sent at 0 and answered at 10 ms.
fn leader(cfg: Config) -> (Machine, Step) {
    let (mut m, id) = campaigning(cfg);
    let s = m.on(
        ms(10),
        campaign_answer(id, Ok(Campaign::Acquired { token: 5 })),
    );
    (m, s)
}

/// A fresh machine that has sent its first campaign at 0: (it, the call's id).
fn campaigning(cfg: Config) -> (Machine, u64) {
    let mut m = Machine::new(cfg);
    let s = m.on(ms(0), Event::Start);
    let id = call_id(&s.next, Op::Campaign);
    (m, id)
}

fn acquired(token: FencingToken, deadline: Time) -> Effect {
    Effect::Publish(Publish::Acquired { token, deadline })
}

fn has(step: &Step, want: &Effect) -> bool {
    step.effects.contains(want)
}

fn position(step: &Step, pred: impl Fn(&Effect) -> bool) -> usize {
    step.effects
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no such effect in {:?}", step.effects))
}

fn pause_until(next: &Next) -> Time {
    match next {
        Next::Wait {
            until: Some(t),
            on: WaitOn::Time,
        } => *t,
        other => panic!("expected a pause, got {other:?}"),
    }
}

#[test]
fn the_claim_counts_from_the_campaign_send_and_the_log_comes_before_the_status() {
    let (_, s) = leader(config());
    let log = position(&s, |e| matches!(e, Effect::Log(LogLine::ClaimStart { .. })));
    let publish = position(&s, |e| {
        matches!(e, Effect::Publish(Publish::Acquired { .. }))
    });
    assert!(log < publish, "{:?}", s.effects);
    assert!(has(
        &s,
        &Effect::Log(LogLine::ClaimStart {
            token: 5,
            sent: ms(0),
            deadline: CLAIM
        })
    ));
    assert!(has(
        &s,
        &Effect::Note(Note::Acquired {
            campaign_took: ms(10)
        })
    ));
    assert_eq!(s.next, wait(ms(1000), WaitOn::Lead));
}

#[test]
fn a_renewal_extends_from_its_send_time_and_never_from_a_late_answer() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    assert_eq!(
        s.next,
        Next::Call {
            id,
            op: Op::Renew,
            budget: ms(500)
        }
    );
    let s = m.on(ms(1400), renew_answer(id, Ok(Renewal::Renewed)));
    assert!(has(
        &s,
        &Effect::Publish(Publish::Extended {
            deadline: ms(1000) + CLAIM
        })
    ));
    assert_eq!(s.next, wait(ms(2000), WaitOn::Lead));
    // The next renewal's answer comes at the deadline: no extension, a step-down.
    let s = m.on(ms(2000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let deadline = ms(1000) + CLAIM;
    let s = m.on(deadline, renew_answer(id, Ok(Renewal::Renewed)));
    assert!(!s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Publish(Publish::Extended { .. }))));
    assert!(has(&s, &Effect::Publish(Publish::SteppedDown)));
    let id = call_id(&s.next, Op::Release);
    // Too slow: after the release, one ttl out.
    let s = m.on(deadline + ms(5), released(id));
    assert_eq!(pause_until(&s.next), deadline + ms(5) + TTL);
    assert!(has(&s, &Effect::Say(Say::TooSlow { ttl: TTL })));
}

#[test]
fn an_acquisition_answered_after_its_deadline_is_not_claimed() {
    let (mut m, id) = campaigning(config());
    let s = m.on(
        CLAIM,
        campaign_answer(id, Ok(Campaign::Acquired { token: 1 })),
    );
    assert!(!s.effects.iter().any(|e| matches!(e, Effect::Log(_))));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(CLAIM + ms(1), released(id));
    assert_eq!(pause_until(&s.next), CLAIM + ms(1) + TTL);
    // An answer a hair earlier is claimed.
    let (mut m, id) = campaigning(config());
    let s = m.on(
        CLAIM - ms(1),
        campaign_answer(id, Ok(Campaign::Acquired { token: 1 })),
    );
    assert!(has(&s, &acquired(1, CLAIM)));
}

#[test]
fn a_token_not_greater_than_one_claimed_before_is_not_claimed() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(100), Event::RecordLost);
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    let id = call_id(&s.next, Op::Campaign);
    let s = m.on(
        ms(120),
        campaign_answer(id, Ok(Campaign::Acquired { token: 5 })),
    );
    assert!(has(
        &s,
        &Effect::Say(Say::TokenNotGreater { token: 5, last: 5 })
    ));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(130), released(id));
    let until = pause_until(&s.next);
    assert!(
        until >= ms(130) + ms(40) && until <= ms(130) + ms(60),
        "{until:?}"
    );
}

/// Each slot of an election of several holders has its own counter: a tenure on
/// another lease (slot) is judged against that lease's earlier tokens only, and each
/// lease's memory is kept while the candidate holds another.
#[test]
fn the_token_rule_holds_per_lease() {
    let on = |id, token, lease| Event::Answer {
        id,
        answer: Answer::Campaign {
            result: Ok(Campaign::Acquired { token }),
            ttl: TTL,
            lease,
        },
    };
    let lose_then_campaign = |m: &mut Machine, at: u64| {
        let s = m.on(ms(at), Event::RecordLost);
        let id = call_id(&s.next, Op::Release);
        let s = m.on(ms(at + 10), released(id));
        call_id(&s.next, Op::Campaign)
    };
    let (mut m, _) = leader(config());
    // Lease 1, token 2 (below lease 0's 5): claimed.
    let id = lose_then_campaign(&mut m, 100);
    let s = m.on(ms(120), on(id, 2, 1));
    assert!(
        s.effects
            .iter()
            .any(|e| matches!(e, Effect::Publish(Publish::Acquired { token: 2, .. }))),
        "{:?}",
        s.effects
    );
    // Back on lease 0: its own token 5 again is refused, 6 is claimed.
    let id = lose_then_campaign(&mut m, 200);
    let s = m.on(ms(220), on(id, 5, 0));
    assert!(has(
        &s,
        &Effect::Say(Say::TokenNotGreater { token: 5, last: 5 })
    ));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(230), released(id));
    let until = pause_until(&s.next);
    let s = m.on(until, Event::Timer);
    let id = call_id(&s.next, Op::Campaign);
    let s = m.on(until + ms(10), on(id, 6, 0));
    assert!(
        s.effects
            .iter()
            .any(|e| matches!(e, Effect::Publish(Publish::Acquired { token: 6, .. }))),
        "{:?}",
        s.effects
    );
    // And lease 1's memory was kept: its token 2 again is refused.
    let id = lose_then_campaign(&mut m, 400);
    let s = m.on(ms(420), on(id, 2, 1));
    assert!(has(
        &s,
        &Effect::Say(Say::TokenNotGreater { token: 2, last: 2 })
    ));
}

#[test]
fn failed_renewals_are_retried_until_the_deadline_then_the_candidate_sits_out() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(ms(1500), renew_answer(id, Err(TIMED_OUT)));
    assert_eq!(s.next, wait(ms(1750), WaitOn::Lead));
    // The budget never reaches past the deadline.
    let s = m.on(ms(2900), Event::Timer);
    assert_eq!(
        s.next,
        Next::Call {
            id: call_id(&s.next, Op::Renew),
            op: Op::Renew,
            budget: CLAIM - ms(2900)
        }
    );
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(CLAIM, renew_answer(id, Err(TIMED_OUT)));
    // The wait ends at the deadline, where the claim ends.
    assert_eq!(s.next, wait(CLAIM, WaitOn::Lead));
    let s = m.on(CLAIM, Event::Timer);
    assert!(has(
        &s,
        &Effect::Log(LogLine::ClaimEnd {
            token: 5,
            reason: "the deadline passed without a successful renew"
        })
    ));
    call_id(&s.next, Op::Release);
}

#[test]
fn a_lost_lease_steps_down_publishing_before_logging_then_campaigns_again() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(ms(1010), renew_answer(id, Ok(Renewal::Lost)));
    let published = position(&s, |e| *e == Effect::Publish(Publish::SteppedDown));
    let logged = position(&s, |e| matches!(e, Effect::Log(LogLine::ClaimEnd { .. })));
    assert!(published < logged);
    assert!(has(&s, &Effect::Note(Note::Lost)));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(1020), released(id));
    call_id(&s.next, Op::Campaign);
}

#[test]
fn with_exit_on_loss_a_loss_ends_the_machine_after_the_release() {
    let mut cfg = config();
    cfg.exit_on_loss = true;
    let (mut m, _) = leader(cfg);
    let s = m.on(ms(100), Event::RecordLost);
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    assert_eq!(s.next, Next::Exit(Exit::LostLeadership));
    assert_eq!(m.exited(), Some(Exit::LostLeadership));
}

#[test]
fn answers_to_other_calls_are_ignored() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(ms(1010), renew_answer(id + 100, Ok(Renewal::Renewed)));
    assert_eq!(s.next, ANSWER_DUE);
    assert!(s.effects.is_empty());
    // A duplicate of an answer already taken changes nothing either.
    m.on(ms(1020), renew_answer(id, Ok(Renewal::Renewed)));
    let s = m.on(ms(1030), renew_answer(id, Ok(Renewal::Renewed)));
    assert!(s.effects.is_empty(), "{:?}", s.effects);
    // And after stepping down, a late renewal is no proof.
    let s = m.on(ms(1040), Event::RecordLost);
    let rel = call_id(&s.next, Op::Release);
    let s = m.on(ms(1050), renew_answer(id, Ok(Renewal::Renewed)));
    assert!(s.effects.is_empty(), "{:?}", s.effects);
    let s = m.on(ms(1060), released(rel));
    call_id(&s.next, Op::Campaign);
}

#[test]
fn a_release_request_hands_over_replies_after_the_release_and_sits_out() {
    let (mut m, _) = leader(config());
    let s = m.on(
        ms(100),
        Event::ReleaseRequested {
            id: 9,
            cooldown: None,
        },
    );
    assert!(has(&s, &Effect::Note(Note::Released)));
    assert!(!has(
        &s,
        &Effect::Reply {
            id: 9,
            released: true
        }
    ));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    assert!(has(
        &s,
        &Effect::Reply {
            id: 9,
            released: true
        }
    ));
    assert_eq!(pause_until(&s.next), ms(1110));
    // During the sit-out a request is answered at once: not leader.
    let s = m.on(
        ms(200),
        Event::ReleaseRequested {
            id: 10,
            cooldown: None,
        },
    );
    assert!(has(
        &s,
        &Effect::Reply {
            id: 10,
            released: false
        }
    ));
    assert_eq!(pause_until(&s.next), ms(1110));
    let s = m.on(ms(1110), Event::Timer);
    call_id(&s.next, Op::Campaign);
}

#[test]
fn a_cooldown_replaces_the_sit_out() {
    let (mut m, _) = leader(config());
    let s = m.on(
        ms(100),
        Event::ReleaseRequested {
            id: 1,
            cooldown: Some(ms(60_000)),
        },
    );
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    assert_eq!(pause_until(&s.next), ms(60_110));
}

#[test]
fn a_release_request_during_a_renewal_is_served_after_its_answer() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(
        ms(1001),
        Event::ReleaseRequested {
            id: 3,
            cooldown: None,
        },
    );
    assert_eq!(s.next, ANSWER_DUE);
    let s = m.on(ms(1010), renew_answer(id, Ok(Renewal::Renewed)));
    assert!(has(&s, &Effect::Publish(Publish::SteppedDown)));
    call_id(&s.next, Op::Release);
}

#[test]
fn followers_wait_for_a_change_with_jitter_and_answer_release_requests_no() {
    let (mut m, id) = campaigning(config());
    let holder = Some(Holder {
        identity: "other".into(),
        token: Some(2),
    });
    let s = m.on(
        ms(5),
        campaign_answer(id, Ok(Campaign::Held(holder.clone()))),
    );
    assert!(has(&s, &Effect::Publish(Publish::Observed(holder))));
    let Next::Wait {
        until: None,
        on: WaitOn::Change { max },
    } = s.next
    else {
        panic!("{:?}", s.next)
    };
    assert!(max >= ms(800) && max <= ms(1200), "{max:?}");
    let s = m.on(ms(6), Event::Woke(Wake::Quiet));
    assert!(has(&s, &Effect::Publish(Publish::Heard)));
    let s = m.on(
        ms(7),
        Event::ReleaseRequested {
            id: 4,
            cooldown: None,
        },
    );
    assert!(has(
        &s,
        &Effect::Reply {
            id: 4,
            released: false
        }
    ));
    let s = m.on(ms(8), Event::Woke(Wake::Waiting));
    assert!(s.effects.is_empty());
    let s = m.on(ms(9), Event::Woke(Wake::Changed));
    call_id(&s.next, Op::Campaign);
}

#[test]
fn the_jitter_comes_from_the_seed() {
    let maxes = |seed| {
        let mut cfg = config();
        cfg.seed = seed;
        let (mut m, id) = campaigning(cfg);
        let mut out = vec![
            m.on(ms(1), campaign_answer(id, Ok(Campaign::Held(None))))
                .next,
        ];
        for i in 0..5 {
            out.push(m.on(ms(2 + i), Event::Woke(Wake::Waiting)).next);
        }
        out
    };
    assert_eq!(maxes(1), maxes(1));
    assert_ne!(maxes(1), maxes(2));
}

#[test]
fn shutdown_while_following_releases_then_exits() {
    let (mut m, id) = campaigning(config());
    m.on(ms(5), campaign_answer(id, Ok(Campaign::Held(None))));
    let s = m.on(ms(6), Event::Shutdown);
    assert!(has(&s, &Effect::Publish(Publish::NotLeading)));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(7), released(id));
    assert_eq!(s.next, Next::Exit(Exit::Shutdown));
}

#[test]
fn shutdown_while_leading_steps_down_first_then_releases_and_exits() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(100), Event::Shutdown);
    assert!(has(&s, &Effect::Publish(Publish::SteppedDown)));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    assert_eq!(s.next, Next::Exit(Exit::Shutdown));
}

#[test]
fn a_shutdown_during_a_campaign_is_served_after_its_answer() {
    let (mut m, id) = campaigning(config());
    assert_eq!(m.on(ms(1), Event::Shutdown).next, ANSWER_DUE);
    let s = m.on(
        ms(5),
        campaign_answer(id, Ok(Campaign::Acquired { token: 1 })),
    );
    // Claimed, and at once handed back.
    assert!(has(&s, &Effect::Publish(Publish::SteppedDown)));
    call_id(&s.next, Op::Release);
}

#[test]
fn a_failed_campaign_backs_off_and_a_timed_out_one_releases_first() {
    let (mut m, id) = campaigning(config());
    let s = m.on(ms(5), campaign_answer(id, Err(REFUSED)));
    assert!(has(&s, &Effect::Publish(Publish::Campaigning)));
    let until = pause_until(&s.next);
    assert!(until >= ms(45) && until <= ms(65), "{until:?}");
    let s = m.on(until, Event::Timer);
    let id = call_id(&s.next, Op::Campaign);
    let s = m.on(until + ms(500), campaign_answer(id, Err(TIMED_OUT)));
    let rel = call_id(&s.next, Op::Release);
    let s = m.on(until + ms(501), released(rel));
    // The second wait doubles: 100 ms ± 20%.
    let wait = pause_until(&s.next) - (until + ms(501));
    assert!(wait >= ms(80) && wait <= ms(120), "{wait:?}");
}

#[test]
fn a_store_that_grants_a_short_ttl_gets_renewed_more_often() {
    let (mut m, id) = campaigning(config());
    let s = m.on(
        ms(5),
        Event::Answer {
            id,
            answer: Answer::Campaign {
                result: Ok(Campaign::Acquired { token: 1 }),
                ttl: ms(1500),
                lease: 0,
            },
        },
    );
    // Claim 1500 × 0.99 − 30 = 1455 ms; a third of it.
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Say(Say::RenewIntervalAdapted { .. }))));
    assert_eq!(s.next, wait(ms(485), WaitOn::Lead));
}

/// What validation accepts, the elector keeps: a store that grants the ttl asked for
/// never makes it adapt the renew interval (nor say the ttl was shorter).
#[test]
fn timing_that_passes_validation_keeps_its_renew_interval_when_granted_as_asked() {
    for (ttl, renew) in [
        ("2s", "1500ms"),
        ("15s", "5s"),
        ("15s", "11s"),
        ("1s", "700ms"),
    ] {
        let args = crate::timing::Args {
            ttl: Some(ttl.to_owned()),
            renew_interval: Some(renew.to_owned()),
            ..Default::default()
        };
        let timing = args.timing().expect("valid");
        let (mut m, id) = campaigning(Config { timing, ..config() });
        let s = m.on(
            ms(5),
            Event::Answer {
                id,
                answer: Answer::Campaign {
                    result: Ok(Campaign::Acquired { token: 1 }),
                    ttl: timing.ttl,
                    lease: 0,
                },
            },
        );
        assert!(
            !s.effects
                .iter()
                .any(|e| matches!(e, Effect::Say(Say::RenewIntervalAdapted { .. }))),
            "--ttl {ttl} --renew-interval {renew}: {:?}",
            s.effects
        );
        assert_eq!(
            s.next,
            wait(timing.renew_interval, WaitOn::Lead),
            "--ttl {ttl} --renew-interval {renew}"
        );
    }
}

#[test]
fn a_graceful_step_down_waits_for_the_publishers_and_the_drain_renewing_meanwhile() {
    let mut cfg = config();
    cfg.publishers = true;
    cfg.drain = Some(ms(10_000));
    let (mut m, _) = leader(cfg);
    let s = m.on(ms(500), Event::Shutdown);
    let draining = position(&s, |e| {
        matches!(e, Effect::Publish(Publish::Draining { .. }))
    });
    let stepped = position(&s, |e| *e == Effect::Publish(Publish::SteppedDown));
    assert!(draining < stepped);
    assert_eq!(s.next, wait(ms(1000), WaitOn::Publishers));
    let s = m.on(ms(600), Event::Done);
    assert_eq!(s.next, wait(ms(1000), WaitOn::Drained));
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(ms(1010), renew_answer(id, Ok(Renewal::Renewed)));
    assert_eq!(s.next, wait(ms(2000), WaitOn::Drained));
    let s = m.on(ms(1500), Event::Done);
    assert!(has(&s, &Effect::Publish(Publish::DrainEnded)));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(1510), released(id));
    assert!(has(&s, &Effect::Publish(Publish::DrainOver)));
    assert_eq!(s.next, Next::Exit(Exit::Shutdown));
}

#[test]
fn a_drain_never_outlasts_the_claim() {
    let mut cfg = config();
    cfg.drain = Some(ms(60_000));
    let (mut m, _) = leader(cfg);
    let s = m.on(ms(500), Event::Shutdown);
    assert_eq!(s.next, wait(ms(1000), WaitOn::Drained));
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(ms(1010), renew_answer(id, Err(REFUSED)));
    let Next::Wait { until: Some(t), .. } = s.next else {
        panic!("{:?}", s.next)
    };
    assert_eq!(t, ms(1260));
    let s = m.on(CLAIM, Event::Timer);
    assert!(has(&s, &Effect::Say(Say::DrainTimedOut)));
    call_id(&s.next, Op::Release);
}

#[test]
fn what_must_stop_is_waited_for_and_unproven_it_blocks_a_graceful_release_only() {
    let mut cfg = config();
    cfg.must_stop = true;
    let (mut m, _) = leader(cfg.clone());
    let s = m.on(ms(100), Event::Shutdown);
    assert_eq!(s.next, wait(CLAIM + STOP_GRACE, WaitOn::Stopped));
    let s = m.on(CLAIM + STOP_GRACE, Event::Timer);
    assert!(has(&s, &Effect::Say(Say::NotProvenGone)));
    assert!(has(&s, &Effect::Say(Say::NotReleasing { token: 5 })));
    assert_eq!(s.next, Next::Exit(Exit::Shutdown));
    // A loss releases anyway once the wait is over.
    let (mut m, _) = leader(cfg.clone());
    m.on(ms(100), Event::RecordLost);
    let s = m.on(ms(200), Event::Done);
    call_id(&s.next, Op::Release);
    assert!(matches!(s.next, Next::Call { .. }));
    let (mut m, _) = leader(cfg);
    m.on(ms(100), Event::RecordLost);
    let s = m.on(CLAIM + STOP_GRACE, Event::Timer);
    call_id(&s.next, Op::Release);
}

#[test]
fn a_handover_asked_for_by_the_store_is_graceful() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(100), Event::HandoverRequested);
    assert!(has(&s, &Effect::Note(Note::Released)));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    assert_eq!(pause_until(&s.next), ms(1110));
}

#[test]
fn flaws_change_what_they_say() {
    let mut cfg = config();
    cfg.flaws.deadline_from_reply = true;
    let (_, s) = leader(cfg);
    assert!(has(&s, &acquired(5, ms(10) + CLAIM)));
    let mut cfg = config();
    cfg.flaws.no_drift = true;
    let (_, s) = leader(cfg);
    assert!(has(&s, &acquired(5, TTL - ms(30))));
    let mut cfg = config();
    cfg.flaws.no_sit_out = true;
    let (mut m, _) = leader(cfg);
    let s = m.on(
        ms(100),
        Event::ReleaseRequested {
            id: 1,
            cooldown: None,
        },
    );
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    call_id(&s.next, Op::Campaign);
    let mut cfg = config();
    cfg.flaws.claim_on_error = true;
    let (mut m, id) = campaigning(cfg);
    let s = m.on(ms(5), campaign_answer(id, Err(REFUSED)));
    assert!(has(&s, &acquired(1, CLAIM)));
}

#[test]
fn a_trusting_machine_takes_a_late_renewal_for_proof_after_stepping_down() {
    let mut cfg = config();
    cfg.flaws.trust_late_answers = true;
    let (mut m, _) = leader(cfg);
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(ms(1001), Event::RecordLost);
    assert_eq!(s.next, ANSWER_DUE);
    let s = m.on(ms(1010), renew_answer(id, Ok(Renewal::Lost)));
    call_id(&s.next, Op::Release);
    let s = m.on(ms(1020), renew_answer(id, Ok(Renewal::Renewed)));
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Publish(Publish::Acquired { .. }))));
}

#[test]
fn the_overclaim_gives_back_first_then_claims_on() {
    let mut cfg = config();
    cfg.flaws.overclaim = ms(4000);
    let (mut m, s) = leader(cfg);
    assert!(has(&s, &acquired(5, CLAIM + ms(4000))));
    let s = m.on(ms(100), Event::Shutdown);
    assert!(!has(&s, &Effect::Publish(Publish::SteppedDown)));
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    assert_eq!(pause_until(&s.next), ms(4110));
    let s = m.on(ms(4110), Event::Timer);
    assert!(has(&s, &Effect::Publish(Publish::SteppedDown)));
}

#[test]
fn a_release_request_during_a_renewal_that_loses_is_answered_no() {
    let (mut m, _) = leader(config());
    let s = m.on(ms(1000), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    m.on(
        ms(1001),
        Event::ReleaseRequested {
            id: 3,
            cooldown: None,
        },
    );
    let s = m.on(ms(1010), renew_answer(id, Ok(Renewal::Lost)));
    assert!(has(
        &s,
        &Effect::Reply {
            id: 3,
            released: false
        }
    ));
    let rel = call_id(&s.next, Op::Release);
    let s = m.on(ms(1020), released(rel));
    let id = call_id(&s.next, Op::Campaign);
    // The next tenure is not handed over on the old request's account.
    let s = m.on(
        ms(1030),
        campaign_answer(id, Ok(Campaign::Acquired { token: 6 })),
    );
    assert!(
        matches!(
            s.next,
            Next::Wait {
                on: WaitOn::Lead,
                ..
            }
        ),
        "{:?}",
        s.next
    );
}

#[test]
fn a_renewal_while_draining_answered_after_the_deadline_ends_the_drain() {
    let mut cfg = config();
    cfg.drain = Some(ms(60_000));
    let (mut m, _) = leader(cfg);
    m.on(ms(500), Event::Shutdown);
    let s = m.on(ms(2900), Event::Timer);
    let id = call_id(&s.next, Op::Renew);
    let s = m.on(CLAIM, renew_answer(id, Ok(Renewal::Renewed)));
    assert!(has(&s, &Effect::Publish(Publish::DrainEnded)));
    call_id(&s.next, Op::Release);
}

#[test]
fn a_claim_on_error_follows_the_last_token() {
    let mut cfg = config();
    cfg.flaws.claim_on_error = true;
    let (mut m, _) = leader(cfg);
    let s = m.on(ms(100), Event::RecordLost);
    let id = call_id(&s.next, Op::Release);
    let s = m.on(ms(110), released(id));
    let id = call_id(&s.next, Op::Campaign);
    let s = m.on(ms(120), campaign_answer(id, Err(REFUSED)));
    assert!(s
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Publish(Publish::Acquired { token: 6, .. }))));
}
