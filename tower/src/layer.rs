//! [`RateLimitLayer`] and its service [`RateLimit`]: decide in `call`, answer a refusal at once.

use std::fmt;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::backend::{Backend, Check, Decision};
use crate::cost::{Cost, UnitCost};
use crate::headers::RateLimitHeaders;
use crate::key::{Global, KeyExtractor, KeyType, MissingKey};
use crate::observe::Observe;
use crate::rejection::Rejection;

/// The response body of a rate-limited service: the inner service's body, or the rejection's.
pub type RateLimitBody<B> = Either<B, Full<Bytes>>;

/// A tower [`Layer`] that rate-limits requests with a tollgate limiter.
///
/// Every service it makes (and every clone of those) shares the one backend, so under axum —
/// which clones services freely — there is still exactly one limit. A refused request is
/// answered at once from `call` with a 429 (see [`Rejection`]); `poll_ready` only forwards to
/// the inner service, so the limiter never turns into back-pressure or a dropped connection.
///
/// Configure it with:
/// * the backend: any [`Backend`] — [`tollgate::Bucket`], [`tollgate::ShardedBucket`],
///   [`tollgate::KeyedLimiter`], `tollgate_redis::RedisLimiter` (feature `redis`), yours;
/// * [`key`](RateLimitLayer::key): [`Global`] (default), [`PeerIp`](crate::PeerIp),
///   [`ClientIp`](crate::ClientIp), [`HeaderKey`](crate::HeaderKey),
///   [`key_fn`](crate::key_fn);
/// * [`missing_key`](RateLimitLayer::missing_key): what a request without a key gets
///   (default [`MissingKey::Reject`]);
/// * [`cost`](RateLimitLayer::cost): tokens per request (default 1);
/// * [`headers`](RateLimitLayer::headers) and [`rejection`](RateLimitLayer::rejection).
///
/// ```
/// use http::{Request, Response, StatusCode};
/// use tollgate::{Bucket, ManualClock, Quota};
/// use tollgate_tower::RateLimitLayer;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let bucket = Bucket::with_clock(Quota::per_second(1).unwrap(), ManualClock::new());
/// let svc = RateLimitLayer::new(bucket).layer(service_fn(|_req: Request<()>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::from("ok")))
/// }));
/// let first = svc.clone().oneshot(Request::new(())).await.unwrap();
/// let second = svc.oneshot(Request::new(())).await.unwrap();
/// assert_eq!(first.status(), StatusCode::OK);
/// assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
/// assert_eq!(second.headers()["retry-after"], "1");
/// # });
/// ```
pub struct RateLimitLayer<Bk, X: KeyType = Global, Co = UnitCost> {
    backend: Arc<Bk>,
    key: X,
    cost: Co,
    missing: MissingKey<X::Key>,
    respond: Arc<Respond>,
}

/// How responses are written: shared by the layer's services and their response futures.
#[derive(Clone, Debug)]
struct Respond {
    headers: RateLimitHeaders,
    rejection: Rejection,
    observe: Observe,
}

impl<Bk, X: KeyType + Clone, Co: Clone> Clone for RateLimitLayer<Bk, X, Co>
where
    X::Key: Clone,
{
    fn clone(&self) -> Self {
        RateLimitLayer {
            backend: Arc::clone(&self.backend),
            key: self.key.clone(),
            cost: self.cost.clone(),
            missing: self.missing.clone(),
            respond: Arc::clone(&self.respond),
        }
    }
}

impl<Bk, X: KeyType + fmt::Debug, Co> fmt::Debug for RateLimitLayer<Bk, X, Co>
where
    X::Key: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("key", &self.key)
            .field("missing", &self.missing)
            .field("headers", &self.respond.headers)
            .field("rejection", &self.respond.rejection)
            .finish_non_exhaustive()
    }
}

impl<Bk> RateLimitLayer<Bk> {
    /// One global limit on `backend`, cost 1 per request, default headers and rejection.
    pub fn new(backend: Bk) -> Self {
        RateLimitLayer::shared(Arc::new(backend))
    }

    /// [`new`](RateLimitLayer::new) with a backend you keep a handle on (to read its
    /// counters, sweep it, or share it between layers).
    pub fn shared(backend: Arc<Bk>) -> Self {
        RateLimitLayer {
            backend,
            key: Global,
            cost: UnitCost,
            missing: MissingKey::Reject,
            respond: Arc::new(Respond {
                headers: RateLimitHeaders::default(),
                rejection: Rejection::default(),
                observe: Observe::default(),
            }),
        }
    }
}

