//! [`Smooth`]: Guava's `SmoothRateLimiter` (`SmoothBursty` and `SmoothWarmingUp`), reproduced to
//! the microsecond, with its whole state in one 128-bit word updated by compare-and-swap.

use crate::clock::{Clock, DefaultClock};
use crate::error::ConfigError;
use crate::slots::EpochSlots;
use crate::sync::{spin_loop, AtomicU128, Ordering};
use core::fmt;
use core::time::Duration;

const MICROS_PER_SECOND: f64 = 1_000_000.0;
/// Guava's `nextFreeTicketMicros` saturates at `Long.MAX_VALUE`.
/// Width of the next-free-time field: 2^53 µs is 285 years after creation.
const MICROS_BITS: u32 = 53;
/// The largest next free time (and the largest clock reading, in µs since creation).
const MAX_MICROS: u64 = (1 << MICROS_BITS) - 1;
/// Width of the stored-permits field.
const FIXED_BITS: i32 = 74;
/// The largest stored-permits value, in units.
const MAX_FIXED: u128 = (1 << FIXED_BITS) - 1;

/// Which of Guava's two smooth limiters, and the constants `setRate` keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// `SmoothBursty`: stored permits are free; up to `max_burst_seconds × rate` of them.
    Bursty { max_burst_seconds: f64 },
    /// `SmoothWarmingUp`: stored permits above the threshold cost the trapezoid's integral.
    WarmingUp {
        warmup_micros: f64,
        cold_factor: f64,
    },
}

/// What `setRate` derives from the rate: Guava's fields, plus the fixed-point exponent of the
/// stored permits.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Params {
    /// `stableIntervalMicros`.
    stable: f64,
    /// `maxPermits`.
    max: f64,
    /// `thresholdPermits` (0 when bursty).
    threshold: f64,
    /// `slope` of the trapezoid (0 when bursty).
    slope: f64,
    /// `coolDownIntervalMicros()`.
    cool_down: f64,
    /// `F`: the stored permits are kept in units of `2^-F` permit.
    frac_bits: i32,
}

/// `2^e` for `e` in `-1022..=1023`, exactly.
fn pow2(e: i32) -> f64 {
    f64::from_bits(((1023 + e) as u64) << 52)
}

/// The largest `F` (within `-950..=1022`) such that `max · 2^F < 2^74`.
fn frac_bits_for(max: f64) -> i32 {
    if max.is_nan() || max <= 0.0 {
        return 0;
    }
    let biased = ((max.to_bits() >> 52) & 0x7ff) as i32;
    // `max < 2^b`: for a normal number b = exponent + 1; subnormals are below 2^-1022.
    let b = if biased == 0 { -1022 } else { biased - 1022 };
    (FIXED_BITS - b).clamp(-950, 1022)
}

impl Params {
    /// Guava's `doSetRate` without the stored-permits rescaling; `None` when the derived
    /// permit counts are not finite.
    fn new(mode: Mode, rate: f64) -> Option<Params> {
        let stable = MICROS_PER_SECOND / rate;
        let p = match mode {
            Mode::Bursty { max_burst_seconds } => {
                let max = max_burst_seconds * rate;
                Params {
                    stable,
                    max,
                    threshold: 0.0,
                    slope: 0.0,
                    cool_down: stable,
                    frac_bits: frac_bits_for(max),
                }
            }
            Mode::WarmingUp {
                warmup_micros,
                cold_factor,
            } => {
                let cold = stable * cold_factor;
                let threshold = 0.5 * warmup_micros / stable;
                let max = threshold + 2.0 * warmup_micros / (stable + cold);
                Params {
                    stable,
                    max,
                    threshold,
                    slope: (cold - stable) / (max - threshold),
                    cool_down: warmup_micros / max,
                    frac_bits: frac_bits_for(max),
                }
            }
        };
        (p.max.is_finite() && p.max >= 0.0 && stable > 0.0).then_some(p)
    }

