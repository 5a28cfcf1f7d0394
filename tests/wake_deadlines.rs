//! Wake-ups come at the due instant even after a stale reading, and a dropped future leaves
//! nothing queued (`CoarseClock` included). Deterministic: time from `ManualClock`
//! (frozen where a wake-up is checked), interleavings from `StallClock`'s gates. The one test
//! that touches the process-wide timer thread is alone in using it in this binary.
#![cfg(feature = "std")]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};
use tollgate::{
    Bucket, Clock, CoarseClock, Denied, ManualClock, Quota, UntilReady, WakeRegistration,
};

use quotas::{ms, quota};
use stall::{arm, Gate, Stall, StallClock};
use tollgate_testkit::quotas;
use tollgate_testkit::stall;
use tollgate_testkit::wakers;
use wakers::Count;

/// Waits (at most 60 s) until `clock` holds `n` wakers.
fn wait_pending(clock: &ManualClock, n: usize) {
    let start = Instant::now();
    while clock.pending_wakes() != n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never registered"
        );
        thread::yield_now();
    }
}

/// **Leak.** `UntilReady`'s docs: "Dropping the future drops (cancels) it, so nothing stays
/// queued for a future that no longer exists"; `Clock::register_wake`: "a clock that follows
/// `std::time::Instant` should" override it with the cancellable timer registration.
/// A dropped `until_ready` future on a `CoarseClock` leaves nothing in the shared timer's queue.
/// (`CoarseClock` did not override `register_wake`, so its futures went through the
/// fire-and-forget `wake_after`: a dropped future left its entry — and a clone of its task's
/// waker, which keeps the task alive — queued until the deadline, up to an hour. A server that
/// wraps `until_ready` in a timeout piled up one entry per abandoned request.)
#[test]
fn coarse_clock_until_ready_dropped_leaves_nothing_in_the_timer() {
    // The coarse clock never refreshes during the test (1 h interval): it reads 0 throughout.
    let clock = CoarseClock::with_source(ManualClock::new(), Duration::from_secs(3600)).unwrap();
    let bucket = Bucket::with_clock(
        Quota::new(1, Duration::from_secs(3600), 1).unwrap(),
        clock.clone(),
    );
    bucket.try_acquire(1).unwrap();
    let (count, waker) = Count::waker();
    assert_eq!(Arc::strong_count(&count), 2); // `count` and `waker`
    {
        let mut fut = Box::pin(bucket.until_ready(1));
        assert_eq!(
            fut.as_mut().poll(&mut Context::from_waker(&waker)),
            Poll::Pending
        );
    }
    // The drop cancelled the reservation (the next token is due at 1 h again, not 2 h)...
    assert_eq!(
        bucket.try_acquire(1),
        Err(Denied::RetryAfter(Duration::from_secs(3600)))
    );
    // ...but not the wake-up: the timer still holds the task's waker.
    assert_eq!(
        WakeRegistration::timer_queue_len(),
        0,
        "a dropped future's wake-up stays queued in the shared timer"
    );
    assert_eq!(
        Arc::strong_count(&count),
        2,
        "the timer keeps a clone of a dropped future's waker"
    );
}

