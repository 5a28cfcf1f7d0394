//! Guava's `SmoothRateLimiter` transcribed with `f64` stored permits and `i64` micros: the
//! reference model `Smooth` is compared with (as `model.rs` is the bucket's), plus tollgate's one
//! documented `set_rate` deviation (see [`Reference::set_rate`]).

/// tollgate's largest next free time, 2^53 − 1 µs (where the deviation's 1 µs step stops).
pub const MAX_MICROS: i64 = (1 << 53) - 1;

/// Guava's `SmoothRateLimiter` transcribed with `f64` stored permits and `i64` micros, plus
/// tollgate's `set_rate` deviation: the reference `Smooth` must match wait for wait.
#[derive(Debug)]
pub struct Reference {
    pub warming: bool,
    pub stored: f64,
    pub max: f64,
    pub stable: f64,
    pub next: i64,
    pub max_burst_seconds: f64,
    pub warmup_micros: i64,
    pub cold_factor: f64,
    pub slope: f64,
    pub threshold: f64,
    /// The deviation's memory: the next free time of the state the last [`Reference::set_rate`]
    /// replaced, before its resync (`None` before the first call; creation does not count).
    pub retired_next: Option<i64>,
}

/// Java's `Math.min` for doubles (NaN-propagating).
pub fn java_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a <= b {
        a
    } else {
        b
    }
}

impl Reference {
    pub fn bursty(rate: f64, max_burst_seconds: f64) -> Reference {
        let mut r = Reference::empty(false);
        r.max_burst_seconds = max_burst_seconds;
        r.convert(rate, 0);
        r
    }

    pub fn warming(rate: f64, warmup_micros: i64, cold_factor: f64) -> Reference {
        let mut r = Reference::empty(true);
        r.warmup_micros = warmup_micros;
        r.cold_factor = cold_factor;
        r.convert(rate, 0);
        r
    }

    pub fn empty(warming: bool) -> Reference {
        Reference {
            warming,
            stored: 0.0,
            max: 0.0,
            stable: 0.0,
            next: 0,
            max_burst_seconds: 0.0,
            warmup_micros: 0,
            cold_factor: 0.0,
            slope: 0.0,
            threshold: 0.0,
            retired_next: None,
        }
    }

    /// Guava's `setRate` plus tollgate's documented deviation (`Smooth::set_rate`): after
    /// Guava's resync and rescale, a call that follows an earlier `set_rate` and finds the next
    /// free time at or before the one that earlier call replaced moves it on to that + 1 µs;
    /// then it remembers the next free time it replaced itself (before its resync). In effect,
    /// two `set_rate` calls with no request between them that moved the next free time move it
    /// on by 1 µs, where Guava leaves it.
    pub fn set_rate(&mut self, rate: f64, now: i64) {
        let replaced = self.next;
        self.convert(rate, now);
        if let Some(floor) = self.retired_next {
            if self.next <= floor {
                self.next = (floor + 1).min(MAX_MICROS);
            }
        }
        self.retired_next = Some(replaced);
    }

    /// Guava's `setRate` alone (also its constructors' first call): resync at the old rate, the
    /// new parameters, the stored permits rescaled.
    pub fn convert(&mut self, rate: f64, now: i64) {
        self.resync(now);
        self.stable = 1_000_000.0 / rate;
        let old = self.max;
        if self.warming {
            let w = self.warmup_micros as f64;
            let cold = self.stable * self.cold_factor;
            self.threshold = 0.5 * w / self.stable;
            self.max = self.threshold + 2.0 * w / (self.stable + cold);
            self.slope = (cold - self.stable) / (self.max - self.threshold);
            self.stored = if old == 0.0 {
                self.max
            } else {
                self.stored * self.max / old
            };
        } else {
            self.max = self.max_burst_seconds * rate;
            self.stored = if old == 0.0 {
                0.0
            } else {
                self.stored * self.max / old
            };
        }
    }

    pub fn cool_down(&self) -> f64 {
        if self.warming {
            self.warmup_micros as f64 / self.max
        } else {
            self.stable
        }
    }

    pub fn resync(&mut self, now: i64) {
        if now > self.next {
            let new_permits = (now - self.next) as f64 / self.cool_down();
            self.stored = java_min(self.max, self.stored + new_permits);
            self.next = now;
        }
    }

    pub fn stored_to_wait(&self, stored: f64, mut take: f64) -> i64 {
        if !self.warming {
            return 0;
        }
        let above = stored - self.threshold;
        let mut micros = 0i64;
        if above > 0.0 {
            let t = java_min(above, take);
            let length =
                (self.stable + above * self.slope) + (self.stable + (above - t) * self.slope);
            micros = (t * length / 2.0) as i64;
            take -= t;
        }
        micros.wrapping_add((self.stable * take) as i64)
    }

    pub fn reserve(&mut self, permits: u64, now: i64) -> i64 {
        self.resync(now);
        let moment = self.next;
        let req = permits as f64;
        let from_stored = java_min(req, self.stored);
        let fresh = req - from_stored;
        let wait = self
            .stored_to_wait(self.stored, from_stored)
            .wrapping_add((fresh * self.stable) as i64);
        self.next = self.next.saturating_add(wait);
        self.stored -= from_stored;
        (moment - now).max(0)
    }

    pub fn try_acquire(&mut self, permits: u64, timeout: i64, now: i64) -> Option<i64> {
        (self.next - timeout <= now).then(|| self.reserve(permits, now))
    }
}
