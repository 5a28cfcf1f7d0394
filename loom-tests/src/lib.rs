//! What the loom models in `tests/` share: a clock whose reading each model thread sets for
//! itself (a stale reading, as preemption between a clock read and the CAS that uses it, or a
//! clock stepping back, produces). Only under `--cfg tollgate_loom`.

#[cfg(tollgate_loom)]
mod per_thread {
    use std::cell::Cell;

    loom::thread_local! {
        static NOW: Cell<u64> = Cell::new(0);
    }

    /// A clock that returns whatever the calling thread last set with [`at`] (0 before that).
    #[derive(Clone, Copy, Debug, Default)]
    pub struct PerThread;

    impl tollgate::Clock for PerThread {
        fn now(&self) -> u64 {
            NOW.with(Cell::get)
        }
    }

    /// Sets the calling thread's reading of [`PerThread`] to `t` nanoseconds.
    pub fn at(t: u64) {
        NOW.with(|n| n.set(t));
    }
}

#[cfg(tollgate_loom)]
pub use per_thread::{at, PerThread};
