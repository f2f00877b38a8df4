//! Flow control for model calls: one [`Limiter`] per engine, shared by every client that
//! talks to a model server (the compression *sub* model, the navigating *root* model and
//! its `partition_map` fan-out), so one global limit holds whatever is calling.
//!
//! A call goes through, in order: a priority gate (the concurrency limit; navigation
//! first, so a query is not stuck behind a 10,000-chunk build, then a build's calls by
//! their depth below the ABSTRACT, so the longest chains of calls start first), the shared
//! pause (set by a 429: every caller backs
//! off together instead of hammering the server), the requests- and tokens-per-minute
//! buckets, then the attempt under a timeout. Failed attempts that may succeed later
//! (429, 5xx, timeouts, transport errors) are retried with exponential backoff and jitter,
//! honouring `Retry-After`. Nothing here spawns a task: dropping a call's future drops its
//! place in the queue, its permit and its HTTP request.

use super::ModelError;
use super::usage;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

mod gate;

use gate::Gate;
pub use gate::Permit;

/// Priority of navigation calls (an interactive query waits for them).
pub const PRIORITY_NAVIGATION: u8 = 10;

/// How a [`Limiter`] paces and retries calls.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitConfig {
    /// Calls in flight at once, across every client sharing the limiter.
    pub concurrency: usize,
    /// Requests per minute; 0 = unlimited.
    pub rpm: u64,
    /// Tokens (prompt + completion budget) per minute; 0 = unlimited.
    pub tpm: u64,
    /// Time limit of one attempt.
    pub timeout: Duration,
    /// Attempts after the first for retryable failures.
    pub retries: u32,
    /// First backoff delay; doubles with each retry.
    pub backoff: Duration,
    /// Longest backoff delay, and longest `Retry-After` honoured.
    pub backoff_max: Duration,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            concurrency: 32,
            rpm: 0,
            tpm: 0,
            timeout: Duration::from_secs(60),
            retries: 4,
            backoff: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// Why one attempt failed, as the client saw it.
#[derive(Debug)]
pub enum Failure {
    /// HTTP 429. `retry_after` from `retry-after-ms` or `Retry-After` (seconds).
    RateLimited { retry_after: Option<Duration> },
    /// HTTP 5xx.
    Server { status: u16, message: String },
    /// The connection failed or broke.
    Transport(String),
    /// No answer within the per-attempt timeout.
    Timeout,
    /// Not worth retrying here (a 4xx, an undecodable response).
    Fatal(ModelError),
}

/// A successful attempt with its token counts (as the server reported them).
pub struct Reply<T> {
    pub value: T,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The shared flow control. Cheap to share (`Arc`).
pub struct Limiter {
    cfg: LimitConfig,
    gate: Gate,
    requests: Option<Mutex<Bucket>>,
    tokens: Option<Mutex<Bucket>>,
    /// Nobody sends before this instant (set by a 429).
    pause_until: Mutex<Option<Instant>>,
    rng: AtomicU64,
}

impl Limiter {
    pub fn new(cfg: LimitConfig) -> Limiter {
        let bucket = |per_minute: u64| {
            (per_minute > 0).then(|| Mutex::new(Bucket::new(per_minute as f64, Instant::now())))
        };
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15);
        Limiter {
            gate: Gate::new(cfg.concurrency.max(1)),
            requests: bucket(cfg.rpm),
            tokens: bucket(cfg.tpm),
            pause_until: Mutex::new(None),
            rng: AtomicU64::new(seed | 1),
            cfg,
        }
    }

    pub fn config(&self) -> &LimitConfig {
        &self.cfg
    }

    /// A place among the calls in flight for work that is not a request (the offline
    /// compressor in a build): it waits its turn by priority like [`Limiter::run`] and
    /// holds the place until dropped. Rates and retries do not apply.
    pub async fn hold(&self, priority: u8) -> Permit {
        self.gate.acquire(priority).await
    }

    /// Calls holding a permit right now.
    pub fn in_flight(&self) -> usize {
        self.gate.held()
    }

