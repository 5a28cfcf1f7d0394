//! `envoy.service.ratelimit.v3.RateLimitService` on tonic, over the service.

use crate::conn::HandlerBudget;
use crate::service::{Code, Descriptor, Reject, Request, Response, Service};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as PbCode, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use std::sync::Arc;
use std::time::Instant;
use tonic::codegen::{http, BoxFuture, Context, Poll};

/// The gRPC face of a [`Service`].
#[derive(Debug, Clone)]
pub struct Grpc(pub Arc<Service>);

impl Grpc {
    /// The tonic server for it: the generated one's method, with a decoder that refuses a
    /// message over the request limits before building it ([`RequestDecoder`]); without a
    /// budget for calls waiting on Redis until [`Server::with_budget`] gives it one.
    pub fn server(service: Arc<Service>) -> Server {
        Server {
            grpc: Grpc(service),
            budget: None,
        }
    }

    /// Answers one decoded (or refused) message; a call that waits on Redis takes what it
    /// holds meanwhile from `budget`, the gRPC port's, when there is one ([`Grpc::decide`]).
    async fn answer(
        &self,
        decoded: Decoded,
        budget: Option<&HandlerBudget>,
    ) -> Result<RateLimitResponse, tonic::Status> {
        let started = Instant::now();
        let r = match decoded {
            Decoded::Request(r) => self.decide(r, budget).await,
            Decoded::Refused(reject) => Err(reject),
        };
        crate::metrics::request("grpc", result_of(&r), started.elapsed());
        r.map(|r| to_proto(&r)).map_err(status_of)
    }

    /// Decides one decoded message. On Redis a valid request is held while its decision waits
    /// (up to `--redis-timeout-ms`), so it takes what it holds
    /// ([`crate::service::held_while_waiting`], with the message's encoded length) from the
    /// port's waiting budget until this future ends (answered, or its stream reset or its
    /// connection gone); one the budget cannot hold now is answered `UNAVAILABLE` at once
    /// rather than held uncounted (Envoy treats it as a failure of the service:
    /// `failure_mode_deny` decides). Unfinished messages take from a budget of their own.
    ///
    /// What the call's stream took while its message arrived ([`crate::conn`], a call sent in
    /// several frames) is given back before this runs: tonic drops the request's body once it
    /// holds the message and the end of the stream, before it calls the handler. The local
    /// backend decides within this turn: nothing is held while other calls run, and nothing
    /// is taken.
    async fn decide(
        &self,
        message: RateLimitRequest,
        budget: Option<&HandlerBudget>,
    ) -> Result<Response, Reject> {
        let service = &*self.0;
        let Some(budget) = budget.filter(|_| service.backend().waits()) else {
            return service.should_rate_limit(&from_proto(message)).await;
        };
        let len = {
            use tonic_prost::prost::Message;
            message.encoded_len()
        };
        let req = from_proto(message);
        crate::service::validate(&req)?;
        let Some(_taken) = budget.try_take(crate::service::held_while_waiting(&req, len)) else {
            return Err(Reject::Unavailable(
                "the gRPC port holds as many calls waiting on Redis as its memory budget allows \
                 (--max-buffered-mib): retry later"
                    .into(),
            ));
        };
        service.decide_valid(&req).await
    }
}

/// The most bytes of one `ShouldRateLimit` message (tonic's and grpc-go's default, so the
/// same as envoyproxy/ratelimit's): a key or value is bounded by it alone.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// A `ShouldRateLimit` message as the decoder hands it over.
#[derive(Debug)]
pub enum Decoded {
    /// Within the request limits, decoded.
    Request(RateLimitRequest),
    /// Over them: refused with the answer the service gives once such a message is decoded,
    /// without decoding it.
    Refused(Reject),
}

/// The codec of the `ShouldRateLimit` method: prost's encoder, [`RequestDecoder`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestCodec;

impl tonic::codec::Codec for RequestCodec {
    type Encode = RateLimitResponse;
    type Decode = Decoded;
    type Encoder = tonic_prost::ProstEncoder<RateLimitResponse>;
    type Decoder = RequestDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder
    }
}

/// Decodes a `RateLimitRequest` after a scan of its wire format (`wire.rs`) that counts
/// its descriptors and their entries: a message over the limits is refused unbuilt, so what a
/// message builds is bounded by the limits (1,024 descriptors of 64 entries), not by its
/// size (two million empty descriptors in 4 MiB).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestDecoder;

impl tonic::codec::Decoder for RequestDecoder {
    type Item = Decoded;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Decoded>, tonic::Status> {
        use tonic_prost::prost::bytes::Buf;
        // The message's own bytes, without a copy (split off tonic's contiguous buffer).
        decode_message(buf.copy_to_bytes(buf.remaining())).map(Some)
    }
}

