//! The `tracing` feature: a keyed table's full / no-longer-full events fire on the state
//! changes only, never once per decision.
#![cfg(all(feature = "tracing", feature = "keyed"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::{KeyedLimiter, ManualClock, Quota};
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

#[test]
fn table_full_events_fire_once_per_state_change() {
    let events = Events::default();
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap(), 2, clock.clone())
        .name("edge")
        .build()
        .unwrap();
    tracing::subscriber::with_default(events.clone(), || {
        for round in 0..3u64 {
            // Two keys fill the table; a hundred new keys are refused: one event.
            assert_eq!(limiter.try_acquire(&(round * 1000), 1), Ok(()));
            assert_eq!(limiter.try_acquire(&(round * 1000 + 1), 1), Ok(()));
            for key in 2..102 {
                assert!(limiter.try_acquire(&(round * 1000 + key), 1).is_err());
            }
            // Every bucket is full again: the sweep makes room, one event.
            clock.advance(Duration::from_secs(1));
            assert_eq!(limiter.sweep(), 2);
            assert_eq!(limiter.sweep(), 0);
        }
    });
    let events = events.0.lock().unwrap();
    assert_eq!(events.len(), 6, "{events:?}");
    for pair in events.chunks(2) {
        assert_eq!(pair[0].0, tracing::Level::WARN);
        assert!(pair[0].1.contains("keyed table full"), "{}", pair[0].1);
        assert!(pair[0].1.contains("limiter=\"edge\""), "{}", pair[0].1);
        assert_eq!(pair[1].0, tracing::Level::INFO);
        assert!(pair[1].1.contains("no longer full"), "{}", pair[1].1);
    }
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
