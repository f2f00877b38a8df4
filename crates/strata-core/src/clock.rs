//! The wall clock, read only by the outermost callers: everything that depends on time
//! takes `now: u64` (unix seconds) as a parameter.

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
