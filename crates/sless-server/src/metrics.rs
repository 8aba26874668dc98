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

/// One function's invocation series.
#[derive(Default)]
struct FunctionSeries {
    /// Calls by (trigger, status): a handful per function.
    calls: Vec<(String, String, u64)>,
    durations: Histogram,
    cold_starts: u64,
    /// Calls by (version, alias or ""): the versions kept and the aliases.
    versions: Vec<(u64, String, u64)>,
}

/// The server's own metrics.
#[derive(Default)]
pub struct Metrics {
    /// By namespace, then function: looked up by `&str` on every call,
    /// without building a key.
    functions: Mutex<BTreeMap<String, BTreeMap<String, FunctionSeries>>>,
    pub builds_succeeded: AtomicU64,
    pub builds_failed: AtomicU64,
    /// Builds waiting for a slot (the namespace's or the server's), holding
    /// one of the server's, holding a long build's.
    pub builds_waiting: AtomicU64,
    pub builds_running: AtomicU64,
    pub builds_long: AtomicU64,
    /// Connections open, and refused over the limit.
    pub connections: std::sync::Arc<crate::listener::ConnectionStats>,
}

/// One more on `gauge` while it lives.
pub struct Held<'a>(&'a AtomicU64);

impl<'a> Held<'a> {
    pub fn on(gauge: &'a AtomicU64) -> Held<'a> {
        gauge.fetch_add(1, Ordering::Relaxed);
        Held(gauge)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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
        let mut functions = self.functions.lock().unwrap();
        let in_namespace = match functions.get_mut(namespace) {
            Some(map) => map,
            None => functions.entry(namespace.to_string()).or_default(),
        };
        let series = match in_namespace.get_mut(function) {
            Some(series) => series,
            None => in_namespace.entry(function.to_string()).or_default(),
        };
        match series.calls.iter_mut().find(|(t, s, _)| t == trigger && s == status) {
            Some((_, _, n)) => *n += 1,
            None => series.calls.push((trigger.to_string(), status.to_string(), 1)),
        }
        let secs = duration.as_secs_f64();
        let h = &mut series.durations;
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.total += 1;
        if cold {
            series.cold_starts += 1;
        }
    }

    /// Counts one call by the version that ran it and the alias it was
    /// addressed to (empty: none).
    pub fn version_call(&self, namespace: &str, function: &str, version: u64, alias: &str) {
        let mut functions = self.functions.lock().unwrap();
        let Some(series) = functions.get_mut(namespace).and_then(|fs| fs.get_mut(function)) else {
            return; // counted by `invocation` first
        };
        match series.versions.iter_mut().find(|(v, a, _)| *v == version && a == alias) {
            Some((_, _, n)) => *n += 1,
            None => series.versions.push((version, alias.to_string(), 1)),
        }
    }

    /// Drops a deleted function's series.
    pub fn forget(&self, namespace: &str, function: &str) {
        let mut functions = self.functions.lock().unwrap();
        if let Some(in_namespace) = functions.get_mut(namespace) {
            in_namespace.remove(function);
            if in_namespace.is_empty() {
                functions.remove(namespace);
            }
        }
    }

    /// Appends this registry's series to `out`.
    pub fn render(&self, out: &mut String) {
        let functions = self.functions.lock().unwrap();
        let all = || {
            functions
                .iter()
                .flat_map(|(ns, fs)| fs.iter().map(move |(f, series)| (ns, f, series)))
        };
        out.push_str("# HELP sless_invocations_total Handler calls by function, trigger and status.\n");
        out.push_str("# TYPE sless_invocations_total counter\n");
        for (ns, f, series) in all() {
            let mut calls: Vec<_> = series.calls.iter().collect();
            calls.sort();
            for (trigger, status, n) in calls {
                let _ = writeln!(
                    out,
                    "sless_invocations_total{{namespace=\"{ns}\",function=\"{f}\",trigger=\"{trigger}\",status=\"{status}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP sless_version_invocations_total Handler calls by function, version and alias.\n");
        out.push_str("# TYPE sless_version_invocations_total counter\n");
        for (ns, f, series) in all() {
            let mut versions: Vec<_> = series.versions.iter().collect();
            versions.sort();
            for (version, alias, n) in versions {
                let _ = writeln!(
                    out,
                    "sless_version_invocations_total{{namespace=\"{ns}\",function=\"{f}\",version=\"{version}\",alias=\"{alias}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP sless_invocation_duration_seconds Handler call duration as the server saw it.\n");
        out.push_str("# TYPE sless_invocation_duration_seconds histogram\n");
        for (ns, f, series) in all() {
            let h = &series.durations;
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
        for (ns, f, series) in all().filter(|(_, _, series)| series.cold_starts > 0) {
            let _ = writeln!(
                out,
                "sless_cold_starts_total{{namespace=\"{ns}\",function=\"{f}\"}} {}",
                series.cold_starts
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
        out.push_str(
            "# HELP sless_builds Builds under way: waiting for a slot, in one of the server's two, or past their share in a long build's.\n# TYPE sless_builds gauge\n",
        );
        for (state, gauge) in [
            ("waiting", &self.builds_waiting),
            ("running", &self.builds_running),
            ("long", &self.builds_long),
        ] {
            let _ = writeln!(
                out,
                "sless_builds{{state=\"{state}\"}} {}",
                gauge.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP sless_connections Open client connections.\n# TYPE sless_connections gauge\nsless_connections {}",
            self.connections.open.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP sless_connections_refused_total Connections answered 503 over the connection limit.\n\
             # TYPE sless_connections_refused_total counter\nsless_connections_refused_total {}",
            self.connections.refused.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP sless_connections_reclaimed_total Idle connections closed to make room over the connection limit.\n\
             # TYPE sless_connections_reclaimed_total counter\nsless_connections_reclaimed_total {}",
            self.connections.reclaimed.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invocations_render_by_function_trigger_and_status() {
        let metrics = Metrics::default();
        let ms = Duration::from_millis;
        metrics.invocation("b", "f", "http", "200", ms(3), true);
        metrics.invocation("b", "f", "http", "200", ms(30), false);
        metrics.invocation("b", "f", "cron", "error", ms(3), false);
        metrics.invocation("a", "g", "http", "500", ms(3), false);
        let mut out = String::new();
        metrics.render(&mut out);
        let series: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        let calls: Vec<&str> = series
            .iter()
            .copied()
            .filter(|l| l.starts_with("sless_invocations_total"))
            .collect();
        assert_eq!(
            calls,
            [
                r#"sless_invocations_total{namespace="a",function="g",trigger="http",status="500"} 1"#,
                r#"sless_invocations_total{namespace="b",function="f",trigger="cron",status="error"} 1"#,
                r#"sless_invocations_total{namespace="b",function="f",trigger="http",status="200"} 2"#,
            ]
        );
        let has = |line: &str| series.contains(&line);
        assert!(
            has(r#"sless_invocation_duration_seconds_bucket{namespace="b",function="f",le="0.005"} 2"#),
            "{out}"
        );
        assert!(
            has(r#"sless_invocation_duration_seconds_bucket{namespace="b",function="f",le="0.05"} 3"#),
            "{out}"
        );
        assert!(
            has(r#"sless_invocation_duration_seconds_count{namespace="b",function="f"} 3"#),
            "{out}"
        );
        assert!(
            has(r#"sless_invocation_duration_seconds_count{namespace="a",function="g"} 1"#),
            "{out}"
        );
        // A deleted function's series go.
        metrics.forget("a", "g");
        let mut after = String::new();
        metrics.render(&mut after);
        assert!(!after.contains("function=\"g\""), "{after}");
        assert!(after.contains("function=\"f\""), "{after}");
        // Cold starts only for functions that had one.
        let cold: Vec<&str> = series
            .iter()
            .copied()
            .filter(|l| l.starts_with("sless_cold_starts_total"))
            .collect();
        assert_eq!(cold, [r#"sless_cold_starts_total{namespace="b",function="f"} 1"#]);
    }
}
