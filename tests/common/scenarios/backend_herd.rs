//! No herd at a handover, shown at the library level for the backends that keep a
//! queue (etcd, ZooKeeper): candidates built as the sidecar builds them
//! (`make(identity)`), driven through the `Backend` trait one call at a time, against
//! a real server.

use std::time::Duration;

use leasekeeper::backend::{Backend, Campaign, Wake};

/// A leads, B is next in line, C is behind B. A releases: C sleeps through it (it
/// watches neither A's record nor anything the release touches), B wakes and claims,
/// and C wakes only then, at B's announcement, and names B. Before the announcement,
/// C watched A's record and woke at the release, with everyone else behind B.
pub async fn a_follower_behind_the_next_in_line_sleeps_through_a_release<B: Backend>(
    make: impl Fn(&str) -> B,
) {
    let (mut a, mut b, mut c) = (make("A"), make("B"), make("C"));
    assert!(matches!(a.campaign().await, Ok(Campaign::Acquired { .. })));
    for (who, x) in [("B", &mut b), ("C", &mut c)] {
        let found = x.campaign().await;
        assert!(
            matches!(&found, Ok(Campaign::Held(Some(h))) if h.identity == "A"),
            "{who} should follow A: {found:?}"
        );
    }
    // The announcement of A's claim (written in the background) reaches C before it
    // looks again: only then does C leave A's record alone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = c.campaign().await;
    assert!(
        matches!(&settled, Ok(Campaign::Held(Some(h))) if h.identity == "A"),
        "C should follow A: {settled:?}"
    );
    a.release().await.expect("release");
    let slept = c.wait_for_change(Duration::from_secs(1)).await;
    assert_ne!(
        slept,
        Wake::Changed,
        "C woke at the release, before any claim"
    );
    assert_eq!(
        b.wait_for_change(Duration::from_secs(5)).await,
        Wake::Changed,
        "B, next in line, must wake at the release"
    );
    assert!(matches!(b.campaign().await, Ok(Campaign::Acquired { .. })));
    let heard = tokio::time::timeout(
        Duration::from_secs(2),
        c.wait_for_change(Duration::from_secs(10)),
    )
    .await;
    assert_eq!(heard, Ok(Wake::Changed), "C never heard of B's claim");
    let found = c.campaign().await;
    assert!(
        matches!(&found, Ok(Campaign::Held(Some(h))) if h.identity == "B"),
        "C should name B: {found:?}"
    );
}
