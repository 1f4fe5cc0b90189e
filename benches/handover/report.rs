//! The run's cells: each printed as it is measured (a whole run is long, and people
//! watch it), saved at the end to `target/bench-results.md`, and handed to `page` to
//! write docs/benchmarks.md.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::page::{self, Key, Run};
use crate::stats::Stats;

pub struct Report {
    cells: BTreeMap<Key, Option<String>>,
    /// The median (ms) of every latency cell, for the ratios between them.
    medians: BTreeMap<Key, f64>,
    /// The cells as printed, for `target/bench-results.md`.
    lines: String,
    load_at_start: String,
    started: SystemTime,
}

impl Report {
    /// Prints the header of the cells' table.
    pub fn start() -> Report {
        let header = "| table | row | column | value |\n|---|---|---|---|\n";
        print!("{header}");
        Report {
            cells: BTreeMap::new(),
            medians: BTreeMap::new(),
            lines: header.to_owned(),
            load_at_start: load_average(),
            started: SystemTime::now(),
        }
    }

    /// A figure for the cell `key`.
    pub fn value(&mut self, key: Key, value: String) {
        self.record(key, Some(value), "");
    }

    /// min / median / p99 of `latencies` (ms) for the cell `key`; `—` when there are
    /// none (a peer that did not run).
    pub fn latency(&mut self, key: Key, latencies: Vec<f64>) {
        self.labelled_latency(key, "", latencies);
    }

    /// A latency cell whose figure follows `label` (e.g. the ttl: `ttl 1 s: …`).
    pub fn labelled_latency(&mut self, key: Key, label: &str, latencies: Vec<f64>) {
        let stats = Stats::of(latencies);
        if let Some(s) = &stats {
            self.medians.insert(key, s.median());
        }
        match stats {
            Some(s) if label.is_empty() => self.record(key, Some(s.in_ms()), &s.detail()),
            Some(s) => self.record(key, Some(format!("{label}: {}", s.in_ms())), &s.detail()),
            None => self.record(key, None, ""),
        }
    }

    /// The median of `values` (ms) alone for the cell `key`; `—` when there are none.
    pub fn median(&mut self, key: Key, values: Vec<f64>) {
        let median = Stats::of(values).map(|s| format!("{:.2}", s.median()));
        self.record(key, median, "");
    }

    /// The ratio of the medians of the latency cells `over` and `under` (`1.42×`) for
    /// the cell `key`; `—` when either measured nothing.
    pub fn ratio(&mut self, key: Key, over: Key, under: Key) {
        let ratio = match (self.medians.get(&over), self.medians.get(&under)) {
            (Some(a), Some(b)) if *b > 0.0 => Some(format!("{:.2}×", a / b)),
            _ => None,
        };
        self.record(key, ratio, "");
    }

    /// Prints the cell and keeps it; `detail` is printed but left off the page.
    fn record(&mut self, key: Key, value: Option<String>, detail: &str) {
        if !page::has_cell(key) {
            eprintln!("bench: {key} is no cell of docs/benchmarks.md (benches/handover/tables.rs); it goes to target/bench-results.md only");
        }
        let shown = value.as_deref().unwrap_or("—");
        let line = format!(
            "| {} | {} | {} | {shown}{detail} |\n",
            key.table, key.row, key.column
        );
        print!("{line}");
        self.lines.push_str(&line);
        self.cells.insert(key, value);
    }

    /// Saves the cells to `target/bench-results.md` and hands them back as the run that
    /// `command` started.
    pub fn finish(self, whole: bool, command: String) -> Run {
        let _ = std::fs::write("target/bench-results.md", &self.lines);
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let end = load_average();
        let since_epoch = self.started.duration_since(UNIX_EPOCH).unwrap_or_default();
        Run {
            whole,
            command,
            machine: page::machine(cores, (&self.load_at_start, &end), &os),
            date: page::utc_date(since_epoch.as_secs()),
            cells: self.cells,
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default()
}
