//! `ShouldRateLimit` calls per second through tollgate-rls's connection loop, with the client
//! framing a call either as Envoy does (the message and the end of the stream in one DATA
//! frame: `--client h2`) or as tonic's client does (the message, then an empty frame that ends
//! the stream: `--client tonic`), against the local backend or the no-op handler
//! (`--server local|noop`). One run of `--secs` seconds (default 2) with `--inflight` calls
//! in flight (default 64) over four connections; prints `calls/s N`.
//!
//! `cargo run --release -p tollgate-rls --example grpc_framing -- --client h2 --server local`

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_rls::config::Config;
use tollgate_rls::conn::{self, Protocol};
use tollgate_rls::engine::{Backend, LocalBackend, RlsClock};
use tollgate_rls::grpc::{Grpc, NoOp};
use tollgate_rls::server::Options;
use tollgate_rls::service::Service;
use tonic::service::Routes;
use tonic_prost::prost::bytes::Bytes;
use tonic_prost::prost::Message;

const CONFIG: &str = "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n";
const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const USERS: u64 = 10_000;

fn request(seed: &mut u64) -> RateLimitRequest {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: (*seed % USERS).to_string(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

/// One call framed as Envoy frames it; whether it was answered with grpc-status 0.
async fn call_at_once(
    client: &mut h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
    body: Bytes,
) -> bool {
    let req = tonic::codegen::http::Request::post(format!("http://{addr}{METHOD}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut c = client.clone().ready().await.unwrap();
    let (resp, mut send) = c.send_request(req, false).unwrap();
    send.send_data(body, true).unwrap();
    let mut body = resp.await.unwrap().into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.unwrap();
    trailers.is_some_and(|t| t.get("grpc-status").is_some_and(|v| v == "0"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = arg(&args, "--secs").map_or(2.0, |s| s.parse().unwrap());
    let inflight: usize = arg(&args, "--inflight").map_or(64, |s| s.parse().unwrap());
    let h2_client = match arg(&args, "--client").unwrap_or("h2") {
        "h2" => true,
        "tonic" => false,
        other => panic!("--client h2|tonic, not {other}"),
    };
    let server_rt = runtime();
    let client_rt = runtime();
    let routes = match arg(&args, "--server").unwrap_or("local") {
        "local" => {
            let config =
                Config::from_sources(&[(PathBuf::from("bench.yaml"), CONFIG.to_owned())]).unwrap();
            let service = Arc::new(Service::new(
                config,
                Backend::Local(LocalBackend::new(RlsClock::real(), 1_000_000)),
                false,
            ));
            Routes::new(Grpc::server(service))
        }
        "noop" => Routes::new(RateLimitServiceServer::new(NoOp)),
        other => panic!("--server local|noop, not {other}"),
    };
    let l = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = l.local_addr().unwrap();
    server_rt.spawn(conn::serve(
        l,
        routes.prepare().into_axum_router(),
        Protocol::Http2,
        Options::new(PathBuf::new()).limits(),
        conn::Tasks::new().token(),
        std::future::pending(),
    ));
    let calls = client_rt.block_on(async move {
        let mut h2s = Vec::new();
        let mut tonics = Vec::new();
        for _ in 0..4 {
            if h2_client {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.set_nodelay(true).unwrap();
                let (client, conn) = h2::client::handshake(tcp).await.unwrap();
                tokio::spawn(conn);
                h2s.push(client);
            } else {
                tonics.push(
                    RateLimitServiceClient::connect(format!("http://{addr}"))
                        .await
                        .unwrap(),
                );
            }
        }
        let frame = |seed: &mut u64| {
            let m = request(seed).encode_to_vec();
            let mut b = Vec::with_capacity(5 + m.len());
            b.push(0);
            b.extend_from_slice(&(m.len() as u32).to_be_bytes());
            b.extend_from_slice(&m);
            Bytes::from(b)
        };
        // Warm up.
        let mut seed = 1;
        for _ in 0..200 {
            if h2_client {
                assert!(call_at_once(&mut h2s[0], addr, frame(&mut seed)).await);
            } else {
                tonics[0]
                    .should_rate_limit(request(&mut seed))
                    .await
                    .unwrap();
            }
        }
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let started = Instant::now();
        let tasks: Vec<_> = (0..inflight)
            .map(|i| {
                let mut h = h2s.get(i % 4).cloned();
                let mut t = tonics.get(i % 4).cloned();
                tokio::spawn(async move {
                    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 + 1);
                    let mut n = 0u64;
                    while Instant::now() < until {
                        match (&mut h, &mut t) {
                            (Some(h), _) => assert!(call_at_once(h, addr, frame(&mut seed)).await),
                            (_, Some(t)) => {
                                t.should_rate_limit(request(&mut seed)).await.unwrap();
                            }
                            _ => unreachable!(),
                        }
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut n = 0;
        for t in tasks {
            n += t.await.unwrap();
        }
        n as f64 / started.elapsed().as_secs_f64()
    });
    println!("calls/s {calls:.0}");
}
