//! `sless_trigger`'s attributes: the state struct, its attribute table, and
//! the mapping to and from the API's `Trigger`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use sless_api::Trigger;
use tf_provider::schema::AttributeType;
use tf_provider::value::Value;
use tf_provider::Diagnostics;

use crate::convert::{json_attribute, parse_json, resource_id, to_u32};
use crate::number::Number;
use crate::resource::fields::{replaces, reported, updates, Field};
use crate::schema::{defaulted, optional, required, sensitive};

/// Settings of cron triggers only.
pub const CRON_FIELDS: &[&str] = &["schedule", "timezone", "event"];
/// Settings of amqp triggers only.
pub const AMQP_FIELDS: &[&str] = &["broker_url", "queue", "prefetch", "retry_limit", "dead_letter_queue"];

/// A `sless_trigger` as Terraform holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TriggerState {
    pub id: Value<String>,
    pub name: Value<String>,
    pub namespace: Value<String>,
    pub function: Value<String>,
    #[serde(rename = "type")]
    pub kind: Value<String>,
    pub enabled: Value<bool>,
    pub schedule: Value<String>,
    pub timezone: Value<String>,
    pub event: Value<String>,
    pub broker_url: Value<String>,
    pub queue: Value<String>,
    pub prefetch: Value<Number>,
    pub retry_limit: Value<Number>,
    pub dead_letter_queue: Value<String>,
    pub url: Value<String>,
}

impl TriggerState {
    /// Whether the type-specific setting `field` is set (or unknown).
    pub fn has(&self, field: &str) -> bool {
        let set = |v: &Value<String>| !v.is_null();
        match field {
            "schedule" => set(&self.schedule),
            "timezone" => set(&self.timezone),
            "event" => set(&self.event),
            "broker_url" => set(&self.broker_url),
            "queue" => set(&self.queue),
            "prefetch" => !self.prefetch.is_null(),
            "retry_limit" => !self.retry_limit.is_null(),
            "dead_letter_queue" => set(&self.dead_letter_queue),
            other => unreachable!("{other} is not a type-specific trigger setting"),
        }
    }
}

/// Every attribute but the identity, and what a change to it does.
pub fn fields() -> Vec<Field> {
    let string = || AttributeType::String;
    let number = || AttributeType::Number;
    vec![
        updates(
            "function",
            required(string(), "Name of a function of the same namespace."),
        ),
        replaces(
            "type",
            required(string(), "http, cron or amqp. Changing it replaces the trigger."),
        ),
        updates(
            "enabled",
            defaulted(
                AttributeType::Bool,
                "False stops the function taking work from this trigger (changed in place; default true).",
            ),
        ),
        updates(
            "schedule",
            optional(
                string(),
                "cron: 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first.",
            ),
        ),
        updates(
            "timezone",
            defaulted(string(), "cron: IANA time zone of the schedule (default UTC)."),
        ),
        updates(
            "event",
            optional(
                string(),
                "cron: JSON event passed to the handler, e.g. jsonencode({ task = \"report\" }).",
            ),
        ),
        updates(
            "broker_url",
            sensitive(optional(
                string(),
                "amqp: broker URL, e.g. amqp://guest:guest@127.0.0.1:5672/%2f.",
            )),
        ),
        updates("queue", optional(string(), "amqp: queue to consume.")),
        updates(
            "prefetch",
            optional(
                number(),
                "amqp: unacknowledged messages in flight at once (server default 1).",
            ),
        ),
        updates(
            "retry_limit",
            optional(number(), "amqp: retries before dead-lettering (server default 3)."),
        ),
        updates(
            "dead_letter_queue",
            optional(
                string(),
                "amqp: queue for messages whose retries ran out (server default {queue}.dead).",
            ),
        ),
        reported("url", string(), "http: the public URL that fires the function."),
    ]
}

/// The spec fields that are known and set, as the API's JSON.
pub fn spec_json(diags: &mut Diagnostics, state: &TriggerState) -> Json {
    let mut spec = Map::new();
    let mut put = |key: &str, value: Option<Json>| {
        if let Some(value) = value {
            spec.insert(key.to_string(), value);
        }
    };
    let text = |v: &Value<String>| v.as_ref_option().map(|s| json!(s));
    put("function", text(&state.function));
    put("type", text(&state.kind));
    put("enabled", state.enabled.as_ref_option().map(|b| json!(b)));
    put("schedule", text(&state.schedule));
    put("timezone", text(&state.timezone));
    put(
        "event",
        state
            .event
            .as_ref_option()
            .and_then(|text| parse_json(diags, text, "event")),
    );
    put("broker_url", text(&state.broker_url));
    put("queue", text(&state.queue));
    put("prefetch", to_u32(diags, &state.prefetch, "prefetch").map(|n| json!(n)));
    put(
        "retry_limit",
        to_u32(diags, &state.retry_limit, "retry_limit").map(|n| json!(n)),
    );
    put("dead_letter_queue", text(&state.dead_letter_queue));
    Json::Object(spec)
}

/// The state of a trigger as the server reports it; `event` keeps the
/// practitioner's formatting of `previous` when it means the same JSON.
pub fn from_api(trigger: &Trigger, previous: &TriggerState) -> TriggerState {
    let spec = &trigger.spec;
    let namespace = Value::Value(trigger.namespace.clone());
    let name = Value::Value(trigger.name.clone());
    TriggerState {
        id: resource_id(&namespace, &name),
        name,
        namespace,
        function: Value::Value(spec.function.clone()),
        kind: Value::Value(spec.kind.as_str().to_string()),
        enabled: Value::Value(spec.enabled),
        schedule: spec.schedule.clone().into(),
        timezone: spec.timezone.clone().into(),
        event: json_attribute(&previous.event, spec.event.as_ref()),
        broker_url: spec.broker_url.clone().into(),
        queue: spec.queue.clone().into(),
        prefetch: spec.prefetch.map(Number::from).into(),
        retry_limit: spec.retry_limit.map(Number::from).into(),
        dead_letter_queue: spec.dead_letter_queue.clone().into(),
        url: trigger.status.url.clone().into(),
    }
}
