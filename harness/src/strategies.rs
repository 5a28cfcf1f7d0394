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
//! | `cas-coarse` | tollgate | [`tollgate::Bucket`] on a [`tollgate::CoarseClock`] (a cached reading of the cell's clock, refreshed every millisecond) ([`CasCoarse`]) |
//! | `sharded` | tollgate | [`tollgate::ShardedBucket`]: a central word and a lease per shard ([`Sharded`]) |
//! | `keyed` | tollgate | `tollgate::KeyedLimiter<u64>`, keys drawn from `--keys` |
//! | `multi` | tollgate | `tollgate::MultiBucket`: two quotas (the cell's, and half its rate with twice its burst) in one 128-bit CAS; the bound checked per quota |
//! | `multi-chain` | tollgate | the same two quotas in two `tollgate::Bucket`s: reserve on the first, try the second, cancel the first on refusal |
//! | `multi-mutex` | tollgate | the same two quotas' states under one `std::sync::Mutex` |
//! | `keyed-multi` | tollgate | `tollgate::KeyedMultiLimiter<u64>`: the same two quotas per key, keys from `--keys`; the bound checked per quota |
//! | `governor` | peer | `governor::DefaultDirectRateLimiter` (feature `peers`) |
//! | `governor-keyed` | peer | `governor::DefaultKeyedRateLimiter<u64>` (DashMap), keys from `--keys` (feature `peers`) |
//!
//! Every tollgate strategy reads the cell's clock once per operation, *before* taking its lock
//! or starting its CAS loop (as [`tollgate::Bucket`] does): the critical section holds only
//! the decision. A reading older than the state it is applied to only refuses more, so this is
//! exact.
//!
//! # Adding a strategy
//! One new file in `src/strategies/` with a type that implements [`RateLimiter`] and a
//! `pub(super) fn my_strategy() -> Strategy`, its `mod` line below, and one line in
//! [`builtins`]. Outside this crate, pass a [`Strategy`] to [`crate::cli::main_with`] instead.

mod coarse;
mod limiter;
mod locks;
mod multi;
#[cfg(feature = "peers")]
mod peers;
pub mod redis;
mod tollgate_types;

pub use coarse::CasCoarse;
pub use limiter::{Kind, RateLimiter, Setup, Strategy};
pub use locks::{CasBackoff, ParkingLotMutex, SpinLock, StdMutex};
pub use multi::second_quota;
pub use tollgate_types::{Cas, Sharded};

use tollgate::Denied;

/// The name of the strategy every `vs std-mutex` ratio is relative to.
pub const BASELINE: &str = "std-mutex";

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

/// A deliberately broken keyed strategy: a [`tollgate::KeyedLimiter`] of the cell's quota for
/// every key but key 0, whose bucket has ten times the burst. With keys drawn uniformly, the
/// other keys' slack can hide key 0's excess in the sum of the per-key bounds; the harness's
/// per-key check catches it. Offered by the CLI only with `TOLLGATE_BENCH_TEST_STRATEGIES=1`.
///
/// ```
/// use tollgate::Quota;
/// use tollgate_bench::{strategies, Setup};
/// let setup = Setup { quota: Quota::per_second(1).unwrap(), keys: 2, clock: Default::default() };
/// let broken = strategies::keyed_hot_key().build(&setup).unwrap();
/// assert!(broken.is_keyed());
/// assert!(broken.try_acquire_key(1, 1).is_ok());
/// assert!(broken.try_acquire_key(1, 1).is_err()); // key 1 keeps its quota
/// assert!((0..10).all(|_| broken.try_acquire_key(0, 1).is_ok())); // key 0: ten times the burst
/// ```
pub fn keyed_hot_key() -> Strategy {
    struct HotKey {
        keys: tollgate::KeyedLimiter<u64, tollgate::Quota, tollgate::DefaultClock>,
        hot: tollgate::Bucket<tollgate::DefaultClock>,
    }
    impl RateLimiter for HotKey {
        fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
            self.try_acquire_key(0, cost)
        }
        fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
            if key == 0 {
                self.hot.try_acquire(cost)
            } else {
                self.keys.try_acquire(&key, cost)
            }
        }
        fn is_keyed(&self) -> bool {
            true
        }
        fn name(&self) -> &str {
            "broken-keyed-hot-key"
        }
    }
    Strategy::new("broken-keyed-hot-key", Kind::Custom, |s: &Setup| {
        let q = s.quota;
        let burst = q.burst().checked_mul(10).ok_or("burst too large to multiply by 10")?;
        let hot = tollgate::Quota::new(q.tokens(), q.per(), burst).map_err(|e| e.to_string())?;
        let max_keys = usize::try_from(s.keys).map_err(|_| "too many keys")?;
        Ok(Box::new(HotKey {
            keys: tollgate::KeyedLimiter::with_clock(q, max_keys, s.clock),
            hot: tollgate::Bucket::with_clock(hot, s.clock),
        }) as Box<dyn RateLimiter>)
    })
    .with_description("TEST ONLY: a KeyedLimiter whose key 0 has ten times the burst, to check that the harness catches one key over its bound")
}

/// The built-in strategies, tollgate's first then the peers, in the order tables list them.
///
/// ```
/// let names: Vec<String> = tollgate_bench::strategies::builtins().iter().map(|s| s.name().to_owned()).collect();
/// assert_eq!(&names[..5], ["std-mutex", "parking-lot-mutex", "spin", "cas", "cas-backoff"]);
/// ```
pub fn builtins() -> Vec<Strategy> {
    vec![
        locks::std_mutex(),
        locks::parking_lot_mutex(),
        locks::spin(),
        tollgate_types::cas(),
        locks::cas_backoff(),
        coarse::cas_coarse(),
        tollgate_types::sharded(),
        tollgate_types::keyed(),
        multi::multi(),
        multi::multi_chain(),
        multi::multi_mutex(),
        multi::keyed_multi(),
        #[cfg(feature = "peers")]
        peers::governor(),
        #[cfg(feature = "peers")]
        peers::governor_keyed(),
    ]
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
