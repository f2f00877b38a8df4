//! What a script's memory is measured with, and how much of it the process lends out.
//!
//! **The meter.** The library installs a global allocator: the system allocator plus one
//! count per thread of the bytes allocated minus the bytes freed on it, kept only while
//! the thread runs a script ([`start`]). A script runs on a thread of its own, so the
//! count is what the script holds — its values, the engine that runs it, its closures and
//! scopes, whatever rhai allocates for it — and nothing of the work around it. It is read
//! at every operation ([`held`]) and before every checked built-in allocates
//! ([`room`]). Why this and not the alternatives:
//!
//! - The process's resident memory (what the sandbox polled before) counts every other
//!   thread's work, lags behind allocations (a freed block may stay resident) and needs a
//!   `/proc` read; one script was stopped for another's growth.
//! - Adding up the sizes of the values a script creates would have to follow rhai into
//!   every clone, scope and temporary it makes; anything missed is unmetered. The
//!   allocator misses nothing that is allocated on the thread.
//!
//! What the count cannot see is memory allocated on another thread and freed on this one
//! (it would read low). The sandbox therefore never frees foreign memory on the script
//! thread: the JSON it is given (bindings, primitive answers) is converted there and then
//! sent back to the caller to be dropped, and the segments it reads are shared (`Arc`)
//! with the caller, who holds them until the thread has ended. Memory allocated here and
//! freed elsewhere (the result, sent back) reads high, which errs on the safe side.
//!
//! The cost is one thread-local read per allocation on every thread of the process (a
//! branch on a flag that is off outside scripts), negligible beside the allocation.
//!
//! **The pool.** At most [`MAX_SCRIPTS`] scripts run at once in the process, and
//! together they may be lent [`MAX_TOTAL_MEMORY`] bytes: a script reserves its own
//! budget (`Limits::max_memory`) before its thread starts and gives it back when the
//! thread has ended. One that finds no room waits, its wait counted against its own
//! wall-time limit; if that runs out first it ends with [`super::ScriptError::Busy`].

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use tokio::sync::{Semaphore, SemaphorePermit};

/// Scripts that run at once in this process, at most.
pub const MAX_SCRIPTS: usize = 4;
/// Bytes the running scripts may hold together (each reserves its `max_memory`).
pub const MAX_TOTAL_MEMORY: u64 = 256 << 20;

/// mimalloc, counting per thread while the thread runs a script.
///
/// mimalloc rather than the system allocator: the offline build allocates and frees a few
/// small strings per word (sentences, terms, tags), and glibc's malloc and free were a
/// fifth of its profile; with mimalloc the build takes about a third less CPU
/// (docs/BENCHMARKS.md). Its options ([`OPTIONS`]) keep its memory and address space
/// near the system allocator's.
struct Metered;

/// mimalloc 3's options (their places in `mi_option_e`, include/mimalloc.h; the crate
/// names only mimalloc 2's) and the values strata sets. `MIMALLOC_VERBOSE=1` prints them by
/// name at start; a test reads them there (`tests/it/cli.rs`).
const OPTIONS: [(libmimalloc_sys::mi_option_t, std::ffi::c_long); 3] = [
    // `arena_eager_commit`: commit an arena's memory as it is used. Committed eagerly,
    // memory freed stayed resident: a build's peak grew by a third.
    (4, 0),
    // `arena_reserve`, in KiB: reserve address space 64 MiB at a time, not 1 GiB; under an
    // operator's `ulimit -v` (2 GiB in `tests/it/security_script.rs`) 1 GiB arenas left no
    // room for threads' stacks.
    (23, 64 << 10),
    // `allow_thp`: no transparent huge pages; the kernel clearing 2 MiB pages cost a
    // short-lived process (`strata query`) more than they saved.
    (43, 0),
];

/// Sets mimalloc's options before anything allocates: run by the loader with the
/// program's (or the Python module's) other initialisers, before Rust's runtime starts.
#[cfg(target_os = "linux")]
extern "C" fn configure_mimalloc() {
    for (option, value) in OPTIONS {
        // SAFETY: sets one integer option; allocates nothing.
        unsafe { libmimalloc_sys::mi_option_set(option, value) };
    }
}

#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static CONFIGURE_MIMALLOC: extern "C" fn() = configure_mimalloc;

#[global_allocator]
static ALLOCATOR: Metered = Metered;

#[derive(Clone, Copy)]
struct Count {
    on: bool,
    /// Bytes allocated minus bytes freed on this thread since [`start`].
    net: i64,
    /// The largest `net` seen.
    peak: i64,
    /// The budget checked against by [`room`].
    budget: i64,
}

thread_local! {
    // `const` and free of destructors: reading it never allocates, so the allocator may.
    static COUNT: Cell<Count> = const {
        Cell::new(Count { on: false, net: 0, peak: 0, budget: 0 })
    };
}

fn note(bytes: i64) {
    let _ = COUNT.try_with(|c| {
        let mut n = c.get();
        if n.on {
            n.net += bytes;
            n.peak = n.peak.max(n.net);
            c.set(n);
        }
    });
}

