//! [`Rejection`]: the response a refused request gets (HTTP 429, or gRPC `RESOURCE_EXHAUSTED`).

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderName, Response, StatusCode};
use http_body_util::Full;

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// The response to a refused request: status, content type and body. The rate-limit headers
/// ([`RateLimitHeaders`](crate::RateLimitHeaders)) are added to it.
///
/// Default: `429 Too Many Requests`, `text/plain; charset=utf-8`, body `Too Many Requests`.
///
/// ```
/// use http::{HeaderValue, StatusCode};
/// use tollgate_tower::Rejection;
/// let json = Rejection::new(
///     HeaderValue::from_static("application/json"),
///     r#"{"error":"rate_limited"}"#,
/// );
/// let unavailable = Rejection::default().status(StatusCode::SERVICE_UNAVAILABLE);
/// let grpc = Rejection::grpc(); // for tonic services: grpc-status 8 (RESOURCE_EXHAUSTED)
/// # let _ = (json, unavailable, grpc);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    status: StatusCode,
    content_type: HeaderValue,
    body: Bytes,
    grpc: bool,
}

impl Default for Rejection {
    fn default() -> Self {
        Rejection::new(
            HeaderValue::from_static("text/plain; charset=utf-8"),
            Bytes::from_static(b"Too Many Requests\n"),
        )
    }
}

impl Rejection {
    /// A 429 with this content type and body.
    pub fn new(content_type: HeaderValue, body: impl Into<Bytes>) -> Rejection {
        Rejection {
            status: StatusCode::TOO_MANY_REQUESTS,
            content_type,
            body: body.into(),
            grpc: false,
        }
    }

    /// Another status than 429 (for example 503 for an internal API whose clients only retry
    /// on 503).
    pub fn status(self, status: StatusCode) -> Rejection {
        Rejection { status, ..self }
    }

    /// A gRPC "Trailers-Only" response for tonic (or any gRPC) services: HTTP 200,
    /// `content-type: application/grpc`, `grpc-status: 8` (`RESOURCE_EXHAUSTED`) and a
    /// `grpc-message`, no body. A missing key answers `grpc-status: 13` (`INTERNAL`) when the
    /// server is misconfigured and `3` (`INVALID_ARGUMENT`) otherwise.
    pub fn grpc() -> Rejection {
        Rejection {
            status: StatusCode::OK,
            content_type: HeaderValue::from_static("application/grpc"),
            body: Bytes::new(),
            grpc: true,
        }
    }

    /// The response to a refusal (before the rate-limit headers are added).
    pub(crate) fn refused(&self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(self.body.clone()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, self.content_type.clone());
        if self.grpc {
            headers.insert(&GRPC_STATUS, HeaderValue::from_static("8"));
            headers.insert(&GRPC_MESSAGE, HeaderValue::from_static("rate limited"));
        }
        response
    }

    /// The response to a request without a key under `MissingKey::Reject`.
    pub(crate) fn missing_key(
        &self,
        status: StatusCode,
        message: &'static str,
    ) -> Response<Full<Bytes>> {
        if self.grpc {
            let code = if status.is_server_error() { "13" } else { "3" };
            let mut response = Response::new(Full::new(Bytes::new()));
            let headers = response.headers_mut();
            headers.insert(CONTENT_TYPE, self.content_type.clone());
            headers.insert(&GRPC_STATUS, HeaderValue::from_static(code));
            // grpc-message is percent-encoded; of printable ASCII only '%' itself needs it.
            let encoded = message.trim_end().replace('%', "%25");
            if let Ok(value) = HeaderValue::try_from(encoded) {
                headers.insert(&GRPC_MESSAGE, value);
            }
            return response;
        }
        let mut response = Response::new(Full::new(Bytes::from_static(message.as_bytes())));
        *response.status_mut() = status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}
