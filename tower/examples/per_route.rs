//! Per-route limits: layer each group of routes separately.
//!
//! * `/login`: 5 per minute per client IP (a tight limit against password guessing);
//! * `/api/…`: 100 per second per API key (`x-api-key`), POST costing 10;
//! * `/health`: unlimited.
//!
//! `cargo run -p tollgate-tower --example per_route` (listens on 127.0.0.1:3001), then
//! `curl -i localhost:3001/login` six times.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use axum::routing::{get, post};
use axum::Router;
use http::{HeaderName, Method, Request};
use tollgate::{KeyedLimiter, Quota};
use tollgate_tower::{HeaderKey, PeerIp, RateLimitHeaders, RateLimitLayer};

#[tokio::main]
async fn main() {
    let login_quota = Quota::new(5, Duration::from_secs(60), 5).expect("a valid quota");
    let login_limit = RateLimitLayer::new(KeyedLimiter::<IpAddr>::new(login_quota, 100_000))
        .key(PeerIp::new())
        .headers(
            RateLimitHeaders::default()
                .policy_name("login")
                .expect("ASCII"),
        );
    let login = Router::new()
        .route(
            "/login",
            post(|| async { "welcome" }).get(|| async { "login form" }),
        )
        .layer(login_limit);

    let api_quota = Quota::per_second(100).expect("a valid quota");
    let api_limit = RateLimitLayer::new(KeyedLimiter::<String>::new(api_quota, 100_000))
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
        .cost(|req: &Request<Body>| if req.method() == Method::POST { 10 } else { 1 })
        .headers(
            RateLimitHeaders::default()
                .policy_name("api")
                .expect("ASCII")
                .on_success(true),
        );
    let api = Router::new()
        .route(
            "/api/items",
            get(|| async { "[]" }).post(|| async { "created" }),
        )
        .layer(api_limit);

    let app = Router::new()
        .merge(login)
        .merge(api)
        .route("/health", get(|| async { "healthy" }));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3001")
        .await
        .expect("127.0.0.1:3001 is free");
    println!("listening on {}", listener.local_addr().expect("bound"));
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .expect("the server runs");
}
