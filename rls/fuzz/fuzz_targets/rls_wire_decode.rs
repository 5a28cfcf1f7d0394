//! Any bytes as a `ShouldRateLimit` message, through the server's decoder (the wire scan, then
//! prost within the request limits): a request, a refusal or an error, never a panic, and the
//! same answer as prost's decode followed by the service's validation. A decoded request
//! encodes and decodes back to itself, and the service decides it without panicking or
//! admitting past a limit.
#![no_main]

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use libfuzzer_sys::fuzz_target;
use tollgate_rls::fuzzing::{decode_grpc, validate};
use tollgate_rls::grpc::{from_proto, Decoded};
use tollgate_rls::service::{MAX_DESCRIPTORS, MAX_ENTRIES};
use tonic_prost::prost::Message;

#[path = "common/decide.rs"]
mod decide;

fuzz_target!(|data: &[u8]| {
    let decoded = decode_grpc(data);
    match RateLimitRequest::decode(data) {
        Ok(r) => {
            let over = r.descriptors.len() > MAX_DESCRIPTORS
                || r.descriptors.iter().any(|d| d.entries.len() > MAX_ENTRIES);
            match decoded {
                Ok(Decoded::Request(mine)) => {
                    assert!(!over, "a message over the limits was decoded");
                    assert_eq!(mine, r);
                    // Round trip: prost's encoding of it decodes to it again.
                    let again = decode_grpc(&mine.encode_to_vec());
                    assert!(
                        matches!(&again, Ok(Decoded::Request(a)) if *a == mine),
                        "{again:?}"
                    );
                    let req = from_proto(mine);
                    let _ = validate(&req);
                    decide::decide(&req);
                }
                Ok(Decoded::Refused(reject)) => {
                    assert!(over, "a message within the limits was refused: {reject:?}");
                    assert_eq!(Err(reject), validate(&from_proto(r)));
                }
                Err(status) => panic!("prost decodes what the decoder calls {status:?}"),
            }
        }
        Err(_) => assert!(
            decoded.is_err(),
            "a message prost refuses was not: {decoded:?}"
        ),
    }
});
