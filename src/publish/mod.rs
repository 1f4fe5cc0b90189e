//! Publishers: each reads `Status` (and never talks to a backend).

pub mod exec;
pub mod http;
pub mod label;
pub mod metrics;
