//! [`Quota`]: a validated rate and burst, and the fixed-point scale the state word uses.
//!
//! All validation lives here, once. A `Quota` that exists can be applied for at least
//! [`HORIZON`] of clock time without any overflow or wrap.

use crate::error::ConfigError;
use crate::recip;
use core::fmt;
use core::time::Duration;

/// How long a quota is guaranteed to work: 100 Julian years of clock time since the clock's
/// origin. Past it the clock is read as if it had stopped there (the bucket stays correct but
/// refills no more), which is why [`Quota::new`] refuses a rate and burst that do not fit it.
pub const HORIZON: Duration = Duration::from_secs(3_155_760_000);
pub(crate) const HORIZON_NS: u64 = 3_155_760_000_000_000_000;
/// The largest state value: the bucket keeps one bit of its word for the quota epoch.
pub(crate) const MAX_UNITS: u64 = (1 << 63) - 1;

/// A rate (`tokens` per `per`) and a capacity (`burst`), validated.
///
/// Internally the quota also fixes the unit of the state word: `scale` units per token, chosen
/// as the largest divisor of the reduced period that lets `rate × 100 years + burst` fit in
/// 63 bits. When `scale` equals the reduced period ([`Quota::is_exact`]), every decision equals
/// the continuous token bucket at every nanosecond. Otherwise the only rounding happens when
/// the bucket overflows (is capped at `burst`) at an instant that is not a multiple of the
/// unit, and it always rounds toward refusing (by less than `1/scale` of a token).
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
    /// `gcd(tokens, per_ns)`: with the reduced rate `t / p` that `rate` determines
    /// ([`Rate::reduced`]), `tokens = g·t` and `per_ns = g·p`. Stored instead of `tokens` and
    /// `per_ns`: a quota slot is seven words, six of them the decision's (with the reciprocals
    /// `Rate::rmul` and `Rate::rdiv`).
    g: u64,
    /// Everything a decision needs (the "hot" words of a bucket's quota slot).
    rate: Rate,
}

/// The part of a [`Quota`] that decisions read: the burst and the fixed-point unit. The bucket's
/// hot path loads only these words of its quota slot.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Rate {
    burst: u64,
    /// State units per token.
    scale: u64,
    /// Units earned per nanosecond = `mul / div` (a reduced fraction).
    mul: u64,
    div: u64,
    /// The reciprocal of `mul` ([`recip::reciprocal`]): [`Rate::instant_of`] (the end of a
    /// refusal's wait) divides by `mul` with a multiplication instead of a division.
    rmul: u64,
    /// The reciprocal of `div`: [`Rate::ceil_above`] (the refill cap of an inexact quota, paid
    /// on every admission while the bucket is full) divides by `div` with a multiplication.
    rdiv: u64,
}

/// `now × mul / div` rounded down and up, for `div > 1`: one division (64-bit when the product
/// fits), and the ceiling by a product compare. Out of line, so that the exact quotas' path (no division) keeps its
/// registers.
#[inline(never)]
fn earned_inexact(now: u64, mul: u64, div: u64) -> (u64, u64) {
    let n = u128::from(now) * u128::from(mul);
    let floor = match u64::try_from(n) {
        // The common case (small `mul`, or early readings): a 64-bit division.
        Ok(n) => n / div,
        Err(_) => (n / u128::from(div)) as u64,
    };
    let exact = u128::from(floor) * u128::from(div) == n;
    (floor, floor + u64::from(!exact))
}

/// `⌈n / d⌉` for a quotient that fits in 64 bits: a 128-bit division, out of line.
#[inline(never)]
#[cold]
fn ceil_div_wide(n: u128, d: u64) -> u64 {
    n.div_ceil(u128::from(d)) as u64
}

/// Words of [`Rate::to_raw`]: the first words of a quota slot.
pub(crate) const RATE_WORDS: usize = 6;

/// Words of [`Quota::to_raw`]: a whole quota slot (the [`Rate`] words, then `g`).
pub(crate) const QUOTA_WORDS: usize = RATE_WORDS + 1;

