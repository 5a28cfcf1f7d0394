//! Any bytes as a gRPC request body, cut into frames where the input says: the budget the
//! port's framing takes never panics, does not depend on where the frames are cut (a frame
//! that ends the body only takes less), and is at most what the messages it completes may
//! hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_rls::fuzzing::{held, GrpcFraming};
use tollgate_rls::grpc::MAX_MESSAGE_BYTES;

fuzz_target!(|data: &[u8]| {
    // The first byte: how many frames; then one byte per cut, each a length (mod 64).
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let cuts = usize::from(n % 8).min(rest.len());
    let (lens, body) = rest.split_at(cuts);
    let mut frames = Vec::new();
    let mut left = body;
    for &l in lens {
        let (f, r) = left.split_at(usize::from(l % 64).min(left.len()));
        frames.push(f);
        left = r;
    }
    frames.push(left);

    let whole = GrpcFraming::default().announced(body, false);
    let (mut open, mut ended) = (GrpcFraming::default(), GrpcFraming::default());
    let (mut sum_open, mut sum_ended) = (0usize, 0usize);
    for (i, f) in frames.iter().enumerate() {
        sum_open += open.announced(f, false);
        sum_ended += ended.announced(f, i + 1 == frames.len());
    }
    assert_eq!(sum_open, whole, "the cut changed what the body takes");
    assert!(sum_ended <= whole);
    // At most what the prefixes in the body may hold (one per 5 bytes at the most).
    let prefixes = body.len() / 5;
    assert!(whole <= prefixes.saturating_mul(held(MAX_MESSAGE_BYTES)));
});
