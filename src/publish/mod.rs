//! Publishers: each reads `Status` (and never talks to a backend).

pub mod drain;
// The Events and the Pod label talk to the Kubernetes API: with the `kubernetes`
// feature only. Without it their flags stay (and are refused by name when on).
#[cfg(feature = "kubernetes")]
pub mod events;
#[cfg(not(feature = "kubernetes"))]
pub mod events {
    #[path = "settings.rs"]
    mod settings;
    pub use settings::{Args, Subject};
}
pub mod exec;
pub mod hooks;
pub mod http;
#[cfg(feature = "kubernetes")]
pub mod label;
#[cfg(not(feature = "kubernetes"))]
pub mod label {
    #[path = "settings.rs"]
    mod settings;
    pub use settings::{Args, PodLabelSettings};
}
pub mod metrics;
