//! The ends of the range: readings at u64::MAX, `Duration::MAX`, past the horizon, `Smooth` at
//! its saturation point, cost = burst, burst = 1; nothing panics and nothing over-admits.
#![cfg(feature = "keyed")]

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;
use tollgate::{Bucket, Clock, Denied, KeyedLimiter, ManualClock, Quota, ShardedBucket, Smooth};
use tollgate_testkit::decide::Snapshotting;

struct Nop;
impl Wake for Nop {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn edges_at_u64_max_never_panic() {
    let clock = ManualClock::new_frozen();
    clock.set(Duration::from_nanos(u64::MAX));
    let q = Quota::per_second(10).unwrap().with_burst(1).unwrap();
    let b = Bucket::with_clock(q, clock.clone());
    assert!(b.try_acquire(1).is_ok());
    // Past the horizon nothing refills: the wait is "never", and so is its header value.
    let d = b.try_acquire(1).unwrap_err();
    assert_eq!(d, tollgate::Denied::RetryAfter(Duration::MAX));
    assert_eq!(d.retry_after_secs(), Some(u64::MAX));
    let _ = b.try_acquire_for(1, Duration::MAX);
    let _ = b.try_acquire_for(1, Duration::ZERO);
    let r = b.reserve(1);
    if let Ok(r) = r {
        let _ = r.delay();
        r.cancel();
    }
    let _ = b.available();
    b.set_quota(Quota::per_second(1).unwrap());
    let _ = b.available();
    let waker = Waker::from(Arc::new(Nop));
    let mut cx = Context::from_waker(&waker);
    {
        let mut f = pin!(b.until_ready_with_jitter(1, Duration::MAX, 3));
        let _ = f.as_mut().poll(&mut cx);
    }
    let k: KeyedLimiter<u32, _, _> = KeyedLimiter::with_clock(q, 2, clock.clone());
    for i in 0..5 {
        let _ = k.try_acquire(&i, 1);
        let _ = k.decide_snapshot(&i, 1);
    }
    let _ = k.sweep();
    {
        let mut f = pin!(k.until_key_ready(&9, 1));
        let _ = f.as_mut().poll(&mut cx);
    }
    let s = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, clock.clone());
    assert_eq!(s.try_acquire(8), Ok(()));
    for c in 1..=9 {
        let _ = s.try_acquire(c);
        let _ = s.decide_snapshot(&(), c);
    }
    let _ = s.available();
    let sm = Smooth::bursty_with_clock(5.0, Duration::MAX, clock.clone()).unwrap();
    let _ = sm.try_acquire(u64::MAX, Duration::MAX);
    let _ = sm.try_acquire(1, Duration::ZERO);
    let _ = sm.set_rate(1e6);
    let _ = clock.now();
}

/// The arithmetic behind the loom model `loom-tests/tests/write_aba.rs`: on a full bucket at one
/// reading, two reconfigurations bring the state back to the identical value, so only the epoch
/// bit flips twice and the word is bit-identical; a decision computed under the first quota and
/// CASed onto that word is charged in the third quota's units.
#[test]
fn two_reconfigurations_can_bring_the_word_back_bit_for_bit() {
    use tollgate::gcra;
    let q0 = Quota::per_second(10).unwrap();
    let q1 = Quota::new(1, Duration::from_secs(1), 10).unwrap();
    let q2 = Quota::new(1, Duration::from_secs(1), 9).unwrap();
    let s1 = gcra::rescale(gcra::FULL, 0, &q0, &q1);
    let s2 = gcra::rescale(s1, 0, &q1, &q2);
    assert_eq!((s1, s2), (gcra::FULL, gcra::FULL), "the word comes back");
    let stale = gcra::try_acquire(gcra::FULL, 0, &q0, 10).unwrap().unwrap();
    // 10 tokens of q0 read as 1 token of q2: 8 more at the same reading.
    assert_eq!(gcra::available(stale, 0, &q2), 8);
    // Not only at reading 0 or on a frozen clock: with exact quotas a unit is a nanosecond of
    // the theoretical arrival time, so a full bucket converted at any reading `t` holds `t`.
    // Concurrent `set_quota` callers whose readings are not later than the first one's all
    // convert at that reading (`Writer::now`), and the word comes back after each pair.
    let t = 123_456_789_012;
    let s0 = gcra::rescale(gcra::FULL, t, &q1, &q0);
    let s2 = gcra::rescale(gcra::rescale(s0, t, &q0, &q1), t, &q1, &q2);
    assert_eq!((s0, s2), (t, t));
}

