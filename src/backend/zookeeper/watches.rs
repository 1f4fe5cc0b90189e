//! The watches a ZooKeeper candidate sets and what their events say: a follower's
//! (the node it waits for, the head, the announcement, the next in line's node: see
//! [`super::core::Follow`]) and the leader's on its own node. The requests go out
//! together, before the first answer is awaited (one round trip's wait); the
//! phase they make is the core's ([`ZkPhase`]).

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;
use zookeeper_client::{Client, EventType, OneshotWatcher, Stat, WatchedEvent};

use super::super::BackendError;
use super::core::{Flaws, NodeEvent, Phase};
use super::rules::{self, OwnEvent};
use super::session::zk;
use crate::status::Holder;

/// A pending watch on a node (pinned, so polling it again loses nothing).
pub(super) type NodeWatch = Pin<Box<dyn Future<Output = WatchedEvent> + Send>>;

/// A follower's pending news of a new holder (see `queue::holder_news`): `true` when
/// it says to look at once (an announcement: the claim is made), `false` when the
/// head changed (the successor may not have claimed yet).
pub(super) type News = Pin<Box<dyn Future<Output = bool> + Send>>;

/// A claim's `multi` check on its way: `true` once the ensemble's leader ran it.
pub(super) type Confirmation = Pin<Box<dyn Future<Output = bool> + Send>>;

/// The campaign's phase, over the watches of this backend.
pub(super) type ZkPhase = Phase<NodeWatch, News, Confirmation>;

/// A pending signal: a watch whose event says nothing more than "it changed".
type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A one-shot watcher's event, as a pending watch.
pub(super) fn node_watch(watcher: OneshotWatcher) -> NodeWatch {
    Box::pin(watcher.changed())
}

/// The holder a latch node names: its data (the identity), its czxid (the token).
pub(super) fn holder_of(data: &[u8], stat: &Stat) -> Holder {
    Holder {
        identity: String::from_utf8_lossy(data).into_owned(),
        token: u64::try_from(stat.czxid).ok(),
    }
}

/// The head as a plain read of its data found it (`None`: gone meanwhile).
fn head_of(
    read: Result<(Vec<u8>, Stat), zookeeper_client::Error>,
) -> Result<Option<Holder>, BackendError> {
    match read {
        Ok((data, stat)) => Ok(Some(holder_of(&data, &stat))),
        Err(zookeeper_client::Error::NoNode) => Ok(None),
        Err(e) => Err(zk("campaign")(e)),
    }
}

/// The head as a read of its data with a watch found it: the holder and the watch
/// (`None`, `None`: gone meanwhile).
fn watched_head(
    read: Result<(Vec<u8>, Stat, OneshotWatcher), zookeeper_client::Error>,
) -> Result<(Option<Holder>, Option<NodeWatch>), BackendError> {
    match read {
        Ok((data, stat, watcher)) => Ok((Some(holder_of(&data, &stat)), Some(node_watch(watcher)))),
        Err(zookeeper_client::Error::NoNode) => Ok((None, None)),
        Err(e) => Err(zk("campaign")(e)),
    }
}

/// The watch on a node as an exists-watch set it: `None` when the node was gone
/// already (the node we wait for: the next look finds out).
fn existing((stat, watcher): (Option<Stat>, OneshotWatcher)) -> Option<NodeWatch> {
    stat.map(|_| node_watch(watcher))
}

/// The watch on the announcement as an exists-watch set it (its stat, the watcher):
/// resolves when the announcement changes, or at once when it changed already since
/// the campaign's read found it at `seen` (its mzxid; `None`: not there).
fn announcement_watch(
    (stat, watcher): (Option<Stat>, OneshotWatcher),
    seen: Option<i64>,
) -> Signal {
    if rules::announced_since(stat.map(|s| s.mzxid), seen) {
        return Box::pin(std::future::ready(()));
    }
    Box::pin(async move {
        watcher.changed().await;
    })
}

/// The watch on the next in line's node: resolves when it changes, or at once when it
/// was gone already.
fn next_in_line((stat, watcher): (Option<Stat>, OneshotWatcher)) -> Signal {
    match stat {
        Some(_) => Box::pin(async move {
            watcher.changed().await;
        }),
        None => Box::pin(std::future::ready(())),
    }
}

