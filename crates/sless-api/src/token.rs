//! Bearer tokens: scoped to namespaces, or admin.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A token's name is a label for people: at most this many characters,
/// none of them a control character.
pub const MAX_TOKEN_NAME_CHARS: usize = 128;
/// The most namespaces one token lists (a list with repeats counts each once).
pub const MAX_TOKEN_NAMESPACES: usize = 1000;

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

/// `GET /v1/whoami`: the calling token, so a client can offer its namespaces.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhoAmI {
    /// The token's name (`admin` for the configured admin token).
    pub name: String,
    /// An admin token covers every namespace.
    pub admin: bool,
    /// The namespaces the token covers; for an admin token, the namespaces
    /// that hold a function, trigger or job (it may use others too).
    pub namespaces: Vec<String>,
}
