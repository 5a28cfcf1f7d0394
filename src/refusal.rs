//! [`Refusal`]: a policy's refusal and the quota that decided it.

use crate::error::Denied;
use core::fmt;

/// A policy's refusal: the [`Denied`] and the index (in [`Limits::quotas`](crate::Limits::quotas)
/// order) of the quota that decided it ("the per-day limit fired"): for
/// [`Denied::ExceedsBurst`] the smallest burst, for [`Denied::RetryAfter`] the longest wait,
/// after which every quota holds the cost (the first of equals).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, Limiter, Limits, ManualClock, MultiBucket, Quota};
/// let per_second = Quota::per_second(10).unwrap();
/// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
/// let policy = MultiBucket::with_clock(Limits::new([per_second, per_minute]).unwrap(), ManualClock::new());
/// assert_eq!(policy.try_acquire(10), Ok(()));
/// let refusal = policy.decide(&(), 10).unwrap_err();
/// assert_eq!(refusal.quota_index(), 0); // 1 s until 10 per second are back; the minute holds 10
/// assert_eq!(refusal.denied(), Denied::RetryAfter(Duration::from_secs(1)));
/// assert_eq!(policy.decide(&(), 11).unwrap_err().quota_index(), 0); // burst 10 < 11
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    denied: Denied,
    quota_index: usize,
}

impl Refusal {
    /// A refusal `denied` decided by quota `quota_index` (for limiters stored elsewhere).
    ///
    /// ```
    /// use tollgate::{Denied, Refusal};
    /// let r = Refusal::new(Denied::ExceedsBurst, 1);
    /// assert_eq!((r.denied(), r.quota_index()), (Denied::ExceedsBurst, 1));
    /// ```
    pub const fn new(denied: Denied, quota_index: usize) -> Refusal {
        Refusal {
            denied,
            quota_index,
        }
    }

    /// The refusal, as a single limiter would report it.
    ///
    /// ```
    /// use tollgate::{Denied, Refusal};
    /// assert_eq!(Refusal::new(Denied::ExceedsBurst, 0).denied(), Denied::ExceedsBurst);
    /// ```
    pub const fn denied(&self) -> Denied {
        self.denied
    }

    /// The index of the quota that decided the refusal, in the policy's order.
    ///
    /// ```
    /// use tollgate::{Denied, Refusal};
    /// assert_eq!(Refusal::new(Denied::ExceedsBurst, 2).quota_index(), 2);
    /// ```
    pub const fn quota_index(&self) -> usize {
        self.quota_index
    }
}

impl From<Refusal> for Denied {
    /// The [`Denied`] alone.
    fn from(refusal: Refusal) -> Denied {
        refusal.denied
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (quota {})", self.denied, self.quota_index)
    }
}

#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
impl std::error::Error for Refusal {}
