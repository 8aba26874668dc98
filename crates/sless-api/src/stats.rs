//! A function's calls, errors and latency over a time window, in buckets.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `GET .../functions/{name}/stats`: totals over the window and one point
/// per step, computed from the invocation records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FunctionStats {
    /// Seconds covered, ending at `to`.
    pub window: u64,
    /// Seconds per point.
    pub step: u64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Calls started in the window.
    pub calls: u64,
    /// Of those, the failed ones: status `error` or an HTTP status of 500
    /// and above (an exception, a timeout, a crashed instance).
    pub errors: u64,
    /// Median duration in milliseconds; absent without calls.
    pub p50_ms: Option<f64>,
    /// 99th percentile duration in milliseconds; absent without calls.
    pub p99_ms: Option<f64>,
    /// Oldest first, `window / step` of them.
    pub points: Vec<StatsPoint>,
    /// Records read to compute this.
    pub records_read: u64,
    /// True when the window held more records than the server reads for one
    /// answer: the figures then cover the newest `records_read` calls only.
    pub truncated: bool,
}

/// One step of a [`FunctionStats`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StatsPoint {
    /// The step's start.
    pub start: DateTime<Utc>,
    pub calls: u64,
    pub errors: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}
