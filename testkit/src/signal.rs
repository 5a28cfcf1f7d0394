//! [`Signal`]: a writer that raises a flag on its first write, so a test can start something
//! (moving the clock, say) only once a save has begun writing.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Collects what is written into `.0` and sets `.1` on every write.
///
/// ```
/// use std::io::Write;
/// use std::sync::{atomic::{AtomicBool, Ordering}, Arc};
/// let flag = Arc::new(AtomicBool::new(false));
/// let mut w = tollgate_testkit::signal::Signal(Vec::new(), flag.clone());
/// assert!(!flag.load(Ordering::Relaxed));
/// w.write_all(b"x").unwrap();
/// assert!(flag.load(Ordering::Relaxed));
/// assert_eq!(w.0, b"x");
/// ```
pub struct Signal(pub Vec<u8>, pub Arc<AtomicBool>);

impl Write for Signal {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.1.store(true, Ordering::Relaxed);
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
