//! The JSON error body every failing endpoint answers with.

use serde::{Deserialize, Serialize};

/// `{"error": "...", ...}`: `error` says what is wrong; the optional fields
/// name the thing it concerns (an archive entry and the rule it broke).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}
