//! The file format ([the module](super)'s "The format"):
//!
//! ```text
//! file  = "TOLLGATE" version:u16  frame*  end
//! frame = kind:u8  len:u32  payload[len]  crc32(kind ‖ len ‖ payload):u32
//! end   = frame of kind END: records:u64  crc32(every byte before the end frame):u32
//! ```
//!
//! The end frame's record count and file CRC catch a file cut at a frame boundary, frames
//! dropped, repeated or reordered, and a file spliced from two.

use super::RestoreError;
use crate::quota::Quota;
use alloc::vec::Vec;
use core::time::Duration;
use std::io::{self, Read, Write};

/// The first eight bytes of every saved state.
pub(crate) const MAGIC: [u8; 8] = *b"TOLLGATE";

use super::VERSION;

/// The largest frame payload: bounds a reader's buffer.
pub(crate) const MAX_FRAME: usize = 1 << 20;

/// Frame kinds: `HEADER` first, `END` last, and each limiter's own between.
#[cfg_attr(not(feature = "keyed"), allow(dead_code))]
pub(crate) mod kind {
    /// Which limiter, and the wall-clock anchor.
    pub(crate) const HEADER: u8 = 1;
    /// One [`Bucket`](crate::Bucket): its record (quota, and the units it lacks at the anchor).
    pub(crate) const BUCKET: u8 = 2;
    /// A [`ShardedBucket`](crate::ShardedBucket): its quota and the tokens it holds at the
    /// anchor, `held:u128 / scale:u64` (leased tokens count as spent), then, only where it
    /// owes tokens there (held 0), `owed:u128` in the same unit.
    pub(crate) const SHARDED: u8 = 3;
    /// A [`Smooth`](crate::Smooth): the mode (tag, two `f64`), the six parameter words, the
    /// next free time after the save's reading (µs, `i64`), the stored permits (`f64`).
    pub(crate) const SMOOTH: u8 = 4;
    /// A `KeyedLimiter`'s table-wide part: default quota, fingerprint seed, override count.
    pub(crate) const KEYED: u8 = 5;
    /// One override quota of a `KeyedLimiter`, by fingerprint.
    pub(crate) const OVERRIDE: u8 = 6;
    /// Up to [`ENTRIES_PER_FRAME`](super::ENTRIES_PER_FRAME) keyed entries: fingerprint, lack.
    pub(crate) const ENTRIES: u8 = 7;
    /// The state a `KeyedLimiter` gives keys it does not track, read after its entries.
    pub(crate) const FLOOR: u8 = 8;
    /// A [`MultiBucket`](crate::MultiBucket): the quota count (`u8`), then one record per quota.
    pub(crate) const MULTI: u8 = 9;
    /// A `KeyedMultiLimiter`'s `KEYED`: the default policy (quota count, quotas), seed, count.
    pub(crate) const KEYED_MULTI: u8 = 10;
    /// One override policy of a `KeyedMultiLimiter`, by fingerprint.
    pub(crate) const OVERRIDE_MULTI: u8 = 11;
    /// Keyed policy entries: a count, then fingerprint, quota count and each quota's lack.
    pub(crate) const MULTI_ENTRIES: u8 = 12;
    /// The end: record count and the checksum of everything before it.
    pub(crate) const END: u8 = 0x7f;
}

/// Keyed entries per `ENTRIES` frame (16 bytes each: 64 KiB frames).
#[cfg_attr(not(feature = "keyed"), allow(dead_code))]
pub(crate) const ENTRIES_PER_FRAME: usize = 4096;

/// The limiter a file holds (the header's first byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limiter {
    Bucket = 1,
    Sharded = 2,
    Smooth = 3,
    Keyed = 4,
    Multi = 5,
    KeyedMulti = 6,
}

impl Limiter {
    fn from_u8(b: u8) -> Option<Limiter> {
        use Limiter::*;
        [Bucket, Sharded, Smooth, Keyed, Multi, KeyedMulti]
            .into_iter()
            .find(|&l| l as u8 == b)
    }

    /// The type's name, for errors (by discriminant, from 1).
    pub(crate) fn name(self) -> &'static str {
        const NAMES: [&str; 6] = [
            "Bucket",
            "ShardedBucket",
            "Smooth",
            "KeyedLimiter",
            "MultiBucket",
            "KeyedMultiLimiter",
        ];
        NAMES[self as usize - 1]
    }
}