/// The news of a follower that watches the head: `false` when the head changes
/// first, `true` when the announcement does.
fn head_news(head: NodeWatch, announced: Signal) -> News {
    Box::pin(async move {
        tokio::select! {
            _ = head => false,
            _ = announced => true,
        }
    })
}

/// The news of a follower behind an announcing next in line: look at once on a
/// change of the announcement, or of the next in line's node (it may not announce).
fn announced_news(announced: Signal, next: Option<Signal>) -> News {
    Box::pin(async move {
        match next {
            Some(next) => tokio::select! {
                _ = announced => {}
                _ = next => {}
            },
            None => announced.await,
        }
        true
    })
}

/// A follower's watches of [`super::core::Follow::Head`] (paths: the head's, the node we
/// wait for when another, the announcement's): the head's data with a watch, and,
/// behind another, exists-watches on that node and the announcement. The holder the
/// head names, and the phase they make.
pub(super) async fn follow_head(
    client: &Client,
    head: &str,
    predecessor: Option<&str>,
    (announcement, seen): (&str, Option<i64>),
) -> Result<(Option<Holder>, ZkPhase), BackendError> {
    let head_read = client.get_and_watch_data(head);
    let behind = predecessor.map(|p| {
        let turn = client.check_and_watch_stat(p);
        (turn, client.check_and_watch_stat(announcement))
    });
    let (holder, head) = watched_head(head_read.await)?;
    let Some((turn, announced)) = behind else {
        return Ok((holder, Phase::next_in_line(head, Flaws::default())));
    };
    let turn = existing(turn.await.map_err(zk("campaign"))?);
    let announced = announcement_watch(announced.await.map_err(zk("campaign"))?, seen);
    let news = head.map(|head| head_news(head, announced));
    Ok((holder, following(turn, news)))
}

/// The phase a follower further back is in once its watches stand (`turn`: the one
/// on the node it waits for; `news`: of a new holder), from now, with the product's
/// stagger and rules.
fn following(turn: Option<NodeWatch>, news: Option<News>) -> ZkPhase {
    let stagger = super::super::stagger;
    Phase::following(turn, news, Instant::now(), stagger, Flaws::default())
}

/// A follower's watches of [`super::core::Follow::Announcement`] (paths: the head's, our
/// predecessor's, the next in line's when another, the announcement's): a plain read
/// of the head, exists-watches on the others. The holder the head names, and the
/// phase they make.
pub(super) async fn follow_announcement(
    client: &Client,
    (head, predecessor, next): (&str, &str, Option<&str>),
    (announcement, seen): (&str, Option<i64>),
) -> Result<(Option<Holder>, ZkPhase), BackendError> {
    let head_read = client.get_data(head);
    let announced = client.check_and_watch_stat(announcement);
    let turn = client.check_and_watch_stat(predecessor);
    let next = next.map(|n| client.check_and_watch_stat(n));
    let holder = head_of(head_read.await)?;
    let announced = announcement_watch(announced.await.map_err(zk("campaign"))?, seen);
    let turn = existing(turn.await.map_err(zk("campaign"))?);
    let next = match next {
        Some(w) => Some(next_in_line(w.await.map_err(zk("campaign"))?)),
        None => None,
    };
    let news = Some(announced_news(announced, next));
    Ok((holder, following(turn, news)))
}

/// What an event on our own node's watch says (see `rules::ends_claim`).
pub(super) fn own_event(event: &WatchedEvent) -> OwnEvent {
    match event.event_type {
        EventType::NodeDeleted | EventType::NodeDataChanged => OwnEvent::Changed,
        EventType::Session => OwnEvent::Session {
            ended: event.session_state.is_terminated(),
        },
        EventType::NodeCreated | EventType::NodeChildrenChanged => OwnEvent::Other,
    }
}

/// What an event on a follower's watch of a node says.
pub(super) fn node_event(event: &WatchedEvent) -> NodeEvent {
    match event.event_type {
        EventType::NodeDeleted => NodeEvent::Deleted,
        _ => NodeEvent::Other,
    }
}
