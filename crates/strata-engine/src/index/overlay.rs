//! A tantivy directory that reads an index on disk and writes only to memory: what a
//! command that only reads opens when a writer left index work pending. The pending
//! changes are applied and committed in memory, so its searches see every acknowledged
//! node, and the disk is never written (the pending marks stay for the next writer).

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, RamDirectory, WatchCallback,
    WatchHandle, WritePtr,
};

/// Files written here live in `ram`; the others are read from `disk` unless deleted here
/// (`hidden`: a delete never reaches the disk).
#[derive(Clone)]
pub(super) struct Overlay {
    disk: MmapDirectory,
    ram: RamDirectory,
    hidden: Arc<RwLock<HashSet<PathBuf>>>,
}

impl fmt::Debug for Overlay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Overlay({:?})", self.disk)
    }
}

impl Overlay {
    pub(super) fn open(dir: &Path) -> tantivy::Result<Overlay> {
        Ok(Overlay {
            disk: MmapDirectory::open(dir)?,
            ram: RamDirectory::create(),
            hidden: Arc::default(),
        })
    }

    fn is_hidden(&self, path: &Path) -> bool {
        self.hidden.read().expect("overlay lock").contains(path)
    }

    fn on_disk(&self, path: &Path) -> Result<bool, OpenReadError> {
        Ok(!self.is_hidden(path) && self.disk.exists(path)?)
    }
}

impl Directory for Overlay {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        if self.ram.exists(path)? || !self.on_disk(path)? {
            self.ram.get_file_handle(path)
        } else {
            self.disk.get_file_handle(path)
        }
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        let in_ram = self.ram.exists(path).unwrap_or(false);
        let on_disk = self.on_disk(path).unwrap_or(false);
        if on_disk {
            self.hidden
                .write()
                .expect("overlay lock")
                .insert(path.to_path_buf());
        }
        if in_ram {
            return self.ram.delete(path);
        }
        if on_disk {
            return Ok(());
        }
        Err(DeleteError::FileDoesNotExist(path.to_path_buf()))
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        Ok(self.ram.exists(path)? || self.on_disk(path)?)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        if self.on_disk(path).unwrap_or(false) {
            return Err(OpenWriteError::FileAlreadyExists(path.to_path_buf()));
        }
        self.ram.open_write(path)
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        if self.ram.exists(path)? || !self.on_disk(path)? {
            self.ram.atomic_read(path)
        } else {
            self.disk.atomic_read(path)
        }
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.ram.atomic_write(path, data)
    }

    fn sync_directory(&self) -> io::Result<()> {
        Ok(())
    }

    /// Locks live in memory too: a writer of the index on disk (another process) does not
    /// stop this one, which writes nothing there.
    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.ram.acquire_lock(lock)
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.ram.watch(watch_callback)
    }
}
