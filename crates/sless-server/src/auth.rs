//! Bearer tokens: generation, hashing, the admin token's bootstrap and the
//! middleware that guards everything under `/v1`.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::state::AppState;

/// Who is calling: an admin, or a token scoped to some namespaces.
#[derive(Debug, Clone)]
pub struct Principal {
    pub name: String,
    pub admin: bool,
    pub namespaces: Vec<String>,
    /// The stored token's hash (None for the configured admin token), for
    /// long requests that look again whether it still exists.
    pub token_hash: Option<String>,
}

impl Principal {
    /// Whether the token behind this principal still exists (and so may
    /// go on reading): a revoked token ends the streams it opened.
    pub async fn still_valid(&self, store: &dyn crate::store::Store) -> bool {
        match &self.token_hash {
            None => true,
            Some(hash) => matches!(store.token_by_hash(hash).await, Ok(Some(_))),
        }
    }
}

impl Principal {
    /// 403 unless the caller may touch `namespace`.
    pub fn check_namespace(&self, namespace: &str) -> Result<()> {
        if self.admin || self.namespaces.iter().any(|ns| ns == namespace) {
            Ok(())
        } else {
            Err(Error::Forbidden(format!(
                "token {:?} does not cover namespace {namespace:?}",
                self.name
            )))
        }
    }

    pub fn require_admin(&self) -> Result<()> {
        if self.admin {
            Ok(())
        } else {
            Err(Error::Forbidden(format!("token {:?} is not an admin token", self.name)))
        }
    }
}

/// A new random secret: `sless_` and 32 random bytes in hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("sless_{}", hex::encode(bytes))
}

/// What the store keeps of a secret. Tokens are long random strings, so a
/// plain sha256 is enough (no password stretching needed).
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Compares two equal-length hex digests without an early exit.
fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The admin token in force: the configured one, or the one kept in the data
/// dir, or a new one written there and printed once.
pub fn admin_token_hash(configured: Option<&str>, data_dir: &Path) -> anyhow::Result<String> {
    if let Some(token) = configured {
        return Ok(hash_token(token));
    }
    let path = data_dir.join("admin-token");
    if path.exists() {
        let token = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("reading admin token {}: {e}", path.display()))?;
        let token = token.trim();
        if token.is_empty() {
            anyhow::bail!(
                "admin token file {} is empty: delete it to generate a new token",
                path.display()
            );
        }
        tracing::info!(path = %path.display(), "using the admin token kept in the data dir");
        return Ok(hash_token(token));
    }
    std::fs::create_dir_all(data_dir)?;
    let token = generate_token();
    write_secret(&path, &token)?;
    // Printed once, on stdout, so the person starting the server can copy it.
    crate::say(&format!(
        "sless: generated admin token (kept in {}):\n{token}",
        path.display()
    ));
    Ok(hash_token(&token))
}

fn write_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options
        .open(path)
        .map_err(|e| anyhow::anyhow!("writing admin token {}: {e}", path.display()))?;
    file.write_all(secret.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    Ok(())
}

/// The bearer token of a request, if it has one.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// `/metrics` names every namespace and function: the admin token or the
/// configured metrics token only (401 without a token, 403 for another).
pub fn may_read_metrics(state: &AppState, headers: &axum::http::HeaderMap) -> Result<()> {
    let hash = hash_token(bearer(headers).ok_or(Error::Unauthorized)?);
    let metrics = state.config.metrics_token.as_deref().map(hash_token);
    if same_digest(&hash, &state.admin_hash) || metrics.is_some_and(|m| same_digest(&hash, &m)) {
        Ok(())
    } else {
        Err(Error::Forbidden(
            "/metrics is for the admin token or SLESS_METRICS_TOKEN".into(),
        ))
    }
}

/// Resolves the bearer token to a [`Principal`] and enforces namespace scope
/// for every `/v1/namespaces/{ns}/...` path, so no handler can forget it.
pub async fn require_token(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Result<Response> {
    let hash = hash_token(bearer(request.headers()).ok_or(Error::Unauthorized)?);
    let principal = if same_digest(&hash, &state.admin_hash) {
        Principal {
            name: "admin".into(),
            admin: true,
            namespaces: Vec::new(),
            token_hash: None,
        }
    } else {
        let record = state.store.token_by_hash(&hash).await?.ok_or(Error::Unauthorized)?;
        Principal {
            name: record.name,
            admin: record.admin,
            namespaces: record.namespaces,
            token_hash: Some(hash),
        }
    };
    let namespace = request
        .uri()
        .path()
        .strip_prefix("/v1/namespaces/")
        .and_then(|rest| rest.split('/').next())
        .map(str::to_string);
    if let Some(namespace) = &namespace {
        principal.check_namespace(namespace)?;
    }
    if request.uri().path().starts_with("/v1/tokens") {
        principal.require_admin()?;
    }
    // A body sent slowly holds its connection until SLESS_BODY_TIMEOUT_SEC:
    // one namespace's slow bodies may hold this many connections, not all.
    // (Code uploads have their own gates.)
    let _body = match &namespace {
        Some(namespace) if carries_json_body(&request) => Some(state.api_bodies.take(namespace).ok_or_else(|| {
            Error::TooManyRequests {
                message: format!(
                    "namespace {namespace} has {API_BODIES_PER_NAMESPACE} API requests with a body under way, the most it may; send the next when one is answered"
                ),
                retry_after: 1,
            }
        })?),
        _ => None,
    };
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
}

/// `/v1` requests with a body under way at once per namespace at most
/// (code uploads aside); each holds a connection until it is answered.
pub const API_BODIES_PER_NAMESPACE: usize = 64;

/// A POST, PUT or PATCH of the API, not a code upload.
fn carries_json_body(request: &Request) -> bool {
    use axum::http::Method;
    matches!(*request.method(), Method::POST | Method::PUT | Method::PATCH) && !request.uri().path().ends_with("/code")
}
