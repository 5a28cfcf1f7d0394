//! [`Alarm`]: the one wake-up a waiting future keeps with its clock.

use super::{Timer, WakeRegistration};
use core::fmt;
use core::task::{Context, Waker};

/// The one wake-up a waiting future holds with its clock, replaced only when the deadline or
/// the task changes or it has fired (tokio's `Sleep` rule), so spurious polls add nothing.
/// Dropping it cancels the wake-up (where the clock can).
#[derive(Default)]
pub(crate) struct Alarm(Option<Armed>);

/// A registered wake-up: for reading `until`, on behalf of `waker`.
struct Armed {
    until: u64,
    waker: Waker,
    registration: WakeRegistration,
}

impl Alarm {
    /// Makes sure the task of `cx` is woken once `clock` reads `until`.
    pub(crate) fn set<C: Timer + ?Sized>(&mut self, clock: &C, until: u64, cx: &Context<'_>) {
        let keep = self.0.as_ref().is_some_and(|a| {
            a.until == until && a.waker.will_wake(cx.waker()) && !a.registration.is_fired()
        });
        if !keep {
            // Drop the old registration first: at most one per future, ever.
            self.0 = None;
            let registration = clock.register_wake_at(until, cx.waker());
            self.0 = Some(Armed {
                until,
                waker: cx.waker().clone(),
                registration,
            });
        }
    }
}

impl fmt::Debug for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(a) => f
                .debug_struct("Alarm")
                .field("until_ns", &a.until)
                .field("wake", &a.registration)
                .finish(),
            None => f.write_str("Alarm(unset)"),
        }
    }
}
