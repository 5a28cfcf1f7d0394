//! [`Error`]: why a plan cannot run, a strategy cannot be built, a cell failed or an output
//! could not be written.

use std::fmt;
use std::path::PathBuf;

/// What a strategy's builder returns when it cannot express a setup (any error converts,
/// `String` and `&str` included, so `?` works in a builder).
pub type BuildError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure of the harness as a library: the message says what to change.
///
/// ```
/// use tollgate_bench::{Error, Plan, Regime};
/// let mut plan = Plan::new(vec![1], vec![Regime::Deny], std::time::Duration::from_millis(5));
/// plan.cost = 5000;
/// let err = plan.validate().unwrap_err();
/// assert!(matches!(err, Error::Plan(_)));
/// assert!(err.to_string().contains("exceeds the burst"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The plan (threads, keys, quota, cost) cannot run; the message names the option to change.
    Plan(String),
    /// A strategy cannot be built for a cell's setup (e.g. a burst too large for a peer).
    Strategy {
        /// The strategy's name.
        name: String,
        /// The regime of the cell it was built for.
        regime: &'static str,
        /// Why its builder refused.
        source: BuildError,
    },
    /// A benchmark thread could not be spawned or panicked.
    Thread(String),
    /// An output file or folder could not be written.
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The latency histogram refused its bounds or a merge (a bug in the harness).
    Histogram(String),
    /// An SVG chart could not be drawn.
    Chart {
        /// The chart's path.
        path: PathBuf,
        /// The drawing backend's message.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Plan(msg) | Error::Thread(msg) => f.write_str(msg),
            Error::Histogram(msg) => write!(f, "histogram: {msg}"),
            Error::Strategy {
                name,
                regime,
                source,
            } => write!(f, "strategy {name} in regime {regime}: {source}"),
            Error::Io { path, source } => write!(f, "cannot write {}: {source}", path.display()),
            Error::Chart { path, message } => {
                write!(f, "cannot draw {}: {message}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Strategy { source, .. } => Some(&**source),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
