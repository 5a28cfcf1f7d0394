//! The lock strategies: the pure decision under a mutex, a spin lock, or a hand-written CAS
//! loop with backoff.

use super::{Kind, RateLimiter, Setup, Strategy};
use crossbeam_utils::Backoff;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tollgate::{gcra, Clock, DefaultClock, Denied, Quota};

/// Applies the decision to a state the caller holds exclusively.
#[inline]
fn decide(state: &mut u64, now: u64, quota: &Quota, cost: u64) -> Result<(), Denied> {
    if let Some(next) = gcra::try_acquire(*state, now, quota, cost)? {
        *state = next;
    }
    Ok(())
}

/// `std-mutex`: the decision under a [`std::sync::Mutex`]. The baseline every ratio is
/// relative to.
///
/// ```
/// use tollgate::{ManualClock, Quota};
/// use tollgate_bench::{strategies::StdMutex, RateLimiter};
/// let clock = ManualClock::new();
/// let m = StdMutex::new(Quota::per_second(2).unwrap(), clock.clone());
/// assert!(m.try_acquire(2).is_ok());
/// assert!(m.try_acquire(1).is_err());
/// clock.advance(std::time::Duration::from_millis(500));
/// assert!(m.try_acquire(1).is_ok());
/// ```
#[derive(Debug)]
pub struct StdMutex<C = DefaultClock> {
    state: std::sync::Mutex<u64>,
    quota: Quota,
    clock: C,
}

impl<C: Clock> StdMutex<C> {
    /// A full bucket on `clock`.
    ///
    /// ```
    /// let m = tollgate_bench::strategies::StdMutex::new(tollgate::Quota::per_second(1).unwrap(), tollgate::ManualClock::new());
    /// # let _ = m;
    /// ```
    pub fn new(quota: Quota, clock: C) -> StdMutex<C> {
        StdMutex {
            state: std::sync::Mutex::new(gcra::FULL),
            quota,
            clock,
        }
    }
}

impl<C: Clock + Send + Sync> RateLimiter for StdMutex<C> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        // A poisoned lock still holds a valid state: the decision never panics midway.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        decide(&mut state, now, &self.quota, cost)
    }
    fn name(&self) -> &str {
        "std-mutex"
    }
}

/// `parking-lot-mutex`: the decision under a [`parking_lot::Mutex`].
///
/// ```
/// use tollgate::{ManualClock, Quota};
/// use tollgate_bench::{strategies::ParkingLotMutex, RateLimiter};
/// let m = ParkingLotMutex::new(Quota::per_second(2).unwrap(), ManualClock::new());
/// assert!(m.try_acquire(2).is_ok());
/// assert!(m.try_acquire(1).is_err());
/// ```
#[derive(Debug)]
pub struct ParkingLotMutex<C = DefaultClock> {
    state: parking_lot::Mutex<u64>,
    quota: Quota,
    clock: C,
}

impl<C: Clock> ParkingLotMutex<C> {
    /// A full bucket on `clock`.
    ///
    /// ```
    /// let m = tollgate_bench::strategies::ParkingLotMutex::new(tollgate::Quota::per_second(1).unwrap(), tollgate::ManualClock::new());
    /// # let _ = m;
    /// ```
    pub fn new(quota: Quota, clock: C) -> ParkingLotMutex<C> {
        ParkingLotMutex {
            state: parking_lot::Mutex::new(gcra::FULL),
            quota,
            clock,
        }
    }
}

impl<C: Clock + Send + Sync> RateLimiter for ParkingLotMutex<C> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        decide(&mut self.state.lock(), now, &self.quota, cost)
    }
    fn name(&self) -> &str {
        "parking-lot-mutex"
    }
}

/// `spin`: a test-and-test-and-set spin lock with exponential backoff (1, 2, 4 … 64 pause
/// instructions, then `yield_now`, so that a preempted holder gets the core back when threads
/// outnumber cores), guarding the state.
///
/// No `unsafe`: the state is an `AtomicU64` read and written with `Relaxed` inside the critical
/// section; the lock's `Acquire` CAS and `Release` store order it.
///
/// ```
/// use tollgate::{ManualClock, Quota};
/// use tollgate_bench::{strategies::SpinLock, RateLimiter};
/// let m = SpinLock::new(Quota::per_second(2).unwrap(), ManualClock::new());
/// assert!(m.try_acquire(2).is_ok());
/// assert!(m.try_acquire(1).is_err());
/// ```
#[derive(Debug)]
pub struct SpinLock<C = DefaultClock> {
    locked: AtomicBool,
    state: AtomicU64,
    quota: Quota,
    clock: C,
}

