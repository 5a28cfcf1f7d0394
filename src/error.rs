//! The two error types: [`ConfigError`] at build time, [`Denied`] at decision time.

use core::fmt;
use core::time::Duration;

/// Why a [`Quota`](crate::Quota) (or another configuration) was rejected.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ConfigError, Quota};
/// assert_eq!(Quota::new(0, Duration::from_secs(1), 1), Err(ConfigError::ZeroTokens));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// `tokens` was 0: a rate of zero admits nothing ever. Use a positive rate.
    ZeroTokens,
    /// `per` was zero: the rate would be infinite. Use a positive period.
    ZeroPeriod,
    /// `per` was longer than `u64::MAX` nanoseconds (about 584 years).
    PeriodTooLong,
    /// `burst` was 0: no request could ever be admitted. Use a burst of at least 1.
    ZeroBurst,
    /// rate × [`HORIZON`](crate::HORIZON) + burst does not fit the 63-bit state.
    BeyondRange,
    /// A quota's state scale ([`Quota::with_scale`](crate::Quota::with_scale)) was 0. Use at
    /// least one unit per token.
    ZeroScale,
    /// The initial token count was larger than the burst.
    InitialAboveBurst,
    /// A floating-point rate was zero, negative, NaN or infinite.
    InvalidRate,
    /// A duration parameter (warm-up, maximum burst) was out of range.
    InvalidDuration,
    /// A floating-point factor (such as Guava's cold factor) was below 1, NaN or infinite.
    InvalidFactor,
    /// A capacity (such as the keyed limiter's `max_keys`) was zero.
    ZeroCapacity,
    /// A [`Smooth`](crate::Smooth) rate above 1,000,000 permits per second, where a permit
    /// costs 0 whole µs and nothing is limited. Use a [`Bucket`](crate::Bucket).
    RateTooHigh,
    /// A [`Limits`](crate::Limits) was given no quota. Give it at least one.
    NoQuotas,
    /// A [`Limits`](crate::Limits) was given more than four quotas. Merge or drop some.
    TooManyQuotas,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::ZeroTokens => "the quota's token count is 0; use at least 1 token per period",
            ConfigError::ZeroPeriod => "the quota's period is zero; use a positive duration",
            ConfigError::PeriodTooLong => {
                "the quota's period exceeds u64::MAX nanoseconds (~584 years); use a shorter period"
            }
            ConfigError::ZeroBurst => "the quota's burst is 0; use a burst of at least 1",
            ConfigError::BeyondRange => {
                "rate x 100 years + burst does not fit the 63-bit state; lower the rate or the burst"
            }
            ConfigError::ZeroScale => "the quota's scale is 0; use at least 1 unit per token",
            ConfigError::InitialAboveBurst => "the initial token count exceeds the burst",
            ConfigError::InvalidRate => "the rate must be a finite number greater than zero",
            ConfigError::InvalidDuration => "a duration parameter is zero or too large",
            ConfigError::InvalidFactor => "the factor must be a finite number of at least 1",
            ConfigError::ZeroCapacity => "the capacity must be at least 1",
            ConfigError::RateTooHigh => {
                "a Smooth rate above 1,000,000 permits/s is not limited (Guava counts whole microseconds); use a Bucket"
            }
            ConfigError::NoQuotas => "a Limits needs at least one quota",
            ConfigError::TooManyQuotas => "a Limits holds at most four quotas",
        })
    }
}

#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
impl std::error::Error for ConfigError {}

/// A refused request. A refusal is a value, never a panic, and it changes nothing.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Bucket, Denied, ManualClock, Quota};
/// let bucket = Bucket::with_clock(Quota::per_second(1).unwrap(), ManualClock::new());
/// assert_eq!(bucket.try_acquire(1), Ok(()));
/// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_secs(1))));
/// assert_eq!(bucket.try_acquire(2), Err(Denied::ExceedsBurst));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// Too few tokens now. The same request is admitted after exactly this long (the smallest
    /// whole number of nanoseconds), if nothing else consumes in between.
    RetryAfter(Duration),
    /// The cost is larger than the burst: no wait will ever admit it.
    ExceedsBurst,
}

impl Denied {
    /// The wait rounded up to whole seconds, at least 1, saturating: what an HTTP `Retry-After`
    /// header should carry (never `0`, "retry now"). `None` for [`Denied::ExceedsBurst`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Denied;
    /// assert_eq!(Denied::RetryAfter(Duration::from_millis(1)).retry_after_secs(), Some(1));
    /// assert_eq!(Denied::RetryAfter(Duration::from_millis(1001)).retry_after_secs(), Some(2));
    /// assert_eq!(Denied::RetryAfter(Duration::MAX).retry_after_secs(), Some(u64::MAX));
    /// assert_eq!(Denied::ExceedsBurst.retry_after_secs(), None);
    /// ```
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Denied::RetryAfter(d) => {
                let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
                Some(secs.max(1))
            }
            Denied::ExceedsBurst => None,
        }
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::RetryAfter(d) => write!(f, "rate limited: retry after {d:?}"),
            Denied::ExceedsBurst => {
                f.write_str("the cost exceeds the burst: no wait will ever admit this request")
            }
        }
    }
}

#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
impl std::error::Error for Denied {}
