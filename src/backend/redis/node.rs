//! One Redis server's transport: a self-reconnecting command connection on RESP3 whose
//! every request times out, with its server pushes sent to a receiver, and a pub/sub
//! listener that notes what it hears in [`baton::Notices`] and wakes the backend.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, PushInfo};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{baton, switchover, Keys, RedisSettings};
use crate::backend::{BackendError, Wake};
use crate::backoff::Backoff;

/// One Redis server: a self-reconnecting connection whose every request times out,
/// and a pub/sub listener that wakes `wake` on the election's events.
pub(crate) struct Node {
    pub(crate) conn: ConnectionManager,
    /// What the listener heard besides the wake-up (see [`baton::Notices`]).
    pub(crate) notices: Arc<baton::Notices>,
    listener: JoinHandle<()>,
}

impl Node {
    /// Connects lazily (an unreachable server is not an error here, the elector
    /// retries), with the command connection on RESP3 and its server pushes (tracking
    /// invalidations, and the library's own disconnect notices) sent to the returned
    /// receiver; the listener hears new holders as `hears` says (see [`baton`]): a
    /// `redis` candidate's election, a `redlock` one on every node, or the read-write
    /// lock (see [`rw`]).
    pub(crate) fn connect(
        settings: &RedisSettings,
        keys: &Keys,
        identity: &str,
        wake: Arc<Notify>,
        op_timeout: Duration,
        hears: Hears,
    ) -> Result<(Node, mpsc::UnboundedReceiver<PushInfo>), BackendError> {
        let (pushed, pushes) = mpsc::unbounded_channel();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(op_timeout))
            .set_response_timeout(Some(op_timeout))
            .set_number_of_retries(1)
            .set_max_delay(op_timeout)
            .set_push_sender(pushed);
        let resp3 = settings
            .info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(settings.info.clone().set_redis_settings(resp3))
            .map_err(store("connect"))?;
        let conn =
            ConnectionManager::new_lazy_with_config(client, config).map_err(store("connect"))?;
        // The listener stays on the protocol of the URL.
        let listen_client = redis::Client::open(settings.info.clone()).map_err(store("connect"))?;
        let db = settings.info.redis_settings().db();
        let notices = Arc::new(baton::Notices::default());
        let listener = tokio::spawn(listen(Listen {
            client: listen_client,
            keys: keys.clone(),
            presence: switchover::presence_channel(&keys.presence, identity),
            db,
            wake,
            notices: notices.clone(),
            hears,
            op_timeout,
        }));
        Ok((
            Node {
                conn,
                notices,
                listener,
            },
            pushes,
        ))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// A request the server refused because it arrived after its use-by: the elector had
/// stopped waiting for it (see [`super::store_clock`]).
pub(crate) fn too_late(op: &'static str) -> BackendError {
    BackendError::Store {
        op,
        message: "the request reached the server after its use-by and was refused".into(),
    }
}

pub(crate) fn store(op: &'static str) -> impl FnOnce(redis::RedisError) -> BackendError {
    move |e| {
        if e.is_timeout() {
            // The connection's own response timeout: the request may still act.
            BackendError::TimedOut {
                op,
                detail: e.to_string(),
            }
        } else {
            BackendError::Store {
                op,
                message: e.to_string(),
            }
        }
    }
}

/// What the pub/sub listener needs.
pub(crate) struct Listen {
    pub(crate) client: redis::Client,
    pub(crate) keys: Keys,
    /// This candidate's presence channel (see [`switchover`]).
    pub(crate) presence: String,
    pub(crate) db: i64,
    pub(crate) wake: Arc<Notify>,
    pub(crate) notices: Arc<baton::Notices>,
    pub(crate) hears: Hears,
    pub(crate) op_timeout: Duration,
}

/// Which message names a new holder for the listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hears {
    /// `acquired|…` on the announcement channel, published by the new leader once it
    /// has claimed (`redlock`); the take's own `acquired|…` on the events channel
    /// wakes nobody.
    Announcements,
    /// As `Announcements` (`redis`, an election's candidate), and the read-write
    /// lock's channel too, noted in [`baton::Notices`] and waking only while the
    /// candidate waits for the read-write lock (see [`RedisBackend::wait_quietly`]).
    Election,
    /// None: every message on the events channel and on the read-write lock's channel
    /// asks for a look (`redis --mode`, see [`rw`]).
    ReadWrite,
}

/// Keeps one pub/sub connection subscribed to the election's events, to key expiry
/// events and to this candidate's presence channel (which lists it as a live
/// candidate while the connection lives), and wakes the follower on each event, with
/// what it heard in `notices`: an announcement's value, or a request to look (a
/// release announced to everyone, an expiry). Reconnects with backoff; after every
/// (re)subscribe it asks to look once, since messages may have been missed.
pub(crate) async fn listen(l: Listen) {
    let expired = format!("__keyevent@{}__:expired", l.db);
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        let subscribed = async {
            let mut pubsub = l.client.get_async_pubsub().await?;
            pubsub.subscribe(&l.keys.events).await?;
            if l.hears != Hears::ReadWrite {
                pubsub.subscribe(&l.keys.leader).await?;
            }
            if l.hears != Hears::Announcements {
                pubsub.subscribe(&l.keys.rw).await?;
            }
            pubsub.subscribe(&expired).await?;
            pubsub.subscribe(&l.presence).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(l.op_timeout, subscribed).await {
            Ok(Ok(mut pubsub)) => {
                backoff.reset();
                l.notices.look();
                l.wake.notify_one();
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    if heard(&l, &expired, &msg) {
                        l.wake.notify_one();
                    }
                }
                tracing::debug!("redis pub/sub connection closed; reconnecting");
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "redis pub/sub subscribe failed"),
            Err(_) => tracing::debug!("redis pub/sub subscribe timed out"),
        }
        tokio::time::sleep(backoff.next_wait()).await;
    }
}

/// Notes what one pub/sub message says; `true` when it concerns the election.
fn heard(l: &Listen, expired: &str, msg: &redis::Msg) -> bool {
    let channel = msg.get_channel_name();
    let payload = msg.get_payload_bytes();
    let announced = |value: &[u8]| {
        l.notices.announce(&String::from_utf8_lossy(value));
        true
    };
    let look = || {
        l.notices.look();
        true
    };
    if channel == l.keys.events {
        match (payload.strip_prefix(b"acquired|"), l.hears) {
            (Some(_), Hears::Announcements | Hears::Election) => false,
            _ => look(),
        }
    } else if channel == l.keys.rw {
        match l.hears {
            Hears::ReadWrite => look(),
            Hears::Election => l.notices.rw_news(),
            Hears::Announcements => false,
        }
    } else if channel == l.keys.leader {
        payload.strip_prefix(b"acquired|").is_some_and(announced)
    } else if channel == expired && payload == l.keys.lock.as_bytes() {
        look()
    } else {
        false
    }
}

/// A Redis-family follower's wait (see [`crate::backend::wait_for_wake`]).
pub(crate) async fn wait_for_notice(
    wake: &Notify,
    hint: &mut Option<Instant>,
    max: Duration,
) -> Wake {
    crate::backend::wait_for_wake(wake, hint, max).await;
    Wake::Changed
}
