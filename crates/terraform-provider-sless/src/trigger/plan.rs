//! What a `sless_trigger` change plans, without I/O: defaults (`enabled`,
//! a cron trigger's `timezone`), the URL, and which changes replace it.

use tf_provider::value::Value;
use tf_provider::Diagnostics;

use super::state::{TriggerState, AMQP_FIELDS, CRON_FIELDS};
use crate::convert::{check_name, parse_json, resource_id, to_u32};
use crate::diagnostics::error;

/// Attributes whose change replaces the trigger (the API cannot change a
/// trigger's type in place).
pub const REPLACE: &[&str] = &["name", "namespace", "type"];

pub const TYPES: &[&str] = &["http", "cron", "amqp"];

/// The timezone the server stores for a cron trigger that names none.
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// Checks what can be checked of a configuration without the server.
pub fn validate(diags: &mut Diagnostics, config: &TriggerState) {
    check_name(diags, "trigger", &config.name, "name");
    check_name(diags, "namespace", &config.namespace, "namespace");
    check_name(diags, "function", &config.function, "function");
    if let Some(event) = config.event.as_ref_option() {
        parse_json(diags, event, "event");
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

/// The planned state of a create (`prior` is `None`) or an update, and the
/// attributes that force a replacement.
pub fn plan(
    prior: Option<&TriggerState>,
    config: &TriggerState,
    proposed: TriggerState,
    default_namespace: &Value<String>,
) -> (TriggerState, Vec<&'static str>) {
    let mut planned = proposed;
    if config.namespace.is_null() {
        planned.namespace = default_namespace.clone();
    }
    planned.id = resource_id(&planned.namespace, &planned.name);
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
    let replace = match prior {
        None => Vec::new(),
        Some(prior) => REPLACE
            .iter()
            .copied()
            .filter(|field| match *field {
                "name" => prior.name != planned.name,
                "namespace" => prior.namespace != planned.namespace,
                _ => prior.kind != planned.kind,
            })
            .collect(),
    };
    (planned, replace)
}
