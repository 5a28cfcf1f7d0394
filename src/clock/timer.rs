//! The one timer thread behind the std clocks' wake-ups ([`WakeRegistration::timer`](crate::WakeRegistration::timer) and the
//! default [`Timer::wake_after`](crate::Timer::wake_after)): a deadline-ordered map of wakers
//! behind a mutex, and one thread, started on first use, parked until the earliest deadline.
//! Not a runtime's timer, so that waiting works on any executor without a feature per runtime
//! or a timer crate.
//!
//! **Bounded memory.** Dropping a handle removes its entry at once, so the queue holds one
//! entry per live registration (and detached `wake_after`s until their deadline). Deadlines
//! are capped at [`MAX_PARK`] (the future then registers again), so no `Instant` overflows.
//!
//! **Spawn failure.** The spawn is retried with back-off ([`RETRY_FIRST`] doubling to
//! [`RETRY_MAX`]); meanwhile a registration sleeps the caller for at most [`FALLBACK_TICK`] and
//! wakes its waker, so a waiting task re-polls at a bounded rate and no core spins.

use super::queue::{wake_all, LockedQueue, QueueHandle, WakeQueue};
use crate::sync::ignore_poison;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The longest single park: a future waiting longer re-arms after it.
const MAX_PARK: Duration = Duration::from_secs(3600);
/// Without a timer thread, the longest a registration sleeps its caller before waking it.
const FALLBACK_TICK: Duration = Duration::from_millis(10);
/// The first delay before retrying a failed spawn.
const RETRY_FIRST: Duration = Duration::from_millis(10);
/// The longest delay between spawn attempts.
const RETRY_MAX: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Thread {
    NotStarted,
    Running,
    /// The last spawn failed: no attempt before `retry_at`; the next failure waits `backoff`.
    Failed {
        retry_at: Instant,
        backoff: Duration,
    },
}

struct State {
    queue: WakeQueue<Instant>,
    thread: Thread,
    /// Spawns still to fail on purpose (tests of the fallback).
    #[cfg(test)]
    fail_spawns: u32,
    /// Spawn attempts made (tests of the back-off).
    #[cfg(test)]
    spawn_attempts: u32,
}

/// A queue of wakers and the thread that wakes them: [`TIMER`], or a test's own (leaked).
pub(crate) struct Timer {
    state: Mutex<State>,
    changed: Condvar,
}

/// The process-wide timer.
pub(crate) static TIMER: Timer = Timer::new();

/// One registration in a [`Timer`]: dropping it removes the entry.
pub(crate) type Handle = QueueHandle<&'static Timer, Instant>;

impl LockedQueue<Instant> for &'static Timer {
    fn with_queue<R>(&self, f: impl FnOnce(&mut WakeQueue<Instant>) -> R) -> R {
        f(&mut self.lock().queue)
    }
}

impl Timer {
    pub(crate) const fn new() -> Timer {
        Timer {
            state: Mutex::new(State {
                queue: WakeQueue::new(),
                thread: Thread::NotStarted,
                #[cfg(test)]
                fail_spawns: 0,
                #[cfg(test)]
                spawn_attempts: 0,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        ignore_poison(self.state.lock())
    }

    /// Queues `waker` to be woken once `duration` has passed (measured on `Instant`).
    pub(crate) fn register(&'static self, duration: Duration, waker: &Waker) -> Handle {
        let now = Instant::now();
        let Some(at) = now.checked_add(duration.min(MAX_PARK)) else {
            waker.wake_by_ref();
            return Handle::new(self, None);
        };
        let mut state = self.lock();
        if !self.ensure_thread(&mut state, now) {
            drop(state);
            // No timer thread: a coarse sleep on the caller, then a wake.
            std::thread::sleep(duration.min(FALLBACK_TICK));
            waker.wake_by_ref();
            return Handle::new(self, None);
        }
        let earliest = state.queue.next().map_or(true, |next| at < next);
        let key = state.queue.insert(at, waker);
        drop(state);
        if earliest {
            self.changed.notify_one();
        }
        Handle::new(self, Some(key))
    }

    /// Whether the thread runs, starting it unless a failed spawn's back-off has not elapsed.
    fn ensure_thread(&'static self, state: &mut State, now: Instant) -> bool {
        let backoff = match state.thread {
            Thread::Running => return true,
            Thread::Failed { retry_at, .. } if now < retry_at => return false,
            Thread::Failed { backoff, .. } => backoff,
            Thread::NotStarted => RETRY_FIRST,
        };
        if self.spawn(state) {
            state.thread = Thread::Running;
            true
        } else {
            #[cfg(feature = "tracing")]
            crate::observe::timer_spawn_failed(backoff);
            state.thread = Thread::Failed {
                retry_at: now + backoff,
                backoff: (backoff * 2).min(RETRY_MAX),
            };
            false
        }
    }

    fn spawn(&'static self, state: &mut State) -> bool {
        #[cfg(test)]
        {
            state.spawn_attempts += 1;
            if state.fail_spawns > 0 {
                state.fail_spawns -= 1;
                return false;
            }
        }
        #[cfg(not(test))]
        let _ = state;
        std::thread::Builder::new()
            .name("tollgate-timer".into())
            .spawn(move || self.run())
            .is_ok()
    }

    /// Entries queued.
    pub(crate) fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// The timer thread: wake everything due, then park until the earliest deadline.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            let due = state.queue.take_due(now);
            if !due.is_empty() {
                drop(state);
                wake_all(due);
                state = self.lock();
                continue;
            }
            state = match state.queue.next() {
                Some(at) => ignore_poison(self.changed.wait_timeout(state, at - now)).0,
                None => ignore_poison(self.changed.wait(state)),
            };
        }
    }
}

/// The default [`Timer::wake_after`](crate::Timer::wake_after): fire and forget.
pub(crate) fn wake_after(duration: Duration, waker: &Waker) {
    TIMER.register(duration, waker).detach();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;
    use std::vec::Vec;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        (count, waker)
    }

