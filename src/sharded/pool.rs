//! The pooled balance of a sharded bucket's shards as a function of time, and the first instant
//! it reaches a given amount: a closed form (one sort and one walk) instead of a search. Pure
//! functions, no atomics.
//!
//! Every shard has the same rate and the same unit, so one number `e` — the units earned from
//! the clock's origin to a reading — describes the refill of all of them. Shard `i` (state
//! `s_i`, burst `b_i` units) holds `clamp(e + b_i − s_i, 0, b_i)`: nothing until `e = s_i − b_i`,
//! then one more unit per unit earned, then `b_i` from `e = s_i` on (a full shard earns
//! nothing). The pool is the sum: piecewise linear and non-decreasing in `e`, its slope at `e`
//! the number of shards strictly between their two breakpoints. Sorting the `2n` breakpoints and
//! walking them finds the least `e` at which the pool holds `need`, exactly.

use alloc::vec::Vec;

/// The pooled balance of a set of shard states, as sorted breakpoints.
pub(super) struct Curve {
    /// `(e, slope change)`: `+1` where a shard starts to hold units, `−1` where it is full.
    breaks: Vec<(i64, i8)>,
}

impl Curve {
    /// The curve of shards given as `(state, burst in units)`. States and bursts are at most
    /// 2^63 − 1 (the quota's range), so every breakpoint fits an `i64`.
    pub(super) fn new(shards: impl ExactSizeIterator<Item = (u64, u64)>) -> Curve {
        let mut breaks = Vec::with_capacity(2 * shards.len());
        for (state, burst) in shards {
            let state = i64::try_from(state).unwrap_or(i64::MAX);
            let burst = i64::try_from(burst).unwrap_or(i64::MAX);
            breaks.push((state - burst, 1));
            breaks.push((state, -1));
        }
        breaks.sort_unstable_by_key(|b| b.0);
        Curve { breaks }
    }

    /// The least `e >= 0` at which the pool holds at least `need` units; `None` if it never
    /// does (`need` above the sum of the bursts).
    pub(super) fn first_reaching(&self, need: u128) -> Option<u64> {
        let need = i128::try_from(need).ok()?;
        let (mut pool, mut slope, mut at) = (0i128, 0i128, i128::from(i64::MIN));
        for &(next, change) in &self.breaks {
            let next = i128::from(next);
            if slope > 0 {
                let reach = pool + slope * (next - at);
                if reach >= need {
                    // The pool crosses `need` on this segment: the first whole unit of `e`.
                    let e = at + (need - pool + slope - 1) / slope;
                    return Some(u64::try_from(e.max(0)).unwrap_or(u64::MAX));
                }
                pool = reach;
            }
            at = next;
            slope += i128::from(change);
        }
        // Past the last breakpoint every shard is full; `pool` is the sum of the bursts.
        (need <= pool).then(|| u64::try_from(at.max(0)).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::Curve;
    use alloc::vec::Vec;

    /// A tiny deterministic generator (xorshift), enough for random shard states.
    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn first_reaching_matches_a_search_over_every_e() {
        let mut x = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2_000 {
            let n = 1 + (next(&mut x) % 6) as usize;
            let shards: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let burst = 1 + next(&mut x) % 7;
                    (next(&mut x) % 40, burst)
                })
                .collect();
            let total: u128 = shards.iter().map(|s| u128::from(s.1)).sum();
            let curve = Curve::new(shards.iter().copied());
            // The pool at `e`, shard by shard: clamp(e + b − s, 0, b).
            let at = |e: u64| -> u128 {
                shards
                    .iter()
                    .map(|&(s, b)| u128::from((e + b).saturating_sub(s).min(b)))
                    .sum()
            };
            for need in 1..=total + 1 {
                let want = (0..=60u64).find(|&e| at(e) >= need);
                assert_eq!(curve.first_reaching(need), want, "{shards:?} need {need}");
            }
        }
    }

    #[test]
    fn full_shards_earn_nothing() {
        // Two shards of burst 4: one full (state 0), one empty at e = 10 (state 14).
        let curve = Curve::new([(0u64, 4u64), (14, 4)].into_iter());
        assert_eq!(curve.first_reaching(4), Some(0));
        assert_eq!(curve.first_reaching(5), Some(11));
        assert_eq!(curve.first_reaching(8), Some(14));
        assert_eq!(curve.first_reaching(9), None);
    }
}
