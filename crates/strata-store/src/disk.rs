//! Free space: a large write is refused before it begins when the store's file system could
//! not hold it, instead of letting sled meet a full disk halfway through.
//!
//! Why refuse early rather than handle ENOSPC when it comes: sled 0.34.7 does not survive
//! it cleanly. When writing a large value (a "blob": any page over ~128 KB, which our texts
//! and node pages often are) fails, sled returns the error but keeps the writer's claim on
//! its I/O buffer, so that buffer is never written and every later flush, including the one
//! in sled's `Drop`, waits forever. A snapshot it began but could not finish
//! (`snap.*.generating`) is taken for the newest one at the next open, which then fails with
//! "Read corrupted data at file offset None"; [`crate::repair`] sets such files aside. The
//! hang has no repair: the only defence is not to get there. See `docs/RELIABILITY.md`.

use crate::config::StoreConfig;
use crate::error::{Error, Result};
use std::io;
use std::path::Path;

/// Bytes of store per byte of input: sled's log and blobs, the FULL nodes, the index.
/// Measured at 4–6× for documents (ingest); 8 keeps a margin for sled's segment churn.
pub const STORE_FACTOR: u64 = 8;

/// Below this many free bytes a file system counts as full when explaining an error: less
/// than one of sled's 512 KB log segments.
pub const NEARLY_FULL: u64 = 512 * 1024;

/// Free bytes that a write of `input` bytes needs: [`STORE_FACTOR`] × `input`, plus the
/// reserve `store.min_free_mb` keeps for sled's new segments and snapshots and for index
/// merges. A reserve of 0 turns the check off (`need_for` is then 0).
pub fn need_for(input: u64, cfg: &StoreConfig) -> u64 {
    if cfg.min_free_mb == 0 {
        return 0;
    }
    input
        .saturating_mul(STORE_FACTOR)
        .saturating_add(cfg.min_free_mb.saturating_mul(1 << 20))
}

/// Bytes available to this process on the file system that holds (or will hold) `dir`.
pub fn available(dir: &Path) -> Result<u64> {
    // The store directory may not exist yet (first ingest): ask about its nearest ancestor.
    let existing = dir
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or_else(|| Path::new("."));
    fs4::available_space(existing).map_err(|err| Error::Io {
        path: existing.to_path_buf(),
        err,
    })
}

/// Refuses with [`Error::DiskFull`] when fewer than `need` bytes are available on the file
/// system of `dir`. Call it before any write whose size is known (an ingest, a build, an
/// append); `need` comes from [`need_for`].
pub fn ensure_room(dir: &Path, need: u64) -> Result<()> {
    if need == 0 {
        return Ok(());
    }
    let free = available(dir)?;
    if free >= need {
        return Ok(());
    }
    Err(Error::DiskFull(format!(
        "{} free on the file system of {}, this write needs about {}; \
         free some space or use another --db (store.min_free_mb sets the reserve)",
        human(free),
        dir.display(),
        human(need)
    )))
}

/// Whether an I/O error means that the file system (or the user's quota) is full.
pub fn is_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(min_free_mb: u64) -> StoreConfig {
        StoreConfig {
            min_free_mb,
            ..StoreConfig::default()
        }
    }

    #[test]
    fn need_is_the_input_times_the_factor_plus_the_reserve() {
        assert_eq!(need_for(1000, &cfg(2)), 8000 + 2 * (1 << 20));
        assert_eq!(need_for(u64::MAX, &cfg(2)), u64::MAX);
    }

    #[test]
    fn a_zero_reserve_turns_the_check_off() {
        assert_eq!(need_for(1 << 40, &cfg(0)), 0);
        ensure_room(Path::new("/no/such/dir"), 0).unwrap();
    }

    #[test]
    fn a_write_larger_than_the_disk_is_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let e = ensure_room(&dir.path().join("not-yet"), u64::MAX)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("disk full: "), "{e}");
        assert!(e.contains("not-yet") && !e.contains('\n'), "{e}");
        ensure_room(dir.path(), 1).unwrap();
    }

    #[test]
    fn enospc_and_quota_count_as_full() {
        assert!(is_full(&io::Error::from_raw_os_error(28)));
        assert!(is_full(&io::Error::from(io::ErrorKind::QuotaExceeded)));
        assert!(!is_full(&io::Error::from(io::ErrorKind::PermissionDenied)));
    }
}
