//! Secrets: named sets of key/value pairs in a namespace, encrypted at rest
//! by the server and handed to the functions that reference them (as
//! environment variables or as read-only files under `/secrets`). The API
//! takes values in and never gives them back: a secret reads as its name,
//! its keys and when it changed.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Keys one secret holds at most.
pub const MAX_SECRET_KEYS: usize = 64;
/// The longest value, in characters.
pub const MAX_SECRET_VALUE_CHARS: usize = 65_536;
/// Secrets one namespace holds at most.
pub const MAX_SECRETS_PER_NAMESPACE: usize = 100;
/// Longest key name (a key is also a file name under `/secrets/{secret}/`).
pub const MAX_SECRET_KEY_CHARS: usize = 128;
/// The key name rule, as a JSON Schema pattern: a letter, digit or `_`,
/// then letters, digits, `-`, `_` and `.` (no `/`, never `.` or `..`).
pub const SECRET_KEY_PATTERN: &str = "^[A-Za-z0-9_][-._A-Za-z0-9]{0,127}$";
/// References to secrets (`env_from_secrets` entries, `secret_files`
/// entries) one function holds at most, each.
pub const MAX_SECRET_REFS: usize = 64;

/// `POST /v1/namespaces/{ns}/secrets` body. `Debug` shows the keys only.
#[derive(Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretCreate {
    pub name: String,
    /// Keys and their values (text). Never returned by the API.
    pub data: BTreeMap<String, String>,
}

/// `PATCH /v1/namespaces/{ns}/secrets/{name}` body: a JSON merge patch of
/// the data (a value sets a key, null removes it; other keys stay).
#[derive(Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretPatch {
    #[schema(value_type = BTreeMap<String, Option<String>>)]
    pub data: BTreeMap<String, Option<String>>,
}

/// A secret as the API returns it: never its values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Secret {
    pub name: String,
    pub namespace: String,
    /// Its keys, sorted.
    pub keys: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// When a value last changed (functions that use it roll then).
    pub updated_at: DateTime<Utc>,
}

impl std::fmt::Debug for SecretCreate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretCreate")
            .field("name", &self.name)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl std::fmt::Debug for SecretPatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretPatch")
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// One environment variable of a function taken from a secret's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretEnv {
    /// The secret's name (in the function's namespace).
    pub secret: String,
    /// The key in the secret.
    pub key: String,
    /// The variable's name.
    pub env: String,
}

/// A secret mounted as files: `/secrets/{secret}/{key}` for each of its
/// keys, read-only, readable by the instance only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretFiles {
    /// The secret's name (in the function's namespace).
    pub secret: String,
}

/// Checks a key name against [`SECRET_KEY_PATTERN`].
pub fn validate_secret_key(key: &str) -> Result<(), String> {
    let mut chars = key.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if first_ok && rest_ok && key.len() <= MAX_SECRET_KEY_CHARS {
        Ok(())
    } else {
        Err(format!(
            "secret key {key:?} must be 1-{MAX_SECRET_KEY_CHARS} letters, digits, '-', '_' or '.', starting with a letter, digit or '_'"
        ))
    }
}

/// Checks a value's size (never naming the value).
pub fn validate_secret_value(key: &str, value: &str) -> Result<(), String> {
    let chars = value.chars().count();
    if chars > MAX_SECRET_VALUE_CHARS {
        return Err(format!(
            "the value of key {key:?} has {chars} characters; at most {MAX_SECRET_VALUE_CHARS} are allowed"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names() {
        for good in ["password", "a", "_x", "tls.crt", "9-a_b.c", &"k".repeat(128)] {
            assert!(validate_secret_key(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", ".hidden", "-a", "a/b", "a b", "é", &"k".repeat(129)] {
            assert!(validate_secret_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn debug_never_shows_values() {
        let create = SecretCreate {
            name: "db".into(),
            data: [("password".to_string(), "hunter2".to_string())].into(),
        };
        let patch = SecretPatch {
            data: [("password".to_string(), Some("hunter3".to_string()))].into(),
        };
        let shown = format!("{create:?} {patch:?}");
        assert!(shown.contains("password") && !shown.contains("hunter"), "{shown}");
    }
}
