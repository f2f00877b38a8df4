//! Getting a store that sled refuses back open, and `strata repair`.
//!
//! Two layers, by how much they may cost:
//! - [`open_db`] runs at every open. When sled reports corruption it sets aside, one at a
//!   time, the files sled can do without — an unfinished snapshot (`snap.*.generating`, which
//!   sled 0.34.7 mistakes for the newest snapshot after a full disk or a crash), a config file
//!   that does not parse, then the snapshots newest first — and tries again. Snapshots are a
//!   cache of the log (sled rebuilds its page table from the log without them) and the config
//!   file only repeats constants, so nothing stored is lost. Files are moved to
//!   `DIR/damaged/<unix time>/`, never deleted.
//! - [`repair`] (`strata repair`) also reads every entry of every tree back and every record
//!   the engine depends on (scopes, sources, texts, nodes). When sled cannot read some of
//!   them (a lost or damaged file), it copies everything readable into a fresh store, keeps
//!   the old one under `damaged/`, and says how much was left behind. A source whose record
//!   or text is gone is dropped from its scope, so that ingesting it again adds it back
//!   (instead of finding it "unchanged"). The caller then rebuilds the index from the store.

use super::SledResult as _;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::Store;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What [`repair`] found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairReport {
    /// One line per action taken, in order; empty when the store was sound.
    pub actions: Vec<String>,
    /// Trees (sled collections) read back.
    pub trees: usize,
    /// Entries read back over every tree (after a salvage: in the new store).
    pub entries: u64,
    /// Trees in which sled could not read some entries (before a salvage).
    pub unreadable_trees: Vec<String>,
    /// Scope, source, text and node records that do not decode (left as they are: they may
    /// come from a newer strata).
    pub undecodable: Vec<String>,
    /// Sources dropped from their scope because their record or text is gone, as
    /// `source (scope NAME)`: ingest them again.
    pub dropped_sources: Vec<String>,
    /// Whether readable entries were copied into a fresh store.
    pub salvaged: bool,
}

/// Opens the sled database at `path` (a store's `store/` directory), setting aside the files
/// sled can do without while it reports corruption. Returns the database and one line per
/// file set aside. `config` makes a fresh `sled::Config` for each attempt.
pub(crate) fn open_db(
    path: &Path,
    config: impl Fn() -> sled::Config,
) -> std::result::Result<(sled::Db, Vec<String>), sled::Error> {
    let mut actions = Vec::new();
    let mut aside: Option<PathBuf> = None;
    loop {
        let err = match config().path(path).open() {
            Ok(db) => return Ok((db, actions)),
            Err(e) => e,
        };
        if !matches!(err, sled::Error::Corruption { .. }) && !conf_is_damaged(path) {
            return Err(err);
        }
        match set_aside_next(path, &mut aside)? {
            Some(action) => actions.push(action),
            None => return Err(err),
        }
    }
}

/// Moves aside the next file sled can do without; `None` when nothing is left to try (or
/// another process holds the store).
fn set_aside_next(path: &Path, aside: &mut Option<PathBuf>) -> std::io::Result<Option<String>> {
    use fs4::fs_std::FileExt as _;
    // sled's own lock on `db`: never move files under a process that has the store open.
    let Ok(db) = std::fs::File::open(path.join("db")) else {
        return Ok(None);
    };
    if !db.try_lock_exclusive()? {
        return Ok(None);
    }
    let mut snaps: Vec<String> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("snap.") && !n.ends_with(".in___motion"))
        .collect();
    snaps.sort();
    let unfinished: Vec<&String> = snaps.iter().filter(|n| n.contains(".generating")).collect();
    let action = if !unfinished.is_empty() {
        for n in &unfinished {
            move_aside(path, n, aside)?;
        }
        format!(
            "set aside {} unfinished snapshot file(s) ({}) that sled took for its newest snapshot",
            unfinished.len(),
            describe(path, aside, &unfinished)
        )
    } else if conf_is_damaged(path) {
        move_aside(path, "conf", aside)?;
        "set aside sled's config file (conf), which did not parse; sled wrote a new one".into()
    } else if let Some(newest) = snaps.last() {
        move_aside(path, newest, aside)?;
        format!(
            "set aside the snapshot {newest}, which sled could not read; it rebuilds its page table from the log"
        )
    } else {
        return Ok(None);
    };
    let dir = aside.as_deref().unwrap_or(path);
    Ok(Some(format!("{action} (moved to {})", dir.display())))
}

