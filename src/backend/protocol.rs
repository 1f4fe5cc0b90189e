//! The `Backend` protocol written once over a store's side of it ([`Transport`]): a
//! store sends its requests and its core decides what their answers mean; what every
//! store does alike around them is here, in [`Protocol`].
//!
//! - **The own-record watch.** A leader hears of its own record from its store (a
//!   push, a watch event, a look at a timer) and steps down the moment the record is
//!   gone or another's (DESIGN invariant 9). Each store gives the next piece of news
//!   ([`Transport::own_news`]), its core judges it with the time of its arrival
//!   ([`Transport::on_own`]), and when the judgement needs the record read again, the
//!   store reads it ([`Transport::own_look`]). The loop over them is [`Protocol`]'s.
//! - **The staggered wait.** At a handover every follower's watch fires at once; the
//!   next in line looks at once and the others wait a random stagger first
//!   ([`super::stagger`]), unless their own turn comes sooner
//!   ([`Transport::turn_comes`]). A store whose core staggers says until when
//!   ([`Transport::stagger_until`]); the wait is [`Protocol`]'s.
//! - **The switchover's refusal with `--mode`.** A holder of the read-write lock has no
//!   successor to name; a store says which modes it hands over in
//!   ([`Transport::no_switchover`]) and [`Protocol`] refuses the others.
//!
//! The store's clock ([`super::store_clock`]) stays with the cores that send it in
//! their requests. The token floor is one type ([`super::token_floor::TokenFloor`]),
//! kept by the cores whose take requests carry it (Redis, Redlock, SQL).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{Backend, BackendError, Campaign, Renewal, Wake};

/// What a store's core makes of one piece of news about the leader's own record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Own<L> {
    /// Still ours, as far as this news tells.
    Quiet,
    /// Gone or another's: step down.
    Lost,
    /// Only a read of the record can tell (`L` says which).
    Look(L),
}

/// How a follower's next wait goes, as the store's core says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waits {
    /// No wait: look again at once (our place in the store is gone).
    Now,
    /// The rest of a stagger (see [`Transport::stagger_until`]), then a look.
    Stagger,
    /// The store's own wait ([`Transport::wait`]).
    Store,
}

/// How a store's own wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    Wake(Wake),
    /// A change came that a follower not next in line answers after a stagger.
    Stagger,
}

