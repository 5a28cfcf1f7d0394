//! A quota read from the fuzzer's bytes (included by path by the targets of one quota).

use std::time::Duration;
use tollgate::Quota;

use crate::bytes::Bytes;

/// A quota from the input, half of them exact (reduced numerator 1 or 2), within the ranges of
/// the model and the window checkers (tokens < 2^34, period < 2^40 ns, burst < 2^12, so that
/// their i128 products stay in range); `None` if invalid.
pub fn quota(b: &mut Bytes<'_>) -> Option<Quota> {
    let mode = b.u64();
    let (mut tokens, per, burst) = (
        b.u64() % (1 << 34) + 1,
        b.u64() % (1 << 40) + 1,
        b.u64() % (1 << 12) + 1,
    );
    if mode & 1 == 0 {
        tokens = 1 + (mode >> 1 & 1);
    }
    Quota::new(tokens, Duration::from_nanos(per), burst).ok()
}
