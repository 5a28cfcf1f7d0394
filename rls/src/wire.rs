//! A scan of a `RateLimitRequest`'s protobuf wire format that counts its descriptors and each
//! descriptor's entries without building anything: a message of 4 MiB holds two million empty
//! descriptors (2 bytes each), which decode to many times their size before the service can
//! count them, so the decoder refuses an over-limit message from this scan and decodes only the
//! others.
//!
//! The field numbers are those of the v3 protos (envoy-types' generated code):
//!
//! | message | field | number | wire type |
//! |---|---|---|---|
//! | `RateLimitRequest` | `domain` | 1 | length-delimited (UTF-8) |
//! | | `descriptors` | 2 | length-delimited, repeated |
//! | | `hits_addend` | 3 | varint |
//! | `RateLimitDescriptor` | `entries` | 1 | length-delimited, repeated |
//! | | `limit` | 2 | length-delimited |
//! | | `hits_addend` | 3 | length-delimited (`UInt64Value`: `value` = 1, varint) |
//! | | `is_negative_hits` | 4 | varint |
//! | `Entry` | `key`, `value` | 1, 2 | length-delimited (UTF-8) |
//! | `RateLimitOverride` | `requests_per_unit`, `unit` | 1, 2 | varint |
//!
//! The scan follows prost's rules for what is well formed (varints of at most ten bytes, no
//! length past its buffer, the known fields in their wire type, strings in UTF-8, unknown
//! fields of any valid wire type skipped, groups closed by their own tag) and protobuf's merge
//! rules for what a field means (each `descriptors` or `entries` occurrence is one element, a
//! scalar's last occurrence wins, any `limit` occurrence sets it). It allocates nothing and
//! nests no deeper than the messages do (groups are skipped with a fixed-size stack).

use crate::service::{check_descriptor, check_request, Reject, MAX_DESCRIPTORS, MAX_ENTRIES};

/// prost's recursion limit, which also bounds the groups nested in an unknown field.
const MAX_GROUP_DEPTH: usize = 100;

/// What the scan found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// Well formed and within the limits: decode it (what it builds is bounded by the
    /// limits).
    Decode,
    /// Over a limit: refused with the service's own answer (the one `validate` gives once it
    /// is decoded).
    Refuse(Reject),
    /// Not a well-formed message. Never left to prost: a scan stricter than prost somewhere
    /// would otherwise hand it a message whose fault hides the descriptors after it.
    Malformed(&'static str),
}

/// Scans `buf`, a whole `RateLimitRequest`.
pub(crate) fn scan(buf: &[u8]) -> Scan {
    let mut s = Summary::default();
    if let Err(why) = s.request(buf) {
        return Scan::Malformed(why);
    }
    if s.descriptors <= MAX_DESCRIPTORS && !s.entries_over {
        return Scan::Decode;
    }
    Scan::Refuse(
        check_request(s.domain_empty, s.descriptors)
            .err()
            .or(s.first_refusal)
            .unwrap_or_else(|| Reject::Invalid("over the request limits".into())),
    )
}

/// The counts of the part scanned so far.
#[derive(Debug)]
struct Summary {
    domain_empty: bool,
    descriptors: usize,
    entries_over: bool,
    /// `check_descriptor`'s refusal of the first descriptor it refuses.
    first_refusal: Option<Reject>,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            domain_empty: true,
            descriptors: 0,
            entries_over: false,
            first_refusal: None,
        }
    }
}

type Fault = &'static str;

/// One field's value, as the wire holds it.
enum Value<'a> {
    Varint(u64),
    /// A fixed 32- or 64-bit value.
    Fixed,
    Bytes(&'a [u8]),
    /// A group, skipped with its contents.
    Group,
}

const WRONG_WIRE_TYPE: Fault = "invalid wire type for a known field";

fn bytes(v: Value<'_>) -> Result<&[u8], Fault> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => Err(WRONG_WIRE_TYPE),
    }
}

fn varint_of(v: Value<'_>) -> Result<u64, Fault> {
    match v {
        Value::Varint(n) => Ok(n),
        _ => Err(WRONG_WIRE_TYPE),
    }
}

fn string(v: Value<'_>) -> Result<&[u8], Fault> {
    let b = bytes(v)?;
    std::str::from_utf8(b).map_err(|_| "invalid string value: data is not UTF-8 encoded")?;
    Ok(b)
}

