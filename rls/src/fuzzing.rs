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

/// The gRPC port's reading of a request body's bytes as gRPC messages (a flag byte, a 4-byte
/// big-endian length, that many bytes), which decides what each frame takes from the port's
/// budget before tonic reads it.
#[derive(Debug, Default)]
pub struct GrpcFraming(crate::conn::Messages);

impl GrpcFraming {
    /// What the frame `data` (the body's last if `ended`) takes from the budget: the sum of
    /// what each message whose prefix it completes may hold, nothing for a message sent whole
    /// in the last frame or announcing more than [`crate::grpc::MAX_MESSAGE_BYTES`].
    pub fn announced(&mut self, data: &[u8], ended: bool) -> usize {
        self.0.announced(data, ended)
    }
}

/// What a message of `len` bytes may hold until its stream ends (its bytes and the request
/// decoded from them).
pub fn held(len: usize) -> usize {
    crate::conn::held(len)
}
