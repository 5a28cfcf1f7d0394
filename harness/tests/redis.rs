//! The Redis strategies on a throwaway server: every cell within its bound, all three measured.

use std::time::Duration;
use tollgate_bench::{compare, strategies, Plan, Regime};
use tollgate_testkit::redis_server::RedisServer;

#[test]
fn redis_strategies_stay_within_the_bound() {
    let Some(server) = RedisServer::start("tollgate-bench redis::redis_strategies") else {
        return;
    };
    let strategies = strategies::redis::strategies(&server.url());
    let plan = Plan::new(
        vec![1, 4],
        vec![Regime::Mixed, Regime::Deny],
        Duration::from_millis(150),
    );
    let report = compare(&strategies, &plan, |_, _, _| {}).unwrap();
    assert!(report.violations().is_empty(), "{}", report.to_table());
    let table = report.to_table();
    for name in ["redis ", "redis-lease", "redis-lua-baseline"] {
        assert!(table.contains(name), "{table}");
    }
}
