//! Bearer tokens: scoped to namespaces, or admin.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `POST /v1/tokens` body.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCreate {
    /// A label for people; not secret.
    pub name: String,
    /// Namespaces the token may touch.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// An admin token may touch every namespace and create tokens.
    #[serde(default)]
    pub admin: bool,
}

/// A token as listed: never includes the secret.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Token {
    pub id: String,
    pub name: String,
    pub namespaces: Vec<String>,
    pub admin: bool,
    pub created_at: DateTime<Utc>,
}

/// The answer to `POST /v1/tokens`: the only time the secret is shown.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenCreated {
    #[serde(flatten)]
    pub info: Token,
    /// The bearer token. Stored hashed; shown once.
    pub token: String,
}