/// **No lost wake-up.** A poll that stalls (here: gated) between its clock reading and its
/// registration while the time moves on is still woken at `until`: it registers the instant
/// (`Clock::register_wake_at`). (It registered the relative duration `until − reading`, which
/// the clock turned back into a deadline from a later reading of its own: late by the stall,
/// and on a frozen `ManualClock` never woken when its tokens came due.)
#[test]
fn until_ready_polled_with_a_stale_reading_is_woken_when_due() {
    let frozen = ManualClock::new_frozen();
    let bucket = Bucket::with_clock(quota(10, 1), StallClock::new(frozen.clone()));
    bucket.try_acquire(1).unwrap(); // the next token is due at 100 ms
    let (count, waker) = Count::waker();
    let gate = Gate::new();
    let mut fut: Pin<Box<UntilReady<'_, _>>> = thread::scope(|s| {
        let (g, w, b) = (gate.clone(), waker.clone(), &bucket);
        let poller = s.spawn(move || {
            // Reading 1 (the reservation) at 0 as the clock reads; reading 2 (before the
            // registration) taken at 0, then stalled.
            arm([Stall::Reading(0), Stall::Gate(g)]);
            let mut fut = Box::pin(b.until_ready(1));
            let poll = fut.as_mut().poll(&mut Context::from_waker(&w));
            assert_eq!(poll, Poll::Pending);
            fut
        });
        gate.wait_reached();
        frozen.advance(ms(50)); // time moves on while the poll is stalled
        gate.open();
        poller.join().unwrap()
    });
    assert_eq!(frozen.pending_wakes(), 1);
    frozen.advance(ms(50)); // 100 ms: the token is due
    let woken_when_due = count.get();
    // The future is ready if anyone polls it; nobody will, without the wake-up.
    assert_eq!(
        fut.as_mut().poll(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(ms(100)))
    );
    assert_eq!(
        woken_when_due, 1,
        "the future was not woken when its tokens came due (registered for 150 ms, not 100 ms)"
    );
}

/// **No oversleep (blocking).** `Bucket::try_acquire_for` (and `acquire`) stalled between its
/// clock reading and its CAS wakes at the due instant. (It slept `due − now` from the *old*
/// reading, the whole wait again after the stall: on a frozen `ManualClock` until the clock
/// reached `due + stall`, so a test moving the clock to the due instant waited forever; on a
/// real clock up to the stall too long.)
#[test]
fn acquire_after_a_stale_reading_wakes_at_the_due_instant() {
    let frozen = ManualClock::new_frozen();
    let bucket = Bucket::with_clock(quota(10, 1), StallClock::new(frozen.clone()));
    bucket.try_acquire(1).unwrap(); // the next token is due at 100 ms
    let gate = Gate::new();
    let (woken_when_due, waited) = thread::scope(|s| {
        let (g, b) = (gate.clone(), &bucket);
        let waiter = s.spawn(move || {
            arm([Stall::Gate(g)]);
            b.acquire(1)
        });
        gate.wait_reached();
        frozen.advance(ms(50)); // time moves on between the reading and the CAS
        gate.open();
        wait_pending(&frozen, 1); // the waiter sleeps on the frozen clock
        frozen.advance(ms(50)); // 100 ms: the token is due, the sleeper must be woken
        let woken_when_due = frozen.pending_wakes() == 0;
        // Release the waiter however it registered, so that the test ends either way.
        frozen.set(ms(150));
        (woken_when_due, waiter.join().unwrap())
    });
    assert_eq!(waited, Ok(ms(100)));
    assert!(
        woken_when_due,
        "acquire slept until 150 ms for a token due at 100 ms"
    );
}

/// Runs `wait` on a thread whose clock readings are armed with `stalls(gate)`, moves `clock` on
/// by 50 ms while that thread is held at the gate, then runs `meanwhile` (the test's part while
/// the waiter sleeps) and returns its result with the waiter's.
fn stalled_wait<T: Send, M>(
    clock: &ManualClock,
    stalls: impl FnOnce(Gate) -> Vec<Stall> + Send,
    wait: impl FnOnce() -> T + Send,
    meanwhile: impl FnOnce() -> M,
) -> (T, M) {
    let gate = Gate::new();
    thread::scope(|s| {
        let g = gate.clone();
        let waiter = s.spawn(move || {
            arm(stalls(g));
            wait()
        });
        gate.wait_reached();
        clock.advance(ms(50));
        gate.open();
        let m = meanwhile();
        (waiter.join().unwrap(), m)
    })
}

