//! PostgreSQL's listener: one connection that `LISTEN`s on the table's channel and
//! wakes the follower (and the leader's look at its own row) on every notification
//! for the election, and once after every (re)connect (see the parent module).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgNotification, PgPoolOptions};
use tokio::sync::Notify;

use crate::backoff::Backoff;

/// What the listener task needs.
pub(super) struct Listener {
    pub(super) options: PgConnectOptions,
    pub(super) renewed: Arc<AtomicBool>,
    pub(super) channel: String,
    pub(super) election: String,
    pub(super) wake: Arc<Notify>,
    pub(super) own_changed: Arc<Notify>,
    pub(super) reconnected: Arc<Notify>,
    pub(super) op_timeout: Duration,
}

/// Keeps one connection listening on the table's channel; wakes the follower on
/// every notification for our election, and once after every (re)connect.
pub(super) async fn listen(p: Listener) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(p.op_timeout)
            .connect_lazy_with(p.options.clone());
        let listening = async {
            let mut l = PgListener::connect_with(&pool).await?;
            l.eager_reconnect(false);
            l.listen(&p.channel).await?;
            Ok::<_, sqlx::Error>(l)
        };
        match tokio::time::timeout(p.op_timeout, listening).await {
            Ok(Ok(mut l)) => {
                backoff.reset();
                p.renewed.store(true, Ordering::SeqCst);
                p.wake.notify_one();
                p.own_changed.notify_one();
                relay(&mut l, &p).await;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "postgres LISTEN failed"),
            Err(_) => tracing::debug!("postgres LISTEN timed out"),
        }
        drop(pool);
        tokio::time::sleep(backoff.next_wait()).await;
    }
}

/// Passes our election's notifications on until the connection must be renewed.
async fn relay(l: &mut PgListener, p: &Listener) {
    loop {
        tokio::select! {
            n = l.try_recv() => if !relayed(n, p) {
                return;
            },
            _ = p.reconnected.notified() => return,
        }
    }
}

/// Passes a notification (`n`) on when it is for our election: it wakes the
/// follower and the leader's look at its own row. False when the connection is lost
/// or failed: it is renewed.
fn relayed(n: Result<Option<PgNotification>, sqlx::Error>, p: &Listener) -> bool {
    match n {
        Ok(Some(n)) => {
            if n.payload() == p.election {
                p.wake.notify_one();
                p.own_changed.notify_one();
            }
            true
        }
        Ok(None) => {
            tracing::debug!("postgres listener connection lost; reconnecting");
            false
        }
        Err(e) => {
            tracing::debug!(error = %e, "postgres listener failed; reconnecting");
            false
        }
    }
}
