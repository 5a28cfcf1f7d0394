//! A clock that implements only `now` (as the guide shows for bringing your own): a dropped
//! `until_ready` future holds nothing of its task. Alone in its test binary, since its wakes go
//! to the process-wide timer thread.
#![cfg(feature = "std")]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;
use tollgate::Timer;
use tollgate::{Bucket, Clock, Quota};
use tollgate_testkit::wakers::Count;

/// Only `now`: every other method is the default.
#[derive(Clone, Default)]
struct Ticks(Arc<AtomicU64>);

impl Clock for Ticks {
    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Timer for Ticks {}

/// 1,000 futures polled once and dropped: their reservations come back, and the timer's
/// entries (kept until their deadlines: the default registration cannot be cancelled) hold no
/// clone of the task's waker (2 clones are the test's own), since with tokio a waker keeps its
/// whole task.
#[test]
fn dropped_futures_hold_nothing_of_their_task() {
    let (count, waker) = Count::waker();
    let mut cx = Context::from_waker(&waker);
    let bucket = Bucket::with_clock(
        Quota::new(1, Duration::from_secs(600), 1).unwrap(),
        Ticks::default(),
    );
    bucket.try_acquire(1).unwrap();
    for _ in 0..1000 {
        let mut fut = pin!(bucket.until_ready(1));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(
        Arc::strong_count(&count),
        2,
        "the test's counter and its waker only"
    );
    assert_eq!(bucket.reserve(1).unwrap().delay(), Duration::from_secs(600));
    assert_eq!(count.get(), 0, "no wake-up yet");
}
