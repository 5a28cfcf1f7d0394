//! `StallClock`: a clock wrapper that makes a chosen thread's reading stale, the way preemption
//! between a clock reading and the compare-and-swap that uses it does on a real server.
//!
//! Arm the calling thread, then call the operation under test on that thread:
//!
//! * [`Stall::Reading`]: the next reading returns a chosen instant instead of the clock's (a
//!   deterministic stale or stepped-back reading; one thread, no blocking);
//! * [`Stall::Gate`]: the next reading is taken, then the thread blocks until the test opens
//!   the gate ([`Gate::wait_reached`] tells the test the reading was taken), so other threads can
//!   act at later readings in between — a deterministic interleaving of real threads;
//! * [`Stall::Sleep`]: the next reading is taken, then the thread sleeps (real clocks).
//!
//! [`StallClock::random`] stalls readings at random instead (stress tests on real clocks).
//! [`last_reading`] returns the reading the calling thread's last `now()` returned: the exact
//! instant an operation decided at, for the window checker, where it reads the clock once;
//! [`decision_reading`] the first since the last call, where it may read it again.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::Waker;
use std::time::Duration;
use tollgate::{Clock, Timer, WakeRegistration};

/// What the calling thread's next reading does.
#[derive(Clone, Debug)]
pub enum Stall {
    /// Return this reading (ns since the clock's origin) instead of the clock's.
    Reading(u64),
    /// Take the reading, then block until the gate opens.
    Gate(Gate),
    /// Take the reading, then sleep this long.
    Sleep(Duration),
    /// The clock's reading, unchanged (to stall a later reading of the same call).
    Pass,
}

thread_local! {
    static ARMED: RefCell<Vec<Stall>> = const { RefCell::new(Vec::new()) };
    static LAST: Cell<Option<u64>> = const { Cell::new(None) };
    static FIRST: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The reading the calling thread's first `StallClock::now()` returned since its last call of
/// this function (stall applied), taken: the instant an operation decided at where it may read
/// the clock again after deciding at its first reading (a sharded bucket's lost central CAS
/// reads it to size a far lease; it still decides at the first). Call it after every
/// operation, admitted or not. Panics if it read no clock since.
pub fn decision_reading() -> u64 {
    FIRST
        .with(Cell::take)
        .expect("this thread read no StallClock since its last decision")
}

/// The reading the calling thread's last `StallClock::now()` returned (stall applied): the
/// instant the operation just called on this thread decided at. Panics if it read no clock.
pub fn last_reading() -> u64 {
    LAST.with(|l| l.get())
        .expect("this thread read no StallClock")
}

/// Arms the calling thread: its next readings (of any `StallClock`) follow `stalls`, in order.
pub fn arm(stalls: impl IntoIterator<Item = Stall>) {
    ARMED.with(|a| {
        let mut a = a.borrow_mut();
        a.clear();
        a.extend(stalls);
        a.reverse();
    });
}

/// Whether the calling thread still has armed stalls (to check an operation read the clock).
pub fn armed() -> bool {
    ARMED.with(|a| !a.borrow().is_empty())
}

/// A one-shot gate between a stalled thread and the test.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<(Mutex<(bool, bool)>, Condvar)>);

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Blocks the test until the stalled thread has taken its reading.
    pub fn wait_reached(&self) {
        let (m, cv) = &*self.0;
        let mut g = m.lock().unwrap();
        while !g.0 {
            g = cv.wait(g).unwrap();
        }
    }

    /// Lets the stalled thread go on.
    pub fn open(&self) {
        let (m, cv) = &*self.0;
        m.lock().unwrap().1 = true;
        cv.notify_all();
    }

    /// Whether the stalled thread has taken its reading (without blocking).
    pub fn reached(&self) -> bool {
        self.0 .0.lock().unwrap().0
    }

    fn reach_and_wait(&self) {
        let (m, cv) = &*self.0;
        let mut g = m.lock().unwrap();
        g.0 = true;
        cv.notify_all();
        while !g.1 {
            g = cv.wait(g).unwrap();
        }
    }
}

/// Runs `op` on a new thread whose first clock reading is gated: once `op` has taken that
/// reading, `meanwhile` runs on the calling thread (other decisions at later readings), then the
/// gate opens and `op` finishes on its old reading. Returns `op`'s result.
pub fn gated<R: Send>(op: impl FnOnce() -> R + Send, meanwhile: impl FnOnce()) -> R {
    let gate = Gate::new();
    std::thread::scope(|s| {
        let g = gate.clone();
        let stalled = s.spawn(move || {
            arm([Stall::Gate(g)]);
            op()
        });
        gate.wait_reached();
        meanwhile();
        gate.open();
        stalled.join().unwrap()
    })
}