    /// A private timer, so that tests do not share (or count) the process-wide one.
    fn timer(fail_spawns: u32) -> &'static Timer {
        let timer: &'static Timer = Box::leak(Box::new(Timer::new()));
        timer.lock().fail_spawns = fail_spawns;
        timer
    }

    /// Waits until `h` has fired and `count` exceeds `before` (the two come in either order).
    fn wait_woken(h: &Handle, count: &Count, before: usize) {
        let start = Instant::now();
        while !h.is_fired() || count.0.load(Ordering::SeqCst) == before {
            assert!(start.elapsed() < Duration::from_secs(30), "never woken");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn dropping_a_handle_removes_its_entry() {
        let t = timer(0);
        let (count, waker) = counter();
        let handles: Vec<Handle> = (0..1000)
            .map(|_| t.register(Duration::from_secs(600), &waker))
            .collect();
        assert_eq!(t.len(), 1000);
        assert!(handles.iter().all(|h| !h.is_fired()));
        drop(handles);
        assert_eq!(t.len(), 0);
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_due_entry_is_woken_once_and_reports_fired() {
        let t = timer(0);
        let (count, waker) = counter();
        let handle = t.register(Duration::from_millis(1), &waker);
        wait_woken(&handle, &count, 0);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(t.len(), 0);
        drop(handle); // nothing left to remove
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_detached_entry_stays_until_its_deadline() {
        let t = timer(0);
        let (_, waker) = counter();
        t.register(Duration::from_secs(600), &waker).detach();
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_failed_spawn_is_retried_with_back_off_and_never_spins() {
        let t = timer(2);
        let (count, waker) = counter();
        // First attempt fails: the caller sleeps one tick (never spins) and is woken at once.
        let start = Instant::now();
        let h = t.register(Duration::from_secs(1), &waker);
        assert!(start.elapsed() >= FALLBACK_TICK);
        assert!(h.is_fired(), "nothing queued without a thread");
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(t.len(), 0);
        assert_eq!(t.lock().spawn_attempts, 1);
        // Within the back-off no new attempt is made; a short wait sleeps only that long.
        let _ = t.register(Duration::from_nanos(1), &waker);
        let attempts = t.lock().spawn_attempts;
        let Thread::Failed { retry_at, backoff } = t.lock().thread else {
            panic!("expected a failed thread state");
        };
        assert!(attempts <= 2, "{attempts}");
        assert!(backoff > RETRY_FIRST && backoff <= RETRY_MAX);
        // A busy poller: each registration sleeps up to a tick.
        let busy = Instant::now();
        let mut polls = 0u32;
        while busy.elapsed() < Duration::from_millis(300) {
            drop(t.register(Duration::from_secs(1), &waker));
            polls += 1;
            if t.lock().thread == Thread::Running {
                break;
            }
        }
        assert!(polls <= 31, "{polls} polls in 300 ms");
        // Past the back-off the spawn is retried; the second retry succeeds.
        while Instant::now() < retry_at + RETRY_MAX * 2 && t.lock().thread != Thread::Running {
            drop(t.register(Duration::from_millis(1), &waker));
        }
        assert_eq!(t.lock().thread, Thread::Running);
        assert_eq!(t.lock().spawn_attempts, 3);
        let woken = count.0.load(Ordering::SeqCst);
        let h = t.register(Duration::from_millis(1), &waker);
        wait_woken(&h, &count, woken);
        assert_eq!(count.0.load(Ordering::SeqCst), woken + 1);
    }
}