    fn to_raw(self) -> [u64; 6] {
        [
            self.stable.to_bits(),
            self.max.to_bits(),
            self.threshold.to_bits(),
            self.slope.to_bits(),
            self.cool_down.to_bits(),
            self.frac_bits as i64 as u64,
        ]
    }

    fn from_raw(raw: [u64; 6]) -> Params {
        Params {
            stable: f64::from_bits(raw[0]),
            max: f64::from_bits(raw[1]),
            threshold: f64::from_bits(raw[2]),
            slope: f64::from_bits(raw[3]),
            cool_down: f64::from_bits(raw[4]),
            // Only ever written from an `i32` in -961..=1000.
            frac_bits: raw[5] as i64 as i32,
        }
    }

    /// `f64` permits → fixed point, rounded to nearest (ties up); NaN and negatives → 0.
    fn units_of(&self, permits: f64) -> u128 {
        let v = permits * pow2(self.frac_bits);
        if v.is_nan() || v <= 0.0 {
            return 0;
        }
        // `v` is below 2^74 (the field holds `max`); at or above 2^52 it is already whole.
        let whole = v as u128;
        let up = u128::from(v - whole as f64 >= 0.5);
        whole.saturating_add(up).min(MAX_FIXED)
    }

    /// Fixed point → `f64`, exactly (see the module docs).
    fn permits_of(&self, units: u128) -> f64 {
        units as f64 * pow2(-self.frac_bits)
    }

    /// Guava's `storedPermitsToWaitTime`, in the same operations.
    /// (Warming up; bursty stored permits cost nothing.)
    fn stored_permits_to_wait_time(&self, stored: f64, mut to_take: f64) -> i64 {
        let above = stored - self.threshold;
        let mut micros: i64 = 0;
        if above > 0.0 {
            let take = java_min(above, to_take);
            let length = self.permits_to_time(above) + self.permits_to_time(above - take);
            micros = (take * length / 2.0) as i64;
            to_take -= take;
        }
        micros.saturating_add((self.stable * to_take) as i64)
    }

    fn permits_to_time(&self, permits: f64) -> f64 {
        self.stable + permits * self.slope
    }
}

/// Java's `Math.min` for doubles (NaN-propagating).
fn java_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a <= b {
        a
    } else {
        b
    }
}

/// The decoded state: Guava's `nextFreeTicketMicros` and `storedPermits`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct State {
    next: u64,
    stored: f64,
}

impl State {
    /// Guava's `resync`: idle time since `next` becomes stored permits.
    fn resync(&mut self, now: u64, p: &Params) {
        if now > self.next {
            if p.max > 0.0 {
                let new_permits = (now - self.next) as f64 / p.cool_down;
                let sum = self.stored + new_permits;
                // Java's `min(maxPermits, sum)`; NaN cannot arise once `max > 0`.
                self.stored = if sum < p.max { sum } else { p.max };
            } else {
                // Guava computes min(0, x / (0/0)) = NaN here; nothing can be stored.
                self.stored = 0.0;
            }
            self.next = now;
        }
    }

    /// Guava's `reserveEarliestAvailable` followed by `max(moment − now, 0)`: takes `permits`
    /// and returns the microseconds the caller must wait.
    fn reserve(&mut self, permits: f64, now: u64, p: &Params, mode: Mode) -> u64 {
        self.resync(now, p);
        let moment = self.next;
        let from_stored = java_min(permits, self.stored);
        let fresh = permits - from_stored;
        let stored_cost = match mode {
            Mode::Bursty { .. } => 0,
            Mode::WarmingUp { .. } => p.stored_permits_to_wait_time(self.stored, from_stored),
        };
        let wait = stored_cost.saturating_add((fresh * p.stable) as i64).max(0);
        self.next = self.next.saturating_add(wait as u64).min(MAX_MICROS);
        self.stored -= from_stored;
        moment.saturating_sub(now)
    }
}

