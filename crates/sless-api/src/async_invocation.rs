//! Asynchronous invocation: a function's `async` settings (retries, maximum
//! event age, destinations) and the record of one event sent with
//! `X-Sless-Invocation-Type: Event`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Retries after a failed attempt, by default (so three attempts in all).
pub const DEFAULT_RETRY_LIMIT: u32 = 2;
/// An event not delivered within this many seconds fails, by default (6 h).
pub const DEFAULT_MAX_EVENT_AGE_SEC: u32 = 6 * 3600;

fn default_retry_limit() -> u32 {
    DEFAULT_RETRY_LIMIT
}
fn default_max_event_age_sec() -> u32 {
    DEFAULT_MAX_EVENT_AGE_SEC
}

/// How a function's asynchronous events are delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AsyncSettings {
    /// Retries after a failed attempt (0-10, default 2).
    #[serde(default = "default_retry_limit")]
    pub retry_limit: u32,
    /// Seconds after which an undelivered event fails (60-21600, default 21600).
    #[serde(default = "default_max_event_age_sec")]
    pub max_event_age_sec: u32,
    /// Where an event goes when its retries ran out or it grew too old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<Destination>,
    /// Where the record of a delivered event goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<Destination>,
}

impl Default for AsyncSettings {
    fn default() -> Self {
        AsyncSettings {
            retry_limit: DEFAULT_RETRY_LIMIT,
            max_event_age_sec: DEFAULT_MAX_EVENT_AGE_SEC,
            on_failure: None,
            on_success: None,
        }
    }
}

/// The kind of destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DestinationType {
    /// Another function of the namespace, invoked asynchronously with the record.
    Function,
    /// A RabbitMQ queue (declared durable), published with confirms.
    Amqp,
}

/// Where an event's outcome is sent: `{"type": "function", "function":
/// "audit"}` or `{"type": "amqp", "broker_url": "amqp://...", "queue": "failed"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Destination {
    #[serde(rename = "type")]
    pub kind: DestinationType,
    /// function: a function of the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// amqp: broker URL (on the operator's SLESS_AMQP_ALLOWED_HOSTS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_url: Option<String>,
    /// amqp: queue name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

/// The longest broker URL a destination (or an amqp trigger) may name.
pub const MAX_BROKER_URL_CHARS: usize = 2048;

impl AsyncSettings {
    /// Limits the JSON types cannot express, naming the field (`async.…`).
    pub fn check_field(&self) -> Result<(), (&'static str, String)> {
        if self.retry_limit > 10 {
            return Err((
                "async.retry_limit",
                format!("async.retry_limit must be between 0 and 10, got {}", self.retry_limit),
            ));
        }
        if !(60..=DEFAULT_MAX_EVENT_AGE_SEC).contains(&self.max_event_age_sec) {
            return Err((
                "async.max_event_age_sec",
                format!(
                    "async.max_event_age_sec must be between 60 and {DEFAULT_MAX_EVENT_AGE_SEC}, got {}",
                    self.max_event_age_sec
                ),
            ));
        }
        for (field, destination) in [
            ("async.on_failure", &self.on_failure),
            ("async.on_success", &self.on_success),
        ] {
            if let Some(destination) = destination {
                destination
                    .check()
                    .map_err(|message| (field, format!("{field}: {message}")))?;
            }
        }
        Ok(())
    }
}

impl Destination {
    fn check(&self) -> Result<(), String> {
        let given = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
        match self.kind {
            DestinationType::Function => {
                if !given(&self.function) {
                    return Err("a function destination needs `function`".into());
                }
                if self.broker_url.is_some() || self.queue.is_some() {
                    return Err("a function destination takes no broker_url or queue".into());
                }
                crate::validate_name("function", self.function.as_deref().unwrap_or_default())
                    .map_err(|e| e.to_string())
            }
            DestinationType::Amqp => {
                if !given(&self.broker_url) || !given(&self.queue) {
                    return Err("an amqp destination needs `broker_url` and `queue`".into());
                }
                if self.function.is_some() {
                    return Err("an amqp destination takes no function".into());
                }
                check_queue_name("queue", self.queue.as_deref().unwrap_or_default())?;
                let url = self.broker_url.as_deref().unwrap_or_default();
                if url.len() > MAX_BROKER_URL_CHARS {
                    return Err(format!(
                        "broker_url must be at most {MAX_BROKER_URL_CHARS} characters, got {}",
                        url.len()
                    ));
                }
                Ok(())
            }
        }
    }
}

/// A RabbitMQ queue's name, as `field` (an AMQP short string: 1 to 255
/// bytes; no control characters, which no broker shows readably).
pub fn check_queue_name(field: &str, queue: &str) -> Result<(), String> {
    if queue.trim().is_empty() {
        return Err(format!("{field} is empty; it names a RabbitMQ queue"));
    }
    if queue.len() > 255 {
        return Err(format!(
            "{field} is {} bytes; a queue's name is at most 255",
            queue.len()
        ));
    }
    if queue.chars().any(char::is_control) {
        return Err(format!("{field} has a control character; a queue's name cannot"));
    }
    Ok(())
}

/// Where an asynchronous event is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AsyncStatus {
    /// Stored, waiting for its (next) attempt.
    Queued,
    /// An attempt is under way.
    Running,
    /// An attempt succeeded (`succeeded_attempt` says which).
    Succeeded,
    /// Retries ran out, the event grew too old, or its function is gone.
    Failed,
}

impl AsyncStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AsyncStatus::Queued => "queued",
            AsyncStatus::Running => "running",
            AsyncStatus::Succeeded => "succeeded",
            AsyncStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<AsyncStatus> {
        [
            AsyncStatus::Queued,
            AsyncStatus::Running,
            AsyncStatus::Succeeded,
            AsyncStatus::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// One asynchronous event and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AsyncInvocation {
    pub id: String,
    pub namespace: String,
    pub function: String,
    /// The request id every attempt's invocation record carries.
    pub request_id: String,
    pub status: AsyncStatus,
    /// Attempts begun so far (a call that found no free instance is not one).
    pub attempts: u32,
    /// The attempt that succeeded (1 = the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub succeeded_attempt: Option<u32>,
    /// The last failed attempt's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The HTTP status of the last attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    /// When a queued event's next attempt may start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Why the outcome could not be sent to its destination, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_error: Option<String>,
    /// For an event that carries another's outcome to a function destination: that event's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The 202 answer to an asynchronous call.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AsyncAccepted {
    pub id: String,
    pub status: AsyncStatus,
    pub request_id: String,
    /// The event's record (also in the `Location` header).
    pub location: String,
}

/// A page of asynchronous events, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AsyncInvocationPage {
    pub items: Vec<AsyncInvocation>,
    /// Pass as `before` to get the next (older) page; absent on the last page.
    pub next_before: Option<String>,
}
