//! The example server's `--state FILE`: restore the limiter at start, save it every
//! `--save-every` and at shutdown, atomically.
//!
//! * **Start.** The file is restored into the freshly built limiter. No file in an existing
//!   directory is a first start: the limiter starts **full**, with a `state: first start` line
//!   on stderr (a save replaces the file by a rename, so a crash never leaves no file). An
//!   unreadable or damaged file, or a missing directory, starts the limiter **drained** (no
//!   tokens, refilling at the quota's rate), with a `state: starting drained` line saying why: a
//!   process that cannot tell what it handed out before it stopped assumes it handed out
//!   everything, so a crash loop never removes the limit.
//! * **Saves** write a fresh temporary file beside `FILE` (created new, under a random name, so
//!   it never follows a link planted there), fsync it, rename it over `FILE` and fsync the
//!   directory: a crash at any point leaves the previous save or the new one, never a mix. Each
//!   periodic save prints `state: saved` on stderr.
//! * **After a clean stop** (SIGTERM, SIGINT) the last save happens after the server stopped
//!   taking requests, so the restarted server hands out nothing that was already handed out.
//!   **After `kill -9`** the restarted server gets the last completed save: it may hand out
//!   again what was admitted after that save read the limiter — at most what the limit admits
//!   in one `--save-every` interval plus one save's duration (`burst + rate × interval`), per
//!   crash.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tollgate::persist::Persist;
use tollgate::{
    Bucket, DefaultClock, KeyedLimiter, KeyedLimiterBuilder, KeyedPolicy, Limits, MultiBucket,
    Quota,
};

/// A limiter the server saves (each with its own [`Persist::save`]; this trait is the part of
/// it a `dyn` can call).
pub(crate) trait Saved: Send + Sync + 'static {
    /// Writes the limiter's state.
    fn save_to(&self, w: &mut dyn Write) -> io::Result<()>;
}

impl<T: Persist + Send + Sync + 'static> Saved for T {
    fn save_to(&self, w: &mut dyn Write) -> io::Result<()> {
        Persist::save(self, w)
    }
}

/// What the start found at the state file's path.
enum Found {
    /// A file to restore from.
    File(BufReader<File>),
    /// No file in an existing directory: a first start.
    Nothing,
}