/// [`gated`] with the gate on `op`'s `n`-th reading (from 1), its earlier ones unchanged; if
/// `op` returns before taking that reading, `meanwhile` runs after it. Returns what both
/// returned (`meanwhile`'s value, a reservation say, outlives `op`).
pub fn gated_at<R: Send, M>(
    n: usize,
    op: impl FnOnce() -> R + Send,
    meanwhile: impl FnOnce() -> M,
) -> (R, M) {
    assert!(n >= 1, "readings count from 1");
    let gate = Gate::new();
    std::thread::scope(|s| {
        let g = gate.clone();
        let stalled = s.spawn(move || {
            arm((1..n).map(|_| Stall::Pass).chain([Stall::Gate(g)]));
            op()
        });
        while !gate.reached() && !stalled.is_finished() {
            std::thread::yield_now();
        }
        let m = meanwhile();
        gate.open();
        (stalled.join().unwrap(), m)
    })
}

/// A clock that applies the calling thread's armed stalls (and optional random ones) to `C`.
#[derive(Clone, Debug)]
pub struct StallClock<C> {
    inner: C,
    /// Random stalls: (probability in 1/2^32 per reading, max sleep in ns, rng state); 0 = off.
    random: Arc<(AtomicU64, AtomicU64, AtomicU64)>,
}

impl<C: Clock> StallClock<C> {
    /// No stalls unless a thread is armed.
    pub fn new(inner: C) -> StallClock<C> {
        StallClock {
            inner,
            random: Arc::new((AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(1))),
        }
    }

    /// Each reading sleeps, with probability `p`, a random time up to `max` after it is taken
    /// (on top of any armed stall). Seeded: the sequence of draws is fixed, their assignment to
    /// threads is up to the scheduler.
    pub fn random(inner: C, p: f64, max: Duration, seed: u64) -> StallClock<C> {
        let c = StallClock::new(inner);
        c.random.0.store(
            (p.clamp(0.0, 1.0) * 4_294_967_296.0) as u64,
            Ordering::Relaxed,
        );
        c.random.1.store(max.as_nanos() as u64, Ordering::Relaxed);
        c.random.2.store(seed | 1, Ordering::Relaxed);
        c
    }

    /// The wrapped clock.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    fn random_sleep(&self) {
        let p = self.random.0.load(Ordering::Relaxed);
        if p == 0 {
            return;
        }
        // splitmix64 step on a shared counter: one draw per reading.
        let mut z = self
            .random
            .2
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        if (z & 0xFFFF_FFFF) < p {
            let max = self.random.1.load(Ordering::Relaxed).max(1);
            std::thread::sleep(Duration::from_nanos((z >> 32) % max));
        }
    }
}

impl<C: Clock> Clock for StallClock<C> {
    fn now(&self) -> u64 {
        let stall = ARMED.with(|a| a.borrow_mut().pop());
        let reading = match stall {
            Some(Stall::Reading(t)) => t,
            Some(Stall::Gate(gate)) => {
                let t = self.inner.now();
                gate.reach_and_wait();
                t
            }
            Some(Stall::Pass) => self.inner.now(),
            Some(Stall::Sleep(d)) => {
                let t = self.inner.now();
                std::thread::sleep(d);
                t
            }
            None => self.inner.now(),
        };
        self.random_sleep();
        LAST.with(|l| l.set(Some(reading)));
        FIRST.with(|f| {
            if f.get().is_none() {
                f.set(Some(reading));
            }
        });
        reading
    }

    fn sleep(&self, duration: Duration) {
        self.inner.sleep(duration)
    }
}

impl<C: Timer> Timer for StallClock<C> {
    fn sleep_until(&self, at: u64) {
        self.inner.sleep_until(at)
    }

    fn wake_after(&self, duration: Duration, waker: &Waker) {
        self.inner.wake_after(duration, waker)
    }

    fn register_wake(&self, duration: Duration, waker: &Waker) -> WakeRegistration {
        self.inner.register_wake(duration, waker)
    }

    /// Forwarded, so that a registration never reads this clock: the default would call
    /// `now`, taking a stall armed for the next decision's reading.
    fn register_wake_at(&self, at: u64, waker: &Waker) -> WakeRegistration {
        self.inner.register_wake_at(at, waker)
    }
}
