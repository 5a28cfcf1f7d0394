//! [`UntilKeyReady`]: the future behind [`KeyedLimiter::until_key_ready`].

use super::{KeyedLimiter, KeyedPolicy};
use crate::clock::{Alarm, Clock, DefaultClock, Timer};
use crate::error::Denied;
use crate::limits::Limits;
use crate::quota::Quota;
use core::borrow::Borrow;
use core::fmt;
use core::future::Future;
use core::hash::Hash;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

/// The future returned by [`KeyedLimiter::until_key_ready`] (see there). Polling it again after
/// it resolved gives `Ok(Duration::ZERO)` and takes nothing; dropping it cancels its one
/// wake-up.
///
/// ```
/// use std::future::Future;
/// use std::pin::pin;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Wake, Waker};
/// use tollgate::{Denied, KeyedLimiter, ManualClock, Quota};
///
/// struct Nop;
/// impl Wake for Nop {
///     fn wake(self: Arc<Self>) {}
/// }
/// let waker = Waker::from(Arc::new(Nop));
/// let limiter: KeyedLimiter<u32, Quota, _> =
///     KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 10, ManualClock::new());
/// let mut fut = pin!(limiter.until_key_ready(&7u32, 11));
/// let poll = fut.as_mut().poll(&mut Context::from_waker(&waker));
/// assert_eq!(poll, Poll::Ready(Err(Denied::ExceedsBurst)));
/// ```
#[must_use = "futures do nothing unless polled; an unpolled `UntilKeyReady` takes nothing"]
pub struct UntilKeyReady<'a, K, P: KeyedPolicy = Quota, C: Clock = DefaultClock> {
    limiter: &'a KeyedLimiter<K, P, C>,
    fp: u64,
    cost: u64,
    /// The latest reading (none before the first poll).
    last: Option<u64>,
    /// The time waited so far: the sum of the clock's forward moves between readings, so a
    /// step back neither subtracts from it nor hides the time spent catching up.
    waited: u64,
    /// The one wake-up it holds.
    alarm: Alarm,
    /// Resolved: later polls take nothing.
    done: bool,
}

/// The future of [`KeyedMultiLimiter::until_key_ready`](crate::KeyedMultiLimiter): an
/// [`UntilKeyReady`] over [`Limits`], whose refusals name their quota.
pub type MultiUntilKeyReady<'a, K, C = DefaultClock> = UntilKeyReady<'a, K, Limits, C>;

impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Timer + Clone> Future for UntilKeyReady<'_, K, P, C> {
    type Output = Result<Duration, P::Refusal>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Ok(Duration::ZERO));
        }
        let (limiter, fp, cost) = (this.limiter, this.fp, this.cost);
        let rule = limiter.rule_of(fp);
        loop {
            let now = limiter.clock.now();
            let last = *this.last.get_or_insert(now);
            this.waited = this.waited.saturating_add(now.saturating_sub(last));
            this.last = Some(now);
            let until = match limiter.acquire_fp(fp, rule, cost, || now) {
                Ok(()) => {
                    this.resolve();
                    return Poll::Ready(Ok(Duration::from_nanos(this.waited)));
                }
                Err(refusal) => match refusal.into() {
                    Denied::RetryAfter(wait) if wait != Duration::MAX => {
                        now.saturating_add(crate::clock::saturating_nanos(wait))
                    }
                    _ => {
                        this.resolve();
                        return Poll::Ready(Err(refusal));
                    }
                },
            };
            this.alarm.set(&limiter.clock, until, cx);
            if limiter.clock.now() < until {
                return Poll::Pending;
            }
        }
    }
}

impl<K, P: KeyedPolicy, C: Clock> UntilKeyReady<'_, K, P, C> {
    /// Resolved: the wake-up dropped, later polls take nothing.
    fn resolve(&mut self) {
        self.done = true;
        self.alarm = Alarm::default();
    }
}

impl<K, P: KeyedPolicy, C: Clock> fmt::Debug for UntilKeyReady<'_, K, P, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilKeyReady")
            .field("fingerprint", &self.fp)
            .field("cost", &self.cost)
            .field("last_ns", &self.last)
            .field("waited_ns", &self.waited)
            .field("wake", &self.alarm)
            .field("done", &self.done)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Clock + Clone> KeyedLimiter<K, P, C> {
    /// Waits until `key`'s bucket admits `cost` tokens (every quota of its policy), then takes
    /// them (governor's `until_key_ready`): resolves to `Ok(time waited)` (since the first poll,
    /// the sum of the clock's forward moves between polls: a step back takes nothing off it),
    /// or to the refusal no wait cures (naming its quota, for a policy of several):
    /// `ExceedsBurst`, or `RetryAfter(Duration::MAX)` when it would never be admitted.
    ///
    /// Each poll is one decision (counted as such); while refused, the future holds one wake-up
    /// with the clock for the instant the refusal names (including a new key's wait for a full
    /// table), as [`Bucket::until_ready`](crate::Bucket::until_ready) does. Unlike it, it
    /// reserves nothing: waiting callers of one key are not queued, whoever tries first when
    /// the tokens are there gets them. So a clock that steps back stretches its wait (and the
    /// time it reports) by the step, as it stretches a loop of `try_acquire` retries: each poll
    /// decides at its reading, and one stepped back is refused until the clock reads the
    /// instant the key's tokens are due (waking it earlier would only be refused again;
    /// `until_ready` waits less after a step back because its tokens are already reserved).
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let waker = Waker::from(Arc::new(Nop));
    /// let mut cx = Context::from_waker(&waker);
    /// let clock = ManualClock::new_frozen(); // waiting does not move it
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 10, clock.clone());
    /// limiter.try_acquire(&"a", 10).unwrap();
    /// let mut fut = pin!(limiter.until_key_ready(&"a", 5));
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    /// assert_eq!(clock.pending_wakes(), 1);
    /// clock.advance(Duration::from_millis(500));
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(Duration::from_millis(500))));
    /// assert_eq!(limiter.available(&"a"), 0);
    /// ```
    pub fn until_key_ready<Q>(&self, key: &Q, cost: u64) -> UntilKeyReady<'_, K, P, C>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        UntilKeyReady {
            limiter: self,
            fp: self.fingerprint(key),
            cost,
            last: None,
            waited: 0,
            alarm: Alarm::default(),
            done: false,
        }
    }
}
