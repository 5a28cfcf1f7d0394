//! The one place that names atomics, so one switch chooses their implementation:
//!
//! | build | `AtomicU64` | `AtomicU128` (`Smooth`, the keyed index, the sharded refusal hint) |
//! |---|---|---|
//! | `--cfg tollgate_loom` | loom's | `loom_u128::AtomicU128`, a loom mutex: one model-checked step per operation |
//! | native 64-bit atomics | `core`'s, lock-free | `portable-atomic`'s: lock-free where the CPU has a 128-bit CAS (`cmpxchg16b`, chosen at run time unless enabled at compile time; AArch64, …) |
//! | neither (`thumbv7m-none-eabi`) | `portable-atomic`'s fallback: **not** lock-free | the fallback: a short critical section |
//!
//! It also holds the crate's one mutex, the thread slots and the CPU ranks.

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(all(not(tollgate_loom), target_has_atomic = "64"))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(all(not(tollgate_loom), not(target_has_atomic = "64")))]
pub(crate) use {
    core::sync::atomic::{fence, AtomicU32, Ordering},
    portable_atomic::AtomicU64,
};

#[cfg(not(tollgate_loom))]
pub(crate) use portable_atomic::AtomicU128;

#[cfg(any(feature = "keyed", tollgate_loom))]
pub(crate) use self::mutex::{Mutex, MutexGuard};

/// The crate's one mutex: std's, or loom's under `--cfg tollgate_loom`, ignoring poison. Every
/// critical section leaves its data valid if a panic unwinds through it (decisions do not
/// panic; wakers run outside locks), so propagating poison would only turn one panic into many.
#[cfg(any(feature = "keyed", tollgate_loom))]
mod mutex {
    #[cfg(not(tollgate_loom))]
    use std::sync as imp;

    #[cfg(tollgate_loom)]
    use loom::sync as imp;

    pub(crate) use imp::MutexGuard;

    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(imp::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(imp::Mutex::new(value))
        }

        #[inline]
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// `None` if another thread holds the lock now.
        #[inline]
        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            match self.0.try_lock() {
                Ok(guard) => Some(guard),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        }
    }
}

/// A std lock's or condition variable's result, poisoned or not (see [`Mutex`]).
#[cfg(feature = "std")]
pub(crate) fn ignore_poison<G>(result: std::sync::LockResult<G>) -> G {
    result.unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(tollgate_loom)]
pub(crate) use loom_u128::AtomicU128;

/// loom has no 128-bit atomic: `AtomicU128`'s API over a loom mutex (orderings ignored: the
/// word is modelled as sequentially consistent).
#[cfg(tollgate_loom)]
pub(crate) mod loom_u128 {
    use super::{Mutex, Ordering};

    #[derive(Debug)]
    pub(crate) struct AtomicU128(Mutex<u128>);

    impl AtomicU128 {
        pub(crate) fn new(v: u128) -> AtomicU128 {
            AtomicU128(Mutex::new(v))
        }

        pub(crate) fn load(&self, _: Ordering) -> u128 {
            *self.0.lock()
        }

        pub(crate) fn store(&self, v: u128, _: Ordering) {
            *self.0.lock() = v;
        }

        pub(crate) fn compare_exchange(
            &self,
            current: u128,
            new: u128,
            _: Ordering,
            _: Ordering,
        ) -> Result<u128, u128> {
            let mut v = self.0.lock();
            if *v == current {
                *v = new;
                Ok(current)
            } else {
                Err(*v)
            }
        }

        /// Never fails spuriously.
        pub(crate) fn compare_exchange_weak(
            &self,
            current: u128,
            new: u128,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u128, u128> {
            self.compare_exchange(current, new, success, failure)
        }
    }
}

/// A hint inside a retry loop. Under loom it yields, so a model never spins forever.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(tollgate_loom)]
    loom::hint::spin_loop();
    #[cfg(not(tollgate_loom))]
    core::hint::spin_loop();
}