/// Guava's `SmoothRateLimiter` to the microsecond, lock-free: `SmoothBursty`
/// ([`Smooth::bursty_with_clock`]) or `SmoothWarmingUp` ([`Smooth::warming_up_with_clock`]).
///
/// A request never waits for its own permits: it waits until the previous requests are paid
/// for, then pushes the next free time forward by the cost of its permits. Idle time is stored
/// as permits (up to a maximum) that later requests spend for free (bursty) or at a cost that
/// falls from `cold_factor ×` the stable interval to the stable interval as the limiter warms
/// up.
///
/// Guava's warm-up example (2 permits/s, 4 s warm-up, cold factor 3):
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Smooth};
/// let clock = ManualClock::new();
/// let limiter = Smooth::warming_up_with_clock(2.0, Duration::from_secs(4), 3.0, clock).unwrap();
/// let waits: Vec<u128> = (0..8).map(|_| limiter.acquire(1).as_millis()).collect();
/// assert_eq!(waits, [0, 1375, 1125, 875, 625, 500, 500, 500]);
/// ```
///
/// # The model (Guava's)
///
/// The limiter remembers the time the **next** request may go (`next`, in microseconds since
/// the limiter was created) and a number of **stored permits** earned while it was idle. A
/// request is served from the stored permits first, then from fresh ones; it never waits for
/// its own permits, it only waits until `next`, and pushes `next` forward by what its permits
/// cost ("pay later": the next caller pays).
///
/// * fresh permits cost the stable interval `1 s / rate` each;
/// * stored permits cost nothing (bursty), or the integral of the warm-up trapezoid over the
///   permits taken (warming up): stable interval below `threshold = 0.5·warmup / stable`,
///   growing linearly to `cold = cold_factor · stable` at
///   `max = threshold + 2·warmup / (stable + cold)`;
/// * idle time converts to stored permits at one per "cool-down interval" (the stable interval
///   when bursty, `warmup / max` when warming up), up to `max` (`max_burst × rate` when bursty).
///
/// # Arithmetic and rounding
///
/// Every decision is computed exactly as Guava computes it: in `f64`, the same operations in the
/// same order, with Java's `(long)` casts (truncation toward zero, saturating, NaN → 0) where
/// Guava has them, and the clock read as whole microseconds since creation (Guava's stopwatch).
/// Only the *stored* state is integral:
///
/// * `next` is a whole number of microseconds, as Guava's `nextFreeTicketMicros` is;
/// * the stored permits are a 74-bit fixed-point number whose unit, `2^-F` permit, follows the
///   rate: the largest `F` with `max · 2^F < 2^74`. Every `f64` from `max / 2^21` up to `max`
///   is then a whole number of units and is stored **exactly**; a smaller value is rounded to
///   the nearest unit, an error of at most `max · 2^-74` permit.
///
/// What that means for compatibility:
///
/// * **Bit-exact in practice when the maximum burst or the warm-up is at most 2^21 µs
///   (2.097 s)**, which includes Guava's default (`create(rate)` has a 1 s burst). Idle time
///   earns `gap / cool-down = max · gap / duration` permits, so with `duration ≤ 2^21 µs` even a
///   1 µs gap earns at least `max / 2^21`; sums and leftovers of such values stay on the grid.
///   The one exception in theory is `set_rate` rescaling a leftover of rounding noise (a few
///   `f64` ulps of a permit). The tests compare 12 million random operations with a plain-`f64`
///   transcription of Guava (itself checked against a Java transcription run on the JVM): no
///   difference.
/// * Longer bursts or warm-ups: an idle gap shorter than `duration / 2^21` earns a value finer
///   than the unit; its rounding can move a later wait by **one microsecond**. Measured: 16 such
///   cases in 12 million random operations (a fifth of the limiters with 3.5 s – 123 s
///   durations), never more than 1 µs.
/// * `F` is capped at 1022, so a maximum below about 2^-948 permit (a rate below ~10^-280 per
///   second) stores nothing at all.
///
/// Storing Guava's `f64` bit pattern instead would be bit-exact everywhere; the fixed point keeps
/// the state an exact integer quantity, as the rest of the crate does.
///
/// # Deviations from Guava (beyond the rounding above; all at inputs Guava rejects or mishandles)
///
/// * A rate that is zero, negative, NaN **or infinite** is a [`ConfigError::InvalidRate`]
///   (Guava accepts `+∞` as "no limit"); so is a rate whose maximum stored permits
///   (`max_burst × rate`, or the warm-up trapezoid) overflow `f64`.
/// * `permits == 0` is admitted at once and changes nothing (Guava throws).
/// * A warm-up below one microsecond makes `max = 0`: Guava then divides 0 by 0 and, after the
///   first idle moment, stops limiting (its stored permits become NaN); here the limiter simply
///   stores nothing and serves every permit at the stable rate.
/// * The next free time saturates at 2^53 − 1 µs (285 years after creation) instead of
///   `i64::MAX` µs, and the clock is read as if it stopped there; sums of waits saturate where
///   Java's `long` addition would wrap.
/// * `permits` is a `u64`, converted to `f64` (exact up to 2^53); Guava takes an `int`.
///
/// The state is one `AtomicU128` (`portable-atomic`'s: lock-free on x86_64 with `cmpxchg16b`,
/// AArch64 and other targets with a native 128-bit CAS; a short lock elsewhere).
pub struct Smooth<C = DefaultClock> {
    /// The whole limiter state, updated by compare-and-swap.
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 127..75 | Guava's `nextFreeTicketMicros`: when the next request may go | µs since the limiter was created (`clock.now()` at creation) | 0 ..= 2^53 − 1 (285 years; saturates there); starts at 0 |
    /// | 74..1 | Guava's `storedPermits`, fixed point | `2^-F` permit, `F` from the active parameter slot | 0 ..= `max · 2^F` < 2^74; starts at 0 (bursty) or `max` (warming up: cold) |
    /// | 0 | parameter epoch parity: which of `slots` holds the rate for this state | — | 0, 1 |
    ///
    /// Why 128 bits: the next free time needs about 53 bits to cover a long-lived server's
    /// lifetime in microseconds, and the stored permits need more than 52 bits (Guava's `f64`
    /// mantissa) plus headroom to reproduce Guava's decisions; no 64-bit split holds both.
    /// Under loom, which has no 128-bit atomic, the same word lives behind a loom mutex
    /// (`src/sync.rs`).
    ///
    /// Orderings: loads and failed CASes are `Acquire`, pairing with the `AcqRel` CAS in
    /// [`Smooth::set_rate`] that flips the parity, so a thread that sees a parity also sees the
    /// parameter slot written before it. A successful decision CAS is `Relaxed`: it publishes
    /// nothing but the word itself.
    state: AtomicU128,
    /// Two parameter slots (`Params::to_raw`); the word's parity selects the active one.
    /// `set_rate` writes the idle slot, then converts the state and flips the parity in one CAS
    /// (see `src/slots.rs`).
    slots: EpochSlots,
    mode: Mode,
    /// `clock.now()` when the limiter was created: Guava's stopwatch starts there too.
    origin: u64,
    clock: C,
}

