//! The backend side of a switchover (`Backend::release_to`, `Backend::candidates`),
//! shown at the library level for every backend that keeps a queue (etcd, ZooKeeper):
//! candidates built as the sidecar builds them (`make(identity)`), driven through the
//! `Backend` trait one call at a time, against a real server. The elector's part (who
//! calls what, when) is not in play here: each scenario makes the calls a follower's
//! elector would make after the wake-up it asserts.

use std::time::{Duration, Instant};

use leasekeeper::backend::{Backend, Campaign, Renewal, Wake};

/// A runtime for one scenario.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A campaign that must take the lease; its token.
async fn leads<B: Backend>(who: &str, b: &mut B) -> u64 {
    match b.campaign().await {
        Ok(Campaign::Acquired { token }) => token,
        other => panic!("{who} should lead now, its campaign found {other:?}"),
    }
}

/// A campaign that must find `leader` holding the lease.
async fn follows<B: Backend>(who: &str, b: &mut B, leader: &str) {
    match b.campaign().await {
        Ok(Campaign::Held(Some(h))) if h.identity == leader => {}
        other => panic!("{who} should follow {leader}, its campaign found {other:?}"),
    }
}

/// A follower's wait that must end with a change well before the retry interval: the
/// store told it (a watch), no clock did.
async fn wakes<B: Backend>(who: &str, b: &mut B) {
    let start = Instant::now();
    let wake = b.wait_for_change(Duration::from_secs(5)).await;
    let took = start.elapsed();
    assert_eq!(wake, Wake::Changed, "{who} woke after {took:?}");
    assert!(
        took < Duration::from_secs(2),
        "{who} woke only after {took:?}"
    );
}

/// The identities `b` lists, sorted.
async fn candidates<B: Backend>(b: &mut B) -> Vec<String> {
    let mut listed = b
        .candidates()
        .await
        .expect("candidates")
        .expect("this backend keeps a list of candidates");
    listed.sort();
    listed
}

/// Waits (up to 10 s) until `b` lists exactly `expected` (sorted).
async fn lists_eventually<B: Backend>(b: &mut B, expected: &[&str]) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = candidates(b).await;
        if listed == expected {
            return;
        }
        assert!(
            Instant::now() < until,
            "listed {listed:?}, expected {expected:?}"
        );
        // Pause: between looks at the list.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A (leader), B (next), C (last): after `A.release_to("C")`, B's campaigns never take
/// the lease (B queues again behind C) and C leads, with a greater token; the queue
/// moves on watches alone. Then a plain release by C goes to B as usual: the
/// reservation is spent.
pub async fn passes_the_lease_to_the_named_candidate<B: Backend>(make: impl Fn(&str) -> B) {
    let (mut a, mut b, mut c) = (make("A"), make("B"), make("C"));
    let first = leads("A", &mut a).await;
    follows("B", &mut b, "A").await;
    follows("C", &mut c, "A").await;
    assert_eq!(candidates(&mut a).await, ["A", "B", "C"]);

    a.release_to("C").await.expect("A hands over to C");
    assert_eq!(
        a.renew().await.expect("A renews"),
        Renewal::Lost,
        "A gave its lease back"
    );
    // B was next in line: its predecessor went, yet its campaign must not claim.
    wakes("B", &mut b).await;
    follows("B", &mut b, "C").await;
    follows("B", &mut b, "C").await;
    wakes("C", &mut c).await;
    let token = leads("C", &mut c).await;
    assert!(token > first, "C's token {token} after A's {first}");
    follows("B", &mut b, "C").await;
    assert_eq!(candidates(&mut c).await, ["B", "C"]);

    c.release().await.expect("C releases");
    wakes("B", &mut b).await;
    let last = leads("B", &mut b).await;
    assert!(last > token, "B's token {last} after C's {token}");
}

/// `candidates()` lists every live candidate, leader and followers alike, whoever asks;
/// not one that released (closed) nor one that was dropped without a word (killed),
/// once the store has let it go.
pub async fn lists_the_live_candidates<B: Backend>(make: impl Fn(&str) -> B) {
    let (mut a, mut b, mut c, mut d) = (make("A"), make("B"), make("C"), make("D"));
    leads("A", &mut a).await;
    for (who, x) in [("B", &mut b), ("C", &mut c), ("D", &mut d)] {
        follows(who, x, "A").await;
    }
    assert_eq!(candidates(&mut a).await, ["A", "B", "C", "D"]);
    assert_eq!(candidates(&mut c).await, ["A", "B", "C", "D"]);
    b.release().await.expect("B releases");
    drop(d);
    lists_eventually(&mut a, &["A", "C"]).await;
    assert_eq!(candidates(&mut c).await, ["A", "C"]);
}

/// A switchover to a candidate that is gone (or never was) by the time the leader
/// hands over is a plain release: `release_to` answers Ok (the leader has stepped
/// down already; it logs a warning) and the next in line leads as usual.
pub async fn to_a_missing_candidate_is_a_plain_release<B: Backend>(make: impl Fn(&str) -> B) {
    let (mut a, mut b, mut c, mut d) = (make("A"), make("B"), make("C"), make("D"));
    let first = leads("A", &mut a).await;
    for (who, x) in [("B", &mut b), ("C", &mut c), ("D", &mut d)] {
        follows(who, x, "A").await;
    }
    drop(d);
    lists_eventually(&mut a, &["A", "B", "C"]).await;

    a.release_to("D")
        .await
        .expect("a switchover to a dead candidate");
    wakes("B", &mut b).await;
    let second = leads("B", &mut b).await;
    assert!(second > first);

    b.release_to("nobody")
        .await
        .expect("a switchover to a stranger");
    wakes("C", &mut c).await;
    let third = leads("C", &mut c).await;
    assert!(third > second);
}
