use crate::clock::{Clock, DefaultClock, Timer, WakeRegistration};
use crate::sync::{AtomicU64, Ordering};
use alloc::sync::Arc;
use core::fmt;
use core::task::Waker;
use core::time::Duration;
use std::io;

/// A clock that reads a cached time, refreshed by an upkeep thread: a reading costs one load
/// instead of a TSC read and its scaling. Opt-in, for the hottest paths.
///
/// * **Source**: another clock's nanoseconds ([`DefaultClock`] for [`CoarseClock::new`]).
/// * **Resolution**: the refresh `interval` (1 ms is a good default; 0 is refused).
/// * **Staleness**: a reading is never ahead of the source and lags it by at most one `interval`
///   plus the upkeep thread's wake-up latency (unbounded if it is starved of CPU). Readings
///   never go backwards.
/// * **Decisions stay exact for the reading**, and a stale reading only refuses more: over any
///   real-time window `Δ` a bucket admits at most `burst + rate × (Δ + staleness)`. Tokens that
///   refill within a refresh become available at the next one.
/// * **Lifetime**: clones share one cached time and one thread, which stops within one
///   `interval` after the last clone is dropped.
///
/// Not available under loom or without `std`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Bucket, Clock, CoarseClock, Quota};
/// let clock = CoarseClock::new(Duration::from_millis(1)).unwrap();
/// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
/// assert!(bucket.try_acquire(1).is_ok());
/// let a = clock.now();
/// // Refreshed in the background, within one interval of the upkeep thread getting the CPU.
/// let start = std::time::Instant::now();
/// while clock.now() == a {
///     assert!(start.elapsed() < Duration::from_secs(60), "never refreshed");
///     std::thread::sleep(Duration::from_millis(1));
/// }
/// assert!(clock.now() > a);
/// assert!(CoarseClock::new(Duration::ZERO).is_err());
/// ```
#[derive(Clone)]
pub struct CoarseClock {
    shared: Arc<Shared>,
}

struct Shared {
    /// The cached reading, only ever raised (`fetch_max`); Relaxed: it publishes nothing else.
    now: AtomicU64,
    interval: Duration,
}

impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock")
            .field("now", &self.now())
            .field("interval", &self.shared.interval)
            .finish()
    }
}

impl CoarseClock {
    /// A coarse clock over [`DefaultClock`], refreshed every `interval` by a new upkeep thread.
    ///
    /// Errors: `interval` zero (`InvalidInput`), or the thread could not be spawned.
    ///
    /// ```
    /// let clock = tollgate::CoarseClock::new(std::time::Duration::from_millis(1)).unwrap();
    /// # drop(clock);
    /// ```
    pub fn new(interval: Duration) -> io::Result<CoarseClock> {
        CoarseClock::with_source(DefaultClock::default(), interval)
    }

    /// A coarse clock over `source`, refreshed every `interval` by a new upkeep thread.
    ///
    /// Errors: `interval` zero (`InvalidInput`), or the thread could not be spawned.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, CoarseClock, ManualClock};
    /// let source = ManualClock::new();
    /// source.set(Duration::from_secs(5));
    /// let clock = CoarseClock::with_source(source.clone(), Duration::from_millis(1)).unwrap();
    /// assert_eq!(clock.now(), 5_000_000_000);
    /// source.set(Duration::from_secs(1)); // a source stepping back
    /// std::thread::sleep(Duration::from_millis(20));
    /// assert_eq!(clock.now(), 5_000_000_000); // never goes backwards
    /// ```
    pub fn with_source<S: Clock + Send + 'static>(
        source: S,
        interval: Duration,
    ) -> io::Result<CoarseClock> {
        if interval.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "CoarseClock: the refresh interval must be positive",
            ));
        }
        let shared = Arc::new(Shared {
            now: AtomicU64::new(source.now()),
            interval,
        });
        let weak = Arc::downgrade(&shared);
        // The upkeep thread: sleep, refresh, until every clone is gone.
        std::thread::Builder::new()
            .name("tollgate-coarse-clock".into())
            .spawn(move || loop {
                std::thread::sleep(interval);
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                shared.now.fetch_max(source.now(), Ordering::Relaxed);
            })?;
        Ok(CoarseClock { shared })
    }

    /// The refresh interval: the clock's resolution.
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tollgate::CoarseClock::new(Duration::from_millis(2)).unwrap();
    /// assert_eq!(clock.interval(), Duration::from_millis(2));
    /// ```
    pub fn interval(&self) -> Duration {
        self.shared.interval
    }
}

impl Clock for CoarseClock {
    /// The cached reading: one load.
    #[inline]
    fn now(&self) -> u64 {
        self.shared.now.load(Ordering::Relaxed)
    }

    /// Sleeps the thread (the reading may lag by a refresh: the waiting loops wait on).
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

impl Timer for CoarseClock {
    /// The shared timer thread (a reading that lags the wake-up makes the future re-register).
    fn register_wake(&self, duration: Duration, waker: &Waker) -> WakeRegistration {
        WakeRegistration::timer(duration, waker)
    }
}
