//! Subcommands (DESIGN §1): one module each; `main.rs` only dispatches.

pub mod run;
pub mod sidecar;
pub mod status;

/// The runtime every subcommand runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
