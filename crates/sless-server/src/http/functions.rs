//! `/v1/namespaces/{ns}/functions`: create, read, update, delete and code upload.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{Map, Value};
use sless_api::{validate_name, Function, FunctionSpec, FunctionStatus, List};

use super::body::{check_name, from_value, merge_patch, take_identity, to_value, JsonObject, RawBody};
use super::resource::{self, load, not_found, to_api};
use super::serving;
use crate::blobs;
use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::{Kind, Record};
use sless_driver::FunctionKey;

fn checked_spec(state: &AppState, value: Value) -> Result<FunctionSpec> {
    let spec: FunctionSpec = from_value("function", value)?;
    spec.check_within(&state.config.spec_limits())
        .map_err(|(field, message)| Error::invalid(field, message))?;
    // An amqp destination's broker must be one the operator allows.
    let settings = spec.async_settings.iter();
    for (field, destination) in settings.flat_map(|a| {
        [
            ("async.on_failure.broker_url", &a.on_failure),
            ("async.on_success.broker_url", &a.on_success),
        ]
    }) {
        if let Some(url) = destination.as_ref().and_then(|d| d.broker_url.as_deref()) {
            state
                .triggers
                .brokers
                .check(url)
                .map_err(|e| Error::invalid(field, format!("{field}: {e}")))?;
        }
    }
    Ok(spec)
}

