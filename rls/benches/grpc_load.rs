//! `ShouldRateLimit` under load: a Rust gRPC load generator (tonic clients, 1 to 256 calls in
//! flight) against servers on loopback, side by side in one run:
//!
//! * the local backend against the same server (tollgate-rls's connection loop and tonic's
//!   routes) whose handler answers `OK` without deciding (the transport's cost);
//! * the exact Redis backend against envoyproxy/ratelimit's algorithm (a fixed window per unit:
//!   pipelined `INCRBY` + `EXPIRE` per descriptor, `engine::FixedWindowBackend`) through the
//!   same service, on the same `redis-server`;
//! * admissions past the limit around a window boundary, for both Redis strategies.
//!
//! `cargo bench -p tollgate-rls --bench grpc_load` prints the tables of rls/README.md;
//! `-- --smoke` runs every case briefly (CI); `-- --secs N` sets each run's length and
//! `-- --reps N` the alternating runs per case (the median is reported); `-- --levels 64,256`
//! the calls in flight; `-- --local-only` or `-- --redis-only` one of the two tables.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code as PbCode;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate_rls::config::Config;
use tollgate_rls::conn::{self, Protocol};
use tollgate_rls::engine::{
    Backend, FixedWindowBackend, LocalBackend, OnRedisError, RedisBackend, RlsClock,
};
use tollgate_rls::grpc::{Grpc, NoOp};
use tollgate_rls::server::Options;
use tollgate_rls::service::Service;
use tollgate_testkit::redis_server::RedisServer;
use tonic::service::Routes;

type Client = RateLimitServiceClient<tonic::transport::Channel>;

/// Keys drawn per call, so that most calls are admitted (the cost of a decision, not of a
/// refusal).
const USERS: u64 = 10_000;

const CONFIG: &str = r#"
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: route
    value: /api
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: edge
    rate_limit: {unit: second, requests_per_unit: 100}
"#;

fn config() -> Config {
    Config::from_sources(&[(PathBuf::from("bench.yaml"), CONFIG.to_owned())]).unwrap()
}

/// Serves `routes` on a free loopback port on its own runtime, through the connection loop
/// `tollgate-rls` runs (its default limits); returns the address.
fn serve(rt: &tokio::runtime::Runtime, routes: Routes) -> SocketAddr {
    let l = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = l.local_addr().unwrap();
    let limits = Options::new(PathBuf::new()).limits();
    rt.spawn(conn::serve(
        l,
        routes.prepare().into_axum_router(),
        Protocol::Http2,
        limits,
        conn::Tasks::new().token(),
        std::future::pending(),
    ));
    addr
}

/// The generated server of `svc` (prost's decoder).
fn generated<S: RateLimitService>(svc: S) -> Routes {
    Routes::new(RateLimitServiceServer::new(svc))
}

/// The service's own server, as `tollgate-rls` runs it (the decoder that scans first).
fn rls(service: std::sync::Arc<tollgate_rls::service::Service>) -> Routes {
    Routes::new(Grpc::server(service))
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap()
}

