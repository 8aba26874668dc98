//! `/v1/namespaces/{ns}/functions/{name}/async-invocations[/{id}]`: the
//! records of asynchronous calls (where the gateway's 202 `Location` points).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use sless_api::{validate_name, AsyncInvocation, AsyncInvocationPage, AsyncStatus};

use super::invocations::{held_json, read_slot, READS_REFUSED};
use crate::bounds::MAX_ANSWER_BYTES;
use crate::error::{Error, Result};
use crate::state::AppState;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AsyncQuery {
    /// Only events in this state: queued, running, succeeded or failed.
    status: Option<String>,
    /// Records per page (1-1000, default 50); a page ends sooner where the
    /// next record would take it past 4 MiB.
    limit: Option<i64>,
    /// An event id (a page's `next_before`): return older ones.
    before: Option<String>,
}

/// One asynchronous call: its state, attempts and last error.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/async-invocations/{id}", operation_id = "get_async_invocation", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"),
        ("id" = String, Path, description = "The id the 202 answered with")),
    responses((status = 200, body = AsyncInvocation), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path((ns, name, id)): Path<(String, String, String)>,
) -> Result<Json<AsyncInvocation>> {
    validate_name("namespace", &ns)?;
    validate_name("function", &name)?;
    state
        .async_invocations
        .events
        .get(&ns, &name, &id)
        .await?
        .map(Json)
        .ok_or_else(|| {
            Error::NotFound(format!(
                "asynchronous invocation {:?} of function {name:?} not found in namespace {ns:?}",
                sless_api::text::echoed(&id)
            ))
        })
}

/// A function's asynchronous calls, newest first.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/async-invocations", operation_id = "list_async_invocations", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"), AsyncQuery),
    responses((status = 200, body = AsyncInvocationPage), (status = 400, body = sless_api::ErrorBody),
        (status = 429, body = sless_api::ErrorBody, description = READS_REFUSED)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    query: std::result::Result<Query<AsyncQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(query) = query.map_err(|e| Error::BadRequest(format!("invalid query: {}", e.body_text())))?;
    validate_name("namespace", &ns)?;
    validate_name("function", &name)?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(Error::invalid(
            "limit",
            format!("limit must be between 1 and 1000, got {limit}"),
        ));
    }
    let status = match query.status.as_deref() {
        None => None,
        Some(text) => Some(AsyncStatus::parse(text).ok_or_else(|| {
            Error::invalid(
                "status",
                format!("status must be queued, running, succeeded or failed, got {text:?}"),
            )
        })?),
    };
    let before = crate::record::page_cursor(query.before)?;
    let read = read_slot(&state, &ns)?;
    // What an event's errors say is the tenant's: a page holds at most
    // MAX_ANSWER_BYTES of records, and ends where the next one starts.
    let page = state
        .async_invocations
        .events
        .list(&ns, &name, status, before.as_deref(), limit, MAX_ANSWER_BYTES)
        .await?;
    let next_before = page.next_before();
    held_json(
        read,
        &AsyncInvocationPage {
            items: page.items,
            next_before,
        },
    )
}
