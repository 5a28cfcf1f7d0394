//! [`UntilReady`]: the future behind [`Bucket::until_ready`].

use super::{Deadline, Reservation};
use crate::bucket::Bucket;
use crate::clock::{Alarm, Clock, Timer};
use crate::error::Denied;
use core::fmt;
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

/// Not boxed: a future spends its life `Waiting`, so the size is that variant's either way, and
/// a box would allocate per wait.
#[allow(clippy::large_enum_variant)]
enum Stage<'a, C> {
    /// Not polled yet: nothing reserved.
    Start,
    /// Reserved; ready at the deadline's instant (the due instant plus the jitter), moved back
    /// by a step back of the clock as [`Deadline`] says.
    Waiting {
        reservation: Reservation<'a, C>,
        deadline: Deadline,
        waited: Duration,
        /// The one wake-up this future holds with the clock.
        alarm: Alarm,
    },
    /// Resolved (or abandoned).
    Done,
}

/// The future of [`Bucket::until_ready`]: `Ok(time waited)` once due, or [`Bucket::acquire`]'s
/// error; dropped before, it cancels its reservation; polled after, `Ok(Duration::ZERO)`.
///
/// ```
/// use std::future::Future;
/// use std::pin::pin;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Wake, Waker};
/// use tollgate::{Bucket, Denied, ManualClock, Quota};
///
/// struct Nop;
/// impl Wake for Nop {
///     fn wake(self: Arc<Self>) {}
/// }
/// let waker = Waker::from(Arc::new(Nop));
/// let mut cx = Context::from_waker(&waker);
/// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
/// let mut fut = pin!(bucket.until_ready(11));
/// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Err(Denied::ExceedsBurst)));
/// ```
///
/// **One registration per future**: one wake-up with the clock ([`Timer::register_wake`]),
/// replaced only for a waker that would not wake the same task, after it fired, or when the
/// instant waited for moves (a step back of the clock, below), and cancelled with the future
/// (tollgate's own timer keeps the entry, holding nothing of the task).
///
/// **A clock that steps back** (a TSC read on another core, `ManualClock::set`) stretches the
/// wait no more than it stretches [`Bucket::acquire`]'s, by the same rule: a poll's reading
/// behind the one before it moves the instant waited for back by the step, but only while the
/// clock stays behind the furthest reading the future has seen; a reading at or past that
/// resolves it only at its due instant (plus the jitter). So it never resolves at a reading
/// that is the latest it has seen and before its due instant (one lagging reading between
/// exact ones does not resolve it early), and on a clock that stepped back and stays there it
/// resolves once the wait decided has passed on the clock if the step is at least that wait
/// (less than twice the wait otherwise). A moved instant re-arms the one wake-up; the future
/// sees a step at its next poll.
#[must_use = "futures do nothing unless polled; an unpolled `UntilReady` reserves nothing"]
pub struct UntilReady<'a, C: Clock> {
    bucket: &'a Bucket<C>,
    cost: u64,
    /// Extra nanoseconds to wait after the tokens are due.
    jitter: u64,
    stage: Stage<'a, C>,
}

impl<'a, C: Clock> UntilReady<'a, C> {
    pub(super) fn new(bucket: &'a Bucket<C>, cost: u64, jitter: u64) -> Self {
        UntilReady {
            bucket,
            cost,
            jitter,
            stage: Stage::Start,
        }
    }
}

impl<C: Timer> Future for UntilReady<'_, C> {
    type Output = Result<Duration, Denied>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let clock = this.bucket.clock();
        if let Stage::Start = this.stage {
            let now = clock.now();
            match this.bucket.reserve_at(now, this.cost) {
                Err(denied) => {
                    this.stage = Stage::Done;
                    return Poll::Ready(Err(denied));
                }
                Ok(reservation) => {
                    let until = reservation.ticket.due.max(now).saturating_add(this.jitter);
                    this.stage = Stage::Waiting {
                        reservation,
                        deadline: Deadline::new(now, until),
                        waited: Duration::from_nanos(until - now),
                        alarm: Alarm::default(),
                    };
                }
            }
        }
        let Stage::Waiting {
            deadline,
            waited,
            alarm,
            ..
        } = &mut this.stage
        else {
            return Poll::Ready(Ok(Duration::ZERO));
        };
        let waited = *waited;
        loop {
            let Some(target) = deadline.wake_at(clock.now()) else {
                // Resolved: the reservation is kept (dropping it keeps its tokens); the
                // wake-up, if still pending, is cancelled with the stage.
                this.stage = Stage::Done;
                return Poll::Ready(Ok(waited));
            };
            // A target moved by a step back re-arms the one wake-up (`Alarm::set`).
            alarm.set(clock, target, cx);
            if clock.now() < target {
                return Poll::Pending;
            }
        }
    }
}

impl<C: Clock> Drop for UntilReady<'_, C> {
    fn drop(&mut self) {
        if let Stage::Waiting { reservation, .. } = mem::replace(&mut self.stage, Stage::Done) {
            reservation.cancel();
        }
    }
}

impl<C: Clock> fmt::Debug for UntilReady<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("UntilReady");
        d.field("cost", &self.cost).field("jitter_ns", &self.jitter);
        match &self.stage {
            Stage::Start => d.field("stage", &"start"),
            Stage::Waiting {
                reservation,
                deadline,
                alarm,
                ..
            } => d
                .field("reservation", reservation)
                .field("until_ns", &deadline.due())
                .field("target_ns", &deadline.target())
                .field("wake", alarm),
            Stage::Done => d.field("stage", &"done"),
        };
        d.finish()
    }
}
