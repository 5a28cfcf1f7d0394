//! The example server's `--state FILE`: restore the limiter at start, save it every
//! `--save-every` and at shutdown, atomically.
//!
//! * **Start.** The file is restored into the freshly built limiter. No file in an existing
//!   directory is a first start: the limiter starts **full**, with a `state: first start` line
//!   on stderr (a save replaces the file by a rename, so a crash never leaves no file). An
//!   unreadable or damaged file, or a missing directory, starts the limiter **drained** (no
//!   tokens, refilling at the quota's rate), with a `state: starting drained` line saying why: a
//!   process that cannot tell what it handed out before it stopped assumes it handed out
//!   everything, so a crash loop never removes the limit. A file larger than any save of this
//!   server (64 MiB) is damaged too, and is not read. Something other than a regular file at
//!   `FILE` (a directory, a FIFO, a socket, a device), or a file name too long for the save's
//!   temporary file (over 244 bytes), is refused: exit 2 with a message. A link to a regular
//!   file is restored from; the first save replaces the link itself with a regular file and
//!   never writes to its target. A link to a file that does not exist starts drained, as a
//!   missing directory does: what it names may be out of reach (a volume not mounted).
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

use std::fs::{File, Metadata};
use std::io::{self, BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tollgate::persist::Persist;
use tollgate::{
    Bucket, DefaultClock, KeyedLimiter, KeyedLimiterBuilder, KeyedPolicy, Limits, MultiBucket,
    Quota,
};

/// The most bytes the start reads from the state file, and the largest file it restores from.
/// The largest save this server makes is a table of `MAX_KEYS` keys of four quotas each, 41
/// bytes a key (fingerprint, quota count, four lacks) plus 13 bytes a frame of 4,096 keys:
/// about 41 MiB. 64 bytes a key leave room for the few keys a save racing insertions holds
/// past `MAX_KEYS`. A larger file is no save of this server, and reading it through would
/// only delay the start (and hold whatever overrides it lists in memory).
const MAX_STATE_BYTES: u64 = crate::MAX_KEYS as u64 * 64;

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

/// The longest file name most file systems take (`NAME_MAX` on Linux and the BSDs).
const MAX_NAME: usize = 255;

/// What a save's temporary file adds to the state file's name: `.XXXXXX.tmp`.
const TMP_SUFFIX: usize = ".XXXXXX.tmp".len();

/// The state file as the restore reads it: at most [`MAX_STATE_BYTES`].
type Reader = BufReader<io::Take<File>>;

/// What the start found at the state file's path.
pub(crate) enum Found {
    /// A regular file to restore from.
    File(Reader),
    /// No file in an existing directory: a first start.
    Nothing,
    /// A file that cannot be restored from (why, for the log line): the start is drained.
    Unreadable(String),
}

/// Opens the state file at `path` for the restore. `Err` (a usage error, exit 2) where
/// something other than a regular file is there, or a link to one: no save can be read from
/// it (a FIFO would block the start until a writer came, a device feed it without end), and
/// the saves would replace it (a FIFO, a socket or `/dev/null` itself, as root). The type is
/// checked before opening, so a device found there is not opened, and again on the file
/// opened, which is the one read: a FIFO swapped in between is refused too, its opening not
/// blocking (`O_NONBLOCK`).
pub(crate) fn open(path: &Path) -> Result<Found, String> {
    let shown = path.display();
    // Every save writes `FILE.XXXXXX.tmp` first ([`save`]): a name too long for that would
    // fail every save.
    let name = path.file_name().map_or(0, |n| n.len());
    if name > MAX_NAME - TMP_SUFFIX {
        return Err(format!(
            "--state {shown}: a file name of {name} bytes leaves no room for the save's \
             temporary file (at most {} bytes)",
            MAX_NAME - TMP_SUFFIX
        ));
    }
    if let Ok(meta) = std::fs::metadata(path) {
        regular(path, &meta)?;
    }
    let file = match open_nonblocking(path) {
        Ok(file) => file,
        // A link found where no file is leads nowhere: what it names may hold a save out of
        // reach now (a volume not mounted), so it is no first start.
        Err(e) if e.kind() == ErrorKind::NotFound && std::fs::symlink_metadata(path).is_ok() => {
            return Ok(Found::Unreadable(format!(
                "cannot read {shown}: a link to a file that does not exist ({e})"
            )))
        }
        Err(e) if e.kind() == ErrorKind::NotFound && directory(path).is_dir() => {
            return Ok(Found::Nothing)
        }
        Err(e) => return Ok(Found::Unreadable(format!("cannot read {shown}: {e}"))),
    };
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(e) => return Ok(Found::Unreadable(format!("cannot read {shown}: {e}"))),
    };
    regular(path, &meta)?;
    if meta.len() > MAX_STATE_BYTES {
        return Ok(Found::Unreadable(format!(
            "{shown} holds {} bytes, more than any save of this server ({MAX_STATE_BYTES} at most)",
            meta.len()
        )));
    }
    // Bounded again as read: the file may grow after the check.
    Ok(Found::File(BufReader::new(file.take(MAX_STATE_BYTES))))
}

