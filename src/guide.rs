//! The guide: how to use each limiter, beyond the README's quick start.
//!
//! This module holds no code, only this page. Every example on it is a doc test on simulated
//! time (mostly a [`ManualClock`]), so the times it shows are exact. The API pages hold the details; the design
//! notes (the state word, the keyed table, sharding on many cores) are on the modules and types
//! they describe.
//!
//! 1. [Choosing a limiter](#choosing-a-limiter)
//! 2. [Refuse, wait or reserve](#refuse-wait-or-reserve)
//! 3. [Async waiting](#async-waiting)
//! 4. [Changing the quota at run time](#changing-the-quota-at-run-time)
//! 5. [HTTP: `Retry-After` and `RateLimit` headers](#http-retry-after-and-ratelimit-headers)
//! 6. [Coming from Guava: `Smooth`](#coming-from-guava-smooth)
//! 7. [Several limits at once: `MultiBucket` and `all_of`](#several-limits-at-once-multibucket-and-all_of)
//! 8. [One bucket per key: `KeyedLimiter`](#one-bucket-per-key-keyedlimiter)
//! 9. [One limit on many cores: `ShardedBucket`](#one-limit-on-many-cores-shardedbucket)
//! 10. [Your own storage: the `gcra` functions](#your-own-storage-the-gcra-functions)
//! 11. [Restarts: saving and restoring state](#restarts-saving-and-restoring-state-feature-persist)
//! 12. [Clocks](#clocks)
//! 13. [Cargo features and `no_std`](#cargo-features-and-no_std)
//!
//! # Choosing a limiter
//!
//! | you need | use |
//! |---|---|
//! | one limit in a process (an API client, a worker pool, a whole server) | [`Bucket`] |
//! | several limits at once ("10 per second **and** 10,000 per day") | [`MultiBucket`](crate::MultiBucket) |
//! | the same, hit by many cores at once, with headroom | [`ShardedBucket`](crate::ShardedBucket) (`std`) |
//! | one limit per tenant, API key or client address, in bounded memory | [`KeyedLimiter`](crate::KeyedLimiter) (`keyed`); a policy per key: [`KeyedMultiLimiter`](crate::KeyedMultiLimiter) |
//! | Guava's `RateLimiter` behaviour, warm-up included | [`Smooth`] |
//! | the state in your own store (a database row, a shared-memory slot) | [`gcra`] |
//! | a limit shared by several processes or hosts | `tollgate-redis` ([README](https://github.com/tollgate-rs/tollgate/blob/main/redis/README.md)) |
//! | an HTTP guard for tower, axum or hyper | `tollgate-tower` ([README](https://github.com/tollgate-rs/tollgate/blob/main/tower/README.md)) |
//!
//! All but `Smooth` take a [`Quota`]: `tokens` per `per`, holding at most `burst` tokens. A request
//! costs a number of tokens (1 for "one request", the body size for a byte limit).
//!
//! # Refuse, wait or reserve
//!
//! [`Bucket::try_acquire`] answers yes or no at once. A client that must wait its turn, a
//! batch job that plans ahead, or a caller that waits only so long needs more:
//!
//! | call | waits? | on refusal |
//! |---|---|---|
//! | [`Bucket::try_acquire`] | never | `Err(RetryAfter(d))`, nothing consumed |
//! | [`Bucket::try_acquire_for`] | only if the wait is at most the timeout | `Err(RetryAfter(wait))`, nothing consumed |
//! | [`Bucket::acquire`] | until admitted; returns the time waited | only `Err(ExceedsBurst)` (`cost > burst`) |
//! | [`Bucket::reserve`] | never: returns a [`Reservation`] with its delay | only `Err(ExceedsBurst)` |
//! | [`Bucket::until_ready`] | asynchronously, on any executor | only `Err(ExceedsBurst)` |
//!
//! Waits sleep through the bucket's clock, after the one compare-and-swap that takes the tokens.
//! A [`ManualClock`] advances itself by the requested time instead, so every waiting path is
//! deterministic in tests:
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
//! assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(100))));
//! // Bounded waiting: refuse, consuming nothing, if the turn is more than 50 ms away.
//! assert_eq!(
//!     bucket.try_acquire_for(1, Duration::from_millis(50)),
//!     Err(Denied::RetryAfter(Duration::from_millis(100)))
//! );
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! [`Bucket::reserve`] takes the tokens now, possibly ahead of the refill, and says when they
//! are due; the next caller queues behind it. Dropping a [`Reservation`] keeps it;
//! [`Reservation::cancel`] gives **all** its tokens back if the bucket admitted nothing since
//! (nested reservations cancelled in reverse order all come back), and nothing otherwise, once
//! due, or after a `set_quota`. That is stricter than Go's `x/time/rate`, whose partial refunds
//! can admit a token twice; why, and the proof, are in
//! [docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Bucket, ManualClock, Quota};
//!
//! let clock = ManualClock::new();
//! let bucket = Bucket::with_clock(Quota::per_second(10)?.with_burst(2)?, clock.clone());
//! assert_eq!(bucket.reserve(2)?.delay(), Duration::ZERO);
//! let r = bucket.reserve(2)?;
//! assert_eq!(r.delay(), Duration::from_millis(200));
//! r.cancel(); // nothing admitted since: both tokens come back
//! clock.advance(Duration::from_millis(300));
//! assert_eq!(bucket.reserve(2)?.delay(), Duration::ZERO);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## The leaky bucket as a queue
//!
//! A token bucket with burst 1 whose callers all use the blocking [`Bucket::acquire`](crate::Bucket::acquire) is the
//! *queue* form of the leaky bucket: every caller is let through exactly one emission interval
//! (`1 / rate`) after the previous one, so the output rate is constant whatever the arrival
//! pattern. (GCRA was designed as the virtual-scheduling form of that leaky bucket; the
//! theoretical arrival time *is* the queue's tail.)
//!
//! ```
//! use tollgate::{Bucket, Clock, ManualClock, Quota};
//! let clock = ManualClock::new();
//! let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(1).unwrap(), clock.clone());
//! let mut emitted = Vec::new();
//! for _ in 0..4 {
//!     bucket.acquire(1).unwrap();
//!     emitted.push(clock.now() / 1_000_000); // ms
//! }
//! assert_eq!(emitted, [0, 100, 200, 300]); // one every 100 ms: constant output rate
//! ```
//!
//! Trade-offs against the token bucket (burst > 1, or refusing with `try_acquire`):
//!
//! * **Smoothness vs latency.** The queue never emits two requests closer than `1 / rate`: the
//!   downstream sees a perfectly even load, but an idle client that sends a small batch pays
//!   `n / rate` for it. A larger burst lets the batch through at once and keeps the long-run
//!   rate, at the price of short spikes downstream.
//! * **Unbounded queueing.** Waiting callers hold a place in line; under sustained overload the
//!   queue (the debt) grows and so does every caller's latency. Bound it with
//!   [`Bucket::try_acquire_for`](crate::Bucket::try_acquire_for) (refuse when the wait would exceed a timeout) — the same role
//!   the finite queue plays in a leaky bucket that drops overflow.
//! * **Work-conserving fairness.** The order is first-come-first-served by CAS; a caller that
//!   gives up ([`Reservation::cancel`](crate::Reservation::cancel), or dropping an [`UntilReady`](crate::UntilReady)) gets its tokens back only
//!   if the bucket admitted nothing since its reservation, so cancellation never lets any window
//!   exceed the quota, whatever the clock readings (why, against Go's `x/time/rate`:
//!   docs/guarantees.md).
//!
//! # Async waiting
//!
//! `bucket.until_ready(cost).await` reserves on its first poll and resolves once the tokens are
//! due ([`Bucket::until_ready`]). It needs no runtime feature: the wake-up comes from the clock
//! ([`Timer::register_wake`]) — for the std clocks one timer thread that tollgate starts on
//! first use — so it runs on tokio, async-std, smol or a hand-written `block_on` alike. It is
//! **cancel-safe**: dropping it before it resolves cancels its reservation, so a `select!` or a
//! timeout that abandons it wastes no quota. A future holds one wake-up registration, removed
//! when it is dropped, however often it is polled.
//!
//! [`Bucket::until_ready_with_jitter`] adds a deterministic pseudo-random delay of up to
//! `max_jitter` (from a seed, no RNG) after the tokens are due, to spread callers that became
//! ready at the same instant; it never changes what the bucket admits.
//!
//! In tests, a [`ManualClock::new`] clock completes the future on its first poll by advancing
//! itself (which moves the time of everything sharing that clock); a
//! [`ManualClock::new_frozen`] clock keeps the future pending until the test moves the time
//! (see [Clocks](#clocks)).
//!
//! # Changing the quota at run time
//!
//! [`Bucket::set_quota`] replaces the quota atomically: a concurrent caller sees either the old
//! quota with the old state or the new one with the new state. The balance at the switch
//! carries over, capped at the new burst (raising the burst does not fill the bucket), and a
//! debt keeps its due instant: a faster rate does not repay reservations queued at the old rate
//! early. A reservation made before a reconfiguration can no longer be cancelled.
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
//! [`Smooth::set_rate`] does the same for the Guava limiter, with Guava's rules.
//!
//! # HTTP: `Retry-After` and `RateLimit` headers
//!
//! A refusal is a value: [`Denied::RetryAfter`] carries the exact wait, and
//! [`Denied::retry_after_secs`] rounds it up to whole seconds, at least 1, for a `Retry-After`
//! header (never `Retry-After: 0`). [`Limiter::decide_snapshots`](crate::Limiter::decide_snapshots)
//! (every limiter) also returns a [`Snapshot`] of each quota as that decision left it — the
//! tokens remaining and the time until full — for the `RateLimit` header fields, and every
//! limiter's `try_acquire_or_snapshot` the tightest one on refusal only:
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Bucket, Limiter, ManualClock, Quota};
//!
//! let bucket = Bucket::with_clock(Quota::per_second(10)?, ManualClock::new());
//! let (verdict, snapshots) = bucket.decide_snapshots(&(), 4);
//! let snapshot = snapshots.tightest().1;
//! assert!(verdict.is_ok());
//! assert_eq!(snapshot.remaining(), 6);
//! assert_eq!(snapshot.until_full(), Duration::from_millis(400));
//! bucket.try_acquire(6).unwrap();
//! let denied = bucket.try_acquire(1).unwrap_err();
//! assert_eq!(denied.retry_after_secs(), Some(1)); // 100 ms, rounded up
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! `tollgate-tower` writes these headers for you.
//!
//! # Coming from Guava: `Smooth`
//!
//! [`Smooth`] is Guava's `RateLimiter` — `SmoothBursty` (`RateLimiter.create(rate)`) and
//! `SmoothWarmingUp` (`RateLimiter.create(rate, warmup)`) — reproduced to the microsecond, its
//! state in one 128-bit word. [`Smooth::bursty`] and [`Smooth::warming_up`] are Guava's
//! factories on the default clock (1 s of burst; cold factor 3); the `_with_clock` constructors
//! take the burst or cold factor and a clock:
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, Smooth};
//!
//! // 2 permits/s with a 4 s warm-up (cold factor 3): starts cold, speeds up under load.
//! let clock = ManualClock::new();
//! let limiter = Smooth::warming_up_with_clock(2.0, Duration::from_secs(4), 3.0, clock.clone())?;
//! let waits: Vec<u128> = (0..8).map(|_| limiter.acquire(1).as_millis()).collect();
//! assert_eq!(waits, [0, 1375, 1125, 875, 625, 500, 500, 500]); // Guava's own test sequence
//!
//! // Bursty: up to 1 s of unused permits are served at once; `try_acquire` never waits
//! // longer than asked.
//! let limiter = Smooth::bursty_with_clock(5.0, Duration::from_secs(1), clock.clone())?;
//! assert!(limiter.try_acquire(1, Duration::ZERO));
//! // The next permit is 200 ms away: refused, nothing changes.
//! assert!(!limiter.try_acquire(1, Duration::from_millis(100)));
//! // Stored permits rescale; the debt already taken is paid at the old rate.
//! limiter.set_rate(10.0)?;
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! What to expect if you know Guava (`Smooth` keeps Guava's signatures, `try_acquire(permits,
//! timeout) -> bool` among them, because Guava compatibility is its purpose):
//!
//! * **Pay later**, as in Guava: a request never waits for its own permits; `acquire(100)` on
//!   an idle limiter returns at once and the *next* caller waits 100 intervals. `acquire`
//!   returns the time slept as a [`Duration`](core::time::Duration) in whole microseconds
//!   (Guava: seconds as a `double`).
//! * **Same numbers**: Guava's `f64` formulas in Guava's order, with its truncations. Guava's
//!   `RateLimiterTest` sequences (bursts, weights, warm-up with cold factors 1, 3 and 10,
//!   `setRate` mid-warm-up, `tryAcquire` timeouts) are tests here with exact microsecond
//!   values. The one rounding the integer state adds, and where it can show (1 µs, with
//!   warm-ups or bursts over 2.1 s), is under [`Smooth`]'s "Arithmetic and rounding".
//! * **Stricter inputs**: infinite rates, rates above 1,000,000 permits/s, cold factors below
//!   1 are [`ConfigError`]s; 0 permits is a no-op instead of an exception. The full list is
//!   under [`Smooth`]'s "Deviations from Guava".
//! * **Portability**: lock-free where the CPU has a 128-bit compare-and-swap (x86_64 with
//!   `cmpxchg16b`, AArch64, …); build with `-C target-feature=+cmpxchg16b` on x86_64 to skip
//!   the run-time check. A short lock elsewhere.
//!
//! # Several limits at once: `MultiBucket` and `all_of`
//!
//! "10 per second **and** 10,000 per day": a [`Limits`](crate::Limits) of up to four quotas, all
//! of which must hold. [`MultiBucket`](crate::MultiBucket) decides them at one clock reading and
//! debits all of them in one atomic step (two quotas: one 128-bit compare-and-swap, lock-free);
//! a refusal writes nothing, so a per-second refusal never spends the daily quota.
//! `RetryAfter` is the slowest quota's exact wait, [`Refusal`](crate::Refusal) says which quota
//! fired, and [`Snapshots`](crate::Snapshots) describes every quota for `RateLimit-Policy`
//! headers (the tightest one for `RateLimit`).
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
//! Several *different* limiters — a tenant's and the global one — cannot share one word:
//! [`all_of`](crate::all_of) and [`all_of2`](crate::all_of2) take them in order and give the
//! earlier tokens back (the cancel rule above) when a later one refuses. No limiter ever admits
//! more than its quota; under contention a give-back can find another admission and keep its
//! tokens, so prefer one `MultiBucket` where the quotas belong to one key.
//!
#![cfg_attr(feature = "keyed", doc = "```")]
#![cfg_attr(not(feature = "keyed"), doc = "```ignore")]
//! use tollgate::{all_of, Bucket, KeyedLimiter, ManualClock, Quota};
//!
//! let clock = ManualClock::new();
//! let global = Bucket::with_clock(Quota::per_second(5_000)?, clock.clone());
//! let tenants = KeyedLimiter::with_clock(Quota::per_second(200)?, 10_000, clock.clone());
//! let admitted = all_of(&global, 1, |cost| tenants.try_acquire(&"tenant-42", cost));
//! assert_eq!(admitted, Ok(()));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! A policy *per key* ("10 per second and 10,000 per day per API key") is a
//! [`KeyedMultiLimiter`](crate::KeyedMultiLimiter) (feature `keyed`): each key decides its
//! `Limits` exactly as its own `MultiBucket` would, in a table bounded like `KeyedLimiter`'s
//! (only keys whose quotas are all full are evicted), with per-key policies from its builder's
//! `override_quota`. It offers what `KeyedLimiter` does (counters, `until_key_ready`, metrics,
//! shadow mode, `save` and `restore`), for every quota of every key.
//!
#![cfg_attr(feature = "keyed", doc = "```")]
#![cfg_attr(not(feature = "keyed"), doc = "```ignore")]
//! use std::time::Duration;
//! use tollgate::{Denied, KeyedMultiLimiter, Limiter, Limits, ManualClock, Quota};
//!
//! let clock = ManualClock::new();
//! let per_day = |n| Quota::new(n, Duration::from_secs(86_400), n);
//! let basic = Limits::new([Quota::per_second(10)?, per_day(10_000)?])?;
//! let premium = Limits::new([Quota::per_second(100)?, per_day(1_000_000)?])?;
//! let keys = KeyedMultiLimiter::builder(basic, 100_000, clock.clone())
//!     .override_quota("key-premium", premium)
//!     .build()?;
//! assert_eq!(keys.try_acquire(&"key-1", 10), Ok(()));
//! assert_eq!(keys.try_acquire(&"key-1", 1), Err(Denied::RetryAfter(Duration::from_millis(100))));
//! assert_eq!(keys.try_acquire(&"key-premium", 100), Ok(()));
//! let (_, snapshots) = keys.decide_snapshots(&"key-1", 0);
//! assert_eq!(snapshots.as_slice()[1].remaining(), 9_990); // key-1's day, spent once
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # One bucket per key: `KeyedLimiter`
//!
//! `KeyedLimiter` (feature `keyed`, on by default) keeps one exact bucket per key in a table
//! sized once for `max_keys`: memory never grows past it, only *full* buckets are evicted (which
//! changes no verdict), and a full table refuses new keys with `RetryAfter` (or, with
//! `fail_open(true)`, admits them untracked). Keys are identified by a 64-bit fingerprint; the
//! trade that makes (two keys may share one bucket, about 3 × 10⁻⁸ odds at a million keys,
//! always stricter) and the table's protocol are on `KeyedLimiter` and its index module.
//!
#![cfg_attr(feature = "keyed", doc = "```")]
#![cfg_attr(not(feature = "keyed"), doc = "```ignore")]
//! use std::time::Duration;
//! use tollgate::{Denied, KeyedLimiter, ManualClock, Quota};
//!
//! let clock = ManualClock::new();
//! let limiter = KeyedLimiter::builder(Quota::per_second(10)?, 100_000, clock.clone())
//!     .override_quota("tenant-gold".to_string(), Quota::per_second(1_000)?) // premium tenant
//!     .fail_open(false) // the default: a full table refuses new keys with RetryAfter
//!     .build()?;
//!
//! assert_eq!(limiter.try_acquire_by("tenant-42", 10), Ok(())); // &str for String keys
//! assert_eq!(
//!     limiter.try_acquire_by("tenant-42", 1),
//!     Err(Denied::RetryAfter(Duration::from_millis(100)))
//! );
//! assert_eq!(limiter.try_acquire_by("tenant-gold", 500), Ok(()));
//! assert_eq!(limiter.len(), 2);
//! let c = limiter.counters(); // admitted, refused, refused_table_full, admitted_untracked, evicted
//! assert_eq!((c.admitted, c.refused), (2, 1));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! Eviction is lazy (insertions that need room sweep, a bounded step each; no background
//! thread), and a flood of new keys against a full table is refused in O(1) without a lock.
//! `until_key_ready(&key, cost).await` waits for one key (governor's `until_key_ready`); unlike
//! [`Bucket::until_ready`] it reserves nothing, so waiting callers of one key are not queued.
//!
//! # One limit on many cores: `ShardedBucket`
//!
//! A single [`Bucket`] is one cache line that every admission on every core writes. For one
//! global limit hit by many cores, `ShardedBucket` (feature `std`) keeps one exact central word
//! and gives each cache-padded per-core shard a lease of its tokens, spent on the shard's own
//! line (on Linux, the shard of the CPU the thread runs on). Leases are sized from what the word
//! holds, so the shards together hold a small share of its tokens, and one thread alone still
//! gets the whole burst and rate. The design, its guarantees and its costs:
//! [`docs/sharded.md`](https://github.com/tollgate-rs/tollgate/blob/main/docs/sharded.md).
//!
#![cfg_attr(feature = "std", doc = "```")]
#![cfg_attr(not(feature = "std"), doc = "```ignore")]
//! use std::time::Duration;
//! use tollgate::{Denied, ManualClock, Quota, ShardedBucket};
//!
//! let clock = ManualClock::new();
//! // ShardedBucket::new(quota) uses one shard per core; here 4 shards explicitly.
//! let bucket = ShardedBucket::with_clock(Quota::per_second(8)?, 4, clock.clone());
//! assert_eq!(bucket.try_acquire(8), Ok(())); // the whole burst, from the central word
//! assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(125))));
//! clock.advance(Duration::from_secs(1));
//! assert_eq!(bucket.available(), 8);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! # Your own storage: the `gcra` functions
//!
//! Every limiter here applies the same pure functions to a `u64` state: [`gcra::try_acquire`],
//! [`gcra::available`], [`gcra::snapshot`], [`gcra::reserve`], [`gcra::cancel`],
//! [`gcra::rescale`]. They read no clock and touch no atomics: pass the state and the time, store
//! what they return. [`gcra::FULL`] is a full bucket (and the value of a state never written).
//! With a shared store, write the new state with a compare-and-swap on the value you read, and
//! retry if it moved:
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
//! The state's meaning (a theoretical arrival time in fixed-point token units) is in the
//! [`gcra`] module docs; a state is only meaningful with the quota it was computed under
//! ([`gcra::rescale`] converts it to another).
//!
//! # Restarts: saving and restoring state (feature `persist`)
//!
//! A limiter that forgets everything when its process restarts hands every client a fresh
//! burst after each deploy, and a crash loop removes the limit. Every in-process limiter saves
//! its state to any [`std::io::Write`] and restores it from any [`std::io::Read`]: `save` and
//! `restore` on `Bucket`, `ShardedBucket`, `Smooth` and `MultiBucket`; `KeyedLimiter::save` and
//! `KeyedLimiterBuilder::restore` (the table is rebuilt around the saved fingerprint seed), and
//! the same pair on `KeyedMultiLimiter` (every quota of every key). The `_at` forms take the wall-clock time, for tests. A saved state is anchored to the wall
//! clock, so the downtime refills at the quota's rate, at most to the burst; a wall clock that
//! stepped back refills nothing:
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
//! let mut file = Vec::new(); // a `File`, in a real process (see below for atomic writes)
//! bucket.save_at(&mut file, stopped).unwrap();
//!
//! // The next process, ten minutes later: no fresh burst.
//! let restarted = Bucket::with_clock(quota, ManualClock::new());
//! match restarted.restore_at(&file[..], stopped + Duration::from_secs(600)) {
//!     Ok(()) => {}
//!     // Truncated, corrupt, foreign: start drained, never full.
//!     Err(_) => { /* Bucket::with_initial_tokens(quota, 0, clock) */ }
//! }
//! assert_eq!(restarted.try_acquire(1), Err(Denied::RetryAfter(Duration::from_secs(3000))));
//! # }
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! In a server: restore at start (no file at all is a first start: full; a file that fails to
//! restore: drained, with a log line saying why), save on SIGTERM after the last request, and every few seconds to bound what a `kill -9`
//! can hand out again (what was admitted since the last save); write a temporary file, fsync
//! it and rename it over the old one, so a crash mid-save leaves the previous state. The
//! example server of `tollgate-tower` does exactly this (`--state FILE --save-every 10s`).
//! A `KeyedLimiter` saves while it decides, one chunk of its table at a time; the
//! [`persist`](https://docs.rs/tollgate/latest/tollgate/persist/index.html) module has the format, what a concurrent save can miss, and why
//! that only errs toward fewer tokens.
//!
//! # Clocks
//!
//! A [`Clock`] returns monotonic nanoseconds since its own origin; every limiter reads it once
//! per decision.
//!
//! * [`QuantaClock`](crate::QuantaClock) (feature `quanta`, the default [`DefaultClock`]): `quanta`'s
//!   calibrated TSC, several times cheaper to read than `Instant::now()`.
//! * [`StdClock`](crate::StdClock) (feature `std`): `std::time::Instant`, the default without
//!   `quanta`.
//! * [`CoarseClock`](crate::CoarseClock) (feature `std`, opt-in): another clock's reading cached
//!   and refreshed by an upkeep thread (every millisecond, say), so a decision reads one word
//!   instead of the TSC. Decisions stay exact for the (stale) reading, which only refuses more;
//!   tokens that refill within a refresh arrive at the next one.
//! * [`ManualClock`]: a shared counter you move, always compiled; clones share one time. Two
//!   modes:
//!   * [`ManualClock::new`] **advances itself** when a limiter waits on it: `acquire` and
//!     `until_ready` return at once with the clock moved by the wait — for every limiter
//!     sharing it. Convenient for sequential tests.
//!   * [`ManualClock::new_frozen`] (`std`) **moves only when the test moves it**
//!     ([`ManualClock::advance`], [`ManualClock::set`]), which wakes the waiters whose deadline
//!     it reaches: for tests of concurrent waiters and futures.
//!
#![cfg_attr(feature = "std", doc = "```")]
#![cfg_attr(not(feature = "std"), doc = "```ignore")]
//! use std::time::Duration;
//! use tollgate::{Bucket, Clock, ManualClock, Quota};
//!
//! // Advancing: the wait moved the shared time.
//! let clock = ManualClock::new();
//! let bucket = Bucket::with_clock(Quota::per_second(10)?, clock.clone());
//! bucket.try_acquire(10).unwrap();
//! assert_eq!(bucket.acquire(1), Ok(Duration::from_millis(100)));
//! assert_eq!(clock.now(), 100_000_000);
//!
//! // Frozen: nothing moves until the test says so; a clock may also step back.
//! let clock = ManualClock::new_frozen();
//! let bucket = Bucket::with_clock(Quota::per_second(10)?, clock.clone());
//! bucket.try_acquire(10).unwrap();
//! assert!(bucket.try_acquire(1).is_err());
//! clock.advance(Duration::from_millis(100));
//! assert_eq!(bucket.try_acquire(1), Ok(()));
//! clock.set(Duration::from_millis(50)); // a step back refuses more, never admits more
//! assert_eq!(bucket.available(), 0);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! Clock readings that step backwards (TSCs out of step across cores) are tolerated by every
//! limiter: an earlier reading only sees fewer tokens. To bring your own time source (an RTOS
//! tick, a simulation), implement [`Clock::now`]; the default [`Clock::sleep`] then works
//! everywhere, by spinning (override it to sleep properly). The waiting methods (`acquire`,
//! `until_ready`, ...) also need the clock's [`Timer`](crate::Timer), whose defaults wait on
//! that sleep and wake futures at once (or on the shared timer thread with `std`): an empty
//! `impl Timer for Ticks {}` gives them.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use tollgate::{Bucket, Clock, Quota};
//!
//! /// A 1 kHz tick counter, as an interrupt handler would keep it.
//! #[derive(Debug)]
//! struct Ticks(AtomicU64);
//! impl Clock for Ticks {
//!     fn now(&self) -> u64 {
//!         self.0.load(Ordering::Relaxed).saturating_mul(1_000_000)
//!     }
//! }
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
//! | `std` | yes | blocking waits that sleep, [`StdClock`](crate::StdClock), [`CoarseClock`](crate::CoarseClock), the shared timer thread behind `until_ready`, `ShardedBucket`, `std::error::Error` impls, [`ManualClock::new_frozen`], and the constructors on the default clock (`Bucket::new`, `Smooth::bursty`, …) |
//! | `quanta` | yes | [`QuantaClock`](crate::QuantaClock), then the [`DefaultClock`] (implies `std`) |
//! | `keyed` | yes | `KeyedLimiter` (implies `std`; adds `foldhash`) |
//! | `persist` | no | `save`/`restore` on every limiter, the [`persist`](https://docs.rs/tollgate/latest/tollgate/persist/index.html) module (implies `std`; adds `crc32fast`) |
//!
//! With `default-features = false` the crate is `#![no_std]` and needs `alloc` (for
//! [`ManualClock`]). There is no default clock then — [`DefaultClock`] is a [`ManualClock`],
//! which never moves by itself — so `Bucket::new` does not exist: pass your platform's clock to
//! [`Bucket::with_clock`] (see the tick counter above). It builds for targets without native
//! 64-bit atomics such as `thumbv7m-none-eabi`, where the state word comes from
//! `portable-atomic`'s fallback and the bucket is **not lock-free**. Without `std`, an async
//! wait re-polls at once instead of sleeping (there is no timer thread).
//!
//! [`Bucket::acquire`]: crate::Bucket::acquire
//! [`Bucket::reserve`]: crate::Bucket::reserve
//! [`Bucket::set_quota`]: crate::Bucket::set_quota
//! [`Bucket::try_acquire_for`]: crate::Bucket::try_acquire_for
//! [`Bucket::try_acquire`]: crate::Bucket::try_acquire
//! [`Bucket::until_ready_with_jitter`]: crate::Bucket::until_ready_with_jitter
//! [`Bucket::until_ready`]: crate::Bucket::until_ready
//! [`Bucket::with_clock`]: crate::Bucket::with_clock
//! [`Bucket`]: crate::Bucket
//! [`Clock::now`]: crate::Clock::now
//! [`Timer::register_wake`]: crate::Timer::register_wake
//! [`Clock::sleep`]: crate::Clock::sleep
//! [`Clock`]: crate::Clock
//! [`ConfigError`]: crate::ConfigError
//! [`DefaultClock`]: crate::DefaultClock
//! [`Denied::RetryAfter`]: crate::Denied::RetryAfter
//! [`Denied::retry_after_secs`]: crate::Denied::retry_after_secs
//! [`ManualClock::advance`]: crate::ManualClock::advance
//! [`ManualClock::new_frozen`]: crate::ManualClock::new_frozen
//! [`ManualClock::new`]: crate::ManualClock::new
//! [`ManualClock::set`]: crate::ManualClock::set
//! [`ManualClock`]: crate::ManualClock
//! [`Quota`]: crate::Quota
//! [`Reservation::cancel`]: crate::Reservation::cancel
//! [`Reservation`]: crate::Reservation
//! [`Smooth::bursty`]: crate::Smooth::bursty
//! [`Smooth::set_rate`]: crate::Smooth::set_rate
//! [`Smooth::warming_up`]: crate::Smooth::warming_up
//! [`Smooth`]: crate::Smooth
//! [`Snapshot`]: crate::Snapshot
//! [`gcra::FULL`]: crate::gcra::FULL
//! [`gcra::available`]: crate::gcra::available
//! [`gcra::cancel`]: crate::gcra::cancel
//! [`gcra::rescale`]: crate::gcra::rescale
//! [`gcra::reserve`]: crate::gcra::reserve
//! [`gcra::snapshot`]: crate::gcra::snapshot
//! [`gcra::try_acquire`]: crate::gcra::try_acquire
//! [`gcra`]: crate::gcra
