//! Labels, owner references and object metadata shared by every builder.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sless_driver::FunctionKey;

use crate::names::label;

/// The function anchor that owns an object (its name and uid, as the API
/// server gave them when it was applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub uid: String,
}

impl Owner {
    fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

/// Labels of everything made for a function; `component` says what it is.
pub fn function_labels(key: &FunctionKey, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (label::MANAGED_BY.into(), "sless".into()),
        (label::NAMESPACE.into(), key.namespace.clone()),
        (label::FUNCTION.into(), key.name.clone()),
        (label::COMPONENT.into(), component.into()),
    ])
}

/// Labels of one version's objects.
pub fn version_labels(key: &FunctionKey, version: u64, component: &str) -> BTreeMap<String, String> {
    let mut labels = function_labels(key, component);
    labels.insert(label::VERSION.into(), version.to_string());
    labels
}

/// Metadata of an object in `namespace`, owned by `owner` when given.
pub fn meta(name: &str, namespace: &str, labels: BTreeMap<String, String>, owner: Option<&Owner>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        labels: Some(labels),
        owner_references: owner.map(|o| vec![o.reference()]),
        ..ObjectMeta::default()
    }
}
