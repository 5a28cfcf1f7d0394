//! Reading back what a limiter recorded (feature `metrics`): a `DebuggingRecorder`, local to a
//! test or installed globally, and snapshots keyed by `name{label=value,…}` (labels sorted), as
//! a Prometheus scrape would name the series.

use std::collections::BTreeMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// A recorder for one test, and what builds a limiter under it.
pub struct Recorder {
    recorder: DebuggingRecorder,
    snapshotter: Snapshotter,
}

impl Recorder {
    /// A fresh recorder, not yet installed anywhere.
    pub fn new() -> Recorder {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        Recorder {
            recorder,
            snapshotter,
        }
    }

    /// Runs `build` with this recorder as the current one: the handles a limiter resolves there
    /// record here from then on, on any thread.
    pub fn build<T>(&self, build: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&self.recorder, build)
    }

    /// Every series recorded so far (each snapshot drains counters and histograms: take one).
    pub fn snapshot(&self) -> Series {
        series(&self.snapshotter)
    }

    /// Installs this recorder as the global one, for limiters named where a local recorder
    /// does not reach (inside an async builder); returns what reads it. Once per process.
    pub fn install_global(self) -> Snapshots {
        metrics::set_global_recorder(self.recorder).expect("a global recorder was already set");
        Snapshots(self.snapshotter)
    }
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new()
    }
}

/// Reads a recorder installed with [`Recorder::install_global`].
pub struct Snapshots(Snapshotter);

impl Snapshots {
    /// Every series recorded since the last snapshot (counters and histograms are drained).
    pub fn snapshot(&self) -> Series {
        series(&self.0)
    }
}

fn series(snapshotter: &Snapshotter) -> Series {
    let mut series = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        series.insert(format!("{}{{{}}}", key.name(), labels.join(",")), value);
    }
    Series(series)
}

/// One snapshot's series.
#[derive(Debug)]
pub struct Series(pub BTreeMap<String, DebugValue>);

impl Series {
    /// The counter `series` (0 if never registered).
    pub fn counter(&self, series: &str) -> u64 {
        match self.0.get(series) {
            Some(DebugValue::Counter(n)) => *n,
            None => 0,
            Some(other) => panic!("{series} is not a counter: {other:?}"),
        }
    }

    /// The gauge `series`.
    pub fn gauge(&self, series: &str) -> f64 {
        match self.0.get(series) {
            Some(DebugValue::Gauge(g)) => g.into_inner(),
            other => panic!("{series} is not a gauge: {other:?}"),
        }
    }

    /// How many samples the histogram `series` holds (0 if none).
    pub fn samples(&self, series: &str) -> usize {
        self.histogram(series).len()
    }

    /// The histogram `series`' samples, in recording order (empty if none).
    pub fn histogram(&self, series: &str) -> Vec<f64> {
        match self.0.get(series) {
            Some(DebugValue::Histogram(xs)) => xs.iter().map(|x| x.into_inner()).collect(),
            None => Vec::new(),
            Some(other) => panic!("{series} is not a histogram: {other:?}"),
        }
    }

    /// `tollgate_decisions_total{limiter, outcome}`.
    pub fn decisions(&self, limiter: &str, outcome: &str) -> u64 {
        self.counter(&format!(
            "tollgate_decisions_total{{limiter={limiter},outcome={outcome}}}"
        ))
    }

    /// `tollgate_retry_after_seconds{limiter}`'s samples.
    pub fn waits(&self, limiter: &str) -> Vec<f64> {
        self.histogram(&format!(
            "tollgate_retry_after_seconds{{limiter={limiter}}}"
        ))
    }

    /// Every series' name, `name{label=value,…}`.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Every label value of every series.
    pub fn label_values(&self) -> Vec<String> {
        self.0
            .keys()
            .flat_map(|k| {
                let inner = &k[k.find('{').unwrap() + 1..k.len() - 1];
                inner
                    .split(',')
                    .filter(|l| !l.is_empty())
                    .map(|l| l.split_once('=').unwrap().1.to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}