fn describe(path: &Path, aside: &Option<PathBuf>, names: &[&String]) -> String {
    names
        .iter()
        .map(|n| {
            let len = aside
                .as_ref()
                .and_then(|d| std::fs::metadata(d.join(n)).ok())
                .or_else(|| std::fs::metadata(path.join(n)).ok())
                .map_or(0, |m| m.len());
            format!("{n}, {len} bytes")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Moves `path/name` into `DIR/damaged/<unix time>/` (created on first use).
fn move_aside(path: &Path, name: &str, aside: &mut Option<PathBuf>) -> std::io::Result<()> {
    let dir = match aside {
        Some(d) => d.clone(),
        None => {
            let root = path
                .parent()
                .unwrap_or(Path::new("."))
                .join("damaged")
                .join(crate::clock::unix_now().to_string());
            let mut d = root.clone();
            let mut n = 1;
            while d.exists() {
                n += 1;
                d = root.with_extension(n.to_string());
            }
            std::fs::create_dir_all(&d)?;
            *aside = Some(d.clone());
            d
        }
    };
    std::fs::rename(path.join(name), dir.join(name))
}

/// Whether sled's `conf` exists and would not parse. sled writes it once, at creation, as
/// `key: value` lines (`segment_size`, `use_compression`, `version`) and a 4-byte CRC, and
/// treats a file of 8 bytes or less as missing (it writes a new one).
fn conf_is_damaged(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path.join("conf")) else {
        return false;
    };
    if bytes.len() <= 8 {
        return false;
    }
    let Ok(text) = std::str::from_utf8(&bytes[..bytes.len() - 4]) else {
        return true;
    };
    let mut keys = Vec::new();
    for line in text.lines() {
        match line.split_once(": ") {
            Some((k, v)) if !v.is_empty() => keys.push(k),
            _ => return true,
        }
    }
    !["segment_size", "use_compression", "version"]
        .iter()
        .all(|k| keys.contains(k))
}

/// `strata repair`: opens the store under `dir` (setting aside what [`open_db`] can), reads
/// everything back, salvages what is readable into a fresh store when sled cannot read some
/// of it, and checks that the engine's records decode. The index is left to the caller
/// (`Engine::reindex`), since it is rebuilt from the store either way.
pub fn repair(dir: &Path, cfg: &Config) -> Result<RepairReport> {
    let path = dir.join("store");
    if !path.join("db").exists() {
        return Err(Error::invalid(format!(
            "no store at {} (nothing to repair)",
            dir.display()
        )));
    }
    let mut report = RepairReport::default();
    let (db, actions) = open_db(&path, sled::Config::new).map_err(|e| match e {
        sled::Error::Corruption { .. } => Error::DataCorruption(format!(
            "sled cannot read the log of {} even with its snapshots set aside; \
             the store cannot be recovered by strata (the files set aside are under {})",
            path.display(),
            dir.join("damaged").display()
        )),
        e => super::sled_error(e),
    })?;
    report.actions.extend(actions);
    let (db, unreadable) = scan(db, &mut report)?;
    report.unreadable_trees = unreadable;
    let db = if report.unreadable_trees.is_empty() {
        db
    } else {
        let need = crate::disk::need_for(db.size_on_disk().unwrap_or(0), &cfg.store)
            .min(db.size_on_disk().unwrap_or(0).saturating_mul(2));
        crate::disk::ensure_room(dir, need)?;
        let (new, copied) = salvage(&db, &dir.join("store.salvage"))?;
        drop(new);
        drop(db);
        let aside = dir
            .join("damaged")
            .join(format!("{}-store", crate::clock::unix_now()));
        std::fs::create_dir_all(aside.parent().expect("has a parent")).map_err(|err| {
            Error::Io {
                path: aside.clone(),
                err,
            }
        })?;
        std::fs::rename(&path, &aside).map_err(|err| Error::Io {
            path: path.clone(),
            err,
        })?;
        std::fs::rename(dir.join("store.salvage"), &path).map_err(|err| Error::Io {
            path: path.clone(),
            err,
        })?;
        report.actions.push(format!(
            "sled could not read part of {} (trees: {}); copied the {copied} readable entries into a fresh store and left the rest behind (old store moved to {})",
            path.display(),
            report.unreadable_trees.join(", "),
            aside.display()
        ));
        report.salvaged = true;
        let (db, again) = open_db(&path, sled::Config::new).db()?;
        report.actions.extend(again);
        let (db, still) = scan(db, &mut report)?;
        if !still.is_empty() {
            return Err(Error::DataCorruption(format!(
                "the salvaged store cannot be read back either ({})",
                still.join(", ")
            )));
        }
        db
    };
    let backend = super::SledBackend::from_db(db)?;
    if report.salvaged {
        // Entries were left behind: nothing a build left about its tree's liveness holds.
        backend.node_tx("repair", |tx| tx.lose())?;
    }
    let store = Store::new(Arc::new(backend));
    report.undecodable = check_records(&store)?;
    report.dropped_sources = drop_lost_sources(&store)?;
    if !report.dropped_sources.is_empty() {
        store.flush()?;
        report.actions.push(format!(
            "dropped {} source(s) whose text was lost from their scopes; ingest them again: {}",
            report.dropped_sources.len(),
            listing(&report.dropped_sources, 10)
        ));
    }
    // Leave nothing for sled's background threads to write after the handle is dropped:
    // they hold the store's file lock until they are done.
    store.flush()?;
    Ok(report)
}

/// Reads every entry of every tree; returns the names of the trees with unreadable entries.
fn scan(db: sled::Db, report: &mut RepairReport) -> Result<(sled::Db, Vec<String>)> {
    let mut unreadable = Vec::new();
    report.trees = 0;
    report.entries = 0;
    for name in db.tree_names() {
        let tree = db.open_tree(&name).db()?;
        report.trees += 1;
        for item in tree.iter() {
            match item {
                Ok(_) => report.entries += 1,
                Err(_) => {
                    unreadable.push(String::from_utf8_lossy(&name).into_owned());
                    break;
                }
            }
        }
    }
    Ok((db, unreadable))
}

/// Copies every readable entry of `db` into a new database at `to`. A tree is read forwards
/// up to its first unreadable page, then backwards down to it: one bad page costs only its
/// own entries. Returns the new database and the number of entries copied.
fn salvage(db: &sled::Db, to: &Path) -> Result<(sled::Db, u64)> {
    if to.exists() {
        // An earlier repair stopped halfway: its copy is incomplete by definition.
        std::fs::remove_dir_all(to).map_err(|err| Error::Io {
            path: to.to_path_buf(),
            err,
        })?;
    }
    let new = sled::Config::new().path(to).create_new(true).open().db()?;
    let mut copied = 0;
    for name in db.tree_names() {
        let (src, dst) = (db.open_tree(&name).db()?, new.open_tree(&name).db()?);
        let mut last: Option<sled::IVec> = None;
        let mut gap = false;
        for item in src.iter() {
            let Ok((k, v)) = item else {
                gap = true;
                break;
            };
            dst.insert(&k, v).db()?;
            copied += 1;
            last = Some(k);
        }
        if gap {
            for item in src.iter().rev() {
                let Ok((k, v)) = item else { break };
                if last.as_ref().is_some_and(|l| k <= *l) {
                    break;
                }
                dst.insert(&k, v).db()?;
                copied += 1;
            }
        }
    }
    // Job ids come from sled's id generator: carry it past every id already used.
    let jobs = new.open_tree("jobs").db()?;
    if let Some((k, _)) = jobs.last().db()? {
        let max = k.as_ref().try_into().map(u64::from_be_bytes).unwrap_or(0);
        while new.generate_id().db()? + 1 < max {}
    }
    new.flush().db()?;
    Ok((new, copied))
}

/// Decodes every scope, source, text and node record; returns a line per failure.
fn check_records(store: &Store) -> Result<Vec<String>> {
    let mut bad = Vec::new();
    let mut note = |r: Result<()>| match r {
        Ok(()) => Ok(()),
        Err(e @ Error::DataCorruption(_)) => {
            bad.push(e.to_string());
            Ok(())
        }
        Err(e) => Err(e),
    };
    let scopes = match store.scopes() {
        Ok(s) => s,
        Err(e @ Error::DataCorruption(_)) => {
            note(Err(e))?;
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    for scope in &scopes {
        for s in &scope.sources {
            note(store.get_source(&scope.name, &s.id).map(drop))?;
            note(store.get_text(&scope.name, &s.id).map(drop))?;
        }
    }
    match store.node_ids() {
        Ok(ids) => {
            for id in ids {
                note(store.get_node(&id).map(drop))?;
            }
        }
        Err(e) => note(Err(e))?,
    }
    Ok(bad)
}

/// The first `n` items, then how many more.
fn listing(items: &[String], n: usize) -> String {
    let mut s = items[..items.len().min(n)].join(", ");
    if items.len() > n {
        s.push_str(&format!(" and {} more", items.len() - n));
    }
    s
}

/// Removes from every scope the sources whose record or text is missing; returns them as
/// `source (scope NAME)`. (Their FULL nodes stay until `strata gc`.)
fn drop_lost_sources(store: &Store) -> Result<Vec<String>> {
    let mut dropped = Vec::new();
    let scopes = match store.scopes() {
        Ok(s) => s,
        Err(Error::DataCorruption(_)) => return Ok(dropped),
        Err(e) => return Err(e),
    };
    for scope in scopes {
        let mut lost = Vec::new();
        for s in &scope.sources {
            let record = store.get_source(&scope.name, &s.id);
            let text = store.get_text(&scope.name, &s.id);
            if matches!(record, Ok(None)) || matches!(text, Ok(None)) {
                lost.push(s.id.clone());
            }
        }
        if lost.is_empty() {
            continue;
        }
        for id in &lost {
            dropped.push(format!("{id} (scope {})", scope.name));
        }
        // One step: the scope stops listing them and what is left of them goes.
        store.write_sources(&crate::store::SourceStep {
            scope: scope.head(),
            list: Vec::new(),
            put: Vec::new(),
            remove_sources: lost,
            remove_nodes: Vec::new(),
        })?;
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make_store(dir: &Path) {
        let db = sled::Config::new().path(dir.join("store")).open().unwrap();
        db.insert("k", "v").unwrap();
        db.flush().unwrap();
    }

    #[test]
    fn an_unfinished_snapshot_is_set_aside_and_the_store_opens() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path());
        let path = dir.path().join("store");
        // What a full disk leaves: the file sled began, empty, named after a later lsn.
        std::fs::write(path.join("snap.FFFFFFFFFFFFFFF0.generating"), b"").unwrap();
        assert!(matches!(
            sled::Config::new().path(&path).open(),
            Err(sled::Error::Corruption { .. })
        ));
        let (db, actions) = open_db(&path, sled::Config::new).unwrap();
        assert_eq!(db.get("k").unwrap().unwrap(), "v");
        assert_eq!(actions.len(), 1, "{actions:?}");
        assert!(actions[0].contains("snap.FFFFFFFFFFFFFFF0.generating, 0 bytes"));
        let moved = std::fs::read_dir(dir.path().join("damaged"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        assert!(moved.join("snap.FFFFFFFFFFFFFFF0.generating").exists());
    }

    #[test]
    fn a_damaged_snapshot_and_config_are_set_aside_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path());
        let path = dir.path().join("store");
        std::fs::write(path.join("snap.FFFFFFFFFFFFFFF0"), vec![7u8; 4096]).unwrap();
        std::fs::write(path.join("conf"), b"segment_size 524288\ngarbage!").unwrap();
        let (db, actions) = open_db(&path, sled::Config::new).unwrap();
        assert_eq!(db.get("k").unwrap().unwrap(), "v");
        assert_eq!(actions.len(), 2, "{actions:?}");
        assert!(actions[0].contains("(conf)"), "{actions:?}");
        assert!(actions[1].contains("snap.FFFFFFFFFFFFFFF0"), "{actions:?}");
    }

    // A lost blob file: tests/it/repair.rs (it needs the engine to ingest).

    #[test]
    fn a_sound_store_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path());
        let (_db, actions) = open_db(&dir.path().join("store"), sled::Config::new).unwrap();
        assert!(actions.is_empty());
        assert!(!dir.path().join("damaged").exists());
    }

    #[test]
    fn files_of_a_store_in_use_are_never_moved() {
        let dir = tempfile::tempdir().unwrap();
        make_store(dir.path());
        let path = dir.path().join("store");
        let _open = sled::Config::new().path(&path).open().unwrap();
        std::fs::write(path.join("snap.FFFFFFFFFFFFFFF0.generating"), b"").unwrap();
        let mut aside = None;
        assert_eq!(set_aside_next(&path, &mut aside).unwrap(), None);
        assert!(path.join("snap.FFFFFFFFFFFFFFF0.generating").exists());
    }
}
