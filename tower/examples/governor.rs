//! The load test's peer: the example server's app (`GET /` → 200 `ok`) behind tower_governor
//! instead of tollgate-tower. Benchmark only (tower_governor is a dev-dependency).
//!
//! ```text
//! cargo run --release -p tollgate-tower --example governor -- [--listen ADDR] [--key global|ip]
//! ```
//! The limit admits everything (one token per nanosecond, burst 10^9), so the load test
//! measures the layer's cost, not refusals. `--key ip` uses governor's `SmartIpKeyExtractor`
//! (X-Forwarded-For, then the peer), the closest match to the tollgate run with trusted proxies.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use clap::Parser;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::{GlobalKeyExtractor, SmartIpKeyExtractor};
use tower_governor::GovernorLayer;

#[derive(Parser, Debug)]
struct Cli {
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// global or ip.
    #[arg(long, default_value = "global", value_parser = ["global", "ip"])]
    key: String,
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let app = Router::new().route("/", get(|| async { "ok" }));
    let app = if cli.key == "global" {
        let config = GovernorConfigBuilder::default()
            .per_nanosecond(1)
            .burst_size(1_000_000_000)
            .key_extractor(GlobalKeyExtractor)
            .finish()
            .expect("a valid governor config");
        app.layer(GovernorLayer::new(config))
    } else {
        let config = GovernorConfigBuilder::default()
            .per_nanosecond(1)
            .burst_size(1_000_000_000)
            .key_extractor(SmartIpKeyExtractor)
            .finish()
            .expect("a valid governor config");
        app.layer(GovernorLayer::new(config))
    };
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .expect("the address is free");
    println!("listening on {}", listener.local_addr().expect("bound"));
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service)
        .with_graceful_shutdown(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("a SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        })
        .await
        .expect("the server runs");
}
