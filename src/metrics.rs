//! Prometheus metrics with real values, rendered on `GET /metrics`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub refinement_iterations: Histogram,
    pub refinement_success: IntCounter,
    pub refinement_duration: Histogram,
    pub ready_false: IntCounter,
    pub compression_calls: IntCounter,
    pub cache_hits: IntCounter,
    pub cache_misses: IntCounter,
    pub job_queue_depth: IntGauge,
    pub jobs: IntCounterVec,
    pub http: HistogramVec,
    pub submodel_errors: IntCounterVec,
    pub turns_appended: IntCounter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let h = |name: &str, help: &str, buckets: Vec<f64>| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("metric")
        };
        let c = |name: &str, help: &str| IntCounter::new(name, help).expect("metric");
        let m = Metrics {
            refinement_iterations: h(
                "rlm_refinement_iterations",
                "Navigator iterations per query",
                vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0],
            ),
            refinement_success: c(
                "rlm_refinement_success_total",
                "Queries that ended ready (a cited answer above the confidence threshold)",
            ),
            refinement_duration: h(
                "rlm_refinement_duration_seconds",
                "Wall time of a query",
                prometheus::exponential_buckets(0.001, 2.0, 16).expect("buckets"),
            ),
            ready_false: c("rlm_ready_false_total", "Queries that ended not ready"),
            compression_calls: c(
                "strata_compression_calls_total",
                "Sub-model compression calls made by builds",
            ),
            cache_hits: c(
                "strata_cache_hits_total",
                "Nodes a build found live in the store",
            ),
            cache_misses: c("strata_cache_misses_total", "Nodes a build had to make"),
            job_queue_depth: IntGauge::new("strata_job_queue_depth", "Jobs waiting to run")
                .expect("metric"),
            jobs: IntCounterVec::new(
                Opts::new("strata_jobs_total", "Jobs by final state"),
                &["state"],
            )
            .expect("metric"),
            http: HistogramVec::new(
                HistogramOpts::new(
                    "strata_http_request_duration_seconds",
                    "HTTP request latency by route and status",
                )
                .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16).expect("buckets")),
                &["method", "route", "status"],
            )
            .expect("metric"),
            submodel_errors: IntCounterVec::new(
                Opts::new(
                    "strata_submodel_errors_total",
                    "Sub-model outputs that were unusable (fallback) or nodes that failed",
                ),
                &["kind"],
            )
            .expect("metric"),
            turns_appended: c("strata_turns_appended_total", "Debate turns appended"),
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.refinement_iterations.clone()))
            .expect("register");
        r.register(Box::new(m.refinement_success.clone()))
            .expect("register");
        r.register(Box::new(m.refinement_duration.clone()))
            .expect("register");
        r.register(Box::new(m.ready_false.clone()))
            .expect("register");
        r.register(Box::new(m.compression_calls.clone()))
            .expect("register");
        r.register(Box::new(m.cache_hits.clone()))
            .expect("register");
        r.register(Box::new(m.cache_misses.clone()))
            .expect("register");
        r.register(Box::new(m.job_queue_depth.clone()))
            .expect("register");
        r.register(Box::new(m.jobs.clone())).expect("register");
        r.register(Box::new(m.http.clone())).expect("register");
        r.register(Box::new(m.submodel_errors.clone()))
            .expect("register");
        r.register(Box::new(m.turns_appended.clone()))
            .expect("register");
        m
    }

    /// Records what a build did.
    pub fn observe_build(&self, r: &crate::build::BuildReport) {
        self.compression_calls.inc_by(r.model_calls);
        self.cache_hits.inc_by(r.cache_hits as u64);
        self.cache_misses
            .inc_by(r.nodes_built as u64 + r.failures.len() as u64);
        if r.fallbacks > 0 {
            self.submodel_errors
                .with_label_values(&["fallback"])
                .inc_by(r.fallbacks);
        }
        if !r.failures.is_empty() {
            self.submodel_errors
                .with_label_values(&["failed"])
                .inc_by(r.failures.len() as u64);
        }
    }

    /// Records a finished query.
    pub fn observe_query(&self, r: &crate::navigate::QueryResult, seconds: f64) {
        self.refinement_iterations.observe(r.iterations as f64);
        self.refinement_duration.observe(seconds);
        if r.ready {
            self.refinement_success.inc();
        } else {
            self.ready_false.inc();
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("prometheus text is UTF-8")
    }
}
