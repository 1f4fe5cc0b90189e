//! What a store declares to the rest of the sidecar: its names, its settings, what it
//! can do ([`Capabilities`]) and how its backends are built ([`Store`]). Each store
//! implements [`Store`] in its own module; `backend::stores` lists them, and the
//! settings and the wiring read them from there and from nowhere else.

use std::future::Future;

use tokio::sync::watch;

use super::{Backend, BackendError, Candidacy, LockMode, SlowPaths};
use crate::settings::ConfigError;
use crate::timing::Timing;

/// What a store can do, declared by the store and read by the settings (`--mode`,
/// `--holders`) and the wiring (the Kubernetes client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// `--mode shared|exclusive`: a read-write lock, or why the store has none.
    pub read_write_lock: Result<(), &'static str>,
    /// `--holders` above 1: numbered slots.
    pub slots: bool,
    /// A switchover to a named candidate (`POST /release?to=`) in the election.
    pub switchover: bool,
    /// Followers hear of a change from the store (a watch, a push, a notification)
    /// rather than by reading it again at the retry interval.
    pub watch: bool,
    /// The backend talks to the Kubernetes API (the sidecar builds a client for it).
    pub kubernetes_client: bool,
}

impl Capabilities {
    /// Every capability but the Kubernetes client.
    pub const ALL: Capabilities = Capabilities {
        read_write_lock: Ok(()),
        slots: true,
        switchover: true,
        watch: true,
        kubernetes_client: false,
    };
}

/// What a store's settings are read with besides its own flags.
pub struct SettingsContext<'a> {
    pub election: &'a str,
    pub timing: &'a Timing,
    /// The Kubernetes API's flags (the namespace).
    pub kube: &'a crate::kube_api::Args,
    /// Accepted but questionable choices, logged once logging is up.
    pub warnings: &'a mut Vec<String>,
}

/// What every store's backends are built with besides their settings.
pub struct BuildContext {
    pub election: String,
    pub identity: String,
    pub timing: Timing,
    pub mode: LockMode,
    /// `--holders`: one backend per slot.
    pub holders: u32,
    /// The Kubernetes API client, when the store declares it needs one.
    pub kube: Option<crate::kube_api::Client>,
    /// A second one, with connections of its own, for the store's long watches: a
    /// watch holds its connection for as long as it is open, so on the first client it
    /// would take the connection a write (a leader's release, a follower's take) is
    /// about to use, and the write would wait for a new connection's TLS handshake.
    pub kube_watches: Option<crate::kube_api::Client>,
    /// Renewals that fell back to a read, for the metrics.
    pub slow_paths: SlowPaths,
    /// True once SIGTERM or SIGINT came: a wait at the start ends at once.
    pub stop: watch::Receiver<bool>,
}

impl BuildContext {
    /// One backend per slot of the election (one slot is the election itself), each
    /// built by `make` for its own lease name and slot number.
    pub fn slots<B>(&self, mut make: impl FnMut(&Candidacy, u32) -> B) -> Vec<B> {
        (0..self.holders)
            .map(|slot| self.in_slot(slot, |lease| make(lease, slot)))
            .collect()
    }

    /// [`BuildContext::slots`] with a `make` that can fail: the first failure, named
    /// by the `setting` it comes from.
    pub fn try_slots<B>(
        &self,
        setting: &'static str,
        mut make: impl FnMut(&Candidacy) -> Result<B, BackendError>,
    ) -> Result<Vec<B>, BuildError> {
        (0..self.holders)
            .map(|slot| self.in_slot(slot, &mut make))
            .collect::<Result<_, _>>()
            .map_err(|source| BuildError::Backend { setting, source })
    }

    /// `make` with the candidacy of slot `slot`.
    fn in_slot<T>(&self, slot: u32, make: impl FnOnce(&Candidacy) -> T) -> T {
        let election = super::slots::slot_election(&self.election, slot);
        make(&Candidacy {
            election: &election,
            identity: &self.identity,
            timing: &self.timing,
            mode: self.mode,
        })
    }
}

/// Why a store's backends could not be built: bad input, named by its setting.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{setting}: {source}")]
    Backend {
        setting: &'static str,
        source: BackendError,
    },
    #[error("{0}")]
    Input(String),
}

/// What runs the elector over a store's backends (the sidecar's wiring).
pub trait Serve {
    type Output;
    fn serve<B: Backend>(self, slots: Vec<B>) -> impl Future<Output = Self::Output>;
}

/// A store: the `--backend` names it answers to, its settings, its capabilities and
/// how its backends are built.
pub trait Store {
    /// Its own flags (a clap `Args`, flattened into the command line).
    type Args;
    type Settings: Clone + std::fmt::Debug;

    /// The settings for `--backend name` (one of the store's names).
    fn settings(
        args: &Self::Args,
        name: &str,
        cx: &mut SettingsContext,
    ) -> Result<Self::Settings, ConfigError>;

    /// The `--backend` name of these settings.
    fn name(settings: &Self::Settings) -> &'static str;

    const CAPABILITIES: Capabilities;

    /// The store's own refusals of a combination of settings.
    fn check(_settings: &Self::Settings, _holders: u32) -> Result<(), ConfigError> {
        Ok(())
    }

    /// The namespace of the Kubernetes object named after the election that holds the
    /// lease (the leadership Events are about it), for a store that keeps it there.
    fn lease_namespace(_settings: &Self::Settings) -> Option<&str> {
        None
    }

    /// Builds one backend per slot and hands them to `serve`.
    fn build_and<S: Serve>(
        settings: &Self::Settings,
        cx: BuildContext,
        serve: S,
    ) -> impl Future<Output = Result<S::Output, BuildError>>;
}
