//! The injector's decisions: what a Pod asks for by its `leasekeeper.io/*` annotations,
//! whether the sidecar in that Pod would accept those settings, and the JSONPatch that
//! adds the sidecar. Pure functions of the Pod, the sidecar template and the native
//! sidecar switch: `cmd::inject` serves them as a mutating admission webhook.
//!
//! What it guarantees:
//! - Every setting is checked by the sidecar's own parsing (`config::Settings`), fed
//!   the environment the injected container will have; a value the sidecar would
//!   refuse at its start is refused at admission instead, naming the annotation.
//! - An unknown `leasekeeper.io/*` annotation is refused (a typo is not ignored).
//! - Injection is idempotent: a Pod that carries the sidecar (a container or init
//!   container named `leasekeeper`, the copy step of exec mode, or the status
//!   annotation) is left as it is.
//! - The patch only adds (the label, the status annotation, the container, volumes)
//!   and, in exec mode, replaces the one wrapped container: nothing else of the Pod
//!   is touched.
//!
//! [`missed`] is the other half: it tells, from the Pods the API lists, which asked for
//! the sidecar and run without it (admitted while the webhook was down with
//! `failurePolicy: Ignore`).

pub mod annotations;
pub mod check;
pub mod metrics;
pub mod missed;
pub mod mutate;
pub mod template;

pub use annotations::Refusal;
pub use mutate::{decide, Decision};
pub use template::Template;
