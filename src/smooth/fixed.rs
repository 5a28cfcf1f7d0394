//! The widths of [`Smooth`](super::Smooth)'s word fields and the stored permits' exponent.

/// Width of the next-free-time field: 2^53 µs is 285 years after creation.
pub(super) const MICROS_BITS: u32 = 53;
/// The largest next free time (and the largest clock reading, in µs since creation).
pub(super) const MAX_MICROS: u64 = (1 << MICROS_BITS) - 1;
/// Width of the stored-permits field.
pub(super) const FIXED_BITS: i32 = 74;
/// The largest stored-permits value, in units.
pub(super) const MAX_FIXED: u128 = (1 << FIXED_BITS) - 1;

/// `2^e` for `e` in `-1022..=1023`, exactly.
pub(super) fn pow2(e: i32) -> f64 {
    f64::from_bits(((1023 + e) as u64) << 52)
}

/// The largest `F` (within `-950..=1022`) such that `max · 2^F < 2^74`.
pub(super) fn frac_bits_for(max: f64) -> i32 {
    if max.is_nan() || max <= 0.0 {
        return 0;
    }
    let biased = ((max.to_bits() >> 52) & 0x7ff) as i32;
    // `max < 2^b`: for a normal number b = exponent + 1; subnormals are below 2^-1022.
    let b = if biased == 0 { -1022 } else { biased - 1022 };
    (FIXED_BITS - b).clamp(-950, 1022)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_is_exact() {
        assert_eq!(pow2(0), 1.0);
        assert_eq!(pow2(10), 1024.0);
        assert_eq!(pow2(-1), 0.5);
        assert_eq!(pow2(1000) * pow2(-1000), 1.0);
    }
}
