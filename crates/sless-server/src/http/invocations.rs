//! `/v1/namespaces/{ns}/functions/{name}/invocations` and `/logs`: what a
//! function did, paged or followed as it happens.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use sless_api::{validate_name, InvocationPage, InvocationRecord};
use tokio::sync::broadcast::error::RecvError;

use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::Kind;

/// How often a followed log stream looks whether its token still exists.
const TOKEN_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Records per page (1-1000, default 50).
    limit: Option<i64>,
    /// An invocation id (a page's `next_before`): return older ones.
    before: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Keep the response open and stream new lines until the client leaves.
    #[serde(default)]
    follow: bool,
    /// Lines of history first (default 100, at most 10 000).
    tail: Option<usize>,
}

async fn check_function(state: &AppState, ns: &str, name: &str) -> Result<()> {
    validate_name("namespace", ns)?;
    validate_name("function", name)?;
    match state.store.get(Kind::Function, ns, name).await? {
        Some(_) => Ok(()),
        None => Err(Error::NotFound(format!(
            "function {name:?} not found in namespace {ns:?}"
        ))),
    }
}

/// A function's invocations, newest first.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/invocations", operation_id = "list_invocations", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"), PageQuery),
    responses((status = 200, body = InvocationPage), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    query: std::result::Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<InvocationPage>> {
    let Query(query) = query.map_err(|e| Error::BadRequest(format!("invalid query: {}", e.body_text())))?;
    check_function(&state, &ns, &name).await?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(Error::BadRequest(format!(
            "limit must be between 1 and 1000, got {limit}"
        )));
    }
    let before = crate::record::page_cursor(query.before)?;
    let items = state
        .store
        .list_invocations(&ns, &name, before.as_deref(), limit)
        .await?;
    let next_before = (items.len() as i64 == limit)
        .then(|| items.last().map(|r| r.id.clone()))
        .flatten();
    Ok(Json(InvocationPage { items, next_before }))
}

/// The lines a function's handler printed: `{time} {request_id} {stream} {text}`
/// as text, or Server-Sent Events (one JSON object per line) when the client
/// accepts `text/event-stream`. `follow=true` streams new lines as they happen.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/logs", operation_id = "get_logs", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"), LogsQuery),
    responses((status = 200, description = "Log lines", content_type = "text/plain"), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn logs(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    axum::Extension(principal): axum::Extension<crate::auth::Principal>,
    query: std::result::Result<Query<LogsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(query) = query.map_err(|e| Error::BadRequest(format!("invalid query: {}", e.body_text())))?;
    let tail = query.tail.unwrap_or(100);
    if tail > MAX_TAIL {
        return Err(Error::BadRequest(format!(
            "tail must be at most {MAX_TAIL}, got {tail}"
        )));
    }
    check_function(&state, &ns, &name).await?;
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let slot = match query.follow {
        false => None,
        true => Some(state.follows.take(&ns).ok_or_else(|| Error::TooManyRequests {
            message: format!(
                "namespace {ns} has {} log streams open, the most it may; close one first",
                state.follows.most()
            ),
            retry_after: 5,
        })?),
    };
    // Subscribe before reading history so nothing falls in between.
    let live = query.follow.then(|| state.invoker.log.subscribe(&ns, &name));
    // Newest first: only the last `tail` lines are rendered (a record's
    // 64 KiB of output can be as many lines).
    let history = state.store.list_invocations(&ns, &name, None, 200).await?;
    let mut newest_first = Vec::new();
    let mut count = 0;
    for record in &history {
        if count == tail {
            break;
        }
        let part = render_last(record, sse, tail - count);
        count += part.len();
        newest_first.push(part);
    }
    let lines: Vec<String> = newest_first.into_iter().rev().flatten().collect();
    let seen: HashSet<String> = history.into_iter().map(|r| r.id).collect();
    let head = futures::stream::iter(lines.into_iter().map(|l| Ok::<_, Infallible>(Bytes::from(l))));
    let content_type = if sse {
        "text/event-stream"
    } else {
        "text/plain; charset=utf-8"
    };
    let body = match live {
        None => Body::from_stream(head),
        Some(rx) => {
            // The token is looked up again every few seconds: a revoked
            // token ends the streams it opened.
            let store = state.store.clone();
            let principal = Arc::new(principal);
            let recheck = tokio::time::interval_at(tokio::time::Instant::now() + TOKEN_RECHECK, TOKEN_RECHECK);
            // The namespace's slot goes with the stream.
            let follow =
                futures::stream::unfold((rx, seen, recheck, slot), move |(mut rx, seen, mut recheck, slot)| {
                    let (store, principal) = (store.clone(), principal.clone());
                    async move {
                        loop {
                            let received = tokio::select! {
                                received = rx.recv() => received,
                                _ = recheck.tick() => {
                                    if principal.still_valid(&*store).await {
                                        continue;
                                    }
                                    tracing::info!(token = %principal.name, "token revoked: closing its log stream");
                                    return None;
                                }
                            };
                            match received {
                                Ok(r) if !seen.contains(&r.id) => {
                                    let chunk = Bytes::from(render(&r, sse).concat());
                                    return Some((Ok::<_, Infallible>(chunk), (rx, seen, recheck, slot)));
                                }
                                Ok(_) | Err(RecvError::Lagged(_)) => continue,
                                Err(RecvError::Closed) => return None,
                            }
                        }
                    }
                });
            use futures::StreamExt;
            Body::from_stream(head.chain(follow))
        }
    };
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .expect("static headers"))
}

/// One record's output as text lines or SSE events.
fn render(record: &InvocationRecord, sse: bool) -> Vec<String> {
    render_last(record, sse, usize::MAX)
}

/// The last `most` lines of `record`'s output, rendered, in order.
fn render_last(record: &InvocationRecord, sse: bool, most: usize) -> Vec<String> {
    let time = record.started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let lines = record
        .logs
        .iter()
        .rev()
        .flat_map(|chunk| chunk.text.lines().rev().map(move |line| (chunk, line)));
    let mut out: Vec<String> = lines
        .take(most)
        .map(|(chunk, line)| {
            if sse {
                let event = serde_json::json!({
                    "time": time, "request_id": record.request_id, "invocation": record.id,
                    "stream": chunk.stream, "text": line,
                });
                format!("data: {event}\n\n")
            } else {
                format!("{time} {} {} {line}\n", record.request_id, chunk.stream)
            }
        })
        .collect();
    out.reverse();
    out
}

/// The most lines of history `logs` sends (`tail`).
const MAX_TAIL: usize = 10_000;

/// The most log streams (`follow=true`) one namespace holds open at once:
/// each holds a connection, and the server takes a few thousand.
pub const MAX_FOLLOWS: usize = 32;
