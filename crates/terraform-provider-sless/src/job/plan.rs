//! What a `sless_job` change plans, without I/O: defaults and the run's
//! outcome (unknown until it ran, `Skipped` for run_id 0). (A new run_id
//! replaces the job, and so runs it again: see `state::fields`.)

use tf_provider::value::Value;
use tf_provider::Diagnostics;

use super::state::JobState;
use crate::convert::{check_json_bytes, check_name, parse_json, to_u32, to_u64};
use crate::diagnostics::error;
use crate::number::Number;

/// Longest `wait_timeout_sec` the server takes.
pub const MAX_WAIT_TIMEOUT_SEC: u32 = 86_400;

/// The server's defaults.
pub const DEFAULT_EVENT: &str = "{}";
pub const DEFAULT_WAIT_TIMEOUT_SEC: u32 = 300;

/// Checks what can be checked of a configuration without the server (its
/// name and namespace are checked already).
pub fn validate(diags: &mut Diagnostics, config: &JobState) {
    check_name(diags, "function", &config.function, "function");
    if let Some(event) = config
        .event
        .as_ref_option()
        .and_then(|event| parse_json(diags, event, "event"))
    {
        check_json_bytes(diags, &event, "event", "a job's event", sless_api::MAX_JOB_EVENT_BYTES);
    }
    to_u64(diags, &config.run_id, "run_id");
    if let Some(n) = to_u32(diags, &config.wait_timeout_sec, "wait_timeout_sec") {
        if n > MAX_WAIT_TIMEOUT_SEC {
            error(
                diags,
                "Invalid wait_timeout_sec",
                format!("wait_timeout_sec must be at most {MAX_WAIT_TIMEOUT_SEC}, got {n}."),
                Some("wait_timeout_sec"),
            );
        }
    }
}

/// Plans the defaults and the run's outcome of a create (`prior` is `None`)
/// or an update.
pub fn plan(prior: Option<&JobState>, config: &JobState, planned: &mut JobState) {
    if config.event.is_null() {
        planned.event = Value::Value(DEFAULT_EVENT.to_string());
    }
    if config.run_id.is_null() {
        planned.run_id = Value::Value(Number::Whole(0));
    }
    if config.wait_timeout_sec.is_null() {
        planned.wait_timeout_sec = Value::Value(DEFAULT_WAIT_TIMEOUT_SEC.into());
    }
    if prior.is_none() {
        (planned.phase, planned.result, planned.error) = match planned.run_id {
            Value::Value(Number::Whole(0)) => (Value::Value("Skipped".to_string()), Value::Null, Value::Null),
            _ => (Value::Unknown, Value::Unknown, Value::Unknown),
        };
    }
}
