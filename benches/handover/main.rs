//! Benchmarks of DESIGN §8/§9: graceful handover and crash failover latency,
//! backend requests per candidate at steady state, idle footprint, `/leader`
//! throughput and binary size. Run with `make bench` (`cargo bench --bench handover`),
//! which writes docs/benchmarks.md.
//!
//! Latencies are read from the sidecars' own transition logs (CLOCK_MONOTONIC ns):
//! from the instant the signal is sent to the new leader's `claim_start`, so the
//! figures carry no polling error; the bench looks for the claim only once the
//! handover is likely over (`look`), so its looks take no core from it.
//!
//! One module per section (`LK_BENCH_ONLY=<section>[,<section>…]` runs those alone,
//! see `SECTIONS`): `sql` (postgres, mysql; its peer in `sql_peer`, this binary run with
//! `LK_SQL_PEER`), `file`, `redis`, `etcd`, `scale`, `exec`, `kubernetes` (its peer in
//! `client_go`), `zookeeper`, `steady`, `abuse` (the hostile-client crowd), `slots`
//! (`--holders 2`), `modes` (`--mode`). Shared: `group` (sidecars and their handovers),
//! `measure` (what every backend measures alike), `floor` (the store's own
//! handover, in process, each store's in a module of its own), `peer` (other clients' processes),
//! `footprint` (/proc), `machine` (the machine's own wakes, no sidecar), `stats`, `report` (the run's cells, each a table, row and
//! column of the page), `page` (docs/benchmarks.md: its tables in `tables.rs`, and how
//! a run rewrites it) and `settings` (the environment).

#[path = "../../tests/common/mod.rs"]
mod common;

mod abuse;
mod client_go;
mod etcd;
mod exec;
mod file;
mod floor;
mod footprint;
mod group;
mod kubernetes;
mod look;
mod machine;
mod measure;
mod modes;
mod page;
mod peer;
mod redis;
mod report;
mod scale;
mod settings;
mod slots;
mod sql;
mod sql_peer;
mod stats;
mod steady;
mod zookeeper;

use page::{Fate, Key, Run, TABLES};
use report::Report;

/// Measures one section into the report, with this many handovers per series.
type Section = fn(&mut Report, usize);

/// The sections in the order they run, each by its `LK_BENCH_ONLY` name.
const SECTIONS: [(&str, Section); 13] = [
    ("postgres", sql::postgres),
    ("mysql", sql::mysql),
    ("file", file::measure),
    ("redis", redis::measure),
    ("etcd", etcd::measure),
    ("scale", scale::measure),
    ("exec", exec::measure),
    ("kubernetes", kubernetes::measure),
    ("zookeeper", zookeeper::measure),
    ("steady", steady::measure),
    ("abuse", abuse::measure),
    ("slots", slots::measure),
    ("modes", modes::measure),
];

/// The sections whose graceful handovers the step table splits (it also holds the
/// machine's own steps, measured whenever one of them runs).
const STEPS: [&str; 7] = [
    "postgres",
    "mysql",
    "file",
    "redis",
    "etcd",
    "kubernetes",
    "zookeeper",
];

fn main() {
    if let Ok(kind) = std::env::var("LK_SQL_PEER") {
        return sql_peer::run(&kind);
    }
    // `cargo bench` passes --bench; nothing else to parse.
    let rounds = settings::rounds();
    let mut report = Report::start();
    let only = settings::Only::from_env();
    let unknown = only.unknown(&SECTIONS.map(|(name, _)| name));
    assert!(unknown.is_empty(), "LK_BENCH_ONLY: no section {unknown:?}");
    for (name, measure) in SECTIONS {
        if only.runs(name) {
            measure(&mut report, rounds);
        }
    }
    if STEPS.iter().any(|name| only.runs(name)) {
        machine::measure(&mut report, rounds);
    }
    binary_size(&mut report);
    let command = page::command(&settings::given(), cfg!(debug_assertions));
    write_page(&report.finish(only.whole(), command));
}

/// The leasekeeper binary this bench was built with (release, stripped, under `make
/// bench`).
fn binary_size(report: &mut Report) {
    let size = std::fs::metadata(env!("CARGO_BIN_EXE_leasekeeper"))
        .map(|m| m.len())
        .unwrap_or(0);
    let build = if cfg!(debug_assertions) {
        " (debug build)"
    } else {
        ""
    };
    report.value(
        Key::new("footprint", "binary", "value"),
        format!("{:.1} MiB{build}", size as f64 / 1048576.0),
    );
}

/// Rewrites docs/benchmarks.md with `run` and says which tables it wrote and kept.
fn write_page(run: &Run) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/benchmarks.md");
    let existing = std::fs::read_to_string(path).unwrap_or_default();
    std::fs::write(path, page::render(&existing, run)).expect("write docs/benchmarks.md");
    println!("\ndocs/benchmarks.md:");
    for table in TABLES {
        let fate = match table.fate(run) {
            Fate::Written => "written",
            Fate::Kept => "kept   ",
        };
        println!("  {fate} {}", table.heading);
    }
}
