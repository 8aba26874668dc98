//! Health, the OpenAPI document and the JSON answers for unknown routes.

use axum::http::{Method, Uri};
use axum::Json;
use serde_json::{json, Value};

use crate::error::Error;

/// Liveness: answers while the server runs, with this replica's id and
/// whether it leads (runs cron ticks, builds, job runs, consumers).
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, description = "The server is up")))]
pub async fn healthz(
    axum::extract::State(state): axum::extract::State<std::sync::Arc<crate::state::AppState>>,
) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "leader": state.cluster.is_leader(),
        "replica": state.cluster.replica(),
    }))
}

/// This API's OpenAPI 3.1 document. Public: no token needed.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "system", responses((status = 200, description = "OpenAPI document")))]
pub async fn openapi_json() -> Json<Value> {
    Json(super::openapi_rules::document())
}

pub async fn not_found(uri: Uri) -> Error {
    Error::NotFound(format!("{}{}", sless_api::NO_ROUTE, uri.path()))
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> Error {
    Error::MethodNotAllowed(format!("method {method} is not allowed on {}", uri.path()))
}

/// Prometheus text exposition of the server's counters: for the admin token
/// or `SLESS_METRICS_TOKEN` (it names every namespace and function).
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain"),
        (status = 401, body = sless_api::ErrorBody), (status = 403, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn metrics(
    axum::extract::State(state): axum::extract::State<std::sync::Arc<crate::state::AppState>>,
    headers: axum::http::HeaderMap,
) -> Result<impl axum::response::IntoResponse, Error> {
    crate::auth::may_read_metrics(&state, &headers)?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render_metrics(&state).await,
    ))
}

async fn render_metrics(state: &crate::state::AppState) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    out.push_str("# HELP sless_instances Running instances per function.\n# TYPE sless_instances gauge\n");
    // Summed over the deployed versions of each function.
    let mut stats: Vec<(sless_driver::FunctionKey, sless_driver::FunctionLoad)> = Vec::new();
    let mut versions = state.driver.stats().await;
    versions.sort_by(|a, b| a.0.cmp(&b.0));
    for (target, load) in versions {
        match stats.last_mut() {
            Some((key, sum)) if *key == target.key => {
                sum.instances += load.instances;
                sum.waiting += load.waiting;
            }
            _ => stats.push((target.key, load)),
        }
    }
    for (key, s) in &stats {
        let _ = writeln!(
            out,
            "sless_instances{{namespace=\"{}\",function=\"{}\"}} {}",
            key.namespace, key.name, s.instances
        );
    }
    out.push_str(
        "# HELP sless_queue_depth Requests waiting for an instance per function.\n# TYPE sless_queue_depth gauge\n",
    );
    for (key, s) in &stats {
        let _ = writeln!(
            out,
            "sless_queue_depth{{namespace=\"{}\",function=\"{}\"}} {}",
            key.namespace, key.name, s.waiting
        );
    }
    let _ = writeln!(
        out,
        "# HELP sless_leader Whether this replica leads (1) or follows (0).\n# TYPE sless_leader gauge\nsless_leader {}",
        u8::from(state.cluster.is_leader())
    );
    state.metrics.render(&mut out);
    state.async_invocations.render(&mut out);
    let log = &state.invoker.log;
    use std::sync::atomic::Ordering::Relaxed;
    let _ = writeln!(
        out,
        "# HELP sless_invocation_records_dropped_total Records dropped because the write buffer was full.\n\
         # TYPE sless_invocation_records_dropped_total counter\nsless_invocation_records_dropped_total {}",
        log.dropped.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP sless_invocation_records_written_total Records written to the store.\n\
         # TYPE sless_invocation_records_written_total counter\nsless_invocation_records_written_total {}",
        log.written.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP sless_invocation_records_backlog Records waiting to be written.\n\
         # TYPE sless_invocation_records_backlog gauge\nsless_invocation_records_backlog {}",
        log.backlog()
    );
    out.push_str(&state.check_metrics.render_prometheus());
    out
}