/// Opens the state file, or says why it cannot be restored (for the log line).
fn open(path: &Path) -> Result<Found, String> {
    match File::open(path) {
        Ok(file) => Ok(Found::File(BufReader::new(file))),
        Err(e) if e.kind() == ErrorKind::NotFound && directory(path).is_dir() => Ok(Found::Nothing),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// The directory `path` is in.
fn directory(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The limiter `restore` builds from `path`'s contents; `full` builds one when there is no file
/// (a first start), and one that `drain` empties when the file cannot be restored. A `state:`
/// line says which and why.
fn restore_full_or_drained<T>(
    path: &Path,
    restore: impl FnOnce(BufReader<File>) -> Result<T, String>,
    full: impl FnOnce() -> T,
    drain: impl FnOnce(&T),
) -> Arc<T> {
    let shown = path.display();
    let why = match open(path) {
        Ok(Found::Nothing) => {
            eprintln!("state: first start: no saved state, starting full ({shown})");
            return Arc::new(full());
        }
        Ok(Found::File(r)) => match restore(r) {
            Ok(limiter) => {
                eprintln!("state: restored from {shown}");
                return Arc::new(limiter);
            }
            Err(why) => why,
        },
        Err(why) => why,
    };
    eprintln!("state: starting drained: {why} ({shown})");
    let limiter = full();
    drain(&limiter);
    Arc::new(limiter)
}

/// A limiter restored in place from `path` (a fresh one, full or drained).
fn in_place<T: Persist>(path: &Path, fresh: impl Fn() -> T, drain: impl FnOnce(&T)) -> Arc<T> {
    restore_full_or_drained(
        path,
        |r| {
            let limiter = fresh();
            limiter.restore(r).map_err(|e| e.to_string())?;
            Ok(limiter)
        },
        &fresh,
        drain,
    )
}

/// A keyed limiter (of one quota or of a policy a key) of at most `max_keys` keys, restored
/// from `path` by its builder (so the saved entries are found again), full or drained.
fn keyed<K, P: KeyedPolicy>(
    path: &Path,
    builder: impl Fn() -> KeyedLimiterBuilder<K, P, DefaultClock>,
) -> Arc<KeyedLimiter<K, P>>
where
    K: std::hash::Hash + Eq + Clone,
{
    restore_full_or_drained(
        path,
        |r| builder().restore(r).map_err(|e| e.to_string()),
        || builder().build().expect("max_keys is not 0"),
        KeyedLimiter::drain,
    )
}

/// Writes `limiter`'s state to `path` atomically: a new temporary file beside it (created
/// exclusively under a random name, so a link planted in the directory is never followed),
/// fsynced, renamed over `path`, the directory fsynced. A failed save removes its temporary file.
pub(crate) fn save(path: &Path, limiter: &dyn Saved) -> io::Result<()> {
    let dir = directory(path);
    // `FILE.XXXXXX.tmp`: an operator can tell whose it is if a `kill -9` leaves one behind.
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    let tmp = tempfile::Builder::new()
        .prefix(&name)
        .suffix(".tmp")
        .tempfile_in(dir)?;
    let mut w = BufWriter::new(tmp);
    limiter.save_to(&mut w)?;
    let tmp = w.into_inner().map_err(|e| e.into_error())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
}

/// Saves every `interval` until the task is dropped (each on a blocking thread: a save of a
/// large table must not hold up the runtime's workers).
pub(crate) async fn save_every(path: PathBuf, interval: Duration, limiter: Arc<dyn Saved>) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let (path, limiter) = (path.clone(), limiter.clone());
        let result = tokio::task::spawn_blocking(move || save(&path, &*limiter)).await;
        match result {
            Ok(Ok(())) => eprintln!("state: saved"),
            Ok(Err(e)) => eprintln!("state: save failed: {e}"),
            Err(e) => eprintln!("state: save failed: {e}"),
        }
    }
}

/// The server's limiters: built plain without `--state`, restored (or full, or drained) with it, and
/// remembered for saving.
#[derive(Default)]
pub(crate) struct Limiters {
    path: Option<PathBuf>,
    built: Option<Arc<dyn Saved>>,
}

impl Limiters {
    /// Limiters restored from and saved to `path` (plain ones for `None`).
    pub(crate) fn new(path: Option<PathBuf>) -> Limiters {
        Limiters { path, built: None }
    }

    /// The global bucket.
    pub(crate) fn bucket(&mut self, quota: Quota) -> Arc<Bucket> {
        let fresh = || Bucket::new(quota);
        self.build(fresh, |path| in_place(path, fresh, Bucket::drain))
    }

    /// A keyed limiter: one quota a key, or (`--limit`) a policy a key.
    pub(crate) fn keyed<K, P: KeyedPolicy>(
        &mut self,
        builder: impl Fn() -> KeyedLimiterBuilder<K, P, DefaultClock>,
    ) -> Arc<KeyedLimiter<K, P>>
    where
        K: std::hash::Hash + Eq + Clone,
        KeyedLimiter<K, P>: Saved,
    {
        let plain = || builder().build().expect("max_keys is not 0");
        self.build(plain, |path| keyed(path, &builder))
    }

    /// The global policy of the `--limit` flags.
    pub(crate) fn multi(&mut self, limits: Limits) -> Arc<MultiBucket> {
        let fresh = || MultiBucket::new(limits.clone());
        self.build(fresh, |path| in_place(path, fresh, MultiBucket::drain))
    }

    /// `plain()` without `--state`; with it, what `restored` builds from the file (or full, or drained),
    /// remembered for saving.
    fn build<T: Saved>(
        &mut self,
        plain: impl FnOnce() -> T,
        restored: impl FnOnce(&Path) -> Arc<T>,
    ) -> Arc<T> {
        match self.path.clone() {
            None => Arc::new(plain()),
            Some(path) => self.remember(restored(&path)),
        }
    }

    fn remember<T: Saved>(&mut self, limiter: Arc<T>) -> Arc<T> {
        self.built = Some(limiter.clone());
        limiter
    }

    /// Starts the periodic saves (a no-op without `--state`); they stop when the returned
    /// handle is aborted.
    pub(crate) fn save_every(&self, interval: Duration) -> Option<tokio::task::JoinHandle<()>> {
        let (path, limiter) = (self.path.clone()?, self.built.clone()?);
        Some(tokio::spawn(save_every(path, interval, limiter)))
    }

    /// The save at shutdown, after the server stopped taking requests.
    pub(crate) fn save_final(&self) -> io::Result<()> {
        match (&self.path, &self.built) {
            (Some(path), Some(limiter)) => save(path, &**limiter),
            _ => Ok(()),
        }
    }
}
