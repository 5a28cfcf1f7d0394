//! Several *different* limiters required at once, all or nothing ([`all_of`], [`GiveBack`]):
//! taken in order, and when a later one refuses, the earlier tokens are given back under
//! [`Reservation::cancel`](crate::Reservation::cancel)'s rule less its "not yet due". No limiter
//! admits more than its quota, but a give-back that finds a later admission (or
//! [`Bucket::set_quota`]) keeps its tokens: the chain then **under-admits**
//! (`docs/guarantees.md`). Quotas that can share one word lose nothing in a [`MultiBucket`].

use crate::bucket::Bucket;
use crate::clock::Clock;
use crate::error::Denied;
use crate::gcra;
use crate::multi::{MultiBucket, MultiReservation};
use crate::wait::Reservation;

/// A limiter whose admission can be given back (an earlier member of an [`all_of`] chain): a
/// take is a reservation due now, decided as `try_acquire` decides; a give-back its cancellation.
pub trait GiveBack {
    /// What a take holds until it is kept or given back.
    type Taken<'a>
    where
        Self: 'a;

    /// Takes `cost` tokens if they are there now, or refuses with the limiter's own verdict.
    fn take(&self, cost: u64) -> Result<Self::Taken<'_>, Denied>;

    /// Gives a take back, under the all-or-nothing cancel rule (whenever it comes).
    fn give_back(taken: Self::Taken<'_>);

    /// The verdict `try_acquire(cost)` would return now, taking nothing.
    fn check(&self, cost: u64) -> Result<(), Denied>;
}

/// [`GiveBack`] for `$limiter`, whose `try_reserve_now` takes and whose reservation's `undo`
/// gives back; `check` is `$check` on the limiter `$l`.
macro_rules! give_back {
    ($limiter:ident, $taken:ident, |$l:ident, $cost:ident| $check:expr) => {
        impl<C: Clock> GiveBack for $limiter<C> {
            type Taken<'a>
                = $taken<'a, C>
            where
                C: 'a;

            fn take(&self, cost: u64) -> Result<$taken<'_, C>, Denied> {
                self.try_reserve_now(cost)
            }

            fn give_back(taken: $taken<'_, C>) {
                taken.undo();
            }

            fn check(&self, $cost: u64) -> Result<(), Denied> {
                let $l = self;
                $check
            }
        }
    };
}

give_back!(Bucket, Reservation, |b, cost| {
    let now = b.clock().now();
    b.update(|state, quota| (None, gcra::try_acquire(state, now, quota, cost).map(drop)))
});
give_back!(MultiBucket, MultiReservation, |m, cost| m
    .check_now(cost)
    .map_err(Denied::from));

/// Requires `first` and then whatever `then` decides (any limiter) for `cost`, all or nothing:
/// if `then` refuses, `first`'s tokens are given back and `then`'s refusal returned. If `first`
/// refuses, `then` is not called (its wait, maybe longer, unknown: see [`all_of2`]).
///
/// ```
/// # #[cfg(feature = "keyed")] {
/// use std::time::Duration;
/// use tollgate::{all_of, Bucket, Denied, KeyedLimiter, ManualClock, Quota};
/// let clock = ManualClock::new();
/// let global = Bucket::with_clock(Quota::per_second(100).unwrap(), clock.clone());
/// let tenants = KeyedLimiter::with_clock(Quota::per_second(2).unwrap(), 1000, clock.clone());
/// assert_eq!(all_of(&global, 2, |c| tenants.try_acquire(&"acme", c)), Ok(()));
/// // The tenant refuses: the global bucket gets its token back.
/// assert_eq!(all_of(&global, 1, |c| tenants.try_acquire(&"acme", c)), Err(Denied::RetryAfter(Duration::from_millis(500))));
/// assert_eq!(global.available(), 98);
/// # }
/// ```
pub fn all_of<A: GiveBack + ?Sized>(
    first: &A,
    cost: u64,
    then: impl FnOnce(u64) -> Result<(), Denied>,
) -> Result<(), Denied> {
    let taken = first.take(cost)?;
    match then(cost) {
        Ok(()) => Ok(()),
        Err(denied) => {
            A::give_back(taken);
            Err(denied)
        }
    }
}

/// [`all_of`] for two [`GiveBack`] limiters, `second` checked without consuming when `first`
/// refuses: `RetryAfter` is the larger wait (`ExceedsBurst` if either says so).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{all_of2, Bucket, Denied, ManualClock, Quota};
/// let clock = ManualClock::new();
/// let tenant = Bucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
/// let global = Bucket::with_clock(Quota::per_second(1).unwrap().with_burst(5).unwrap(), clock.clone());
/// assert_eq!(all_of2(&tenant, &global, 5), Ok(()));
/// // The tenant waits 100 ms, the global bucket 1 s: the chain reports 1 s.
/// tenant.try_acquire(5).unwrap();
/// assert_eq!(all_of2(&tenant, &global, 1), Err(Denied::RetryAfter(Duration::from_secs(1))));
/// ```
pub fn all_of2<A: GiveBack + ?Sized, B: GiveBack + ?Sized>(
    first: &A,
    second: &B,
    cost: u64,
) -> Result<(), Denied> {
    let taken = match first.take(cost) {
        Ok(taken) => taken,
        Err(denied) => return Err(slowest(denied, second.check(cost))),
    };
    match second.take(cost) {
        Ok(_kept) => Ok(()),
        Err(denied) => {
            A::give_back(taken);
            Err(denied)
        }
    }
}

/// The slower of a refusal and another limiter's verdict.
fn slowest(denied: Denied, other: Result<(), Denied>) -> Denied {
    match (denied, other) {
        (Denied::RetryAfter(a), Err(Denied::RetryAfter(b))) => Denied::RetryAfter(a.max(b)),
        (_, Err(Denied::ExceedsBurst)) => Denied::ExceedsBurst,
        (denied, _) => denied,
    }
}
