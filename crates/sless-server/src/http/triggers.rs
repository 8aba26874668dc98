//! `/v1/namespaces/{ns}/triggers`: what fires a function besides a direct call.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;
use sless_api::{validate_name, List, Trigger, TriggerSpec, TriggerType, MAX_BROKER_URL_CHARS};

use super::body::{check_name, from_value, merge_patch, take_identity, to_value, JsonObject};
use super::resource::{self, load, not_found, to_api};
use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::{Kind, Record};

/// The largest a cron trigger's `event` may be, as JSON: the leader reads
/// every trigger of every namespace twice a second to see which are due,
/// so a namespace's 400 triggers of 1 MiB each cost it (and every other
/// tenant's schedules) that much every tick. EventBridge Scheduler takes
/// 8 KiB of input; this is twice that. (The Terraform provider checks it
/// too, before any call.)
pub use sless_api::MAX_CRON_EVENT_BYTES;

/// The longest a cron schedule may be.
const MAX_SCHEDULE_CHARS: usize = 1024;

/// Checks a spec against its type's rules and fills defaults.
async fn checked_spec(state: &AppState, ns: &str, value: Value) -> Result<TriggerSpec> {
    let mut spec: TriggerSpec = from_value("trigger", value)?;
    check_name("function", "function", &spec.function)?;
    if state.store.get(Kind::Function, ns, &spec.function).await?.is_none() {
        return Err(Error::invalid(
            "function",
            format!(
                "function {:?} does not exist in namespace {ns:?}; a trigger names a function of its own namespace",
                spec.function
            ),
        ));
    }
    let cron_fields = [
        ("schedule", spec.schedule.is_some()),
        ("timezone", spec.timezone.is_some()),
        ("event", spec.event.is_some()),
    ];
    let amqp_fields = [
        ("broker_url", spec.broker_url.is_some()),
        ("queue", spec.queue.is_some()),
        ("prefetch", spec.prefetch.is_some()),
        ("retry_limit", spec.retry_limit.is_some()),
        ("dead_letter_queue", spec.dead_letter_queue.is_some()),
    ];
    let foreign: Vec<&str> = match spec.kind {
        TriggerType::Http => cron_fields
            .iter()
            .chain(amqp_fields.iter())
            .filter(|f| f.1)
            .map(|f| f.0)
            .collect(),
        TriggerType::Cron => amqp_fields.iter().filter(|f| f.1).map(|f| f.0).collect(),
        TriggerType::Amqp => cron_fields.iter().filter(|f| f.1).map(|f| f.0).collect(),
    };
    if let Some(field) = foreign.first() {
        return Err(Error::invalid(
            *field,
            format!("{field} does not apply to a trigger of type {}", spec.kind.as_str()),
        ));
    }
    match spec.kind {
        TriggerType::Http => {}
        TriggerType::Cron => {
            let schedule = spec
                .schedule
                .as_deref()
                .ok_or_else(|| Error::invalid("schedule", "schedule is required for a cron trigger"))?;
            // Lists of values parse at any length; the loop reads them all.
            if schedule.len() > MAX_SCHEDULE_CHARS {
                return Err(Error::invalid(
                    "schedule",
                    format!(
                        "schedule must be at most {MAX_SCHEDULE_CHARS} characters, got {}",
                        schedule.len()
                    ),
                ));
            }
            let timezone = spec.timezone.get_or_insert_with(|| "UTC".into());
            crate::triggers::schedule::checked(schedule, timezone)
                .await
                .map_err(|e| Error::invalid(e.field, e.message))?;
            let event_bytes = spec.event.as_ref().map_or(0, |event| event.to_string().len());
            if event_bytes > MAX_CRON_EVENT_BYTES {
                return Err(Error::invalid(
                    "event",
                    format!(
                        "a cron trigger's event must be at most {MAX_CRON_EVENT_BYTES} bytes as JSON, got {event_bytes}: every trigger is read twice a second to see which are due; pass a reference (a key, a URL) to larger data"
                    ),
                ));
            }
        }
        TriggerType::Amqp => {
            let url = spec
                .broker_url
                .as_deref()
                .ok_or_else(|| Error::invalid("broker_url", "broker_url is required for an amqp trigger"))?;
            if url.len() > MAX_BROKER_URL_CHARS {
                return Err(Error::invalid(
                    "broker_url",
                    format!(
                        "broker_url must be at most {MAX_BROKER_URL_CHARS} characters, got {}",
                        url.len()
                    ),
                ));
            }
            if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
                return Err(Error::invalid(
                    "broker_url",
                    format!("broker_url {url:?} must start with amqp:// or amqps://"),
                ));
            }
            state
                .triggers
                .brokers
                .check(url)
                .map_err(|e| Error::invalid("broker_url", format!("broker_url: {e}")))?;
            let Some(queue) = spec.queue.as_deref() else {
                return Err(Error::invalid("queue", "queue is required for an amqp trigger"));
            };
            sless_api::check_queue_name("queue", queue).map_err(|e| Error::invalid("queue", e))?;
            if let Some(dead) = spec.dead_letter_queue.as_deref() {
                sless_api::check_queue_name("dead_letter_queue", dead)
                    .map_err(|e| Error::invalid("dead_letter_queue", e))?;
                // A failure would go back where it came from, and be tried forever.
                if dead == queue {
                    return Err(Error::invalid(
                        "dead_letter_queue",
                        format!("dead_letter_queue {dead:?} is the trigger's own queue; name another queue, or leave it out for {:?}", format!("{queue}.dead")),
                    ));
                }
            }
            if let Some(p) = spec.prefetch {
                if !(1..=1000).contains(&p) {
                    return Err(Error::invalid(
                        "prefetch",
                        format!("prefetch must be between 1 and 1000, got {p}"),
                    ));
                }
            }
            if let Some(r) = spec.retry_limit {
                if r > 100 {
                    return Err(Error::invalid(
                        "retry_limit",
                        format!("retry_limit must be at most 100, got {r}"),
                    ));
                }
            }
        }
    }
    Ok(spec)
}

