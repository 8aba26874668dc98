//! Short constructors for schema attributes, so each resource's schema reads
//! as a table of names, types and descriptions.

use std::collections::HashMap;

use tf_provider::schema::{Attribute, AttributeConstraint, AttributeType, Block, Description, Schema};

/// Version of every resource schema; bump it (and add an upgrade) when the
/// shape of a state changes.
pub const SCHEMA_VERSION: i64 = 1;

/// A string the practitioner must set.
pub fn required(kind: AttributeType, description: &str) -> Attribute {
    attribute(kind, AttributeConstraint::Required, description)
}

/// A value the practitioner may set; null stays null.
pub fn optional(kind: AttributeType, description: &str) -> Attribute {
    attribute(kind, AttributeConstraint::Optional, description)
}

/// A value the practitioner may set; when it is not set the provider plans
/// the server's default (or the provider's namespace).
pub fn defaulted(kind: AttributeType, description: &str) -> Attribute {
    attribute(kind, AttributeConstraint::OptionalComputed, description)
}

/// A value only the server reports.
pub fn computed(kind: AttributeType, description: &str) -> Attribute {
    attribute(kind, AttributeConstraint::Computed, description)
}

/// Marks an attribute sensitive (hidden in plan output).
pub fn sensitive(mut attribute: Attribute) -> Attribute {
    attribute.sensitive = true;
    attribute
}

fn attribute(attr_type: AttributeType, constraint: AttributeConstraint, description: &str) -> Attribute {
    Attribute {
        attr_type,
        description: Description::plain(description),
        constraint,
        sensitive: false,
        deprecated: false,
    }
}

/// A schema of plain attributes (no nested blocks).
pub fn schema(description: &str, attributes: Vec<(&str, Attribute)>) -> Schema {
    Schema {
        version: SCHEMA_VERSION,
        block: Block {
            version: SCHEMA_VERSION,
            attributes: attributes
                .into_iter()
                .map(|(name, attribute)| (name.to_string(), attribute))
                .collect::<HashMap<_, _>>(),
            blocks: HashMap::new(),
            description: Description::plain(description),
            deprecated: false,
        },
    }
}

/// `map(string)`.
pub fn string_map() -> AttributeType {
    AttributeType::Map(Box::new(AttributeType::String))
}