impl<Bk, X: KeyType, Co> RateLimitLayer<Bk, X, Co> {
    /// Keys requests with `key` (the backend must be keyed by its key type). Resets the
    /// missing-key policy to [`MissingKey::Reject`].
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::{KeyedLimiter, Quota};
    /// use tollgate_tower::{PeerIp, RateLimitLayer};
    /// let per_ip: KeyedLimiter<IpAddr> = KeyedLimiter::new(Quota::per_second(10).unwrap(), 100_000);
    /// let layer = RateLimitLayer::new(per_ip).key(PeerIp::new());
    /// # let _ = layer;
    /// ```
    pub fn key<X2: KeyType>(self, key: X2) -> RateLimitLayer<Bk, X2, Co> {
        RateLimitLayer {
            backend: self.backend,
            key,
            cost: self.cost,
            missing: MissingKey::Reject,
            respond: self.respond,
        }
    }

    /// What a request without a key gets (see [`MissingKey`]).
    pub fn missing_key(self, policy: MissingKey<X::Key>) -> Self {
        RateLimitLayer {
            missing: policy,
            ..self
        }
    }

    /// The tokens each request takes (a [`Cost`]: a closure of the request).
    ///
    /// ```
    /// use http::{Method, Request};
    /// use tollgate::{Bucket, Quota};
    /// use tollgate_tower::RateLimitLayer;
    /// let layer = RateLimitLayer::new(Bucket::new(Quota::per_second(100).unwrap()))
    ///     .cost(|req: &Request<axum::body::Body>| if req.method() == Method::POST { 10 } else { 1 });
    /// # let _ = layer;
    /// ```
    pub fn cost<Co2>(self, cost: Co2) -> RateLimitLayer<Bk, X, Co2> {
        RateLimitLayer {
            backend: self.backend,
            key: self.key,
            cost,
            missing: self.missing,
            respond: self.respond,
        }
    }

    /// Which rate-limit headers go out (see [`RateLimitHeaders`]).
    pub fn headers(self, headers: RateLimitHeaders) -> Self {
        self.respond(|r| r.headers = headers)
    }

    /// The response to a refusal (see [`Rejection`]).
    pub fn rejection(self, rejection: Rejection) -> Self {
        self.respond(|r| r.rejection = rejection)
    }

    /// Changes what the layer records or enforces (see `observe.rs`).
    fn observe(self, change: impl FnOnce(&mut Observe)) -> Self {
        self.respond(|r| change(&mut r.observe))
    }

    /// Changes how the layer responds, in a fresh copy: a clone of the layer made before, and
    /// the services made from it, keep the settings they had.
    fn respond(self, change: impl FnOnce(&mut Respond)) -> Self {
        let mut respond = Respond::clone(&self.respond);
        change(&mut respond);
        RateLimitLayer {
            respond: Arc::new(respond),
            ..self
        }
    }

    /// Shadow mode on or off. On, the layer decides every request exactly as it would, records
    /// the outcome (`shadow_refused` for what it would have refused, with the wait it would have
    /// sent, when named with `name`, feature `metrics`), and passes every request to the inner
    /// service: nothing is refused (a request without a key passes too, whatever
    /// [`missing_key`](Self::missing_key) says), and a refusal it would have made writes nothing in the
    /// backend, so turning shadow off later enforces from a correct state. An admitted
    /// response carries its usual headers (a would-be refusal's show 0 remaining, no
    /// `Retry-After`).
    ///
    /// ```
    /// use http::{Request, Response, StatusCode};
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// use tollgate_tower::RateLimitLayer;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let bucket = Bucket::with_clock(Quota::per_second(1).unwrap(), ManualClock::new());
    /// let layer = RateLimitLayer::new(bucket).shadow(true);
    /// let svc = layer.layer(service_fn(|_req: Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("ok")))
    /// }));
    /// for _ in 0..3 {
    ///     let response = svc.clone().oneshot(Request::new(())).await.unwrap();
    ///     assert_eq!(response.status(), StatusCode::OK);
    /// }
    /// # });
    /// ```
    pub fn shadow(self, on: bool) -> Self {
        self.observe(|o| o.shadow = on)
    }

