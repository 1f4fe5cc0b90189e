//! Percentiles of a series of latencies.

pub struct Stats {
    min: f64,
    median: f64,
    p99: f64,
    max: f64,
    n: usize,
}

impl Stats {
    /// Min, median, p99 (nearest rank) and max of `v`; none when `v` is empty. Below 51
    /// values the p99 is the max.
    pub fn of(mut v: Vec<f64>) -> Option<Stats> {
        v.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
        Some(Stats {
            min: *v.first()?,
            median: at(0.5),
            p99: at(0.99),
            max: v[v.len() - 1],
            n: v.len(),
        })
    }

    pub fn median(&self) -> f64 {
        self.median
    }

    /// `min / median / p99` in ms, as the page shows a latency.
    pub fn in_ms(&self) -> String {
        format!("{:.2} / {:.2} / {:.2}", self.min, self.median, self.p99)
    }

    /// What the page leaves out: ` (max …, n=…)`.
    pub fn detail(&self) -> String {
        format!(" (max {:.2}, n={})", self.max, self.n)
    }
}
