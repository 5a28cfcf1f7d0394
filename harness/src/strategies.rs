//! The built-in strategies: the same pure decision function, [`tollgate::gcra::try_acquire`] on
//! a `u64` state, under each synchronization strategy; and the peers, for reference.
//!
//! | name | kind | synchronization |
//! |---|---|---|
//! | `std-mutex` | tollgate | [`std::sync::Mutex<u64>`] ([`StdMutex`]) |
//! | `parking-lot-mutex` | tollgate | [`parking_lot::Mutex<u64>`] ([`ParkingLotMutex`]) |
//! | `spin` | tollgate | test-and-test-and-set spin lock with exponential backoff ([`SpinLock`]) |
//! | `cas` | tollgate | [`tollgate::Bucket`]: one CAS loop on one `AtomicU64` ([`Cas`]) |
//! | `cas-backoff` | tollgate | a CAS loop with [`crossbeam_utils::Backoff`] after a failed CAS ([`CasBackoff`]) |
//! | `sharded` | tollgate | `tollgate::ShardedBucket` |
//! | `keyed` | tollgate | `tollgate::KeyedLimiter<u64>`, keys drawn from `--keys` |
//! | `governor` | peer | `governor::DefaultDirectRateLimiter` (feature `peers`) |
//! | `governor-keyed` | peer | `governor::DefaultKeyedRateLimiter<u64>` (DashMap), keys from `--keys` (feature `peers`) |
//!
//! Every tollgate strategy reads the cell's clock once per operation, *before* taking its lock
//! or starting its CAS loop (as [`tollgate::Bucket`] does): the critical section holds only
//! the decision. A reading older than the state it is applied to only refuses more, so this is
//! exact.
//!
//! # Adding a strategy
//! Write a type that implements [`RateLimiter`], then one entry in [`builtins`] (or, outside
//! this crate, pass a [`Strategy`] to [`crate::cli::main_with`]).

use crate::limiter::{Kind, RateLimiter, Setup, Strategy};
use crossbeam_utils::Backoff;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tollgate::{gcra, Bucket, Clock, DefaultClock, Denied, Quota};

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

/// `cas`: [`tollgate::Bucket`] itself — one `AtomicU64`, a CAS loop retried at once.
///
/// ```
/// use tollgate::{Bucket, ManualClock, Quota};
/// use tollgate_bench::{strategies::Cas, RateLimiter};
/// let m = Cas::new(Bucket::with_clock(Quota::per_second(2).unwrap(), ManualClock::new()));
/// assert!(m.try_acquire(2).is_ok());
/// assert!(m.try_acquire(1).is_err());
/// ```
#[derive(Debug)]
pub struct Cas<C = DefaultClock>(Bucket<C>);

impl<C: Clock> Cas<C> {
    /// Wraps a bucket.
    ///
    /// ```
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let m = tollgate_bench::strategies::Cas::new(Bucket::with_clock(Quota::per_second(1).unwrap(), ManualClock::new()));
    /// # let _ = m;
    /// ```
    pub fn new(bucket: Bucket<C>) -> Cas<C> {
        Cas(bucket)
    }
}