/// Writes frames to `W`, keeping the running file checksum.
#[derive(Debug)]
pub struct FrameWriter<W: Write> {
    w: W,
    file: crc32fast::Hasher,
    buf: Vec<u8>,
    records: u64,
}

impl<W: Write> FrameWriter<W> {
    /// Writes the magic number, the version and the header (`limiter`, `wall_ns` since 1970).
    pub(crate) fn start(w: W, limiter: Limiter, wall_ns: u128) -> io::Result<Self> {
        let mut fw = FrameWriter {
            w,
            file: crc32fast::Hasher::new(),
            buf: Vec::with_capacity(64),
            records: 0,
        };
        let mut head = [0u8; 10];
        head[..8].copy_from_slice(&MAGIC);
        head[8..].copy_from_slice(&VERSION.to_le_bytes());
        fw.file.update(&head);
        fw.w.write_all(&head)?;
        let mut p = Payload::default();
        p.u8(limiter as u8).u128(wall_ns);
        fw.frame(kind::HEADER, &p.0)?;
        Ok(fw)
    }

    /// One frame; counted as a record (the end frame checks the count).
    pub(crate) fn frame(&mut self, kind: u8, payload: &[u8]) -> io::Result<()> {
        debug_assert!(payload.len() <= MAX_FRAME);
        self.buf.clear();
        self.buf.push(kind);
        self.buf
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(payload);
        let crc = crc32fast::hash(&self.buf);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.file.update(&self.buf);
        self.records += 1;
        self.w.write_all(&self.buf)
    }

    /// The end frame, then a flush. Returns the writer.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        let mut p = Payload::default();
        p.u64(self.records).u32(self.file.clone().finalize());
        self.frame(kind::END, &p.0)?;
        self.w.flush()?;
        Ok(self.w)
    }
}

/// A frame payload being built.
#[derive(Debug, Default)]
pub struct Payload(pub(crate) Vec<u8>);

/// `Payload::T(v)` writes and `Cursor::T()` reads an integer of type `T`, little-endian.
macro_rules! integers {
    ($($t:ident)*) => {
        impl Payload {
            $(pub(crate) fn $t(&mut self, v: $t) -> &mut Self {
                self.0.extend_from_slice(&v.to_le_bytes());
                self
            })*
        }
        impl Cursor<'_> {
            $(pub(crate) fn $t(&mut self) -> Result<$t, RestoreError> {
                Ok($t::from_le_bytes(self.take()?))
            })*
        }
    };
}
integers!(u8 u32 u64 i64 u128);

impl Payload {
    /// One bucket's record: its quota and the units it lacks from full at the anchor.
    pub(crate) fn record(&mut self, q: &Quota, lack: u64) -> &mut Self {
        self.quota(q).u64(lack)
    }
    /// A quota as `tokens`, `per` in nanoseconds and `burst`: what [`Quota::new`] takes.
    pub(crate) fn quota(&mut self, q: &Quota) -> &mut Self {
        // Never saturates: `Quota::new` refuses periods beyond u64 nanoseconds.
        let per = crate::clock::saturating_nanos(q.per());
        self.u64(q.tokens()).u64(per).u64(q.burst())
    }
}

/// Reads frames from `R`, checking each frame's checksum and, at the end, the file's.
#[derive(Debug)]
pub struct FrameReader<R: Read> {
    r: R,
    file: crc32fast::Hasher,
    buf: Vec<u8>,
    records: u64,
    wall_ns: u128,
}

