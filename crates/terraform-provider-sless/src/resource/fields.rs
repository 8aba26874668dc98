//! A resource's attributes as one table: each attribute's schema entry and
//! what a new value of it does to the resource (replace it, update it in
//! place, or nothing: the server reports it). The schema is built from the
//! table, so an attribute cannot exist without saying which.
//!
//! Plans compare prior and planned values by attribute name on the states'
//! serialized form (the names Terraform uses), so no hand-written accessor
//! can compare the wrong field.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value as Json;
#[cfg(test)]
use tf_provider::schema::AttributeConstraint;
use tf_provider::schema::{Attribute, AttributeType, Block, NestedBlock, Schema};
use tf_provider::value::Value;

use crate::schema::{computed, defaulted, optional, required, schema};

/// What a new value of an attribute does to the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChange {
    /// The API cannot change it: Terraform destroys the resource and creates
    /// it again.
    Replace,
    /// Applied to the same resource (a PATCH, new code, or only recorded).
    Update,
    /// Only the server sets it (a computed attribute).
    Report,
}

/// One attribute of a resource.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: &'static str,
    pub on_change: OnChange,
    pub attribute: Attribute,
    /// Set when the attribute is written as a nested block (`name { ... }`,
    /// at most once): then `attribute` only carries its constraint and
    /// description. (Nested attributes, `name = { ... }`, are not an option:
    /// tf-provider 0.2 sends them with both a type and a nested type, which
    /// Terraform refuses.)
    pub block: Option<Block>,
}

/// An attribute whose new value replaces the resource.
pub fn replaces(name: &'static str, attribute: Attribute) -> Field {
    Field {
        name,
        on_change: OnChange::Replace,
        attribute,
        block: None,
    }
}

/// An attribute whose new value is applied in place.
pub fn updates(name: &'static str, attribute: Attribute) -> Field {
    Field {
        name,
        on_change: OnChange::Update,
        attribute,
        block: None,
    }
}

/// An optional nested block (`name { ... }`, at most once) whose new value
/// is applied in place; its state field is serialized with
/// `tf_provider::value::serde_as_vec`.
pub fn updates_block(name: &'static str, block: Block) -> Field {
    Field {
        name,
        on_change: OnChange::Update,
        attribute: optional(AttributeType::Any, &block.description.content),
        block: Some(block),
    }
}

/// An attribute only the server sets.
pub fn reported(name: &'static str, kind: AttributeType, description: &str) -> Field {
    Field {
        name,
        on_change: OnChange::Report,
        attribute: computed(kind, description),
        block: None,
    }
}

/// `id`, `name` and `namespace`, which every resource has: a new name or
/// namespace is another object on the server.
pub fn identity(noun: &str) -> Vec<Field> {
    let string = || AttributeType::String;
    let mut title = noun.to_string();
    title[..1].make_ascii_uppercase();
    vec![
        reported("id", string(), "namespace/name."),
        replaces(
            "name",
            required(
                string(),
                &format!("{title} name (a DNS label). Changing it replaces the {noun}."),
            ),
        ),
        replaces(
            "namespace",
            defaulted(
                string(),
                &format!("Namespace (default: the provider's). Changing it replaces the {noun}."),
            ),
        ),
    ]
}

/// The schema of a resource with these attributes.
pub fn schema_of(description: &str, fields: &[Field]) -> Schema {
    let mut schema = schema(
        description,
        fields
            .iter()
            .filter(|field| field.block.is_none())
            .map(|field| (field.name, field.attribute.clone()))
            .collect(),
    );
    for field in fields {
        if let Some(block) = &field.block {
            schema
                .block
                .blocks
                .insert(field.name.to_string(), NestedBlock::Optional(block.clone()));
        }
    }
    schema
}

/// The attributes a practitioner sets, which a server message may name.
pub fn settable(fields: &[Field]) -> Vec<&'static str> {
    fields
        .iter()
        .filter(|field| field.on_change != OnChange::Report)
        .map(|field| field.name)
        .collect()
}

/// What is wrong with a table, if anything: a computed attribute that claims
/// to replace or update (the practitioner cannot change it), one the
/// practitioner sets that is reported, or a description that does not say
/// "Changing it replaces" exactly when a change does. (Run by the unit
/// tests over every resource's table.)
#[cfg(test)]
pub fn check(fields: &[Field]) -> Result<(), String> {
    for field in fields {
        let is_computed = field.attribute.constraint == AttributeConstraint::Computed;
        if is_computed != (field.on_change == OnChange::Report) {
            return Err(format!(
                "{}: a {:?} attribute cannot be {:?}",
                field.name, field.attribute.constraint, field.on_change
            ));
        }
        let says_replaces = field.attribute.description.content.contains(SAYS_REPLACES);
        if says_replaces != (field.on_change == OnChange::Replace) {
            return Err(format!(
                "{}: the description must say {SAYS_REPLACES:?} exactly when a change replaces ({:?})",
                field.name, field.on_change
            ));
        }
    }
    Ok(())
}

/// How a description says that a change replaces the resource.
#[cfg(test)]
const SAYS_REPLACES: &str = "Changing it replaces";