/// A blocking wait that stalls after its fresh reading, while the time moves on, still wakes
/// at the due instant: it sleeps to the instant ([`Clock::sleep_until`]), not for a duration
/// computed from that reading (with a duration, a frozen clock would wake it at 150 ms for a
/// token due at 100 ms, so a test moving the clock to 100 ms would wait for ever, and an
/// advancing clock would be moved to 150 ms, every bucket sharing it refilled 50 ms too much).
/// `Bucket` and `MultiBucket` (stalled after the wait's own reading) and `Smooth` (stalled after
/// its one reading, before its decision).
#[test]
fn waits_stalled_after_a_reading_end_at_the_due_instant() {
    // Reading 1: the decision's (0). Reading 2: the wait's fresh one, then held.
    let after_fresh = |g| vec![Stall::Reading(0), Stall::Gate(g)];

    // Frozen: woken when the test moves the time to the due instant (released in any case, so
    // that a missed wake-up fails rather than hangs).
    let frozen = ManualClock::new_frozen();
    let bucket = Bucket::with_clock(quota(10, 1), StallClock::new(frozen.clone()));
    bucket.try_acquire(1).unwrap(); // the next token is due at 100 ms
    let (waited, woken_when_due) = stalled_wait(
        &frozen,
        after_fresh,
        || bucket.acquire(1),
        || {
            wait_pending(&frozen, 1);
            frozen.advance(ms(50)); // 100 ms: due
            let woken = frozen.pending_wakes() == 0;
            frozen.set(ms(200));
            woken
        },
    );
    assert_eq!(waited, Ok(ms(100)));
    assert!(woken_when_due, "not woken at the due instant");

    // Advancing: the shared time ends at the due instant, not past it.
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota(10, 1), StallClock::new(clock.clone()));
    bucket.try_acquire(1).unwrap();
    let (waited, ()) = stalled_wait(&clock, after_fresh, || bucket.acquire(1), || ());
    assert_eq!((waited, clock.now()), (Ok(ms(100)), 100_000_000));

    let clock = ManualClock::new();
    let policy = tollgate::MultiBucket::with_clock(
        tollgate::Limits::from(quota(10, 1)),
        StallClock::new(clock.clone()),
    );
    policy.try_acquire(1).unwrap();
    let (waited, ()) = stalled_wait(&clock, after_fresh, || policy.acquire(1), || ());
    assert_eq!((waited, clock.now()), (Ok(ms(100)), 100_000_000));

    // `Smooth` at 10/s: its one reading (0) is held; it pays for the permit taken ahead, 100 ms.
    let clock = ManualClock::new();
    let smooth =
        tollgate::Smooth::bursty_with_clock(10.0, Duration::ZERO, StallClock::new(clock.clone()))
            .unwrap();
    assert_eq!(smooth.acquire(1), Duration::ZERO);
    let (waited, ()) = stalled_wait(
        &clock,
        |g| vec![Stall::Gate(g)],
        || smooth.acquire(1),
        || (),
    );
    assert_eq!((waited, clock.now()), (ms(100), 100_000_000));
}

/// Runs `timed` (a waiting call with a 1.99 s timeout) on a thread whose decision reads the
/// clock at 100 s, with a token of the limiter taken at 99.99 s (`take`) so that the next is due
/// 1.99 s after that reading; the clock steps back to 70 s between the decision's reading and
/// its sleep. Returns what `timed` returned and the time the clock then reads.
fn stepped_back_before_the_sleep<R: Send>(
    clock: &ManualClock,
    take: impl FnOnce(),
    timed: impl FnOnce() -> R + Send,
) -> (R, u64) {
    clock.set(ms(99_990));
    take();
    clock.set(ms(100_000));
    let got = stall::gated(timed, || clock.set(ms(70_000)));
    (got, clock.now())
}

