//! `/v1/namespaces/{ns}/secrets`: values go in (create, patch) and never
//! come back out; a secret reads as its name, keys and times. A change of
//! values rolls the functions that use the secret (their next instances get
//! the new values); a secret or key a function uses cannot be deleted (409
//! naming the function).
//!
//! Bodies are read by hand rather than by serde, so that no error message
//! can quote a value (serde's "invalid type: string ..." would).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{Map, Value};
use sless_api::{validate_name, List, Secret, MAX_SECRETS_PER_NAMESPACE, MAX_SECRET_KEYS};

use super::body::{check_name, take_identity, JsonObject};
use crate::error::{Error, Result};
use crate::secrets::users;
use crate::state::AppState;
use crate::store::SecretRecord;
use sless_driver::FunctionKey;

fn secret_api(record: &SecretRecord) -> Secret {
    Secret {
        name: record.name.clone(),
        namespace: record.namespace.clone(),
        keys: record.data.keys().cloned().collect(),
        created_at: record.created_at,
        updated_at: record.updated_at,
    }
}

fn not_found(ns: &str, name: &str) -> Error {
    Error::NotFound(format!("secret {name:?} not found in namespace {ns:?}"))
}

async fn load(state: &AppState, ns: &str, name: &str) -> Result<SecretRecord> {
    validate_name("namespace", ns)?;
    validate_name("secret", name)?;
    state.store.secret(ns, name).await?.ok_or_else(|| not_found(ns, name))
}

/// The `data` object of a body: keys checked, values text (or null where
/// `nulls` allows: a patch's removal), sizes bounded. Other fields are refused.
fn data_of(mut body: Map<String, Value>, nulls: bool) -> Result<BTreeMap<String, Option<String>>> {
    let data = body
        .remove("data")
        .ok_or_else(|| Error::invalid("data", "data is required: an object of key -> text value"))?;
    if let Some(field) = body.keys().next() {
        return Err(Error::invalid(field.clone(), format!("unknown field {field:?}")));
    }
    let Value::Object(data) = data else {
        return Err(Error::invalid("data", "data must be an object of key -> text value"));
    };
    if data.len() > MAX_SECRET_KEYS {
        return Err(Error::invalid(
            "data",
            format!("data has {} keys; a secret holds at most {MAX_SECRET_KEYS}", data.len()),
        ));
    }
    data.into_iter()
        .map(|(key, value)| {
            sless_api::validate_secret_key(&key).map_err(|e| Error::invalid("data", e))?;
            match value {
                Value::String(text) => {
                    sless_api::validate_secret_value(&key, &text).map_err(|e| Error::invalid("data", e))?;
                    Ok((key, Some(text)))
                }
                Value::Null if nulls => Ok((key, None)),
                _ => Err(Error::invalid(
                    "data",
                    format!(
                        "the value of key {key:?} must be a string{}",
                        if nulls { " or null" } else { "" }
                    ),
                )),
            }
        })
        .collect()
}

/// List the secrets of a namespace (names and keys, never values).
#[utoipa::path(get, path = "/v1/namespaces/{ns}/secrets", operation_id = "list_secrets", tag = "secrets",
    params(("ns" = String, Path, description = "Namespace")),
    responses((status = 200, body = List<Secret>)),
    security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>, Path(ns): Path<String>) -> Result<Json<List<Secret>>> {
    validate_name("namespace", &ns)?;
    let items = state.store.secrets(&ns).await?.iter().map(secret_api).collect();
    Ok(Json(List { items }))
}

