//! The guide: how to use each limiter, beyond the README's quick start.
//!
//! Every example is a doc test on simulated time (mostly a [`ManualClock`]), so the times it
//! shows are exact. The details are on each type's page.
//!
//! # Choosing a limiter
//!
//! | you need | use |
//! |---|---|
//! | one limit in a process (an API client, a worker pool, a whole server) | [`Bucket`] |
//! | several limits at once ("10 per second **and** 10,000 per day") | [`MultiBucket`] |
//! | one limit decided by many cores at once | [`ShardedBucket`](crate::ShardedBucket) (`std`) |
//! | one limit per tenant, API key or client address, in bounded memory | [`KeyedLimiter`](crate::KeyedLimiter) (`keyed`); a policy per key: [`KeyedMultiLimiter`](crate::KeyedMultiLimiter) |
//! | Guava's `RateLimiter` behaviour, warm-up included | [`Smooth`] |
//! | the state in your own store (a database row, a shared-memory slot) | [`gcra`] |
//! | a limit shared by several processes or hosts | `tollgate-redis` ([README](https://github.com/tollgate-rs/tollgate/blob/main/redis/README.md)) |
//! | an HTTP guard for tower, axum or hyper | `tollgate-tower` ([README](https://github.com/tollgate-rs/tollgate/blob/main/tower/README.md)) |
//!
//! All but `Smooth` take a [`Quota`]: `tokens` per `per`, holding at most `burst` tokens. A request
//! costs a number of tokens (1 for "one request", the body size for a byte limit). Every limiter
//! implements [`Limiter`], one decision shape for code written once for all of them.
//!
//! # Refuse, wait or reserve
//!
//! | call | waits? | on refusal |
//! |---|---|---|
//! | [`Bucket::try_acquire`] | never | `Err(RetryAfter(d))`, nothing consumed |
//! | [`Bucket::try_acquire_for`] | only if the wait is at most the timeout | `Err(RetryAfter(wait))`, nothing consumed |
//! | [`Bucket::acquire`] | until admitted; returns the time waited | only `Err(ExceedsBurst)` (`cost > burst`) |
//! | [`Bucket::reserve`] | never: returns a [`Reservation`] with its delay | only `Err(ExceedsBurst)` |
//! | [`Bucket::until_ready`] | asynchronously, on any executor | only `Err(ExceedsBurst)` |
//!
//! Waits sleep through the bucket's clock; a [`ManualClock`] advances itself by the wait instead.
//! [`Bucket::reserve`] takes the tokens now, possibly ahead of the refill, and says when they
//! are due; [`Reservation::cancel`] gives **all** of them back if the bucket admitted nothing
//! since, and nothing otherwise, so a cancellation never admits a token twice
//! ([docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#cancellation-why-all-or-nothing)).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Bucket, Clock, Denied, ManualClock, Quota};
//!
//! let clock = ManualClock::new();
//! let bucket = Bucket::with_clock(Quota::per_second(10)?.with_burst(2)?, clock.clone());
//! assert_eq!(bucket.acquire(2), Ok(Duration::ZERO));
//! assert_eq!(bucket.acquire(2), Ok(Duration::from_millis(200))); // waited its turn
//! assert_eq!(clock.now(), 200_000_000);
//! // Bounded waiting: refuse, consuming nothing, if the turn is more than 50 ms away.
//! assert_eq!(
//!     bucket.try_acquire_for(1, Duration::from_millis(50)),
//!     Err(Denied::RetryAfter(Duration::from_millis(100)))
//! );
//! let r = bucket.reserve(2)?; // taken now, due in 200 ms; the next caller queues behind it
//! assert_eq!(r.delay(), Duration::from_millis(200));
//! r.cancel(); // nothing admitted since: both tokens come back
//! assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(100))));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! With burst 1 and every caller in [`Bucket::acquire`], callers are let through one per
//! emission interval (`1 / rate`) whatever the arrivals: the queue form of the leaky bucket,
//! whose queue [`Bucket::try_acquire_for`] bounds.
//!
//! # Async waiting
//!
//! `bucket.until_ready(cost).await` reserves on its first poll and resolves once the tokens are
//! due. It needs no runtime: the wake-up comes from the clock's [`Timer`] (for the std clocks,
//! one timer thread tollgate starts on first use). It is **cancel-safe**: dropping it before it
//! resolves cancels its reservation, so a `select!` or a timeout that abandons it wastes no
//! quota. [`Bucket::until_ready_with_jitter`] spreads callers that became ready together.
//!
//! ```
//! use std::future::Future;
//! use std::sync::Arc;
//! use std::task::{Context, Wake, Waker};
//! use std::time::Duration;
//! use tollgate::{Bucket, ManualClock, Quota};
//!
//! struct Nop;
//! impl Wake for Nop {
//!     fn wake(self: Arc<Self>) {}
//! }
//! let waker = Waker::from(Arc::new(Nop));
//! let clock = ManualClock::new_frozen(); // moves only when the test moves it
//! let bucket = Bucket::with_clock(Quota::per_second(10)?, clock.clone());
//! bucket.try_acquire(10).unwrap();
//! let mut wait = Box::pin(bucket.until_ready(1));
//! assert!(wait.as_mut().poll(&mut Context::from_waker(&waker)).is_pending()); // due in 100 ms
//! drop(wait); // abandoned: its reservation is cancelled
//! clock.advance(Duration::from_millis(100));
//! assert_eq!(bucket.available(), 1);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Changing the quota at run time
//!
//! [`Bucket::set_quota`] replaces the quota atomically. The balance carries over, capped at the
//! new burst, and a debt keeps its due instant; a reservation made before can no longer be
//! cancelled. [`Smooth::set_rate`] does the same with Guava's rules.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Bucket, ManualClock, Quota};
//!
//! let bucket = Bucket::with_clock(Quota::per_second(10)?.with_burst(2)?, ManualClock::new());
//! bucket.reserve(2)?;
//! bucket.reserve(2)?; // balance −2: due in 200 ms
//! bucket.set_quota(Quota::per_second(20)?.with_burst(4)?); // still due in 200 ms: −4 at 20/s
//! assert_eq!(bucket.reserve(1)?.delay(), Duration::from_millis(250));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # HTTP: `Retry-After` and `RateLimit` headers
//!
//! [`Denied::retry_after_secs`] rounds the exact wait up to whole seconds, at least 1, for a
//! `Retry-After` header. [`Limiter::decide_snapshots`] also returns a [`Snapshot`] of each quota
//! as the decision left it, for the `RateLimit` fields; `try_acquire_or_snapshot` returns the
//! tightest one on refusal only. To describe the quota too, take it with the decision
//! ([`Limiter::decide_snapshots_limits`]): `limits` read afterwards may be a quota a
//! `set_quota` installed since. `tollgate-tower` writes these headers for you.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Bucket, Limiter, ManualClock, Quota};
//!
//! let bucket = Bucket::with_clock(Quota::per_second(10)?, ManualClock::new());
//! let (verdict, snapshots) = bucket.decide_snapshots(&(), 10);
//! assert!(verdict.is_ok());
//! let snapshot = snapshots.tightest().1; // RateLimit: remaining=0, reset=1
//! assert_eq!((snapshot.remaining(), snapshot.until_full()), (0, Duration::from_secs(1)));
//! let denied = bucket.try_acquire(1).unwrap_err();
//! assert_eq!(denied.retry_after_secs(), Some(1)); // Retry-After: 1 (100 ms, rounded up)
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Coming from Guava: `Smooth`
//!
//! [`Smooth`] is Guava's `RateLimiter`, `SmoothBursty` and `SmoothWarmingUp` (its page shows
//! Guava's warm-up sequence), to the microsecond: Guava's `f64` formulas in Guava's order. It keeps Guava's signatures
//! (`try_acquire(permits, timeout) -> bool`), because Guava compatibility is its purpose; its
//! [`Limiter`] implementation gives the `Result` form. As in Guava a request never waits for its
//! own permits: the *next* caller pays. Inputs Guava mishandles (infinite rates, more than
//! 1,000,000 permits/s, cold factors below 1) are [`ConfigError`]s; the rounding and every
//! deviation: [docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#smooth-and-guava).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, Smooth};
//!
//! // `RateLimiter.create(5.0)`: up to 1 s of unused permits are served at once.
//! let limiter = Smooth::bursty_with_clock(5.0, Duration::from_secs(1), ManualClock::new())?;
//! assert_eq!(limiter.acquire(1), Duration::ZERO);
//! assert_eq!(limiter.acquire(1), Duration::from_millis(200)); // paying for the first
//! // The next permit is 200 ms away: refused, nothing changes.
//! assert!(!limiter.try_acquire(1, Duration::from_millis(100)));
//! limiter.set_rate(10.0)?;
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Several limits at once: `MultiBucket` and `all_of`
//!
//! A [`Limits`] holds up to four quotas that must all hold. [`MultiBucket`] decides them at one
//! clock reading and debits all of them in one atomic step; a refusal writes nothing, so a
//! per-second refusal never spends the daily quota. The [`Refusal`] names the quota that fired.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Denied, Limiter, Limits, ManualClock, MultiBucket, Quota};
//!
//! let clock = ManualClock::new();
//! let per_second = Quota::per_second(10)?;
//! let per_day = Quota::new(10_000, Duration::from_secs(86_400), 10_000)?;
//! let policy = MultiBucket::with_clock(Limits::new([per_second, per_day])?, clock.clone());
//! assert_eq!(policy.try_acquire(10), Ok(()));
//! let refusal = policy.decide(&(), 1).unwrap_err();
//! assert_eq!(refusal.quota_index(), 0); // the per-second quota fired
//! assert_eq!(refusal.denied(), Denied::RetryAfter(Duration::from_millis(100)));
//! let (_, snapshots) = policy.decide_snapshots(&(), 0);
//! assert_eq!(snapshots.as_slice()[1].remaining(), 9_990); // the day was spent once
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! *Different* limiters (a tenant's and the global one) cannot share one word: [`all_of`] and
//! [`all_of2`](crate::all_of2) take them in order and give the earlier tokens back when a later
//! one refuses. Under contention a give-back can fail (the cancel rule above), so prefer one
//! `MultiBucket` where the quotas belong to one key.
//!
//! # One bucket per key: `KeyedLimiter`
//!
//! `KeyedLimiter` (feature `keyed`, on by default) keeps one exact bucket per key in a table
//! sized once for `max_keys`: memory never grows past it, only *full* buckets are evicted (which
//! changes no verdict), lazily by the insertions that need room, and a full table refuses new
//! keys in O(1) with `RetryAfter` (or, with `fail_open(true)`, admits them untracked). Keys are
//! stored as 63-bit fingerprints: two keys may share one bucket, always stricter, about 5 ×
//! 10⁻⁸ odds at a million keys (the trade and the table's protocol: `KeyedLimiter`'s page).
//! `until_key_ready(&key, cost).await` waits for one key, reserving nothing.
//!
#![cfg_attr(feature = "keyed", doc = "```")]
#![cfg_attr(not(feature = "keyed"), doc = "```ignore")]
//! use tollgate::{KeyedLimiter, ManualClock, Quota};
//!
//! let limiter = KeyedLimiter::builder(Quota::per_second(10)?, 100_000, ManualClock::new())
//!     .override_quota("tenant-gold".to_string(), Quota::per_second(1_000)?) // premium tenant
//!     .build()?;
//! assert_eq!(limiter.try_acquire_by("tenant-42", 10), Ok(())); // &str for String keys
//! assert!(limiter.try_acquire_by("tenant-42", 1).is_err());
//! assert_eq!(limiter.try_acquire_by("tenant-gold", 500), Ok(()));
//! assert_eq!(limiter.len(), 2);
//! let c = limiter.counters(); // admitted, refused, refused_table_full, admitted_untracked, evicted
//! assert_eq!((c.admitted, c.refused), (2, 1));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! A policy *per key* is a [`KeyedMultiLimiter`](crate::KeyedMultiLimiter): each key decides its
//! `Limits` as its own `MultiBucket` would, in the same bounded table, with everything
//! `KeyedLimiter` offers ([`KeyedMultiLimiterBuilder`](crate::KeyedMultiLimiterBuilder) shows
//! per-key policies).
//!
//! # One limit on many cores: `ShardedBucket`
//!
//! A [`Bucket`] is one cache line that every admission writes: near the limit it serves a few
//! million decisions a second however many cores ask, and from about 4 threads deciding at
//! once some complete far fewer decisions than others (16 cores measured:
//! [docs/benchmarks.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/benchmarks.md);
//! a [`MultiBucket`](crate::MultiBucket)'s word alike, and it has no sharded form).
//! `ShardedBucket` (feature `std`) keeps one exact central word and leases its tokens to
//! cache-padded per-core shards, near the limit too; one thread alone still gets the whole
//! burst and rate. The design, its guarantees and costs:
//! [docs/sharded.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/sharded.md).
//!
#![cfg_attr(feature = "std", doc = "```")]
#![cfg_attr(not(feature = "std"), doc = "```ignore")]
//! use tollgate::{ManualClock, Quota, ShardedBucket};
//!
//! // `ShardedBucket::new(quota)`: one shard per core; here 4 shards.
//! let bucket = ShardedBucket::with_clock(Quota::per_second(8)?, 4, ManualClock::new());
//! assert_eq!(bucket.try_acquire(8), Ok(())); // one thread alone gets the whole burst
//! assert!(bucket.try_acquire(1).is_err());
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Your own storage: the `gcra` functions
//!
//! Every limiter applies the same pure functions to a `u64` state ([`gcra::try_acquire`],
//! [`gcra::reserve`], [`gcra::rescale`], ...): they read no clock and touch no atomics. Pass the
//! state and the time, store what they return (in a shared store, by compare-and-swap on the
//! value read); [`gcra::FULL`] is a full bucket. A state is only meaningful with its quota.
//!
//! ```
//! use std::cell::Cell;
//! use std::time::Duration;
//! use tollgate::{gcra, Denied, Quota};
//!
//! let quota = Quota::per_second(5)?;
//! let row = Cell::new(gcra::FULL); // your storage: a database column, a shared-memory slot...
//! let admit = |now_ns: u64, cost: u64| -> Result<(), Denied> {
//!     // `None`: admitted with nothing to write (cost 0).
//!     if let Some(next) = gcra::try_acquire(row.get(), now_ns, &quota, cost)? {
//!         row.set(next); // in a shared store: a compare-and-swap on the value read
//!     }
//!     Ok(())
//! };
//! assert_eq!(admit(0, 5), Ok(()));
//! assert_eq!(admit(0, 1), Err(Denied::RetryAfter(Duration::from_millis(200))));
//! assert_eq!(admit(200_000_000, 1), Ok(()));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Restarts: saving and restoring state (feature `persist`)
//!
//! A limiter that forgets its state at a restart hands every client a fresh burst after each
//! deploy. Every in-process limiter implements
//! [`persist::Persist`](https://docs.rs/tollgate/latest/tollgate/persist/trait.Persist.html):
//! `save` to any `Write`, `restore` from any `Read` (also inherent methods; a `KeyedLimiter` is
//! restored by its builder's `restore`). The state is anchored to the wall clock, so the
//! downtime refills at the quota's rate, at most to the burst:
//!
//! ```
//! # #[cfg(feature = "persist")] {
//! use std::time::{Duration, SystemTime};
//! use tollgate::{Bucket, Denied, ManualClock, Quota};
//!
//! let quota = Quota::new(1, Duration::from_secs(3600), 3)?; // 1 per hour, burst 3
//! let bucket = Bucket::with_clock(quota, ManualClock::new());
//! bucket.try_acquire(3).unwrap();
//! let stopped = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
//! let mut file = Vec::new(); // a `File`, in a real process
//! bucket.save_at(&mut file, stopped).unwrap();
//!
//! // The next process, ten minutes later: no fresh burst.
//! let restarted = Bucket::with_clock(quota, ManualClock::new());
//! if restarted.restore_at(&file[..], stopped + Duration::from_secs(600)).is_err() {
//!     restarted.drain(); // truncated, corrupt, foreign: start drained, never full
//! }
//! assert_eq!(restarted.try_acquire(1), Err(Denied::RetryAfter(Duration::from_secs(3000))));
//! # }
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! In a server: restore at start (no file is a first start: full; a file that fails to
//! restore: `drain`, and log why), save on SIGTERM and every few seconds, to a temporary file
//! renamed over the old one. The example server of `tollgate-tower` does this (`--state FILE
//! --save-every 10s`). A `KeyedLimiter` saves while it decides, a chunk of its table at a time.
//! The format and the guarantees: the
//! [`persist`](https://docs.rs/tollgate/latest/tollgate/persist/index.html) module.
//!
//! # Clocks
//!
//! A [`Clock`] returns monotonic nanoseconds since its own origin; every limiter reads it once
//! per decision, and tolerates a reading that steps back by refusing more.
//!
//! * [`QuantaClock`](crate::QuantaClock) (feature `quanta`, the default [`DefaultClock`]):
//!   `quanta`'s calibrated TSC, cheaper to read than `Instant::now()`.
//! * [`StdClock`](crate::StdClock) (feature `std`): `std::time::Instant`.
//! * [`CoarseClock`](crate::CoarseClock) (feature `std`, opt-in): another clock's reading cached
//!   by an upkeep thread, one load per decision; a stale reading only refuses more.
//! * [`ManualClock`]: a shared time you move, for tests. [`ManualClock::new`] advances itself
//!   when a limiter waits on it (for every limiter sharing it); [`ManualClock::new_frozen`]
//!   moves only when the test moves it, waking the waiters it reaches (examples on its page).
//!
//! Your own time source (an RTOS tick, a simulation) implements [`Clock::now`]; the default
//! [`Clock::sleep`] spins (override it to sleep). The waiting methods also need a [`Timer`],
//! whose defaults work on any clock: `impl Timer for Ticks {}`.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use tollgate::{Bucket, Clock, Quota, Timer};
//!
//! /// A 1 kHz tick counter, as an interrupt handler would keep it.
//! #[derive(Debug)]
//! struct Ticks(AtomicU64);
//! impl Clock for Ticks {
//!     fn now(&self) -> u64 {
//!         self.0.load(Ordering::Relaxed).saturating_mul(1_000_000)
//!     }
//! }
//! impl Timer for Ticks {} // for `acquire`, `until_ready`, ...
//! let bucket = Bucket::with_clock(Quota::per_second(2)?, Ticks(AtomicU64::new(0)));
//! assert_eq!(bucket.try_acquire(2), Ok(()));
//! assert!(bucket.try_acquire(1).is_err());
//! bucket.clock().0.store(500, Ordering::Relaxed); // 500 ms later
//! assert_eq!(bucket.try_acquire(1), Ok(()));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Cargo features and `no_std`
//!
//! | feature | default | adds |
//! |---|---|---|
//! | `std` | yes | blocking waits that sleep, [`StdClock`](crate::StdClock), [`CoarseClock`](crate::CoarseClock), the timer thread behind `until_ready`, `ShardedBucket`, `std::error::Error` impls, [`ManualClock::new_frozen`], the constructors on the default clock (`Bucket::new`, …) |
//! | `quanta` | yes | [`QuantaClock`](crate::QuantaClock), then the [`DefaultClock`] (implies `std`) |
//! | `keyed` | yes | `KeyedLimiter`, `KeyedMultiLimiter` (implies `std`; adds `foldhash`) |
//! | `persist` | no | `save`/`restore` on every limiter, the [`persist`](https://docs.rs/tollgate/latest/tollgate/persist/index.html) module (implies `std`; adds `crc32fast`) |
//! | `metrics` | no | named limiters' decisions and keyed-table gauges on the `metrics` facade, shadow mode ([`metrics`](https://docs.rs/tollgate/latest/tollgate/metrics/index.html)) |
//! | `tracing` | no | `tracing` events on state changes (a keyed table full, the timer thread failing to start) |
//!
//! With `default-features = false` the crate is `#![no_std]` and needs `alloc`. [`DefaultClock`]
//! is then a [`ManualClock`], so `Bucket::new` does not exist: pass your platform's clock to
//! [`Bucket::with_clock`] (the tick counter above). On targets without native 64-bit atomics
//! (`thumbv7m-none-eabi`) the state word comes from `portable-atomic`'s fallback and is **not
//! lock-free**; an async wait re-polls at once (there is no timer thread).

#[cfg(doc)]
use crate::{
    all_of, gcra, Bucket, Clock, ConfigError, DefaultClock, Denied, Limiter, Limits, ManualClock,
    MultiBucket, Quota, Refusal, Reservation, Smooth, Snapshot, Timer,
};
