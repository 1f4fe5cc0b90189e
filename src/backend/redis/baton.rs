//! A graceful handover on the `redis` backend wakes one follower, not all of them.
//!
//! - **The baton**: a plain release (the script that deletes our lock) also leaves one
//!   element in the list `leasekeeper:{<election>}:baton` (with a PX of one ttl). Every
//!   waiting follower keeps one `BLPOP <baton> 0` open on a connection of its own, and
//!   Redis hands a pushed element to exactly one blocked client, the one that has
//!   waited longest. That follower looks at once (the take script); the others are not
//!   woken by the release. The baton only decides who looks first, never who leads:
//!   every take is still the script's compare-and-act with its fencing counter.
//! - **What followers track**: every renewal also writes `leasekeeper:{<election>}:alive`
//!   (the holder's value, PX one ttl), and a follower's `CLIENT TRACKING` watches that
//!   key, not the lock: each renewal is pushed to it (the holder lives), but a
//!   release's `DEL` and a new holder's `SET` of the lock wake nobody.
//! - **The announcement**: a new leader publishes `acquired|<value>` on
//!   `leasekeeper:{<election>}:leader` once its claim has begun (again before its next
//!   renewal until the server took it), and a follower reads the new holder from that
//!   message itself ([`Notices`]), without a request. So 99 followers wake after the
//!   claim, not during it. (The take script still publishes `acquired|…` on the events
//!   channel, which older candidates and outside observers follow; a `redis` follower's
//!   listener drops it without waking the backend.)
//! - **Fallbacks**: a baton is lost when its follower dies between the pop and its look
//!   (a follower whose look fails looks again after its backoff). Then, as after a
//!   crashed holder, followers look when the renewals they track stop (3/4 ttl with the
//!   default renew interval, or the holder's expiry). An older leasekeeper's release
//!   publishes `released|…`, which makes every follower look at once; so does a
//!   switchover (`release_to`), since the named candidate must look whoever holds the
//!   baton. A push of the tracked key that is no renewal at its cadence makes a
//!   follower look after [`grace`] (250–500 ms) unless an announcement comes first.
//!
//! A follower's `BLPOP` is sent once when it starts to wait and again only after it
//! got a baton, so it sends nothing at steady state. A leader keeps none open: the
//! follower that wins disarms its waiter (`CLIENT UNBLOCK` when one was still blocked),
//! and a baton popped by a waiter that is no longer armed is pushed back at the head
//! of the list for the next follower.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backoff::Backoff;

/// Lua: hand the baton out (`KEYS[b]` the list, `ARGV[t]` its PX in ms): one element,
/// whatever an earlier release left.
pub(crate) fn hand_out(list: &str, px: &str) -> String {
    format!(
        "redis.call('DEL', {list})\nredis.call('RPUSH', {list}, '1')\nredis.call('PEXPIRE', {list}, {px})\n"
    )
}

/// How long a follower that saw the lock change waits for an announcement before it
/// looks by itself (a lost baton, an older leasekeeper, an operator's change).
pub(crate) fn grace() -> Duration {
    Duration::from_millis(rand::rng().random_range(250..500))
}

/// What the pub/sub listener and the baton waiter tell the backend, besides waking it.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    /// Look now (run the take script): a baton, a release announced to everyone, an
    /// expiry event, a (re)subscription that may have missed messages.
    look: AtomicBool,
    /// A baton came (this follower is the one the release woke): the next take most
    /// likely wins, and turns the holder's tracking on in the same round trip.
    baton: AtomicBool,
    /// The last `acquired|<value>` announcement, with when it arrived.
    announced: Mutex<Option<(Instant, String)>>,
    /// A message on the read-write lock's channel since the last look (an election's
    /// candidate, see [`super::RedisBackend`]: a release of the last shared holder, a
    /// waiting candidate's withdrawal, the drop of a gone one's place).
    rw: AtomicBool,
    /// Whether such a message wakes the backend (it waits for the read-write lock).
    wants_rw: AtomicBool,
}

impl Notices {
    pub(crate) fn look(&self) {
        self.look.store(true, Ordering::SeqCst);
    }

    /// Takes the request to look, if any.
    pub(crate) fn take_look(&self) -> bool {
        self.look.swap(false, Ordering::SeqCst)
    }

    /// A baton came: look, as the one follower the release woke.
    pub(crate) fn baton(&self) {
        self.baton.store(true, Ordering::SeqCst);
        self.look();
    }