/// [`RequestDecoder`]'s decision on one whole message.
pub(crate) fn decode_message(
    whole: tonic_prost::prost::bytes::Bytes,
) -> Result<Decoded, tonic::Status> {
    use tonic_prost::prost::Message;
    match crate::wire::scan(&whole) {
        crate::wire::Scan::Decode => RateLimitRequest::decode(whole)
            .map(Decoded::Request)
            // As tonic's prost codec answers a fault (the scan finds prost's faults first).
            .map_err(|e| tonic::Status::internal(e.to_string())),
        crate::wire::Scan::Refuse(r) => Ok(Decoded::Refused(r)),
        crate::wire::Scan::Malformed(why) => Err(tonic::Status::internal(format!(
            "failed to decode Protobuf message: {why}"
        ))),
    }
}

/// The `envoy.service.ratelimit.v3.RateLimitService` server of a [`Grpc`]: the generated
/// server's routing, with [`RequestCodec`].
#[derive(Debug, Clone)]
pub struct Server {
    grpc: Grpc,
    /// The port's waiting budget, which calls waiting on Redis take what they hold from.
    budget: Option<HandlerBudget>,
}

impl Server {
    /// The server with `budget`, the waiting budget of the port it is served on
    /// ([`crate::conn::serve_with_budget`]): a call that waits on Redis takes what it holds
    /// from it while it waits, and is answered `UNAVAILABLE` at once when the budget cannot
    /// hold it.
    pub fn with_budget(self, budget: HandlerBudget) -> Server {
        Server {
            budget: Some(budget),
            ..self
        }
    }
}

impl tonic::server::NamedService for Server {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

struct ShouldRateLimit(Server);

impl tonic::server::UnaryService<Decoded> for ShouldRateLimit {
    type Response = RateLimitResponse;
    type Future = BoxFuture<tonic::Response<RateLimitResponse>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<Decoded>) -> Self::Future {
        let Server { grpc, budget } = self.0.clone();
        Box::pin(async move {
            grpc.answer(request.into_inner(), budget.as_ref())
                .await
                .map(tonic::Response::new)
        })
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for Server
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() == "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
            let method = ShouldRateLimit(self.clone());
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(RequestCodec)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES);
                Ok(grpc.unary(method, req).await)
            })
        } else {
            Box::pin(async { Ok(tonic::Status::unimplemented("").into_http()) })
        }
    }
}

/// The request as the service takes it.
pub fn from_proto(r: RateLimitRequest) -> Request {
    Request {
        domain: r.domain,
        hits_addend: r.hits_addend,
        descriptors: r.descriptors.into_iter().map(descriptor).collect(),
    }
}

fn descriptor(d: RateLimitDescriptor) -> Descriptor {
    Descriptor {
        entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
        hits_addend: d.hits_addend.map(|v| v.value),
        limit_override: d.limit.is_some(),
        negative_hits: d.is_negative_hits,
    }
}

/// The response as Envoy reads it.
pub fn to_proto(r: &Response) -> RateLimitResponse {
    let code = |c: Code| match c {
        Code::Ok => PbCode::Ok as i32,
        Code::OverLimit => PbCode::OverLimit as i32,
    };
    RateLimitResponse {
        overall_code: code(r.overall),
        statuses: r
            .statuses
            .iter()
            .map(|s| DescriptorStatus {
                code: code(s.code),
                current_limit: s.current_limit.as_ref().map(|l| RateLimit {
                    name: l.name.clone(),
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit.proto(),
                }),
                limit_remaining: s.limit_remaining,
                duration_until_reset: s.duration_until_reset.map(|secs| PbDuration {
                    seconds: i64::try_from(secs).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
                ..Default::default()
            })
            .collect(),
        response_headers_to_add: r
            .headers
            .iter()
            .map(|(key, value)| HeaderValue {
                key: key.clone(),
                value: value.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The gRPC status of a request the service does not decide.
pub fn status_of(r: Reject) -> tonic::Status {
    match r {
        Reject::Invalid(m) => tonic::Status::invalid_argument(m),
        Reject::Unavailable(m) => tonic::Status::unavailable(m),
    }
}

/// The `result` label of a request's metrics.
pub(crate) fn result_of(r: &Result<Response, Reject>) -> &'static str {
    match r {
        Ok(r) if r.overall == Code::Ok => "ok",
        Ok(_) => "over_limit",
        Err(Reject::Invalid(_)) => "invalid",
        Err(Reject::Unavailable(_)) => "unavailable",
    }
}

#[tonic::async_trait]
impl RateLimitService for Grpc {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.answer(Decoded::Request(request.into_inner()), None)
            .await
            .map(tonic::Response::new)
    }
}

/// A handler that answers `OK` to every descriptor without deciding: the benchmark's
/// baseline for the cost of the transport.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOp;

#[tonic::async_trait]
impl RateLimitService for NoOp {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let n = request.into_inner().descriptors.len();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: PbCode::Ok as i32,
            statuses: (0..n)
                .map(|_| DescriptorStatus {
                    code: PbCode::Ok as i32,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }))
    }
}
