//! [`Quota`]: a validated rate and burst, and the state word's fixed-point scale. All
//! validation lives here: a `Quota` that exists applies for [`HORIZON`] without overflow.

use crate::error::ConfigError;
mod scale;
mod scaled;

use core::fmt;
use core::time::Duration;
use scaled::gcd;
pub(crate) use scaled::{Scaled, SCALED_WORDS};

/// How long a quota is guaranteed to work: 100 Julian years since the clock's origin. Past it
/// the clock is read as stopped (nothing refills), and [`Quota::new`] refuses what overflows.
pub const HORIZON: Duration = Duration::from_secs(3_155_760_000);
pub(crate) const HORIZON_NS: u64 = 3_155_760_000_000_000_000;
/// The largest state value: the bucket keeps one bit of its word for the quota epoch.
pub(crate) const MAX_UNITS: u64 = (1 << 63) - 1;

/// A rate (`tokens` per `per`) and a capacity (`burst`), validated.
///
/// It fixes the state's unit: `1/scale` of a token, `scale` the largest divisor of the reduced
/// period that fits `rate × 100 years + burst` in 63 bits. An exact quota ([`Quota::is_exact`])
/// is the continuous token bucket at every nanosecond. Otherwise the units earned by a reading
/// need not be whole ([`Quota::units_per_ns`]: whole at multiples of `div` ns, the unit grid),
/// and a bucket capped off the grid is capped at the next whole unit: its state stays less than
/// one unit above the continuous bucket's with the same admissions, never below. So it refuses
/// only what the continuous bucket pays with less than a unit to spare, and admits it at most
/// `⌈div / mul⌉` ns later (the time one unit takes, rounded up: 1 ns for 7 per month, 3/s and
/// most rates). Visible at one reading: a full bucket admits its whole burst in one request, but
/// one token at a time off the grid `burst − 1`, the last token that much later. No whole-unit
/// state avoids it without admitting what the continuous bucket refuses
/// ([guarantees](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#inexact-quotas-the-one-rounding)).
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// let q = Quota::new(2, Duration::from_secs(1), 3).unwrap();
/// assert_eq!((q.tokens(), q.per(), q.burst()), (2, Duration::from_secs(1), 3));
/// assert_eq!(Quota::per_second(10).unwrap().burst(), 10);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    /// `gcd(tokens, per_ns)`: with the reduced rate `t / p` ([`Scaled::reduced`]),
    /// `tokens = g·t` and `per_ns = g·p`. Stored instead of both, so a slot is seven words.
    g: u64,
    scaled: Scaled,
}

/// Words of [`Quota::to_raw`]: a whole quota slot (the [`Scaled`] words, then `g`).
pub(crate) const QUOTA_WORDS: usize = SCALED_WORDS + 1;

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("tokens", &self.tokens())
            .field("per", &self.per())
            .field("burst", &self.scaled.burst)
            .field("exact", &self.is_exact())
            .finish()
    }
}

impl Quota {
    /// `tokens` per `per`, holding at most `burst` tokens.
    ///
    /// Errors: zero tokens, period or burst, a period over `u64::MAX` ns, or a rate and burst
    /// beyond [`HORIZON`] ([`ConfigError::BeyondRange`]; 1e9 tokens/s with a burst of 2^62 fits).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ConfigError, Quota};
    /// assert!(Quota::new(1_000_000_000, Duration::from_secs(1), 1 << 62).is_ok());
    /// assert_eq!(Quota::new(1, Duration::ZERO, 1), Err(ConfigError::ZeroPeriod));
    /// assert_eq!(Quota::new(u64::MAX, Duration::from_nanos(1), 1), Err(ConfigError::BeyondRange));
    /// ```
    pub fn new(tokens: u64, per: Duration, burst: u64) -> Result<Quota, ConfigError> {
        if tokens == 0 {
            return Err(ConfigError::ZeroTokens);
        }
        if per.is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        let per_ns = u64::try_from(per.as_nanos()).map_err(|_| ConfigError::PeriodTooLong)?;
        if burst == 0 {
            return Err(ConfigError::ZeroBurst);
        }
        let g = gcd(u128::from(tokens), u128::from(per_ns)) as u64;
        let scaled = scale::search(tokens / g, per_ns / g, burst)?;
        let quota = Quota { g, scaled };
        debug_assert_eq!((quota.tokens(), quota.per_ns()), (tokens, per_ns));
        Ok(quota)
    }

