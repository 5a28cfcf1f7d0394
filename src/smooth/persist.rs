//! [`Smooth`]'s saved state (feature `persist`): a `SMOOTH` frame with the mode, the derived
//! parameters, the next free time relative to the save's reading and the stored permits.

use super::fixed::MAX_MICROS;
use super::guava::{Mode, Params, State};
use super::Smooth;
use crate::clock::Clock;
use crate::persist::format::{kind, Cursor, Limiter, Payload};
use crate::persist::{inherent_persist, sealed, RestoreError};

/// The mode's tag and its two parameters (`f64` bit patterns).
fn mode_words(mode: Mode) -> (u8, u64, u64) {
    match mode {
        Mode::Bursty { max_burst_seconds } => (1, max_burst_seconds.to_bits(), 0),
        Mode::WarmingUp {
            warmup_micros,
            cold_factor,
        } => (2, warmup_micros.to_bits(), cold_factor.to_bits()),
    }
}

inherent_persist!(impl[C: Clock] Smooth<C>);

impl<C: Clock> sealed::OneFrame for Smooth<C> {
    const LIMITER: Limiter = Limiter::Smooth;
    const KIND: u8 = kind::SMOOTH;
    /// The saved parameters (`Params::to_raw`), the next free time relative to the save's
    /// reading (µs), the stored permits, and whether the saving limiter had this one's mode.
    type Saved = ([u64; 6], i64, f64, bool);

    fn payload(&self) -> Payload {
        let now = self.micros_at(self.clock().now());
        let (state, params) = self.update(|s, p| (None, (s, *p)));
        let (tag, a, b) = mode_words(self.mode);
        let mut p = Payload::default();
        p.u8(tag).u64(a).u64(b);
        for word in params.to_raw() {
            p.u64(word);
        }
        // Both below 2^53: the difference fits.
        p.i64(state.next as i64 - now as i64)
            .u64(state.stored.to_bits());
        p
    }

    fn decode(&self, c: &mut Cursor<'_>) -> Result<Self::Saved, RestoreError> {
        let (tag, _, _) = (c.u8()?, c.u64()?, c.u64()?);
        let same_mode = tag == mode_words(self.mode).0;
        let mut raw = [0u64; 6];
        for word in &mut raw {
            *word = c.u64()?;
        }
        let (old, next_rel) = (Params::from_raw(raw), c.i64()?);
        let stored = f64::from_bits(c.u64()?);
        let sane = |x: f64| x.is_finite() && x >= 0.0;
        if !(tag == 1 || tag == 2)
            || !sane(old.max)
            || !sane(stored)
            || stored > old.max
            || !(old.cool_down > 0.0 || old.max == 0.0)
            || next_rel.unsigned_abs() > MAX_MICROS
        {
            return Err(RestoreError::Corrupt("invalid Smooth parameters"));
        }
        Ok((raw, next_rel, stored, same_mode))
    }

    /// As Guava's arithmetic would have carried the state through the downtime: the next free
    /// time moves that much closer, and idle time past it stores permits. Saved at another rate,
    /// the stored permits are rescaled as [`set_rate`](Smooth::set_rate) does. Saved in the
    /// other mode, they meant the opposite (a burst to hand out, or how cold the limiter is):
    /// only the queue is carried, and the stored permits are this mode's strictest.
    fn apply(&self, (raw, next_rel, stored, same_mode): Self::Saved, down: u64) {
        let old = Params::from_raw(raw);
        let down = i128::from(down / 1000);
        let now = self.micros_at(self.clock().now());
        self.update(|cur, p| {
            // The saved next free time on this limiter's clock (before its origin if negative).
            let next = i128::from(now) + i128::from(next_rel) - down;
            let mut s = State {
                next: next.clamp(0, i128::from(MAX_MICROS)) as u64,
                stored,
            };
            if next < i128::from(now) && (next < 0 || old != *p) {
                // Idle since before the origin, or about to be rescaled: brought up to `now`
                // first, as Guava's `resync` (and `set_rate`) would at this reading.
                s.next = now;
                if old.max > 0.0 {
                    let sum = stored + (i128::from(now) - next) as f64 / old.cool_down;
                    s.stored = if sum < old.max { sum } else { old.max };
                } else {
                    s.stored = 0.0;
                }
            }
            if !same_mode {
                s.stored = self.mode.strictest(p);
            } else if old != *p {
                s.stored = self.mode.rescale(s.stored, &old, p).min(p.max);
            }
            // A queue is never shortened.
            s.next = s.next.max(cur.next);
            // The restored permits in a limiter as built; else the stricter of the two at this
            // reading, so restoring twice, or into a limiter in use, hands nothing out again.
            let built = self.mode.strictest(p);
            if cur.next != 0 || p.units_of(cur.stored) != p.units_of(built) {
                let mut mine = cur;
                mine.resync(now, p);
                s.resync(now, p);
                s.stored = match self.mode {
                    Mode::Bursty { .. } => s.stored.min(mine.stored),
                    Mode::WarmingUp { .. } => s.stored.max(mine.stored),
                };
            }
            (Some(s), ())
        });
    }
}
