//! Async wake-ups: one registration per waiting future, released when it is dropped; the
//! frozen `ManualClock`; the shared timer thread's queue. Deterministic (`ManualClock`) except
//! the one test at the end that uses the process-wide timer thread.
#![cfg(feature = "std")]

use std::future::Future;
use std::pin::pin;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::Duration;
use tollgate::Timer;
use tollgate::{Bucket, Clock, ManualClock, Quota, StdClock, UntilReady, WakeRegistration};

use quotas::{ms, quota};
use tollgate_testkit::quotas;
use tollgate_testkit::wakers;
use wakers::{block_on, Count};

/// A future waiting for one token of `bucket`, polled once (pending).
fn waiting<'a, C: Timer>(bucket: &'a Bucket<C>, waker: &Waker) -> Pin<Box<UntilReady<'a, C>>> {
    let mut fut = Box::pin(bucket.until_ready(1));
    assert_eq!(
        fut.as_mut().poll(&mut Context::from_waker(waker)),
        Poll::Pending
    );
    fut
}

/// An empty bucket on a frozen clock: the next token is due at 100 ms.
fn frozen_empty() -> (ManualClock, Bucket<ManualClock>) {
    let clock = ManualClock::new_frozen();
    let bucket = Bucket::with_clock(quota(10, 1), clock.clone());
    bucket.try_acquire(1).unwrap();
    (clock, bucket)
}

#[test]
fn spurious_polls_keep_one_registration_and_a_drop_releases_it() {
    let (clock, bucket) = frozen_empty();
    let (count, waker) = Count::waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut fut = pin!(bucket.until_ready(1));
        for _ in 0..100_000 {
            assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
            assert_eq!(clock.pending_wakes(), 1);
        }
        // A clone of the same waker `will_wake` the same task: still one registration.
        let clone = waker.clone();
        assert_eq!(
            fut.as_mut().poll(&mut Context::from_waker(&clone)),
            Poll::Pending
        );
        assert_eq!(clock.pending_wakes(), 1);
        assert!(format!("{fut:?}").contains("WakeRegistration"));
    }
    assert_eq!(
        clock.pending_wakes(),
        0,
        "the dropped future left its waker queued"
    );
    clock.advance(ms(1000));
    assert_eq!(count.get(), 0, "a dropped future was woken");
    // The drop also cancelled the reservation.
    assert_eq!(bucket.available(), 1);
}

#[test]
fn the_wake_arrives_at_the_deadline_and_only_then() {
    let (clock, bucket) = frozen_empty();
    let (count, waker) = Count::waker();
    let mut cx = Context::from_waker(&waker);
    let mut fut = waiting(&bucket, &waker);
    assert_eq!(clock.now(), 0, "a frozen clock does not advance itself");
    clock.advance(ms(99));
    assert_eq!(count.get(), 0);
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(ms(1));
    assert_eq!(count.get(), 1);
    assert_eq!(clock.pending_wakes(), 0);
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(ms(100))));
    assert_eq!(count.get(), 1);
}

#[test]
fn a_different_waker_re_arms_and_the_old_one_is_not_woken() {
    let (clock, bucket) = frozen_empty();
    let (old, old_waker) = Count::waker();
    let (new, new_waker) = Count::waker();
    let mut fut = waiting(&bucket, &old_waker);
    // The task moved (another executor, another task): re-armed for the new waker only.
    assert_eq!(
        fut.as_mut().poll(&mut Context::from_waker(&new_waker)),
        Poll::Pending
    );
    assert_eq!(clock.pending_wakes(), 1);
    clock.advance(ms(100));
    assert_eq!((old.get(), new.get()), (0, 1));
}

#[test]
fn an_early_wake_re_arms() {
    // The clock is set back after the deadline was reached: the wake-up came, but the future is
    // not ready, so it must register again rather than wait for a wake that will not come.
    let (clock, bucket) = frozen_empty();
    let (count, waker) = Count::waker();
    let mut cx = Context::from_waker(&waker);
    let mut fut = waiting(&bucket, &waker);
    clock.advance(ms(100));
    assert_eq!(count.get(), 1);
    clock.set(ms(50));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    assert_eq!(clock.pending_wakes(), 1);
    clock.set(ms(100));
    assert_eq!(count.get(), 2);
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(ms(100))));
}