/// **A timed wait does not outlast its timeout by the step** of a clock that steps back between
/// the decision and the sleep (a TSC read on another core, `ManualClock::set`) by more than the
/// wait: the decision admitted a wait of at most the timeout, so the sleep lasts that wait on
/// the clock, as Guava's `tryAcquire` sleeps the wait it decided. Sleeping to the
/// decision's due instant instead would last the step too: from 70 s to 101.99 s, 31.99 s on a
/// 1.99 s timeout. `Bucket::try_acquire_for`, `MultiBucket::try_acquire_for` and
/// `Smooth::try_acquire`, each with a token due 1.99 s after its reading; an advancing
/// `ManualClock` moves by the sleep, so the time it reads after the call is where the sleep ended.
#[test]
fn a_clock_stepped_back_before_the_sleep_does_not_stretch_a_timed_wait() {
    let timeout = ms(1990);
    let slept_to: u64 = 70_000_000_000 + 1_990_000_000;
    // One token every 2 s, burst 1.
    let q = Quota::new(1, Duration::from_secs(2), 1).unwrap();

    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(q, StallClock::new(clock.clone()));
    let (got, now) = stepped_back_before_the_sleep(
        &clock,
        || bucket.try_acquire(1).unwrap(),
        || bucket.try_acquire_for(1, timeout),
    );
    assert_eq!(got, Ok(timeout));
    assert_eq!(
        now, slept_to,
        "Bucket::try_acquire_for slept past its timeout"
    );

    let clock = ManualClock::new();
    let policy = tollgate::MultiBucket::with_clock(
        tollgate::Limits::from(q),
        StallClock::new(clock.clone()),
    );
    let (got, now) = stepped_back_before_the_sleep(
        &clock,
        || policy.try_acquire(1).unwrap(),
        || policy.try_acquire_for(1, timeout),
    );
    assert_eq!(got, Ok(timeout));
    assert_eq!(
        now, slept_to,
        "MultiBucket::try_acquire_for slept past its timeout"
    );

    // Guava's `SmoothBursty` at 0.5 permits/s with nothing stored: a permit every 2 s.
    let clock = ManualClock::new();
    let smooth =
        tollgate::Smooth::bursty_with_clock(0.5, Duration::ZERO, StallClock::new(clock.clone()))
            .unwrap();
    let (got, now) = stepped_back_before_the_sleep(
        &clock,
        || assert_eq!(smooth.acquire(1), Duration::ZERO),
        || smooth.try_acquire(1, timeout),
    );
    assert!(got);
    assert_eq!(now, slept_to, "Smooth::try_acquire slept past its timeout");
}

/// A `ManualClock` (advancing: a sleep moves it) whose readings come back `offsets` behind,
/// one offset a reading, then exact: a reading on a core whose TSC lags, between two on cores
/// that agree. The time itself never goes back.
struct Lagging {
    inner: ManualClock,
    offsets: std::sync::Mutex<std::collections::VecDeque<u64>>,
}

impl Lagging {
    fn at(nanos: u64) -> Lagging {
        Lagging::on(ManualClock::new(), nanos)
    }

    /// On a frozen `ManualClock`: only the test moves the time, and wake-ups wait for it.
    fn frozen_at(nanos: u64) -> Lagging {
        Lagging::on(ManualClock::new_frozen(), nanos)
    }

    fn on(inner: ManualClock, nanos: u64) -> Lagging {
        inner.set(Duration::from_nanos(nanos));
        Lagging {
            inner,
            offsets: Default::default(),
        }
    }

    /// The next readings lag by `offsets`, in order.
    fn lag(&self, offsets: &[u64]) {
        self.offsets.lock().unwrap().extend(offsets);
    }
}

impl Clock for Lagging {
    fn now(&self) -> u64 {
        let lag = self.offsets.lock().unwrap().pop_front().unwrap_or(0);
        self.inner.now().saturating_sub(lag)
    }
}

impl tollgate::Timer for Lagging {
    fn sleep_until(&self, at: u64) {
        self.inner.sleep_until(at);
    }

    /// Forwarded, so that a registration neither reads this clock (taking a lag meant for the
    /// next reading) nor goes to the shared timer thread.
    fn register_wake_at(&self, at: u64, waker: &Waker) -> WakeRegistration {
        self.inner.register_wake_at(at, waker)
    }
}