impl<C: Clock + Send + Sync> RateLimiter for Cas<C> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.0.try_acquire(cost)
    }
    fn name(&self) -> &str {
        "cas"
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

/// A deliberately broken strategy that admits everything: it exists so that tests (and you)
/// can check that the harness catches a limiter admitting more than its bound. The CLI offers
/// it only when the environment variable `TOLLGATE_BENCH_TEST_STRATEGIES=1` is set.
///
/// ```
/// use tollgate::Quota;
/// use tollgate_bench::{strategies, Setup};
/// let setup = Setup { quota: Quota::per_second(1).unwrap(), keys: 1, clock: Default::default() };
/// let broken = strategies::always_admit().build(&setup).unwrap();
/// assert!(broken.try_acquire(1).is_ok());
/// assert!(broken.try_acquire(1).is_ok()); // over the quota: the harness will flag it
/// ```
pub fn always_admit() -> Strategy {
    struct AlwaysAdmit;
    impl RateLimiter for AlwaysAdmit {
        fn try_acquire(&self, _cost: u64) -> Result<(), Denied> {
            Ok(())
        }
        fn name(&self) -> &str {
            "broken-always-admit"
        }
    }
    Strategy::new("broken-always-admit", Kind::Custom, |_| {
        Ok(Box::new(AlwaysAdmit))
    })
    .with_description("TEST ONLY: admits everything, to check that the harness catches it")
}

/// The built-in strategies, tollgate's first then the peers, in the order tables list them.
///
/// ```
/// let names: Vec<String> = tollgate_bench::strategies::builtins().iter().map(|s| s.name().to_owned()).collect();
/// assert_eq!(&names[..5], ["std-mutex", "parking-lot-mutex", "spin", "cas", "cas-backoff"]);
/// ```
pub fn builtins() -> Vec<Strategy> {
    #[allow(unused_mut)] // extended only with the optional features
    let mut all = vec![
        Strategy::new("std-mutex", Kind::Tollgate, |s: &Setup| {
            Ok(Box::new(StdMutex::new(s.quota, s.clock)) as Box<dyn RateLimiter>)
        })
        .with_description("std::sync::Mutex<u64> around the decision (the baseline)"),
        Strategy::new("parking-lot-mutex", Kind::Tollgate, |s: &Setup| {
            Ok(Box::new(ParkingLotMutex::new(s.quota, s.clock)) as Box<dyn RateLimiter>)
        })
        .with_description("parking_lot::Mutex<u64> around the decision"),
        Strategy::new("spin", Kind::Tollgate, |s: &Setup| {
            Ok(Box::new(SpinLock::new(s.quota, s.clock)) as Box<dyn RateLimiter>)
        })
        .with_description("test-and-test-and-set spin lock, exponential backoff then yield"),
        Strategy::new("cas", Kind::Tollgate, |s: &Setup| {
            Ok(Box::new(Cas::new(Bucket::with_clock(s.quota, s.clock))) as Box<dyn RateLimiter>)
        })
        .with_description("tollgate::Bucket: lock-free CAS loop on one AtomicU64"),
        Strategy::new("cas-backoff", Kind::Tollgate, |s: &Setup| {
            Ok(Box::new(CasBackoff::new(s.quota, s.clock)) as Box<dyn RateLimiter>)
        })
        .with_description("CAS loop with crossbeam_utils::Backoff after a failed CAS"),
    ];
    all.extend(multi_tenant::strategies());
    #[cfg(feature = "peers")]
    all.extend(peers::strategies());
    all
}

/// The built-in strategy called `name`, if any.
///
/// ```
/// assert!(tollgate_bench::strategies::by_name("spin").is_some());
/// assert!(tollgate_bench::strategies::by_name("nope").is_none());
/// ```
pub fn by_name(name: &str) -> Option<Strategy> {
    builtins().into_iter().find(|s| s.name() == name)
}

// The multi-tenant strategies (`keyed`, `sharded`): `tollgate::KeyedLimiter` and
// `tollgate::ShardedBucket`. The runner checks keyed strategies' bounds per key (`is_keyed()`).
mod multi_tenant {
    use super::*;
    use tollgate::{KeyedLimiter, ShardedBucket};

    struct Keyed(KeyedLimiter<u64, DefaultClock>);
    impl RateLimiter for Keyed {
        fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
            self.0.try_acquire(&0, cost)
        }
        fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
            self.0.try_acquire(&key, cost)
        }
        fn is_keyed(&self) -> bool {
            true
        }
        fn name(&self) -> &str {
            "keyed"
        }
    }

    struct Sharded(ShardedBucket<DefaultClock>);
    impl RateLimiter for Sharded {
        fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
            self.0.try_acquire(cost)
        }
        fn name(&self) -> &str {
            "sharded"
        }
    }

    pub(super) fn strategies() -> Vec<Strategy> {
        vec![
            Strategy::new("sharded", Kind::Tollgate, |s: &Setup| {
                let shards = std::thread::available_parallelism().map_or(1, |n| n.get());
                Ok(
                    Box::new(Sharded(ShardedBucket::with_clock(s.quota, shards, s.clock)))
                        as Box<dyn RateLimiter>,
                )
            })
            .with_description("tollgate::ShardedBucket: one cache-padded sub-bucket per core"),
            Strategy::new("keyed", Kind::Tollgate, |s: &Setup| {
                // Room for every key: the table never fills, so no refusal is due to capacity.
                let max_keys = usize::try_from(s.keys).map_err(|_| "too many keys".to_owned())?;
                Ok(
                    Box::new(Keyed(KeyedLimiter::with_clock(s.quota, max_keys, s.clock)))
                        as Box<dyn RateLimiter>,
                )
            })
            .with_description("tollgate::KeyedLimiter<u64>: one bucket per key (--keys)"),
        ]
    }
}