impl Rate {
    /// The capacity in tokens.
    #[inline(always)]
    pub(crate) fn burst(&self) -> u64 {
        self.burst
    }

    /// State units per token.
    #[inline(always)]
    pub(crate) fn scale(&self) -> u64 {
        self.scale
    }

    /// The capacity in state units, `burst × scale`: at most `MAX_UNITS` by the quota's
    /// construction, so the product never overflows.
    #[inline(always)]
    pub(crate) fn burst_units(&self) -> u64 {
        self.burst * self.scale
    }

    /// Units earned from the origin to `now`, rounded down and up, under one exactness test; the
    /// ceiling by a product compare, not a second division.
    #[inline(always)]
    pub(crate) fn earned(&self, now: u64) -> (u64, u64) {
        let now = now.min(HORIZON_NS);
        if self.div == 1 {
            // `now * mul <= MAX_UNITS` by construction: no overflow, no division.
            let e = now * self.mul;
            (e, e)
        } else {
            earned_inexact(now, self.mul, self.div)
        }
    }

    /// Units earned from the origin to `now` for an exact quota (`None` for an inexact one):
    /// one multiply, no division.
    #[inline(always)]
    pub(crate) fn exact_earned(&self, now: u64) -> Option<u64> {
        // `now * mul <= MAX_UNITS` by construction: no overflow.
        (self.div == 1).then(|| now.min(HORIZON_NS) * self.mul)
    }

    /// `(n, div)` with `n / div` the units earned from the origin to `now` (exactly, as a
    /// fraction): for product compares on inexact quotas.
    #[inline(always)]
    pub(crate) fn earned_scaled(&self, now: u64) -> (u128, u128) {
        (
            u128::from(now.min(HORIZON_NS)) * u128::from(self.mul),
            u128::from(self.div),
        )
    }

    /// `⌈n / div⌉` (the units earned, rounded up) for `n` from [`Rate::earned_scaled`] and a
    /// `state` below it (`state · div < n`: the bucket is capped). Divides only the excess
    /// `n − state · div` (the refill beyond `state`), in 64 bits while it fits (refills of up to
    /// `2^64 / div` units since `state`), where `n` itself needs a 128-bit division once
    /// `now · mul` passes 2^64 (after 18 s at 999,999,937/s).
    #[inline(always)]
    pub(crate) fn ceil_above(&self, state: u64, n: u128) -> u64 {
        let excess = n - u128::from(state) * u128::from(self.div);
        match u64::try_from(excess) {
            // `state + ⌈excess / div⌉ = ⌈n / div⌉ <= MAX_UNITS + 1`: no overflow. By the
            // stored reciprocal: no division instruction on the admission path.
            Ok(e) => state + recip::div_ceil(e, self.div, self.rdiv),
            Err(_) => ceil_div_wide(n, self.div),
        }
    }

    /// For an inexact quota, `(n, x) = (now · mul, need · div)` if both products fit in 64 bits:
    /// then `need <= ⌊n / div⌋` (earned) exactly when `x <= n`, with no 128-bit arithmetic. `None`
    /// otherwise (use [`Rate::earned_scaled`]).
    #[inline(always)]
    pub(crate) fn narrow(&self, now: u64, need: u64) -> Option<(u64, u64)> {
        let n = now.min(HORIZON_NS).checked_mul(self.mul)?;
        Some((n, need.checked_mul(self.div)?))
    }

    /// `max(state, ⌈n / div⌉)` for `n = now · mul` from [`Rate::narrow`]: the refill cap, by the
    /// stored reciprocal of `div` (no division instruction).
    #[inline(always)]
    pub(crate) fn cap_narrow(&self, state: u64, n: u64) -> u64 {
        match state.checked_mul(self.div) {
            // `state + ⌈(n − s) / div⌉ = ⌈n / div⌉ <= MAX_UNITS + 1`: no overflow.
            Some(s) if s < n => state + recip::div_ceil(n - s, self.div, self.rdiv),
            // `state · div >= n` (overflowing, it exceeds `n`): not capped.
            _ => state,
        }
    }

