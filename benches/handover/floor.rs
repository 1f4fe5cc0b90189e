//! The floor of each handover: the store operations of leasekeeper's handover (the
//! release, the store's notice to the waiting candidate, its take with the fencing
//! token), made in this process with the client crate the backend uses, no sidecar,
//! on the same server in the same run. Timed as a handover is: from the release's
//! start to the take's answer, with two instants between (the release's answer, and
//! the waiting client's wake) that split it into steps. One module per store.

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

/// One handover at the floor, ms. `total` runs from the release's start (t0) to the
/// take's answer (t1); `release_answered` from t0 to the holder's release call
/// returning, `woke` from t0 to the waiting client's wait returning (the instant before
/// it sends its take), `take` from that wake to t1.
#[derive(Clone, Copy, Debug)]
pub struct Round {
    pub total: f64,
    pub release_answered: f64,
    pub woke: f64,
    pub take: f64,
}

impl Round {
    /// The round whose release started at `t0` and was answered at `answered`, whose
    /// waiting client woke at `woke` and had its take answered at `t1`.
    pub fn new(t0: Instant, answered: Instant, woke: Instant, t1: Instant) -> Round {
        Round {
            total: between(t0, t1),
            release_answered: between(t0, answered),
            woke: between(t0, woke),
            take: between(woke, t1),
        }
    }
}

/// The totals of `rounds`, for the tables that show the floor's total alone.
pub fn totals(rounds: anyhow::Result<Vec<Round>>) -> anyhow::Result<Vec<f64>> {
    rounds.map(|r| r.iter().map(|round| round.total).collect())
}

/// The graceful handover's floor of `row`: its total and the ratio in the graceful
/// table (as `report`), and the medians of its steps in the floor's step table.
pub fn graceful(report: &mut Report, row: &'static str, measured: anyhow::Result<Vec<Round>>) {
    let rounds = measured.unwrap_or_else(|e| {
        eprintln!("bench: the floor of graceful / {row}: {e:#}");
        Vec::new()
    });
    let total = rounds.iter().map(|r| r.total).collect();
    self::report(report, "graceful", row, Ok(total));
    steps(report, row, &rounds);
}

/// The medians of the steps of `rounds`, in the floor's step table's row `row`.
pub fn steps(report: &mut Report, row: &'static str, rounds: &[Round]) {
    let step = |of: fn(&Round) -> f64| -> Vec<f64> { rounds.iter().map(of).collect() };
    let steps = [
        ("release_answered", step(|r| r.release_answered)),
        ("woke", step(|r| r.woke)),
        ("take", step(|r| r.take)),
    ];
    for (column, values) in steps {
        report.median(Key::new("floor_steps", row, column), values);
    }
}

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

/// Runs `f` on a multi-threaded tokio runtime of its own: the floor's two clients and
/// their connections' tasks may run on both cores, where the sidecar's runtime has one
/// thread (`leasekeeper::cmd::runtime`).
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
