//! A simulated sub-model for the build benches (`latency`, `e2e` with
//! `STRATA_BENCH_MOCK_MS`), and what they measure around it: process CPU time and the
//! dispatch gap.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use strata::Level;
use strata::model::{BoxFuture, CompressRequest, ModelError, SubModel};

/// A model that takes `latency ± jitter` per call (tokio time, no CPU) and answers with the
/// first whole words of its input, about half the budget's worth, so its output passes the
/// build's validation (budget, faithfulness) like a good model's. It records when each call
/// started and ended.
pub struct Mock {
    pub latency: Duration,
    pub jitter: Duration,
    pub calls: AtomicU64,
    /// Calls at DETAILED: each one's output feeds its group's SUMMARY, which feeds the
    /// ABSTRACT (directly or through reductions), so the last one to end has at least two
    /// more latencies after it.
    pub detailed: AtomicU64,
    spans: Mutex<Vec<(Instant, Instant)>>,
}

impl Mock {
    pub fn new(latency: Duration, jitter: Duration) -> Mock {
        Mock {
            latency,
            jitter,
            calls: AtomicU64::new(0),
            detailed: AtomicU64::new(0),
            spans: Mutex::new(Vec::new()),
        }
    }

    /// A deterministic delay in `[latency − jitter, latency + jitter]` for call `n`.
    fn delay(&self, n: u64) -> Duration {
        let mut z = n.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let u = (z >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        let lo = self.latency.saturating_sub(self.jitter);
        lo + (self.jitter * 2).mul_f64(u)
    }

    /// The dispatch gaps of the calls so far (and forgets them): with `concurrency` places,
    /// the k-th call to start (k ≥ `concurrency`) took the place the (k − `concurrency`)-th
    /// call to end gave back, so `start_k − end_(k−concurrency)` is how long a freed place
    /// stayed unused. In a build whose calls wait for places that is the hand-over time;
    /// when the DAG has nothing ready (its tail) it includes idle time too, which the
    /// median leaves out.
    pub fn take_gaps(&self, concurrency: usize) -> Vec<Duration> {
        let spans = std::mem::take(&mut *self.spans.lock().expect("poisoned"));
        let mut starts: Vec<Instant> = spans.iter().map(|s| s.0).collect();
        let mut ends: Vec<Instant> = spans.iter().map(|s| s.1).collect();
        starts.sort();
        ends.sort();
        let mut gaps: Vec<Duration> = starts
            .iter()
            .skip(concurrency)
            .zip(&ends)
            .map(|(s, e)| s.saturating_duration_since(*e))
            .collect();
        gaps.sort();
        gaps
    }
}

impl SubModel for Mock {
    fn identity(&self) -> String {
        format!("mock-{}ms", self.latency.as_millis())
    }

    fn compress(&self, req: CompressRequest) -> BoxFuture<'_, Result<String, ModelError>> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        if req.level == Level::Detailed {
            self.detailed.fetch_add(1, Ordering::Relaxed);
        }
        let delay = self.delay(n);
        Box::pin(async move {
            let start = Instant::now();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            // Whole words (numbers stay whole), about half the budget's worth.
            let words = (req.target_tokens / 2).max(3);
            let text: Vec<&str> = req
                .passages
                .iter()
                .flat_map(|p| p.text.split_whitespace())
                .take(words)
                .collect();
            self.spans
                .lock()
                .expect("poisoned")
                .push((start, Instant::now()));
            Ok(text.join(" "))
        })
    }
}

impl Mock {
    /// The longest sequence of calls so far each of which started after the one before it
    /// ended (and forgets the calls): how many model latencies a piece of work waited for
    /// one after another, whatever ran beside them.
    #[allow(dead_code)] // the `latency` bench's appended turns; `e2e` shares this file
    pub fn take_chain(&self) -> usize {
        let mut spans = std::mem::take(&mut *self.spans.lock().expect("poisoned"));
        spans.sort_by_key(|s| s.1);
        let mut chain = 0;
        let mut free_at: Option<Instant> = None;
        for (start, end) in spans {
            if free_at.is_none_or(|t| start >= t) {
                chain += 1;
                free_at = Some(end);
            }
        }
        chain
    }
}

/// CPU time (user + system) this process has used so far, from /proc/self/stat (Linux).
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) in parentheses; utime and
    // stime are fields 14 and 15 of the line, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    match (f.get(11), f.get(12)) {
        (Some(u), Some(s)) => (u + s) as f64 / 100.0,
        _ => 0.0,
    }
}

/// The `q`-quantile (0..=1) of sorted durations, in milliseconds.
pub fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

impl Mock {
    /// A lower bound on the wall time of a build of `calls` calls, `detailed` of them at
    /// DETAILED, with `concurrency` places and calls of the mean latency L: the work bound
    /// `calls × L / C`; the ABSTRACT, which runs after every other call,
    /// `(calls − 1) × L / C + L`; and the last DETAILED, which ends no earlier than
    /// `detailed × L / C` and has `above` calls after it, one after another (its group's
    /// SUMMARY, each reduction above that group, the ABSTRACT: at least 2),
    /// `detailed × L / C + above × L`. No schedule of the build's DAG beats it, whatever the
    /// engine does.
    #[allow(dead_code)] // `e2e` reports it; `latency` has its own debate-shaped bound
    pub fn critical_path_bound(&self, calls: u64, concurrency: usize, above: usize) -> f64 {
        let l = self.latency.as_secs_f64();
        let c = concurrency as f64;
        let d = self.detailed.load(Ordering::Relaxed) as f64;
        let n = calls as f64;
        (n * l / c)
            .max((n - 1.0).max(0.0) * l / c + l)
            .max(d * l / c + above.max(2) as f64 * l)
    }
}
