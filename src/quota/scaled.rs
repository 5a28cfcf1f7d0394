//! [`Scaled`]: a quota in the state word's fixed-point unit, the words every decision reads.

use super::HORIZON_NS;
use crate::recip;

/// The words of a [`Quota`](crate::Quota) that decisions read: the burst and the fixed-point
/// unit (the first words of a bucket's quota slot).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Scaled {
    pub(super) burst: u64,
    /// State units per token.
    pub(super) scale: u64,
    /// Units earned per nanosecond = `mul / div` (a reduced fraction).
    pub(super) mul: u64,
    pub(super) div: u64,
    /// [`recip::reciprocal`] of `mul`: a refusal's wait without a division.
    pub(super) rmul: u64,
    /// [`recip::reciprocal`] of `div`: an inexact quota's refill cap without a division.
    pub(super) rdiv: u64,
}

/// `now × mul / div` rounded down and up, for `div > 1`: one division, the ceiling by a product
/// compare. Out of line, so that the exact quotas' path keeps its registers.
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

/// `⌈n / d⌉` for a quotient that fits in 64 bits, out of line.
#[inline(never)]
#[cold]
fn ceil_div_wide(n: u128, d: u64) -> u64 {
    n.div_ceil(u128::from(d)) as u64
}

/// Words of [`Scaled::to_raw`]: the first words of a quota slot.
pub(crate) const SCALED_WORDS: usize = 6;

impl Scaled {
    pub(super) fn new(burst: u64, scale: u64, mul: u64, div: u64) -> Scaled {
        Scaled {
            burst,
            scale,
            mul,
            div,
            rmul: recip::reciprocal(mul),
            rdiv: recip::reciprocal(div),
        }
    }

    #[inline(always)]
    pub(crate) fn burst(&self) -> u64 {
        self.burst
    }

    #[inline(always)]
    pub(crate) fn scale(&self) -> u64 {
        self.scale
    }

    /// `burst × scale`: at most `MAX_UNITS` by the quota's construction.
    #[inline(always)]
    pub(crate) fn burst_units(&self) -> u64 {
        self.burst * self.scale
    }

    /// Units earned from the origin to `now`, rounded down and up.
    #[inline(always)]
    pub(crate) fn earned(&self, now: u64) -> (u64, u64) {
        match self.exact_earned(now) {
            Some(e) => (e, e),
            None => earned_inexact(now.min(HORIZON_NS), self.mul, self.div),
        }
    }

    /// Units earned from the origin to `now` for an exact quota (`None` for an inexact one).
    #[inline(always)]
    pub(crate) fn exact_earned(&self, now: u64) -> Option<u64> {
        // `now * mul <= MAX_UNITS` by construction: no overflow.
        (self.div == 1).then(|| now.min(HORIZON_NS) * self.mul)
    }

    /// Units earned per nanosecond for an exact quota (`div == 1`), `None` for an inexact one.
    #[inline(always)]
    pub(crate) fn exact_mul(&self) -> Option<u64> {
        (self.div == 1).then_some(self.mul)
    }

    /// `(n, div)` with `n / div` exactly the units earned from the origin to `now`.
    #[inline(always)]
    pub(crate) fn earned_scaled(&self, now: u64) -> (u128, u128) {
        (
            u128::from(now.min(HORIZON_NS)) * u128::from(self.mul),
            u128::from(self.div),
        )
    }

    /// `⌈n / div⌉` for `n` from [`Scaled::earned_scaled`] and a capped `state` (`state · div <
    /// n`): divides only the excess `n − state · div`, in 64 bits while it fits, where `n` itself
    /// needs a 128-bit division.
    #[inline(always)]
    pub(crate) fn ceil_above(&self, state: u64, n: u128) -> u64 {
        let excess = n - u128::from(state) * u128::from(self.div);
        match u64::try_from(excess) {
            // `state + ⌈excess / div⌉ = ⌈n / div⌉ <= MAX_UNITS + 1`: no overflow.
            Ok(e) => state + recip::div_ceil(e, self.div, self.rdiv),
            Err(_) => ceil_div_wide(n, self.div),
        }
    }

