//! The injector's metrics, in Prometheus' text format 0.0.4. That format lets the gauge
//! `leasekeeper_injector_pods_missed` and the counter
//! `leasekeeper_injector_pods_missed_total` stand side by side; in OpenMetrics a
//! counter's family is named without `_total`, so the two would be one name twice.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `Content-Type` of [`InjectorMetrics::render`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How one admission review ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Review {
    Injected,
    Unchanged,
    Refused,
    /// Not an AdmissionReview this webhook can answer.
    Invalid,
}

impl Review {
    const ALL: [Review; 4] = [
        Review::Injected,
        Review::Unchanged,
        Review::Refused,
        Review::Invalid,
    ];

    fn label(self) -> &'static str {
        match self {
            Review::Injected => "injected",
            Review::Unchanged => "unchanged",
            Review::Refused => "refused",
            Review::Invalid => "invalid",
        }
    }
}

/// Counters and gauges, shared by the webhook, the certificate reloader and the watch.
#[derive(Debug, Default)]
pub struct InjectorMetrics {
    reviews: [AtomicU64; 4],
    pods_missed: AtomicU64,
    pods_missed_total: AtomicU64,
    cert_reloads: AtomicU64,
    cert_reload_errors: AtomicU64,
    missed_events: AtomicU64,
    missed_event_errors: AtomicU64,
}

impl InjectorMetrics {
    pub fn review(&self, r: Review) {
        let i = Review::ALL.iter().position(|x| *x == r).unwrap_or(0);
        self.reviews[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The missed Pods now and in all (from `missed::Missed`).
    pub fn missed(&self, current: usize, total: usize) {
        self.pods_missed.store(current as u64, Ordering::Relaxed);
        self.pods_missed_total
            .store(total as u64, Ordering::Relaxed);
    }

    pub fn cert_reloaded(&self, ok: bool) {
        let c = if ok {
            &self.cert_reloads
        } else {
            &self.cert_reload_errors
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn missed_event(&self, ok: bool) {
        let c = if ok {
            &self.missed_events
        } else {
            &self.missed_event_errors
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition.
    pub fn render(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        family(
            "leasekeeper_injector_pods_missed",
            "gauge",
            "Pods that asked for the leasekeeper sidecar (leasekeeper.io/inject: \"true\") and run without it",
            &[("", get(&self.pods_missed))],
        );
        family(
            "leasekeeper_injector_pods_missed_total",
            "counter",
            "Pods seen asking for the leasekeeper sidecar and running without it, each counted once",
            &[("", get(&self.pods_missed_total))],
        );
        let reviews: Vec<(String, u64)> = Review::ALL
            .iter()
            .zip(&self.reviews)
            .map(|(r, c)| (format!("{{result=\"{}\"}}", r.label()), get(c)))
            .collect();
        let reviews: Vec<(&str, u64)> = reviews.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        family(
            "leasekeeper_injector_admission_reviews_total",
            "counter",
            "Admission reviews answered, by result",
            &reviews,
        );
        family(
            "leasekeeper_injector_certificate_reloads_total",
            "counter",
            "Serving certificate reloads after its files changed, by result",
            &[
                ("{result=\"ok\"}", get(&self.cert_reloads)),
                ("{result=\"error\"}", get(&self.cert_reload_errors)),
            ],
        );
        family(
            "leasekeeper_injector_missed_events_total",
            "counter",
            "Warning Events LeasekeeperNotInjected recorded, by result",
            &[
                ("{result=\"ok\"}", get(&self.missed_events)),
                ("{result=\"error\"}", get(&self.missed_event_errors)),
            ],
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_and_the_counter_are_two_families() {
        let m = InjectorMetrics::default();
        m.missed(2, 5);
        m.review(Review::Refused);
        let text = m.render();
        assert!(
            text.contains("# TYPE leasekeeper_injector_pods_missed gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("\nleasekeeper_injector_pods_missed 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE leasekeeper_injector_pods_missed_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("\nleasekeeper_injector_pods_missed_total 5\n"),
            "{text}"
        );
        assert!(
            text.contains("leasekeeper_injector_admission_reviews_total{result=\"refused\"} 1\n")
        );
    }
}
