//! Percentiles of a series of latencies.

pub struct Stats {
    min: f64,
    median: f64,
    p99: f64,
    max: f64,
    n: usize,
}

impl Stats {
    /// Min, median, p99 (nearest rank) and max of `v`, which must not be empty. Below
    /// 51 values the p99 is the max.
    pub fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
        Stats {
            min: v[0],
            median: at(0.5),
            p99: at(0.99),
            max: v[v.len() - 1],
            n: v.len(),
        }
    }

    /// `min / median / p99 / max ms (n=…)`, as the report shows a latency.
    pub fn in_ms(&self) -> String {
        format!(
            "{:.2} / {:.2} / {:.2} / {:.2} ms (n={})",
            self.min, self.median, self.p99, self.max, self.n
        )
    }
}
