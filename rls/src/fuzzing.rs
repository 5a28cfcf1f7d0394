//! Entry points for the fuzz targets in `rls/fuzz/`: the decoders of untrusted input that are
//! not public, as the server runs them. Compiled only under `--cfg fuzzing` (cargo-fuzz sets
//! it), so they are no part of the crate's API.

use crate::grpc::Decoded;
use crate::service::{Reject, Request};

/// The `ShouldRateLimit` decoder on one whole message (the bytes after gRPC's 5-byte prefix):
/// the wire scan, then prost's decode of a message within the request limits.
pub fn decode_grpc(message: &[u8]) -> Result<Decoded, tonic::Status> {
    crate::grpc::decode_message(tonic_prost::prost::bytes::Bytes::copy_from_slice(message))
}

/// The service's validation of a decoded request (what it refuses before deciding).
pub fn validate(req: &Request) -> Result<(), Reject> {
    crate::service::validate(req)
}
