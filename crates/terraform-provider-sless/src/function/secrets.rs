//! `sless_function`'s `env_from_secrets` and `secret_files`: lists of nested
//! attributes naming secrets of the function's namespace, their schema and
//! their API JSON. (The values are the `sless_secret`'s; a function only
//! names them.)

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use sless_api::{SecretEnv, SecretFiles};
use tf_provider::schema::AttributeType;
use tf_provider::value::Value;
use tf_provider::{AttributePath, Diagnostics};

use crate::convert::null_error;

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

/// `env_from_secrets` as the API's JSON, with an error on each null entry
/// or field (`None` then, and while any part is unknown or the list unset).
pub fn env_json(diags: &mut Diagnostics, list: &EnvList) -> Option<Json> {
    list_json(diags, "env_from_secrets", list, |e| {
        vec![("secret", &e.secret), ("key", &e.key), ("env", &e.env)]
    })
}

/// `secret_files` as the API's JSON, like [`env_json`].
pub fn files_json(diags: &mut Diagnostics, list: &FilesList) -> Option<Json> {
    list_json(diags, "secret_files", list, |f| vec![("secret", &f.secret)])
}

/// A list of objects whose every field the API needs: a null entry or
/// field would otherwise drop the whole list from the spec, and an apply
/// would remove every secret from the function.
fn list_json<T>(
    diags: &mut Diagnostics,
    attribute: &'static str,
    list: &Value<Vec<Value<T>>>,
    fields: impl Fn(&T) -> Vec<(&'static str, &Value<String>)>,
) -> Option<Json> {
    let entries = list.as_ref_option()?;
    let errors = diags.errors.len();
    let mut known = true;
    let mut out = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let path = AttributePath::new(attribute).index(index as i64);
        let entry = match entry {
            Value::Value(entry) => entry,
            Value::Null => {
                null_error(diags, path);
                continue;
            }
            Value::Unknown => {
                known = false;
                continue;
            }
        };
        let mut object = Map::new();
        for (name, value) in fields(entry) {
            match value {
                Value::Value(text) => {
                    object.insert(name.into(), json!(text));
                }
                Value::Null => null_error(diags, path.clone().attribute(name)),
                Value::Unknown => known = false,
            }
        }
        out.push(Json::Object(object));
    }
    (known && diags.errors.len() == errors).then_some(Json::Array(out))
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
