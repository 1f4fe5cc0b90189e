//! The results table: printed row by row as it is measured, and saved whole at the end
//! to `target/bench-results.md`.

use crate::stats::Stats;

pub struct Report {
    out: String,
}

impl Report {
    /// Prints the table's header.
    pub fn start() -> Report {
        println!("| measurement | min / median / p99 / max, or value |\n|---|---|");
        Report { out: String::new() }
    }

    pub fn row(&mut self, name: &str, value: String) {
        println!("| {name} | {value} |");
        self.out.push_str(&format!("| {name} | {value} |\n"));
    }

    /// A row of min / median / p99 / max of `latencies` (ms), which must not be empty.
    pub fn latency(&mut self, name: &str, latencies: Vec<f64>) {
        self.row(name, Stats::of(latencies).in_ms());
    }

    /// A latency row, left out when nothing was measured (a peer that never ran).
    pub fn latency_if_any(&mut self, name: &str, latencies: Vec<f64>) {
        if !latencies.is_empty() {
            self.latency(name, latencies);
        }
    }

    /// Writes the rows to `target/bench-results.md` (the header is not repeated there).
    pub fn save(self) {
        let _ = std::fs::write("target/bench-results.md", self.out);
    }
}
