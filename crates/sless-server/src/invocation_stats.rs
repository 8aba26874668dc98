//! Calls, errors and latency percentiles of invocation records over a time
//! window, in steps. Pure: samples in, [`FunctionStats`] out.

use chrono::{DateTime, Duration, Utc};
use sless_api::{FunctionStats, InvocationRecord, StatsPoint};

/// What the stats need of one record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub started_at: DateTime<Utc>,
    pub duration_ms: f64,
    pub error: bool,
}

impl Sample {
    /// A call failed when its status is `error` (cron, amqp, job) or an HTTP
    /// status of 500 and above (an exception, a timeout, a crash).
    pub fn of(record: &InvocationRecord) -> Sample {
        let error = record.status == "error" || record.status.parse::<u16>().is_ok_and(|code| code >= 500);
        Sample {
            started_at: record.started_at,
            duration_ms: record.duration_ms,
            error,
        }
    }
}

/// The window `[to - window, to)` in steps of `step` seconds (the last step
/// may be cut short at `to`); samples outside it are left out.
pub fn summarize(
    samples: &[Sample],
    to: DateTime<Utc>,
    window: u64,
    step: u64,
    records_read: u64,
    truncated: bool,
) -> FunctionStats {
    let from = to - Duration::seconds(window as i64);
    let steps = window.div_ceil(step) as usize;
    let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); steps];
    let mut errors = vec![0u64; steps];
    let mut all = Vec::with_capacity(samples.len());
    for s in samples {
        if s.started_at < from || s.started_at >= to {
            continue;
        }
        let offset = (s.started_at - from).num_milliseconds().max(0) as u64 / 1000;
        let i = ((offset / step) as usize).min(steps - 1);
        buckets[i].push(s.duration_ms);
        errors[i] += u64::from(s.error);
        all.push(s.duration_ms);
    }
    let points = buckets
        .iter_mut()
        .zip(&errors)
        .enumerate()
        .map(|(i, (durations, errors))| {
            let (p50_ms, p99_ms) = percentiles(durations);
            StatsPoint {
                start: from + Duration::seconds((i as u64 * step) as i64),
                calls: durations.len() as u64,
                errors: *errors,
                p50_ms,
                p99_ms,
            }
        })
        .collect();
    let (p50_ms, p99_ms) = percentiles(&mut all);
    FunctionStats {
        window,
        step,
        from,
        to,
        calls: all.len() as u64,
        errors: errors.iter().sum(),
        p50_ms,
        p99_ms,
        points,
        records_read,
        truncated,
    }
}

/// p50 and p99 by nearest rank; None for no samples.
fn percentiles(durations: &mut [f64]) -> (Option<f64>, Option<f64>) {
    if durations.is_empty() {
        return (None, None);
    }
    durations.sort_by(f64::total_cmp);
    let rank = |p: f64| durations[((p * durations.len() as f64).ceil() as usize).clamp(1, durations.len()) - 1];
    (Some(rank(0.50)), Some(rank(0.99)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(secs: i64, duration_ms: f64, error: bool) -> Sample {
        Sample {
            started_at: Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap(),
            duration_ms,
            error,
        }
    }

    #[test]
    fn buckets_counts_and_percentiles() {
        let to = Utc.timestamp_opt(1_700_000_000 + 120, 0).unwrap();
        // 100 calls in the first minute taking 1..=100 ms, 2 failing;
        // one in the second; one too old and one at `to` (left out).
        let mut samples: Vec<Sample> = (1..=100).map(|i| at(i % 60, i as f64, i <= 2)).collect();
        samples.push(at(90, 7.0, false));
        samples.push(at(-1, 1000.0, true));
        samples.push(at(120, 1000.0, true));
        let stats = summarize(&samples, to, 120, 60, 103, false);
        assert_eq!(stats.points.len(), 2);
        assert_eq!(stats.points[0].calls, 100);
        assert_eq!(stats.points[0].errors, 2);
        assert_eq!(stats.points[0].p50_ms, Some(50.0));
        assert_eq!(stats.points[0].p99_ms, Some(99.0));
        assert_eq!(stats.points[1].calls, 1);
        assert_eq!(stats.points[1].p50_ms, Some(7.0));
        assert_eq!(stats.points[1].start, to - Duration::seconds(60));
        assert_eq!((stats.calls, stats.errors), (101, 2));
        assert_eq!(stats.from, to - Duration::seconds(120));
    }

    #[test]
    fn empty_steps_have_no_percentiles() {
        let to = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let stats = summarize(&[], to, 3600, 60, 0, false);
        assert_eq!(stats.points.len(), 60);
        assert!(stats.points.iter().all(|p| p.calls == 0 && p.p50_ms.is_none()));
        assert_eq!(stats.p99_ms, None);
    }

    #[test]
    fn a_window_not_divisible_by_the_step_keeps_its_tail() {
        let to = Utc.timestamp_opt(1_700_000_000 + 100, 0).unwrap();
        let stats = summarize(&[at(95, 1.0, false)], to, 100, 30, 1, false);
        assert_eq!(stats.points.len(), 4);
        assert_eq!(stats.points[3].calls, 1);
    }

    #[test]
    fn errors_are_failed_calls() {
        let record = |status: &str| InvocationRecord {
            alias: None,
            id: "1".into(),
            namespace: "ns".into(),
            function: "f".into(),
            version: 1,
            trigger: "http".into(),
            request_id: "r".into(),
            started_at: Utc::now(),
            duration_ms: 1.0,
            status: status.into(),
            error: None,
            bytes_in: 0,
            bytes_out: 0,
            cold_start: false,
            logs: vec![],
            logs_truncated: false,
        };
        for (status, error) in [
            ("200", false),
            ("404", false),
            ("500", true),
            ("504", true),
            ("ok", false),
            ("error", true),
        ] {
            assert_eq!(Sample::of(&record(status)).error, error, "{status}");
        }
    }
}
