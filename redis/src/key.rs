//! Bounded key bytes: the name a limiter key is stored under, in Redis, in the lease table and
//! in the local fallback.
//!
//! A key of at most [`MAX_KEY_BYTES`] bytes is stored as itself. A longer key is stored under
//! `~` followed by the 64 lowercase hex digits of its SHA-256 digest, preceded by its Redis hash
//! tag (`{…}`: the text between the first `{` and the first `}` after it, when not empty) if that
//! tag is at most [`MAX_KEY_BYTES`] bytes, so that it still decides the cluster slot. Invariants:
//!
//! * every stored name is at most `MAX_KEY_BYTES + 67` bytes (a tag, its braces, `~`, 64 hex digits), whatever the key;
//! * a digested name is longer than [`MAX_KEY_BYTES`], so it never equals a short key's name;
//! * SHA-256 is collision-resistant against chosen keys and fixed by its standard, so the name
//!   is the same in every process and every version, and processes share one bucket per key.

use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::fmt::Write;

/// Keys longer than this many bytes are stored under a fixed-length digest of themselves (see
/// [`stored_key`]).
///
/// ```
/// assert_eq!(tollgate_redis::MAX_KEY_BYTES, 64);
/// ```
pub const MAX_KEY_BYTES: usize = 64;

/// The name `key` is stored under, after the limiter's prefix: `key` itself when it has at most
/// [`MAX_KEY_BYTES`] bytes; otherwise its hash tag (kept when at most [`MAX_KEY_BYTES`] bytes),
/// then `~` and the lowercase hex SHA-256 digest of the whole key. The same in every process and
/// version of this crate.
///
/// ```
/// use tollgate_redis::stored_key;
/// assert_eq!(stored_key("tenant:42"), "tenant:42");
/// let long = format!("user:{{7}}:{}", "x".repeat(100));
/// let name = stored_key(&long);
/// assert!(name.starts_with("{7}~") && name.len() == 3 + 1 + 64);
/// assert_eq!(stored_key(&"k".repeat(65)).len(), 65);
/// ```
pub fn stored_key(key: &str) -> Cow<'_, str> {
    if key.len() <= MAX_KEY_BYTES {
        return Cow::Borrowed(key);
    }
    let mut name = String::with_capacity(2 + MAX_KEY_BYTES + 65);
    if let Some(tag) = hash_tag(key).filter(|t| t.len() <= MAX_KEY_BYTES) {
        name.push('{');
        name.push_str(tag);
        name.push('}');
    }
    name.push('~');
    for b in Sha256::digest(key.as_bytes()) {
        // Writing to a String cannot fail.
        let _ = write!(name, "{b:02x}");
    }
    Cow::Owned(name)
}

/// Redis Cluster's hash tag: the bytes between the first `{` and the first `}` after it, if
/// there are any.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_themselves_long_keys_a_bounded_digest() {
        let k64 = "a".repeat(64);
        assert_eq!(stored_key(&k64), k64.as_str());
        // SHA-256("a" × 65), a fixed value: stable across processes and versions.
        let k65 = "a".repeat(65);
        assert_eq!(
            stored_key(&k65),
            "~635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"
        );
        let huge = format!("{{tenant}}{}", "x".repeat(1 << 20));
        let name = stored_key(&huge);
        assert!(name.starts_with("{tenant}~"), "{name}");
        assert_eq!(name.len(), 8 + 1 + 64);
        // A tag that is itself huge is not kept.
        let huge_tag = format!("{{{}}}", "t".repeat(1000));
        assert_eq!(stored_key(&huge_tag).len(), 65);
        // An empty tag is no tag (Redis hashes the whole key then).
        assert!(stored_key(&format!("{{}}{}", "x".repeat(70))).starts_with('~'));
        assert_ne!(stored_key(&"b".repeat(65)), stored_key(&k65));
    }
}
