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
    sort(starts);
    sort(ends);
    // Positions relative to the first start (every breakpoint is at or after it, and two
    // `i64`s differ by less than 2^64), so the walk multiplies `u64`s.
    let lo = *starts.first()?;
    let rel = |p: i64| p.wrapping_sub(lo) as u64;
    let (mut pool, mut slope, mut at) = (0u128, 0u64, 0u64);
    let (mut i, mut k) = (0, 0);
    while k < ends.len() {
        // The next breakpoint: a start, or an end (at a tie either order gives the same pool).
        let next = match starts.get(i) {
            Some(&s) if s <= ends[k] => {
                i += 1;
                rel(s)
            }
            _ => {
                k += 1;
                rel(ends[k - 1])
            }
        };
        if slope > 0 {
            let reach = pool + u128::from(slope) * u128::from(next - at);
            if reach >= need {
                // The pool crosses `need` on this segment: the first whole unit of `e`.
                let short = need - pool;
                let step = match u64::try_from(short) {
                    Ok(short) => u128::from(short.div_ceil(slope)),
                    Err(_) => short.div_ceil(u128::from(slope)),
                };
                let e = i128::from(lo) + i128::from(at) + step as i128;
                return Some(u64::try_from(e.max(0)).unwrap_or(u64::MAX));
            }
            pool = reach;
        }
        at = next;
        // Shards started and not yet full (the k-th end is never before the k-th start).
        slope = (i - k) as u64;
    }
    // Past the last breakpoint every shard is full; `pool` is the sum of the bursts.
    (need <= pool).then(|| u64::try_from(i128::from(lo) + i128::from(at)).unwrap_or(u64::MAX))
}

/// [`first_reaching`] in one pass without sorting, for the common case of a drained pool: if
/// once every shard has started to hold units (at `M`, the last start) none is full yet and
/// the pool, growing by one unit per shard per unit earned, reaches `need` before the first
/// shard is full (`m`, the first end), the answer is `M + ⌈(need − pool(M)) / n⌉`. `None`
/// when that does not hold: use [`first_reaching`].
pub(super) fn first_reaching_linear(
    shards: impl Iterator<Item = (u64, u64)>,
    need: u128,
) -> Option<u64> {
    let mut linear = Linear::default();
    for (state, burst) in shards {
        linear.add(state, burst);
    }
    linear.first_reaching(need)
}

/// [`first_reaching_linear`]'s pass, one shard at a time (a borrow feeds it the words its takes
/// leave, as it goes).
#[derive(Clone, Copy)]
pub(super) struct Linear {
    n: u64,
    last_start: i64,
    first_end: i64,
    /// The sum of the starts.
    sum: i128,
    /// Every state and burst added was within the quota's range (at most 2^63 − 1).
    in_range: bool,
}

impl Default for Linear {
    fn default() -> Linear {
        Linear {
            n: 0,
            last_start: i64::MIN,
            first_end: i64::MAX,
            sum: 0,
            in_range: true,
        }
    }
}

impl Linear {
    /// Adds a shard given as `(state, burst in units)`.
    #[inline]
    pub(super) fn add(&mut self, state: u64, burst: u64) {
        // Within the range, a start `state − burst` fits an `i64`; outside it the pass is
        // void (`first_reaching` answers `None`), so wrapping here is harmless.
        self.in_range &= (state | burst) <= i64::MAX as u64;
        let start = (state as i64).wrapping_sub(burst as i64);
        self.n += 1;
        self.last_start = self.last_start.max(start);
        self.first_end = self.first_end.min(state as i64);
        self.sum += i128::from(start);
    }

    /// The least `e >= 0` at which the shards added hold `need` units, if the one-pass form
    /// applies (see [`first_reaching_linear`]).
    #[inline]
    pub(super) fn first_reaching(&self, need: u128) -> Option<u64> {
        let (n, last_start) = (self.n, self.last_start);
        if !self.in_range || n == 0 {
            return None;
        }
        let at_last_start =
            u128::try_from(i128::from(n) * i128::from(last_start) - self.sum).ok()?;
        if at_last_start >= need {
            return None;
        }
        let short = need - at_last_start;
        let step = match u64::try_from(short) {
            Ok(short) => u128::from(div_ceil(short, n)),
            Err(_) => short.div_ceil(u128::from(n)),
        };
        let e = i128::from(last_start) + i128::try_from(step).ok()?;
        (e <= i128::from(self.first_end)).then(|| u64::try_from(e.max(0)).unwrap_or(u64::MAX))
    }
}

/// `⌈x / n⌉` for `n > 0`, by a shift when `n` is a power of two (every shard count
/// [`ShardedBucket::new`](super::ShardedBucket::new) picks on common core counts): a served
/// borrow computes it on its way out, where a division's latency would be most of the
/// arithmetic.
#[inline]
fn div_ceil(x: u64, n: u64) -> u64 {
    if n.is_power_of_two() {
        let k = n.trailing_zeros();
        (x >> k) + u64::from(x & (n - 1) != 0)
    } else {
        x.div_ceil(n)
    }
}

/// Sorts `v`: by insertion for the few breakpoints of a small bucket (cheaper than the general
/// sort's setup there), else `sort_unstable`.
fn sort(v: &mut [i64]) {
    if v.len() > 16 {
        v.sort_unstable();
        return;
    }
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && v[j - 1] > x {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
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
    use super::{breakpoints, first_reaching, first_reaching_linear};
    use alloc::vec::Vec;

    fn first(shards: &[(u64, u64)], need: u128) -> Option<u64> {
        let (mut starts, mut ends) = (alloc::vec![0; shards.len()], alloc::vec![0; shards.len()]);
        breakpoints(shards.iter().copied(), &mut starts, &mut ends);
        let general = first_reaching(&mut starts, &mut ends, need);
        // The one-pass form, where it applies, agrees.
        if let Some(e) = first_reaching_linear(shards.iter().copied(), need) {
            assert_eq!(Some(e), general, "{shards:?} need {need}");
        }
        general
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
    fn div_ceil_by_a_shift_matches_the_division() {
        for n in [1u64, 2, 3, 4, 7, 64, 1000, 1024] {
            for x in [
                0u64,
                1,
                2,
                63,
                64,
                65,
                1023,
                1024,
                1025,
                u64::MAX - 1,
                u64::MAX,
            ] {
                assert_eq!(super::div_ceil(x, n), x.div_ceil(n), "{x} / {n}");
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
