//! The public invoke gateway `ANY /fn/{ns}/{name}[/{rest}]`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use sless_api::{validate_name, FunctionStatus, Phase};

use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::Kind;

/// Invoke a function. Public: no token needed.
#[utoipa::path(post, path = "/fn/{ns}/{name}", tag = "gateway",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name")),
    responses((status = 200, description = "The handler's answer"), (status = 404, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = "No ready version yet (Retry-After) or disabled")))]
pub async fn invoke(
    State(state): State<Arc<AppState>>,
    Path(params): Path<Vec<(String, String)>>,
) -> Result<Response> {
    let param = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let (ns, name) = (param("ns"), param("name"));
    let missing = || Error::NotFound(format!("function {name:?} not found in namespace {ns:?}"));
    if validate_name("namespace", &ns).is_err() || validate_name("function", &name).is_err() {
        return Err(missing());
    }
    let record = state
        .store
        .get(Kind::Function, &ns, &name)
        .await?
        .ok_or_else(missing)?;
    let status: FunctionStatus = serde_json::from_value(record.status).map_err(Error::internal)?;
    match status.phase {
        Phase::Ready => Err(Error::Unavailable {
            message: format!("function {name:?} has no running instances"),
            retry_after: Some(1),
        }),
        _ => Err(Error::Unavailable {
            message: format!(
                "function {name:?} has no ready version yet (phase {:?})",
                status.phase
            ),
            retry_after: Some(2),
        }),
    }
}