    /// [`Rate::instant_of_scaled`] for an `x = need · div` from [`Rate::narrow`]: `⌈x / mul⌉`.
    #[inline(always)]
    pub(crate) fn instant_of_narrow(&self, x: u64) -> u64 {
        recip::div_ceil(x, self.mul, self.rmul)
    }

    /// Units earned from the origin to `now`, rounded down.
    #[inline(always)]
    pub(crate) fn earned_floor(&self, now: u64) -> u64 {
        let now = now.min(HORIZON_NS);
        if self.div == 1 {
            now * self.mul
        } else {
            ((u128::from(now) * u128::from(self.mul)) / u128::from(self.div)) as u64
        }
    }

    /// Units earned from the origin to `now`, rounded up.
    #[inline(always)]
    pub(crate) fn earned_ceil(&self, now: u64) -> u64 {
        self.earned(now).1
    }

    /// The first instant (ns since origin) at which `earned_floor` reaches `units`, i.e.
    /// `⌈units × div / mul⌉`, saturating at `u64::MAX`.
    #[inline(always)]
    pub(crate) fn instant_of(&self, units: u64) -> u64 {
        if self.div == 1 {
            self.instant_of_exact(units)
        } else {
            self.instant_of_scaled(u128::from(units) * u128::from(self.div))
        }
    }

    /// [`Rate::instant_of`] for an exact quota (`div == 1`): `⌈units / mul⌉`, nothing to compute
    /// for one unit per nanosecond.
    #[inline(always)]
    pub(crate) fn instant_of_exact(&self, units: u64) -> u64 {
        if self.mul == 1 {
            units
        } else {
            recip::div_ceil(units, self.mul, self.rmul)
        }
    }

    /// [`Rate::instant_of`] from `x = units × div`: `⌈x / mul⌉`, saturating at `u64::MAX`. No
    /// division while `x` fits in 64 bits (the stored reciprocal of `mul`). Independent of the
    /// clock reading, so a refusal computes it while the clock is read.
    #[inline(always)]
    pub(crate) fn instant_of_scaled(&self, x: u128) -> u64 {
        match u64::try_from(x) {
            Ok(x) => recip::div_ceil(x, self.mul, self.rmul),
            Err(_) => u64::try_from(x.div_ceil(u128::from(self.mul))).unwrap_or(u64::MAX),
        }
    }

    /// The reduced rate `(t, p)`: `t` tokens per `p` ns with `gcd(t, p) = 1`. From
    /// `mul / div = t·scale / p` (reduced): with `h = gcd(mul, scale)`, `t = mul / h` and
    /// `p = div · scale / h` (a cold path: one gcd).
    fn reduced(&self) -> (u64, u64) {
        let h = gcd(u128::from(self.mul), u128::from(self.scale)) as u64;
        (self.mul / h, self.div * (self.scale / h))
    }

    /// The hot words, in slot order.
    pub(crate) fn to_raw(self) -> [u64; RATE_WORDS] {
        [
            self.burst, self.scale, self.mul, self.div, self.rmul, self.rdiv,
        ]
    }

    /// Inverse of [`Rate::to_raw`]; only ever given values that came from `to_raw`.
    #[inline(always)]
    pub(crate) fn from_raw(r: [u64; RATE_WORDS]) -> Rate {
        Rate {
            burst: r[0],
            scale: r[1],
            mul: r[2],
            div: r[3],
            rmul: r[4],
            rdiv: r[5],
        }
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("tokens", &self.tokens())
            .field("per", &self.per())
            .field("burst", &self.rate.burst)
            .field("exact", &self.is_exact())
            .finish()
    }
}

const fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

/// The largest divisor of `p` that is at most `s_max` (searched for a bounded number of steps),
/// or `s_max` itself if none is found quickly. A divisor keeps more instants exact.
fn best_scale(p: u64, s_max: u64) -> u64 {
    if p <= s_max {
        return p;
    }
    let d0 = p.div_ceil(s_max);
    let mut d = d0;
    while d < d0.saturating_add(4096) {
        if p % d == 0 {
            return p / d;
        }
        d += 1;
    }
    s_max
}