    /// Names the layer (feature `metrics`): every decision it makes is recorded as
    /// `tollgate_decisions_total{limiter = name, outcome}`, and each refusal's wait (the exact
    /// wait, before `Retry-After` rounds it up) in `tollgate_retry_after_seconds{limiter = name}`
    /// (see [`tollgate::metrics`]). Requests without a key, answered before any decision, are
    /// not counted. The handles come from the recorder installed now: install it first. A
    /// backend whose decision names the quota of a policy that refused
    /// ([`PolicyReport::refused`](crate::PolicyReport::refused): `MultiBucket`, a keyed table of
    /// policies) also counts each enforced refusal against that quota, in
    /// `tollgate_policy_refusals_total{limiter, quota}` (`quota` its index in the policy); those
    /// series exist only for the quotas of a policy that refused, and are resolved at its first
    /// refusal from the recorder installed then (a single quota never creates them), so install
    /// the recorder globally, not as a local one around this call. A Redis policy names no
    /// refusing quota (Redis answers with the tightest quota alone): its refusals are counted
    /// in `tollgate_decisions_total` only.
    ///
    /// ```
    /// use tollgate::{Bucket, Quota};
    /// use tollgate_tower::RateLimitLayer;
    /// let layer = RateLimitLayer::new(Bucket::new(Quota::per_second(100).unwrap())).name("api");
    /// # let _ = layer;
    /// ```
    #[cfg(feature = "metrics")]
    pub fn name(self, name: impl Into<metrics::SharedString>) -> Self {
        let name = name.into();
        let metrics = tollgate::metrics::DecisionMetrics::new(name.clone());
        self.observe(|o| {
            o.metrics = Some(metrics);
            o.by_quota = Some(crate::observe::ByQuota::new(name));
        })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<Bk> {
        &self.backend
    }
}

impl<S, Bk, X: KeyType + Clone, Co: Clone> Layer<S> for RateLimitLayer<Bk, X, Co>
where
    X::Key: Clone,
{
    type Service = RateLimit<S, Bk, X, Co>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            shared: Arc::new(self.clone()),
        }
    }
}

/// The rate-limiting service made by [`RateLimitLayer`]. Clones share one limit.
pub struct RateLimit<S, Bk, X: KeyType = Global, Co = UnitCost> {
    inner: S,
    shared: Arc<RateLimitLayer<Bk, X, Co>>,
}

impl<S: Clone, Bk, X: KeyType, Co> Clone for RateLimit<S, Bk, X, Co> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, Bk, X: KeyType + fmt::Debug, Co> fmt::Debug for RateLimit<S, Bk, X, Co>
where
    X::Key: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("layer", &self.shared)
            .finish()
    }
}

impl<S, Bk, X, Co, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, Bk, X, Co>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    Bk: Backend<X::Key>,
    X: KeyExtractor<ReqBody>,
    X::Key: Clone,
    Co: Cost<ReqBody>,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, Bk::Future, S, Request<ReqBody>>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let shared = &*self.shared;
        let key = match shared.key.extract(&req) {
            Some(key) => key,
            None => match &shared.missing {
                // Shadow mode refuses nothing, a request without a key included (not a 400).
                MissingKey::Reject if shared.respond.observe.shadow => {
                    return ResponseFuture::inner(self.inner.call(req), None)
                }
                MissingKey::Reject => {
                    let status = shared.key.missing_status();
                    let message = shared.key.missing_message();
                    let response = shared.respond.rejection.missing_key(status, message);
                    return ResponseFuture::ready(response);
                }
                MissingKey::Shared(key) => key.clone(),
                MissingKey::Allow => return ResponseFuture::inner(self.inner.call(req), None),
            },
        };
        let cost = shared.cost.cost(&req);
        let report = shared.respond.headers.on_admitted();
        // By reference: a decision with room for a policy's report is a few hundred bytes, and
        // moving it out of the `Check` would copy them on every request.
        match shared.backend.check(key, cost, report) {
            Check::Ready(ref decision) => {
                if shared.respond.observe.admit(decision) {
                    let extra = shared.respond.admitted(decision);
                    ResponseFuture::inner(self.inner.call(req), extra)
                } else {
                    ResponseFuture::ready(shared.respond.refused(decision))
                }
            }
            Check::Pending(decision) => {
                // The inner service was polled ready: keep that one for this request, leave a
                // fresh clone (not yet polled) in its place for the next.
                let clone = self.inner.clone();
                let ready = mem::replace(&mut self.inner, clone);
                ResponseFuture {
                    state: State::Deciding {
                        decision,
                        service: Some(ready),
                        request: Some(req),
                        respond: Arc::clone(&shared.respond),
                    },
                }
            }
        }
    }
}

