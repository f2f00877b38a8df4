//! Progress of long work (a build, embedding), reported to whoever watches.

/// Receives the progress of long work (a progress bar on a TTY, nothing in tests).
pub trait Progress: Send + Sync {
    fn start(&self, _total: u64, _what: &str) {}
    fn inc(&self, _n: u64) {}
    fn finish(&self) {}
}

/// Progress that goes nowhere.
pub struct NoProgress;
impl Progress for NoProgress {}
