//! `envoy.service.ratelimit.v3.RateLimitService` on tonic, over the service.

use crate::service::{Code, Descriptor, Reject, Request, Response, Service};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as PbCode, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use std::sync::Arc;
use std::time::Instant;

/// The gRPC face of a [`Service`].
#[derive(Debug, Clone)]
pub struct Grpc(pub Arc<Service>);

impl Grpc {
    /// The tonic server for it.
    pub fn server(service: Arc<Service>) -> RateLimitServiceServer<Grpc> {
        RateLimitServiceServer::new(Grpc(service))
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
        let started = Instant::now();
        let req = from_proto(request.into_inner());
        let r = self.0.should_rate_limit(&req).await;
        crate::metrics::request("grpc", result_of(&r), started.elapsed());
        r.map(|r| tonic::Response::new(to_proto(&r)))
            .map_err(status_of)
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