// SAFETY: every call is passed to mimalloc unchanged; the bookkeeping beside it neither
// allocates nor unwinds.
unsafe impl GlobalAlloc for Metered {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        note(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Starts metering the current thread (a script's) against `budget` bytes.
pub(super) fn start(budget: u64) {
    COUNT.with(|c| {
        c.set(Count {
            on: true,
            net: 0,
            peak: 0,
            budget: budget.min(i64::MAX as u64) as i64,
        })
    });
}

/// Bytes the current thread holds now (0 when it is not metered).
pub(super) fn held() -> u64 {
    COUNT.with(|c| c.get().net.max(0) as u64)
}

/// The most bytes the current thread has held since [`start`].
pub(super) fn peak() -> u64 {
    COUNT.with(|c| c.get().peak.max(0) as u64)
}

/// Whether `bytes` more fit in the current thread's budget (always, when not metered).
pub(super) fn room(bytes: usize) -> bool {
    COUNT.with(|c| {
        let n = c.get();
        !n.on || n.net.saturating_add(bytes.min(i64::MAX as usize) as i64) <= n.budget
    })
}

/// What the process lends to scripts: run slots and memory (in MiB).
pub(super) struct Pool {
    slots: Semaphore,
    mib: Semaphore,
    n_slots: usize,
    total_mib: u32,
}

/// A script's slot and memory, given back when dropped.
pub(super) struct Admission<'p> {
    _slot: SemaphorePermit<'p>,
    _memory: SemaphorePermit<'p>,
}

/// The process's pool.
pub(super) static POOL: Pool = Pool::new(MAX_SCRIPTS, MAX_TOTAL_MEMORY);

impl Pool {
    pub(super) const fn new(n_slots: usize, total: u64) -> Pool {
        let total_mib = (total >> 20) as u32;
        Pool {
            slots: Semaphore::const_new(n_slots),
            mib: Semaphore::const_new(total_mib as usize),
            n_slots,
            total_mib,
        }
    }

    /// MiB a budget of `bytes` reserves (rounded up).
    fn mib(bytes: u64) -> u32 {
        bytes.div_ceil(1 << 20).min(u32::MAX as u64) as u32
    }

    /// Whether a budget of `bytes` can ever be lent.
    pub(super) fn fits(&self, bytes: u64) -> bool {
        Self::mib(bytes) <= self.total_mib
    }

    /// A slot and `bytes` of memory, waiting for them until `until`; `None` if the wait
    /// ran out. Slots are taken first, so scripts are admitted in the order they came.
    pub(super) async fn admit(
        &self,
        bytes: u64,
        until: tokio::time::Instant,
    ) -> Option<Admission<'_>> {
        let wait = async {
            let slot = self.slots.acquire().await.ok()?;
            let memory = self.mib.acquire_many(Self::mib(bytes)).await.ok()?;
            Some(Admission {
                _slot: slot,
                _memory: memory,
            })
        };
        tokio::time::timeout_at(until, wait).await.ok().flatten()
    }

    /// "at most 4 at once, 256 MiB together"
    pub(super) fn describe(&self) -> String {
        format!(
            "at most {} at once, {} MiB together",
            self.n_slots, self.total_mib
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metered_thread_counts_what_it_holds_and_nothing_else() {
        let t = std::thread::spawn(|| {
            start(1 << 20);
            let before = held();
            let v = vec![0u8; 300_000];
            let holding = held() - before;
            assert!(room(600_000) && !room(800_000));
            drop(v);
            (holding, held() - before, peak())
        });
        // This thread is not metered: its allocations count nowhere.
        let _other = vec![0u8; 5 << 20];
        let (holding, after, peak) = t.join().unwrap();
        assert_eq!((holding, after), (300_000, 0));
        assert!((300_000..400_000).contains(&peak), "{peak}");
        assert_eq!(held(), 0);
        assert!(room(usize::MAX));
    }

    /// The initialiser ran: mimalloc's options are strata's in every program that links
    /// the engine (this test binary among them).
    #[cfg(target_os = "linux")]
    #[test]
    fn mimalloc_is_configured_before_anything_allocates() {
        for (option, value) in OPTIONS {
            // SAFETY: reads one integer option.
            assert_eq!(unsafe { libmimalloc_sys::mi_option_get(option) }, value);
        }
        let v = vec![1u8; 1 << 20];
        assert_eq!(v.iter().map(|&b| b as usize).sum::<usize>(), 1 << 20);
    }

    #[test]
    fn the_pool_lends_slots_and_memory_and_makes_the_rest_wait() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let pool = Pool::new(2, 100 << 20);
            let soon = || tokio::time::Instant::now() + std::time::Duration::from_millis(20);
            let a = pool.admit(60 << 20, soon()).await;
            assert!(a.is_some());
            // 60 + 60 MiB is more than 100: the second waits, and its wait runs out.
            assert!(pool.admit(60 << 20, soon()).await.is_none());
            let b = pool.admit(40 << 20, soon()).await;
            assert!(b.is_some());
            // Both slots taken.
            assert!(pool.admit(1, soon()).await.is_none());
            drop(a);
            assert!(pool.admit(60 << 20, soon()).await.is_some());
            assert!(pool.fits(100 << 20) && !pool.fits((100 << 20) + 1));
            assert_eq!(pool.describe(), "at most 2 at once, 100 MiB together");
        });
    }
}
