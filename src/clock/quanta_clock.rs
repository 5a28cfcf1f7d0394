use crate::clock::{Clock, Timer, WakeRegistration};
use core::task::Waker;
use core::time::Duration;
use std::sync::OnceLock;

/// The process-wide `quanta` clock, its origin (first raw reading) and nanosecond multiplier.
struct Source {
    clock: quanta::Clock,
    origin: u64,
    /// `Some(m)`: `quanta`'s `delta_as_nanos(origin, raw)` equals `(delta × m) >> 32` for every
    /// delta, verified at start (see [`cached_factor`]). `None`: use `quanta`'s own conversion.
    factor: Option<u64>,
}

static SOURCE: OnceLock<Source> = OnceLock::new();

fn source() -> &'static Source {
    SOURCE.get_or_init(|| {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        let factor = cached_factor(&clock);
        Source {
            clock,
            origin,
            factor,
        }
    })
}

/// `(delta × factor) >> 32`, truncated to 64 bits as `quanta` truncates.
#[inline]
fn scaled(delta: u64, factor: u64) -> u64 {
    ((u128::from(delta) * u128::from(factor)) >> 32) as u64
}

/// `quanta` converts a raw delta as `(delta × f) >> s` with a calibrated `f` and `s` it does not
/// expose, behind a `match` on its clock type. The multiplier `m = f × 2^(32 − s)` gives the
/// same result for every delta when it is an integer; read it back as the conversion of 2^32,
/// then verify it bit for bit against `quanta` for every power of two up to 2^63 (and its
/// predecessor): if `m/2^32` differed from `f/2^s` at all, by at least `2^−s`, the results for
/// 2^63 would differ by at least `2^(63−s) ≥ 1`. A mismatch (a shift above 32, or a source
/// this check does not understand) keeps `quanta`'s own conversion, which is monotone.
fn cached_factor(clock: &quanta::Clock) -> Option<u64> {
    let factor = clock.delta_as_nanos(0, 1 << 32);
    (0..64)
        .flat_map(|j| [1u64 << j, (1u64 << j) - 1, (1u64 << j) | 1])
        .all(|d| scaled(d, factor) == clock.delta_as_nanos(0, d))
        .then_some(factor)
}

/// `quanta`'s calibrated TSC clock (the OS monotonic clock where the TSC is not reliable). Its
/// origin is the first use of any `QuantaClock` in the process, so all of them agree. A reading
/// below the origin (TSCs out of step across cores) reads as 0.
///
/// ```
/// use tollgate::{Clock, QuantaClock};
/// let c = QuantaClock::new();
/// assert!(c.now() < 60_000_000_000_000);
/// ```
#[derive(Clone, Copy)]
#[cfg_attr(docsrs, doc(cfg(feature = "quanta")))]
pub struct QuantaClock {
    source: &'static Source,
}

impl core::fmt::Debug for QuantaClock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QuantaClock")
            .field("now", &self.now())
            .finish()
    }
}

impl Default for QuantaClock {
    fn default() -> QuantaClock {
        QuantaClock::new()
    }
}

impl QuantaClock {
    /// A handle to the process-wide clock (calibrated on first use, which can take a few ms).
    ///
    /// ```
    /// let _ = tollgate::QuantaClock::new();
    /// ```
    pub fn new() -> QuantaClock {
        QuantaClock { source: source() }
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> u64 {
        let s = self.source;
        let raw = s.clock.raw();
        match s.factor {
            // `quanta` reads a raw value at or below the origin as 0, and so does this.
            Some(factor) => scaled(raw.saturating_sub(s.origin), factor),
            None => s.clock.delta_as_nanos(s.origin, raw),
        }
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

impl Timer for QuantaClock {
    /// The shared timer thread, cancellable ([`WakeRegistration::timer`]).
    fn register_wake(&self, duration: Duration, waker: &Waker) -> WakeRegistration {
        WakeRegistration::timer(duration, waker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cached_factor_matches_quanta_bit_for_bit() {
        let s = source();
        let factor = s
            .factor
            .expect("this machine's quanta conversion is a multiply-shift");
        let mut rng = crate::test_support::Xorshift(0x9E37_79B9_7F4A_7C15);
        let random = (0..100_000).map(|_| rng.next()).map(|x| x >> (x % 64));
        for d in random.chain([0, 1, u64::MAX, u64::MAX - 1, 1 << 63]) {
            assert_eq!(scaled(d, factor), s.clock.delta_as_nanos(0, d), "delta {d}");
        }
    }

    #[test]
    fn readings_follow_quanta_and_never_go_backwards() {
        let c = QuantaClock::new();
        let s = c.source;
        let mut last = 0;
        for _ in 0..10_000 {
            let raw = s.clock.raw();
            let ours = match s.factor {
                Some(f) => scaled(raw.saturating_sub(s.origin), f),
                None => s.clock.delta_as_nanos(s.origin, raw),
            };
            assert_eq!(ours, s.clock.delta_as_nanos(s.origin, raw));
            let now = c.now();
            assert!(now >= last);
            last = now;
        }
    }
}