/// Exponential back-off for a thread waiting on a flag another thread holds (the reconfiguration
/// writer lock): spin 1, 2, 4, … 64 hints, then yield the thread to the OS at every step, so a
/// waiter never burns a core while the holder is preempted. Under loom every step is one
/// `spin_loop` (a loom yield), so a model explores the wait without multiplying its states.
///
/// Not `crossbeam_utils::Backoff`: built without its `std` feature (the core must stay
/// `no_std`-capable) it never yields, and its hints would bypass the loom switch above.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// The last step that spins (2^6 = 64 hints); later steps yield.
    const SPIN_LIMIT: u32 = 6;

    /// After a lost compare-and-swap: spin 1, 2, 4, … 64 hints, never yielding (the winner is
    /// running, not preempted: it just wrote). A lock-free loop that retries at once on a
    /// contended line mostly loses again — the other thread's next CAS takes the line while
    /// this one recomputes — so both threads trade the line without progress; a short pause
    /// lets one commit, then the other. Under loom it does nothing: the CAS loop is the model's
    /// scheduling point.
    #[inline]
    pub(crate) fn spin(&mut self) {
        #[cfg(not(tollgate_loom))]
        {
            for _ in 0..1u32 << self.step {
                spin_loop();
            }
            self.step = (self.step + 1).min(Self::SPIN_LIMIT);
        }
    }

    /// [`spin`](Self::spin) whose longest spin is 2^`limit` hints rather than 64, for a line
    /// that many cores contend: with spins of at most 64 hints, the retries of 64 threads
    /// alone fill a line that serves one transfer at a time, so every CAS is lost and nothing
    /// ends the contention. `limit` is at least [`SPIN_LIMIT`](Self::SPIN_LIMIT). Only the
    /// sharded bucket's central word uses it, so it exists with `std` alone.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn spin_up_to(&mut self, limit: u32) {
        debug_assert!((Self::SPIN_LIMIT..32).contains(&limit));
        #[cfg(not(tollgate_loom))]
        {
            for _ in 0..1u32 << self.step {
                spin_loop();
            }
            self.step = (self.step + 1).min(limit);
        }
        #[cfg(tollgate_loom)]
        let _ = limit;
    }

    /// Waits a little, longer at each call.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        #[cfg(tollgate_loom)]
        {
            // One hint (a loom yield) per step, whatever the step.
            spin_loop();
            self.step = (self.step + 1).min(Self::SPIN_LIMIT);
        }
        #[cfg(not(tollgate_loom))]
        {
            if self.step <= Self::SPIN_LIMIT {
                for _ in 0..1u32 << self.step {
                    spin_loop();
                }
                self.step += 1;
            } else {
                #[cfg(feature = "std")]
                std::thread::yield_now();
                // Without an OS there is nothing to yield to: keep spinning at the longest step.
                #[cfg(not(feature = "std"))]
                for _ in 0..1u32 << Self::SPIN_LIMIT {
                    spin_loop();
                }
            }
        }
    }
}

/// A small number for the calling thread: the smallest no live thread holds, claimed on its
/// first call, then read from a thread-local; returned to the pool when the thread exits, so
/// slots stay small while threads come and go (the keyed limiter's first slots own a counter
/// shard each and count without a locked instruction). A reused slot keeps one writer: the
/// exiting thread marks itself [`SHARED_SLOT`] before returning it, and the pool's mutex orders
/// its last counter store before the next owner's first load.
#[cfg(all(feature = "std", not(tollgate_loom)))]
#[inline]
pub(crate) fn thread_slot() -> usize {
    let s = SLOT.with(core::cell::Cell::get);
    if s != UNASSIGNED {
        return s;
    }
    slots::claim()
}

/// [`thread_slot`] of an exiting thread: above every owned shard (it counts on shared ones).
#[cfg(all(feature = "std", not(tollgate_loom)))]
pub(crate) const SHARED_SLOT: usize = usize::MAX >> 1;

/// The calling thread's slot before its first call.
#[cfg(all(feature = "std", not(tollgate_loom)))]
const UNASSIGNED: usize = usize::MAX;