    /// `tokens` per second with a burst of `tokens`.
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(100).unwrap();
    /// assert_eq!((q.tokens(), q.burst()), (100, 100));
    /// ```
    pub fn per_second(tokens: u64) -> Result<Quota, ConfigError> {
        Quota::new(tokens, Duration::from_secs(1), tokens)
    }

    /// The same rate with another burst, in the unit [`Quota::new`] picks for them (a unit
    /// chosen by [`with_scale`](Quota::with_scale) is not kept: apply it after this).
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(100).unwrap().with_burst(5).unwrap();
    /// assert_eq!((q.tokens(), q.burst()), (100, 5));
    /// ```
    pub fn with_burst(self, burst: u64) -> Result<Quota, ConfigError> {
        Quota::new(self.tokens(), self.per(), burst)
    }

    /// The same rate and burst with states counted in units of exactly `1 / scale` token,
    /// instead of the unit [`Quota::new`] picks (the finest that fits): for stores whose clock
    /// is coarser than a nanosecond (e.g. `tollgate-redis`, whose server clock reads whole
    /// microseconds), where a coarser unit that divides the refill per tick evenly is exact at
    /// every tick. [`is_exact`](Quota::is_exact), [`scale`](Quota::scale) and
    /// [`units_per_ns`](Quota::units_per_ns) describe the quota at this scale; the quota is
    /// equal (`==`) to another only at the same scale.
    ///
    /// Errors: [`ConfigError::ZeroScale`] for 0, [`ConfigError::BeyondRange`] for a scale at which
    /// rate × [`HORIZON`] + burst leaves the 63-bit state (as [`Quota::new`] checks at its own
    /// scale) or the units earned per nanosecond leave 64 bits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ConfigError, Quota};
    /// // 7 per 30 days: 7 units per microsecond at 2.592e12 units per token.
    /// let month = Quota::new(7, Duration::from_secs(30 * 86_400), 7).unwrap();
    /// let q = month.with_scale(2_592_000_000_000).unwrap();
    /// assert_eq!((q.tokens(), q.per(), q.burst()), (7, month.per(), 7));
    /// assert_eq!((q.scale(), q.units_per_ns()), (2_592_000_000_000, (7, 1000)));
    /// assert_eq!(month.with_scale(0), Err(ConfigError::ZeroScale));
    /// assert_eq!(month.with_scale(u64::MAX), Err(ConfigError::BeyondRange));
    /// ```
    pub fn with_scale(self, scale: u64) -> Result<Quota, ConfigError> {
        let (t, p) = self.scaled.reduced();
        let scaled = scale::chosen(t, p, self.scaled.burst, scale)?;
        Ok(Quota { g: self.g, scaled })
    }

