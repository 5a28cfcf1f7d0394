//! [`UntilKeyReady`]: the future behind [`KeyedLimiter::until_key_ready`].

use super::KeyedLimiter;
use crate::clock::{Alarm, Clock};
use crate::error::Denied;
use core::borrow::Borrow;
use core::fmt;
use core::future::Future;
use core::hash::Hash;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

/// The future returned by [`KeyedLimiter::until_key_ready`]: resolves to `Ok(time waited)` once
/// the key's bucket admitted the tokens, or to a refusal no wait cures. Polling it again after
/// it resolved gives `Ok(Duration::ZERO)` and takes nothing. It holds at most one wake-up with
/// the clock at a time; dropping it cancels that wake-up.
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
/// let limiter: KeyedLimiter<u32, _> =
///     KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 10, ManualClock::new());
/// let mut fut = pin!(limiter.until_key_ready(&7u32, 11));
/// let poll = fut.as_mut().poll(&mut Context::from_waker(&waker));
/// assert_eq!(poll, Poll::Ready(Err(Denied::ExceedsBurst)));
/// ```
#[must_use = "futures do nothing unless polled; an unpolled `UntilKeyReady` takes nothing"]
pub struct UntilKeyReady<'a, K, C: Clock> {
    limiter: &'a KeyedLimiter<K, C>,
    fp: u64,
    cost: u64,
    wait: KeyWait,
}

/// What a keyed wait keeps between polls (this future's and
/// [`MultiUntilKeyReady`](crate::MultiUntilKeyReady)'s): the reading of the first poll, the one
/// wake-up it holds, and whether it resolved.
#[derive(Default)]
pub(crate) struct KeyWait {
    first: Option<u64>,
    alarm: Alarm,
    done: bool,
}

impl KeyWait {
    /// One poll: `decide(now)` makes one decision at the reading `now`; `wait_of` names the
    /// wait a refusal asks for (`None`, or `Duration::MAX`: no wait cures it). Resolves to the
    /// time waited since the first poll, or to the refusal no wait cures; after that, to
    /// `Ok(Duration::ZERO)` without deciding again.
    pub(crate) fn poll<C: Clock + ?Sized, E>(
        &mut self,
        clock: &C,
        cx: &Context<'_>,
        mut decide: impl FnMut(u64) -> Result<(), E>,
        wait_of: impl Fn(&E) -> Option<Duration>,
    ) -> Poll<Result<Duration, E>> {
        if self.done {
            return Poll::Ready(Ok(Duration::ZERO));
        }
        loop {
            let now = clock.now();
            let first = *self.first.get_or_insert(now);
            let until = match decide(now) {
                Ok(()) => {
                    self.resolve();
                    return Poll::Ready(Ok(Duration::from_nanos(now.saturating_sub(first))));
                }
                Err(refusal) => match wait_of(&refusal) {
                    Some(wait) if wait != Duration::MAX => {
                        now.saturating_add(crate::clock::saturating_nanos(wait))
                    }
                    _ => {
                        self.resolve();
                        return Poll::Ready(Err(refusal));
                    }
                },
            };
            self.alarm.set(clock, until, cx);
            if clock.now() < until {
                return Poll::Pending;
            }
        }
    }

    /// Resolved: the wake-up dropped, later polls take nothing.
    fn resolve(&mut self) {
        self.done = true;
        self.alarm = Alarm::default();
    }
}

impl fmt::Debug for KeyWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyWait")
            .field("first_ns", &self.first)
            .field("wake", &self.alarm)
            .field("done", &self.done)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Future for UntilKeyReady<'_, K, C> {
    type Output = Result<Duration, Denied>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (limiter, fp, cost) = (this.limiter, this.fp, this.cost);
        let quota = limiter.quota_of(fp);
        this.wait.poll(
            &limiter.clock,
            cx,
            |now| limiter.acquire_fp(fp, quota, cost, || now),
            |denied| match denied {
                Denied::RetryAfter(wait) => Some(*wait),
                Denied::ExceedsBurst => None,
            },
        )
    }
}

impl<K, C: Clock> fmt::Debug for UntilKeyReady<'_, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilKeyReady")
            .field("fingerprint", &self.fp)
            .field("cost", &self.cost)
            .field("wait", &self.wait)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiter<K, C> {
    /// Waits until `key`'s bucket admits `cost` tokens, then takes them (governor's
    /// `until_key_ready`): resolves to `Ok(time waited)` (from the first poll), or to the
    /// refusal that no wait cures — `Err(ExceedsBurst)` when `cost` is above the key's burst,
    /// `Err(RetryAfter(Duration::MAX))` when it would never be admitted.
    ///
    /// Each poll is one [`try_acquire`](KeyedLimiter::try_acquire) (counted as such); while it
    /// is refused the future holds one wake-up with the clock for the instant the refusal names
    /// ([`Clock::register_wake`], the same machinery as [`Bucket::until_ready`](crate::Bucket::until_ready)),
    /// replaced only when that instant or the task changes, dropped with the future. Unlike
    /// `Bucket::until_ready` it reserves nothing: dropping it gives nothing back, and waiting
    /// callers of one key are not queued — whoever tries first when tokens are there gets them.
    /// A new key refused because the table is full waits for the instant a bucket can be
    /// evicted, like any other refusal.
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
    pub fn until_key_ready<Q>(&self, key: &Q, cost: u64) -> UntilKeyReady<'_, K, C>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        UntilKeyReady {
            limiter: self,
            fp: self.fingerprint(key),
            cost,
            wait: KeyWait::default(),
        }
    }
}
