//! Running on a shared store (`--db postgres://...`): where this process keeps its
//! full-text index and the name under which it follows the change feed and claims jobs
//! (the task that keeps its index current while it serves is the server's
//! `follow::spawn_follower`).
//!
//! Every process on a PostgreSQL store is a *replica*: the database holds the corpus, each
//! replica holds a tantivy index derived from it (invariant 6 of the design: the index is
//! derived data). A replica is a directory `replica-N/` under the index home
//! (`store.index_dir`, else `$XDG_CACHE_HOME/strata/pg-HASH/` with HASH naming the
//! database), claimed with an exclusive file lock for as long as the process runs: the
//! first free one is taken, so a `strata query` next to a running `strata serve` gets a
//! directory (and an index) of its own, kept for the next command. The replica's name is
//! `HOST:DIR`, so one name is one live process at a time — which is what lets a restarted
//! replica take back the jobs its previous process left running at once, and lets the
//! feed keep a place per index.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::postgres::is_url;
use std::path::{Path, PathBuf};

/// How many replica directories one machine may use at once for one database.
const MAX_REPLICAS: usize = 64;
/// The database URL when `db` names one rather than a directory.
pub fn database_url(db: &Path) -> Option<&str> {
    db.to_str().filter(|s| is_url(s))
}

/// Connects a replica of the PostgreSQL store at `url`: the store, and the directory of
/// this replica's own index (claimed and locked for as long as the store is open).
pub(crate) fn connect(url: &str, cfg: &Config) -> Result<(Store, PathBuf)> {
    let home = index_home(url, cfg);
    let (dir, lock) = claim_dir(&home)?;
    let name = format!("{}:{}", host_name(), dir.display());
    let store = Store::open_postgres(url, &name, cfg.store.pool_size, Some(Box::new(lock)))?;
    Ok((store, dir.join("index")))
}

/// Where this machine keeps the indexes of the replicas of `url`.
fn index_home(url: &str, cfg: &Config) -> PathBuf {
    if !cfg.store.index_dir.is_empty() {
        return PathBuf::from(&cfg.store.index_dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    // The password is not part of which database it is.
    let key = crate::store::postgres::redact(url);
    let h = blake3::hash(key.as_bytes()).to_hex();
    cache.join("strata").join(format!("pg-{}", &h[..16]))
}

/// The first replica directory under `home` no running process holds, locked.
fn claim_dir(home: &Path) -> Result<(PathBuf, std::fs::File)> {
    use fs4::fs_std::FileExt as _;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |err| Error::Io { path, err }
    };
    for i in 1..=MAX_REPLICAS {
        let dir = home.join(format!("replica-{i}"));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let lock_path = dir.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        if file.try_lock_exclusive().map_err(io(&lock_path))? {
            return Ok((dir, file));
        }
    }
    Err(Error::Store(format!(
        "{MAX_REPLICAS} strata processes on this machine already use the indexes under {} (stop one, or set store.index_dir)",
        home.display()
    )))
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_process_gets_a_directory_of_its_own() {
        let home = tempfile::tempdir().unwrap();
        let (a, _la) = claim_dir(home.path()).unwrap();
        let (b, lb) = claim_dir(home.path()).unwrap();
        assert_eq!(a, home.path().join("replica-1"));
        assert_eq!(b, home.path().join("replica-2"));
        drop(lb);
        // A directory let go of is the next one taken (its index is reused).
        let (c, _lc) = claim_dir(home.path()).unwrap();
        assert_eq!(c, b);
    }

    #[test]
    fn urls_and_directories_are_told_apart() {
        assert_eq!(
            database_url(Path::new("postgres://u@h/db")),
            Some("postgres://u@h/db")
        );
        assert_eq!(database_url(Path::new("strata-data")), None);
        let cfg = Config::default();
        assert_eq!(
            index_home("postgres://u:one@h/db", &cfg),
            index_home("postgres://u:two@h/db", &cfg),
            "the password does not make another database"
        );
        assert_ne!(
            index_home("postgres://u@h/db1", &cfg),
            index_home("postgres://u@h/db2", &cfg)
        );
    }
}