#[cfg(all(feature = "std", not(tollgate_loom)))]
std::thread_local! {
    /// `UNASSIGNED`, a claimed slot, or `SHARED_SLOT`; no destructor (readable while exiting).
    static SLOT: core::cell::Cell<usize> = const { core::cell::Cell::new(UNASSIGNED) };
}

/// The pool behind [`thread_slot`]'s first call; a thread-local guard returns the slot.
#[cfg(all(feature = "std", not(tollgate_loom)))]
mod slots {
    use super::{SHARED_SLOT, SLOT};
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::sync::{Mutex, PoisonError};

    /// Slots ever handed out are `0..next`; `free` holds those returned, smallest first.
    struct Pool {
        next: usize,
        free: BinaryHeap<Reverse<usize>>,
    }

    // Taken when a thread claims a slot and when it exits, never on a decision.
    static POOL: Mutex<Pool> = Mutex::new(Pool {
        next: 0,
        free: BinaryHeap::new(),
    });

    /// Owns the calling thread's slot; dropping it (as the thread exits) returns the slot.
    struct Held(usize);

    impl Drop for Held {
        fn drop(&mut self) {
            // Stop using the slot, then give it back (see `thread_slot`).
            SLOT.with(|s| s.set(SHARED_SLOT));
            let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
            pool.free.push(Reverse(self.0));
        }
    }

    std::thread_local! {
        static HELD: core::cell::Cell<Option<Held>> = const { core::cell::Cell::new(None) };
    }

    /// The smallest free slot, or `SHARED_SLOT` if the thread is already exiting.
    #[cold]
    #[inline(never)]
    pub(super) fn claim() -> usize {
        let claimed = HELD.try_with(|held| {
            let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
            let slot = match pool.free.pop() {
                Some(Reverse(slot)) => slot,
                None if pool.next < SHARED_SLOT => {
                    pool.next += 1;
                    pool.next - 1
                }
                None => return SHARED_SLOT,
            };
            drop(pool);
            held.set(Some(Held(slot)));
            slot
        });
        let slot = claimed.unwrap_or(SHARED_SLOT);
        SLOT.with(|s| s.set(slot));
        slot
    }
}

/// A small number for the CPU the calling thread runs on, for the sharded bucket's shards: the
/// order in which the process first saw that CPU, so the CPUs it runs on get consecutive
/// numbers whatever their ids (CPUs 2 and 34 get 0 and 1, which `cpu % shards` would not), and
/// threads on one CPU share a shard's line.
///
/// Asked of the OS (`sched_getcpu`, no syscall on x86_64) once every 1,023 [`Tick`]s of a
/// thread, cached in between (reading the cache writes nothing, so that the decisions that
/// need no more than the number — a sharded bucket's refusals from its shard's line — carry
/// no store): a thread that migrated keeps its old number for at most 1,022 ticks, which
/// costs line transfers, never correctness (any thread may use any shard). The period is odd
/// so that a benchmark sampling every 2^k-th call does not alias with it. Where the OS cannot
/// say (an error, an id beyond 8,191), off Linux and under loom: [`thread_slot`].
///
/// Returned with the number: its [`Tick`], which counts this use towards the next refresh when
/// [`tick`](Tick::tick)ed (dropped, nothing is counted or written). One thread-local load
/// serves both: the tick stores the cache's value as read here less one tick, so the caller must
/// not ask this thread's number again before it ticks (nothing else writes the cache).
#[cfg(all(feature = "std", target_os = "linux", not(tollgate_loom)))]
#[inline]
pub(crate) fn cpu_home() -> (usize, Tick) {
    cpu::HOME.with(|home| {
        let h = home.get();
        if h & cpu::CALLS != 0 {
            (h >> cpu::CALLS_BITS, Tick(h))
        } else {
            cpu::refresh(home)
        }
    })
}

/// One use of the calling thread's [`cpu_home`], counted towards its next refresh by
/// [`tick`](Tick::tick): one above the value the cache holds after it — the value read, with
/// ticks left (a refresh period starts with `CALLS`); or, where nothing is cached, the value
/// left there (no ticks: its low bits are 0) plus one, so that the tick leaves it as it is.
#[cfg(all(feature = "std", target_os = "linux", not(tollgate_loom)))]
#[derive(Clone, Copy)]
pub(crate) struct Tick(usize);

