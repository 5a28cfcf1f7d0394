//! A bucket admitting and refusing against real time: 5 requests/s with a burst of 3, offered
//! 20 requests/s for two seconds.
//!
//! `cargo run --example demo`

use std::time::{Duration, Instant};
use tollgate::{Bucket, Denied, Quota};

fn main() {
    let bucket = Bucket::new(Quota::new(5, Duration::from_secs(1), 3).expect("valid quota"));
    let start = Instant::now();
    let (mut admitted, mut refused) = (0, 0);
    while start.elapsed() < Duration::from_secs(2) {
        let t = start.elapsed().as_secs_f64();
        match bucket.try_acquire(1) {
            Ok(()) => {
                admitted += 1;
                println!(
                    "{t:6.3}s  admitted  (available now: {})",
                    bucket.available()
                );
            }
            Err(Denied::RetryAfter(wait)) => {
                refused += 1;
                println!("{t:6.3}s  refused   retry after {wait:?}");
            }
            Err(other) => println!("{t:6.3}s  refused   {other}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("admitted {admitted}, refused {refused}: the bound is 3 + 5/s x 2 s = 13");
}