/// The attributes whose change from `prior` to `planned` replaces the
/// resource, in table order.
pub fn replacements<S: Serialize>(fields: &[Field], prior: &S, planned: &S) -> Vec<&'static str> {
    let (prior, planned) = (to_json(prior), to_json(planned));
    fields
        .iter()
        .filter(|field| field.on_change == OnChange::Replace && prior[field.name] != planned[field.name])
        .map(|field| field.name)
        .collect()
}

/// The state after an apply: `planned`, with every value the plan left
/// unknown taken from `server` (Terraform requires the known planned values
/// back exactly as planned, and no unknowns).
pub fn settle<S: Serialize + DeserializeOwned>(planned: S, server: &S) -> S {
    let unknown = to_json(&Value::<bool>::Unknown);
    let (mut planned, server) = (to_json(&planned), to_json(server));
    if let Json::Object(attributes) = &mut planned {
        for (name, value) in attributes.iter_mut().filter(|(_, value)| **value == unknown) {
            *value = server[name].clone();
        }
    }
    serde_json::from_value(planned).expect("a state reads back what it wrote")
}

fn to_json<S: Serialize>(state: &S) -> Json {
    serde_json::to_value(state).expect("a state serializes")
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Toy {
        id: Value<String>,
        name: Value<String>,
        namespace: Value<String>,
        size: Value<i64>,
        #[serde(rename = "type")]
        kind: Value<String>,
        url: Value<String>,
    }

    fn s(text: &str) -> Value<String> {
        Value::Value(text.to_string())
    }

    fn fields() -> Vec<Field> {
        let mut fields = identity("toy");
        fields.extend([
            updates("size", optional(AttributeType::Number, "Size.")),
            replaces("type", required(AttributeType::String, "Changing it replaces the toy.")),
            reported("url", AttributeType::String, "URL."),
        ]);
        fields
    }

    fn toy() -> Toy {
        Toy {
            id: s("default/a"),
            name: s("a"),
            namespace: s("default"),
            size: Value::Value(1),
            kind: s("x"),
            url: s("http://a"),
        }
    }

    #[test]
    fn only_replacing_attributes_that_changed_replace_compared_by_their_own_name() {
        let fields = fields();
        let prior = toy();
        assert!(replacements(&fields, &prior, &toy()).is_empty());
        let resized = Toy {
            size: Value::Value(2),
            url: Value::Unknown,
            ..toy()
        };
        assert!(replacements(&fields, &prior, &resized).is_empty());
        // `kind` is the attribute `type`: the serialized name is compared.
        let retyped = Toy { kind: s("y"), ..toy() };
        assert_eq!(replacements(&fields, &prior, &retyped), ["type"]);
        let moved = Toy {
            name: s("b"),
            namespace: Value::Unknown,
            kind: Value::Null,
            ..toy()
        };
        assert_eq!(replacements(&fields, &prior, &moved), ["name", "namespace", "type"]);
    }

    #[test]
    fn settling_fills_in_only_the_unknowns() {
        let planned = Toy {
            id: Value::Unknown,
            size: Value::Null,
            url: Value::Unknown,
            ..toy()
        };
        let server = Toy {
            id: s("default/a"),
            size: Value::Value(7),
            url: s("http://server"),
            kind: s("server-kind"),
            ..toy()
        };
        let settled = settle(planned, &server);
        assert_eq!(settled.id, s("default/a"));
        assert_eq!(settled.url, s("http://server"));
        assert_eq!(settled.size, Value::Null, "a known null stays as planned");
        assert_eq!(settled.kind, s("x"), "a known value stays as planned");
    }

    #[test]
    fn the_identity_attributes_name_the_noun_and_replace() {
        let fields = identity("trigger");
        let names: Vec<_> = fields.iter().map(|f| (f.name, f.on_change)).collect();
        assert_eq!(
            names,
            [
                ("id", OnChange::Report),
                ("name", OnChange::Replace),
                ("namespace", OnChange::Replace)
            ]
        );
        let description = fields[1].attribute.description.content.as_str();
        assert_eq!(
            description,
            "Trigger name (a DNS label). Changing it replaces the trigger."
        );
        assert_eq!(settable(&fields), ["name", "namespace"]);
    }

    #[test]
    fn a_computed_attribute_must_be_reported_and_a_set_one_must_not() {
        assert_eq!(check(&fields()), Ok(()));
        let bad = [updates("url", computed(AttributeType::String, "URL."))];
        assert!(check(&bad).unwrap_err().contains("url"));
        let bad = [Field {
            on_change: OnChange::Report,
            ..updates("size", optional(AttributeType::Number, "Size."))
        }];
        assert!(check(&bad).unwrap_err().contains("size"));
        let bad = [replaces("size", optional(AttributeType::Number, "Size."))];
        assert!(check(&bad).unwrap_err().contains("Changing it replaces"));
        let bad = [updates(
            "size",
            optional(AttributeType::Number, "Changing it replaces it."),
        )];
        assert!(check(&bad).unwrap_err().contains("size"));
    }
}
