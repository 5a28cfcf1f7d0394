//! The one timer thread behind the std clocks' [`Clock::wake_after`](crate::Clock::wake_after).
//!
//! Why not a runtime's timer: [`Bucket::until_ready`](crate::Bucket::until_ready) must work on
//! any executor (tokio, async-std, smol, a hand-written `block_on`) without a feature per
//! runtime, and without the dependency a timer crate would bring. A waiting future needs only one
//! thing — its waker called at a deadline — so a min-heap of `(deadline, waker)` behind a mutex
//! and one thread parked on a condition variable is enough. The thread starts on first use and
//! then sleeps until the earliest deadline; idle, it costs nothing but its stack.
//!
//! Entries of futures dropped before their deadline stay until that deadline (waking a finished
//! task is harmless); deadlines are capped at [`MAX_PARK`] and the future re-arms after it, so no
//! `Instant` arithmetic overflows.

use crate::sync::ignore_poison;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};
use std::vec::Vec;

/// The longest single park: a future waiting longer re-arms after it.
const MAX_PARK: Duration = Duration::from_secs(3600);

struct Entry {
    at: Instant,
    seq: u64,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest deadline first.
    fn cmp(&self, other: &Entry) -> CmpOrdering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct Queue {
    heap: BinaryHeap<Entry>,
    seq: u64,
    /// The thread is running (or could not be spawned: then `failed`).
    started: bool,
    failed: bool,
}

struct Timer {
    queue: Mutex<Queue>,
    changed: Condvar,
}

static TIMER: Timer = Timer {
    queue: Mutex::new(Queue {
        heap: BinaryHeap::new(),
        seq: 0,
        started: false,
        failed: false,
    }),
    changed: Condvar::new(),
};

fn lock() -> MutexGuard<'static, Queue> {
    // Nothing panics while the lock is held (wakers run outside it), but never propagate poison.
    ignore_poison(TIMER.queue.lock())
}

/// Wakes `waker` once `duration` has passed (measured on `Instant`), from the timer thread.
pub(crate) fn wake_after(duration: Duration, waker: &Waker) {
    let Some(at) = Instant::now().checked_add(duration.min(MAX_PARK)) else {
        waker.wake_by_ref();
        return;
    };
    let mut q = lock();
    if !q.started {
        q.started = true;
        let spawned = std::thread::Builder::new()
            .name("tollgate-timer".into())
            .spawn(run);
        q.failed = spawned.is_err();
    }
    if q.failed {
        // No timer thread (spawning failed): fall back to polling again at once.
        drop(q);
        waker.wake_by_ref();
        return;
    }
    let seq = q.seq;
    q.seq = seq.wrapping_add(1);
    let earliest = q.heap.peek().map_or(true, |top| at < top.at);
    q.heap.push(Entry {
        at,
        seq,
        waker: waker.clone(),
    });
    drop(q);
    if earliest {
        TIMER.changed.notify_one();
    }
}

/// The timer thread: wake everything due, then park until the earliest deadline.
fn run() {
    let mut q = lock();
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        while q.heap.peek().is_some_and(|top| top.at <= now) {
            if let Some(entry) = q.heap.pop() {
                due.push(entry.waker);
            }
        }
        if !due.is_empty() {
            drop(q);
            for waker in due {
                // A panicking waker must not take the timer (and every other waiter) down.
                let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
            }
            q = lock();
            continue;
        }
        q = match q.heap.peek().map(|top| top.at - now) {
            Some(wait) => ignore_poison(TIMER.changed.wait_timeout(q, wait)).0,
            None => ignore_poison(TIMER.changed.wait(q)),
        };
    }
}
