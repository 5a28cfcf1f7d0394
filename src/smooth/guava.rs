//! Guava's `SmoothRateLimiter` arithmetic, transcribed: `f64` formulas in Guava's order with
//! Java's casts, pure functions of `(state, now, params)`.

use super::fixed::{frac_bits_for, MAX_MICROS};
use crate::error::ConfigError;

/// Guava's `SECONDS.toMicros(1L)`, as a double.
pub(super) const MICROS_PER_SECOND: f64 = 1_000_000.0;

/// The highest rate Guava limits: above it one permit costs `(long) stableIntervalMicros = 0`.
pub(super) const MAX_RATE: f64 = MICROS_PER_SECOND;

/// Which of Guava's two smooth limiters, and the constants `setRate` keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Mode {
    /// `SmoothBursty`: stored permits are free; up to `max_burst_seconds × rate` of them.
    Bursty { max_burst_seconds: f64 },
    /// `SmoothWarmingUp`: stored permits above the threshold cost the trapezoid's integral.
    WarmingUp {
        warmup_micros: f64,
        cold_factor: f64,
    },
}

impl Mode {
    /// The strictest stored permits: none when bursty (free permits), all when warming up (cold
    /// ones). How a limiter starts (Guava's first `doSetRate`) and drains.
    pub(super) fn strictest(self, p: &Params) -> f64 {
        match self {
            Mode::Bursty { .. } => 0.0,
            Mode::WarmingUp { .. } => p.max,
        }
    }

    /// Guava's `doSetRate` rescaling of `stored` (no `+∞` case: maxima are finite here).
    pub(super) fn rescale(self, stored: f64, old: &Params, new: &Params) -> f64 {
        if old.max == 0.0 {
            self.strictest(new)
        } else {
            stored * new.max / old.max
        }
    }
}

/// What `setRate` derives from the rate: Guava's fields, plus the fixed-point exponent of the
/// stored permits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Params {
    /// `stableIntervalMicros`.
    pub(super) stable: f64,
    /// `maxPermits`.
    pub(super) max: f64,
    /// `thresholdPermits` (0 when bursty).
    pub(super) threshold: f64,
    /// `slope` of the trapezoid (0 when bursty).
    pub(super) slope: f64,
    /// `coolDownIntervalMicros()`.
    pub(super) cool_down: f64,
    /// `F`: the stored permits are kept in units of `2^-F` permit.
    pub(super) frac_bits: i32,
}

/// A rate Guava's arithmetic can limit: finite, positive and at most [`MAX_RATE`].
pub(super) fn check_rate(rate: f64) -> Result<(), ConfigError> {
    if !(rate > 0.0 && rate.is_finite()) {
        Err(ConfigError::InvalidRate)
    } else if rate > MAX_RATE {
        Err(ConfigError::RateTooHigh)
    } else {
        Ok(())
    }
}

impl Params {
    /// Guava's `doSetRate` without the rescaling; `None` unless the permit counts are finite.
    pub(super) fn new(mode: Mode, rate: f64) -> Option<Params> {
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

    /// Guava's `storedPermitsToWaitTime` (warming up; bursty stored permits cost nothing).
    pub(super) fn stored_permits_to_wait_time(&self, stored: f64, mut to_take: f64) -> i64 {
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

/// `x` rounded up to a whole number, for a finite `x` at least 0 (`f64::ceil` needs `std`):
/// saturating at `u64::MAX`.
pub(super) fn ceil_u64(x: f64) -> u64 {
    let t = x as u64;
    if (t as f64) < x {
        t.saturating_add(1)
    } else {
        t
    }
}

/// The decoded state: Guava's `nextFreeTicketMicros` and `storedPermits`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct State {
    /// `nextFreeTicketMicros`, µs since the limiter was created.
    pub(super) next: u64,
    /// `storedPermits`.
    pub(super) stored: f64,
}

impl State {
    /// Guava's `resync`: idle time since `next` becomes stored permits.
    pub(super) fn resync(&mut self, now: u64, p: &Params) {
        if now > self.next {
            if p.max > 0.0 {
                let new_permits = (now - self.next) as f64 / p.cool_down;
                let sum = self.stored + new_permits;
                // Java's `min(maxPermits, sum)` (no NaN once `max > 0`).
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
    ///
    /// `None` (nothing changed) for a request that would push a next free time already at
    /// [`MAX_MICROS`], where the clock stops: never admitted (Guava's stops limiting). So no
    /// decision writes a word at the end, which `Smooth::set_rate` relies on.
    pub(super) fn reserve(
        &mut self,
        permits: f64,
        now: u64,
        p: &Params,
        mode: Mode,
    ) -> Option<u64> {
        let mut s = *self;
        s.resync(now, p);
        let moment = s.next;
        let from_stored = java_min(permits, s.stored);
        let fresh = permits - from_stored;
        let stored_cost = match mode {
            Mode::Bursty { .. } => 0,
            Mode::WarmingUp { .. } => p.stored_permits_to_wait_time(s.stored, from_stored),
        };
        let wait = stored_cost.saturating_add((fresh * p.stable) as i64).max(0);
        if wait > 0 && moment >= MAX_MICROS {
            return None;
        }
        s.next = s.next.saturating_add(wait as u64).min(MAX_MICROS);
        s.stored -= from_stored;
        *self = s;
        Some(moment.saturating_sub(now))
    }
}