fn descriptor(entries: &[(&str, String)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: v.clone(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A request: one user (of `USERS`), or a user and a route (`two`).
fn request(seed: &mut u64, two: bool) -> RateLimitRequest {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let user = (*seed % USERS).to_string();
    let mut descriptors = vec![descriptor(&[("user", user)])];
    if two {
        descriptors.push(descriptor(&[("route", "/api".into())]));
    }
    RateLimitRequest {
        domain: "bench".into(),
        descriptors,
        hits_addend: 0,
    }
}

struct Load {
    calls_per_sec: f64,
    p50: Duration,
    p99: Duration,
}

/// `inflight` calls at a time for `secs`, over four HTTP/2 connections.
fn load(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    inflight: usize,
    secs: f64,
    two: bool,
) -> (Load, Vec<Duration>) {
    rt.block_on(async move {
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(Client::connect(format!("http://{addr}")).await.unwrap());
        }
        // Warm up.
        let mut c = clients[0].clone();
        let mut seed = 1;
        for _ in 0..200 {
            c.should_rate_limit(request(&mut seed, two)).await.unwrap();
        }
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let started = Instant::now();
        let tasks: Vec<_> = (0..inflight)
            .map(|i| {
                let mut c = clients[i % clients.len()].clone();
                tokio::spawn(async move {
                    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 + 1);
                    let mut lat = Vec::with_capacity(1 << 14);
                    while Instant::now() < until {
                        let t0 = Instant::now();
                        c.should_rate_limit(request(&mut seed, two)).await.unwrap();
                        lat.push(t0.elapsed());
                    }
                    lat
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let took = started.elapsed().as_secs_f64();
        (
            Load {
                calls_per_sec: all.len() as f64 / took,
                p50: Duration::ZERO,
                p99: Duration::ZERO,
            },
            all,
        )
    })
}

/// Hammers one fresh `edge` key (100 a second) from 100 ms before a second boundary to 100 ms
/// after it; returns the calls admitted in those 200 ms.
fn boundary(rt: &tokio::runtime::Runtime, addr: SocketAddr, key: &str) -> u64 {
    let key = key.to_owned();
    rt.block_on(async move {
        let c = Client::connect(format!("http://{addr}")).await.unwrap();
        // Start 100 ms before the next whole second of the wall clock.
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let next = Duration::from_secs(now.as_secs() + 2);
        tokio::time::sleep(next - now - Duration::from_millis(100)).await;
        let until = Instant::now() + Duration::from_millis(200);
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let mut c = c.clone();
                let key = key.clone();
                tokio::spawn(async move {
                    let mut admitted = 0;
                    while Instant::now() < until {
                        let r = c
                            .should_rate_limit(RateLimitRequest {
                                domain: "bench".into(),
                                descriptors: vec![descriptor(&[("edge", key.clone())])],
                                hits_addend: 0,
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        admitted += u64::from(r.overall_code == PbCode::Ok as i32);
                    }
                    admitted
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        admitted
    })
}

/// Runs `a` and `b` alternately `reps` times: the median calls/s of each, and the p50 / p99 of
/// all their calls (on a shared machine one run of each can land on a burst of other work).
fn pair(
    reps: usize,
    mut a: impl FnMut() -> (Load, Vec<Duration>),
    mut b: impl FnMut() -> (Load, Vec<Duration>),
) -> (Load, Load) {
    let mut ra = Vec::new();
    let mut rb = Vec::new();
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let (x, lx) = a();
        ra.push(x.calls_per_sec);
        la.extend(lx);
        let (y, ly) = b();
        rb.push(y.calls_per_sec);
        lb.extend(ly);
    }
    let summary = |mut rates: Vec<f64>, mut lat: Vec<Duration>| {
        rates.sort_by(f64::total_cmp);
        lat.sort_unstable();
        let q = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
        Load {
            calls_per_sec: rates[rates.len() / 2],
            p50: q(0.5),
            p99: q(0.99),
        }
    };
    (summary(ra, la), summary(rb, lb))
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let secs = args
        .iter()
        .position(|a| a == "--secs")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(if smoke { 0.2 } else { 2.0 });
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(if smoke { 1 } else { 3 });
    let levels: Vec<usize> = match args
        .iter()
        .position(|a| a == "--levels")
        .and_then(|i| args.get(i + 1))
    {
        Some(list) => list
            .split(',')
            .map(|l| {
                l.parse()
                    .expect("--levels: calls in flight, comma-separated")
            })
            .collect(),
        None if smoke => vec![1, 16],
        None => vec![1, 4, 16, 64, 256],
    };
    let only_redis = args.iter().any(|a| a == "--redis-only");
    let only_local = args.iter().any(|a| a == "--local-only");
    // The servers and the load generator share the machine's cores: one runtime each.
    let server_rt = runtime(2);
    let client_rt = runtime(2);

    let noop = serve(&server_rt, generated(NoOp));
    let local = Arc::new(Service::new(
        config(),
        Backend::Local(LocalBackend::new(RlsClock::real(), 1_000_000)),
        false,
    ));
    let local = serve(&server_rt, rls(local));
    if !only_redis {
        println!("## Local backend against the no-op handler ({reps} alternating runs of {secs} s per case; median calls/s)\n");
        println!("| calls in flight | descriptors | no-op calls/s | local calls/s | ratio | no-op p50 / p99 ms | local p50 / p99 ms |");
        println!("|---:|---:|---:|---:|---:|---|---|");
        let mut cases: Vec<(usize, bool)> = levels.iter().map(|&l| (l, false)).collect();
        cases.push((64.min(*levels.last().unwrap()), true));
        for (inflight, two) in cases {
            // Alternate, so that drift on a shared machine hits both.
            let (a, b) = pair(
                reps,
                || load(&client_rt, noop, inflight, secs, two),
                || load(&client_rt, local, inflight, secs, two),
            );
            println!(
                "| {inflight} | {} | {:.0} | {:.0} | {:.2} | {} / {} | {} / {} |",
                if two { 2 } else { 1 },
                a.calls_per_sec,
                b.calls_per_sec,
                b.calls_per_sec / a.calls_per_sec,
                ms(a.p50),
                ms(a.p99),
                ms(b.p50),
                ms(b.p99)
            );
        }
    }
    if only_local {
        return;
    }
    let Some(server) = RedisServer::start("grpc_load") else {
        println!("\n(no redis-server: the Redis cases are skipped)");
        return;
    };
    let url = server.url();
    let exact = server_rt.block_on(async {
        let backend = RedisBackend::connect(
            &url,
            Duration::from_millis(500),
            OnRedisError::Unavailable,
            None,
        )
        .await
        .unwrap();
        Arc::new(Service::new(config(), Backend::Redis(backend), false))
    });
    let exact = serve(&server_rt, rls(exact));
    let fixed = server_rt.block_on(async {
        let backend = FixedWindowBackend::connect(&url).await.unwrap();
        Arc::new(Service::new(config(), Backend::FixedWindow(backend), false))
    });
    let fixed = serve(&server_rt, rls(fixed));
    println!(
        "\n## Exact Redis backend against a fixed window (INCRBY + EXPIRE), one redis-server\n"
    );
    println!("| calls in flight | descriptors | fixed window calls/s | exact calls/s | ratio | fixed p50 / p99 ms | exact p50 / p99 ms |");
    println!("|---:|---:|---:|---:|---:|---|---|");
    let mut cases: Vec<(usize, bool)> = levels.iter().map(|&l| (l, false)).collect();
    cases.push((64.min(*levels.last().unwrap()), true));
    for (inflight, two) in cases {
        let (a, b) = pair(
            reps,
            || load(&client_rt, fixed, inflight, secs, two),
            || load(&client_rt, exact, inflight, secs, two),
        );
        println!(
            "| {inflight} | {} | {:.0} | {:.0} | {:.2} | {} / {} | {} / {} |",
            if two { 2 } else { 1 },
            a.calls_per_sec,
            b.calls_per_sec,
            b.calls_per_sec / a.calls_per_sec,
            ms(a.p50),
            ms(a.p99),
            ms(b.p50),
            ms(b.p99)
        );
    }
    // The server's own time per command (`INFO commandstats`): what bounds a single Redis.
    let stats = server.cli(&["INFO", "commandstats"]);
    println!("\nServer time per command (redis INFO commandstats):\n");
    for line in stats.lines() {
        for cmd in ["evalsha", "incrby", "expire"] {
            if let Some(rest) = line.strip_prefix(&format!("cmdstat_{cmd}:")) {
                let per = rest
                    .split(',')
                    .find_map(|f| f.strip_prefix("usec_per_call="));
                println!(
                    "* `{}`: {} us per call",
                    cmd.to_uppercase(),
                    per.unwrap_or("?")
                );
            }
        }
    }
    println!("\n## Admitted within 200 ms around a second boundary, limit 100 a second (16 calls in flight)\n");
    println!("| run | fixed window | exact |");
    println!("|---:|---:|---:|");
    for run in 0..if smoke { 1 } else { 3 } {
        let a = boundary(&client_rt, fixed, &format!("f{run}"));
        let b = boundary(&client_rt, exact, &format!("e{run}"));
        println!("| {} | {a} | {b} |", run + 1);
    }
}