impl Respond {
    /// The headers of an admitted response; a refusal admitted in shadow mode gets those of an
    /// admission (its snapshot: 0 remaining), without `Retry-After`.
    fn admitted(&self, decision: &Decision) -> Option<HeaderMap> {
        if decision.verdict.is_ok() {
            return self.headers.admitted(decision);
        }
        self.headers.admitted(&Decision {
            verdict: Ok(()),
            ..*decision
        })
    }

    fn refused(&self, decision: &Decision) -> Response<Full<Bytes>> {
        let mut response = self.rejection.refused();
        self.headers.write(decision, response.headers_mut());
        response
    }
}

pin_project! {
    /// The response future of [`RateLimit`].
    pub struct ResponseFuture<F, D, S, R> {
        #[pin]
        state: State<F, D, S, R>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, D, S, R> {
        // Waiting for an asynchronous decision, holding the request and a ready service.
        Deciding {
            #[pin]
            decision: D,
            service: Option<S>,
            request: Option<R>,
            respond: Arc<Respond>,
        },
        // Admitted: the inner service's future, and headers to add to its response.
        Inner {
            #[pin]
            future: F,
            extra: Option<HeaderMap>,
        },
        // Answered by the layer (a refusal, a missing key).
        Ready {
            response: Option<Response<Full<Bytes>>>,
        },
    }
}

impl<F, D, S, R> ResponseFuture<F, D, S, R> {
    fn ready(response: Response<Full<Bytes>>) -> Self {
        ResponseFuture {
            state: State::Ready {
                response: Some(response),
            },
        }
    }

    fn inner(future: F, extra: Option<HeaderMap>) -> Self {
        ResponseFuture {
            state: State::Inner { future, extra },
        }
    }
}

impl<F, D, S, R> fmt::Debug for ResponseFuture<F, D, S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, D, S, ReqBody, ResBody, E> Future for ResponseFuture<F, D, S, Request<ReqBody>>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    D: Future<Output = Decision>,
    S: Service<Request<ReqBody>, Response = Response<ResBody>, Error = E, Future = F>,
{
    type Output = Result<Response<RateLimitBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Deciding {
                    decision,
                    service,
                    request,
                    respond,
                } => {
                    let decision = ready!(decision.poll(cx));
                    let admit = respond.observe.admit(&decision);
                    let next = match (admit, service.take(), request.take()) {
                        (true, Some(mut service), Some(request)) => State::Inner {
                            future: service.call(request),
                            extra: respond.admitted(&decision),
                        },
                        _ => State::Ready {
                            response: Some(respond.refused(&decision)),
                        },
                    };
                    state.set(next);
                }
                StateProj::Inner { future, extra } => {
                    let response = ready!(future.poll(cx))?;
                    let (mut parts, body) = response.into_parts();
                    if let Some(extra) = extra.take() {
                        append(&mut parts.headers, extra);
                    }
                    return Poll::Ready(Ok(Response::from_parts(parts, Either::Left(body))));
                }
                StateProj::Ready { response } => {
                    return Poll::Ready(Ok(response
                        .take()
                        .map(|r| r.map(Either::Right))
                        .unwrap_or_else(|| Response::new(Either::Right(Full::default())))));
                }
            }
        }
    }
}

/// Adds `extra` to `headers`: `RateLimit` / `RateLimit-Policy` lines are appended (Structured
/// Fields lists combine); other headers (the legacy `X-RateLimit-*`) only where the response
/// has none — an inner layer's, its refusal's above all, are its own: an outer layer's
/// admission must not overwrite an inner 429's `X-RateLimit-Remaining`.
fn append(headers: &mut HeaderMap, extra: HeaderMap) {
    let mut name = None;
    for (next, value) in extra {
        if let Some(next) = next {
            name = Some(next);
        }
        if let Some(name) = &name {
            let list = name.as_str().starts_with("ratelimit");
            if list {
                headers.append(name.clone(), value);
            } else if !headers.contains_key(name) {
                headers.insert(name.clone(), value);
            }
        }
    }
}