/// A store's side of the [`Backend`] protocol: its requests and its core's decisions.
/// [`Protocol`] implements [`Backend`] over it. The methods without a counterpart in
/// [`Backend`] are the pieces of its generic parts (see the module doc).
pub trait Transport: Send + 'static {
    /// A piece of news about the leader's own record.
    type News: Send;
    /// A read of the leader's own record that some news calls for.
    type Look: Send;

    /// See [`Backend::name`].
    fn name(&self) -> &'static str;
    /// See [`Backend::lease_ttl`].
    fn lease_ttl(&self) -> Duration;
    /// See [`Backend::lease_index`].
    fn lease_index(&self) -> u32 {
        0
    }
    /// See [`Backend::slots`].
    fn slots(&self) -> Option<crate::status::Slots> {
        None
    }
    /// See [`Backend::tenure_hold`].
    fn tenure_hold(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }

    /// The `--mode` flag of a candidate this store does not hand over by a switchover
    /// (`None`: it does).
    fn no_switchover(&self) -> Option<&'static str>;

    /// See [`Backend::campaign`].
    fn campaign(&mut self) -> impl Future<Output = Result<Campaign, BackendError>> + Send;
    /// See [`Backend::renew`].
    fn renew(&mut self) -> impl Future<Output = Result<Renewal, BackendError>> + Send;
    /// See [`Backend::release`].
    fn release(&mut self) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// See [`Backend::release_to`]; only asked when [`Transport::no_switchover`] allows.
    fn release_to(&mut self, to: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// See [`Backend::candidates`]; only asked when [`Transport::no_switchover`] allows.
    fn candidates(
        &mut self,
    ) -> impl Future<Output = Result<Option<Vec<String>>, BackendError>> + Send;

    /// How the next wait goes (a store whose core never staggers keeps the default).
    fn waits(&mut self) -> Waits {
        Waits::Store
    }
    /// The store's own wait for a change, `max` at the latest.
    fn wait(&mut self, max: Duration) -> impl Future<Output = Waited> + Send;
    /// Until when the current stagger lasts (`None`: it is over).
    fn stagger_until(&mut self) -> Option<Instant> {
        None
    }
    /// Resolves when our own turn comes during a stagger (never, by default).
    fn turn_comes(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
    /// The stagger is over: a look follows.
    fn stagger_over(&mut self) {}

    /// The next news about our own record, while leading; `None` while nothing
    /// watches it (the next renew reads it, and watches again). Cancel-safe: news not
    /// returned yet stays queued in the store's side.
    fn own_news(&mut self) -> impl Future<Output = Option<Self::News>> + Send;
    /// What `news`, arrived at `now`, says of our own record.
    fn on_own(&mut self, now: Instant, news: Self::News) -> Own<Self::Look>;
    /// The read of our own record that `look` asks for: whether it shows it lost.
    fn own_look(&mut self, look: Self::Look) -> impl Future<Output = bool> + Send;

    /// See [`Backend::handover_requested`].
    fn handover_requested(&mut self) -> impl Future<Output = ()> + Send + 'static {
        std::future::pending()
    }
    /// See [`Backend::retire`].
    fn retire(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A store as a [`Backend`]: its [`Transport`] and the protocol around it.
pub struct Protocol<T> {
    store: T,
}

impl<T> Protocol<T> {
    /// The protocol over `store`.
    pub fn over(store: T) -> Protocol<T> {
        Protocol { store }
    }

    /// The store's side.
    pub fn store(&self) -> &T {
        &self.store
    }

    /// The store's side, to change.
    pub fn store_mut(&mut self) -> &mut T {
        &mut self.store
    }
}

impl<T: Transport> Protocol<T> {
    /// The refusal of a switchover by a candidate of a `--mode` the store does not
    /// hand over in.
    fn switchover(&self) -> Result<(), BackendError> {
        match self.store.no_switchover() {
            Some(mode) => Err(super::no_switchover_with(mode)),
            None => Ok(()),
        }
    }

    /// The rest of a stagger: until it passes or our own turn comes; then a look.
    /// Cancel-safe: dropped, the next wait resumes it.
    async fn finish_stagger(&mut self) -> Wake {
        if let Some(until) = self.store.stagger_until() {
            tokio::select! {
                _ = self.store.turn_comes() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
        self.store.stagger_over();
        Wake::Changed
    }
}

impl<T: Transport> Backend for Protocol<T> {
    fn name(&self) -> &'static str {
        self.store.name()
    }

    fn lease_ttl(&self) -> Duration {
        self.store.lease_ttl()
    }

    fn lease_index(&self) -> u32 {
        self.store.lease_index()
    }

    async fn campaign(&mut self) -> Result<Campaign, BackendError> {
        self.store.campaign().await
    }

    async fn renew(&mut self) -> Result<Renewal, BackendError> {
        self.store.renew().await
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.store.release().await
    }

    async fn wait_for_change(&mut self, max: Duration) -> Wake {
        match self.store.waits() {
            Waits::Now => return Wake::Changed,
            Waits::Stagger => return self.finish_stagger().await,
            Waits::Store => {}
        }
        match self.store.wait(max).await {
            Waited::Wake(wake) => wake,
            Waited::Stagger => self.finish_stagger().await,
        }
    }

    async fn record_lost(&mut self) {
        loop {
            let Some(news) = self.store.own_news().await else {
                return std::future::pending().await;
            };
            let lost = match self.store.on_own(Instant::now(), news) {
                Own::Quiet => false,
                Own::Lost => true,
                Own::Look(look) => self.store.own_look(look).await,
            };
            if lost {
                return;
            }
        }
    }

    async fn candidates(&mut self) -> Result<Option<Vec<String>>, BackendError> {
        self.switchover()?;
        self.store.candidates().await
    }

    async fn release_to(&mut self, to: &str) -> Result<(), BackendError> {
        self.switchover()?;
        self.store.release_to(to).await
    }

    fn handover_requested(&mut self) -> impl Future<Output = ()> + Send + 'static {
        self.store.handover_requested()
    }

    async fn retire(&mut self) {
        self.store.retire().await
    }

    fn tenure_hold(&self) -> Option<std::os::fd::OwnedFd> {
        self.store.tenure_hold()
    }

    fn slots(&self) -> Option<crate::status::Slots> {
        self.store.slots()
    }
}

#[cfg(test)]
mod tests;