impl Quota {
    /// `tokens` per `per`, holding at most `burst` tokens.
    ///
    /// Errors: zero tokens, zero period, zero burst, a period over `u64::MAX` ns, or a rate
    /// and burst too large for 100 years of clock time ([`ConfigError::BeyondRange`]; rates up
    /// to 1e9 tokens/s with bursts up to 2^62 fit).
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
        let (t, p) = (tokens / g, per_ns / g);
        // Whole tokens earned over the horizon, rounded up, plus the burst.
        let earned = (u128::from(HORIZON_NS) * u128::from(t)).div_ceil(u128::from(p));
        let need = earned + u128::from(burst);
        if need > u128::from(MAX_UNITS) {
            return Err(ConfigError::BeyondRange);
        }
        let mut scale = best_scale(p, (u128::from(MAX_UNITS) / need) as u64);
        loop {
            let g2 = gcd(u128::from(scale), u128::from(p));
            let mul = u128::from(t) * (u128::from(scale) / g2);
            if let Ok(mul) = u64::try_from(mul) {
                let div = (u128::from(p) / g2) as u64;
                let quota = Quota {
                    g,
                    rate: Rate {
                        burst,
                        scale,
                        mul,
                        div,
                        rmul: recip::reciprocal(mul),
                        rdiv: recip::reciprocal(div),
                    },
                };
                debug_assert_eq!((quota.tokens(), quota.per_ns()), (tokens, per_ns));
                return Ok(quota);
            }
            // Only reachable for periods of centuries; a coarser unit still fits.
            scale = (scale / 2).max(1);
        }
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

    /// The same rate with another burst.
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(100).unwrap().with_burst(5).unwrap();
    /// assert_eq!((q.tokens(), q.burst()), (100, 5));
    /// ```
    pub fn with_burst(self, burst: u64) -> Result<Quota, ConfigError> {
        Quota::new(self.tokens(), self.per(), burst)
    }

