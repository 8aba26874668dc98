//! `/v1/namespaces/{ns}/functions/{name}/versions` and `.../aliases`: the
//! built versions of a function (read-only) and the aliases that point at
//! them. Moving an alias is one store write; this replica routes by it at
//! once, the others within a reconcile period.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;
use sless_api::{validate_alias_name, validate_new_alias_name, Alias, AliasSpec, FunctionVersion, List};

use super::body::{from_value, merge_patch, take_identity, JsonObject};
use super::resource::load;
use crate::error::{Error, Result};
use crate::routes::Split;
use crate::state::AppState;
use crate::store::{AliasRecord, Kind, VersionRecord};
use sless_driver::FunctionKey;

/// A stored version as the API returns it.
fn version_api(record: VersionRecord, latest: u64, aliases: &[AliasRecord]) -> Result<FunctionVersion> {
    let spec = serde_json::from_value(record.spec).map_err(|e| {
        Error::Internal(format!(
            "the stored version {} of function {:?} cannot be read ({e})",
            record.version, record.function
        ))
    })?;
    Ok(FunctionVersion {
        version: record.version,
        code_hash: record.code_hash,
        artifact: record.artifact,
        artifact_digest: record.artifact_digest,
        spec,
        built_at: record.built_at,
        artifact_bytes: record.artifact_bytes,
        archive_bytes: record.archive_bytes,
        latest: record.version == latest,
        aliases: aliases
            .iter()
            .filter(|a| a.spec.versions().contains(&record.version))
            .map(|a| a.name.clone())
            .collect(),
    })
}

fn alias_api(state: &AppState, record: AliasRecord) -> Alias {
    Alias {
        url: format!(
            "{}/fn/{}/{}@{}",
            state.config.external_url(),
            record.namespace,
            record.function,
            record.name
        ),
        name: record.name,
        namespace: record.namespace,
        function: record.function,
        spec: record.spec,
        updated_at: record.updated_at,
    }
}

/// The serving version (`$latest`) of a function, 0 before its first build.
async fn latest_of(state: &AppState, ns: &str, name: &str) -> Result<u64> {
    let record = load(state, Kind::Function, ns, name).await?;
    Ok(record.status.get("version").and_then(Value::as_u64).unwrap_or(0))
}

/// A version number from the path, naming the field when it is none.
fn version_number(text: &str) -> Result<u64> {
    // Digits only: u64's parser takes a leading `+`, which the gateway's
    // `@N` does not.
    let digits = text.bytes().all(|b| b.is_ascii_digit());
    text.parse::<u64>().ok().filter(|v| digits && *v > 0).ok_or_else(|| {
        Error::invalid(
            "version",
            format!(
                "version {:?} is not a version number (1 or more)",
                sless_api::text::echoed(text)
            ),
        )
    })
}

