//! Publishers: each reads `Status` (and never talks to a backend).

pub mod drain;
pub mod events;
pub mod exec;
pub mod hooks;
pub mod http;
pub mod label;
pub mod metrics;
