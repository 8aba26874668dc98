//! What the function, trigger and job endpoints share: loading a resource by
//! name, listing a namespace, and turning a stored record into its API type.

use serde::de::DeserializeOwned;
use serde_json::Value;
use sless_api::{validate_name, List};

use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::{Kind, Record};

pub fn not_found(kind: Kind, ns: &str, name: &str) -> Error {
    Error::NotFound(format!("{} {name:?} not found in namespace {ns:?}", kind.as_str()))
}

/// The resource `ns/name` of `kind`, after checking both names.
pub async fn load(state: &AppState, kind: Kind, ns: &str, name: &str) -> Result<Record> {
    validate_name("namespace", ns)?;
    validate_name(kind.as_str(), name)?;
    state
        .store
        .get(kind, ns, name)
        .await?
        .ok_or_else(|| not_found(kind, ns, name))
}

/// A stored record as the API type `{name, namespace, ...spec, status, created_at, updated_at}`.
pub fn to_api<T: DeserializeOwned>(record: Record) -> Result<T> {
    let kind = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or("resource")
        .to_lowercase();
    let (namespace, name) = (record.namespace.clone(), record.name.clone());
    let unreadable = |why: &dyn std::fmt::Display| {
        Error::Internal(format!(
            "the stored {kind} {name:?} in namespace {namespace:?} cannot be read ({why}); delete it and create it again"
        ))
    };
    let Value::Object(mut object) = record.spec else {
        return Err(unreadable(&"its spec is not an object"));
    };
    object.insert("name".into(), Value::String(record.name));
    object.insert("namespace".into(), Value::String(record.namespace));
    object.insert("status".into(), record.status);
    object.insert(
        "created_at".into(),
        serde_json::to_value(record.created_at).map_err(Error::internal)?,
    );
    object.insert(
        "updated_at".into(),
        serde_json::to_value(record.updated_at).map_err(Error::internal)?,
    );
    serde_json::from_value(Value::Object(object)).map_err(|e| unreadable(&e))
}

/// Every resource of `kind` in a namespace, by name. A record that does not
/// make the API type is left out and logged: one cannot stop the list (and
/// `DELETE` removes it).
pub async fn list<T: DeserializeOwned>(state: &AppState, kind: Kind, ns: &str) -> Result<List<T>> {
    validate_name("namespace", ns)?;
    let items = state
        .store
        .list(kind, ns)
        .await?
        .into_iter()
        .filter_map(|record| {
            let name = record.name.clone();
            to_api(record)
                .inspect_err(|e| {
                    tracing::warn!(kind = kind.as_str(), namespace = ns, name, error = %e, "left out a stored record that cannot be read")
                })
                .ok()
        })
        .collect();
    Ok(List { items })
}