/// List a function's versions, newest first (the kept ones: see `SLESS_KEEP_VERSIONS`).
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/versions", operation_id = "list_versions", tag = "versions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name")),
    responses((status = 200, body = List<FunctionVersion>), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_versions(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<List<FunctionVersion>>> {
    let latest = latest_of(&state, &ns, &name).await?;
    let aliases = state.store.aliases(&ns, &name).await?;
    let items = state
        .store
        .versions(&ns, &name)
        .await?
        .into_iter()
        .map(|record| version_api(record, latest, &aliases))
        .collect::<Result<_>>()?;
    Ok(Json(List { items }))
}

/// Get one version: its code hash, artifact, spec and build time.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/versions/{version}", operation_id = "get_version", tag = "versions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"),
        ("version" = u64, Path, description = "Version number")),
    responses((status = 200, body = FunctionVersion), (status = 400, body = sless_api::ErrorBody), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_version(
    State(state): State<Arc<AppState>>,
    Path((ns, name, version)): Path<(String, String, String)>,
) -> Result<Json<FunctionVersion>> {
    let latest = latest_of(&state, &ns, &name).await?;
    let version = version_number(&version)?;
    let record = state
        .store
        .version(&ns, &name, version)
        .await?
        .ok_or_else(|| no_version(&ns, &name, version))?;
    let aliases = state.store.aliases(&ns, &name).await?;
    Ok(Json(version_api(record, latest, &aliases)?))
}

/// Delete a version no longer needed: its record, its artifact (unless
/// another version uses it) and its upload. Not the version the function
/// serves, nor one an alias points at (409): move those first. What a
/// namespace keeps counts towards `SLESS_NS_MAX_STORAGE_MB`.
#[utoipa::path(delete, path = "/v1/namespaces/{ns}/functions/{name}/versions/{version}", operation_id = "delete_version", tag = "versions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"),
        ("version" = u64, Path, description = "Version number")),
    responses((status = 204), (status = 400, body = sless_api::ErrorBody), (status = 404, body = sless_api::ErrorBody),
        (status = 409, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn delete_version(
    State(state): State<Arc<AppState>>,
    Path((ns, name, version)): Path<(String, String, String)>,
) -> Result<StatusCode> {
    let record = load(&state, Kind::Function, &ns, &name).await?;
    let version = version_number(&version)?;
    // In the turn an alias is written in: none can point at it meanwhile.
    let _turn = crate::quota::turn(&state, &ns).await?;
    let status: sless_api::FunctionStatus = serde_json::from_value(record.status).map_err(Error::internal)?;
    let stored = state
        .store
        .version(&ns, &name, version)
        .await?
        .ok_or_else(|| no_version(&ns, &name, version))?;
    if version == status.version {
        return Err(Error::Conflict(format!(
            "version {version} is what function {name:?} serves ($latest): deploy a newer one first, or delete the function"
        )));
    }
    let holding: Vec<String> = state
        .store
        .aliases(&ns, &name)
        .await?
        .into_iter()
        .filter(|a| a.spec.versions().contains(&version))
        .map(|a| a.name)
        .collect();
    if !holding.is_empty() {
        return Err(Error::Conflict(format!(
            "version {version} of function {name:?} is what alias {} points at: move or delete it first",
            holding.join(", ")
        )));
    }
    let key = FunctionKey::new(&ns, &name);
    state
        .versions
        .delete(&key, &stored, status.code_hash.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn no_version(ns: &str, name: &str, version: u64) -> Error {
    Error::NotFound(format!(
        "function {name:?} in namespace {ns:?} has no version {version} (or it is no longer kept)"
    ))
}

/// List a function's aliases, by name.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/aliases", operation_id = "list_aliases", tag = "versions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name")),
    responses((status = 200, body = List<Alias>), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_aliases(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<List<Alias>>> {
    load(&state, Kind::Function, &ns, &name).await?;
    let items = state
        .store
        .aliases(&ns, &name)
        .await?
        .into_iter()
        .map(|a| alias_api(&state, a))
        .collect();
    Ok(Json(List { items }))
}

/// Get one alias.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}/aliases/{alias}", operation_id = "get_alias", tag = "versions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"),
        ("alias" = String, Path, description = "Alias name")),
    responses((status = 200, body = Alias), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_alias(
    State(state): State<Arc<AppState>>,
    Path((ns, name, alias)): Path<(String, String, String)>,
) -> Result<Json<Alias>> {
    load(&state, Kind::Function, &ns, &name).await?;
    let record = find_alias(&state, &ns, &name, &alias).await?;
    Ok(Json(alias_api(&state, record)))
}

async fn find_alias(state: &AppState, ns: &str, name: &str, alias: &str) -> Result<AliasRecord> {
    validate_alias_name(alias).map_err(|e| Error::invalid("name", e))?;
    state
        .store
        .alias(ns, name, alias)
        .await?
        .ok_or_else(|| Error::NotFound(format!("function {name:?} in namespace {ns:?} has no alias {alias:?}")))
}

/// Create an alias or move it (the whole spec): `{"version": 7}`, or with a
/// canary `{"version": 7, "weights": {"8": 0.1}}`. Atomic: calls go to the
/// old target or the new one, never a mix of half of each. Rollback is
/// moving it back.
#[utoipa::path(put, path = "/v1/namespaces/{ns}/functions/{name}/aliases/{alias}", operation_id = "put_alias", tag = "versions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"),
        ("alias" = String, Path, description = "Alias name: a DNS label that starts with a letter, not `latest` (reserved: the plain URL calls the newest version)")),
    request_body = AliasSpec,
    responses((status = 200, body = Alias, description = "Moved"), (status = 201, body = Alias, description = "Created"),
        (status = 400, body = sless_api::ErrorBody), (status = 404, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn put_alias(
    State(state): State<Arc<AppState>>,
    Path((ns, name, alias)): Path<(String, String, String)>,
    JsonObject(body): JsonObject,
) -> Result<(StatusCode, Json<Alias>)> {
    load(&state, Kind::Function, &ns, &name).await?;
    validate_new_alias_name(&alias).map_err(|e| Error::invalid("name", e))?;
    write_alias(&state, &ns, &name, &alias, Value::Object(body), None).await
}

/// Change part of an alias (JSON merge patch of its spec: `{"weights": null}`
/// ends a canary).
#[utoipa::path(patch, path = "/v1/namespaces/{ns}/functions/{name}/aliases/{alias}", operation_id = "patch_alias", tag = "versions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"),
        ("alias" = String, Path, description = "Alias name")),
    request_body(content = Object, description = "Any subset of the alias's spec fields"),
    responses((status = 200, body = Alias), (status = 400, body = sless_api::ErrorBody), (status = 404, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn patch_alias(
    State(state): State<Arc<AppState>>,
    Path((ns, name, alias)): Path<(String, String, String)>,
    JsonObject(body): JsonObject,
) -> Result<(StatusCode, Json<Alias>)> {
    load(&state, Kind::Function, &ns, &name).await?;
    // Read in the turn it is written in: two patches at once each keep the
    // other's change.
    let turn = crate::quota::turn(&state, &ns).await?;
    let record = find_alias(&state, &ns, &name, &alias).await?;
    let mut spec = serde_json::to_value(&record.spec).map_err(Error::internal)?;
    merge_patch(&mut spec, Value::Object(body));
    let (_, answer) = write_alias(&state, &ns, &name, &alias, spec, Some(turn)).await?;
    Ok((StatusCode::OK, answer))
}

/// Aliases one function may have.
const MAX_ALIASES_PER_FUNCTION: usize = 100;

/// Checks an alias spec against the function's kept versions, stores it
/// and routes by it here, in the namespace's turn (`turn`, when the caller
/// holds it already).
async fn write_alias(
    state: &AppState,
    ns: &str,
    name: &str,
    alias: &str,
    mut body: Value,
    turn: Option<crate::quota::Turn>,
) -> Result<(StatusCode, Json<Alias>)> {
    if let Value::Object(fields) = &mut body {
        if let Some(given) = take_identity(fields, ns)? {
            if given != alias {
                return Err(Error::invalid(
                    "name",
                    format!("name in the body ({given:?}) does not match the alias in the path ({alias:?})"),
                ));
            }
        }
        fields.remove("function").map_or(Ok(()), |given| match given.as_str() {
            Some(f) if f == name => Ok(()),
            _ => Err(Error::invalid(
                "function",
                format!("function in the body ({given}) does not match the function in the path ({name:?})"),
            )),
        })?;
        fields.remove("url");
    }
    let spec: AliasSpec = from_value("alias", body)?;
    let other = spec
        .split()
        .map_err(|(field, message)| Error::invalid(field, message))?;
    // Every replica holds every alias in memory and reads them all again
    // whenever the store changes: a function has a bounded number. The
    // versions it names are looked up in the turn a version is deleted in.
    let _turn = match turn {
        Some(turn) => turn,
        None => crate::quota::turn(state, ns).await?,
    };
    for (field, version) in std::iter::once(("version", spec.version)).chain(other.map(|(v, _)| ("weights", v))) {
        if state.store.version(ns, name, version).await?.is_none() {
            return Err(Error::invalid(
                field,
                format!(
                    "function {name:?} has no version {version} (or it is no longer kept): see `sless versions {name}`"
                ),
            ));
        }
    }
    // Stored as given, with the weights' keys as plain numbers.
    let spec = AliasSpec {
        version: spec.version,
        weights: other
            .map(|(v, w)| (v.to_string(), w))
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
    };
    let record = AliasRecord {
        namespace: ns.to_string(),
        function: name.to_string(),
        name: alias.to_string(),
        spec,
        updated_at: crate::store::now(),
    };
    if state.store.alias(ns, name, alias).await?.is_none()
        && state.store.aliases(ns, name).await?.len() >= MAX_ALIASES_PER_FUNCTION
    {
        return Err(Error::invalid(
            "name",
            format!(
                "function {name:?} has {MAX_ALIASES_PER_FUNCTION} aliases already, the most it may; delete one first"
            ),
        ));
    }
    let created = state.store.put_alias(&record).await?;
    state
        .routes
        .set_alias(&FunctionKey::new(ns, name), alias, Split::of(&record.spec));
    tracing::info!(namespace = ns, function = name, alias, version = record.spec.version, weights = ?record.spec.weights, "alias set");
    if !created {
        prune_released(state, ns, name).await;
    }
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(alias_api(state, record))))
}

/// Delete an alias; the versions it pointed at stop serving once idle.
#[utoipa::path(delete, path = "/v1/namespaces/{ns}/functions/{name}/aliases/{alias}", operation_id = "delete_alias", tag = "versions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"),
        ("alias" = String, Path, description = "Alias name")),
    responses((status = 204), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_alias(
    State(state): State<Arc<AppState>>,
    Path((ns, name, alias)): Path<(String, String, String)>,
) -> Result<StatusCode> {
    load(&state, Kind::Function, &ns, &name).await?;
    validate_alias_name(&alias).map_err(|e| Error::invalid("name", e))?;
    if !state.store.delete_alias(&ns, &name, &alias).await? {
        return Err(Error::NotFound(format!(
            "function {name:?} in namespace {ns:?} has no alias {alias:?}"
        )));
    }
    state.routes.set_alias(&FunctionKey::new(&ns, &name), &alias, None);
    tracing::info!(namespace = %ns, function = %name, %alias, "alias deleted");
    prune_released(&state, &ns, &name).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes the versions of a function an alias no longer holds that its
/// next deploy would prune (past `SLESS_KEEP_VERSIONS`), now: the
/// namespace's storage quota counts every version kept, so deleting or
/// moving an alias gives its room back at once.
async fn prune_released(state: &AppState, ns: &str, name: &str) {
    let key = FunctionKey::new(ns, name);
    let pruned = async {
        let Some(record) = state.store.get(Kind::Function, ns, name).await? else {
            return Ok(());
        };
        let status: sless_api::FunctionStatus = serde_json::from_value(record.status).map_err(Error::internal)?;
        state
            .versions
            .prune(&key, status.version, status.code_hash.as_deref())
            .await
    };
    if let Err(e) = pruned.await {
        tracing::warn!(function = %key, error = %e, "pruning the versions an alias held failed");
    }
}
