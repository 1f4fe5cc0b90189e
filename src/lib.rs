//! leasekeeper: a leader-election sidecar.
//!
//! Data flows one way (DESIGN §1): a [`backend::Backend`] feeds the
//! [`elector::Elector`], which publishes one [`status::Status`] through a
//! `tokio::sync::watch`; the publishers in [`publish`] only read it.

pub mod backend;
pub mod backoff;
pub mod clock;
pub mod cmd;
pub mod config;
pub mod elector;
pub mod publish;
pub mod sabotage;
pub mod status;
