//! Subcommands (DESIGN §1): one module each; `main.rs` only dispatches.

pub mod run;
pub mod status;
