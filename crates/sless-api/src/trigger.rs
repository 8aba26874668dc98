//! Triggers: what fires a function besides a direct call (an HTTP route, a
//! cron schedule, a RabbitMQ queue).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Largest cron trigger event the server takes, as compact JSON.
pub const MAX_CRON_EVENT_BYTES: usize = 16 * 1024;

/// The kind of trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TriggerType {
    Http,
    Cron,
    Amqp,
}

impl TriggerType {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerType::Http => "http",
            TriggerType::Cron => "cron",
            TriggerType::Amqp => "amqp",
        }
    }
}

fn yes() -> bool {
    true
}

/// What the user declares about a trigger. Fields of other types than the
/// trigger's own are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    /// A function of the trigger's namespace.
    pub function: String,
    #[serde(rename = "type")]
    pub kind: TriggerType,
    /// False stops the function taking work from this trigger (changed in place).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// cron: 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// cron: IANA time zone of the schedule (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// cron: the event passed to the handler (default `{}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Value>,
    /// amqp: broker URL, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_url: Option<String>,
    /// amqp: queue to consume (declared durable if missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// amqp: unacknowledged messages in flight at once (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<u16>,
    /// amqp: retries after a failed invocation before dead-lettering (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<u32>,
    /// amqp: queue that receives messages whose retries ran out (default `{queue}.dead`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_queue: Option<String>,
}

/// What sless reports about a trigger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct TriggerStatus {
    /// http: the public URL.
    pub url: Option<String>,
    pub last_fired_at: Option<DateTime<Utc>>,
    /// The last firing's error, cleared by the next success.
    pub last_error: Option<String>,
    /// cron: when it fires next.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// cron: ticks it has fired. Absent for http and amqp triggers, whose
    /// calls are counted per function in `/metrics` and the invocation log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fired: Option<u64>,
    /// cron: ticks skipped because the trigger's call of an earlier tick
    /// still ran (a trigger runs one call at a time). Absent until one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
}

/// `POST .../triggers` body.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TriggerCreate {
    pub name: String,
    #[serde(flatten)]
    pub spec: TriggerSpec,
}

/// A trigger as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Trigger {
    pub name: String,
    pub namespace: String,
    #[serde(flatten)]
    pub spec: TriggerSpec,
    pub status: TriggerStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
