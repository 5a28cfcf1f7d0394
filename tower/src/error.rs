//! [`Error`]: a configuration of the layer that cannot work.

use std::fmt;

/// Why a piece of the layer's configuration was rejected.
///
/// ```
/// use tollgate_tower::{Error, IpGrouping};
/// assert_eq!(IpGrouping::new(40, 64), Err(Error::InvalidPrefix));
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// An IP prefix length was above 32 (IPv4) or 128 (IPv6).
    InvalidPrefix,
    /// The `RateLimit-Policy` name was empty or held a character outside printable ASCII.
    InvalidPolicyName,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::InvalidPrefix => {
                "IP prefix length out of range: use 0..=32 for IPv4 and 0..=128 for IPv6"
            }
            Error::InvalidPolicyName => {
                "the policy name must be non-empty printable ASCII (a Structured Fields string)"
            }
        })
    }
}

impl std::error::Error for Error {}
