//! What a `sless_trigger` change plans, without I/O: defaults (`enabled`,
//! a cron trigger's `timezone`) and the URL. (Which changes replace it is
//! in the attribute table, `state::fields`.)

use serde_json::Value as Json;
use tf_provider::value::Value;
use tf_provider::Diagnostics;

use super::state::{TriggerState, AMQP_FIELDS, CRON_FIELDS};
use crate::convert::{check_json_bytes, check_name, parse_json, to_u32};
use crate::diagnostics::error;

pub const TYPES: &[&str] = &["http", "cron", "amqp"];

/// The timezone the server stores for a cron trigger that names none.
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// Checks what can be checked of a configuration without the server (its
/// name and namespace are checked already).
pub fn validate(diags: &mut Diagnostics, config: &TriggerState) {
    check_name(diags, "function", &config.function, "function");
    match config
        .event
        .as_ref_option()
        .and_then(|event| parse_json(diags, event, "event"))
    {
        Some(Json::Null) => error(
            diags,
            "Invalid event",
            "event is JSON null, which the server keeps as no event: leave event unset instead.",
            Some("event"),
        ),
        Some(event) => check_json_bytes(
            diags,
            &event,
            "event",
            "a cron trigger's event",
            sless_api::MAX_CRON_EVENT_BYTES,
        ),
        None => {}
    }
    if let Some(n) = to_u32(diags, &config.prefetch, "prefetch") {
        if !(1..=1000).contains(&n) {
            error(
                diags,
                "Invalid prefetch",
                format!("prefetch must be between 1 and 1000, got {n}."),
                Some("prefetch"),
            );
        }
    }
    if let Some(n) = to_u32(diags, &config.retry_limit, "retry_limit") {
        if n > 100 {
            error(
                diags,
                "Invalid retry_limit",
                format!("retry_limit must be at most 100, got {n}."),
                Some("retry_limit"),
            );
        }
    }
    let Some(kind) = config.kind.as_ref_option() else {
        return;
    };
    let foreign: Vec<&'static str> = match kind.as_str() {
        "http" => CRON_FIELDS.iter().chain(AMQP_FIELDS).copied().collect(),
        "cron" => AMQP_FIELDS.to_vec(),
        "amqp" => CRON_FIELDS.to_vec(),
        other => {
            error(
                diags,
                "Unsupported trigger type",
                format!("type {other:?} is not one of {}.", TYPES.join(", ")),
                Some("type"),
            );
            return;
        }
    };
    for field in foreign.into_iter().filter(|field| config.has(field)) {
        error(
            diags,
            format!("{field} does not apply to a {kind} trigger"),
            format!("Remove {field}, or use a trigger type it belongs to."),
            Some(field),
        );
    }
    let required: &[&'static str] = match kind.as_str() {
        "cron" => &["schedule"],
        "amqp" => &["broker_url", "queue"],
        _ => &[],
    };
    for &field in required.iter().filter(|field| !config.has(field)) {
        error(
            diags,
            format!("A {kind} trigger needs {field}"),
            format!("Set {field} for this {kind} trigger."),
            Some(field),
        );
    }
}

/// Plans the defaults and the URL of a create (`prior` is `None`) or an
/// update.
pub fn plan(prior: Option<&TriggerState>, config: &TriggerState, planned: &mut TriggerState) {
    if config.enabled.is_null() {
        planned.enabled = Value::Value(true);
    }
    if config.timezone.is_null() {
        planned.timezone = match planned.kind.as_deref_option() {
            Some("cron") => Value::Value(DEFAULT_TIMEZONE.to_string()),
            Some(_) => Value::Null,
            None => Value::Unknown,
        };
    }
    let http = planned.kind.as_deref_option().map(|kind| kind == "http");
    let new_url = match prior {
        None => true,
        Some(prior) => prior.function != planned.function || prior.kind != planned.kind,
    };
    if new_url {
        planned.url = match http {
            Some(false) => Value::Null,
            _ => Value::Unknown,
        };
    }
}