/// List the triggers of a namespace.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/triggers", operation_id = "list_triggers", tag = "triggers",
    params(("ns" = String, Path, description = "Namespace")),
    responses((status = 200, body = List<Trigger>)), security(("bearer" = [])))]
pub async fn list(State(state): State<Arc<AppState>>, Path(ns): Path<String>) -> Result<Json<List<Trigger>>> {
    let List { items } = resource::list(&state, Kind::Trigger, &ns).await?;
    Ok(Json(List {
        items: items.into_iter().map(shown).collect(),
    }))
}

/// A trigger as the API shows it: `fired` only where it counts something
/// (cron ticks; records stored before that rule carry a 0 for every type).
fn shown(mut trigger: Trigger) -> Trigger {
    if trigger.spec.kind != TriggerType::Cron {
        trigger.status.fired = None;
    }
    trigger
}

/// A stored trigger as the API shows it.
fn to_shown(record: Record) -> Result<Trigger> {
    to_api(record).map(shown)
}

/// Create a trigger for a function of the same namespace.
#[utoipa::path(post, path = "/v1/namespaces/{ns}/triggers", operation_id = "create_trigger", tag = "triggers",
    params(("ns" = String, Path, description = "Namespace")), request_body = sless_api::TriggerCreate,
    responses((status = 201, body = Trigger), (status = 400, body = sless_api::ErrorBody), (status = 409, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    Path(ns): Path<String>,
    JsonObject(mut body): JsonObject,
) -> Result<(StatusCode, Json<Trigger>)> {
    validate_name("namespace", &ns)?;
    let name = take_identity(&mut body, &ns)?.ok_or_else(|| Error::invalid("name", "name is required"))?;
    check_name("name", "trigger", &name)?;
    let spec = checked_spec(&state, &ns, Value::Object(body)).await?;
    let turn = crate::quota::turn(&state, &ns).await?;
    crate::quota::check_trigger(&state, &ns).await?;
    let now = crate::store::now();
    let record = Record {
        status: crate::triggers::initial_status(&spec, &ns, &state.config.external_url()),
        spec: to_value(&spec)?,
        namespace: ns,
        name,
        created_at: now,
        updated_at: now,
    };
    state.store.create(Kind::Trigger, &record).await?;
    drop(turn);
    state
        .triggers
        .changed(&record.namespace, &record.name, std::slice::from_ref(&spec.function))
        .await?;
    tracing::info!(namespace = %record.namespace, trigger = %record.name, kind = spec.kind.as_str(), "trigger created");
    Ok((StatusCode::CREATED, Json(to_shown(record)?)))
}

/// Get one trigger.
#[utoipa::path(get, path = "/v1/namespaces/{ns}/triggers/{name}", operation_id = "get_trigger", tag = "triggers",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Trigger name")),
    responses((status = 200, body = Trigger), (status = 404, body = sless_api::ErrorBody)), security(("bearer" = [])))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Trigger>> {
    Ok(Json(to_shown(load(&state, Kind::Trigger, &ns, &name).await?)?))
}

