//! The JSON error body every failing endpoint answers with.

use serde::{Deserialize, Serialize};

/// How the server's `error` begins for a path it serves nothing at (its
/// router's fallback), so a client tells a wrong endpoint's 404 from an
/// object's: `no route for /v1/v1/namespaces/...`.
pub const NO_ROUTE: &str = "no route for ";

/// `{"error": "...", ...}`: `error` says what is wrong; the optional fields
/// name the thing it concerns (the request field, or an archive entry and
/// the rule it broke).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
    /// The request body's field the error is about (e.g. `schedule`), when
    /// it is about one: a client shows the message next to that field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}
