//! Invocation records: one per call of a handler, whatever fired it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Whether `text` is the id of an invocation record or an asynchronous
/// event: 24 lowercase hex digits (when the call started, then a random
/// part), as the server makes them and a page's `next_before` gives them.
/// The server takes nothing else as a cursor, and the CLI refuses anything
/// else before asking.
pub fn is_record_id(text: &str) -> bool {
    text.len() == 24 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The header of a `/logs` answer whose history stopped before the oldest
/// call's lines: the id of the oldest call all of whose lines were sent.
/// `before` it (a query parameter) continues the history, beginning with
/// the whole of a call partly sent.
pub const LOGS_NEXT_BEFORE: &str = "sless-next-before";

/// A line (or chunk) the handler printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogLine {
    /// `stdout` or `stderr`.
    pub stream: String,
    pub text: String,
}

/// One call of a handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InvocationRecord {
    pub id: String,
    pub namespace: String,
    pub function: String,
    pub version: u64,
    /// The alias the call was addressed to (`/fn/{ns}/{name}@{alias}`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// What fired the call: `http` (a call through `/fn`), `async` (an
    /// attempt of an asynchronous call), `cron`, `amqp` or `job`.
    pub trigger: String,
    pub request_id: String,
    pub started_at: DateTime<Utc>,
    /// How long the call took, in milliseconds to the microsecond.
    pub duration_ms: f64,
    /// The HTTP status for `http` and `async` calls; `ok` or `error` otherwise.
    pub status: String,
    pub error: Option<String>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub cold_start: bool,
    pub logs: Vec<LogLine>,
    /// True when the handler printed more than the per-invocation cap.
    pub logs_truncated: bool,
}

/// A page of invocations, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InvocationPage {
    pub items: Vec<InvocationRecord>,
    /// Pass as `before` to get the next (older) page; absent on the last page.
    pub next_before: Option<String>,
}
