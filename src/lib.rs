//! # tollgate
//!
//! Exact, lock-free rate limiting for the hot path of high-QPS servers.
//!
//! A [`Bucket`] is a token bucket whose whole state is one `AtomicU64`, updated by a
//! compare-and-swap loop: no lock, no allocation, no background thread. It takes a [`Quota`] (a
//! validated rate and burst) and refuses with a [`Denied`] that carries the exact wait. Beside
//! it, behind one [`Limiter`] trait: [`MultiBucket`] (several quotas at once), [`KeyedLimiter`]
//! (a bucket per key, feature `keyed`), [`ShardedBucket`] (one limit on many cores) and
//! [`Smooth`] (Guava's `RateLimiter`); the pure [`gcra`] functions for your own storage;
//! [`Clock`]s ([`ManualClock`] for tests); waiting ([`Bucket::acquire`], [`Bucket::reserve`],
//! the async [`Bucket::until_ready`]); and the features `metrics` and `persist`.
//!
//! **Exact**: every decision equals the continuous token bucket computed with exact rational
//! arithmetic at the clock's integer-nanosecond reading (see [`Quota::is_exact`] for the one
//! bounded rounding some rates need to fit [`HORIZON`] in 64 bits). No floats, no drift.
//!
//! New here? The [`guide`] walks through every limiter with examples.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Bucket, Denied, ManualClock, Quota};
//!
//! let clock = ManualClock::new();
//! let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
//! assert_eq!(bucket.try_acquire(10), Ok(()));
//! assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(100))));
//! clock.advance(Duration::from_millis(100));
//! assert_eq!(bucket.try_acquire(1), Ok(()));
//! ```
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
// CI checks every link in the default and all-features builds.
#![cfg_attr(
    not(all(feature = "std", feature = "quanta", feature = "keyed")),
    allow(rustdoc::broken_intra_doc_links)
)]
#![doc(test(attr(deny(warnings))))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod bucket;
mod chain;
mod clock;
mod error;
pub mod gcra;
pub mod guide;
#[cfg(feature = "keyed")]
mod keyed;
mod limiter;
mod limits;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod multi;
#[cfg(any(feature = "metrics", feature = "tracing"))]
mod observe;
mod refusal;

#[cfg(feature = "persist")]
#[cfg_attr(docsrs, doc(cfg(feature = "persist")))]
pub mod persist;
mod quota;
mod recip;
#[cfg(feature = "std")]
mod sharded;
mod slots;
mod smooth;
mod snapshot;
mod sync;
#[cfg(test)]
mod test_support;
mod wait;

pub use bucket::Bucket;
pub use chain::{all_of, all_of2, GiveBack};
#[cfg(all(feature = "std", not(tollgate_loom)))]
pub use clock::CoarseClock;
#[cfg(feature = "quanta")]
pub use clock::QuantaClock;
#[cfg(feature = "std")]
pub use clock::StdClock;
pub use clock::{Clock, DefaultClock, ManualClock, Timer, WakeRegistration};
pub use error::{ConfigError, Denied};
#[cfg(feature = "keyed")]
pub use keyed::{
    KeyedCounters, KeyedLimiter, KeyedLimiterBuilder, KeyedMultiLimiter, KeyedMultiLimiterBuilder,
    KeyedPolicy, MultiUntilKeyReady, UntilKeyReady,
};
pub use limiter::Limiter;
pub use limits::Limits;
pub use multi::{MultiBucket, MultiReservation, Refusal, Snapshots};
pub use quota::{Quota, HORIZON};
#[cfg(feature = "std")]
pub use sharded::ShardedBucket;
/// Not for users: what `ShardedBucket` writes to shared cache lines, per thread (feature
/// `counters`, for `tollgate-bench`).
#[cfg(feature = "counters")]
#[doc(hidden)]
pub mod counters {
    pub use crate::sharded::counters::{take, Counts};
}
pub use smooth::Smooth;
pub use snapshot::Snapshot;
pub use wait::{Reservation, UntilReady};

/// The README's Rust examples, compiled and run as doc tests (they assume the default features).
#[cfg(all(doctest, feature = "std", feature = "quanta", feature = "keyed"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
