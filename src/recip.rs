//! Division by an invariant `u64` with a stored reciprocal: one multiplication and one
//! correction instead of a division instruction, exact for every 64-bit dividend.
//!
//! For a divisor `d >= 1` the reciprocal is `m = ⌊(2^64 − 1) / d⌋`, so `2^64 − d <= m·d < 2^64`.
//! For `x < 2^64` the estimate `q = ⌊x·m / 2^64⌋` then satisfies `x/d − 1 < x·m/2^64 < x/d`, so
//! `q` is `⌊x/d⌋` or one less, and the remainder `r = x − q·d` lies in `0 .. 2d`: the exact
//! result follows from `r` without a loop.

/// The reciprocal of `d >= 1` for [`div_ceil`], computed when a [`Quota`](crate::Quota) is built.
pub(crate) const fn reciprocal(d: u64) -> u64 {
    u64::MAX / d
}

/// `⌈x / d⌉` with `m = reciprocal(d)`: no division.
#[inline(always)]
pub(crate) fn div_ceil(x: u64, d: u64, m: u64) -> u64 {
    let q = ((u128::from(x) * u128::from(m)) >> 64) as u64;
    // `q <= ⌊x/d⌋`, so `q·d <= x` (no overflow) and `r < 2d`.
    let r = x - q * d;
    // `⌈r/d⌉` is 0, 1 or 2. The sum is at most `⌈x/d⌉ <= x`: no overflow.
    q + u64::from(r != 0) + u64::from(r > d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Xorshift;

    /// Against `u64::div_ceil`, at the edges (powers of two, multiples of `d`, `u64::MAX`) and
    /// on seeded sweeps of divisors and dividends.
    #[test]
    fn div_ceil_matches_division() {
        let mut divisors = alloc::vec![1, 2, 3, 5, 7, 10, 999_999_937, 500_000_000];
        for k in 0..64 {
            let p = 1u64 << k;
            divisors.extend([p, p - 1, p + 1, p.wrapping_mul(3) | 1]);
        }
        divisors.extend([u64::MAX, u64::MAX - 1, u64::MAX / 2, u64::MAX / 3 + 1]);
        let mut rng = Xorshift(0xD1B5_4A32_D192_ED03);
        for _ in 0..300 {
            let shift = rng.next() % 64;
            divisors.push(rng.next() >> shift);
        }
        divisors.retain(|&d| d != 0);
        for &d in &divisors {
            let m = reciprocal(d);
            let mut xs = alloc::vec![0, 1, 2, d - 1, d, d.saturating_add(1)];
            xs.extend([u64::MAX, u64::MAX - 1]);
            for q in [2, 3, u64::MAX / d, u64::MAX / d - 1, (u64::MAX / d) / 2] {
                let x = q.saturating_mul(d);
                xs.extend([x.saturating_sub(1), x, x.saturating_add(1)]);
            }
            for _ in 0..300 {
                let shift = rng.next() % 64;
                xs.push(rng.next() >> shift);
            }
            for x in xs {
                assert_eq!(div_ceil(x, d, m), x.div_ceil(d), "{x} / {d}");
            }
        }
    }
}