impl Summary {
    fn request(&mut self, mut buf: &[u8]) -> Result<(), Fault> {
        while !buf.is_empty() {
            let (tag, value) = field(&mut buf)?;
            match tag {
                1 => self.domain_empty = string(value)?.is_empty(),
                2 => {
                    let d = descriptor(bytes(value)?)?;
                    if d.entries > MAX_ENTRIES {
                        self.entries_over = true;
                    }
                    if self.first_refusal.is_none() {
                        self.first_refusal =
                            check_descriptor(self.descriptors, d.entries, d.limit, d.negative)
                                .err();
                    }
                    self.descriptors += 1;
                }
                3 => {
                    varint_of(value)?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// What a descriptor holds that the validation reads.
struct Descriptor {
    entries: usize,
    limit: bool,
    negative: bool,
}

fn descriptor(mut buf: &[u8]) -> Result<Descriptor, Fault> {
    let mut d = Descriptor {
        entries: 0,
        limit: false,
        negative: false,
    };
    while !buf.is_empty() {
        let (tag, value) = field(&mut buf)?;
        match tag {
            1 => {
                entry(bytes(value)?)?;
                d.entries += 1;
            }
            2 => {
                varints(bytes(value)?, 2)?;
                d.limit = true;
            }
            3 => varints(bytes(value)?, 1)?,
            4 => d.negative = varint_of(value)? != 0,
            _ => {}
        }
    }
    Ok(d)
}

/// An `Entry`: `key` and `value` strings.
fn entry(mut buf: &[u8]) -> Result<(), Fault> {
    while !buf.is_empty() {
        let (tag, value) = field(&mut buf)?;
        if tag == 1 || tag == 2 {
            string(value)?;
        }
    }
    Ok(())
}

/// A message whose known fields are the varints numbered 1 to `known` (`RateLimitOverride`,
/// `UInt64Value`).
fn varints(mut buf: &[u8], known: u32) -> Result<(), Fault> {
    while !buf.is_empty() {
        let (tag, value) = field(&mut buf)?;
        if tag <= known {
            varint_of(value)?;
        }
    }
    Ok(())
}

/// Reads one field of a message from the front of `buf`: its number and its value.
fn field<'a>(buf: &mut &'a [u8]) -> Result<(u32, Value<'a>), Fault> {
    let (tag, wire) = key(buf)?;
    let value = match wire {
        0 => Value::Varint(varint(buf)?),
        1 => {
            advance(buf, 8)?;
            Value::Fixed
        }
        2 => {
            let len = varint(buf)?;
            let len = usize::try_from(len).map_err(|_| UNDERFLOW)?;
            let (b, rest) = buf.split_at_checked(len).ok_or(UNDERFLOW)?;
            *buf = rest;
            Value::Bytes(b)
        }
        3 => {
            skip_group(buf, tag)?;
            Value::Group
        }
        4 => return Err("unexpected end group tag"),
        5 => {
            advance(buf, 4)?;
            Value::Fixed
        }
        _ => return Err("invalid wire type value"),
    };
    Ok((tag, value))
}

const UNDERFLOW: Fault = "buffer underflow";

fn advance(buf: &mut &[u8], n: usize) -> Result<(), Fault> {
    *buf = buf.get(n..).ok_or(UNDERFLOW)?;
    Ok(())
}

/// A field's key: its number (1 to 2^29 - 1) and wire type.
fn key(buf: &mut &[u8]) -> Result<(u32, u8), Fault> {
    let k = varint(buf)?;
    let k = u32::try_from(k).map_err(|_| "invalid key value")?;
    let tag = k >> 3;
    if tag == 0 {
        return Err("invalid tag value: 0");
    }
    Ok((tag, (k & 7) as u8))
}

/// Skips the rest of the group `tag` opened (its contents and its end tag), nested groups
/// included, with a fixed-size stack of the open groups' numbers.
fn skip_group(buf: &mut &[u8], tag: u32) -> Result<(), Fault> {
    let mut open = [0u32; MAX_GROUP_DEPTH];
    open[0] = tag;
    let mut depth = 1;
    while depth > 0 {
        let (t, wire) = key(buf)?;
        match wire {
            0 => {
                varint(buf)?;
            }
            1 => advance(buf, 8)?,
            2 => {
                let len = usize::try_from(varint(buf)?).map_err(|_| UNDERFLOW)?;
                advance(buf, len)?;
            }
            3 => {
                if depth == MAX_GROUP_DEPTH {
                    return Err("recursion limit reached");
                }
                open[depth] = t;
                depth += 1;
            }
            4 => {
                if open[depth - 1] != t {
                    return Err("unexpected end group tag");
                }
                depth -= 1;
            }
            5 => advance(buf, 4)?,
            _ => return Err("invalid wire type value"),
        }
    }
    Ok(())
}

/// A varint of at most ten bytes whose value fits in 64 bits (prost's rule).
fn varint(buf: &mut &[u8]) -> Result<u64, Fault> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            if i == 9 && b > 1 {
                break;
            }
            *buf = &buf[i + 1..];
            return Ok(value);
        }
    }
    Err("invalid varint")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::from_proto;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use envoy_types::pb::google::protobuf::UInt64Value;
    use tollgate_testkit::rng::Rng;
    use tonic_prost::prost::Message;

    fn desc(entries: usize) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: (0..entries)
                .map(|i| Entry {
                    key: format!("k{i}"),
                    value: "v".into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn encode(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> Vec<u8> {
        RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: 3,
        }
        .encode_to_vec()
    }

    /// Messages near the limits, over them, and with every field set.
    fn seeds() -> Vec<Vec<u8>> {
        let mut full = desc(2);
        full.limit = Some(Default::default());
        full.hits_addend = Some(UInt64Value { value: 7 });
        full.is_negative_hits = true;
        let mut wide = vec![desc(1); 3];
        wide[1] = desc(MAX_ENTRIES + 1);
        vec![
            encode("d", vec![desc(2), full.clone()]),
            encode("d", vec![desc(1); MAX_DESCRIPTORS + 1]),
            encode("", vec![desc(0); MAX_DESCRIPTORS + 1]),
            encode("d", wide.clone()),
            encode("d", vec![full, desc(MAX_ENTRIES + 1)]),
            encode("d", vec![desc(MAX_ENTRIES); 2]),
        ]
    }

    /// The scan and prost agree: a message prost decodes is never called malformed, one
    /// refused is refused as the service refuses it decoded, and one left to decode is within
    /// the limits; a message prost refuses is never refused as over the limits.
    fn agrees(buf: &[u8]) {
        let scanned = scan(buf);
        match RateLimitRequest::decode(buf) {
            Ok(r) => {
                let over = r.descriptors.len() > MAX_DESCRIPTORS
                    || r.descriptors.iter().any(|d| d.entries.len() > MAX_ENTRIES);
                let req = from_proto(r);
                let validated = check_request(req.domain.is_empty(), req.descriptors.len())
                    .and_then(|()| {
                        req.descriptors.iter().enumerate().try_for_each(|(i, d)| {
                            check_descriptor(i, d.entries.len(), d.limit_override, d.negative_hits)
                        })
                    });
                match scanned {
                    Scan::Decode => assert!(!over),
                    Scan::Refuse(reject) => {
                        assert!(over);
                        assert_eq!(Err(reject), validated);
                    }
                    Scan::Malformed(why) => panic!("prost decodes what the scan calls {why}"),
                }
            }
            Err(_) => assert!(!matches!(scanned, Scan::Refuse(_)), "{scanned:?}"),
        }
    }

    #[test]
    fn the_scan_agrees_with_prost_on_mutated_messages() {
        let mut rng = Rng(0x5eed);
        for seed in seeds() {
            agrees(&seed);
            for _ in 0..3_000 {
                let mut b = seed.clone();
                for _ in 0..1 + rng.below(3) {
                    let at = rng.below(b.len() as u64 + 1) as usize;
                    match rng.below(4) {
                        0 if at < b.len() => b[at] = rng.next() as u8,
                        1 if at < b.len() => b[at] ^= 1 << rng.below(8),
                        2 => b.insert(at, rng.next() as u8),
                        _ => b.truncate(at),
                    }
                }
                agrees(&b);
            }
        }
    }

    #[test]
    fn malformed_data_is_a_fault_not_a_panic() {
        for bad in [
            &[0x0a, 0x80][..],
            &[0x0a, 0x05, b'd'],
            &[
                0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ],
            &[0xff; 11],
            &[0x02, 0x00],
            &[0x0f],
            &[0x7c],
            &[0x7b, 0x7b, 0x7c],
            &[0x7b, 0x83, 0x01],
            &[0x08, 0x01],
            &[0x12, 0x02, 0x0a, 0x80],
            &[0x12, 0x04, 0x0a, 0x02, 0x0a, 0x01],
            &[0x12, 0x02, 0x20, 0x80],
        ] {
            let mut s = Summary::default();
            assert!(s.request(bad).is_err(), "{bad:?}");
            agrees(bad);
        }
        // Groups nested past prost's recursion limit are a fault, found without recursing.
        let mut deep = vec![0x7b; 10_000];
        deep.extend(vec![0x7c; 10_000]);
        assert!(Summary::default().request(&deep).is_err());
        // A varint of ten bytes whose last is 1 is u64::MAX's top bit: well formed.
        let mut b = vec![0x18];
        b.extend([0xff; 9]);
        b.push(0x01);
        assert!(Summary::default().request(&b).is_ok());
        agrees(&b);
    }
}