impl<C: fmt::Debug> fmt::Debug for Smooth<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.state.load(Ordering::Acquire);
        f.debug_struct("Smooth")
            .field("mode", &self.mode)
            .field("next_free_micros", &(w >> NEXT_SHIFT))
            .field("stored_units", &((w & STORED_MASK) >> 1))
            .field("epoch", &(w & 1))
            .field("clock", &self.clock)
            .finish()
    }
}

fn check_rate(rate: f64) -> Result<(), ConfigError> {
    if rate > 0.0 && rate.is_finite() {
        Ok(())
    } else {
        Err(ConfigError::InvalidRate)
    }
}

impl Smooth<DefaultClock> {
    /// Guava's `RateLimiter.create(permitsPerSecond)`: bursty, at most one second of permits
    /// stored, on the [`DefaultClock`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let limiter = tollgate::Smooth::bursty(100.0).unwrap();
    /// assert!(limiter.try_acquire(1, Duration::ZERO));
    /// assert!(tollgate::Smooth::bursty(0.0).is_err());
    /// # let _ = tollgate::ManualClock::new();
    /// ```
    pub fn bursty(permits_per_second: f64) -> Result<Smooth<DefaultClock>, ConfigError> {
        Smooth::bursty_with_clock(
            permits_per_second,
            Duration::from_secs(1),
            DefaultClock::default(),
        )
    }