    /// Runs one model call: waits its turn, then makes attempts until one succeeds, a
    /// failure is not retryable, or the retries are spent. `est_tokens` is what the call
    /// may cost at most (prompt + completion budget), for the tokens-per-minute bucket.
    pub async fn run<T, F, Fut>(
        &self,
        model: &str,
        priority: u8,
        est_tokens: u64,
        mut attempt: F,
    ) -> Result<T, ModelError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Reply<T>, Failure>>,
    {
        usage::record(model, |u| u.calls += 1);
        let _permit = self.gate.acquire(priority).await;
        let mut retry = 0u32;
        loop {
            self.wait_pause().await;
            self.wait_rate(est_tokens).await;
            usage::record(model, |u| u.requests += 1);
            let outcome = match tokio::time::timeout(self.cfg.timeout, attempt()).await {
                Ok(r) => r,
                Err(_) => {
                    usage::record(model, |u| u.timeouts += 1);
                    Err(Failure::Timeout)
                }
            };
            let failure = match outcome {
                Ok(reply) => {
                    let used = reply.prompt_tokens + reply.completion_tokens;
                    if let Some(b) = &self.tokens {
                        b.lock()
                            .expect("poisoned")
                            .refund(est_tokens.saturating_sub(used) as f64);
                    }
                    usage::record(model, |u| {
                        u.prompt_tokens += reply.prompt_tokens;
                        u.completion_tokens += reply.completion_tokens;
                    });
                    return Ok(reply.value);
                }
                Err(f) => f,
            };
            let (retryable, retry_after, err) = match failure {
                Failure::RateLimited { retry_after } => {
                    usage::record(model, |u| u.rate_limited += 1);
                    (true, retry_after, ModelError::RateLimited)
                }
                Failure::Server { status, message } => {
                    usage::record(model, |u| u.server_errors += 1);
                    (
                        true,
                        None,
                        ModelError::Unavailable(format!("HTTP {status}: {message}")),
                    )
                }
                Failure::Timeout => (true, None, ModelError::Timeout),
                Failure::Transport(m) => (true, None, ModelError::Unavailable(m)),
                Failure::Fatal(e) => (false, None, e),
            };
            if !retryable || retry >= self.cfg.retries {
                usage::record(model, |u| u.failed += 1);
                return Err(err);
            }
            let delay = self.backoff(retry, retry_after);
            tracing::debug!(%model, retry, ?delay, error = %err, "model call failed; backing off");
            usage::record(model, |u| u.retries += 1);
            if matches!(err, ModelError::RateLimited) {
                self.pause_all(delay);
            } else {
                tokio::time::sleep(delay).await;
            }
            retry += 1;
        }
    }

    /// The delay before retry number `retry` (0-based): exponential with "equal jitter"
    /// (half fixed, half random, so callers that failed together do not retry together),
    /// or the server's `Retry-After` when it gave one, never above `backoff_max`.
    pub fn backoff(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let max = self.cfg.backoff_max;
        if let Some(ra) = retry_after {
            // A little jitter on top so a crowd released together does not arrive together.
            let spread = ra.min(max) / 10;
            return ra.min(max) + spread.mul_f64(self.random());
        }
        let exp = self
            .cfg
            .backoff
            .saturating_mul(2u32.saturating_pow(retry.min(20)))
            .min(max);
        exp / 2 + (exp / 2).mul_f64(self.random())
    }

    /// Makes every caller wait `delay` before its next request.
    pub fn pause_all(&self, delay: Duration) {
        let until = Instant::now() + delay;
        let mut p = self.pause_until.lock().expect("poisoned");
        if p.is_none_or(|t| t < until) {
            *p = Some(until);
        }
    }

    async fn wait_pause(&self) {
        loop {
            let until = *self.pause_until.lock().expect("poisoned");
            match until {
                Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                _ => return,
            }
        }
    }