/// A user clock that plugs in its own fire-and-forget timer (here: it records the wakers and
/// never fires on its own) and counts how often it is asked.
#[derive(Clone, Default)]
struct Hooked {
    time: ManualClock,
    calls: Arc<AtomicUsize>,
    wakers: Arc<std::sync::Mutex<Vec<Waker>>>,
}

impl Clock for Hooked {
    fn now(&self) -> u64 {
        self.time.now()
    }
}

impl Timer for Hooked {
    fn wake_after(&self, _: Duration, waker: &Waker) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.wakers.lock().unwrap().push(waker.clone());
    }
}

#[test]
fn a_user_wake_after_hook_is_called_once_per_wait_not_per_poll() {
    let clock = Hooked::default();
    let bucket = Bucket::with_clock(quota(10, 1), clock.clone());
    bucket.try_acquire(1).unwrap();
    let (count, waker) = Count::waker();
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(bucket.until_ready(1));
    for _ in 0..100_000 {
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    }
    assert_eq!(clock.calls.load(Ordering::SeqCst), 1);
    // The hook fires early (its time source runs ahead of `now`): the future registers again.
    let fired: Vec<Waker> = clock.wakers.lock().unwrap().drain(..).collect();
    fired.into_iter().for_each(Waker::wake);
    assert_eq!(count.get(), 1, "the hook's waker wakes the task");
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    assert_eq!(clock.calls.load(Ordering::SeqCst), 2);
    clock.time.advance(ms(100));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(ms(100))));
}

#[test]
fn an_advancing_manual_clock_moves_time_for_every_bucket_sharing_it() {
    let clock = ManualClock::new();
    let a = Bucket::with_clock(quota(1, 1), clock.clone());
    let b = Bucket::with_clock(quota(1, 1), clock.clone());
    a.try_acquire(1).unwrap();
    b.try_acquire(1).unwrap();
    assert_eq!(block_on(a.until_ready(1)), Ok(ms(1000)));
    assert_eq!(clock.now(), 1_000_000_000);
    assert_eq!(b.try_acquire(1), Ok(()), "a's wait refilled b");
    // A frozen clock does not: b stays empty while a waits.
    let clock = ManualClock::new_frozen();
    let a = Bucket::with_clock(quota(1, 1), clock.clone());
    let b = Bucket::with_clock(quota(1, 1), clock.clone());
    a.try_acquire(1).unwrap();
    b.try_acquire(1).unwrap();
    let (_, waker) = Count::waker();
    let _fut = waiting(&a, &waker);
    assert_eq!(clock.now(), 0);
    assert!(b.try_acquire(1).is_err());
}

/// Threads arming the same instant on an advancing clock (futures of buckets sharing it, each
/// polled on its own thread) leave it at that instant: `register_wake_at` moves the clock to
/// `at`, it does not add the wait each caller read (two callers that read the same time would
/// both add it). A race, so many rounds.
#[test]
fn concurrent_wake_ups_at_one_instant_move_an_advancing_clock_to_that_instant_only() {
    const THREADS: usize = 4;
    for round in 0..2000u64 {
        let clock = ManualClock::new();
        let at = 1_000 + round;
        let barrier = std::sync::Barrier::new(THREADS);
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    let (count, waker) = Count::waker();
                    barrier.wait();
                    assert!(clock.register_wake_at(at, &waker).is_fired());
                    assert_eq!(count.get(), 1);
                });
            }
        });
        assert_eq!(
            clock.now(),
            at,
            "round {round}: the clock went past the instant"
        );
    }
}

