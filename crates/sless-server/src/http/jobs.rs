//! `/v1/namespaces/{ns}/jobs`: one-off runs of a function with a JSON event.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;
use sless_api::{validate_name, Job, JobPhase, JobSpec, JobStatus, List};

use super::body::{check_name, from_value, merge_patch, take_identity, to_value, JsonObject};
use super::resource::{self, load, not_found, to_api};
use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::{Kind, Record};

/// The largest a job's `event` may be, as JSON: it is stored with the job
/// and read whenever the leader looks at the jobs (the Terraform provider
/// checks it too, before any call).
use sless_api::MAX_JOB_EVENT_BYTES;

async fn checked_spec(state: &AppState, ns: &str, value: Value) -> Result<JobSpec> {
    let spec: JobSpec = from_value("job", value)?;
    check_name("function", "function", &spec.function)?;
    if state.store.get(Kind::Function, ns, &spec.function).await?.is_none() {
        return Err(Error::invalid(
            "function",
            format!(
                "function {:?} does not exist in namespace {ns:?}; a job names a function of its own namespace",
                spec.function
            ),
        ));
    }
    let event_bytes = spec.event.to_string().len();
    if event_bytes > MAX_JOB_EVENT_BYTES {
        return Err(Error::invalid(
            "event",
            format!(
                "a job's event must be at most {MAX_JOB_EVENT_BYTES} bytes as JSON (an asynchronous call's bound, as Lambda's), got {event_bytes}; pass a reference (a key, a URL) to larger data"
            ),
        ));
    }
    if spec.wait_timeout_sec > 86_400 {
        return Err(Error::invalid(
            "wait_timeout_sec",
            format!("wait_timeout_sec must be at most 86400, got {}", spec.wait_timeout_sec),
        ));
    }
    Ok(spec)
}