    async fn wait_rate(&self, est_tokens: u64) {
        let mut wait = Duration::ZERO;
        let now = Instant::now();
        if let Some(b) = &self.requests {
            wait = wait.max(b.lock().expect("poisoned").reserve(1.0, now));
        }
        if let Some(b) = &self.tokens {
            wait = wait.max(
                b.lock()
                    .expect("poisoned")
                    .reserve(est_tokens.max(1) as f64, now),
            );
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// A number in [0, 1) (splitmix64; jitter needs no cryptographic quality).
    fn random(&self) -> f64 {
        let mut z = self
            .rng
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A token bucket holding up to one minute of allowance. A reservation may drive it
/// negative: the caller then sleeps until the debt is repaid, and later callers queue
/// behind it, so bursts are smoothed rather than rejected.
struct Bucket {
    per_sec: f64,
    capacity: f64,
    level: f64,
    last: Instant,
}

impl Bucket {
    fn new(per_minute: f64, now: Instant) -> Bucket {
        Bucket {
            per_sec: per_minute / 60.0,
            capacity: per_minute,
            level: per_minute,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.level = (self.level + dt * self.per_sec).min(self.capacity);
        self.last = now;
    }

    /// Takes `cost` and returns how long to wait before using it.
    fn reserve(&mut self, cost: f64, now: Instant) -> Duration {
        self.refill(now);
        // A single call bigger than a minute's allowance must still be able to run.
        self.level -= cost.min(self.capacity);
        if self.level >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.level / self.per_sec)
        }
    }

    fn refund(&mut self, amount: f64) {
        self.level = (self.level + amount).min(self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Poll};

    fn cfg() -> LimitConfig {
        LimitConfig {
            concurrency: 2,
            rpm: 0,
            tpm: 0,
            timeout: Duration::from_secs(5),
            retries: 3,
            backoff: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
        }
    }

    fn ok(v: u32) -> Result<Reply<u32>, Failure> {
        Ok(Reply {
            value: v,
            prompt_tokens: 10,
            completion_tokens: 5,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn gate_serves_higher_priority_first_and_survives_cancelled_waiters() {
        let gate = Gate::new(1);
        let first = gate.acquire(0).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, prio) in [("low-a", 1u8), ("low-b", 1), ("high", 5)] {
            let (g, o) = (gate.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _p = g.acquire(prio).await;
                o.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }));
            tokio::task::yield_now().await;
        }
        // A waiter that gives up must not swallow a permit.
        let cancelled = tokio::time::timeout(Duration::from_millis(1), gate.acquire(9)).await;
        assert!(cancelled.is_err());
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["high", "low-a", "low-b"]);
        assert_eq!(gate.held(), 0);
        let _again = gate.acquire(0).await;
        assert_eq!(gate.held(), 1);
    }

    /// Issue 23: a freed place is handed to one waiting call, which alone is woken. A task
    /// holding 500 waiting calls (a build holds thousands in one task) is not polled again
    /// until a place is freed, then every call gets one in turn, by priority.
    #[tokio::test(flavor = "current_thread")]
    async fn waiting_calls_are_not_polled_again_until_a_permit_is_handed_over() {
        struct PollAll {
            calls: Vec<Option<Pin<Box<dyn Future<Output = Permit> + Send>>>>,
            polls: Arc<AtomicUsize>,
            order: Arc<Mutex<Vec<usize>>>,
        }
        impl Future for PollAll {
            type Output = ();
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                self.polls.fetch_add(1, Ordering::SeqCst);
                let this = &mut *self;
                for (i, call) in this.calls.iter_mut().enumerate() {
                    if let Some(f) = call
                        && let Poll::Ready(permit) = f.as_mut().poll(cx)
                    {
                        this.order.lock().unwrap().push(i);
                        // Done at once: the permit goes to the next waiting call.
                        drop(permit);
                        *call = None;
                    }
                }
                match this.calls.iter().all(Option::is_none) {
                    true => Poll::Ready(()),
                    false => Poll::Pending,
                }
            }
        }
        let gate = Gate::new(1);
        let first = gate.acquire(0).await;
        let polls = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let calls = (0..500)
            .map(|i| {
                let g = gate.clone();
                let f: Pin<Box<dyn Future<Output = Permit> + Send>> =
                    Box::pin(async move { g.acquire(u8::from(i >= 250)).await });
                Some(f)
            })
            .collect();
        let task = tokio::spawn(PollAll {
            calls,
            polls: polls.clone(),
            order: order.clone(),
        });
        // The scheduler gets 100 chances to poll the task while every call waits.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let idle = polls.load(Ordering::SeqCst);
        assert_eq!(idle, 1, "polled {idle} times while every call was waiting");
        drop(first);
        task.await.unwrap();
        // Handed over by priority, then in order of arrival.
        let order = order.lock().unwrap().clone();
        let want: Vec<usize> = (250..500).chain(0..250).collect();
        assert_eq!(order, want);
        assert_eq!(gate.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_with_backoff_then_gives_up() {
        let l = Limiter::new(cfg());
        let n = AtomicUsize::new(0);
        let t0 = Instant::now();
        let r = l
            .run("m", 0, 1, || {
                let i = n.fetch_add(1, Ordering::SeqCst);
                async move {
                    if i < 2 {
                        Err(Failure::Server {
                            status: 503,
                            message: "busy".into(),
                        })
                    } else {
                        ok(7)
                    }
                }
            })
            .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(n.load(Ordering::SeqCst), 3);
        // Backoffs of 50-100 ms and 100-200 ms.
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_millis(150) && waited <= Duration::from_millis(300),
            "{waited:?}"
        );

        let n = AtomicUsize::new(0);
        let r = l
            .run("m", 0, 1, || {
                n.fetch_add(1, Ordering::SeqCst);
                async { Err::<Reply<u32>, _>(Failure::Transport("refused".into())) }
            })
            .await;
        assert!(matches!(r, Err(ModelError::Unavailable(_))), "{r:?}");
        assert_eq!(n.load(Ordering::SeqCst), 4, "first attempt + 3 retries");

        // A fatal failure is not retried.
        let n = AtomicUsize::new(0);
        let r = l
            .run("m", 0, 1, || {
                n.fetch_add(1, Ordering::SeqCst);
                async { Err::<Reply<u32>, _>(Failure::Fatal(ModelError::Failed("400 bad".into()))) }
            })
            .await;
        assert!(matches!(r, Err(ModelError::Failed(_))));
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_are_retried_and_reported() {
        let l = Limiter::new(LimitConfig {
            timeout: Duration::from_millis(100),
            retries: 1,
            ..cfg()
        });
        let n = AtomicUsize::new(0);
        let r = l
            .run("m", 0, 1, || {
                n.fetch_add(1, Ordering::SeqCst);
                async {
                    std::future::pending::<()>().await;
                    ok(1)
                }
            })
            .await;
        assert!(matches!(r, Err(ModelError::Timeout)), "{r:?}");
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_pauses_every_caller_for_retry_after() {
        let l = Arc::new(Limiter::new(LimitConfig {
            concurrency: 8,
            ..cfg()
        }));
        let t0 = Instant::now();
        let sent: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let limited = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..4u64 {
            let (l, sent, limited) = (l.clone(), sent.clone(), limited.clone());
            tasks.push(tokio::spawn(async move {
                // Callers 1..3 arrive while caller 0's 429 pause is in force.
                tokio::time::sleep(Duration::from_millis(10 * i)).await;
                l.run("m", 0, 1, || {
                    sent.lock().unwrap().push(t0.elapsed());
                    let first = limited.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if first {
                            Err(Failure::RateLimited {
                                retry_after: Some(Duration::from_millis(500)),
                            })
                        } else {
                            ok(1)
                        }
                    }
                })
                .await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let sent = sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 5, "{sent:?}");
        assert_eq!(sent[0], Duration::ZERO);
        for s in &sent[1..] {
            assert!(
                *s >= Duration::from_millis(500),
                "sent during the pause: {sent:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rpm_and_tpm_buckets_pace_calls() {
        let l = Limiter::new(LimitConfig {
            rpm: 60,
            tpm: 0,
            concurrency: 100,
            ..cfg()
        });
        let t0 = Instant::now();
        for _ in 0..62 {
            l.run("m", 0, 1, || async { ok(1) }).await.unwrap();
        }
        // A minute's allowance at once, then one a second.
        let e = t0.elapsed();
        assert!(
            e >= Duration::from_millis(1990) && e <= Duration::from_millis(2100),
            "{e:?}"
        );

        let l = Limiter::new(LimitConfig {
            rpm: 0,
            tpm: 600,
            concurrency: 100,
            ..cfg()
        });
        let t0 = Instant::now();
        // Each call may cost 300 tokens but uses 15: the unused part is refunded.
        for _ in 0..10 {
            l.run("m", 0, 300, || async { ok(1) }).await.unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        let t0 = Instant::now();
        let heavy = || async {
            Ok(Reply {
                value: 1,
                prompt_tokens: 300,
                completion_tokens: 0,
            })
        };
        for _ in 0..2 {
            l.run("m", 0, 300, heavy).await.unwrap();
        }
        // 450 tokens were left: the first call takes 300, the second waits until another
        // 150 have accrued (15 s at 10 tokens a second).
        let e = t0.elapsed();
        assert!(
            e >= Duration::from_secs(14) && e <= Duration::from_secs(17),
            "{e:?}"
        );
    }

    #[test]
    fn backoff_grows_with_jitter_and_respects_the_cap() {
        let l = Limiter::new(cfg());
        for retry in 0..8 {
            let d = l.backoff(retry, None);
            let full = (Duration::from_millis(100) * 2u32.pow(retry)).min(Duration::from_secs(2));
            assert!(d >= full / 2 && d <= full, "{retry}: {d:?}");
        }
        let d = l.backoff(0, Some(Duration::from_secs(100)));
        assert!(d >= Duration::from_secs(2) && d <= Duration::from_millis(2200));
    }
}
