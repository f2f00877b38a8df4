//! Named points in the write protocol and the job runner where a test can stop the
//! process and kill it (meilisearch's breakpoint habit): `STRATA_TEST_PAUSE_AT=NAME` stops
//! at the first pass through point `NAME`, `NAME#K` at the K-th; the process says
//! `strata: paused at NAME#K` on stderr and waits to be killed. The crash tests kill it
//! there with SIGKILL, so each crash case in `cargo test` lands at the same instant of
//! the protocol on every run. Unset (always, outside tests), a point is one relaxed load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The configured point and pass, read once.
fn target() -> Option<&'static (String, u64)> {
    static T: OnceLock<Option<(String, u64)>> = OnceLock::new();
    T.get_or_init(|| {
        let v = std::env::var("STRATA_TEST_PAUSE_AT").ok()?;
        Some(match v.rsplit_once('#') {
            Some((name, k)) => (name.to_string(), k.parse().unwrap_or(1).max(1)),
            None => (v, 1),
        })
    })
    .as_ref()
}

/// Passes seen of the configured point.
static PASSES: AtomicU64 = AtomicU64::new(0);

/// A point named `name`: stops here when the test asked for it (see the module).
pub fn point(name: &str) {
    let Some((want, k)) = target() else { return };
    if want != name {
        return;
    }
    let n = PASSES.fetch_add(1, Ordering::SeqCst) + 1;
    if n == *k {
        eprintln!("strata: paused at {name}#{k}");
        loop {
            std::thread::park();
        }
    }
}
