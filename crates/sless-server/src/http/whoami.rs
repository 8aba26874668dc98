//! `GET /v1/whoami`: the calling token's name, admin flag and namespaces,
//! so a client (the console) can offer the namespaces it may use.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use sless_api::WhoAmI;

use crate::auth::Principal;
use crate::error::Result;
use crate::state::AppState;

/// The most namespaces listed for an admin token.
const MAX_LISTED_NAMESPACES: i64 = 1000;

/// Who the bearer token is: its name, whether it is an admin token, and its
/// namespaces (for an admin, those that hold a function, trigger or job).
#[utoipa::path(get, path = "/v1/whoami", tag = "tokens",
    responses((status = 200, body = WhoAmI), (status = 401, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn whoami(
    State(state): State<Arc<AppState>>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<WhoAmI>> {
    let namespaces = if principal.admin {
        state.store.namespaces(MAX_LISTED_NAMESPACES).await?
    } else {
        principal.namespaces
    };
    Ok(Json(WhoAmI {
        name: principal.name,
        admin: principal.admin,
        namespaces,
    }))
}
