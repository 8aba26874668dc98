//! `sless_job`'s attributes: the state struct, its attribute table, and the
//! mapping to and from the API's `Job`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use sless_api::{Job, JobPhase};
use tf_provider::schema::AttributeType;
use tf_provider::value::Value;
use tf_provider::Diagnostics;

use crate::convert::{json_attribute, parse_json, resource_id, to_u32, to_u64};
use crate::number::Number;
use crate::resource::fields::{replaces, reported, updates, Field};
use crate::schema::{defaulted, required};

/// A `sless_job` as Terraform holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobState {
    pub id: Value<String>,
    pub name: Value<String>,
    pub namespace: Value<String>,
    pub function: Value<String>,
    pub event: Value<String>,
    pub run_id: Value<Number>,
    pub wait_timeout_sec: Value<Number>,
    pub phase: Value<String>,
    pub result: Value<String>,
    pub error: Value<String>,
}

/// Every attribute but the identity, and what a change to it does.
pub fn fields() -> Vec<Field> {
    let string = || AttributeType::String;
    let number = || AttributeType::Number;
    vec![
        updates("function", required(string(), "Name of a function of the same namespace.")),
        updates("event", defaulted(string(), "JSON event of the handler, e.g. jsonencode({ name = \"you\" }) (default {}). Used by the next run.")),
        replaces("run_id", defaulted(number(), "0 creates the job without running it (phase Skipped). Changing it replaces the job, which runs it again.")),
        updates("wait_timeout_sec", defaulted(number(), "Seconds a run may wait for the function to have a ready version (default 300).")),
        reported("phase", string(), "Skipped, Pending, Running, Succeeded or Failed."),
        reported("result", string(), "The handler's return value, as JSON."),
        reported("error", string(), "Why the run failed."),
    ]
}

/// The spec fields that are known and set, as the API's JSON.
pub fn spec_json(diags: &mut Diagnostics, state: &JobState) -> Json {
    let mut spec = Map::new();
    if let Some(function) = state.function.as_ref_option() {
        spec.insert("function".into(), json!(function));
    }
    if let Some(event) = state.event.as_ref_option().and_then(|e| parse_json(diags, e, "event")) {
        spec.insert("event".into(), event);
    }
    if let Some(n) = to_u64(diags, &state.run_id, "run_id") {
        spec.insert("run_id".into(), json!(n));
    }
    if let Some(n) = to_u32(diags, &state.wait_timeout_sec, "wait_timeout_sec") {
        spec.insert("wait_timeout_sec".into(), json!(n));
    }
    Json::Object(spec)
}

pub fn phase_name(phase: JobPhase) -> String {
    match phase {
        JobPhase::Skipped => "Skipped",
        JobPhase::Pending => "Pending",
        JobPhase::Running => "Running",
        JobPhase::Succeeded => "Succeeded",
        JobPhase::Failed => "Failed",
    }
    .to_string()
}

/// The state of a job as the server reports it; `event` keeps the
/// practitioner's formatting of `previous` when it means the same JSON.
pub fn from_api(job: &Job, previous: &JobState) -> JobState {
    let namespace = Value::Value(job.namespace.clone());
    let name = Value::Value(job.name.clone());
    JobState {
        id: resource_id(&namespace, &name),
        name,
        namespace,
        function: Value::Value(job.spec.function.clone()),
        event: json_attribute(&previous.event, Some(&job.spec.event)),
        run_id: Value::Value(job.spec.run_id.into()),
        wait_timeout_sec: Value::Value(job.spec.wait_timeout_sec.into()),
        phase: Value::Value(phase_name(job.status.phase)),
        result: job.status.result.as_ref().map(Json::to_string).into(),
        error: job.status.error.clone().into(),
    }
}