    /// Guava's `RateLimiter.create(permitsPerSecond, warmupPeriod)`: warming up, cold factor 3,
    /// on the [`DefaultClock`]. It starts cold.
    ///
    /// ```
    /// use std::time::Duration;
    /// let limiter = tollgate::Smooth::warming_up(100.0, Duration::from_secs(1)).unwrap();
    /// assert!(limiter.try_acquire(1, Duration::ZERO));
    /// assert!(tollgate::Smooth::warming_up(f64::NAN, Duration::from_secs(1)).is_err());
    /// # let _ = tollgate::ManualClock::new();
    /// ```
    pub fn warming_up(
        permits_per_second: f64,
        warmup: Duration,
    ) -> Result<Smooth<DefaultClock>, ConfigError> {
        Smooth::warming_up_with_clock(permits_per_second, warmup, 3.0, DefaultClock::default())
    }
}

impl<C: Clock> Smooth<C> {
    /// Guava's `SmoothBursty` on `clock`: up to `max_burst × permits_per_second` permits are
    /// stored while idle and then served without waiting. It starts empty.
    ///
    /// Errors: [`ConfigError::InvalidRate`] for a rate that is not finite and positive;
    /// [`ConfigError::InvalidDuration`] when `max_burst × rate` overflows `f64`. A zero
    /// `max_burst` is allowed (nothing is ever stored).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ConfigError, ManualClock, Smooth};
    /// let clock = ManualClock::new();
    /// let limiter = Smooth::bursty_with_clock(5.0, Duration::from_secs(1), clock.clone()).unwrap();
    /// clock.advance(Duration::from_secs(2)); // earns at most 1 s worth: 5 permits
    /// assert_eq!(limiter.acquire(1), Duration::ZERO);
    /// assert_eq!(limiter.acquire(4), Duration::ZERO);
    /// assert_eq!(limiter.acquire(1), Duration::ZERO); // "pay later": free, pushes the next caller
    /// assert_eq!(limiter.acquire(1), Duration::from_millis(200));
    /// assert_eq!(
    ///     Smooth::bursty_with_clock(-1.0, Duration::from_secs(1), ManualClock::new()).unwrap_err(),
    ///     ConfigError::InvalidRate
    /// );
    /// ```
    pub fn bursty_with_clock(
        permits_per_second: f64,
        max_burst: Duration,
        clock: C,
    ) -> Result<Smooth<C>, ConfigError> {
        check_rate(permits_per_second)?;
        let mode = Mode::Bursty {
            max_burst_seconds: max_burst.as_secs_f64(),
        };
        let params = Params::new(mode, permits_per_second).ok_or(ConfigError::InvalidDuration)?;
        // Guava's first `doSetRate` (old max 0): bursty starts empty.
        Ok(Smooth::from_parts(mode, params, 0.0, clock))
    }

