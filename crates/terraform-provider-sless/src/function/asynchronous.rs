//! `sless_function`'s `async` block: attributes for retries,
//! maximum event age and the on-failure and on-success destinations, their
//! schema, their API JSON and the server's defaults a plan fills in.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use sless_api::{AsyncSettings, Destination, DestinationType};
use tf_provider::schema::{Attribute, AttributeType, Block, Description, NestedBlock};
use tf_provider::value::{self, Value};
use tf_provider::{AttributePath, Diagnostics};

use crate::convert::whole_at;
use crate::diagnostics::error_at;
use crate::number::Number;
use crate::schema::{defaulted, optional, required, SCHEMA_VERSION};

/// `async { ... }` as Terraform holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AsyncState {
    pub retry_limit: Value<Number>,
    pub max_event_age_sec: Value<Number>,
    #[serde(with = "value::serde_as_vec")]
    pub on_failure: Value<DestinationState>,
    #[serde(with = "value::serde_as_vec")]
    pub on_success: Value<DestinationState>,
}

/// `on_failure { type = "function", function = "dlq" }` or
/// `{ type = "amqp", broker_url = "...", queue = "..." }`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DestinationState {
    #[serde(rename = "type")]
    pub kind: Value<String>,
    pub function: Value<String>,
    pub broker_url: Value<String>,
    pub queue: Value<String>,
}

/// The `async { ... }` block: retries, maximum age and the two destination
/// blocks.
pub fn block() -> Block {
    let destination = |when: &str| {
        let string = || AttributeType::String;
        NestedBlock::Optional(Block {
            version: SCHEMA_VERSION,
            attributes: HashMap::from([
                ("type".to_string(), required(string(), "function or amqp.")),
                (
                    "function".to_string(),
                    optional(string(), "function: a function of the same namespace."),
                ),
                (
                    "broker_url".to_string(),
                    optional(string(), "amqp: the broker (on the server's SLESS_AMQP_ALLOWED_HOSTS)."),
                ),
                (
                    "queue".to_string(),
                    optional(string(), "amqp: the queue (declared durable)."),
                ),
            ]),
            blocks: HashMap::new(),
            description: Description::plain(format!("Where the record of an event goes {when}.")),
            deprecated: false,
        })
    };
    Block {
        version: SCHEMA_VERSION,
        attributes: HashMap::<String, Attribute>::from([
            (
                "retry_limit".to_string(),
                defaulted(
                    AttributeType::Number,
                    "Retries after a failed attempt, 0-10 (default 2).",
                ),
            ),
            (
                "max_event_age_sec".to_string(),
                defaulted(
                    AttributeType::Number,
                    "Seconds after which an undelivered event fails, 60-21600 (default 21600).",
                ),
            ),
        ]),
        blocks: HashMap::from([
            (
                "on_failure".to_string(),
                destination("when its retries ran out or it grew too old"),
            ),
            ("on_success".to_string(), destination("once it was delivered")),
        ]),
        description: Description::plain(
            "Delivery of asynchronous calls (X-Sless-Invocation-Type: Event): retry_limit, max_event_age_sec, on_failure and on_success destinations.",
        ),
        deprecated: false,
    }
}

/// The destination types the server knows.
pub const DESTINATION_TYPES: &[&str] = &["function", "amqp"];

/// Checks the numbers and destination types of an `async` block, each
/// error on its attribute inside the block. (Ranges and what each
/// destination type needs are the server's checks, run by the function's
/// validate once everything is known.)
pub fn validate(diags: &mut Diagnostics, state: &Value<AsyncState>) {
    let Some(a) = state.as_ref_option() else { return };
    let block = AttributePath::new("async").index(0);
    for (name, value) in [
        ("retry_limit", &a.retry_limit),
        ("max_event_age_sec", &a.max_event_age_sec),
    ] {
        let path = block.clone().attribute(name);
        whole_at(diags, value, &format!("async.{name}"), path, u32::MAX);
    }
    for (name, destination) in [("on_failure", &a.on_failure), ("on_success", &a.on_success)] {
        let Some(kind) = destination.as_ref_option().and_then(|d| d.kind.as_ref_option()) else {
            continue;
        };
        if !DESTINATION_TYPES.contains(&kind.as_str()) {
            error_at(
                diags,
                format!("Invalid async.{name}.type"),
                format!(
                    "async.{name}.type {kind:?} is not one of {}.",
                    DESTINATION_TYPES.join(", ")
                ),
                block.clone().attribute(name).index(0).attribute("type"),
            );
        }
    }
}

/// Whether every value inside is known (so the spec can be checked).
pub fn is_known(state: &Value<AsyncState>) -> bool {
    match state {
        Value::Unknown => false,
        Value::Null => true,
        Value::Value(a) => {
            let destination_known = |d: &Value<DestinationState>| match d {
                Value::Unknown => false,
                Value::Null => true,
                Value::Value(d) => [&d.kind, &d.function, &d.broker_url, &d.queue]
                    .iter()
                    .all(|v| !v.is_unknown()),
            };
            !a.retry_limit.is_unknown()
                && !a.max_event_age_sec.is_unknown()
                && destination_known(&a.on_failure)
                && destination_known(&a.on_success)
        }
    }
}

/// The known values as the API's `async` JSON (`None` when unset).
pub fn to_json(state: &Value<AsyncState>) -> Option<Json> {
    let a = state.as_ref_option()?;
    let mut out = Map::new();
    for (name, value) in [
        ("retry_limit", &a.retry_limit),
        ("max_event_age_sec", &a.max_event_age_sec),
    ] {
        if let Some(n) = value.as_ref_option() {
            out.insert(name.into(), json!(n));
        }
    }
    for (name, destination) in [("on_failure", &a.on_failure), ("on_success", &a.on_success)] {
        if let Some(d) = destination.as_ref_option() {
            let mut fields = Map::new();
            for (key, value) in [
                ("type", &d.kind),
                ("function", &d.function),
                ("broker_url", &d.broker_url),
                ("queue", &d.queue),
            ] {
                if let Some(text) = value.as_ref_option() {
                    fields.insert(key.into(), json!(text));
                }
            }
            out.insert(name.into(), Json::Object(fields));
        }
    }
    Some(Json::Object(out))
}

/// The state of the server's settings.
pub fn from_api(settings: &Option<AsyncSettings>) -> Value<AsyncState> {
    let Some(settings) = settings else { return Value::Null };
    let destination = |d: &Option<Destination>| match d {
        None => Value::Null,
        Some(d) => Value::Value(DestinationState {
            kind: Value::Value(
                match d.kind {
                    DestinationType::Function => "function",
                    DestinationType::Amqp => "amqp",
                }
                .to_string(),
            ),
            function: d.function.clone().into(),
            broker_url: d.broker_url.clone().into(),
            queue: d.queue.clone().into(),
        }),
    };
    Value::Value(AsyncState {
        retry_limit: Value::Value(settings.retry_limit.into()),
        max_event_age_sec: Value::Value(settings.max_event_age_sec.into()),
        on_failure: destination(&settings.on_failure),
        on_success: destination(&settings.on_success),
    })
}

/// Fills the server's defaults into a planned `async` that leaves them unset.
pub fn plan_defaults(planned: &mut Value<AsyncState>) {
    if let Value::Value(a) = planned {
        let defaults = AsyncSettings::default();
        if a.retry_limit.is_null() {
            a.retry_limit = Value::Value(defaults.retry_limit.into());
        }
        if a.max_event_age_sec.is_null() {
            a.max_event_age_sec = Value::Value(defaults.max_event_age_sec.into());
        }
    }
}
