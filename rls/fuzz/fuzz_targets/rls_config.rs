//! Any bytes as a config file (decoded as UTF-8, lossily, as any text reaches the loader):
//! a `Config` or an error naming the file, never a panic, a stack overflow or an unbounded
//! expansion (the run's `-rss_limit_mb` and `-timeout` bound the memory and time), for both
//! backends. A config that loads answers a lookup of every key it could name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use tollgate_rls::config::{Config, Target};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    let sources = [(PathBuf::from("fuzz.yaml"), text)];
    for target in [Target::Local, Target::Redis] {
        match Config::from_sources_for(&sources, target) {
            Ok(config) => {
                assert!(config.domain_count() <= 1);
                for limit in config.limits() {
                    let _ = limit.blocking_rate();
                }
                // A lookup of a few keys and values from the file itself.
                let words: Vec<&str> = sources[0]
                    .1
                    .split(|c: char| c.is_whitespace() || ":{}[],".contains(c))
                    .filter(|w| !w.is_empty())
                    .take(8)
                    .collect();
                for w in &words {
                    let _ = config.lookup(w, words.chunks(2).map(|p| (p[0], *p.last().unwrap())));
                }
            }
            Err(e) => assert_eq!(e.file, PathBuf::from("fuzz.yaml")),
        }
    }
});