/// List the functions of a namespace.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions", operation_id = "list_functions", tag = "functions",
    params(("ns" = String, Path, description = "Namespace")),
    responses((status = 200, body = List<Function>), (status = 401, body = sless_api::ErrorBody), (status = 403, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>, Path(ns): Path<String>) -> Result<Json<List<Function>>> {
    let List { items } = resource::list(&state, Kind::Function, &ns).await?;
    Ok(Json(List {
        items: serving::with_reasons(&state, &ns, items).await?,
    }))
}

/// Create a function. It has no code until `PUT .../code`.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/functions", operation_id = "create_function", tag = "functions",
    params(("ns" = String, Path, description = "Namespace")),
    request_body = sless_api::FunctionCreate,
    responses((status = 201, body = Function), (status = 400, body = sless_api::ErrorBody), (status = 409, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    JsonObject(mut body): JsonObject,
) -> Result<(StatusCode, Json<Function>)> {
    validate_name("namespace", &ns)?;
    let name = take_identity(&mut body, &ns)?.ok_or_else(|| Error::invalid("name", "name is required"))?;
    check_name("name", "function", &name)?;
    let spec = checked_spec(&state, Value::Object(body))?;
    crate::secrets::check_refs(&*state.store, &ns, &spec).await?;
    let _turn = crate::quota::turn(&state, &ns).await?;
    crate::quota::check_function(&state, &ns, &name, &spec, true).await?;
    let status = FunctionStatus {
        message: "waiting for code: upload a zip with PUT .../code".into(),
        url: Some(format!("{}/fn/{ns}/{name}", state.config.external_url())),
        ..FunctionStatus::default()
    };
    let now = crate::store::now();
    let record = Record {
        namespace: ns,
        name,
        spec: to_value(&spec)?,
        status: to_value(&status)?,
        created_at: now,
        updated_at: now,
    };
    state.store.create(Kind::Function, &record).await?;
    tracing::info!(namespace = %record.namespace, function = %record.name, "function created");
    let function = serving::with_reason(&state, to_api(record)?).await?;
    Ok((StatusCode::CREATED, Json(function)))
}

/// Get one function with its status.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/functions/{name}", operation_id = "get_function", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name")),
    responses((status = 200, body = Function), (status = 404, body = sless_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Function>> {
    let function = to_api(load(&state, Kind::Function, &ns, &name).await?)?;
    Ok(Json(serving::with_reason(&state, function).await?))
}

/// Partially update a function (JSON merge patch of its spec; `null` resets a field to its default).
#[utoipa::path(patch, path = "/v1/namespaces/{ns}/functions/{name}", operation_id = "patch_function", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name")),
    request_body(content = Object, description = "Any subset of the function's spec fields"),
    responses((status = 200, body = Function), (status = 400, body = sless_api::ErrorBody), (status = 404, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn patch(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    JsonObject(mut body): JsonObject,
) -> Result<Json<Function>> {
    // Read and written in the namespace's turn: two patches at once each
    // keep the other's fields.
    let turn = crate::quota::turn(&state, &ns).await?;
    let mut record = load(&state, Kind::Function, &ns, &name).await?;
    if let Some(given) = take_identity(&mut body, &ns)? {
        if given != name {
            return Err(Error::invalid(
                "name",
                format!(
                    "name cannot be changed (path says {name:?}, body says {given:?}); create a new function instead"
                ),
            ));
        }
    }
    let old_runtime = record.spec.get("runtime").cloned();
    replace_destinations(&mut record.spec, &body);
    merge_patch(&mut record.spec, Value::Object(body));
    let spec = checked_spec(&state, record.spec.clone())?;
    if record.spec.get("runtime") != old_runtime.as_ref() {
        return Err(Error::invalid(
            "runtime",
            "runtime cannot be changed in place; delete and re-create the function",
        ));
    }
    crate::secrets::check_refs(&*state.store, &ns, &spec).await?;
    crate::quota::check_function(&state, &ns, &name, &spec, false).await?;
    record.spec = to_value(&spec)?;
    state
        .store
        .update_spec(Kind::Function, &ns, &name, &record.spec)
        .await?;
    // Stored: the next check counts it. Applying it (a rollout) may take a
    // while, and the namespace's other changes need not wait for that.
    drop(turn);
    state.deployer.apply_spec(&FunctionKey::new(&ns, &name)).await?;
    let function: Function = to_api(
        state
            .store
            .get(Kind::Function, &ns, &name)
            .await?
            .ok_or_else(|| not_found(Kind::Function, &ns, &name))?,
    )?;
    Ok(Json(serving::with_reason(&state, function).await?))
}

/// A destination given with its `type` replaces the one the spec holds, so
/// switching from a function to a queue leaves no `function` behind (a
/// merge would keep it, and the result names two kinds); one given without
/// a type is merged into the old one (a new queue, say).
fn replace_destinations(spec: &mut Value, patch: &Map<String, Value>) {
    let Some(given) = patch.get("async").and_then(Value::as_object) else {
        return;
    };
    let Some(settings) = spec.get_mut("async").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["on_failure", "on_success"] {
        if given
            .get(field)
            .and_then(|destination| destination.get("type"))
            .is_some()
        {
            settings.remove(field);
        }
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Also delete the triggers and jobs that name the function; without
    /// it (or `orphan`), a function they name is not deleted (409).
    #[serde(default)]
    cascade: bool,
    /// Delete the function and leave the triggers and jobs that name it as
    /// they are: they take no work until a function of that name exists
    /// again. For tools that delete or re-point them themselves (Terraform
    /// replacing a function keeps its triggers).
    #[serde(default)]
    orphan: bool,
}

/// The most triggers and jobs a refused delete names: a namespace may hold
/// hundreds, and the rest are in its lists.
const NAMED_AT_MOST: usize = 10;

/// The triggers and jobs that name a function, as a refused delete says
/// them: the first [`NAMED_AT_MOST`], then how many more.
fn naming_list(triggers: &[String], jobs: &[String]) -> String {
    let all = (triggers.iter().map(|t| format!("trigger {t:?}"))).chain(jobs.iter().map(|j| format!("job {j:?}")));
    let mut listed: Vec<String> = all.take(NAMED_AT_MOST).collect();
    let more = triggers.len() + jobs.len() - listed.len();
    if more > 0 {
        listed.push(format!("and {more} more (the namespace's triggers and jobs list them)"));
    }
    listed.join(", ")
}

/// Delete a function and its code archives. Triggers and jobs that name it
/// would fire against nothing: they make this a 409 that lists them, unless
/// `cascade=true` deletes them too or `orphan=true` leaves them be.
#[utoipa::path(delete, path = "/v1/namespaces/{ns}/functions/{name}", operation_id = "delete_function", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"), DeleteQuery),
    responses((status = 204), (status = 404, body = sless_api::ErrorBody),
        (status = 409, body = sless_api::ErrorBody, description = "Triggers or jobs name the function; the message lists them")),
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    query: std::result::Result<Query<DeleteQuery>, QueryRejection>,
) -> Result<StatusCode> {
    let Query(query) = query.map_err(|e| Error::BadRequest(format!("invalid query: {}", e.body_text())))?;
    if query.cascade && query.orphan {
        return Err(Error::BadRequest(
            "cascade and orphan exclude each other: delete what names the function, or leave it".into(),
        ));
    }
    validate_name("namespace", &ns)?;
    validate_name("function", &name)?;
    // Looked up, not read: a function whose record does not read back is deleted too.
    if let Ok(None) = state.store.get(Kind::Function, &ns, &name).await {
        return Err(not_found(Kind::Function, &ns, &name));
    }
    let Dependents { triggers, jobs } = match query.orphan {
        true => Dependents::default(),
        false => dependents(&state, &ns, &name).await?,
    };
    let named = !(triggers.is_empty() && jobs.is_empty());
    if named && !query.cascade {
        return Err(Error::Conflict(format!(
            "function {name:?} is still named by {}: delete them first, or delete with cascade=true (`sless rm --cascade {name}`) to remove them too",
            naming_list(&triggers, &jobs)
        )));
    }
    for trigger in &triggers {
        state.store.delete(Kind::Trigger, &ns, trigger).await?;
        state
            .triggers
            .changed(&ns, trigger, std::slice::from_ref(&name))
            .await?;
        tracing::info!(namespace = %ns, function = %name, %trigger, "trigger deleted with its function");
    }
    for job in &jobs {
        state.jobs.stop(&ns, job).await;
        state.store.delete(Kind::Job, &ns, job).await?;
        tracing::info!(namespace = %ns, function = %name, %job, "job deleted with its function");
    }
    if !state.store.delete(Kind::Function, &ns, &name).await? {
        return Err(not_found(Kind::Function, &ns, &name));
    }
    let built = state.store.versions(&ns, &name).await?;
    state.store.forget_versions(&ns, &name).await?;
    let key = FunctionKey::new(&ns, &name);
    state.deployer.remove(&key).await;
    state.deployer.discard_versions(&key, &built).await;
    // What every replica served of it means nothing for a function of the
    // same name made later.
    state.cluster.forget_everywhere(&key).await;
    state.metrics.forget(&ns, &name);
    remove_archives(&state, &ns, &name).await;
    tracing::info!(namespace = %ns, function = %name, "function deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// The triggers and jobs that name a function.
#[derive(Default)]
struct Dependents {
    triggers: Vec<String>,
    jobs: Vec<String>,
}

async fn dependents(state: &AppState, ns: &str, name: &str) -> Result<Dependents> {
    let naming = |records: Vec<Record>| -> Vec<String> {
        records
            .into_iter()
            .filter(|r| r.spec.get("function").and_then(Value::as_str) == Some(name))
            .map(|r| r.name)
            .collect()
    };
    Ok(Dependents {
        triggers: naming(state.store.list(Kind::Trigger, ns).await?),
        jobs: naming(state.store.list(Kind::Job, ns).await?),
    })
}

/// Best effort: a leftover archive wastes space but breaks nothing.
async fn remove_archives(state: &AppState, ns: &str, name: &str) {
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    let prefix = blobs::function_prefix(ns, name);
    let listed: Vec<_> = match state.blobs.list(Some(&prefix)).try_collect().await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, namespace = %ns, function = %name, "listing archives to delete failed");
            return;
        }
    };
    for meta in listed {
        if let Err(e) = state.blobs.delete(&meta.location).await {
            tracing::warn!(error = %e, path = %meta.location, "deleting archive failed");
        }
    }
}

/// Upload the function's code as a zip. The archive is checked against the
/// upload rules, stored under its sha256, and the function goes to `Building`.
#[utoipa::path(put, path = "/v1/namespaces/{ns}/functions/{name}/code", operation_id = "upload_code", tag = "functions",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name")),
    request_body(content = Vec<u8>, content_type = "application/zip"),
    responses((status = 202, body = Function), (status = 400, body = sless_api::ErrorBody, description = "An upload rule was broken; `entry` and `rule` say which"),
        (status = 404, body = sless_api::ErrorBody), (status = 413, body = sless_api::ErrorBody),
        (status = 429, body = sless_api::ErrorBody, description = "The namespace has as many uploads under way and waiting as it may")),
    security(("bearer" = [])))]
pub async fn upload_code(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Result<(StatusCode, Json<Function>)> {
    // A body is held whole until it is checked: a namespace reads a few at
    // a time, a few others waiting before their bytes are read (the body's
    // timeout starts with its reading), and more are refused.
    RawBody::within_declared(&request, &state)?;
    let _turn = state.uploads.enter(&ns).await.map_err(|full| Error::TooManyRequests {
        message: format!(
            "namespace {ns} has {} code uploads under way and {} waiting, the most it may; try again when one is done",
            state.uploads.most(),
            full.waiting
        ),
        retry_after: 5,
    })?;
    let RawBody(zip) = <RawBody as axum::extract::FromRequest<_>>::from_request(request, &state).await?;
    let mut record = load(&state, Kind::Function, &ns, &name).await?;
    let status = state.deployer.upload(&FunctionKey::new(&ns, &name), zip).await?;
    record.status = to_value(&status)?;
    let function = serving::with_reason(&state, to_api(record)?).await?;
    Ok((StatusCode::ACCEPTED, Json(function)))
}

#[cfg(test)]
mod tests {
    use super::naming_list;

    #[test]
    fn a_refused_delete_names_ten_of_what_names_the_function_and_counts_the_rest() {
        let triggers: Vec<String> = (0..400).map(|i| format!("t{i}")).collect();
        let said = naming_list(&triggers, &["backfill".to_string()]);
        assert!(said.starts_with(r#"trigger "t0", trigger "t1", "#), "{said}");
        assert!(said.contains(r#"trigger "t9", and 391 more"#), "{said}");
        assert!(!said.contains("t10") && !said.contains("backfill"), "{said}");
        let few = naming_list(&["web".to_string()], &["backfill".to_string()]);
        assert_eq!(few, r#"trigger "web", job "backfill""#);
    }
}