/// A table of one key, burst 1, on a frozen clock at the last reading (`u64::MAX`).
fn one_key_table_at_the_last_reading() -> KeyedLimiter<u32, Quota, ManualClock> {
    let clock = ManualClock::new_frozen();
    clock.set(Duration::from_nanos(u64::MAX));
    let q = Quota::per_second(10).unwrap().with_burst(1).unwrap();
    KeyedLimiter::with_clock(q, 1, clock)
}

/// A keyed bucket that is never full again (past the 100-year horizon the clock is read as
/// stopped) must not be evicted: at the reading `u64::MAX` the sweep compared `full_at`'s
/// "never" sentinel (`u64::MAX`) with the reading, found it "at or before now", evicted the
/// bucket, and the key came back with a fresh burst — every time.
#[test]
fn keyed_at_the_last_reading_never_evicts_a_bucket_that_never_refills() {
    let k = one_key_table_at_the_last_reading();
    let mut admitted = 0;
    for _ in 0..3 {
        for key in [1, 2] {
            if k.try_acquire(&key, 1).is_ok() {
                admitted += 1;
            }
        }
    }
    assert_eq!(admitted, 1, "one reading, burst 1, a table of one key");
    assert_eq!(k.counters().evicted, 0);
}

/// Past the horizon nothing refills, so a sharded refusal is "never" (`Duration::MAX`), as a
/// `Bucket`'s is, not "retry in 1 ns" (which a retry loop turns into a busy loop).
#[test]
fn sharded_refusal_at_the_last_reading_is_never_not_one_nanosecond() {
    let clock = ManualClock::new_frozen();
    clock.set(Duration::from_nanos(u64::MAX));
    let s = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, clock);
    assert_eq!(s.try_acquire(8), Ok(()));
    for cost in 1..=8 {
        assert_eq!(
            s.try_acquire(cost),
            Err(tollgate::Denied::RetryAfter(Duration::MAX)),
            "cost {cost}"
        );
    }
}

/// `until_key_ready` at the reading `u64::MAX` for a new key while the table is full: a
/// table-full wait of 1 ns would saturate the deadline to the reading itself, and `poll` would
/// loop forever without returning. No tracked bucket is ever full again there: the refusal is
/// "never", and the future resolves to it.
#[test]
fn until_key_ready_at_the_last_reading_resolves() {
    let k = one_key_table_at_the_last_reading();
    assert_eq!(k.try_acquire(&1, 1), Ok(()));
    assert_eq!(
        k.try_acquire(&2, 1),
        Err(tollgate::Denied::RetryAfter(Duration::MAX))
    );
    let waker = Waker::from(Arc::new(Nop));
    let mut fut = pin!(k.until_key_ready(&2, 1));
    assert_eq!(
        fut.as_mut().poll(&mut Context::from_waker(&waker)),
        std::task::Poll::Ready(Err(tollgate::Denied::RetryAfter(Duration::MAX)))
    );
}

/// Past the 100-year horizon the bucket reads its clock as stopped: `try_acquire` refuses
/// ("never"), so a reservation due past the horizon never comes due either. It was compared with
/// the raw reading instead, found "due already", and `acquire`, `try_acquire_for`, `reserve`
/// and `until_ready` admitted at once — 10 tokens at one reading with burst 1 here, and then one
/// per second forever, while `try_acquire` refused them all.
#[test]
fn past_the_horizon_waiting_admits_nothing_that_never_comes_due() {
    let clock = ManualClock::new();
    clock.set(tollgate::HORIZON + Duration::from_secs(10));
    let q = Quota::per_second(1).unwrap();
    let b = Bucket::with_clock(q, clock.clone());
    assert_eq!(b.try_acquire(1), Ok(()));
    let never = tollgate::Denied::RetryAfter(Duration::MAX);
    assert_eq!(b.try_acquire(1), Err(never));
    let never = Err(never);
    assert_eq!(b.acquire(1), never);
    assert_eq!(b.try_acquire_for(1, Duration::MAX), never);
    assert_eq!(b.reserve(1).map(|r| r.delay()), never);
    let waker = Waker::from(Arc::new(Nop));
    let mut fut = pin!(b.until_ready(1));
    assert_eq!(
        fut.as_mut().poll(&mut Context::from_waker(&waker)),
        std::task::Poll::Ready(never)
    );
    assert_eq!(clock.now(), 3_155_760_010_000_000_000, "nothing slept");
}