impl<R: Read> FrameReader<R> {
    /// Reads the magic number, the version and the header, which must name `expected`.
    pub(crate) fn open(r: R, expected: Limiter) -> Result<Self, RestoreError> {
        let mut fr = FrameReader {
            r,
            file: crc32fast::Hasher::new(),
            buf: Vec::new(),
            records: 0,
            wall_ns: 0,
        };
        let mut head = [0u8; 10];
        fr.fill(&mut head[..8])?;
        if head[..8] != MAGIC {
            return Err(RestoreError::NotAState);
        }
        fr.fill(&mut head[8..])?;
        let version = u16::from_le_bytes([head[8], head[9]]);
        if version != VERSION {
            return Err(RestoreError::UnsupportedVersion(version));
        }
        fr.file.update(&head);
        let (k, mut p) = fr.next()?;
        if k != kind::HEADER {
            return Err(RestoreError::Corrupt("the first frame is not a header"));
        }
        let limiter = p.u8()?;
        let wall_ns = p.u128()?;
        p.end()?;
        let limiter = Limiter::from_u8(limiter).ok_or(RestoreError::Corrupt("unknown limiter"))?;
        if limiter != expected {
            return Err(RestoreError::WrongLimiter {
                saved: limiter.name(),
                restoring: expected.name(),
            });
        }
        fr.wall_ns = wall_ns;
        Ok(fr)
    }

    /// The wall-clock anchor of the save: nanoseconds since the Unix epoch.
    pub(crate) fn wall_ns(&self) -> u128 {
        self.wall_ns
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RestoreError> {
        self.r.read_exact(buf).map_err(RestoreError::from_io)
    }

    /// The next frame, checksum verified; the end frame also checks the count and file CRC.
    pub(crate) fn next(&mut self) -> Result<(u8, Cursor<'_>), RestoreError> {
        let before = self.file.clone();
        let mut head = [0u8; 5];
        self.fill(&mut head)?;
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_FRAME {
            return Err(RestoreError::Corrupt(
                "a frame longer than any writer makes",
            ));
        }
        self.buf.clear();
        self.buf.resize(len + 4, 0);
        self.r
            .read_exact(&mut self.buf)
            .map_err(RestoreError::from_io)?;
        let crc = u32::from_le_bytes(self.buf[len..].try_into().unwrap_or([0; 4]));
        let mut h = crc32fast::Hasher::new();
        h.update(&head);
        h.update(&self.buf[..len]);
        if h.finalize() != crc {
            return Err(RestoreError::Corrupt("frame checksum mismatch"));
        }
        self.file.update(&head);
        self.file.update(&self.buf[..len + 4]);
        let k = head[0];
        if k == kind::END {
            let mut p = Cursor(&self.buf[..len]);
            let records = p.u64()?;
            let file_crc = p.u32()?;
            p.end()?;
            if records != self.records || file_crc != before.finalize() {
                return Err(RestoreError::Corrupt(
                    "frames missing, repeated or reordered",
                ));
            }
            return Ok((k, Cursor(&[])));
        }
        self.records += 1;
        Ok((k, Cursor(&self.buf[..len])))
    }

    /// The next frame, which must be of kind `k`.
    pub(crate) fn expect(&mut self, k: u8) -> Result<Cursor<'_>, RestoreError> {
        match self.next()? {
            (found, p) if found == k => Ok(p),
            _ => Err(RestoreError::Corrupt("a frame out of place")),
        }
    }
}

/// Reads one frame's payload; every read past its end is [`RestoreError::Corrupt`].
#[derive(Debug)]
pub struct Cursor<'a>(pub(crate) &'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], RestoreError> {
        if self.0.len() < N {
            return Err(RestoreError::Corrupt("a frame shorter than its contents"));
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        let mut out = [0u8; N];
        out.copy_from_slice(head);
        Ok(out)
    }
    /// A quota written by [`Payload::quota`], validated again by [`Quota::new`].
    pub(crate) fn quota(&mut self) -> Result<Quota, RestoreError> {
        let (tokens, per, burst) = (self.u64()?, self.u64()?, self.u64()?);
        Quota::new(tokens, Duration::from_nanos(per), burst)
            .map_err(|_| RestoreError::Corrupt("an invalid quota"))
    }
    /// A record written by [`Payload::record`]: the quota and its lack.
    pub(crate) fn record(&mut self) -> Result<(Quota, u64), RestoreError> {
        Ok((self.quota()?, self.u64()?))
    }
    /// Bytes left unread.
    #[cfg_attr(not(feature = "keyed"), allow(dead_code))]
    pub(crate) fn remaining(&self) -> usize {
        self.0.len()
    }
    /// Errors unless the payload was read to its end.
    pub(crate) fn end(&self) -> Result<(), RestoreError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(RestoreError::Corrupt("a frame longer than its contents"))
        }
    }
}
