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
//! walking them finds the least `e` at which the pool holds `need`, exactly. No allocation: the
//! caller provides the buffers.

/// The least `e >= 0` at which the pool holds at least `need` units; `None` if it never does
/// (`need` above the sum of the bursts). Shard `i` starts to hold units at `starts[i] = s_i −
/// b_i` and is full from `ends[i] = s_i` on; both slices are sorted here, in place (a shard's
/// two breakpoints need not stay paired: the pool's slope only counts how many shards have
/// started and not yet ended).
pub(super) fn first_reaching(starts: &mut [i64], ends: &mut [i64], need: u128) -> Option<u64> {
    starts.sort_unstable();
    ends.sort_unstable();
    let need = i128::try_from(need).ok()?;
    let (mut pool, mut slope, mut at) = (0i128, 0i128, i128::from(i64::MIN));
    let (mut i, mut k) = (0, 0);
    while k < ends.len() {
        // The next breakpoint: a start, or an end (at a tie either order gives the same pool).
        let (next, change) = match starts.get(i) {
            Some(&s) if s <= ends[k] => {
                i += 1;
                (s, 1)
            }
            _ => {
                k += 1;
                (ends[k - 1], -1)
            }
        };
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
        slope += change;
    }
    // Past the last breakpoint every shard is full; `pool` is the sum of the bursts.
    (need <= pool).then(|| u64::try_from(at.max(0)).unwrap_or(u64::MAX))
}

/// The breakpoints of shards given as `(state, burst in units)` (at most 2^63 − 1 each, the
/// quota's range, so every breakpoint fits an `i64`), written into `starts` and `ends`.
pub(super) fn breakpoints(
    shards: impl Iterator<Item = (u64, u64)>,
    starts: &mut [i64],
    ends: &mut [i64],
) {
    for ((state, burst), (s, e)) in shards.zip(starts.iter_mut().zip(ends.iter_mut())) {
        let state = i64::try_from(state).unwrap_or(i64::MAX);
        *s = state - i64::try_from(burst).unwrap_or(i64::MAX);
        *e = state;
    }
}

#[cfg(test)]
mod tests {
    use super::{breakpoints, first_reaching};
    use alloc::vec::Vec;

    fn first(shards: &[(u64, u64)], need: u128) -> Option<u64> {
        let (mut starts, mut ends) = (alloc::vec![0; shards.len()], alloc::vec![0; shards.len()]);
        breakpoints(shards.iter().copied(), &mut starts, &mut ends);
        first_reaching(&mut starts, &mut ends, need)
    }

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
            // The pool at `e`, shard by shard: clamp(e + b − s, 0, b).
            let at = |e: u64| -> u128 {
                shards
                    .iter()
                    .map(|&(s, b)| u128::from((e + b).saturating_sub(s).min(b)))
                    .sum()
            };
            for need in 1..=total + 1 {
                let want = (0..=60u64).find(|&e| at(e) >= need);
                assert_eq!(first(&shards, need), want, "{shards:?} need {need}");
            }
        }
    }

    #[test]
    fn full_shards_earn_nothing() {
        // Two shards of burst 4: one full (state 0), one empty at e = 10 (state 14).
        let shards = [(0u64, 4u64), (14, 4)];
        assert_eq!(first(&shards, 4), Some(0));
        assert_eq!(first(&shards, 5), Some(11));
        assert_eq!(first(&shards, 8), Some(14));
        assert_eq!(first(&shards, 9), None);
    }
}