/// `Err` (the usage error's message) unless `meta` is a regular file's.
fn regular(path: &Path, meta: &Metadata) -> Result<(), String> {
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "a directory"
    } else {
        special(meta)
    };
    Err(format!(
        "--state {}: {what}, not a regular file",
        path.display()
    ))
}

/// What a file that is neither a regular file nor a directory is.
#[cfg(unix)]
fn special(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special(_: &Metadata) -> &'static str {
    "a special file"
}

/// Opens `path` for reading without waiting for a FIFO's writer (`O_NONBLOCK`; it changes
/// nothing for a regular file) and without making a terminal the process's controlling one
/// (`O_NOCTTY`).
#[cfg(unix)]
fn open_nonblocking(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// The directory `path` is in.
fn directory(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The limiter `restore` builds from the file `found`; `full` builds one when there is no file
/// (a first start), and one that `drain` empties when the file cannot be restored. A `state:`
/// line says which and why.
fn restore_full_or_drained<T>(
    path: &Path,
    found: Found,
    restore: impl FnOnce(Reader) -> Result<T, String>,
    full: impl FnOnce() -> T,
    drain: impl FnOnce(&T),
) -> Arc<T> {
    let shown = path.display();
    let why = match found {
        Found::Nothing => {
            eprintln!("state: first start: no saved state, starting full ({shown})");
            return Arc::new(full());
        }
        Found::File(r) => match restore(r) {
            Ok(limiter) => {
                eprintln!("state: restored from {shown}");
                return Arc::new(limiter);
            }
            Err(why) => why,
        },
        Found::Unreadable(why) => why,
    };
    eprintln!("state: starting drained: {why} ({shown})");
    let limiter = full();
    drain(&limiter);
    Arc::new(limiter)
}

/// A limiter restored in place from `found` (a fresh one, full or drained).
fn in_place<T: Persist>(
    path: &Path,
    found: Found,
    fresh: impl Fn() -> T,
    drain: impl FnOnce(&T),
) -> Arc<T> {
    restore_full_or_drained(
        path,
        found,
        |r| {
            let limiter = fresh();
            limiter.restore(r).map_err(|e| e.to_string())?;
            Ok(limiter)
        },
        &fresh,
        drain,
    )
}

/// A keyed limiter (of one quota or of a policy a key) from `builder`, restored from `found`
/// by the builder (so the saved entries are found again), full or drained.
fn keyed<K, P: KeyedPolicy>(
    path: &Path,
    found: Found,
    builder: impl Fn() -> KeyedLimiterBuilder<K, P, DefaultClock>,
) -> Arc<KeyedLimiter<K, P>>
where
    K: std::hash::Hash + Eq + Clone,
{
    restore_full_or_drained(
        path,
        found,
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
pub(crate) struct Limiters {
    path: Option<PathBuf>,
    /// What the start found at `path`, taken by the one limiter the server builds.
    found: Option<Found>,
    built: Option<Arc<dyn Saved>>,
}

impl Limiters {
    /// Limiters restored from and saved to `path` (plain ones for `None`); `Err` (a usage
    /// error) where `path` is not a regular file ([`open`]).
    pub(crate) fn open(path: Option<PathBuf>) -> Result<Limiters, String> {
        let found = path.as_deref().map(open).transpose()?;
        Ok(Limiters {
            path,
            found,
            built: None,
        })
    }

    /// The global bucket.
    pub(crate) fn bucket(&mut self, quota: Quota) -> Arc<Bucket> {
        let fresh = || Bucket::new(quota);
        self.build(fresh, |path, found| {
            in_place(path, found, fresh, Bucket::drain)
        })
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
        self.build(plain, |path, found| keyed(path, found, &builder))
    }

    /// The global policy of the `--limit` flags.
    pub(crate) fn multi(&mut self, limits: Limits) -> Arc<MultiBucket> {
        let fresh = || MultiBucket::new(limits.clone());
        self.build(fresh, |path, found| {
            in_place(path, found, fresh, MultiBucket::drain)
        })
    }

    /// `plain()` without `--state`; with it, what `restored` builds from what the start found
    /// there (or full, or drained), remembered for saving.
    fn build<T: Saved>(
        &mut self,
        plain: impl FnOnce() -> T,
        restored: impl FnOnce(&Path, Found) -> Arc<T>,
    ) -> Arc<T> {
        match (self.path.clone(), self.found.take()) {
            (Some(path), Some(found)) => {
                let limiter = restored(&path, found);
                self.built = Some(limiter.clone());
                limiter
            }
            _ => Arc::new(plain()),
        }
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
