//! [`MultiUntilKeyReady`]: the future behind [`KeyedMultiLimiter::until_key_ready`].

use super::KeyedMultiLimiter;
use crate::clock::Clock;
use crate::error::Denied;
use crate::keyed::KeyWait;
use crate::refusal::Refusal;
use core::borrow::Borrow;
use core::fmt;
use core::future::Future;
use core::hash::Hash;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

/// The future returned by [`KeyedMultiLimiter::until_key_ready`]: resolves to `Ok(time
/// waited)` once every quota of the key's policy admitted the tokens, or to the refusal no wait
/// cures, naming its quota. Polling it again after it resolved gives `Ok(Duration::ZERO)` and
/// takes nothing. It holds at most one wake-up with the clock at a time; dropping it cancels
/// that wake-up.
///
/// ```
/// use std::future::Future;
/// use std::pin::pin;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Wake, Waker};
/// use tollgate::{Denied, KeyedMultiLimiter, Limits, ManualClock, Quota, Refusal};
///
/// struct Nop;
/// impl Wake for Nop {
///     fn wake(self: Arc<Self>) {}
/// }
/// let waker = Waker::from(Arc::new(Nop));
/// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(4).unwrap()]).unwrap();
/// let limiter: KeyedMultiLimiter<u32, _> = KeyedMultiLimiter::with_clock(limits, 10, ManualClock::new());
/// let mut fut = pin!(limiter.until_key_ready(&7u32, 5));
/// let poll = fut.as_mut().poll(&mut Context::from_waker(&waker));
/// assert_eq!(poll, Poll::Ready(Err(Refusal::new(Denied::ExceedsBurst, 1))));
/// ```
#[must_use = "futures do nothing unless polled; an unpolled `MultiUntilKeyReady` takes nothing"]
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
pub struct MultiUntilKeyReady<'a, K, C: Clock> {
    limiter: &'a KeyedMultiLimiter<K, C>,
    fp: u64,
    cost: u64,
    wait: KeyWait,
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Future for MultiUntilKeyReady<'_, K, C> {
    type Output = Result<Duration, Refusal>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (limiter, fp, cost) = (this.limiter, this.fp, this.cost);
        let policy = limiter.policy_of(fp);
        this.wait.poll(
            &limiter.clock,
            cx,
            |now| limiter.acquire_fp(fp, policy, cost, || now),
            |refusal| match refusal.denied() {
                Denied::RetryAfter(wait) => Some(wait),
                Denied::ExceedsBurst => None,
            },
        )
    }
}

impl<K, C: Clock> fmt::Debug for MultiUntilKeyReady<'_, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiUntilKeyReady")
            .field("fingerprint", &self.fp)
            .field("cost", &self.cost)
            .field("wait", &self.wait)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedMultiLimiter<K, C> {
    /// Waits until every quota of `key`'s policy admits `cost` tokens, then takes them from all
    /// of them at once, as [`KeyedLimiter::until_key_ready`](crate::KeyedLimiter::until_key_ready)
    /// does for one quota: resolves to `Ok(time waited)` (from the first poll), or to the
    /// refusal no wait cures — [`Denied::ExceedsBurst`] when `cost` is above the key's smallest
    /// burst (naming that quota), `RetryAfter(Duration::MAX)` when it would never be admitted.
    ///
    /// Each poll is one [`try_acquire_detailed`](Self::try_acquire_detailed) (counted as
    /// such); while it is refused the future holds one wake-up with the clock for the instant
    /// the slowest quota names ([`Clock::register_wake`]), replaced only when that instant or
    /// the task changes, dropped with the future. It reserves nothing: dropping it gives
    /// nothing back, and waiting callers of one key are not queued. A new key refused because
    /// the table is full waits for the instant a key can be evicted, like any other refusal.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let waker = Waker::from(Arc::new(Nop));
    /// let mut cx = Context::from_waker(&waker);
    /// let clock = ManualClock::new_frozen(); // waiting does not move it
    /// let per_minute = Quota::new(60, Duration::from_secs(60), 60).unwrap();
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), per_minute]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits, 10, clock.clone());
    /// limiter.try_acquire(&"a", 10).unwrap();
    /// let mut fut = pin!(limiter.until_key_ready(&"a", 5));
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    /// assert_eq!(clock.pending_wakes(), 1);
    /// clock.advance(Duration::from_millis(500));
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(Duration::from_millis(500))));
    /// assert_eq!(limiter.available(&"a"), 0);
    /// ```
    pub fn until_key_ready<Q>(&self, key: &Q, cost: u64) -> MultiUntilKeyReady<'_, K, C>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        MultiUntilKeyReady {
            limiter: self,
            fp: self.fingerprint(key),
            cost,
            wait: KeyWait::default(),
        }
    }
}
