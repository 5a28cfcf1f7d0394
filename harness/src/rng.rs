//! [`SplitMix64`]: the seeded generator the runner draws keys from (the criterion bench draws
//! its keys the same way).

/// SplitMix64: a tiny, seedable generator whose every output is a well-mixed bijection of its
/// state (quality matters little for drawing keys; determinism does).
///
/// ```
/// use tollgate_bench::rng::SplitMix64;
/// let mut a = SplitMix64(7);
/// let mut b = SplitMix64(7);
/// assert_eq!(a.next(), b.next());
/// assert_ne!(a.next(), SplitMix64(7).next());
/// ```
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    ///
    /// ```
    /// assert_eq!(tollgate_bench::rng::SplitMix64(0).next(), 0xE220_A839_7B1D_CDAF);
    /// ```
    #[inline]
    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