/// List the jobs of a namespace.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/jobs", operation_id = "list_jobs", tag = "jobs",
    params(("ns" = String, Path, description = "Namespace")),
    responses((status = 200, body = List<Job>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>, Path(ns): Path<String>) -> Result<Json<List<Job>>> {
    Ok(Json(resource::list(&state, Kind::Job, &ns).await?))
}

/// Create a job. `run_id` 0 creates it without running (phase Skipped); above 0 runs it.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/jobs", operation_id = "create_job", tag = "jobs",
    params(("ns" = String, Path, description = "Namespace")), request_body = sless_api::JobCreate,
    responses((status = 201, body = Job), (status = 400, body = sless_api::ErrorBody), (status = 409, body = sless_api::ErrorBody),
        (status = 403, body = sless_api::ErrorBody, description = "The namespace holds as many jobs as its quota (SLESS_NS_MAX_JOBS) allows"),
        (status = 429, body = sless_api::ErrorBody, description = "The namespace runs as many jobs as its quota (SLESS_NS_MAX_JOB_RUNS) allows"),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    JsonObject(mut body): JsonObject,
) -> Result<(StatusCode, Json<Job>)> {
    validate_name("namespace", &ns)?;
    let name = take_identity(&mut body, &ns)?.ok_or_else(|| Error::invalid("name", "name is required"))?;
    check_name("name", "job", &name)?;
    let spec = checked_spec(&state, &ns, Value::Object(body)).await?;
    let _turn = crate::quota::turn(&state, &ns).await?;
    // A name taken already is the 409 below, whatever the quota.
    if state.store.get(Kind::Job, &ns, &name).await?.is_none() {
        crate::quota::check_job(&state, &ns).await?;
    }
    if spec.run_id > 0 {
        crate::quota::check_job_run(&state, &ns, &name).await?;
    }
    let status = JobStatus {
        phase: if spec.run_id == 0 {
            JobPhase::Skipped
        } else {
            JobPhase::Pending
        },
        run_id: spec.run_id,
        ..JobStatus::default()
    };
    let now = crate::store::now();
    let record = Record {
        spec: to_value(&spec)?,
        status: to_value(&status)?,
        namespace: ns,
        name,
        created_at: now,
        updated_at: now,
    };
    state.store.create(Kind::Job, &record).await?;
    // Runs happen on the leader; another replica's reconciler picks it up.
    if spec.run_id > 0 && state.cluster.is_leader() {
        state.jobs.run(&record.namespace, &record.name, spec.run_id).await;
    }
    Ok((StatusCode::CREATED, Json(to_api(record)?)))
}

/// Get one job and its latest run.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/jobs/{name}", operation_id = "get_job", tag = "jobs",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    responses((status = 200, body = Job), (status = 404, body = sless_api::ErrorBody)), security(("bearer" = [])))]
pub async fn get(State(state): State<Arc<AppState>>, Path((ns, name)): Path<(String, String)>) -> Result<Json<Job>> {
    let job = to_api(load(&state, Kind::Job, &ns, &name).await?)?;
    Ok(Json(crate::jobs::with_result(&*state.store, job).await?))
}

/// Change a job; raising `run_id` above the last run starts a new run.
#[utoipa::path(patch, path = "/v1/namespaces/{ns}/jobs/{name}", operation_id = "patch_job", tag = "jobs",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    request_body(content = Object, description = "Any subset of the job's spec fields"),
    responses((status = 200, body = Job), (status = 400, body = sless_api::ErrorBody), (status = 404, body = sless_api::ErrorBody),
        (status = 429, body = sless_api::ErrorBody, description = "The namespace runs as many jobs as its quota (SLESS_NS_MAX_JOB_RUNS) allows"),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn patch(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    JsonObject(mut body): JsonObject,
) -> Result<Json<Job>> {
    // Read in the namespace's turn: two raises at once are one after the
    // other, so the lower one is refused, not written over the higher.
    let _turn = crate::quota::turn(&state, &ns).await?;
    let record = load(&state, Kind::Job, &ns, &name).await?;
    if let Some(given) = take_identity(&mut body, &ns)? {
        if given != name {
            return Err(Error::invalid(
                "name",
                format!("name cannot be changed (path says {name:?}, body says {given:?})"),
            ));
        }
    }
    let old: JobSpec = serde_json::from_value(record.spec.clone()).map_err(Error::internal)?;
    let mut merged = record.spec.clone();
    merge_patch(&mut merged, Value::Object(body));
    let spec = checked_spec(&state, &ns, merged).await?;
    if spec.run_id > old.run_id {
        crate::quota::check_job_run(&state, &ns, &name).await?;
    }
    if spec.run_id < old.run_id {
        return Err(Error::invalid(
            "run_id",
            format!(
                "run_id can only go up (it is {}, got {}); raise it to run the job again",
                old.run_id, spec.run_id
            ),
        ));
    }
    state
        .store
        .update_spec(Kind::Job, &ns, &name, &to_value(&spec)?)
        .await?;
    if spec.run_id > old.run_id {
        let pending = JobStatus {
            phase: JobPhase::Pending,
            run_id: spec.run_id,
            ..JobStatus::default()
        };
        state
            .store
            .update_status(Kind::Job, &ns, &name, &to_value(&pending)?)
            .await?;
        if state.cluster.is_leader() {
            state.jobs.run(&ns, &name, spec.run_id).await;
        }
    }
    let record = state
        .store
        .get(Kind::Job, &ns, &name)
        .await?
        .ok_or_else(|| not_found(Kind::Job, &ns, &name))?;
    Ok(Json(to_api(record)?))
}

/// Delete a job; a running one is stopped.
#[utoipa::path(delete, path = "/v1/namespaces/{ns}/jobs/{name}", operation_id = "delete_job", tag = "jobs",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Job name")),
    responses((status = 204), (status = 404, body = sless_api::ErrorBody)), security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<StatusCode> {
    // Not loaded first: a job whose record does not read back is deleted too.
    validate_name("namespace", &ns)?;
    validate_name("job", &name)?;
    state.jobs.stop(&ns, &name).await;
    if !state.store.delete(Kind::Job, &ns, &name).await? {
        return Err(not_found(Kind::Job, &ns, &name));
    }
    Ok(StatusCode::NO_CONTENT)
}