#[cfg(all(feature = "std", target_os = "linux", not(tollgate_loom)))]
impl Tick {
    /// Counts the use: one store, no load, no test (the value is at least 1).
    #[inline]
    pub(crate) fn tick(self) {
        cpu::HOME.with(|home| home.set(self.0 - 1));
    }
}

/// [`cpu_home`] where the OS cannot say which CPU a thread runs on: its thread slot.
#[cfg(all(feature = "std", any(not(target_os = "linux"), tollgate_loom)))]
#[inline]
pub(crate) fn cpu_home() -> (usize, Tick) {
    (thread_slot(), Tick)
}

/// [`Tick`] where the thread slot is the number: nothing to count.
#[cfg(all(feature = "std", any(not(target_os = "linux"), tollgate_loom)))]
#[derive(Clone, Copy)]
pub(crate) struct Tick;

#[cfg(all(feature = "std", any(not(target_os = "linux"), tollgate_loom)))]
impl Tick {
    /// Nothing to count.
    #[inline]
    pub(crate) fn tick(self) {}
}

/// The rank table and thread-local cache behind [`cpu_home`].
#[cfg(all(feature = "std", target_os = "linux", not(tollgate_loom)))]
mod cpu {
    use core::cell::Cell;
    use core::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, PoisonError};

    /// The low bits of [`HOME`]: ticks left before a refresh (one every `CALLS` = 1,023).
    pub(super) const CALLS_BITS: u32 = 10;
    pub(super) const CALLS: usize = (1 << CALLS_BITS) - 1;

    /// CPU ids with a rank (Linux's `NR_CPUS` is at most 8,192).
    const CPUS: usize = 8192;

    /// `RANK[cpu]`: the CPU's rank + 1, or 0 before any thread ran there.
    static RANK: [AtomicUsize; CPUS] = [const { AtomicUsize::new(0) }; CPUS];

    /// Ranks handed out so far; locked once per CPU, never on a decision.
    static NEXT: Mutex<usize> = Mutex::new(0);

    std::thread_local! {
        /// The thread's CPU rank `<< CALLS_BITS | ticks left`; 0 at first. No destructor.
        pub(super) static HOME: Cell<usize> = const { Cell::new(0) };
    }

    /// Asks the OS for the CPU, ranks it, caches the rank for the next `CALLS` ticks (the
    /// refreshing call's own included, when it ticks: see [`Tick`](super::Tick)).
    #[cold]
    #[inline(never)]
    pub(super) fn refresh(home: &Cell<usize>) -> (usize, super::Tick) {
        let rank = match nix::sched::sched_getcpu() {
            Ok(cpu) if cpu < CPUS => rank(cpu),
            // Failed (a sandbox) or beyond the table: the slot, cached (one call per period).
            _ => super::thread_slot(),
        };
        // Only `SHARED_SLOT` does not fit, and is not cached.
        if rank <= usize::MAX >> CALLS_BITS {
            home.set(rank << CALLS_BITS | CALLS);
            (rank, super::Tick(rank << CALLS_BITS | CALLS))
        } else {
            // Nothing cached: the value stays, its low bits 0 (so the sum does not overflow).
            (rank, super::Tick(home.get() + 1))
        }
    }

    /// The rank of `cpu`, given on first sight under [`NEXT`]'s lock so that ranks have no gaps:
    /// the first `n` CPUs seen get `0..n`, a shard each of `n`.
    fn rank(cpu: usize) -> usize {
        let slot = &RANK[cpu];
        let r = slot.load(Ordering::Relaxed);
        if r != 0 {
            return r - 1;
        }
        let mut next = NEXT.lock().unwrap_or_else(PoisonError::into_inner);
        let r = slot.load(Ordering::Relaxed);
        if r != 0 {
            return r - 1;
        }
        *next += 1;
        slot.store(*next, Ordering::Relaxed);
        *next - 1
    }
}

