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
