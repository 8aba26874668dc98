//! Test support: the proposed new state Terraform sends with a plan request
//! (`objchange.ProposedNew`): the configuration, with the prior value for
//! computed attributes the configuration leaves null.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value as Json;
use tf_provider::schema::{AttributeConstraint, Schema};

/// Terraform's proposal for `config` over `prior` (`None` for a create).
pub fn propose<S: Serialize + DeserializeOwned>(schema: &Schema, prior: Option<&S>, config: &S) -> S {
    let prior = prior.map(|p| serde_json::to_value(p).expect("state serializes"));
    let mut proposed = serde_json::to_value(config).expect("state serializes");
    for (name, attribute) in &schema.block.attributes {
        let computed = matches!(
            attribute.constraint,
            AttributeConstraint::Computed | AttributeConstraint::OptionalComputed
        );
        if computed && proposed[name].is_null() {
            proposed[name] = prior.as_ref().map_or(Json::Null, |p| p[name].clone());
        }
    }
    serde_json::from_value(proposed).expect("proposal deserializes")
}