#[cfg(feature = "peers")]
mod peers {
    use super::*;
    use governor::clock::{Clock as _, DefaultClock as GovClock};
    use std::num::NonZeroU32;
    use std::time::Duration;

    /// governor's quota closest to `q` that admits no more: the replenish interval rounds
    /// *up* to whole nanoseconds, so the peer's bound is never above tollgate's.
    fn quota(q: &Quota) -> Result<governor::Quota, String> {
        let per_ns = q.per().as_nanos();
        let interval = per_ns.div_ceil(u128::from(q.tokens())).max(1);
        let interval = u64::try_from(interval).map_err(|_| "rate too slow for governor")?;
        let burst = u32::try_from(q.burst())
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| {
                format!(
                    "governor cannot hold a burst of {} (max u32::MAX)",
                    q.burst()
                )
            })?;
        Ok(governor::Quota::with_period(Duration::from_nanos(interval))
            .ok_or("zero replenish interval")?
            .allow_burst(burst))
    }

    fn n(cost: u64) -> Option<NonZeroU32> {
        u32::try_from(cost).ok().and_then(NonZeroU32::new)
    }

    /// governor reports the earliest instant; a caller answering `Retry-After` needs the wait,
    /// which costs one more clock read on a refusal.
    fn denied(
        nu: &governor::NotUntil<<GovClock as governor::clock::Clock>::Instant>,
        clock: &GovClock,
    ) -> Denied {
        Denied::RetryAfter(nu.wait_time_from(clock.now()))
    }

    struct Direct(governor::DefaultDirectRateLimiter);
    impl RateLimiter for Direct {
        fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
            let r = if cost == 1 {
                self.0.check()
            } else {
                let Some(n) = n(cost) else {
                    return if cost == 0 {
                        Ok(())
                    } else {
                        Err(Denied::ExceedsBurst)
                    };
                };
                self.0.check_n(n).map_err(|_| Denied::ExceedsBurst)?
            };
            r.map_err(|nu| denied(&nu, self.0.clock()))
        }
        fn name(&self) -> &str {
            "governor"
        }
    }

    struct Keyed(governor::DefaultKeyedRateLimiter<u64>);
    impl RateLimiter for Keyed {
        fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
            self.try_acquire_key(0, cost)
        }
        fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
            let r = if cost == 1 {
                self.0.check_key(&key)
            } else {
                let Some(n) = n(cost) else {
                    return if cost == 0 {
                        Ok(())
                    } else {
                        Err(Denied::ExceedsBurst)
                    };
                };
                self.0
                    .check_key_n(&key, n)
                    .map_err(|_| Denied::ExceedsBurst)?
            };
            r.map_err(|nu| denied(&nu, self.0.clock()))
        }
        fn is_keyed(&self) -> bool {
            true
        }
        fn name(&self) -> &str {
            "governor-keyed"
        }
    }

    pub(super) fn strategies() -> Vec<Strategy> {
        vec![
            Strategy::new("governor", Kind::Peer, |s: &Setup| {
                Ok(
                    Box::new(Direct(governor::RateLimiter::direct(quota(&s.quota)?)))
                        as Box<dyn RateLimiter>,
                )
            })
            .with_description("PEER: governor 0.10 direct limiter (its own quanta clock)"),
            Strategy::new("governor-keyed", Kind::Peer, |s: &Setup| {
                Ok(
                    Box::new(Keyed(governor::RateLimiter::keyed(quota(&s.quota)?)))
                        as Box<dyn RateLimiter>,
                )
            })
            .with_description("PEER: governor 0.10 keyed limiter, DashMap store (--keys)"),
        ]
    }
}
