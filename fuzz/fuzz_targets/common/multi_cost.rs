//! The cost of a `MultiBucket` decision from the input (one home, included by path by the
//! targets that drive one, so that the same bytes choose the same cost in each).

/// Mostly small, sometimes the edges: 0, the `smallest` burst of the quotas and one above it,
/// the `burst` of a chosen quota and one above it. `x`'s low 3 bits pick the kind, bits 16 and
/// up the value within it.
pub fn multi_cost(x: u64, smallest: u64, burst: u64) -> u64 {
    match x % 8 {
        0..=3 => 1,
        4 => 1 + (x >> 16) % smallest.min(4),
        5 => (x >> 16) % (smallest + 2),
        6 => smallest,
        _ => [0, smallest + 1, burst, burst + 1][((x >> 16) % 4) as usize],
    }
}
