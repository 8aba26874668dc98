//! `sless_alias`'s attributes: the state struct, its attribute table, and
//! the mapping to and from the API's `Alias`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use sless_api::Alias;
use tf_provider::schema::AttributeType;
use tf_provider::value::Value;
use tf_provider::Diagnostics;

use crate::convert::{map_json, resource_id};
use crate::number::Number;
use crate::resource::fields::{replaces, reported, updates, Field};
use crate::schema::{optional, required};

/// A `sless_alias` as Terraform holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AliasState {
    pub id: Value<String>,
    pub name: Value<String>,
    pub namespace: Value<String>,
    pub function: Value<String>,
    pub version: Value<Number>,
    pub weights: Value<BTreeMap<String, Value<Number>>>,
    pub url: Value<String>,
}

/// Every attribute but the identity, and what a change to it does.
pub fn fields() -> Vec<Field> {
    vec![
        replaces(
            "function",
            required(
                AttributeType::String,
                "The function the alias belongs to. Changing it replaces the alias.",
            ),
        ),
        updates(
            "version",
            required(
                AttributeType::Number,
                "The version calls go to (moved in place, atomically; rollback is setting it back).",
            ),
        ),
        updates(
            "weights",
            optional(
                AttributeType::Map(Box::new(AttributeType::Number)),
                "At most one other version (its number as the key) and the share of calls it gets, between 0 and 1, e.g. { \"8\" = 0.1 }.",
            ),
        ),
        reported("url", AttributeType::String, "The public URL: /fn/{namespace}/{function}@{name}."),
    ]
}

/// The spec fields that are known and set, as the API's JSON.
pub fn spec_json(diags: &mut Diagnostics, state: &AliasState) -> Json {
    let mut spec = Map::new();
    if let Some(version) = state.version.as_ref_option() {
        spec.insert("version".into(), json!(version));
    }
    if let Some(weights) = map_json(diags, "weights", &state.weights, |w| json!(w.to_f64())) {
        if !weights.is_empty() {
            spec.insert("weights".into(), Json::Object(weights));
        }
    }
    Json::Object(spec)
}

/// The state of an alias as the server reports it (weights stay null when
/// the configuration set none and the server has none).
pub fn from_api(alias: &Alias, previous: &AliasState) -> AliasState {
    let namespace = Value::Value(alias.namespace.clone());
    let function = Value::Value(alias.function.clone());
    let name = Value::Value(alias.name.clone());
    let weights = if alias.spec.weights.is_empty() && !previous.weights.is_value() {
        Value::Null
    } else {
        Value::Value(
            alias
                .spec
                .weights
                .iter()
                .map(|(k, w)| (k.clone(), Value::Value(Number::from_f64(*w))))
                .collect(),
        )
    };
    AliasState {
        id: resource_id(&namespace, &resource_id(&function, &name)),
        name,
        namespace,
        function,
        version: Value::Value(alias.spec.version.into()),
        weights,
        url: Value::Value(alias.url.clone()),
    }
}
