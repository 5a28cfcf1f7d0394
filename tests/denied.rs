//! `Denied::retry_after_secs`: the HTTP `Retry-After` value — rounded up, at least 1, and
//! saturating (never overflowing) for the longest waits the crate reports.

use std::time::Duration;
use tollgate::Denied;

fn secs(d: Duration) -> Option<u64> {
    Denied::RetryAfter(d).retry_after_secs()
}

#[test]
fn rounds_up_with_a_minimum_of_one() {
    assert_eq!(secs(Duration::ZERO), Some(1));
    assert_eq!(secs(Duration::from_nanos(1)), Some(1));
    assert_eq!(secs(Duration::from_millis(999)), Some(1));
    assert_eq!(secs(Duration::from_secs(1)), Some(1));
    assert_eq!(secs(Duration::new(1, 1)), Some(2));
    assert_eq!(secs(Duration::new(41, 999_999_999)), Some(42));
    assert_eq!(Denied::ExceedsBurst.retry_after_secs(), None);
}

#[test]
fn saturates_at_u64_max_seconds() {
    // `Duration::MAX` is what the crate returns for "not within the horizon"; it must map to the
    // largest value, never wrap to a small one (1 s) or panic.
    assert_eq!(secs(Duration::MAX), Some(u64::MAX));
    assert_eq!(secs(Duration::new(u64::MAX, 999_999_999)), Some(u64::MAX));
    assert_eq!(secs(Duration::new(u64::MAX, 1)), Some(u64::MAX));
    assert_eq!(secs(Duration::from_secs(u64::MAX)), Some(u64::MAX));
    assert_eq!(secs(Duration::new(u64::MAX - 1, 1)), Some(u64::MAX));
    assert_eq!(secs(Duration::from_secs(u64::MAX - 1)), Some(u64::MAX - 1));
}
