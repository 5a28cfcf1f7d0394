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
//! | `sharded` | tollgate | `tollgate::ShardedBucket` |
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
pub use tollgate_types::Cas;

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