/// `Smooth` saturates its next free time at 2^53 − 1 µs after creation (285 years) and reads
/// the clock as stopped there. A request never waits for its own permits, it only pushes `next`
/// on — but `next` cannot move past the saturation, so at a reading there every request finds
/// `next == now` and goes at once: no limit at all (Guava, whose `next` keeps growing, would make
/// each caller wait one more interval).
#[test]
fn smooth_at_its_saturation_point_still_limits() {
    let clock = ManualClock::new();
    let s = Smooth::bursty_with_clock(1.0, Duration::from_secs(1), clock.clone()).unwrap();
    clock.set(Duration::from_micros((1u64 << 53) + 5));
    let admitted = (0..10).filter(|_| s.try_acquire(1, Duration::ZERO)).count();
    // Bursty, 1 s stored at most: the stored permit and the "pay later" one.
    assert!(admitted <= 2, "{admitted} of 10 admitted at one reading");
}

/// A next free time pushed to the end of its field long before the clock gets there (a rate so
/// low that one permit's interval exceeds 285 years): the next request would have to push it
/// further, so it is never admitted — `acquire` sleeps `Duration::MAX` — and nothing is
/// written, so `set_rate`, which cannot move such a word on, never meets a decision's write.
#[test]
fn smooth_next_free_time_at_its_end_admits_nothing_more() {
    let clock = ManualClock::new();
    let s = Smooth::bursty_with_clock(1e-12, Duration::from_secs(1), clock.clone()).unwrap();
    assert_eq!(s.acquire(1), Duration::ZERO); // pays later: pushes next to the end
    assert!(!s.try_acquire(1, Duration::MAX));
    assert_eq!(s.acquire(1), Duration::MAX);
    s.set_rate(1e-12).unwrap();
    assert!(!s.try_acquire(1, Duration::MAX));
}

/// `Smooth`'s words never come back, so a decision's CAS on the exact word it read cannot land
/// under other parameters: two `set_rate` calls with nothing between them that moved the next
/// free time (a busy bursty limiter: nothing stored, next free time ahead) would leave the
/// word bit for bit as it was, so each word's next free time is made later than that of the
/// word replaced two calls back (a 1 µs step where needed). One call, or calls with a request
/// between that moved it, change nothing (Guava's rule).
#[test]
fn smooth_set_rate_never_brings_a_word_back() {
    let waits = |set_rates: &[f64]| {
        // `acquire` sleeps through the clock: a `ManualClock` advances itself.
        let s = Smooth::bursty_with_clock(1.0, Duration::ZERO, ManualClock::new()).unwrap();
        assert_eq!(s.acquire(1), Duration::ZERO); // next free time: 1 s
        for &r in set_rates {
            s.set_rate(r).unwrap();
        }
        s.acquire(1)
    };
    assert_eq!(waits(&[2.0]), Duration::from_secs(1));
    assert_eq!(waits(&[2.0, 1.0]), Duration::from_micros(1_000_001));
    // The third stays ahead of the first's word without a step; the fourth needs one.
    assert_eq!(waits(&[2.0, 1.0, 2.0]), Duration::from_micros(1_000_001));
    assert_eq!(
        waits(&[2.0, 1.0, 2.0, 1.0]),
        Duration::from_micros(1_000_002)
    );
}

/// A reservation beyond the state's range is refused with the wait `try_acquire` gives, never
/// (not 1 ns, at which the request would still not fit).
#[test]
fn a_reservation_beyond_the_range_waits_as_try_acquire_does() {
    let quota = Quota::per_second(1_000_000_000)
        .unwrap()
        .with_burst(1 << 62)
        .unwrap();
    let b = Bucket::with_clock(quota, ManualClock::new());
    assert_eq!(
        b.try_acquire_for(1 << 62, Duration::ZERO),
        Ok(Duration::ZERO)
    );
    let never = Err(Denied::RetryAfter(Duration::MAX));
    assert_eq!(b.try_acquire(1 << 62), never);
    assert_eq!(b.try_acquire_for(1 << 62, Duration::ZERO).map(drop), never);
    assert_eq!(
        b.reserve(1 << 62).map(|r| r.delay()),
        never.map(|()| Duration::ZERO)
    );
}