/// **A wait never ends before its due instant on a clock that only read back once**: the
/// decision reads 10 s and schedules the token at 11 s; the sleep's first reading lags 5 s (a
/// TSC read on another core), the next ones are exact again. Taking the lagging reading for a
/// step back of the time and ending the sleep once 1 s of readings went by would return at
/// 10 s, a second early: with burst 1, two tokens at one instant. Each waiting limiter (their
/// sleeps share one loop), with its last token taken at 10 s.
#[test]
fn one_lagging_reading_does_not_end_a_wait_before_its_due_instant() {
    let (start, due) = (10_000_000_000, 11_000_000_000);
    let q = Quota::new(1, Duration::from_secs(1), 1).unwrap();

    let bucket = Bucket::with_clock(q, Lagging::at(start));
    bucket.try_acquire(1).unwrap();
    bucket.clock().lag(&[0, 5_000_000_000]);
    assert_eq!(bucket.try_acquire_for(1, ms(1000)), Ok(ms(1000)));
    assert_eq!(
        bucket.clock().inner.now(),
        due,
        "Bucket ended its wait early"
    );

    let policy = tollgate::MultiBucket::with_clock(tollgate::Limits::from(q), Lagging::at(start));
    policy.try_acquire(1).unwrap();
    policy.clock().lag(&[0, 5_000_000_000]);
    assert_eq!(policy.acquire(1), Ok(ms(1000)));
    assert_eq!(
        policy.clock().inner.now(),
        due,
        "MultiBucket ended its wait early"
    );

    let smooth =
        tollgate::Smooth::bursty_with_clock(1.0, Duration::ZERO, Lagging::at(start)).unwrap();
    assert_eq!(smooth.acquire(1), Duration::ZERO);
    smooth.clock().lag(&[0, 5_000_000_000]);
    assert!(smooth.try_acquire(1, ms(1000)));
    assert_eq!(
        smooth.clock().inner.now(),
        due,
        "Smooth ended its wait early"
    );
}

/// Polls `fut` once on behalf of `waker`.
fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(waker))
}

/// **An async wait is not stretched by a step back either**: `until_ready` follows the rule of
/// the blocking waits (`a_clock_stepped_back_before_the_sleep_does_not_stretch_a_timed_wait`):
/// a reading behind the one before it moves the instant it waits for back by the step, while
/// the clock stays behind the furthest reading the future has seen. The reservation reads
/// 100 s, its token is due at 101 s; the clock then steps back to 70 s. Waiting for 101 s on
/// the clock would last 31 s; the future resolves at 71 s, the 1 s decided, woken there by its
/// one registration (re-armed, not added to). A frozen `ManualClock`; the step comes between
/// two polls (a spurious wake-up, or a timer on its own time source firing), then, second case,
/// between the first poll's reservation and its reading for the wake-up (`StallClock`).
#[test]
fn a_clock_stepped_back_between_polls_does_not_stretch_an_async_wait() {
    let q = Quota::new(1, Duration::from_secs(1), 1).unwrap();

    // The step between two polls.
    let clock = ManualClock::new_frozen();
    let bucket = Bucket::with_clock(q, clock.clone());
    clock.set(ms(100_000));
    bucket.try_acquire(1).unwrap(); // the next token is due at 101 s
    let (count, waker) = Count::waker();
    let mut fut = Box::pin(bucket.until_ready(1));
    assert_eq!(poll_once(fut.as_mut(), &waker), Poll::Pending);
    clock.set(ms(70_000));
    assert_eq!(poll_once(fut.as_mut(), &waker), Poll::Pending);
    assert_eq!(clock.pending_wakes(), 1, "one registration per future");
    clock.advance(ms(999));
    assert_eq!(poll_once(fut.as_mut(), &waker), Poll::Pending); // not early either
    clock.advance(ms(1)); // 71 s: the 1 s decided has passed on the clock
    let woken = count.get();
    assert_eq!(
        poll_once(fut.as_mut(), &waker),
        Poll::Ready(Ok(ms(1000))),
        "until_ready stretched by the step: still waiting for 101 s at 71 s"
    );
    assert_eq!(woken, 1, "not woken at 71 s");
    assert_eq!(clock.pending_wakes(), 0);
    drop(fut);

    // The step between the reservation's reading (100 s) and the first poll's next one.
    let frozen = ManualClock::new_frozen();
    let bucket = Bucket::with_clock(q, StallClock::new(frozen.clone()));
    frozen.set(ms(100_000));
    bucket.try_acquire(1).unwrap(); // the next token is due at 101 s
    frozen.set(ms(70_000));
    let (count, waker) = Count::waker();
    let mut fut = Box::pin(bucket.until_ready(1));
    arm([Stall::Reading(100_000_000_000)]);
    assert_eq!(poll_once(fut.as_mut(), &waker), Poll::Pending);
    assert_eq!(frozen.pending_wakes(), 1);
    frozen.advance(ms(1000)); // 71 s
    let woken = count.get();
    assert_eq!(
        poll_once(fut.as_mut(), &waker),
        Poll::Ready(Ok(ms(1000))),
        "until_ready stretched by a step back within its first poll"
    );
    assert_eq!(woken, 1, "not woken at 71 s");
}

