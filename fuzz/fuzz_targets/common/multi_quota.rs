//! The quotas of a `MultiBucket` target and their exact models (included by path by the
//! targets that drive one).

use std::time::Duration;
use tollgate::Quota;
use tollgate_testkit::model::Model;

use crate::bytes::Bytes;

/// A quota from the input, half of them exact; some tied to `first` (a multiple of its rate
/// over a multiple of its period, so that two quotas bind at once); with `small_bursts`, some
/// with a burst of 1 to 4; `None` if invalid.
pub fn quota(b: &mut Bytes<'_>, first: Option<Quota>, small_bursts: bool) -> Option<Quota> {
    let mode = b.u64();
    // Within the model's ranges: tokens < 2^34, period < 2^40 ns, burst < 2^12.
    let (mut tokens, mut per, mut burst) = (
        b.u64() % (1 << 34) + 1,
        b.u64() % (1 << 40) + 1,
        b.u64() % (1 << 12) + 1,
    );
    match (mode % 4, first) {
        (0 | 1, _) => tokens = 1 + (mode >> 8 & 1),
        (2, Some(f)) => {
            tokens = (f.tokens() * (1 + (mode >> 8) % 4)).min(1 << 34);
            per = (f.per().as_nanos() as u64 * (1 + (mode >> 16) % 64)).min(1 << 40);
        }
        _ => {}
    }
    if small_bursts && mode >> 24 & 1 == 0 {
        burst = 1 + burst % 4;
    }
    Quota::new(tokens, Duration::from_nanos(per), burst).ok()
}

/// The exact rational model of `q` (meaningful for exact quotas).
pub fn model_of(q: &Quota) -> Model {
    Model::new(q.tokens(), q.per().as_nanos() as u64, q.burst())
}