    /// Guava's `SmoothWarmingUp` on `clock`: it starts cold, and takes `warmup` of saturated
    /// demand to reach `permits_per_second`; the first stored permits cost `cold_factor ×` the
    /// stable interval. Idle for `warmup`, it is cold again.
    ///
    /// Errors: [`ConfigError::InvalidRate`] for a rate that is not finite and positive;
    /// [`ConfigError::InvalidFactor`] for a cold factor below 1, NaN or infinite;
    /// [`ConfigError::InvalidDuration`] for a warm-up above `i64::MAX` µs, or one whose
    /// trapezoid overflows `f64` at this rate. The warm-up is truncated to whole microseconds
    /// (as Guava's `toMicros` does); a zero warm-up stores nothing (see the module docs).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ConfigError, ManualClock, Smooth};
    /// let limiter =
    ///     Smooth::warming_up_with_clock(5.0, Duration::from_secs(4), 10.0, ManualClock::new()).unwrap();
    /// assert_eq!(limiter.acquire(1), Duration::ZERO);
    /// assert_eq!(limiter.acquire(1), Duration::from_micros(1_752_500)); // cold: 1.7525 s
    /// let bad = Smooth::warming_up_with_clock(5.0, Duration::from_secs(4), 0.5, ManualClock::new());
    /// assert_eq!(bad.unwrap_err(), ConfigError::InvalidFactor);
    /// ```
    pub fn warming_up_with_clock(
        permits_per_second: f64,
        warmup: Duration,
        cold_factor: f64,
        clock: C,
    ) -> Result<Smooth<C>, ConfigError> {
        check_rate(permits_per_second)?;
        if !(cold_factor >= 1.0 && cold_factor.is_finite()) {
            return Err(ConfigError::InvalidFactor);
        }
        let warmup_micros =
            i64::try_from(warmup.as_micros()).map_err(|_| ConfigError::InvalidDuration)? as f64;
        let mode = Mode::WarmingUp {
            warmup_micros,
            cold_factor,
        };
        let params = Params::new(mode, permits_per_second).ok_or(ConfigError::InvalidDuration)?;
        // Guava's first `doSetRate` (old max 0): warming up starts cold, at `max`.
        Ok(Smooth::from_parts(mode, params, params.max, clock))
    }

    fn from_parts(mode: Mode, params: Params, stored: f64, clock: C) -> Smooth<C> {
        let word = params.units_of(stored) << 1;
        let raw = params.to_raw();
        Smooth {
            state: AtomicU128::new(word),
            slots: EpochSlots::new(raw),
            mode,
            origin: clock.now(),
            clock,
        }
    }

    /// Takes `permits`, sleeping (through the clock) until the previous requests are paid for;
    /// returns the time it slept, in whole microseconds (Guava's `acquire`, which returns it in
    /// seconds). Its own permits push the next caller back instead. `permits == 0` returns zero
    /// at once and changes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, Smooth};
    /// let clock = ManualClock::new();
    /// let limiter = Smooth::bursty_with_clock(1.0, Duration::from_secs(1), clock.clone()).unwrap();
    /// assert_eq!(limiter.acquire(3), Duration::ZERO);
    /// assert_eq!(limiter.acquire(1), Duration::from_secs(3)); // pays for the 3 permits
    /// assert_eq!(clock.now(), 3_000_000_000); // a ManualClock advances itself when "sleeping"
    /// ```
    pub fn acquire(&self, permits: u64) -> Duration {
        if permits == 0 {
            return Duration::ZERO;
        }
        let now = self.now_micros();
        let wait = self.update(|mut s, p| {
            let wait = s.reserve(permits as f64, now, p, self.mode);
            (Some(s), wait)
        });
        self.pay(wait)
    }

