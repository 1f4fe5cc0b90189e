//! The floor of each handover: the store operations of leasekeeper's handover (the
//! release, the store's notice to the waiting candidate, its take with the fencing
//! token), made in this process with the client crate the backend uses, no sidecar,
//! on the same server in the same run. Timed as a handover is: from the release's
//! start to the take's answer. One module per store.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::page::Key;
use crate::report::Report;

pub mod etcd;
pub mod file;
pub mod kubernetes;
pub mod redis;
pub mod sql;
pub mod zookeeper;

/// The floor's cell of `row` in `table`, and leasekeeper's figure over it (the ratio
/// of the medians); `—` for both when the floor failed (said on stderr).
pub fn report(
    report: &mut Report,
    table: &'static str,
    row: &'static str,
    measured: anyhow::Result<Vec<f64>>,
) {
    let floor = measured.unwrap_or_else(|e| {
        eprintln!("bench: the floor of {table} / {row}: {e:#}");
        Vec::new()
    });
    let key = |column| Key::new(table, row, column);
    report.latency(key("floor"), floor);
    report.ratio(key("ratio"), key("leasekeeper"), key("floor"));
}

/// Runs `f` on a runtime of its own, tokio's multi-threaded one as the sidecar's.
pub fn block_on<T>(f: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// `d` in milliseconds, as the page shows a latency.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// From `t0` to `t1` in ms (0 when `t1` came first).
pub fn between(t0: Instant, t1: Instant) -> f64 {
    ms(t1.saturating_duration_since(t0))
}

/// How long a waiting client is given to have its wait (a blocked pop, a watch) in
/// place at the server before the release is sent.
pub const SETTLE: Duration = Duration::from_millis(20);