    /// `(n, x) = (now · mul, need · div)` if both fit in 64 bits: then `need <= ⌊n / div⌋`
    /// (earned) exactly when `x <= n`.
    #[inline(always)]
    pub(crate) fn narrow(&self, now: u64, need: u64) -> Option<(u64, u64)> {
        let n = now.min(HORIZON_NS).checked_mul(self.mul)?;
        Some((n, need.checked_mul(self.div)?))
    }

    /// `max(state, ⌈n / div⌉)` for `n` from [`Scaled::narrow`]: the refill cap.
    #[inline(always)]
    pub(crate) fn cap_narrow(&self, state: u64, n: u64) -> u64 {
        match state.checked_mul(self.div) {
            // `state + ⌈(n − s) / div⌉ = ⌈n / div⌉ <= MAX_UNITS + 1`: no overflow.
            Some(s) if s < n => state + recip::div_ceil(n - s, self.div, self.rdiv),
            // `state · div >= n` (overflowing, it exceeds `n`): not capped.
            _ => state,
        }
    }

    /// [`Scaled::instant_of_scaled`] for an `x = need · div` from [`Scaled::narrow`]: `⌈x / mul⌉`.
    #[inline(always)]
    pub(crate) fn instant_of_narrow(&self, x: u64) -> u64 {
        recip::div_ceil(x, self.mul, self.rmul)
    }

    /// The first reading at or after `t` whose units earned are whole: a multiple of `div`
    /// (`mul / div` being reduced), so `t` itself for an exact quota; saturating at `u64::MAX`.
    /// (For the sharded bucket, which needs `std`.)
    #[cfg(feature = "std")]
    pub(crate) fn whole_from(&self, t: u64) -> u64 {
        t.div_ceil(self.div).saturating_mul(self.div)
    }

    /// Units earned from the origin to `now`, rounded down.
    #[inline(always)]
    pub(crate) fn earned_floor(&self, now: u64) -> u64 {
        self.earned(now).0
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

    /// [`Scaled::instant_of`] for an exact quota: `⌈units / mul⌉`.
    #[inline(always)]
    pub(crate) fn instant_of_exact(&self, units: u64) -> u64 {
        if self.mul == 1 {
            units
        } else {
            recip::div_ceil(units, self.mul, self.rmul)
        }
    }

    /// [`Scaled::instant_of`] from `x = units × div`: `⌈x / mul⌉`, saturating at `u64::MAX`; no
    /// division while `x` fits in 64 bits.
    #[inline(always)]
    pub(crate) fn instant_of_scaled(&self, x: u128) -> u64 {
        match u64::try_from(x) {
            Ok(x) => recip::div_ceil(x, self.mul, self.rmul),
            Err(_) => u64::try_from(x.div_ceil(u128::from(self.mul))).unwrap_or(u64::MAX),
        }
    }

    /// The reduced rate: `t` tokens per `p` ns, `gcd(t, p) = 1`. From `mul / div = t·scale / p`
    /// (reduced), with `h = gcd(mul, scale)`: `t = mul / h`, `p = div · scale / h`.
    pub(super) fn reduced(&self) -> (u64, u64) {
        let h = gcd(u128::from(self.mul), u128::from(self.scale)) as u64;
        (self.mul / h, self.div * (self.scale / h))
    }

    pub(crate) fn to_raw(self) -> [u64; SCALED_WORDS] {
        [
            self.burst, self.scale, self.mul, self.div, self.rmul, self.rdiv,
        ]
    }

    /// Only ever given what [`Scaled::to_raw`] returned.
    #[inline(always)]
    pub(crate) fn from_raw(r: [u64; SCALED_WORDS]) -> Scaled {
        Scaled {
            burst: r[0],
            scale: r[1],
            mul: r[2],
            div: r[3],
            rmul: r[4],
            rdiv: r[5],
        }
    }
}

pub(super) const fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}
