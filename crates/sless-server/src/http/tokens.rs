//! `/v1/tokens`: admin-only management of bearer tokens.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;
use sless_api::{validate_name, List, Token, TokenCreate, TokenCreated, MAX_TOKEN_NAMESPACES, MAX_TOKEN_NAME_CHARS};

use super::body::{from_value, JsonObject};
use crate::auth::{generate_token, hash_token};
use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::TokenRecord;

fn to_token(record: TokenRecord) -> Token {
    Token {
        id: record.id,
        name: record.name,
        namespaces: record.namespaces,
        admin: record.admin,
        created_at: record.created_at,
    }
}

/// Create a token scoped to namespaces (or an admin token). The secret is in
/// this answer only; the server keeps its hash.
#[utoipa::path(post, path = "/v1/tokens", operation_id = "create_token", tag = "tokens", request_body = TokenCreate,
    responses((status = 201, body = TokenCreated), (status = 400, body = sless_api::ErrorBody), (status = 403, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    JsonObject(body): JsonObject,
) -> Result<(StatusCode, Json<TokenCreated>)> {
    let mut request: TokenCreate = from_value("token", Value::Object(body))?;
    if request.name.trim().is_empty() {
        return Err(Error::BadRequest("name must not be empty".into()));
    }
    let name_chars = request.name.chars().count();
    if name_chars > MAX_TOKEN_NAME_CHARS {
        return Err(Error::BadRequest(format!(
            "name has {name_chars} characters; a token's name has at most {MAX_TOKEN_NAME_CHARS}"
        )));
    }
    if request.name.chars().any(char::is_control) {
        return Err(Error::BadRequest(
            "name must not hold control characters (line breaks, tabs and the like)".into(),
        ));
    }
    for ns in &request.namespaces {
        validate_name("namespace", ns)?;
    }
    let mut seen = std::collections::HashSet::new();
    request.namespaces.retain(|ns| seen.insert(ns.clone()));
    if request.namespaces.len() > MAX_TOKEN_NAMESPACES {
        return Err(Error::BadRequest(format!(
            "namespaces lists {} namespaces; a token lists at most {MAX_TOKEN_NAMESPACES} (an admin token covers them all)",
            request.namespaces.len()
        )));
    }
    if request.namespaces.is_empty() && !request.admin {
        return Err(Error::BadRequest(
            "namespaces must list at least one namespace (or set admin: true)".into(),
        ));
    }
    let secret = generate_token();
    let record = TokenRecord {
        id: hex::encode(rand::random::<[u8; 8]>()),
        name: request.name,
        hash: hash_token(&secret),
        namespaces: request.namespaces,
        admin: request.admin,
        created_at: crate::store::now(),
    };
    state.store.create_token(&record).await?;
    tracing::info!(token = %record.name, id = %record.id, "token created");
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            info: to_token(record),
            token: secret,
        }),
    ))
}

/// List tokens (never their secrets).
#[utoipa::path(get, path = "/v1/tokens", operation_id = "list_tokens", tag = "tokens",
    responses((status = 200, body = List<Token>), (status = 403, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<List<Token>>> {
    let items = state.store.list_tokens().await?.into_iter().map(to_token).collect();
    Ok(Json(List { items }))
}

/// Revoke a token.
#[utoipa::path(delete, path = "/v1/tokens/{id}", operation_id = "delete_token", tag = "tokens",
    params(("id" = String, Path, description = "Token id")),
    responses((status = 204), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<StatusCode> {
    if state.store.delete_token(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Error::NotFound(format!("token {id:?} not found")))
    }
}