/// **An async wait never resolves before its due instant on a clock that only read back
/// once** (`one_lagging_reading_does_not_end_a_wait_before_its_due_instant`, for
/// `until_ready`): the reservation reads 10 s and its token is due at 11 s; one reading lags
/// 5 s, the others are exact. Taking the lagging reading for a step back and resolving once
/// 1 s of readings went by would resolve at 10 s, a second early: with burst 1, two tokens at
/// one instant. The lag comes within the first poll, then, second case, in a later poll. The
/// future may wake early (harmless: it registers again); it resolves at 11 s, not before.
#[test]
fn one_lagging_reading_does_not_resolve_an_async_wait_before_its_due_instant() {
    let (start, lag) = (10_000_000_000, 5_000_000_000);
    let q = Quota::new(1, Duration::from_secs(1), 1).unwrap();
    let (_count, waker) = Count::waker();

    // The first poll: its reservation reads exactly, its next reading lags.
    let bucket = Bucket::with_clock(q, Lagging::frozen_at(start));
    bucket.try_acquire(1).unwrap(); // the next token is due at 11 s
    bucket.clock().lag(&[0, lag]);
    let mut fut = Box::pin(bucket.until_ready(1));
    assert_eq!(
        poll_once(fut.as_mut(), &waker),
        Poll::Pending,
        "until_ready resolved at 10 s for a token due at 11 s"
    );
    bucket.clock().inner.advance(ms(999));
    assert_eq!(poll_once(fut.as_mut(), &waker), Poll::Pending);
    bucket.clock().inner.advance(ms(1));
    assert_eq!(poll_once(fut.as_mut(), &waker), Poll::Ready(Ok(ms(1000))));
    drop(fut);

    // A later poll: exact readings, then one lagging, then exact ones again.
    let bucket = Bucket::with_clock(q, Lagging::frozen_at(start));
    bucket.try_acquire(1).unwrap();
    let mut fut = Box::pin(bucket.until_ready(1));
    assert_eq!(poll_once(fut.as_mut(), &waker), Poll::Pending);
    bucket.clock().inner.advance(ms(500)); // 10.5 s
    bucket.clock().lag(&[lag]);
    assert_eq!(
        poll_once(fut.as_mut(), &waker),
        Poll::Pending,
        "until_ready resolved at 10.5 s for a token due at 11 s"
    );
    assert_eq!(
        poll_once(fut.as_mut(), &waker),
        Poll::Pending,
        "until_ready resolved at 10.5 s for a token due at 11 s"
    );
    bucket.clock().inner.advance(ms(500)); // 11 s
    assert_eq!(poll_once(fut.as_mut(), &waker), Poll::Ready(Ok(ms(1000))));
}
