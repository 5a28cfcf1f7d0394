//! [`Smooth`]: Guava's `SmoothRateLimiter` to the microsecond, its state one 128-bit word.
//! Split as the bucket is: [`guava`] the pure port, [`word`] the word codec, here the atomics.

mod fixed;
mod guava;
mod limiter;
#[cfg(feature = "persist")]
mod persist;
mod word;

use self::fixed::MAX_MICROS;
use self::guava::{check_rate, Mode, Params, State, MICROS_PER_SECOND};
use self::word::{decode, encode, NEXT_SHIFT, STORED_MASK};
use crate::clock::{Clock, DefaultClock, Timer};
use crate::error::ConfigError;
use crate::slots::EpochSlots;
use crate::sync::{spin_loop, AtomicU128, AtomicU64, Ordering};
use core::fmt;
use core::time::Duration;

/// `Smooth::retired_next` before the first `set_rate`: no word to stay ahead of.
const NO_ERA: u64 = u64::MAX;

/// Guava's `SmoothRateLimiter` to the microsecond, lock-free: `SmoothBursty`
/// ([`Smooth::bursty_with_clock`]) or `SmoothWarmingUp` ([`Smooth::warming_up_with_clock`]).
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
/// Every decision is Guava's `f64` arithmetic in Guava's order; only the stored state is
/// integral (whole µs; stored permits in a 74-bit fixed point), one `portable-atomic`
/// `AtomicU128` (a short lock where no 128-bit CAS exists). The model, rounding and deviations
/// from Guava: [docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#smooth-and-guava).
#[repr(C)]
pub struct Smooth<C = DefaultClock> {
    clock: C,
    /// `clock.now()` when the limiter was created: Guava's stopwatch starts there too.
    origin: u64,
    mode: Mode,
    /// Two parameter slots; the word's parity selects the active one (`src/slots.rs`).
    slots: EpochSlots<6>,
    /// The next free time of the word the last `set_rate` replaced, which the next exceeds so
    /// that no word comes back. Accessed only under the writer flag.
    retired_next: AtomicU64,
    /// The whole limiter state, last, off the line of every field decisions read.
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 127..75 | Guava's `nextFreeTicketMicros`: when the next request may go | µs since the limiter was created (`clock.now()` at creation) | 0 ..= 2^53 − 1 (285 years; saturates there); starts at 0 |
    /// | 74..1 | Guava's `storedPermits`, fixed point | `2^-F` permit, `F` from the active parameter slot | 0 ..= `max · 2^F` < 2^74; starts at 0 (bursty) or `max` (warming up: cold) |
    /// | 0 | parameter epoch parity: which of `slots` holds the rate for this state | — | 0, 1 |
    ///
    /// Orderings: loads and failed CASes are `Acquire`, pairing with the `AcqRel` parity flip
    /// in [`Smooth::set_rate`], so a parity seen implies its slot seen. A successful decision
    /// CAS is `Relaxed`: it publishes only the word.
    state: AtomicU128,
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

/// Only with feature `std`, as [`Bucket::new`](crate::Bucket::new).
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
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
    /// Guava's `SmoothBursty` on `clock`, starting empty: up to `max_burst × permits_per_second`
    /// permits (any `max_burst`, zero included) are stored while idle and served at once.
    /// Errors: [`ConfigError::InvalidRate`] for a rate that is not finite and positive,
    /// [`ConfigError::RateTooHigh`] above 1,000,000 permits/s.
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
        Ok(Smooth::from_parts(mode, params, clock))
    }

    /// Guava's `SmoothWarmingUp` on `clock`, starting cold: `warmup` (truncated to whole µs) of
    /// saturated demand reaches `permits_per_second`; the coldest permits cost `cold_factor ×`
    /// the stable interval. Errors: as [`bursty_with_clock`](Smooth::bursty_with_clock), and
    /// [`ConfigError::InvalidFactor`] for a cold factor below 1, NaN or infinite,
    /// [`ConfigError::InvalidDuration`] for a warm-up above `i64::MAX` µs.
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
        Ok(Smooth::from_parts(mode, params, clock))
    }

    fn from_parts(mode: Mode, params: Params, clock: C) -> Smooth<C> {
        let word = params.units_of(mode.strictest(&params)) << 1;
        Smooth {
            state: AtomicU128::new(word),
            slots: EpochSlots::new(params.to_raw()),
            retired_next: AtomicU64::new(NO_ERA),
            mode,
            origin: clock.now(),
            clock,
        }
    }

    /// Reserves `permits` if the next free time is at most `timeout` µs away: the clock reading
    /// and the wait (zero for no permits), or `None` (nothing changed; `State::reserve`'s never).
    fn reserve_within(&self, permits: u64, timeout: u64) -> Option<(u64, u64)> {
        if permits == 0 {
            return Some((0, 0));
        }
        let reading = self.clock.now();
        let now = self.micros_at(reading);
        let wait = self.update(|mut s, p| {
            if s.next.saturating_sub(timeout) > now {
                return (None, None);
            }
            match s.reserve(permits as f64, now, p, self.mode) {
                Some(wait) => (Some(s), Some(wait)),
                None => (None, None),
            }
        });
        Some((reading, wait?))
    }

    /// Changes the stable rate as Guava's `setRate` does: the state is brought up to date at the
    /// old rate, then the stored permits are scaled by `new_max / old_max`; the time already
    /// reserved is kept. Errors (nothing changes): as [`bursty_with_clock`](Smooth::bursty_with_clock).
    ///
    /// A concurrent caller sees the old rate with the old state or the new with the new: a CAS
    /// needs the exact word decided on, and no word comes back, since each `set_rate` moves the
    /// next free time past every word two reconfigurations back (by 1 µs where nothing else
    /// did; `docs/guarantees.md`, "Reconfiguration"). Decisions never wait; calls take turns.
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
        let floor = self.retired_next.load(Ordering::Relaxed);
        let mut cur = self.state.load(Ordering::Acquire);
        let old = Params::from_raw(writer.get((cur & 1) as u64));
        let idle = ((cur & 1) ^ 1) as u64;
        writer.set(idle, new.to_raw());
        let now = self.micros_at(writer.now());
        loop {
            let mut s = decode(cur, &old);
            s.resync(now, &old);
            s.stored = self.mode.rescale(s.stored, &old, &new);
            // Past every word two eras back (their next free times are at most `floor`).
            if floor != NO_ERA && s.next <= floor {
                s.next = (floor + 1).min(MAX_MICROS);
            }
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
        self.retired_next
            .store((cur >> NEXT_SHIFT) as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The stable rate in permits per second, as Guava's `getRate` (`1e6 / stableIntervalMicros`).
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

    /// Holds nothing now (not in Guava), for a process that cannot restore its state: the next
    /// permit is free in one stable interval; none is stored (bursty) or all are cold.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Smooth};
    /// let limiter = Smooth::bursty_with_clock(2.0, Duration::from_secs(1), ManualClock::new()).unwrap();
    /// limiter.drain();
    /// assert!(!limiter.try_acquire(1, Duration::from_millis(499)));
    /// assert!(limiter.try_acquire(1, Duration::from_millis(500)));
    /// ```
    pub fn drain(&self) {
        let now = self.micros_at(self.clock.now());
        self.update(|mut s, p| {
            s.resync(now, p);
            s.stored = self.mode.strictest(p);
            let next = now
                .saturating_add(guava::ceil_u64(p.stable))
                .min(MAX_MICROS);
            s.next = s.next.max(next);
            (Some(s), ())
        });
    }

    /// Guava's `stopwatch.readMicros()` at clock reading `now`: whole microseconds since the
    /// limiter was created (a reading before counts as the origin).
    fn micros_at(&self, now: u64) -> u64 {
        (now.saturating_sub(self.origin) / 1000).min(MAX_MICROS)
    }

    /// The CAS loop: `f(state, params)` returns the state to write (`None`: nothing) and the
    /// result, and may run several times. A result that writes nothing stands only if the word
    /// loaded again is still `w` (two reconfigurations may have rewritten `w`'s slot since).
    #[inline]
    fn update<R>(&self, mut f: impl FnMut(State, &Params) -> (Option<State>, R)) -> R {
        let mut w = self.state.load(Ordering::Acquire);
        loop {
            let Some((raw, _)) = self.slots.read_versioned((w & 1) as u64) else {
                spin_loop();
                w = self.state.load(Ordering::Acquire);
                continue;
            };
            let params = Params::from_raw(raw);
            let (next, result) = f(decode(w, &params), &params);
            let new = next.map_or(w, |next| encode(next, &params, w & 1));
            if new == w {
                let again = self.state.load(Ordering::Acquire);
                if again == w {
                    return result;
                }
                w = again;
                continue;
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

impl<C: Timer> Smooth<C> {
    /// Takes `permits`, sleeping on the clock until the previous requests are paid for; returns
    /// the time slept (Guava's `acquire`, in seconds there). Its own permits push the next caller
    /// back instead. `permits == 0` returns zero at once and changes nothing.
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
        match self.reserve_within(permits, u64::MAX) {
            Some((reading, wait)) => self.pay(reading, wait),
            None => self.pay(0, u64::MAX),
        }
    }

    /// Guava's `tryAcquire`: takes `permits` and sleeps the wait if the next free time is at
    /// most `timeout` (truncated to whole µs) away, else returns `false` at once and changes
    /// nothing. `permits == 0` returns `true` and changes nothing.
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
        let timeout = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
        self.reserve_within(permits, timeout.min(MAX_MICROS))
            .map(|(reading, wait)| self.pay(reading, wait))
            .is_some()
    }

    /// Sleeps until the wait of a decision taken at `reading` ends and returns the wait: to an
    /// instant, so a caller stalled since the decision does not oversleep, and a step back of
    /// the clock since shortens it as `wait::sleep_until` says.
    fn pay(&self, reading: u64, wait_micros: u64) -> Duration {
        match wait_micros {
            0 => Duration::ZERO,
            // `u64::MAX`: never admitted (see `State::reserve`).
            u64::MAX => {
                self.clock.sleep(Duration::MAX);
                Duration::MAX
            }
            _ => {
                let due = reading.saturating_add(wait_micros.saturating_mul(1000));
                crate::wait::sleep_until(&self.clock, reading, due);
                Duration::from_micros(wait_micros)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use core::mem::offset_of;

    /// Every field a decision reads ends at least 64 bytes before the state word, so no cache
    /// line holds both, however the limiter is aligned.
    #[test]
    fn the_word_shares_no_line_with_what_decisions_read() {
        type S = Smooth<ManualClock>;
        let first_slot_end = offset_of!(S, slots) + 2 * 4 + 6 * 8;
        assert!(offset_of!(S, clock) < first_slot_end && offset_of!(S, mode) < first_slot_end);
        assert!(offset_of!(S, state) >= first_slot_end + 63);
    }
}
