//! The injector's metrics, in the OpenMetrics text format the sidecar's `/metrics` uses
//! too (prometheus-client).

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`InjectorMetrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

fn result(ok: bool) -> ResultLabel {
    ResultLabel {
        result: if ok { "ok" } else { "error" },
    }
}

/// Counters and gauges, shared by the webhook, the certificate reloader and the watch.
#[derive(Debug)]
pub struct InjectorMetrics {
    registry: Registry,
    reviews: Family<ResultLabel, Counter>,
    without_sidecar: Gauge,
    missed: Counter,
    cert_reloads: Family<ResultLabel, Counter>,
    missed_events: Family<ResultLabel, Counter>,
}

impl Default for InjectorMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("leasekeeper_injector");
        let metrics = InjectorMetrics {
            registry: Registry::default(),
            reviews: Family::default(),
            without_sidecar: Gauge::default(),
            missed: Counter::default(),
            cert_reloads: Family::default(),
            missed_events: Family::default(),
        };
        registry.register(
            "admission_reviews",
            "Admission reviews answered, by result",
            metrics.reviews.clone(),
        );
        registry.register(
            "pods_without_sidecar",
            "Pods that asked for the leasekeeper sidecar (leasekeeper.io/inject: \"true\") and run without it",
            metrics.without_sidecar.clone(),
        );
        registry.register(
            "pods_missed",
            "Pods seen asking for the leasekeeper sidecar and running without it, each counted once",
            metrics.missed.clone(),
        );
        registry.register(
            "certificate_reloads",
            "Serving certificate reloads after its files changed, by result",
            metrics.cert_reloads.clone(),
        );
        registry.register(
            "missed_events",
            "Warning Events LeasekeeperNotInjected recorded, by result",
            metrics.missed_events.clone(),
        );
        // Every series from the start, at 0: a rate over a series that appears only
        // with its first event misses that event.
        for r in Review::ALL {
            let _ = metrics
                .reviews
                .get_or_create(&ResultLabel { result: r.label() });
        }
        for ok in [true, false] {
            let _ = metrics.cert_reloads.get_or_create(&result(ok));
            let _ = metrics.missed_events.get_or_create(&result(ok));
        }
        InjectorMetrics {
            registry,
            ..metrics
        }
    }
}

impl InjectorMetrics {
    pub fn review(&self, r: Review) {
        let label = ResultLabel { result: r.label() };
        self.reviews.get_or_create(&label).inc();
    }

    /// The missed Pods now and in all (from `missed::Missed`).
    pub fn missed(&self, current: usize, total: usize) {
        self.without_sidecar
            .set(i64::try_from(current).unwrap_or(i64::MAX));
        let total = u64::try_from(total).unwrap_or(u64::MAX);
        let counted = self.missed.get();
        if total > counted {
            self.missed.inc_by(total - counted);
        }
    }

    pub fn cert_reloaded(&self, ok: bool) {
        self.cert_reloads.get_or_create(&result(ok)).inc();
    }

    pub fn missed_event(&self, ok: bool) {
        self.missed_events.get_or_create(&result(ok)).inc();
    }

    /// The exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode the injector's metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_and_the_counter_of_missed_pods_are_two_families() {
        let m = InjectorMetrics::default();
        m.missed(2, 5);
        m.missed(1, 5);
        m.review(Review::Refused);
        let text = m.render();
        for line in [
            "# TYPE leasekeeper_injector_pods_without_sidecar gauge\n",
            "\nleasekeeper_injector_pods_without_sidecar 1\n",
            "# TYPE leasekeeper_injector_pods_missed counter\n",
            "\nleasekeeper_injector_pods_missed_total 5\n",
            "leasekeeper_injector_admission_reviews_total{result=\"refused\"} 1\n",
            "# EOF\n",
        ] {
            assert!(text.contains(line), "{line:?} not in {text}");
        }
    }
}
