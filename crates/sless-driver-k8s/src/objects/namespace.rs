//! A function namespace, the anchor ConfigMap that owns a function's
//! objects, and the copies of the control plane's Secrets pods use (the
//! artifact store's read-only credentials, the image pull Secret).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use sless_driver::FunctionKey;

use super::meta::{function_labels, meta};
use crate::names::{self, label};

/// The namespace of a sless namespace's functions, under the "restricted"
/// Pod Security Standard: a pod that asks for more is refused.
pub fn function_namespace(namespace: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(names::function_namespace(namespace)),
            labels: Some(BTreeMap::from([
                (label::MANAGED_BY.into(), "sless".into()),
                (label::NAMESPACE.into(), namespace.into()),
                ("pod-security.kubernetes.io/enforce".into(), "restricted".into()),
            ])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The anchor of a function: every object made for it names this
/// ConfigMap as its owner, so deleting it removes them all.
pub fn anchor(key: &FunctionKey) -> ConfigMap {
    ConfigMap {
        metadata: meta(
            &names::anchor(key),
            &names::function_namespace(&key.namespace),
            function_labels(key, "anchor"),
            None,
        ),
        data: Some(BTreeMap::from([
            ("namespace".into(), key.namespace.clone()),
            ("function".into(), key.name.clone()),
        ])),
        ..ConfigMap::default()
    }
}

/// A copy of a control-plane Secret (its `type_` and `data`, as read) in a
/// function namespace, for its pods' `envFrom` or image pulls.
pub fn copied_secret(namespace: &str, name: &str, type_: Option<String>, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(names::function_namespace(namespace)),
            labels: Some(BTreeMap::from([
                (label::MANAGED_BY.into(), "sless".into()),
                (label::NAMESPACE.into(), namespace.into()),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some(type_.unwrap_or_else(|| "Opaque".into())),
        data: Some(data),
        ..Secret::default()
    }
}
