//! Counters and histograms of the server, rendered in Prometheus text format
//! on `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the duration histogram's buckets.
const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    total: u64,
}

type FunctionLabels = (String, String);

/// The server's own metrics.
#[derive(Default)]
pub struct Metrics {
    invocations: Mutex<BTreeMap<(String, String, String, String), u64>>,
    durations: Mutex<BTreeMap<FunctionLabels, Histogram>>,
    cold_starts: Mutex<BTreeMap<FunctionLabels, u64>>,
    pub builds_succeeded: AtomicU64,
    pub builds_failed: AtomicU64,
}

impl Metrics {
    /// Counts one invocation.
    pub fn invocation(
        &self,
        namespace: &str,
        function: &str,
        trigger: &str,
        status: &str,
        duration: Duration,
        cold: bool,
    ) {
        let key = (namespace.to_string(), function.to_string());
        *self
            .invocations
            .lock()
            .unwrap()
            .entry((key.0.clone(), key.1.clone(), trigger.to_string(), status.to_string()))
            .or_default() += 1;
        let secs = duration.as_secs_f64();
        {
            let mut durations = self.durations.lock().unwrap();
            let h = durations.entry(key.clone()).or_default();
            for (i, bound) in BUCKETS.iter().enumerate() {
                if secs <= *bound {
                    h.counts[i] += 1;
                }
            }
            h.sum += secs;
            h.total += 1;
        }
        if cold {
            *self.cold_starts.lock().unwrap().entry(key).or_default() += 1;
        }
    }

    /// Appends this registry's series to `out`.
    pub fn render(&self, out: &mut String) {
        out.push_str("# HELP sless_invocations_total Handler calls by function, trigger and status.\n");
        out.push_str("# TYPE sless_invocations_total counter\n");
        for ((ns, f, trigger, status), n) in self.invocations.lock().unwrap().iter() {
            let _ = writeln!(
                out,
                "sless_invocations_total{{namespace=\"{ns}\",function=\"{f}\",trigger=\"{trigger}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP sless_invocation_duration_seconds Handler call duration as the server saw it.\n");
        out.push_str("# TYPE sless_invocation_duration_seconds histogram\n");
        for ((ns, f), h) in self.durations.lock().unwrap().iter() {
            let labels = format!("namespace=\"{ns}\",function=\"{f}\"");
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "sless_invocation_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "sless_invocation_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                h.total
            );
            let _ = writeln!(out, "sless_invocation_duration_seconds_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "sless_invocation_duration_seconds_count{{{labels}}} {}", h.total);
        }
        out.push_str("# HELP sless_cold_starts_total Calls that waited for a new instance.\n");
        out.push_str("# TYPE sless_cold_starts_total counter\n");
        for ((ns, f), n) in self.cold_starts.lock().unwrap().iter() {
            let _ = writeln!(
                out,
                "sless_cold_starts_total{{namespace=\"{ns}\",function=\"{f}\"}} {n}"
            );
        }
        out.push_str("# HELP sless_builds_total Finished builds by result.\n# TYPE sless_builds_total counter\n");
        let _ = writeln!(
            out,
            "sless_builds_total{{result=\"succeeded\"}} {}",
            self.builds_succeeded.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "sless_builds_total{{result=\"failed\"}} {}",
            self.builds_failed.load(Ordering::Relaxed)
        );
    }
}
