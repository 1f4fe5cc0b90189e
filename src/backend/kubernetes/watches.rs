//! The Lease's watch streams, kept in the backend (a dropped future that polled one
//! loses no event), and their events as the cores take them ([`Heard`]).

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::WatchEvent;
use tokio::time::{timeout_at, Instant};

use super::answers::Heard;

/// The events of a watch on the Lease.
pub(super) type LeaseEvents = BoxStream<'static, Result<WatchEvent<Lease>, kube::Error>>;

/// One watch's stream, while it is open.
#[derive(Default)]
pub(super) struct Events {
    /// (In a mutex only to make the backend `Sync`; it is reached through `&mut` alone.)
    stream: std::sync::Mutex<Option<LeaseEvents>>,
}

impl Events {
    fn stream(&mut self) -> &mut Option<LeaseEvents> {
        self.stream
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn set(&mut self, events: LeaseEvents) {
        *self.stream() = Some(events);
    }

    pub(super) fn close(&mut self) {
        *self.stream() = None;
    }

    /// The next event; `None` when the time is up at `until` first. Without a stream,
    /// [`Heard::Ended`].
    pub(super) async fn next(&mut self, until: Option<Instant>) -> Option<Heard> {
        let Some(events) = self.stream().as_mut() else {
            return Some(Heard::Ended);
        };
        let item = match until {
            Some(until) => timeout_at(until, events.next()).await.ok()?,
            None => events.next().await,
        };
        Some(heard(item))
    }
}

/// A stream's item as the cores take it.
fn heard(item: Option<Result<WatchEvent<Lease>, kube::Error>>) -> Heard {
    match item {
        Some(Ok(WatchEvent::Added(lease) | WatchEvent::Modified(lease))) => {
            Heard::Written(Box::new(lease))
        }
        Some(Ok(WatchEvent::Deleted(lease))) => Heard::Deleted(lease.metadata.resource_version),
        Some(Ok(WatchEvent::Bookmark(b))) => Heard::Bookmark(b.metadata.resource_version),
        Some(Ok(WatchEvent::Error(status))) => Heard::Error(status.code),
        Some(Err(e)) => Heard::Broke(e.to_string()),
        None => Heard::Ended,
    }
}