impl<C: Clock> SpinLock<C> {
    /// A full bucket on `clock`.
    ///
    /// ```
    /// let m = tollgate_bench::strategies::SpinLock::new(tollgate::Quota::per_second(1).unwrap(), tollgate::ManualClock::new());
    /// # let _ = m;
    /// ```
    pub fn new(quota: Quota, clock: C) -> SpinLock<C> {
        SpinLock {
            locked: AtomicBool::new(false),
            state: AtomicU64::new(gcra::FULL),
            quota,
            clock,
        }
    }

    #[inline]
    fn lock(&self) {
        let mut step = 0u32;
        loop {
            // Test (a plain load, shared cache line) before test-and-set (exclusive).
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            if step <= 6 {
                for _ in 0..(1u32 << step) {
                    std::hint::spin_loop();
                }
                step += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl<C: Clock + Send + Sync> RateLimiter for SpinLock<C> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        self.lock();
        let mut state = self.state.load(Ordering::Relaxed);
        let result = decide(&mut state, now, &self.quota, cost);
        self.state.store(state, Ordering::Relaxed);
        self.locked.store(false, Ordering::Release);
        result
    }
    fn name(&self) -> &str {
        "spin"
    }
}

/// `cas-backoff`: a CAS loop on an `AtomicU64` applying the same decision, which backs off
/// with [`crossbeam_utils::Backoff::spin`] after each failed CAS before reloading.
///
/// ```
/// use tollgate::{ManualClock, Quota};
/// use tollgate_bench::{strategies::CasBackoff, RateLimiter};
/// let m = CasBackoff::new(Quota::per_second(2).unwrap(), ManualClock::new());
/// assert!(m.try_acquire(2).is_ok());
/// assert!(m.try_acquire(1).is_err());
/// ```
#[derive(Debug)]
pub struct CasBackoff<C = DefaultClock> {
    state: AtomicU64,
    quota: Quota,
    clock: C,
}

impl<C: Clock> CasBackoff<C> {
    /// A full bucket on `clock`.
    ///
    /// ```
    /// let m = tollgate_bench::strategies::CasBackoff::new(tollgate::Quota::per_second(1).unwrap(), tollgate::ManualClock::new());
    /// # let _ = m;
    /// ```
    pub fn new(quota: Quota, clock: C) -> CasBackoff<C> {
        CasBackoff {
            state: AtomicU64::new(gcra::FULL),
            quota,
            clock,
        }
    }
}

impl<C: Clock + Send + Sync> RateLimiter for CasBackoff<C> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        let backoff = Backoff::new();
        // The word holds nothing but the state: `Relaxed` suffices (coherence orders it).
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            let Some(next) = gcra::try_acquire(cur, now, &self.quota, cost)? else {
                return Ok(());
            };
            match self
                .state
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(_) => {
                    backoff.spin();
                    cur = self.state.load(Ordering::Relaxed);
                }
            }
        }
    }
    fn name(&self) -> &str {
        "cas-backoff"
    }
}

/// The `std-mutex` strategy (the baseline).
pub(super) fn std_mutex() -> Strategy {
    Strategy::new("std-mutex", Kind::Tollgate, |s: &Setup| {
        Ok(Box::new(StdMutex::new(s.quota, s.clock)) as Box<dyn RateLimiter>)
    })
    .with_description("std::sync::Mutex<u64> around the decision (the baseline)")
}

/// The `parking-lot-mutex` strategy.
pub(super) fn parking_lot_mutex() -> Strategy {
    Strategy::new("parking-lot-mutex", Kind::Tollgate, |s: &Setup| {
        Ok(Box::new(ParkingLotMutex::new(s.quota, s.clock)) as Box<dyn RateLimiter>)
    })
    .with_description("parking_lot::Mutex<u64> around the decision")
}

/// The `spin` strategy.
pub(super) fn spin() -> Strategy {
    Strategy::new("spin", Kind::Tollgate, |s: &Setup| {
        Ok(Box::new(SpinLock::new(s.quota, s.clock)) as Box<dyn RateLimiter>)
    })
    .with_description("test-and-test-and-set spin lock, exponential backoff then yield")
}

/// The `cas-backoff` strategy.
pub(super) fn cas_backoff() -> Strategy {
    Strategy::new("cas-backoff", Kind::Tollgate, |s: &Setup| {
        Ok(Box::new(CasBackoff::new(s.quota, s.clock)) as Box<dyn RateLimiter>)
    })
    .with_description("CAS loop with crossbeam_utils::Backoff after a failed CAS")
}
