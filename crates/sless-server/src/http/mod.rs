//! The HTTP surface: the `/v1` REST API behind bearer auth, the public
//! `/healthz`, `/metrics`, `/v1/openapi.json` and `/fn` gateway, and the
//! layers every request passes.

mod access_log;
mod async_invocations;
pub(crate) mod body;
mod console;
mod functions;
mod gateway;
pub(crate) mod invocations;
mod jobs;
mod openapi;
mod openapi_rules;
pub(crate) mod resource;
mod secrets;
mod serving;
mod stats;
mod system;
mod tokens;
mod triggers;
mod versions;
mod whoami;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post, put};
use axum::Router;

pub use openapi::ApiDoc;

use crate::state::AppState;

/// The whole application: the `/fn` gateway and the router for the rest,
/// both under the one access log.
pub fn app(state: Arc<AppState>) -> access_log::AccessLog<gateway::App> {
    access_log::AccessLog(gateway::App {
        router: router(state.clone()),
        state,
    })
}

/// Every route but the gateway's.
fn router(state: Arc<AppState>) -> Router {
    let upload_limit = DefaultBodyLimit::max(state.config.max_upload_bytes);
    let json_limit = DefaultBodyLimit::max(state.config.max_json_bytes);

    // Everything under /v1: bearer auth wraps the routes and the 404 fallback,
    // so an unknown /v1 path without a token is a 401, not a hint.
    let api = Router::new()
        .route("/v1/tokens", post(tokens::create).get(tokens::list))
        .route("/v1/tokens/{id}", axum::routing::delete(tokens::delete))
        .route("/v1/whoami", get(whoami::whoami))
        .route(
            "/v1/namespaces/{ns}/functions",
            get(functions::list).post(functions::create),
        )
        .route(
            "/v1/namespaces/{ns}/functions/{name}",
            get(functions::get).patch(functions::patch).delete(functions::delete),
        )
        .route(
            "/v1/namespaces/{ns}/triggers",
            get(triggers::list).post(triggers::create),
        )
        .route(
            "/v1/namespaces/{ns}/triggers/{name}",
            get(triggers::get).patch(triggers::patch).delete(triggers::delete),
        )
        .route("/v1/namespaces/{ns}/secrets", get(secrets::list).post(secrets::create))
        .route(
            "/v1/namespaces/{ns}/secrets/{name}",
            get(secrets::get).patch(secrets::patch).delete(secrets::delete),
        )
        .route("/v1/namespaces/{ns}/jobs", get(jobs::list).post(jobs::create))
        .route(
            "/v1/namespaces/{ns}/jobs/{name}",
            get(jobs::get).patch(jobs::patch).delete(jobs::delete),
        )
        .route(
            "/v1/namespaces/{ns}/functions/{name}/invocations",
            get(invocations::list),
        )
        .route(
            "/v1/namespaces/{ns}/functions/{name}/async-invocations",
            get(async_invocations::list),
        )
        .route(
            "/v1/namespaces/{ns}/functions/{name}/async-invocations/{id}",
            get(async_invocations::get),
        )
        .route("/v1/namespaces/{ns}/functions/{name}/logs", get(invocations::logs))
        .route("/v1/namespaces/{ns}/functions/{name}/stats", get(stats::stats))
        .route(
            "/v1/namespaces/{ns}/functions/{name}/versions",
            get(versions::list_versions),
        )
        .route(
            "/v1/namespaces/{ns}/functions/{name}/versions/{version}",
            get(versions::get_version).delete(versions::delete_version),
        )
        .route(
            "/v1/namespaces/{ns}/functions/{name}/aliases",
            get(versions::list_aliases),
        )
        .route(
            "/v1/namespaces/{ns}/functions/{name}/aliases/{alias}",
            get(versions::get_alias)
                .put(versions::put_alias)
                .patch(versions::patch_alias)
                .delete(versions::delete_alias),
        )
        .route(
            "/v1/namespaces/{ns}/functions/{name}/code",
            put(functions::upload_code).layer(upload_limit),
        )
        .method_not_allowed_fallback(system::method_not_allowed)
        .fallback(system::not_found)
        .layer(json_limit)
        .layer(middleware::from_fn_with_state(state.clone(), auth_under_v1))
        .with_state(state.clone());

    // Public: health, metrics and the API's own description (as most APIs
    // publish their schema); matched before the authenticated `/v1` router.
    Router::new()
        .route("/healthz", get(system::healthz))
        .route("/metrics", get(system::metrics))
        .route("/v1/openapi.json", get(system::openapi_json))
        .merge(console::routes())
        .method_not_allowed_fallback(system::method_not_allowed)
        .fallback_service(api)
        .with_state(state)
}

/// Paths under `/v1` need a token; anything else falling through to the API
/// router is a plain 404.
async fn auth_under_v1(state: State<Arc<AppState>>, request: Request, next: Next) -> Response {
    use axum::response::IntoResponse;
    let path = request.uri().path();
    if path == "/v1" || path.starts_with("/v1/") {
        match crate::auth::require_token(state, request, next).await {
            Ok(response) => response,
            Err(e) => e.into_response(),
        }
    } else {
        next.run(request).await
    }
}