    /// Takes the note of a baton, if any.
    pub(crate) fn take_baton(&self) -> bool {
        self.baton.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn announce(&self, value: &str) {
        if let Ok(mut a) = self.announced.lock() {
            *a = Some((Instant::now(), value.to_owned()));
        }
    }

    /// Takes the last announcement, if any.
    pub(crate) fn take_announcement(&self) -> Option<(Instant, String)> {
        self.announced.lock().ok()?.take()
    }

    /// Notes a message on the read-write lock's channel; `true` when it wakes.
    pub(crate) fn rw_news(&self) -> bool {
        self.rw.store(true, Ordering::SeqCst);
        self.wants_rw.load(Ordering::SeqCst)
    }

    /// Takes the note of a message on the read-write lock's channel, if any.
    pub(crate) fn take_rw(&self) -> bool {
        self.rw.swap(false, Ordering::SeqCst)
    }

    /// Whether the read-write lock's channel wakes the backend from now on.
    pub(crate) fn want_rw(&self, wanted: bool) {
        self.wants_rw.store(wanted, Ordering::SeqCst);
    }

    /// Forgets what is pending (a tenure of our own begins or ends: the announcements
    /// so far are of it or older).
    pub(crate) fn clear(&self) {
        self.take_announcement();
        self.take_look();
        self.take_baton();
    }
}

/// A follower's blocked `BLPOP` on the baton list, on a connection of its own.
pub(crate) struct Waiter {
    armed: Arc<watch::Sender<bool>>,
    /// The waiter connection's `CLIENT ID`, 0 before it is known.
    client_id: Arc<AtomicI64>,
    task: JoinHandle<()>,
}

impl Waiter {
    pub(crate) fn spawn(
        client: redis::Client,
        list: String,
        notices: Arc<Notices>,
        wake: Arc<Notify>,
        op_timeout: Duration,
    ) -> Waiter {
        let armed = Arc::new(watch::channel(false).0);
        let client_id = Arc::new(AtomicI64::new(0));
        let task = tokio::spawn(wait_for_batons(Waiting {
            client,
            list,
            armed: armed.clone(),
            client_id: client_id.clone(),
            notices,
            wake,
            op_timeout,
        }));
        Waiter {
            armed,
            client_id,
            task,
        }
    }

    /// A follower waits: the next baton is for us (one `BLPOP`, if none is open).
    pub(crate) fn arm(&self) {
        self.armed.send_if_modified(|a| !std::mem::replace(a, true));
    }

    /// We lead (or stop): no baton is for us. Returns the `CLIENT UNBLOCK` to send on
    /// the command connection when a `BLPOP` may still be blocked at the server.
    pub(crate) fn disarm(&self) -> Option<redis::Cmd> {
        let was = self.armed.send_replace(false);
        let id = self.client_id.load(Ordering::SeqCst);
        (was && id > 0).then(|| {
            let mut unblock = redis::cmd("CLIENT");
            unblock.arg("UNBLOCK").arg(id);
            unblock
        })
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Waiting {
    client: redis::Client,
    list: String,
    armed: Arc<watch::Sender<bool>>,
    client_id: Arc<AtomicI64>,
    notices: Arc<Notices>,
    wake: Arc<Notify>,
    op_timeout: Duration,
}

/// While armed, one `BLPOP <list> 0` at a time. A baton that arrives while armed wakes
/// the backend to look and disarms (the backend arms again when it waits again); one
/// that arrives after a disarm goes back to the head of the list.
async fn wait_for_batons(w: Waiting) {
    let mut armed = w.armed.subscribe();
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(w.op_timeout))
        .set_response_timeout(None);
    let mut conn: Option<redis::aio::MultiplexedConnection> = None;
    loop {
        if armed.wait_for(|a| *a).await.is_err() {
            return;
        }
        if conn.is_none() {
            conn = connect(&w, &config).await;
        }
        let Some(c) = conn.as_mut() else {
            tokio::time::sleep(backoff.next_wait()).await;
            continue;
        };
        let popped: redis::RedisResult<Option<(String, String)>> =
            redis::cmd("BLPOP").arg(&w.list).arg(0).query_async(c).await;
        match popped {
            Ok(Some((_, baton))) => {
                backoff.reset();
                if w.armed.send_replace(false) {
                    w.notices.baton();
                    w.wake.notify_one();
                } else {
                    give_back(c, &w.list, &baton).await;
                }
            }
            // Unblocked (we lead now): wait to be armed again.
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "redis baton wait failed; reconnecting");
                conn = None;
                w.client_id.store(0, Ordering::SeqCst);
                // Whatever was handed out meanwhile is not ours to know: look.
                w.notices.look();
                w.wake.notify_one();
                tokio::time::sleep(backoff.next_wait()).await;
            }
        }
    }
}

async fn connect(
    w: &Waiting,
    config: &redis::AsyncConnectionConfig,
) -> Option<redis::aio::MultiplexedConnection> {
    let mut c = w
        .client
        .get_multiplexed_async_connection_with_config(config)
        .await
        .ok()?;
    let id = tokio::time::timeout(
        w.op_timeout,
        redis::cmd("CLIENT").arg("ID").query_async::<i64>(&mut c),
    )
    .await
    .ok()?
    .ok()?;
    w.client_id.store(id, Ordering::SeqCst);
    Some(c)
}

/// A baton that came to a waiter no longer armed goes back to the head of the list,
/// for the follower that has waited longest since.
async fn give_back(c: &mut redis::aio::MultiplexedConnection, list: &str, baton: &str) {
    let _: redis::RedisResult<()> = redis::cmd("LPUSH")
        .arg(list)
        .arg(baton)
        .query_async(c)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grace_is_between_a_quarter_and_half_a_second() {
        for _ in 0..100 {
            let g = grace();
            assert!(g >= Duration::from_millis(250) && g < Duration::from_millis(500));
        }
    }

    #[test]
    fn the_baton_is_one_element_that_expires() {
        let lua = hand_out("KEYS[4]", "ARGV[4]");
        assert_eq!(
            lua,
            "redis.call('DEL', KEYS[4])\nredis.call('RPUSH', KEYS[4], '1')\nredis.call('PEXPIRE', KEYS[4], ARGV[4])\n"
        );
    }
}
