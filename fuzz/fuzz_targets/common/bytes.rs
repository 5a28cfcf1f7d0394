//! The fuzz targets' input reader (one home, included by path by each target).

/// A little-endian reader over the fuzzer's bytes; missing bytes read as zero.
pub struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    /// The next 8 bytes as a little-endian `u64` (zero-padded at the end of the input).
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let n = self.0.len().min(8);
        b[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        u64::from_le_bytes(b)
    }

    /// The next byte, or `None` at the end of the input.
    pub fn u8(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }
}