/// Under loom: loom's counter and thread-local, so every explored execution assigns the same.
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

#[cfg(all(test, feature = "std", not(tollgate_loom)))]
mod tests {
    use super::{thread_slot, SHARED_SLOT};
    use std::vec::Vec;

    /// The spins double up to the limit given, past the 64 hints of `spin`, and stay there.
    #[test]
    fn spins_double_up_to_the_limit_given() {
        let mut b = super::Backoff::default();
        for n in 1..=3 {
            b.spin_up_to(10);
            assert_eq!(b.step, n);
        }
        for _ in 0..20 {
            b.spin_up_to(10);
        }
        assert_eq!(b.step, 10);
        let mut short = super::Backoff::default();
        for _ in 0..20 {
            short.spin();
        }
        assert_eq!(short.step, 6);
    }

    #[test]
    fn a_thread_keeps_its_slot_and_exited_threads_slots_are_reused() {
        let mine = thread_slot();
        assert_eq!(thread_slot(), mine);
        // 200 threads one after the other: each takes the smallest slot no live thread holds,
        // so they share a few slots (other tests' threads may hold some meanwhile); without
        // reuse they would take 200 different ones.
        let mut seen: Vec<usize> = (0..200)
            .map(|_| std::thread::spawn(thread_slot).join().unwrap())
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert!(seen.len() < 100, "{} distinct slots: {seen:?}", seen.len());
        assert!(!seen.contains(&mine) && !seen.contains(&SHARED_SLOT));
        assert_eq!(thread_slot(), mine);
    }

    /// Pins the calling thread to `cpu` (the OS moves it there before this returns).
    #[cfg(target_os = "linux")]
    fn pin(cpu: usize) {
        use nix::sched::{sched_setaffinity, CpuSet};
        let mut set = CpuSet::new();
        set.set(cpu).unwrap();
        sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    }

    #[cfg(target_os = "linux")]
    use std::eprintln;

    /// Two CPUs this process may run on, if it may run on two.
    #[cfg(target_os = "linux")]
    fn two_cpus() -> Option<[usize; 2]> {
        use nix::sched::{sched_getaffinity, CpuSet};
        let allowed = sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        let mut cpus = (0..CpuSet::count()).filter(|&c| allowed.is_set(c).unwrap_or(false));
        Some([cpus.next()?, cpus.next()?])
    }

    /// Threads pinned to two CPUs get two homes, each stable over many calls (refreshes
    /// included); a thread moved from one CPU to the other takes the other's home within one
    /// refresh period of ticks and never answers anything else meanwhile; calls that do not
    /// tick keep the number they found.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_is_homed_on_its_cpu_and_follows_it_within_a_period() {
        use super::{cpu, cpu_home};
        // The number alone (its tick dropped: not counted), and the number with its use counted.
        let number = || cpu_home().0;
        let ticked = || {
            let (home, tick) = cpu_home();
            tick.tick();
            home
        };
        let Some(cpus) = two_cpus() else {
            eprintln!("one CPU only: nothing to compare");
            return;
        };
        let homes = cpus.map(|c| {
            std::thread::spawn(move || {
                pin(c);
                let home = number();
                for _ in 0..5 * cpu::CALLS {
                    assert_eq!(ticked(), home, "cpu {c}");
                }
                home
            })
            .join()
            .unwrap()
        });
        assert_ne!(homes[0], homes[1], "cpus {cpus:?}");
        std::thread::spawn(move || {
            pin(cpus[0]);
            // The refreshing call ticks too, as a decision does: a period of `CALLS` ticks.
            assert_eq!(ticked(), homes[0]);
            pin(cpus[1]);
            for _ in 0..5 * cpu::CALLS {
                assert_eq!(number(), homes[0], "no tick, no refresh");
            }
            let mut calls = 1;
            loop {
                let home = number();
                if home == homes[1] {
                    break;
                }
                assert_eq!(ticked(), homes[0]);
                calls += 1;
            }
            assert!(calls <= cpu::CALLS, "{calls} calls to follow the move");
        })
        .join()
        .unwrap();
    }
}
