//! `sless_secret`'s attributes: the state struct, its attribute table, and
//! the mapping to and from the API's `Secret` (which has keys, not values).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use sless_api::Secret;
use tf_provider::schema::AttributeType;
use tf_provider::value::Value;
use tf_provider::Diagnostics;

use crate::convert::resource_id;
use crate::resource::fields::{reported, updates, Field};
use crate::schema::{required, sensitive, string_map};

/// A `sless_secret` as Terraform holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecretState {
    pub id: Value<String>,
    pub name: Value<String>,
    pub namespace: Value<String>,
    pub data: Value<BTreeMap<String, Value<String>>>,
    pub keys: Value<Vec<Value<String>>>,
    pub updated_at: Value<String>,
}

/// Every attribute but the identity, and what a change to it does.
pub fn fields() -> Vec<Field> {
    vec![
        updates(
            "data",
            sensitive(required(
                string_map(),
                "Keys and their text values (sensitive; changed in place, and the functions that use the secret roll onto the new values).",
            )),
        ),
        reported(
            "keys",
            AttributeType::List(Box::new(AttributeType::String)),
            "The secret's keys, sorted.",
        ),
        reported("updated_at", AttributeType::String, "When a value last changed."),
    ]
}

/// The values, as the API's JSON. A key whose value is not known here (one
/// the server has that this state never set, as a read or an import
/// leaves it) is null, so that an update's merge diff removes it when the
/// configuration does not have it.
pub fn spec_json(_diags: &mut Diagnostics, state: &SecretState) -> Json {
    let mut spec = Map::new();
    if let Some(data) = state.data.as_ref_option() {
        let data: Map<String, Json> = data
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref_option().map_or(Json::Null, |v| json!(v))))
            .collect();
        spec.insert("data".into(), Json::Object(data));
    }
    Json::Object(spec)
}

/// The keys follow from the data; the update time is unknown when the
/// values change.
pub fn plan(prior: Option<&SecretState>, planned: &mut SecretState) {
    planned.keys = match planned.data.as_ref_option() {
        Some(data) => Value::Value(data.keys().map(|k| Value::Value(k.clone())).collect()),
        None => Value::Unknown,
    };
    match prior {
        Some(prior) if prior.data == planned.data => planned.updated_at = prior.updated_at.clone(),
        _ => planned.updated_at = Value::Unknown,
    }
}

/// The state of a secret as the server reports it: the values are the
/// previous state's, for the keys the server still has (a key added
/// elsewhere has no value here, and one removed elsewhere is gone: either
/// shows as a change to apply). An `updated_at` other than the previous
/// state's means values changed elsewhere, which the server does not tell:
/// then no value is known, and the next apply writes the configured ones.
pub fn from_api(secret: &Secret, previous: &SecretState) -> SecretState {
    let namespace = Value::Value(secret.namespace.clone());
    let name = Value::Value(secret.name.clone());
    let updated_at = secret.updated_at.to_rfc3339();
    let changed_elsewhere = previous
        .updated_at
        .as_ref_option()
        .is_some_and(|recorded| *recorded != updated_at);
    let known = match previous.data.as_ref_option() {
        Some(data) if !changed_elsewhere => data.clone(),
        _ => BTreeMap::new(),
    };
    let data = secret
        .keys
        .iter()
        .map(|key| (key.clone(), known.get(key).cloned().unwrap_or(Value::Null)))
        .collect();
    SecretState {
        id: resource_id(&namespace, &name),
        name,
        namespace,
        data: Value::Value(data),
        keys: Value::Value(secret.keys.iter().map(|k| Value::Value(k.clone())).collect()),
        updated_at: Value::Value(updated_at),
    }
}