#[test]
fn frozen_clock_edges() {
    let clock = ManualClock::new_frozen();
    assert!(clock.is_frozen() && !ManualClock::new().is_frozen());
    assert!(format!("{clock:?}").contains("frozen: true"));
    let (count, waker) = Count::waker();
    // Zero: due now, woken at once, nothing queued.
    let r = clock.register_wake(Duration::ZERO, &waker);
    assert!(r.is_fired());
    assert_eq!((count.get(), clock.pending_wakes()), (1, 0));
    // The end of time: queued until the clock reaches u64::MAX ns, never overflowing.
    let r = clock.register_wake(Duration::MAX, &waker);
    assert!(!r.is_fired());
    clock.set(Duration::from_nanos(u64::MAX - 1));
    assert!(!r.is_fired());
    clock.advance(Duration::MAX);
    assert!(r.is_fired());
    assert_eq!(count.get(), 2);
    // Moving back wakes nothing; wake_after (fire and forget) stays queued until due.
    clock.set(Duration::ZERO);
    clock.wake_after(ms(10), &waker);
    clock.set(ms(5));
    assert_eq!((count.get(), clock.pending_wakes()), (2, 1));
    clock.set(ms(10));
    assert_eq!((count.get(), clock.pending_wakes()), (3, 0));
    // Clones share the waiters.
    let other = clock.clone();
    let r = other.register_wake(ms(1), &waker);
    assert_eq!(clock.pending_wakes(), 1);
    drop(r);
    assert_eq!(clock.pending_wakes(), 0);
    // The advancing clock never queues.
    let plain = ManualClock::new();
    assert!(plain.register_wake(ms(1), &waker).is_fired());
    assert_eq!((plain.pending_wakes(), plain.now()), (0, 1_000_000));
}

#[test]
fn a_frozen_clock_blocks_sleep_until_another_thread_moves_it() {
    let clock = ManualClock::new_frozen();
    let bucket = Bucket::with_clock(quota(10, 1), clock.clone());
    bucket.try_acquire(1).unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| bucket.acquire(1));
        // Move the clock in steps until the waiter is done; it cannot finish before 100 ms.
        while !waiter.is_finished() {
            while clock.pending_wakes() == 0 && !waiter.is_finished() {
                thread::yield_now();
            }
            if clock.now() < 100_000_000 {
                clock.advance(ms(25));
            } else {
                thread::yield_now();
            }
        }
        assert_eq!(waiter.join().unwrap(), Ok(ms(100)));
    });
    assert_eq!(clock.now(), 100_000_000);
}

#[test]
fn the_shared_timer_holds_one_entry_per_live_future() {
    // The only test in this binary that uses the process-wide timer, so its queue is ours.
    let clock = StdClock::new();
    let bucket = Bucket::with_clock(Quota::new(1, Duration::from_secs(3600), 1).unwrap(), clock);
    bucket.try_acquire(1).unwrap();
    let (count, waker) = Count::waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut fut = pin!(bucket.until_ready(1));
        for _ in 0..100_000 {
            assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
        }
        assert_eq!(WakeRegistration::timer_queue_len(), 1);
        let mut other = pin!(bucket.until_ready(1));
        assert_eq!(other.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(WakeRegistration::timer_queue_len(), 2);
    }
    assert_eq!(WakeRegistration::timer_queue_len(), 0);
    assert_eq!(count.get(), 0);
    // And the wake still arrives: a 50/s bucket's second token, 20 ms later.
    let fast = Bucket::with_clock(quota(50, 1), clock);
    fast.try_acquire(1).unwrap();
    let waited = block_on(fast.until_ready(1)).unwrap();
    assert!(waited <= ms(20), "{waited:?}");
    assert_eq!(WakeRegistration::timer_queue_len(), 0);
}

/// A waker that owns another registration on the same clock (as a task owns its futures).
#[allow(dead_code)] // held only for its drop
struct Owner(std::sync::Mutex<Option<WakeRegistration>>);
impl std::task::Wake for Owner {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn dropping_the_last_waker_inside_a_cancel_does_not_deadlock() {
    let clock = ManualClock::new_frozen();
    let (_, plain) = Count::waker();
    let inner = clock.register_wake(ms(10), &plain);
    let owner = Waker::from(Arc::new(Owner(std::sync::Mutex::new(Some(inner)))));
    let outer = clock.register_wake(ms(10), &owner);
    drop(owner); // the queue now holds the last reference to the owner
    assert_eq!(clock.pending_wakes(), 2);
    // Cancelling `outer` drops the owner, which cancels `inner`: both locks taken in turn.
    drop(outer);
    assert_eq!(clock.pending_wakes(), 0);
}
