//! [`Limits`]: one to four quotas that must all hold for a request to be admitted.

use core::fmt;

use crate::{ConfigError, Quota};

/// The most quotas one [`Limits`] holds.
pub(crate) const MAX_LIMITS: usize = 4;

/// A policy of one to four [`Quota`]s that must **all** hold ("10 per second and 10,000 per
/// day"), in the order given.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ConfigError, Limits, Quota};
/// let per_second = Quota::per_second(10).unwrap();
/// let per_day = Quota::new(10_000, Duration::from_secs(86_400), 10_000).unwrap();
/// let limits = Limits::new([per_second, per_day]).unwrap();
/// assert_eq!(limits.quotas(), &[per_second, per_day]);
/// assert_eq!(Limits::new([]), Err(ConfigError::NoQuotas));
/// assert_eq!(Limits::new([per_second; 5]), Err(ConfigError::TooManyQuotas));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Limits {
    /// `quotas[..len]` are the policy's; the rest repeat `quotas[0]`, so the derived equality
    /// is the policies'.
    quotas: [Quota; MAX_LIMITS],
    len: usize,
}

impl Limits {
    /// A policy of the given quotas, in order ([`ConfigError::NoQuotas`] or `TooManyQuotas`).
    pub fn new(quotas: impl IntoIterator<Item = Quota>) -> Result<Limits, ConfigError> {
        let mut iter = quotas.into_iter();
        let first = iter.next().ok_or(ConfigError::NoQuotas)?;
        let mut out = [first; MAX_LIMITS];
        let mut len = 1;
        for quota in iter {
            *out.get_mut(len).ok_or(ConfigError::TooManyQuotas)? = quota;
            len += 1;
        }
        Ok(Limits { quotas: out, len })
    }

    /// The quotas, in the order given to [`Limits::new`].
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas[..self.len]
    }
}

impl From<Quota> for Limits {
    /// A policy of one quota.
    fn from(quota: Quota) -> Limits {
        Limits {
            quotas: [quota; MAX_LIMITS],
            len: 1,
        }
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Limits").field(&self.quotas()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn order_and_bounds() {
        let a = Quota::per_second(1).unwrap();
        let b = Quota::new(5, Duration::from_secs(60), 7).unwrap();
        let l = Limits::new([b, a, b]).unwrap();
        assert_eq!(l.quotas(), &[b, a, b]);
        assert_eq!(Limits::new([a, b, a, b]).unwrap().quotas().len(), 4);
        assert_eq!(
            Limits::new(core::iter::repeat(a)),
            Err(ConfigError::TooManyQuotas)
        );
        assert_eq!(Limits::new(core::iter::empty()), Err(ConfigError::NoQuotas));
        assert_eq!(Limits::from(a), Limits::new([a]).unwrap());
        assert_ne!(Limits::new([a, b]).unwrap(), Limits::new([b, a]).unwrap());
        assert_ne!(Limits::new([a]).unwrap(), Limits::new([a, a]).unwrap());
    }
}
