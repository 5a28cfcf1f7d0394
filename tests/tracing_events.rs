//! The `tracing` feature: a keyed table's full / no-longer-full events fire on the state
//! changes only, never once per decision.
#![cfg(all(feature = "tracing", feature = "keyed"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::{KeyedLimiter, KeyedMultiLimiter, Limits, ManualClock, Quota};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Collects each event's message and level.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

impl Subscriber for Events {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Three rounds of: two keys fill a table of two, a hundred new keys are refused (one event),
/// every bucket full again a second on and the sweep makes room (one event).
fn table_full_events(
    clock: &ManualClock,
    acquire: impl Fn(u64) -> bool,
    sweep: impl Fn() -> usize,
) -> Vec<(tracing::Level, String)> {
    let events = Events::default();
    tracing::subscriber::with_default(events.clone(), || {
        for round in 0..3u64 {
            assert!(acquire(round * 1000));
            assert!(acquire(round * 1000 + 1));
            for key in 2..102 {
                assert!(!acquire(round * 1000 + key));
            }
            clock.advance(Duration::from_secs(1));
            assert_eq!(sweep(), 2);
            assert_eq!(sweep(), 0);
        }
    });
    let events = events.0.lock().unwrap().clone();
    events
}

fn assert_paired(events: &[(tracing::Level, String)], name: &str) {
    assert_eq!(events.len(), 6, "{events:?}");
    for pair in events.chunks(2) {
        assert_eq!(pair[0].0, tracing::Level::WARN);
        assert!(pair[0].1.contains("keyed table full"), "{}", pair[0].1);
        assert!(
            pair[0].1.contains(&format!("limiter=\"{name}\"")),
            "{}",
            pair[0].1
        );
        assert_eq!(pair[1].0, tracing::Level::INFO);
        assert!(pair[1].1.contains("no longer full"), "{}", pair[1].1);
    }
}

#[test]
fn table_full_events_fire_once_per_state_change() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap(), 2, clock.clone())
        .name("edge")
        .build()
        .unwrap();
    let events = table_full_events(
        &clock,
        |key| limiter.try_acquire(&key, 1).is_ok(),
        || limiter.sweep(),
    );
    assert_paired(&events, "edge");
}

#[test]
fn a_keyed_policy_table_reports_the_same_events() {
    let clock = ManualClock::new();
    let limits = Limits::new([
        Quota::per_second(1).unwrap(),
        Quota::new(2, Duration::from_millis(500), 1).unwrap(),
    ])
    .unwrap();
    let limiter = KeyedMultiLimiter::builder(limits, 2, clock.clone())
        .name("policy-edge")
        .build()
        .unwrap();
    let events = table_full_events(
        &clock,
        |key| limiter.try_acquire(&key, 1).is_ok(),
        || limiter.sweep(),
    );
    assert_paired(&events, "policy-edge");
}

#[test]
fn decisions_emit_no_events() {
    let events = Events::default();
    let limiter = KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 100, ManualClock::new());
    tracing::subscriber::with_default(events.clone(), || {
        for key in 0..50u32 {
            let _ = limiter.try_acquire(&key, 1);
            let _ = limiter.try_acquire(&key, 1);
        }
    });
    assert!(events.0.lock().unwrap().is_empty());
}
