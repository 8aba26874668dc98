//! `sless_secret`: a namespace's secret (keys and text values, sealed by the
//! server). The values are sensitive: Terraform keeps them in its state,
//! the server never gives them back, so a read keeps the configured values
//! of the keys the server still has. Changing values is an in-place update
//! (the functions that use the secret roll); a new `name` replaces it.

mod state;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value as Json;
use sless_api::{Secret, SecretCreate, SecretPatch};
use sless_client::Client;
use tf_provider::Diagnostics;

pub use state::SecretState;

use crate::convert::check_map_nulls;
use crate::diagnostics::error;
use crate::resource::fields::Field;
use crate::resource::{ApiResource, Identity, Key};

/// The `sless_secret` resource.
#[derive(Debug, Clone, Default)]
pub struct SecretResource;

/// What a secret is created from: its values.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretData {
    #[serde(default)]
    data: BTreeMap<String, String>,
}

#[async_trait]
impl ApiResource for SecretResource {
    type State = SecretState;
    type Spec = SecretData;
    type Api = Secret;

    const NOUN: &'static str = "secret";
    const DESCRIPTION: &'static str =
        "A namespace's secret: keys and text values, sealed at rest, which functions take with env_from_secrets or secret_files. The server never returns the values.";

    fn fields() -> Vec<Field> {
        state::fields()
    }

    fn identity(state: &mut SecretState) -> Identity<'_> {
        Identity {
            id: &mut state.id,
            namespace: &mut state.namespace,
            name: &mut state.name,
            parent: None,
        }
    }

    fn validate(diags: &mut Diagnostics, config: &SecretState) {
        check_map_nulls(diags, "data", &config.data);
        let Some(data) = config.data.as_ref_option() else {
            return;
        };
        if data.len() > sless_api::MAX_SECRET_KEYS {
            let message = format!("at most {} keys", sless_api::MAX_SECRET_KEYS);
            error(diags, "Invalid data", message, Some("data"));
        }
        for (key, value) in data {
            if let Err(message) = sless_api::validate_secret_key(key) {
                error(diags, "Invalid data", message, Some("data"));
            }
            if let Some(value) = value.as_ref_option() {
                if let Err(message) = sless_api::validate_secret_value(key, value) {
                    error(diags, "Invalid data", message, Some("data"));
                }
            }
        }
    }

    fn plan(&self, _: &mut Diagnostics, prior: Option<&SecretState>, _: &SecretState, planned: &mut SecretState) {
        state::plan(prior, planned);
    }

    fn spec_json(diags: &mut Diagnostics, state: &SecretState) -> Json {
        state::spec_json(diags, state)
    }

    fn from_api(secret: &Secret, previous: &SecretState) -> SecretState {
        state::from_api(secret, previous)
    }

    async fn get(client: &Client, key: &Key) -> sless_client::Result<Secret> {
        client.get_secret(&key.namespace, &key.name).await
    }

    async fn create(client: &Client, key: &Key, spec: SecretData) -> sless_client::Result<Secret> {
        let name = key.name.clone();
        client
            .create_secret(&key.namespace, &SecretCreate { name, data: spec.data })
            .await
    }

    async fn patch(client: &Client, key: &Key, patch: &Json) -> sless_client::Result<Secret> {
        // A merge diff of `{"data": {...}}`: strings set keys, nulls remove them.
        let data = patch
            .get("data")
            .and_then(Json::as_object)
            .map(|data| {
                data.iter()
                    .map(|(key, value)| (key.clone(), value.as_str().map(str::to_string)))
                    .collect()
            })
            .unwrap_or_default();
        client
            .patch_secret(&key.namespace, &key.name, &SecretPatch { data })
            .await
    }

    async fn delete(client: &Client, key: &Key) -> sless_client::Result<()> {
        client.delete_secret(&key.namespace, &key.name).await
    }
}
