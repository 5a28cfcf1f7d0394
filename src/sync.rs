//! The one place that names atomics.
//!
//! Everything else in the crate imports `AtomicU64`, `AtomicU32`, `Ordering`, `fence` and
//! `spin_loop` from here, so one switch chooses the implementation:
//!
//! | build | atomics | lock-free? |
//! |---|---|---|
//! | `--cfg tollgate_loom` | `loom`'s, so the model checker can explore every interleaving | n/a |
//! | target with native 64-bit atomics | `core::sync::atomic` | yes |
//! | target without (e.g. `thumbv7m-none-eabi`) | `portable-atomic`'s fallback | **no**: a 64-bit CAS is emulated with a short critical section |

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(all(not(tollgate_loom), target_has_atomic = "64"))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(all(not(tollgate_loom), not(target_has_atomic = "64")))]
pub(crate) use {
    core::sync::atomic::{fence, AtomicU32, Ordering},
    portable_atomic::AtomicU64,
};

/// A hint inside a retry loop. Under loom it yields, so a model never spins forever.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(tollgate_loom)]
    loom::hint::spin_loop();
    #[cfg(not(tollgate_loom))]
    core::hint::spin_loop();
}

/// A small number for the calling thread, assigned round-robin (0, 1, 2, ...) on the thread's
/// first call and read from a thread-local afterwards: no syscall, no shared write. The keyed and
/// sharded limiters map it onto their cache-padded shards.
#[cfg(all(feature = "std", not(tollgate_loom)))]
#[inline]
pub(crate) fn thread_slot() -> usize {
    use core::cell::Cell;
    use core::sync::atomic::AtomicUsize;
    // The only process-wide atomic: touched once per thread, never on a decision.
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.with(|slot| {
        let mut s = slot.get();
        if s == usize::MAX {
            s = NEXT.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
            slot.set(s);
        }
        s
    })
}

/// Under loom the counter and the thread-local are loom's, so each explored execution assigns the
/// same slots (the first thread to call gets 0).
#[cfg(all(feature = "std", tollgate_loom))]
pub(crate) fn thread_slot() -> usize {
    use core::cell::Cell;
    loom::lazy_static! {
        static ref NEXT: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
    }
    loom::thread_local! {
        static SLOT: Cell<usize> = Cell::new(usize::MAX);
    }
    SLOT.with(|slot| {
        let mut s = slot.get();
        if s == usize::MAX {
            s = NEXT.fetch_add(1, Ordering::Relaxed);
            slot.set(s);
        }
        s
    })
}
