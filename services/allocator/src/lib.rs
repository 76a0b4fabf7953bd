//! The allocator of the `jetcron` binary, and how long it keeps freed memory.
//!
//! mimalloc, not glibc's malloc: an executor at 10,000 runs/s spent about a
//! quarter of its CPU in glibc's allocator (`_int_malloc`, `unlink_chunk`,
//! `malloc_consolidate`; perf, docs/benchmarks.md).
//!
//! mimalloc gives memory freed by a thread back to the OS 1,000 ms later
//! (its `purge_delay`). jetcron works in bursts a second apart (every job due
//! at the same whole second): the memory one second's calls freed was given
//! back just as the next second's calls needed it, and each burst paid
//! page faults for it (perf of an executor at 1,000 calls a second:
//! `exc_page_fault` under `mi_page_free_list_extend` in the burst's
//! samples). [`keep_freed_memory`] keeps it a few bursts longer.
//!
//! This is the workspace's only crate with `unsafe`: calls into mimalloc's
//! C API, which has no safe wrapper.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

pub use mimalloc::MiMalloc;

/// `mi_option_purge_delay` of mimalloc's `mi_option_t` (v2 and v3):
/// libmimalloc-sys does not name it. A test pins it by its default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process before it goes back to the
/// OS: longer than the second between two bursts, short enough that a
/// load's peak is given back soon after.
pub const KEEP_FREED_MS: i64 = 5_000;

/// Keep freed memory [`KEEP_FREED_MS`], unless `MIMALLOC_PURGE_DELAY` in
/// the environment says otherwise (mimalloc read it at start).
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    set_purge_delay(KEEP_FREED_MS);
}

/// How many times memory was asked back ([`give_back_freed_memory`]); each
/// thread of a runtime that calls [`give_back_if_asked`] when it goes idle
/// collects once per ask.
static ASKED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last ask this thread collected for.
    static COLLECTED_FOR: Cell<u64> = const { Cell::new(0) };
}

/// Give memory freed so far back to the OS now, rather than when each
/// thread's allocator next runs past its purge delay: after a one-off
/// drop of many allocations (a ticker letting go of the jobs of shards
/// owned elsewhere), a mostly idle process would keep it.
///
/// mimalloc keeps memory per thread: a block freed by another thread than
/// the one that allocated it waits in its page until the owning thread
/// collects. This thread collects now; every thread that calls
/// [`give_back_if_asked`] does the next time it goes idle.
pub fn give_back_freed_memory() {
    let ask = ASKED.fetch_add(1, Ordering::Relaxed) + 1;
    COLLECTED_FOR.with(|seen| seen.set(ask));
    collect();
}

/// Collect this thread's freed memory if it was asked for since this
/// thread last did (returns whether it did): for a runtime's
/// `on_thread_park`, so every worker gives back what others freed of its
/// allocations.
pub fn give_back_if_asked() -> bool {
    let ask = ASKED.load(Ordering::Relaxed);
    let asked = COLLECTED_FOR.with(|seen| seen.replace(ask)) != ask;
    if asked {
        collect();
    }
    asked
}

fn collect() {
    // SAFETY: `mi_collect` frees and purges what mimalloc no longer uses;
    // any thread may call it at any time. Without mimalloc as the global
    // allocator it has nothing to do.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true)
    };
}

fn set_purge_delay(ms: i64) {
    // SAFETY: `mi_option_set` stores a number in mimalloc's option table;
    // any thread may call it at any time (it is an atomic store).
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY, ms as _)
    };
}

/// How long mimalloc keeps freed memory now, in milliseconds.
#[cfg(test)]
fn purge_delay() -> i64 {
    // SAFETY: reads mimalloc's option table; callable from any thread.
    #[allow(unsafe_code)]
    let ms = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
    // `c_long` is `i64` on 64-bit Linux, not everywhere.
    #[allow(clippy::useless_conversion)]
    i64::from(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker thread that checks for an ask whenever it is told to, as
    /// a runtime's worker does each time it goes idle.
    #[test]
    fn each_thread_collects_once_per_ask() {
        let (check, checks) = std::sync::mpsc::channel::<()>();
        let (said, answers) = std::sync::mpsc::channel::<bool>();
        let worker = std::thread::spawn(move || {
            for () in checks {
                let _ = said.send(give_back_if_asked());
            }
        });
        let idle = || {
            check.send(()).expect("worker");
            answers.recv().expect("worker")
        };
        give_back_freed_memory();
        assert!(!give_back_if_asked(), "the asking thread collected already");
        assert!(idle(), "another thread collects when it goes idle");
        assert!(!idle(), "once per ask");
        give_back_freed_memory();
        assert!(idle(), "a new ask is collected again");
        drop(check);
        worker.join().expect("worker");
    }

    /// mimalloc's purge delay is 1,000 ms unless set: that default pins
    /// the option's number (another option would not read 1,000), and
    /// setting it is read back.
    #[test]
    fn the_purge_delay_is_the_option_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(purge_delay(), 1_000, "option 15 is not the purge delay");
        }
        set_purge_delay(KEEP_FREED_MS);
        assert_eq!(purge_delay(), KEEP_FREED_MS);
    }
}
