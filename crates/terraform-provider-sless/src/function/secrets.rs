//! `sless_function`'s `env_from_secrets` and `secret_files`: lists of nested
//! attributes naming secrets of the function's namespace, their schema and
//! their API JSON. (The values are the `sless_secret`'s; a function only
//! names them.)

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value as Json};
use sless_api::{SecretEnv, SecretFiles};
use tf_provider::schema::AttributeType;
use tf_provider::value::Value;

/// `{ secret = "db", key = "password", env = "DB_PASSWORD" }`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecretEnvState {
    pub secret: Value<String>,
    pub key: Value<String>,
    pub env: Value<String>,
}

/// `{ secret = "tls" }`: every key at /secrets/tls/{key}.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecretFilesState {
    pub secret: Value<String>,
}

pub type EnvList = Value<Vec<Value<SecretEnvState>>>;
pub type FilesList = Value<Vec<Value<SecretFilesState>>>;

/// `env_from_secrets`' type: a list of objects (a plain type: tf-provider 0.2
/// sends nested attributes with both a type and a nested type, which
/// Terraform refuses).
pub fn env_type() -> AttributeType {
    AttributeType::List(Box::new(AttributeType::Object(HashMap::from([
        ("secret".to_string(), AttributeType::String),
        ("key".to_string(), AttributeType::String),
        ("env".to_string(), AttributeType::String),
    ]))))
}

/// `secret_files`' type: a list of `{ secret }` objects.
pub fn files_type() -> AttributeType {
    AttributeType::List(Box::new(AttributeType::Object(HashMap::from([(
        "secret".to_string(),
        AttributeType::String,
    )]))))
}

/// The known entries as the API's JSON (None while any part is unknown or unset).
pub fn env_json(list: &EnvList) -> Option<Json> {
    let entries = list.as_ref_option()?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.as_ref_option()?;
        out.push(json!({
            "secret": entry.secret.as_ref_option()?,
            "key": entry.key.as_ref_option()?,
            "env": entry.env.as_ref_option()?,
        }));
    }
    Some(Json::Array(out))
}

pub fn files_json(list: &FilesList) -> Option<Json> {
    let entries = list.as_ref_option()?;
    let mut out = Vec::new();
    for entry in entries {
        out.push(json!({ "secret": entry.as_ref_option()?.secret.as_ref_option()? }));
    }
    Some(Json::Array(out))
}

pub fn env_from_api(entries: &[SecretEnv]) -> EnvList {
    Value::Value(
        entries
            .iter()
            .map(|e| {
                Value::Value(SecretEnvState {
                    secret: Value::Value(e.secret.clone()),
                    key: Value::Value(e.key.clone()),
                    env: Value::Value(e.env.clone()),
                })
            })
            .collect(),
    )
}

pub fn files_from_api(entries: &[SecretFiles]) -> FilesList {
    Value::Value(
        entries
            .iter()
            .map(|f| {
                Value::Value(SecretFilesState {
                    secret: Value::Value(f.secret.clone()),
                })
            })
            .collect(),
    )
}
