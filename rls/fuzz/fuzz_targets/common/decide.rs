//! A decoded request decided by a fresh service on the local backend, twice at one instant of
//! a `ManualClock`: never a panic, one status per descriptor, and never more admitted than the
//! limit's burst, whatever the request holds.

use std::collections::HashMap;
use std::path::PathBuf;
use tollgate::ManualClock;
use tollgate_rls::config::Config;
use tollgate_rls::engine::{Backend, LocalBackend, RlsClock};
use tollgate_rls::service::{Code, Request, Service};

/// The one limit: `user` alone, 3 a minute, per value.
pub const CONFIG: &str = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";
const BURST: u64 = 3;

/// Decides `req` twice, checking each answer, and what both admitted together.
pub fn decide(req: &Request) {
    let config = Config::from_sources(&[(PathBuf::from("fuzz.yaml"), CONFIG.to_owned())])
        .expect("the fuzz config loads");
    let backend = Backend::Local(LocalBackend::new(
        RlsClock::manual(ManualClock::new()),
        4_096,
    ));
    let service = Service::new(config, backend, false);
    // What requests answered `OK` spent per `user` value.
    let mut admitted: HashMap<&str, u64> = HashMap::new();
    for _ in 0..2 {
        let Ok(resp) = tollgate_testkit::wakers::block_on(service.should_rate_limit(req)) else {
            continue;
        };
        assert_eq!(resp.statuses.len(), req.descriptors.len());
        let refused = resp.statuses.iter().any(|s| s.code == Code::OverLimit);
        assert_eq!(resp.overall == Code::OverLimit, refused);
        if resp.overall != Code::Ok || req.domain != "d" {
            continue;
        }
        for d in &req.descriptors {
            if let [(k, v)] = &d.entries[..] {
                if k == "user" {
                    let hits = d.hits_addend.unwrap_or(u64::from(req.hits_addend.max(1)));
                    let a = admitted.entry(v.as_str()).or_default();
                    *a = a.saturating_add(hits);
                    assert!(*a <= BURST, "user {v:?}: {a} admitted, burst {BURST}");
                }
            }
        }
    }
}
