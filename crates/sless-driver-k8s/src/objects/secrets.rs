//! A function's secrets as one Kubernetes Secret (named as its anchor,
//! owned by it), and what a pod needs to know of them: which of its keys
//! become variables and which files, never the values. Keys in the Secret:
//! `env.{VARIABLE}` and `file.{secret}.{key}`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, KeyToPath, Secret, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::ByteString;
use sless_driver::{FunctionKey, SecretValues};

use super::meta::{function_labels, meta, Owner};
use crate::names;

/// Where a pod sees its secret files: `/secrets/{secret}/{key}`.
pub const SECRETS_DIR: &str = "/secrets";
/// The pod's variables that carry a secret, `SLESS_SECRET_ENV_{VARIABLE}`;
/// `sless instance` hands them to the handler as `{VARIABLE}` (so a
/// variable cannot replace one of the instance's own settings).
pub const SECRET_ENV_PREFIX: &str = "SLESS_SECRET_ENV_";
/// Mode of a secret file (owner read; the kubelet adds group read for the
/// pod's `fsGroup`).
const FILE_MODE: i32 = 0o400;
const VOLUME: &str = "secrets";

/// The secrets of a version as its pods use them: names, no values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretMounts {
    /// The Secret's name (empty when the version uses no secrets).
    pub secret: String,
    /// Variables set from the Secret.
    pub env: Vec<String>,
    /// `(secret, key)` of each file.
    pub files: Vec<(String, String)>,
    /// The Secret's resourceVersion as applied: in the pod template, so
    /// that changed values roll the pods (a digest of the values would tell
    /// anyone who can read Deployments whether a guess was right).
    pub revision: String,
}

impl SecretMounts {
    /// What pods of `key` need of `values`, for the Secret applied at `revision`.
    pub fn of(key: &FunctionKey, values: &SecretValues, revision: &str) -> SecretMounts {
        if values == &SecretValues::default() {
            return SecretMounts::default();
        }
        SecretMounts {
            secret: names::anchor(key),
            env: values.env.iter().map(|(name, _)| name.clone()).collect(),
            files: values.files.iter().map(|f| (f.secret.clone(), f.key.clone())).collect(),
            revision: revision.to_string(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.files.is_empty()
    }

    /// The instance container's variables from the Secret.
    pub fn env_vars(&self) -> Vec<EnvVar> {
        self.env
            .iter()
            .map(|name| EnvVar {
                name: format!("{SECRET_ENV_PREFIX}{name}"),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: self.secret.clone(),
                        key: env_key(name),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            })
            .collect()
    }

    /// The volume of the files (None without files) and its read-only mount at [`SECRETS_DIR`].
    pub fn volume(&self) -> Option<(Volume, VolumeMount)> {
        if self.files.is_empty() {
            return None;
        }
        let items = self
            .files
            .iter()
            .map(|(secret, key)| KeyToPath {
                key: file_key(secret, key),
                path: format!("{secret}/{key}"),
                mode: Some(FILE_MODE),
                ..KeyToPath::default()
            })
            .collect();
        let volume = Volume {
            name: VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(self.secret.clone()),
                items: Some(items),
                default_mode: Some(FILE_MODE),
                optional: Some(false),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        };
        let mount = VolumeMount {
            name: VOLUME.into(),
            mount_path: SECRETS_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        };
        Some((volume, mount))
    }
}

/// The Secret holding a function's secret values, owned by its anchor.
pub fn function_secret(key: &FunctionKey, values: &SecretValues, owner: &Owner) -> Secret {
    let mut data = BTreeMap::new();
    for (name, value) in &values.env {
        data.insert(env_key(name), ByteString(value.clone().into_bytes()));
    }
    for file in &values.files {
        data.insert(file_key(&file.secret, &file.key), ByteString(file.value.clone()));
    }
    Secret {
        metadata: meta(
            &names::anchor(key),
            &names::function_namespace(&key.namespace),
            function_labels(key, "secrets"),
            Some(owner),
        ),
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

fn env_key(variable: &str) -> String {
    format!("env.{variable}")
}

fn file_key(secret: &str, key: &str) -> String {
    format!("file.{secret}.{key}")
}
