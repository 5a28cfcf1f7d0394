//! A tiny seeded xorshift* generator: deterministic randomness for the integration tests.

/// xorshift64*; never seed it with 0.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits (named as the generators it replaces; not an `Iterator`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A uniform `f64` in `[0, 1)` (53 random bits).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
