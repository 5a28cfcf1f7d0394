//! The `KeyedLimiter` tests that `keyed.rs` (a `Quota` per key) and `keyed_multi.rs` (`Limits`
//! per key) share, written once over the policy: each file's test calls these with its own
//! policies and waits.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tollgate::{Denied, KeyedLimiter, KeyedPolicy, ManualClock};
use tollgate_testkit::wakers;

/// A new key refused because a table of one key is full waits until the one tracked key is
/// full, even when that key is an override (`slow`) whose slowest quota refills a burst in
/// 200 s, slower than any quota of `default`: the refusal says 200 s, a new key is refused at
/// 199 s and admitted at 200 s, so the client is not told to come back early.
pub(crate) fn table_full_wait_covers_an_override_slower_than_the_default<P: KeyedPolicy>(
    default: P,
    slow: P,
) {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(default, 1, clock.clone())
        .override_quota("slow", slow)
        .build()
        .unwrap();
    assert_eq!(limiter.try_acquire(&"slow", 2), Ok(())); // full again at 200 s
    assert_eq!(
        limiter.try_acquire(&"new", 1),
        Err(Denied::RetryAfter(Duration::from_secs(200)))
    );
    clock.set(Duration::from_secs(199));
    assert!(limiter.try_acquire(&"new", 1).is_err());
    clock.set(Duration::from_secs(200));
    assert_eq!(limiter.try_acquire(&"new", 1), Ok(()));
}

/// A fail-open table of one key of `policy` (a burst of `burst`) on `clock`: key 1 spends its
/// whole burst, then key 2, untracked because the table is full, is admitted its whole burst
/// three times. Returns the limiter, for the test's checks of what was counted and kept.
pub(crate) fn fail_open_admits_untracked_when_full<P: KeyedPolicy>(
    policy: P,
    burst: u64,
    clock: ManualClock,
) -> KeyedLimiter<u8, P, ManualClock> {
    let open = KeyedLimiter::builder(policy, 1, clock)
        .fail_open(true)
        .build()
        .unwrap();
    assert_eq!(open.try_acquire(&1u8, burst), Ok(()));
    for _ in 0..3 {
        assert_eq!(open.try_acquire(&2u8, burst), Ok(()));
    }
    open
}

/// Polls an `until_key_ready` future, its refusal as the `Denied` it carries (so one assertion
/// reads the futures of both policies; an `Ok` or `Pending` is compared unchanged).
fn poll<F, R>(fut: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<Result<Duration, Denied>>
where
    F: Future<Output = Result<Duration, R>>,
    R: Into<Denied>,
{
    fut.poll(cx).map(|r| r.map_err(Into::into))
}

/// The first phase of both `until_key_ready` tests, on a frozen clock and a table of 2 keys of
/// `policy` (whose smallest burst is 10): key 1 spends 10 and waits for 3. A thousand polls
/// register one wake-up; key 2 is not held up; nothing wakes 1 ms before `wait`, the waker
/// fires once at `wait`, and the future resolves to `Ok(wait)`, leaving key 1 no tokens;
/// polled again it is `Ok(ZERO)`, and no registration is left. Returns the limiter, its clock
/// and the waker, for the test's further phases.
pub(crate) fn until_key_ready_waits_with_one_registration<P: KeyedPolicy>(
    policy: P,
    wait: Duration,
) -> (KeyedLimiter<u8, P, ManualClock>, ManualClock, Waker) {
    let (count, waker) = wakers::Count::waker();
    let mut cx = Context::from_waker(&waker);
    let clock = ManualClock::new_frozen();
    let limiter = KeyedLimiter::with_clock(policy, 2, clock.clone());
    assert_eq!(limiter.try_acquire(&1u8, 10), Ok(()));
    {
        let mut fut = pin!(limiter.until_key_ready(&1u8, 3));
        for _ in 0..1_000 {
            assert_eq!(poll(fut.as_mut(), &mut cx), Poll::Pending);
        }
        assert_eq!(
            clock.pending_wakes(),
            1,
            "spurious polls add no registration"
        );
        assert_eq!(
            limiter.try_acquire(&2u8, 10),
            Ok(()),
            "another key is not held up"
        );
        clock.advance(wait - Duration::from_millis(1));
        assert_eq!(count.get(), 0);
        assert_eq!(poll(fut.as_mut(), &mut cx), Poll::Pending);
        clock.advance(Duration::from_millis(1));
        assert_eq!(count.get(), 1, "woken at the instant the key admits 3");
        assert_eq!(poll(fut.as_mut(), &mut cx), Poll::Ready(Ok(wait)));
        assert_eq!(limiter.available(&1u8), 0);
        assert_eq!(poll(fut.as_mut(), &mut cx), Poll::Ready(Ok(Duration::ZERO)));
        assert_eq!(clock.pending_wakes(), 0);
    }
    (limiter, clock, waker)
}