    /// Tokens earned per [`per`](Quota::per).
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(7).unwrap().tokens(), 7);
    /// ```
    pub fn tokens(&self) -> u64 {
        self.g * self.scaled.reduced().0
    }

    /// The period over which [`tokens`](Quota::tokens) are earned.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(tollgate::Quota::per_second(7).unwrap().per(), Duration::from_secs(1));
    /// ```
    pub fn per(&self) -> Duration {
        Duration::from_nanos(self.per_ns())
    }

    /// [`per`](Quota::per) in nanoseconds.
    fn per_ns(&self) -> u64 {
        self.g * self.scaled.reduced().1
    }

    /// The capacity: the most tokens the bucket holds, and the largest admissible cost.
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(7).unwrap().burst(), 7);
    /// ```
    pub fn burst(&self) -> u64 {
        self.scaled.burst
    }

    /// Whether every decision equals the continuous token bucket at every nanosecond: true when
    /// the quota's unit earns whole units every nanosecond (`units_per_ns().1 == 1`). In the
    /// unit [`Quota::new`] picks, that is when the reduced rate fits 100 years at full precision
    /// (e.g. `n` per second with `n` dividing 10^9 and a burst the range holds at that
    /// precision; 1/s with a burst of 10^10 is not); a unit chosen by
    /// [`with_scale`](Quota::with_scale) may make the same rate inexact.
    /// Otherwise see the type's docs: a decision refuses by less than one unit (`1/scale`
    /// token), so the same request passes at most `⌈div / mul⌉` ns later
    /// ([`units_per_ns`](Quota::units_per_ns)); a reconfiguration rounds down by up to a few units.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Denied, ManualClock, Quota};
    /// assert!(Quota::per_second(1000).unwrap().is_exact());
    /// assert!(!Quota::per_second(999_999_937).unwrap().is_exact());
    /// // 7 per 30 days earns 7/3 units a nanosecond: whole units every 3 ns.
    /// let month = Quota::new(7, Duration::from_secs(30 * 86_400), 7).unwrap();
    /// assert_eq!(month.units_per_ns(), (7, 3));
    /// let clock = ManualClock::new();
    /// clock.set(Duration::from_nanos(1)); // off the unit grid
    /// let b = Bucket::with_clock(month, clock.clone());
    /// for _ in 0..6 {
    ///     b.try_acquire(1).unwrap();
    /// }
    /// assert_eq!(b.try_acquire(1), Err(Denied::RetryAfter(Duration::from_nanos(1))));
    /// clock.advance(Duration::from_nanos(1));
    /// assert_eq!(b.try_acquire(1), Ok(()));
    /// ```
    pub fn is_exact(&self) -> bool {
        self.scaled.div == 1
    }

    /// How long refilling `tokens` takes, rounded up to whole nanoseconds (saturating).
    ///
    /// ```
    /// use std::time::Duration;
    /// let q = tollgate::Quota::per_second(3).unwrap();
    /// assert_eq!(q.refill_time(3), Duration::from_secs(1));
    /// assert_eq!(q.refill_time(1), Duration::from_nanos(333_333_334));
    /// ```
    pub fn refill_time(&self, tokens: u64) -> Duration {
        // The reduced rate gives the same quotient.
        let (t, p) = self.scaled.reduced();
        let ns = (u128::from(tokens) * u128::from(p)).div_ceil(u128::from(t));
        u64::try_from(ns).map_or(Duration::MAX, Duration::from_nanos)
    }

    #[inline(always)]
    pub(crate) fn scaled(&self) -> &Scaled {
        &self.scaled
    }

    /// State units per token (a [`gcra`](crate::gcra) state counts `1 / scale` of a token), for
    /// stores that apply `gcra` outside this crate (e.g. `tollgate-redis`).
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(1000).unwrap();
    /// assert_eq!(q.scale(), 1_000_000); // exact quota: one unit per nanosecond of refill
    /// ```
    #[inline]
    pub fn scale(&self) -> u64 {
        self.scaled.scale
    }

    /// `burst × scale`, which never overflows.
    #[inline]
    pub(crate) fn burst_units(&self) -> u64 {
        self.scaled.burst_units()
    }

    /// State units earned per nanosecond, a reduced fraction `(mul, div)`: the bucket earns
    /// `⌊now_ns × mul / div⌋` units by `now_ns`; `div == 1` iff [`is_exact`](Quota::is_exact).
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(1000).unwrap();
    /// assert_eq!(q.units_per_ns(), (1, 1));
    /// ```
    #[inline]
    pub fn units_per_ns(&self) -> (u64, u64) {
        (self.scaled.mul, self.scaled.div)
    }

    #[inline]
    pub(crate) fn earned_floor(&self, now: u64) -> u64 {
        self.scaled.earned_floor(now)
    }

    #[inline]
    pub(crate) fn earned_ceil(&self, now: u64) -> u64 {
        self.scaled.earned_ceil(now)
    }

    /// [`Scaled::instant_of`].
    #[inline]
    pub(crate) fn instant_of(&self, units: u64) -> u64 {
        self.scaled.instant_of(units)
    }

    /// A bucket's quota slot: the [`Scaled`] words (all a decision reads), then `g`.
    pub(crate) fn to_raw(self) -> [u64; QUOTA_WORDS] {
        let mut raw = [self.g; QUOTA_WORDS];
        raw[..SCALED_WORDS].copy_from_slice(&self.scaled.to_raw());
        raw
    }

    /// Only ever given what [`Quota::to_raw`] returned.
    pub(crate) fn from_raw(r: [u64; QUOTA_WORDS]) -> Quota {
        let mut rate = [0; SCALED_WORDS];
        rate.copy_from_slice(&r[..SCALED_WORDS]);
        Quota {
            g: r[SCALED_WORDS],
            scaled: Scaled::from_raw(rate),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{inexact_quotas, Xorshift};
    use alloc::vec;

    /// `tokens`, `per` and the slot words round-trip exactly: at the edges (common factors,
    /// prime and century-long periods, the largest values) and on a seeded sweep.
    #[test]
    fn tokens_and_period_round_trip() {
        let mut cases = vec![
            (1, 1, 1),
            (2, 2, 1),
            (1000, 1_000_000_000, 1000),
            (30, 1_000_000_000, 30),
            (999_999_937, 1_000_000_000, 4_000_000_000),
            (u64::MAX, u64::MAX, 1),
            (1, u64::MAX, 1),
            (1, 18_446_744_073_709_551_557, 1), // the largest prime below 2^64
            (6, 18_446_744_073_709_551_614, 1 << 20),
            (1 << 40, 1 << 50, 1 << 20),
            (u64::MAX / 4, u64::MAX, 1 << 62),
            (3, 1 << 63, 1),
        ];
        let mut rng = Xorshift(0xA076_1D64_78BD_642F);
        for _ in 0..3000 {
            let (a, b, c) = (rng.next() % 64, rng.next() % 64, rng.next() % 64);
            let common = (rng.next() >> (rng.next() % 64)).max(1);
            let tokens = (rng.next() >> a).max(1);
            let per = (rng.next() >> b).max(1);
            cases.push((tokens, per, (rng.next() >> c).max(1)));
            cases.push((
                tokens.saturating_mul(common).max(1),
                per.saturating_mul(common),
                1,
            ));
        }
        let mut built = 0;
        for (tokens, per_ns, burst) in cases {
            let Ok(q) = Quota::new(tokens, Duration::from_nanos(per_ns), burst) else {
                continue;
            };
            built += 1;
            assert_eq!(
                (q.tokens(), q.per_ns(), q.burst()),
                (tokens, per_ns, burst),
                "{q:?}"
            );
            assert_eq!(Quota::from_raw(q.to_raw()), q);
            assert_eq!(q.scaled.rmul, u64::MAX / q.scaled.mul);
            assert_eq!(q.scaled.rdiv, u64::MAX / q.scaled.div);
        }
        assert!(built > 2000, "{built}");
    }

    /// `with_scale` keeps the rate and burst, holds exactly the chosen unit with the slot's
    /// reciprocals recomputed, refuses 0 and every scale past the horizon's range (1 always
    /// fits a valid quota; `u64::MAX` never does), and at the default scale is the quota
    /// itself.
    #[test]
    fn with_scale_edges() {
        let month = Quota::new(7, Duration::from_secs(2_592_000), 7).unwrap();
        let mut quotas = vec![
            month,
            Quota::per_second(1).unwrap(),
            Quota::per_second(1_000_000_000).unwrap(),
            Quota::new(1_000_000_000, Duration::from_secs(1), 1 << 62).unwrap(),
            Quota::new(u64::MAX / 4, Duration::from_nanos(u64::MAX), 1 << 62).unwrap(),
            Quota::new(1, Duration::from_nanos(u64::MAX), 1).unwrap(),
            Quota::new(1, Duration::from_nanos(18_446_744_073_709_551_557), 1).unwrap(),
        ];
        quotas.extend(inexact_quotas());
        let mut rng = Xorshift(0x9E37_79B9_7F4A_7C15);
        for q in quotas {
            assert_eq!(q.with_scale(0), Err(ConfigError::ZeroScale), "{q:?}");
            assert_eq!(
                q.with_scale(u64::MAX),
                Err(ConfigError::BeyondRange),
                "{q:?}"
            );
            assert_eq!(q.with_scale(q.scale()), Ok(q), "{q:?}");
            let (t, p) = q.scaled.reduced();
            let max = scale::max_scale_for_tests(t, p, q.burst()).unwrap();
            assert_eq!(
                q.with_scale(max.saturating_add(1)),
                Err(ConfigError::BeyondRange)
            );
            let mut scales = vec![1, 2, 3, max, max - 1, max / 2, q.scale()];
            scales.extend((0..200).map(|_| 1 + rng.next() % max));
            for s in scales.into_iter().filter(|&s| (1..=max).contains(&s)) {
                let Ok(w) = q.with_scale(s) else {
                    // Only a numerator beyond 64 bits: a period of centuries.
                    assert!(
                        u128::from(t) * u128::from(s) / gcd(s.into(), p.into()) > u64::MAX.into(),
                        "{q:?} at {s}: {:?}",
                        q.with_scale(s)
                    );
                    continue;
                };
                assert_eq!(
                    (w.tokens(), w.per(), w.burst()),
                    (q.tokens(), q.per(), q.burst())
                );
                assert_eq!(w.scale(), s);
                let (mul, div) = w.units_per_ns();
                // `mul / div = t·s / p`, reduced.
                assert_eq!(
                    u128::from(mul) * u128::from(p),
                    u128::from(t) * u128::from(s) * u128::from(div)
                );
                assert_eq!(gcd(mul.into(), div.into()), 1);
                assert_eq!(w.is_exact(), div == 1);
                assert_eq!(w.scaled.rmul, u64::MAX / mul);
                assert_eq!(w.scaled.rdiv, u64::MAX / div);
                assert!(
                    u128::from(w.earned_ceil(HORIZON_NS)) + u128::from(w.burst_units())
                        <= u128::from(MAX_UNITS)
                );
                assert_eq!(Quota::from_raw(w.to_raw()), w);
            }
        }
    }

    /// `Scaled::earned` (floor and ceiling under one test, the ceiling by a product compare)
    /// against plain 128-bit arithmetic, at the edges of the range and on a seeded sweep.
    #[test]
    fn earned_floor_and_ceil_are_exact() {
        let others = [
            Quota::per_second(1_000_000_000).unwrap(),
            Quota::per_second(1000).unwrap(),
            Quota::new(1, Duration::from_secs(3600), 1).unwrap(),
            Quota::new(u64::MAX / 4, Duration::from_nanos(u64::MAX), 1 << 62).unwrap(),
        ];
        let mut rng = Xorshift(0x2545_F491_4F6C_DD1D);
        for q in inexact_quotas().into_iter().chain(others) {
            let r = q.scaled();
            let mut nows = vec![0, 1, 2, u64::MAX];
            nows.extend([HORIZON_NS - 1, HORIZON_NS, HORIZON_NS + 1]);
            nows.extend((0..20).map(|k| r.div.saturating_mul(k)));
            nows.extend((0..20).map(|k| r.div.saturating_mul(k).saturating_sub(1)));
            for _ in 0..5000 {
                nows.push(rng.next() % (HORIZON_NS + 2));
            }
            for now in nows {
                let n = u128::from(now.min(HORIZON_NS)) * u128::from(r.mul);
                let d = u128::from(r.div);
                let want = ((n / d) as u64, n.div_ceil(d) as u64);
                assert_eq!(r.earned(now), want, "{q:?} at {now}");
                assert_eq!(r.earned_floor(now), want.0, "{q:?} at {now}");
                assert!(want.1 <= MAX_UNITS);
            }
        }
    }
}