/// Change a trigger in place (e.g. `{"enabled": false}`); its type cannot change.
#[utoipa::path(patch, path = "/v1/namespaces/{ns}/triggers/{name}", operation_id = "patch_trigger", tag = "triggers",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Trigger name")),
    request_body(content = Object, description = "Any subset of the trigger's spec fields"),
    responses((status = 200, body = Trigger), (status = 400, body = sless_api::ErrorBody), (status = 404, body = sless_api::ErrorBody),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::quota_turn_refused())),
    security(("bearer" = [])))]
pub async fn patch(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
    JsonObject(mut body): JsonObject,
) -> Result<Json<Trigger>> {
    // Read and written in the namespace's turn: two patches at once each
    // keep the other's fields.
    let turn = crate::quota::turn(&state, &ns).await?;
    let record = load(&state, Kind::Trigger, &ns, &name).await?;
    if let Some(given) = take_identity(&mut body, &ns)? {
        if given != name {
            return Err(Error::invalid(
                "name",
                format!("name cannot be changed (path says {name:?}, body says {given:?})"),
            ));
        }
    }
    let old = crate::triggers::spec_of(&record)
        .ok_or_else(|| crate::store::unreadable(Kind::Trigger, &ns, &name, "its spec does not read back"))?;
    let mut merged = record.spec.clone();
    merge_patch(&mut merged, Value::Object(body));
    if merged.get("type") != record.spec.get("type") {
        return Err(Error::invalid(
            "type",
            format!(
                "type cannot be changed in place (it is {}); delete and re-create the trigger",
                old.kind.as_str()
            ),
        ));
    }
    let spec = checked_spec(&state, &ns, merged).await?;
    let spec_value = to_value(&spec)?;
    state.store.update_spec(Kind::Trigger, &ns, &name, &spec_value).await?;
    let mut record = state
        .store
        .get(Kind::Trigger, &ns, &name)
        .await?
        .ok_or_else(|| not_found(Kind::Trigger, &ns, &name))?;
    if spec.kind == TriggerType::Http && spec.function != old.function {
        let status = crate::triggers::initial_status(&spec, &ns, &state.config.external_url());
        state.store.update_status(Kind::Trigger, &ns, &name, &status).await?;
        record.status = status;
    }
    drop(turn);
    state
        .triggers
        .changed(&ns, &name, &[old.function, spec.function.clone()])
        .await?;
    Ok(Json(to_shown(record)?))
}

/// Delete a trigger.
#[utoipa::path(delete, path = "/v1/namespaces/{ns}/triggers/{name}", operation_id = "delete_trigger", tag = "triggers",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Trigger name")),
    responses((status = 204), (status = 404, body = sless_api::ErrorBody)), security(("bearer" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path((ns, name)): Path<(String, String)>,
) -> Result<StatusCode> {
    validate_name("namespace", &ns)?;
    validate_name("trigger", &name)?;
    // A trigger that does not read back can be deleted too: it named no
    // function this server ran it for.
    let function = match state.store.get(Kind::Trigger, &ns, &name).await {
        Ok(record) => record.as_ref().and_then(crate::triggers::spec_of).map(|s| s.function),
        Err(e) => {
            tracing::warn!(namespace = %ns, trigger = %name, error = %e, "deleting a trigger that cannot be read");
            None
        }
    };
    if !state.store.delete(Kind::Trigger, &ns, &name).await? {
        return Err(not_found(Kind::Trigger, &ns, &name));
    }
    let functions: Vec<String> = function.into_iter().collect();
    state.triggers.changed(&ns, &name, &functions).await?;
    Ok(StatusCode::NO_CONTENT)
}