    /// Tokens earned per [`per`](Quota::per).
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(7).unwrap().tokens(), 7);
    /// ```
    pub fn tokens(&self) -> u64 {
        self.g * self.rate.reduced().0
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
        self.g * self.rate.reduced().1
    }

    /// The capacity: the most tokens the bucket holds, and the largest admissible cost.
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(7).unwrap().burst(), 7);
    /// ```
    pub fn burst(&self) -> u64 {
        self.rate.burst
    }

    /// Whether every decision equals the continuous token bucket at every nanosecond.
    /// True when the reduced rate's numerator is small enough for 100 years at full precision
    /// (for example any rate of `n` per second with `n` dividing 10^9, such as 1, 10, 1000 or
    /// 10^9). Otherwise rounding happens only when the bucket overflows at an instant off the
    /// unit grid, always toward refusing, by less than one unit (see the type's docs).
    ///
    /// ```
    /// use tollgate::Quota;
    /// assert!(Quota::per_second(1000).unwrap().is_exact());
    /// assert!(!Quota::per_second(999_999_937).unwrap().is_exact());
    /// ```
    pub fn is_exact(&self) -> bool {
        self.rate.div == 1
    }

    /// How long refilling `tokens` takes at this rate, rounded up to whole nanoseconds
    /// (saturating at `Duration::MAX`).
    ///
    /// ```
    /// use std::time::Duration;
    /// let q = tollgate::Quota::per_second(3).unwrap();
    /// assert_eq!(q.refill_time(3), Duration::from_secs(1));
    /// assert_eq!(q.refill_time(1), Duration::from_nanos(333_333_334));
    /// ```
    pub fn refill_time(&self, tokens: u64) -> Duration {
        // The reduced rate gives the same quotient.
        let (t, p) = self.rate.reduced();
        let ns = (u128::from(tokens) * u128::from(p)).div_ceil(u128::from(t));
        u64::try_from(ns).map_or(Duration::MAX, Duration::from_nanos)
    }

    // ---- the fixed-point unit, used by `gcra` ----

    /// The words decisions read.
    #[inline(always)]
    pub(crate) fn rate(&self) -> &Rate {
        &self.rate
    }

    /// State units per token: the unit of every [`gcra`](crate::gcra) state is `1 / scale` of a
    /// token. For stores that keep the state outside this crate (e.g. `tollgate-redis`, whose
    /// server-side script must reproduce `gcra` exactly).
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(1000).unwrap();
    /// assert_eq!(q.scale(), 1_000_000); // exact quota: one unit per nanosecond of refill
    /// ```
    #[inline]
    pub fn scale(&self) -> u64 {
        self.rate.scale
    }

    /// The capacity in state units (`burst × scale`, which never overflows).
    #[inline]
    pub(crate) fn burst_units(&self) -> u64 {
        self.rate.burst_units()
    }

    /// State units earned per nanosecond, as a reduced fraction `(mul, div)`: the bucket earns
    /// `floor(now_ns × mul / div)` units from the clock's origin to `now_ns`. `div == 1` exactly
    /// when [`is_exact`](Quota::is_exact). With [`scale`](Quota::scale), everything an external
    /// store needs to apply [`gcra`](crate::gcra) itself.
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(1000).unwrap();
    /// assert_eq!(q.units_per_ns(), (1, 1));
    /// ```
    #[inline]
    pub fn units_per_ns(&self) -> (u64, u64) {
        (self.rate.mul, self.rate.div)
    }

    /// Units earned from the origin to `now`, rounded down.
    #[inline]
    pub(crate) fn earned_floor(&self, now: u64) -> u64 {
        self.rate.earned_floor(now)
    }

    /// Units earned from the origin to `now`, rounded up.
    #[inline]
    pub(crate) fn earned_ceil(&self, now: u64) -> u64 {
        self.rate.earned_ceil(now)
    }

    /// The first instant (ns since origin) at which `earned_floor` reaches `units`, saturating
    /// at `u64::MAX`.
    #[inline]
    pub(crate) fn instant_of(&self, units: u64) -> u64 {
        self.rate.instant_of(units)
    }

    /// The raw fields, for the bucket's atomic quota slots: the [`Rate`] words first (the
    /// decision path reads only those), then `g`.
    pub(crate) fn to_raw(self) -> [u64; QUOTA_WORDS] {
        let mut raw = [self.g; QUOTA_WORDS];
        raw[..RATE_WORDS].copy_from_slice(&self.rate.to_raw());
        raw
    }

    /// Inverse of [`Quota::to_raw`]; only ever given values that came from `to_raw`.
    pub(crate) fn from_raw(r: [u64; QUOTA_WORDS]) -> Quota {
        let mut rate = [0; RATE_WORDS];
        rate.copy_from_slice(&r[..RATE_WORDS]);
        Quota {
            g: r[RATE_WORDS],
            rate: Rate::from_raw(rate),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{inexact_quotas, Xorshift};
    use alloc::vec;

    /// A quota keeps `gcd(tokens, per)` instead of `tokens` and `per` and rebuilds them from the
    /// reduced rate (`Rate::reduced`): exact round trips at the edges (common factors, a prime
    /// period whose unit is not a divisor of it, periods of centuries that halve the unit, the
    /// largest values) and on a seeded sweep; the slot words round-trip too.
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
            assert_eq!(q.rate.rmul, u64::MAX / q.rate.mul);
            assert_eq!(q.rate.rdiv, u64::MAX / q.rate.div);
        }
        assert!(built > 2000, "{built}");
    }

    /// `Rate::earned` (floor and ceiling under one test, the ceiling by a product compare)
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
            let r = q.rate();
            let mut nows = vec![
                0,
                1,
                2,
                HORIZON_NS - 1,
                HORIZON_NS,
                HORIZON_NS + 1,
                u64::MAX,
            ];
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
