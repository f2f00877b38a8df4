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
    /// The same events under aragora's metric names (`aragora_rlm_*`), so its dashboards
    /// work against strata.
    pub aragora: AragoraMetrics,
}

/// aragora's RLM metrics (`aragora/rlm/metrics.py`), with its names and labels.
pub struct AragoraMetrics {
    pub compressions: IntCounterVec,
    pub compression_ratio: HistogramVec,
    pub tokens_saved: IntCounterVec,
    pub compression_duration: HistogramVec,
    pub queries: IntCounterVec,
    pub query_duration: HistogramVec,
    pub cache_hits: IntCounter,
    pub cache_misses: IntCounter,
    pub context_levels: HistogramVec,
    pub refinement_iterations: HistogramVec,
    pub refinement_success: IntCounterVec,
    pub refinement_duration: HistogramVec,
    pub ready_false: IntCounterVec,
}

/// aragora's `source_type` label of a scope kind.
pub const SOURCE_TYPES: [&str; 2] = ["debate", "document"];
/// The `query_type` labels strata records: a debate query, a knowledge query, a query of
/// an `/rlm/` context, a context window.
pub const QUERY_TYPES: [&str; 4] = ["debate", "knowledge", "rlm", "context"];

impl AragoraMetrics {
    fn new(r: &Registry) -> AragoraMetrics {
        let cv = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("metric");
            r.register(Box::new(c.clone())).expect("register");
            c
        };
        let hv = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
                .expect("metric");
            r.register(Box::new(h.clone())).expect("register");
            h
        };
        let c = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("metric");
            r.register(Box::new(c.clone())).expect("register");
            c
        };
        let tenths = (1..=10).map(|i| i as f64 / 10.0).collect::<Vec<_>>();
        let ones = |n: u32| (1..=n).map(f64::from).collect::<Vec<_>>();
        AragoraMetrics {
            compressions: cv(
                "aragora_rlm_compressions_total",
                "Total RLM compression operations (builds)",
                &["source_type", "status"],
            ),
            compression_ratio: hv(
                "aragora_rlm_compression_ratio",
                "Compression ratio (compressed/original tokens)",
                &["source_type"],
                tenths,
            ),
            tokens_saved: cv(
                "aragora_rlm_tokens_saved_total",
                "Total tokens saved through compression",
                &["source_type"],
            ),
            compression_duration: hv(
                "aragora_rlm_compression_duration_seconds",
                "Time taken for compression operations",
                &["source_type", "levels"],
                vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0],
            ),
            queries: cv(
                "aragora_rlm_queries_total",
                "Total RLM context queries",
                &["query_type", "level"],
            ),
            query_duration: hv(
                "aragora_rlm_query_duration_seconds",
                "Time taken for context queries",
                &["query_type"],
                vec![0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5],
            ),
            cache_hits: c("aragora_rlm_cache_hits_total", "RLM compression cache hits"),
            cache_misses: c(
                "aragora_rlm_cache_misses_total",
                "RLM compression cache misses",
            ),
            context_levels: hv(
                "aragora_rlm_context_levels",
                "Number of abstraction levels created",
                &["source_type"],
                ones(5),
            ),
            refinement_iterations: hv(
                "aragora_rlm_refinement_iterations",
                "Number of refinement iterations until ready=True",
                &["strategy"],
                ones(10),
            ),
            refinement_success: cv(
                "aragora_rlm_refinement_success_total",
                "Total successful refinements (ready=True before max iterations)",
                &["strategy"],
            ),
            refinement_duration: hv(
                "aragora_rlm_refinement_duration_seconds",
                "Total time for refinement loop (all iterations)",
                &["strategy"],
                vec![0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0],
            ),
            ready_false: cv(
                "aragora_rlm_ready_false_total",
                "Total times the answer was not ready, by refinement iteration",
                &["iteration"],
            ),
        }
    }
}

/// What a finished build made, for the compression metrics.
pub struct Compression<'a> {
    /// `debate` or `document`.
    pub source_type: &'a str,
    pub original_tokens: u64,
    /// Tokens of the derived levels (DETAILED, SUMMARY, ABSTRACT).
    pub compressed_tokens: u64,
    /// Levels whose every node is live after the build.
    pub levels: usize,
    pub seconds: f64,
    pub success: bool,
}

/// A finished query, for the query metrics.
pub struct QueryEvent<'a> {
    /// One of [`QUERY_TYPES`].
    pub query_type: &'a str,
    /// The level it started at (or the window's level), upper case as aragora writes it.
    pub level: &'a str,
    pub strategy: &'a str,
    pub seconds: f64,
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
            aragora: AragoraMetrics::new(&registry),
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
        self.aragora.cache_hits.inc_by(r.cache_hits as u64);
        self.aragora
            .cache_misses
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

    /// Records a finished build under aragora's compression metrics.
    pub fn observe_compression(&self, c: &Compression<'_>) {
        let a = &self.aragora;
        let status = if c.success { "success" } else { "failure" };
        a.compressions
            .with_label_values(&[c.source_type, status])
            .inc();
        if c.success && c.original_tokens > 0 {
            a.compression_ratio
                .with_label_values(&[c.source_type])
                .observe(c.compressed_tokens as f64 / c.original_tokens as f64);
            a.tokens_saved
                .with_label_values(&[c.source_type])
                .inc_by(c.original_tokens.saturating_sub(c.compressed_tokens));
            a.context_levels
                .with_label_values(&[c.source_type])
                .observe(c.levels as f64);
        }
        a.compression_duration
            .with_label_values(&[c.source_type, &c.levels.to_string()])
            .observe(c.seconds);
    }

    /// Records a query (or a context window) under aragora's query metrics; a navigator
    /// query also under its refinement metrics.
    pub fn observe_query_as(&self, q: &QueryEvent<'_>, r: Option<&crate::navigate::QueryResult>) {
        let a = &self.aragora;
        a.queries.with_label_values(&[q.query_type, q.level]).inc();
        a.query_duration
            .with_label_values(&[q.query_type])
            .observe(q.seconds);
        if let Some(r) = r {
            let s = [q.strategy];
            a.refinement_iterations
                .with_label_values(&s)
                .observe(r.iterations as f64);
            a.refinement_duration
                .with_label_values(&s)
                .observe(q.seconds);
            if r.ready {
                a.refinement_success.with_label_values(&s).inc();
            } else {
                a.ready_false
                    .with_label_values(&[&r.drafts.len().to_string()])
                    .inc();
            }
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
