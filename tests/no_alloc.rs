//! No decision allocates: a counting global allocator around every limiter's decisions, once
//! warmed up (a thread's first call may set up its thread-local state). The sharded bucket's
//! borrows at 64 shards take from every shard, the case that needs room for every shard.
#![cfg(feature = "std")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;
use tollgate::{Bucket, ManualClock, Quota, ShardedBucket, Smooth};
use tollgate_testkit::decide::Snapshotting;

/// Counts the allocations of the thread that armed it (other threads are left alone: the test
/// harness's own threads may allocate meanwhile).
struct Counting;

std::thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the contract; the count
// touches only const-initialized thread-locals (no allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ARMED.try_with(|armed| {
            if armed.get() {
                COUNT.with(|c| c.set(c.get() + 1));
            }
        });
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from `alloc` above, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    COUNT.with(Cell::get)
}

/// 64 shards, 64 tokens a second and a burst of 64: one token a shard. Draining the pool and
/// then asking once per refill of one token (1/64 s) makes every admission a borrow that
/// collects the token from fractions on every shard, and every refusal in between reads the
/// pool; costs above one token read every shard for their exact wait. Every 100 steps the
/// bucket refills completely and two requests of 40 tokens follow: the second finds some
/// shards full and others empty, whose exact wait needs the breakpoints of every shard (the
/// general form, beyond 16 shards in the thread's buffers).
fn sharded_workload(bucket: &ShardedBucket<ManualClock>, clock: &ManualClock, steps: u32) {
    let step = Duration::from_nanos(1_000_000_000 / 64 / 7);
    for i in 0..steps {
        clock.advance(step);
        let _ = bucket.try_acquire(1);
        let _ = bucket.try_acquire(1 + u64::from(i % 3));
        let _ = bucket.available();
        if i % 100 == 99 {
            clock.advance(Duration::from_secs(2));
            assert_eq!(bucket.try_acquire(40), Ok(()));
            assert!(bucket.try_acquire(40).is_err());
            while bucket.try_acquire(1).is_ok() {}
        }
    }
}

#[test]
fn decisions_do_not_allocate() {
    let clock = ManualClock::new();
    let quota = Quota::new(64, Duration::from_secs(1), 64).unwrap();
    let sharded = ShardedBucket::with_clock(quota, 64, clock.clone());
    while sharded.try_acquire(1).is_ok() {}
    // Warm-up: the thread's buffers are set up by its first borrows that need them.
    sharded_workload(&sharded, &clock, 200);
    let n = allocations(|| sharded_workload(&sharded, &clock, 2_000));
    assert_eq!(n, 0, "sharded decisions allocated {n} times");

    let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
    let n = allocations(|| {
        for _ in 0..1_000 {
            clock.advance(Duration::from_millis(30));
            let _ = bucket.try_acquire(1);
            let _ = bucket.decide_snapshot(&(), 2);
            let _ = bucket.available();
        }
    });
    assert_eq!(n, 0, "bucket decisions allocated {n} times");

    let smooth = Smooth::bursty_with_clock(10.0, Duration::from_secs(1), clock.clone()).unwrap();
    let n = allocations(|| {
        for _ in 0..1_000 {
            clock.advance(Duration::from_millis(30));
            let _ = smooth.try_acquire(1, Duration::ZERO);
        }
    });
    assert_eq!(n, 0, "smooth decisions allocated {n} times");
}

/// The keyed limiter's table is allocated when it is built: neither a tracked key's decision
/// nor a new key's insertion (evicting full buckets once the table is full) allocates.
#[cfg(feature = "keyed")]
#[test]
fn keyed_decisions_do_not_allocate() {
    let clock = ManualClock::new();
    let limiter =
        tollgate::KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 1_000, clock.clone());
    for key in 0..2_000u64 {
        let _ = limiter.try_acquire(&key, 1);
    }
    let n = allocations(|| {
        for i in 0..20_000u64 {
            if i % 100 == 0 {
                clock.advance(Duration::from_millis(150));
            }
            let _ = limiter.try_acquire(&(i % 500), 1);
            let _ = limiter.try_acquire(&(10_000 + i), 1);
        }
    });
    assert_eq!(n, 0, "keyed decisions allocated {n} times");
}

/// The counter itself counts (so that the zeros above mean something).
#[test]
fn the_counter_sees_an_allocation() {
    let n = allocations(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert_eq!(n, 1);
}