    /// Takes `permits` if the wait for them is at most `timeout`, sleeping that wait through the
    /// clock; otherwise returns `false` at once and changes nothing (Guava's `tryAcquire`: it
    /// refuses when the next free time is more than `timeout` after now). The timeout is
    /// truncated to whole microseconds. `permits == 0` returns `true` and changes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Smooth};
    /// let clock = ManualClock::new();
    /// let limiter = Smooth::bursty_with_clock(5.0, Duration::from_secs(1), clock.clone()).unwrap();
    /// assert!(limiter.try_acquire(1, Duration::ZERO));
    /// assert!(!limiter.try_acquire(1, Duration::from_millis(100))); // next free in 200 ms
    /// assert!(limiter.try_acquire(1, Duration::from_millis(200))); // sleeps 200 ms
    /// ```
    pub fn try_acquire(&self, permits: u64, timeout: Duration) -> bool {
        if permits == 0 {
            return true;
        }
        let timeout = u64::try_from(timeout.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_MICROS);
        let now = self.now_micros();
        let wait = self.update(|mut s, p| {
            if s.next.saturating_sub(timeout) > now {
                return (None, None);
            }
            let wait = s.reserve(permits as f64, now, p, self.mode);
            (Some(s), Some(wait))
        });
        match wait {
            Some(wait) => {
                self.pay(wait);
                true
            }
            None => false,
        }
    }

