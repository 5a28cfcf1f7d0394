//! The 128-bit state word of [`Smooth`](super::Smooth) (layout: the table on `Smooth::state`)
//! and the parameter slots' raw form.

use super::fixed::{pow2, FIXED_BITS, MAX_FIXED, MAX_MICROS};
use super::guava::{Params, State};

impl Params {
    pub(super) fn to_raw(self) -> [u64; 6] {
        [
            self.stable.to_bits(),
            self.max.to_bits(),
            self.threshold.to_bits(),
            self.slope.to_bits(),
            self.cool_down.to_bits(),
            self.frac_bits as i64 as u64,
        ]
    }

    pub(super) fn from_raw(raw: [u64; 6]) -> Params {
        Params {
            stable: f64::from_bits(raw[0]),
            max: f64::from_bits(raw[1]),
            threshold: f64::from_bits(raw[2]),
            slope: f64::from_bits(raw[3]),
            cool_down: f64::from_bits(raw[4]),
            // Only ever written from an `i32` in -961..=1000.
            frac_bits: raw[5] as i64 as i32,
        }
    }

    /// `f64` permits → fixed point, rounded toward the stricter limiter (down when bursty, up
    /// when warming up, so no wait is shorter than Guava's); NaN and negatives → 0.
    pub(super) fn units_of(&self, permits: f64) -> u128 {
        let v = permits * pow2(self.frac_bits);
        if v.is_nan() || v <= 0.0 {
            return 0;
        }
        // `v` is below 2^74 (the field holds `max`); at or above 2^52 it is already whole.
        let whole = v as u128;
        let bursty = self.threshold == 0.0 && self.slope == 0.0;
        let up = u128::from(!bursty && v > whole as f64);
        whole.saturating_add(up).min(MAX_FIXED)
    }

    /// Fixed point → `f64`, exactly (see `Smooth`'s docs).
    pub(super) fn permits_of(&self, units: u128) -> f64 {
        units as f64 * pow2(-self.frac_bits)
    }
}

/// The next free time sits above the stored permits and the epoch bit.
pub(super) const NEXT_SHIFT: u32 = FIXED_BITS as u32 + 1;
/// The stored-permits field, in place (bits 74..1).
pub(super) const STORED_MASK: u128 = MAX_FIXED << 1;

pub(super) fn decode(w: u128, p: &Params) -> State {
    State {
        next: (w >> NEXT_SHIFT) as u64,
        stored: p.permits_of((w & STORED_MASK) >> 1),
    }
}

pub(super) fn encode(s: State, p: &Params, epoch: u128) -> u128 {
    (u128::from(s.next.min(MAX_MICROS)) << NEXT_SHIFT) | (p.units_of(s.stored) << 1) | epoch
}

#[cfg(test)]
mod tests {
    use super::super::fixed::frac_bits_for;
    use super::*;

    #[test]
    fn fixed_point_round_trips_every_f64_near_max() {
        for max in [1.0, 5.0, 7.25, 1e-9, 3e12, 1.7e300, 1e-280] {
            let p = Params {
                stable: 1.0,
                max,
                threshold: 0.0,
                slope: 0.0,
                cool_down: 1.0,
                frac_bits: frac_bits_for(max),
            };
            assert_eq!(p.permits_of(p.units_of(max)), max, "max {max:e}");
            assert!(p.units_of(max) <= MAX_FIXED);
            let mut x = max;
            for _ in 0..40 {
                x *= 0.7731;
                if x < max / 2097152.0 {
                    break;
                }
                assert_eq!(p.permits_of(p.units_of(x)), x, "max {max:e} x {x:e}");
            }
            let tiny = max / 1e6;
            let err = (p.permits_of(p.units_of(tiny)) - tiny).abs();
            assert!(err <= max * pow2(-74), "max {max:e} err {err:e}");
        }
    }
}
