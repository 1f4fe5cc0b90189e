//! The protocol's own parts over a scripted store: the own-record watch, the staggered
//! wait and the switchover's refusal.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::*;
use crate::backend::Wake;

/// A store that hears what the test sends it and judges by a script.
struct Scripted {
    /// News about our own record; a closed channel is nothing to watch.
    news: mpsc::UnboundedReceiver<&'static str>,
    /// What each look finds (`true`: lost), in order.
    looks: VecDeque<bool>,
    looked: usize,
    stagger: Option<Instant>,
    turn: Option<mpsc::UnboundedReceiver<()>>,
    staggers_over: usize,
    mode: Option<&'static str>,
    waits: Waits,
    waited: Waited,
}

impl Scripted {
    fn new() -> (Scripted, mpsc::UnboundedSender<&'static str>) {
        let (tx, news) = mpsc::unbounded_channel();
        let store = Scripted {
            news,
            looks: VecDeque::new(),
            looked: 0,
            stagger: None,
            turn: None,
            staggers_over: 0,
            mode: None,
            waits: Waits::Store,
            waited: Waited::Wake(Wake::Quiet),
        };
        (store, tx)
    }
}

impl Transport for Scripted {
    type News = &'static str;
    type Look = ();

    fn name(&self) -> &'static str {
        "scripted"
    }

    fn lease_ttl(&self) -> Duration {
        Duration::from_secs(15)
    }

    fn no_switchover(&self) -> Option<&'static str> {
        self.mode
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        Ok(Campaign::Held(None))
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        Ok(Renewal::Renewed)
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    async fn release_to(&mut self, _to: &str) -> Result<(), BackendError> {
        Ok(())
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        Ok(Some(vec!["a".into()]))
    }

    fn waits(&mut self) -> Waits {
        self.waits
    }

    async fn wait(&mut self, _max: Duration) -> Waited {
        self.waited
    }

    fn stagger_until(&mut self) -> Option<Instant> {
        self.stagger
    }

    async fn turn_comes(&mut self) {
        match self.turn.as_mut() {
            Some(turn) => drop(turn.recv().await),
            None => std::future::pending().await,
        }
    }

    fn stagger_over(&mut self) {
        self.stagger = None;
        self.staggers_over += 1;
    }

    async fn own_news(&mut self) -> Option<&'static str> {
        self.news.recv().await
    }

    fn on_own(&mut self, _now: Instant, news: &'static str) -> Own<()> {
        match news {
            "lost" => Own::Lost,
            "look" => Own::Look(()),
            _ => Own::Quiet,
        }
    }

    async fn own_look(&mut self, _look: ()) -> bool {
        self.looked += 1;
        self.looks.pop_front().unwrap_or(false)
    }
}

/// Whether `record_lost` resolves within a second (of paused time).
async fn lost_within_a_second(p: &mut Protocol<Scripted>) -> bool {
    tokio::time::timeout(Duration::from_secs(1), p.record_lost())
        .await
        .is_ok()
}

#[tokio::test(start_paused = true)]
async fn the_own_record_is_lost_on_a_lost_verdict_or_a_look_that_finds_it_gone() {
    let (store, news) = Scripted::new();
    let mut p = Protocol::over(store);
    news.send("quiet").expect("send");
    assert!(
        !lost_within_a_second(&mut p).await,
        "quiet news is not a loss"
    );
    news.send("lost").expect("send");
    assert!(lost_within_a_second(&mut p).await);

    // A look that finds the record ours goes on waiting; one that finds it gone ends.
    p.store_mut().looks = VecDeque::from([false, true]);
    news.send("look").expect("send");
    assert!(!lost_within_a_second(&mut p).await);
    news.send("look").expect("send");
    assert!(lost_within_a_second(&mut p).await);
    assert_eq!(p.store().looked, 2);
}

#[tokio::test(start_paused = true)]
async fn nothing_to_watch_never_resolves() {
    let (store, news) = Scripted::new();
    let mut p = Protocol::over(store);
    drop(news);
    assert!(!lost_within_a_second(&mut p).await);
}

#[tokio::test(start_paused = true)]
async fn a_stagger_ends_when_it_passes_or_when_our_turn_comes() {
    let (store, _news) = Scripted::new();
    let mut p = Protocol::over(store);
    let start = Instant::now();
    p.store_mut().waits = Waits::Stagger;
    p.store_mut().stagger = Some(start + Duration::from_millis(300));
    assert_eq!(
        p.wait_for_change(Duration::from_secs(10)).await,
        Wake::Changed
    );
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    assert_eq!(p.store().staggers_over, 1);

    // Our turn comes first: the look is at once.
    let (turn, rx) = mpsc::unbounded_channel();
    p.store_mut().turn = Some(rx);
    p.store_mut().stagger = Some(Instant::now() + Duration::from_millis(300));
    turn.send(()).expect("send");
    let start = Instant::now();
    assert_eq!(
        p.wait_for_change(Duration::from_secs(10)).await,
        Wake::Changed
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(p.store().staggers_over, 2);

    // A store's wait that hears of a change to stagger for.
    p.store_mut().waits = Waits::Store;
    p.store_mut().waited = Waited::Stagger;
    p.store_mut().stagger = Some(Instant::now() + Duration::from_millis(100));
    let start = Instant::now();
    assert_eq!(
        p.wait_for_change(Duration::from_secs(10)).await,
        Wake::Changed
    );
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(p.store().staggers_over, 3);
}

#[tokio::test(start_paused = true)]
async fn the_store_says_how_a_wait_goes() {
    let (store, _news) = Scripted::new();
    let mut p = Protocol::over(store);
    p.store_mut().waits = Waits::Now;
    assert_eq!(
        p.wait_for_change(Duration::from_secs(1)).await,
        Wake::Changed
    );
    p.store_mut().waits = Waits::Store;
    p.store_mut().waited = Waited::Wake(Wake::Quiet);
    assert_eq!(p.wait_for_change(Duration::from_secs(1)).await, Wake::Quiet);
    assert_eq!(p.store().staggers_over, 0);
}

#[tokio::test]
async fn a_switchover_is_refused_in_a_mode_the_store_does_not_hand_over_in() {
    let (store, _news) = Scripted::new();
    let mut p = Protocol::over(store);
    assert_eq!(p.candidates().await.ok(), Some(Some(vec!["a".to_owned()])));
    assert!(p.release_to("a").await.is_ok());
    p.store_mut().mode = Some("shared");
    for refused in [p.candidates().await.err(), p.release_to("a").await.err()] {
        let refused = refused.expect("refused").to_string();
        assert!(refused.contains("--mode shared"), "{refused}");
    }
}