/// Create a secret. Its values are sealed at once and never returned.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/secrets", operation_id = "create_secret", tag = "secrets",
    params(("ns" = String, Path, description = "Namespace")),
    request_body = sless_api::SecretCreate,
    responses((status = 201, body = Secret), (status = 409, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    JsonObject(mut body): JsonObject,
) -> Result<(StatusCode, Json<Secret>)> {
    validate_name("namespace", &ns)?;
    let name = take_identity(&mut body, &ns)?.ok_or_else(|| Error::invalid("name", "name is required"))?;
    check_name("name", "secret", &name)?;
    let data: BTreeMap<String, String> = data_of(body, false)?
        .into_iter()
        .map(|(key, value)| (key, value.unwrap_or_default()))
        .collect();
    let _turn = crate::quota::turn(&state, &ns).await?;
    if state.store.secret(&ns, &name).await?.is_none()
        && state.store.count_secrets(&ns).await? >= MAX_SECRETS_PER_NAMESPACE as i64
    {
        return Err(Error::invalid(
            "name",
            format!("namespace {ns:?} holds {MAX_SECRETS_PER_NAMESPACE} secrets already, the most it may"),
        ));
    }
    let record = state.secrets.seal(&ns, &name, &data);
    state.store.create_secret(&record).await?;
    tracing::info!(namespace = %ns, secret = %name, keys = record.data.len(), "secret created");
    Ok((StatusCode::CREATED, Json(secret_api(&record))))
}

/// Get a secret: its keys and times, never its values.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/secrets/{name}", operation_id = "get_secret", tag = "secrets",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Secret name")),
    responses((status = 200, body = Secret), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(State(state): State<Arc<AppState>>, Path((ns, name)): Path<(String, String)>) -> Result<Json<Secret>> {
    Ok(Json(secret_api(&load(&state, &ns, &name).await?)))
}

/// Change values (JSON merge patch of `data`: a string sets a key, null
/// removes it). The functions that use the secret roll onto the new values
/// before the answer. Removing a key a function's `env_from_secrets` takes
/// is a 409 naming the function.
#[utoipa::path(patch, path = "/v1/namespaces/{ns}/secrets/{name}", operation_id = "patch_secret", tag = "secrets",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Secret name")),
    request_body = sless_api::SecretPatch,
    responses((status = 200, body = Secret), (status = 404, body = sless_api::ErrorBody), (status = 409, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn patch(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    JsonObject(mut body): JsonObject,
) -> Result<Json<Secret>> {
    let record = load(&state, &ns, &name).await?;
    if let Some(given) = take_identity(&mut body, &ns)? {
        if given != name {
            return Err(Error::invalid(
                "name",
                format!("name cannot be changed (path says {name:?}, body says {given:?})"),
            ));
        }
    }
    let changes = data_of(body, true)?;
    let before = state.secrets.open(&record)?;
    let mut after = before.clone();
    for (key, value) in changes {
        match value {
            Some(value) => after.insert(key, value),
            None => after.remove(&key),
        };
    }
    if after.len() > MAX_SECRET_KEYS {
        return Err(Error::invalid(
            "data",
            format!(
                "the secret would hold {} keys; at most {MAX_SECRET_KEYS} are allowed",
                after.len()
            ),
        ));
    }
    if after == before {
        return Ok(Json(secret_api(&record)));
    }
    let uses = users(&*state.store, &ns, &name).await?;
    for used in &uses {
        if let Some(key) = used.env_keys.iter().find(|k| !after.contains_key(*k)) {
            return Err(Error::Conflict(format!(
                "function {:?} takes key {key:?} of secret {name:?} (env_from_secrets); change the function first",
                used.function
            )));
        }
    }
    let mut sealed = state.secrets.seal(&ns, &name, &after);
    sealed.created_at = record.created_at;
    if !state.store.replace_secret(&sealed, &record.data).await? {
        return Err(Error::Conflict(format!(
            "secret {name:?} changed or went while this change was made; read it and try again"
        )));
    }
    tracing::info!(namespace = %ns, secret = %name, functions = uses.len(), "secret changed; rolling the functions that use it");
    let rolls = uses.iter().map(|used| {
        let key = FunctionKey::new(&ns, &used.function);
        let state = state.clone();
        async move {
            if let Err(e) = state.deployer.apply_spec(&key).await {
                tracing::warn!(function = %key, error = %e, "rolling a function onto a changed secret failed");
            }
            state.versions.restart(&key).await;
        }
    });
    futures::future::join_all(rolls).await;
    Ok(Json(secret_api(&sealed)))
}

/// Delete a secret. One a function uses is a 409 naming the function.
#[utoipa::path(delete, path = "/v1/namespaces/{ns}/secrets/{name}", operation_id = "delete_secret", tag = "secrets",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Secret name")),
    responses((status = 204), (status = 404, body = sless_api::ErrorBody),
        (status = 409, body = sless_api::ErrorBody, description = "A function uses the secret; the message names it")),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<StatusCode> {
    load(&state, &ns, &name).await?;
    let uses = users(&*state.store, &ns, &name).await?;
    if !uses.is_empty() {
        let named: Vec<String> = uses.iter().map(|u| format!("{:?}", u.function)).collect();
        return Err(Error::Conflict(format!(
            "secret {name:?} is used by function {}; remove it from env_from_secrets and secret_files first",
            named.join(", function ")
        )));
    }
    if !state.store.delete_secret(&ns, &name).await? {
        return Err(not_found(&ns, &name));
    }
    tracing::info!(namespace = %ns, secret = %name, "secret deleted");
    Ok(StatusCode::NO_CONTENT)
}
