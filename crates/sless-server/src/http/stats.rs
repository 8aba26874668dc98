//! `GET /v1/namespaces/{ns}/functions/{name}/stats`: calls, errors and
//! p50/p99 latency over a window, computed from the invocation records.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use sless_api::FunctionStats;

use super::resource::load;
use crate::error::{Error, Result};
use crate::invocation_stats::{summarize, Sample};
use crate::state::AppState;
use crate::store::Kind;

/// The most records one answer reads; past it the answer says `truncated`.
const MAX_RECORDS: usize = 20_000;
/// Records read per store call at most.
const PAGE: i64 = 1000;
/// The longest window: 7 days.
const MAX_WINDOW: u64 = 7 * 86_400;
/// The most points one answer holds.
const MAX_POINTS: u64 = 1440;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct StatsQuery {
    /// Seconds covered, ending now (60 to 604800, default 3600).
    window: Option<u64>,
    /// Seconds per point (at least 10 and window/1440; default 60).
    step: Option<u64>,
}

/// A function's calls, errors and p50/p99 latency over the last `window`
/// seconds, in steps of `step` seconds.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/stats", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"), StatsQuery),
    responses((status = 200, body = FunctionStats), (status = 400, body = sless_api::ErrorBody), (status = 404, body = sless_api::ErrorBody),
        (status = 429, body = sless_api::ErrorBody, description = super::invocations::READS_REFUSED)),
    security(("bearer" = [])))]
pub async fn stats(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    query: std::result::Result<Query<StatsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<FunctionStats>> {
    let Query(query) = query.map_err(|e| Error::BadRequest(format!("invalid query: {}", e.body_text())))?;
    let window = query.window.unwrap_or(3600);
    if !(60..=MAX_WINDOW).contains(&window) {
        return Err(Error::invalid(
            "window",
            format!("window must be between 60 and {MAX_WINDOW} seconds, got {window}"),
        ));
    }
    let step = query.step.unwrap_or(60);
    let least = 10.max(window.div_ceil(MAX_POINTS));
    if step < least || step > window {
        return Err(Error::invalid(
            "step",
            format!("step must be between {least} and {window} seconds for a window of {window}, got {step}"),
        ));
    }
    load(&state, Kind::Function, &ns, &name).await?;
    let _read = super::invocations::read_slot(&state, &ns)?;
    // Steps start at whole multiples of `step` (minutes, hours): the window
    // ends at now rounded up to one, so the last step is still filling.
    let now = crate::store::now().timestamp();
    let to = chrono::DateTime::from_timestamp((now.div_euclid(step as i64) + 1) * step as i64, 0)
        .ok_or_else(|| Error::internal("time out of range"))?;
    let from = to - chrono::Duration::seconds(window as i64);
    let mut samples = Vec::new();
    let mut before: Option<String> = None;
    let mut read = 0usize;
    let truncated = loop {
        // Pages bounded in bytes too: only what the samples need is kept.
        let page = state
            .store
            .list_invocations(&ns, &name, before.as_deref(), PAGE, crate::bounds::MAX_ANSWER_BYTES)
            .await?;
        let (more, page) = (page.more, page.items);
        read += page.len();
        samples.extend(page.iter().map(Sample::of));
        before = page.last().map(|r| r.id.clone());
        let reached_from = page.last().is_none_or(|r| r.started_at < from);
        if reached_from || !more {
            break false;
        }
        if read >= MAX_RECORDS {
            break true;
        }
    };
    Ok(Json(summarize(&samples, to, window, step, read as u64, truncated)))
}
