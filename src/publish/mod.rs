//! Publishers: each reads `Status` (and never talks to a backend).

pub mod http;
pub mod metrics;
