//! The etcd backend's watches: what a follower watches (by name, from the round's
//! [`Follow`]), opening them from a revision, waiting on them, and what each answer
//! says (plain functions: [`watch_news`], [`own_news`]).

use etcd_client::{Client, EventType, WatchOptions, WatchResponse, WatchStream};
use tokio::time::{sleep_until, Instant};

use super::super::BackendError;
use super::core::{OwnNews, Source, WatchNews, Watches};
use super::requests::{etcd, failed};
use super::round::Follow;
use super::rules;

/// One answer on a watch.
pub(super) type WatchMessage = Result<Option<WatchResponse>, etcd_client::Error>;

/// What one answer on a follower's watch says.
pub(super) fn watch_news(message: &WatchMessage) -> WatchNews {
    match message {
        Ok(Some(resp)) if resp.canceled() || resp.compact_revision() > 0 => WatchNews::Ended,
        Ok(Some(resp)) => WatchNews::Events {
            any: !resp.events().is_empty(),
            delete: (resp.events().iter()).any(|e| e.event_type() == EventType::Delete),
        },
        Ok(None) | Err(_) => WatchNews::Ended,
    }
}

/// What one answer on the leader's watch on its own key says (`lease`, `identity`:
/// ours).
pub(super) fn own_news(message: &WatchMessage, lease: i64, identity: &str) -> OwnNews {
    match message {
        Ok(Some(resp)) if resp.canceled() || resp.compact_revision() > 0 => OwnNews::Ended,
        Ok(Some(resp)) => OwnNews::Events {
            taken: own_key_taken(resp, lease, identity),
        },
        // The watch broke with its connection: the next renew looks again.
        Ok(None) | Err(_) => OwnNews::Ended,
    }
}

/// Whether a watch answer on our own key says it is no longer ours.
fn own_key_taken(resp: &WatchResponse, lease: i64, identity: &str) -> bool {
    resp.events().iter().any(|e| {
        let delete = e.event_type() == EventType::Delete;
        let put = e.kv().map(|kv| (kv.lease(), kv.value()));
        !rules::seen_in_event(delete, put, lease, identity).still_ours()
    })
}

/// The keys a follower watches (see [`Watches`]): its predecessor, the news of a new
/// holder, and (the next in line only) its own key.
pub(super) struct News {
    predecessor: Vec<u8>,
    leader: Option<Vec<u8>>,
    announcement: Option<Vec<u8>>,
    next: Option<Vec<u8>>,
    /// Our own key (the next in line only): see `core::Phase::NextInLine`.
    own: Option<Vec<u8>>,
}

impl News {
    /// The keys the round's `follow` names (`announcement`, `own`: the keys it names
    /// by role).
    pub(super) fn of(follow: Follow<&[u8]>, announcement: &str, own: &str) -> News {
        News {
            predecessor: follow.predecessor.to_vec(),
            leader: follow.leader.map(<[u8]>::to_vec),
            announcement: (follow.announcement).then(|| announcement.as_bytes().to_vec()),
            next: follow.next.map(<[u8]>::to_vec),
            own: follow.own.then(|| own.as_bytes().to_vec()),
        }
    }
}

/// A watch on `key` from revision `from` (`op`: what it serves, for errors).
pub(super) async fn watch_from(
    client: &mut Client,
    key: Vec<u8>,
    from: i64,
    op: &'static str,
) -> Result<WatchStream, BackendError> {
    let options = Some(WatchOptions::new().with_start_revision(from));
    client.watch(key, options).await.map_err(etcd(op))
}

/// A follower's watches from revision `from` (the read that placed us), opened
/// together; the next in line's watch on its own key comes apart.
pub(super) async fn follower_watches(
    client: &Client,
    from: i64,
    news: News,
) -> Result<(Watches<WatchStream>, Option<WatchStream>), BackendError> {
    let open = |key: Option<Vec<u8>>| {
        let mut client = client.clone();
        async move {
            match key {
                Some(k) => watch_from(&mut client, k, from, "campaign").await.map(Some),
                None => Ok(None),
            }
        }
    };
    let (predecessor, leader, announcement, next, own) = tokio::join!(
        open(Some(news.predecessor)),
        open(news.leader),
        open(news.announcement),
        open(news.next),
        open(news.own)
    );
    let watches = Watches {
        predecessor: predecessor?.ok_or_else(|| failed("campaign", "no watch"))?,
        leader: leader?,
        announcement: announcement?,
        next: next?,
    };
    Ok((watches, own?))
}

/// The next answer on any of a follower's watches, and which it came on; `None`
/// when `until` passes first.
pub(super) async fn next_answer(
    w: &mut Watches<WatchStream>,
    until: Instant,
) -> Option<(Source, WatchMessage)> {
    tokio::select! {
        m = w.predecessor.message() => Some((Source::Predecessor, m)),
        m = next_message(w.leader.as_mut()) => Some((Source::Leader, m)),
        m = next_message(w.announcement.as_mut()) => Some((Source::Announcement, m)),
        m = next_message(w.next.as_mut()) => Some((Source::Next, m)),
        _ = sleep_until(until) => None,
    }
}

/// The next message of a watch that may not be open (then never).
async fn next_message(w: Option<&mut WatchStream>) -> WatchMessage {
    match w {
        Some(w) => w.message().await,
        None => std::future::pending().await,
    }
}