    /// Changes the stable rate, as Guava's `setRate` does: the state is first brought up to
    /// date at the old rate, then the stored permits are rescaled in proportion to the new
    /// maximum (`stored × new_max / old_max`). The time already reserved is kept, so the next
    /// caller still pays the previous request's cost at the old rate. The warm-up period, cold
    /// factor and maximum burst duration stay as configured.
    ///
    /// A concurrent caller sees the old rate with the old state or the new rate with the new
    /// state, never a mix: the derived parameters are written to the idle slot first, then one
    /// CAS converts the state and flips the word's epoch bit, and a decision's CAS only succeeds
    /// on the exact word (epoch bit included) it decided on. Decisions never wait for
    /// `set_rate`; concurrent `set_rate` calls take turns. [`ConfigError::InvalidRate`] (nothing changes) for a rate that is not
    /// finite and positive, or whose maximum stored permits overflow `f64`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Smooth};
    /// let limiter = Smooth::bursty_with_clock(1.0, Duration::from_secs(1), ManualClock::new()).unwrap();
    /// assert_eq!(limiter.acquire(1), Duration::ZERO);
    /// limiter.set_rate(2.0).unwrap();
    /// assert_eq!(limiter.acquire(1), Duration::from_secs(1)); // the old debt, at the old rate
    /// assert_eq!(limiter.acquire(1), Duration::from_millis(500));
    /// assert!(limiter.set_rate(0.0).is_err());
    /// ```
    pub fn set_rate(&self, permits_per_second: f64) -> Result<(), ConfigError> {
        check_rate(permits_per_second)?;
        let new = Params::new(self.mode, permits_per_second).ok_or(ConfigError::InvalidRate)?;
        // Read before taking the writer flag: see `EpochSlots::lock`.
        let writer = self.slots.lock(self.clock.now());
        let mut cur = self.state.load(Ordering::Acquire);
        let old = Params::from_raw(writer.get((cur & 1) as u64));
        let idle = ((cur & 1) ^ 1) as u64;
        writer.set(idle, new.to_raw());
        let now = self.micros_at(writer.now());
        loop {
            let mut s = decode(cur, &old);
            s.resync(now, &old);
            s.stored = match self.mode {
                // Guava's special cases for an old maximum of +inf cannot arise: rates and
                // maxima are finite here.
                Mode::Bursty { .. } if old.max == 0.0 => 0.0,
                Mode::WarmingUp { .. } if old.max == 0.0 => new.max,
                _ => s.stored * new.max / old.max,
            };
            match self.state.compare_exchange_weak(
                cur,
                encode(s, &new, u128::from(idle)),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        Ok(())
    }

    /// The stable rate in permits per second, as Guava's `getRate` computes it
    /// (`1e6 / stableIntervalMicros`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Smooth};
    /// let limiter = Smooth::bursty_with_clock(5.0, Duration::from_secs(1), ManualClock::new()).unwrap();
    /// assert_eq!(limiter.rate(), 5.0);
    /// limiter.set_rate(10.0).unwrap();
    /// assert_eq!(limiter.rate(), 10.0);
    /// ```
    pub fn rate(&self) -> f64 {
        self.update(|_, p| (None, MICROS_PER_SECOND / p.stable))
    }

    /// The limiter's clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, Smooth};
    /// let limiter = Smooth::bursty_with_clock(1.0, Duration::from_secs(1), ManualClock::new()).unwrap();
    /// assert_eq!(limiter.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Guava's `stopwatch.readMicros()`: whole microseconds since the limiter was created. A
    /// clock reading before the origin counts as the origin.
    #[inline]
    fn now_micros(&self) -> u64 {
        self.micros_at(self.clock.now())
    }

    /// A clock reading in microseconds since the limiter's origin.
    fn micros_at(&self, now: u64) -> u64 {
        (now.saturating_sub(self.origin) / 1000).min(MAX_MICROS)
    }

    fn pay(&self, wait_micros: u64) -> Duration {
        let wait = Duration::from_micros(wait_micros);
        if wait_micros > 0 {
            self.clock.sleep(wait);
        }
        wait
    }

    /// The parameters selected by word `w`, or `None` if their slot is being rewritten (the
    /// caller reloads the word).
    #[inline]
    fn params_of(&self, w: u128) -> Option<Params> {
        self.slots.read((w & 1) as u64).map(Params::from_raw)
    }

    /// The CAS loop. `f(state, params)` returns the state to write (`None`: write nothing) and
    /// the result; it may run several times, so it must not have side effects.
    #[inline]
    fn update<R>(&self, mut f: impl FnMut(State, &Params) -> (Option<State>, R)) -> R {
        let mut w = self.state.load(Ordering::Acquire);
        loop {
            let Some(params) = self.params_of(w) else {
                spin_loop();
                w = self.state.load(Ordering::Acquire);
                continue;
            };
            let (next, result) = f(decode(w, &params), &params);
            let Some(next) = next else { return result };
            let new = encode(next, &params, w & 1);
            if new == w {
                return result;
            }
            match self
                .state
                .compare_exchange_weak(w, new, Ordering::Relaxed, Ordering::Acquire)
            {
                Ok(_) => return result,
                Err(actual) => w = actual,
            }
        }
    }
}

/// The next free time sits above the stored permits and the epoch bit.
const NEXT_SHIFT: u32 = FIXED_BITS as u32 + 1;
/// The stored-permits field, in place (bits 74..1).
const STORED_MASK: u128 = MAX_FIXED << 1;

fn decode(w: u128, p: &Params) -> State {
    State {
        next: (w >> NEXT_SHIFT) as u64,
        stored: p.permits_of((w & STORED_MASK) >> 1),
    }
}

fn encode(s: State, p: &Params, epoch: u128) -> u128 {
    (u128::from(s.next.min(MAX_MICROS)) << NEXT_SHIFT) | (p.units_of(s.stored) << 1) | epoch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_round_trips_every_f64_near_max() {
        for max in [1.0, 5.0, 7.25, 1e-9, 3e12, 1.7e300, 1e-280] {
            let p = Params {
                stable: 1.0,
                max,
                threshold: 0.0,
                slope: 0.0,
                cool_down: 1.0,
                frac_bits: frac_bits_for(max),
            };
            assert_eq!(p.permits_of(p.units_of(max)), max, "max {max:e}");
            assert!(p.units_of(max) <= MAX_FIXED);
            let mut x = max;
            for _ in 0..40 {
                x *= 0.7731;
                if x < max / 2097152.0 {
                    break;
                }
                assert_eq!(p.permits_of(p.units_of(x)), x, "max {max:e} x {x:e}");
            }
            let tiny = max / 1e6;
            let err = (p.permits_of(p.units_of(tiny)) - tiny).abs();
            assert!(err <= max * pow2(-74), "max {max:e} err {err:e}");
        }
    }

    #[test]
    fn pow2_is_exact() {
        assert_eq!(pow2(0), 1.0);
        assert_eq!(pow2(10), 1024.0);
        assert_eq!(pow2(-1), 0.5);
        assert_eq!(pow2(1000) * pow2(-1000), 1.0);
    }
}
