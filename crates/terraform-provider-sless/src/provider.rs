//! The provider block: `endpoint`, `token` and `namespace` (each also from
//! `SLESS_ENDPOINT`, `SLESS_TOKEN`, `SLESS_NAMESPACE`), and the three
//! resources it serves.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sless_client::Client;
use tf_provider::schema::{AttributeType, Schema};
use tf_provider::value::Value;
use tf_provider::{Diagnostics, DynamicResource, Provider};

use crate::alias::AliasResource;
use crate::connection::{Connection, Shared};
use crate::diagnostics::error;
use crate::function::FunctionResource;
use crate::job::JobResource;
use crate::resource::Managed;
use crate::schema::{optional, schema, sensitive};
use crate::secret::SecretResource;
use crate::trigger::TriggerResource;

/// The namespace of resources that set none, when neither the provider block
/// nor `SLESS_NAMESPACE` names one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The provider block as Terraform sends it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderConfig {
    pub endpoint: Value<String>,
    pub token: Value<String>,
    pub namespace: Value<String>,
}

/// The sless provider.
#[derive(Debug, Clone, Default)]
pub struct SlessProvider {
    shared: Shared,
}

/// Where a setting comes from: the block, then the environment.
fn setting(value: &Value<String>, env: &dyn Fn(&str) -> Option<String>, var: &str) -> Value<String> {
    match value {
        Value::Null => env(var).filter(|v| !v.is_empty()).into(),
        other => other.clone(),
    }
}

/// What the provider block resolves to: a connection, a reason to defer (an
/// unknown endpoint or token while planning), or errors on attributes.
pub fn resolve(
    config: &ProviderConfig,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Diagnostics,
) -> Result<Connection, (Value<String>, String)> {
    let namespace = match setting(&config.namespace, env, "SLESS_NAMESPACE") {
        Value::Null => Value::Value(DEFAULT_NAMESPACE.to_string()),
        other => other,
    };
    if let Some(ns) = namespace.as_ref_option() {
        if let Err(e) = sless_api::validate_name("namespace", ns) {
            error(diags, "Invalid namespace", e.to_string(), Some("namespace"));
        }
    }
    let endpoint = setting(&config.endpoint, env, "SLESS_ENDPOINT");
    let token = setting(&config.token, env, "SLESS_TOKEN");
    if endpoint.is_null() {
        error(
            diags,
            "The sless endpoint is not set",
            "Set endpoint in the provider \"sless\" block (e.g. endpoint = \"http://127.0.0.1:8080\") \
             or the SLESS_ENDPOINT environment variable.",
            Some("endpoint"),
        );
    }
    if token.is_null() {
        error(
            diags,
            "The sless token is not set",
            "Set token in the provider \"sless\" block or the SLESS_TOKEN environment variable \
             (the admin token is in the server's data dir, file admin-token).",
            Some("token"),
        );
    }
    let why = |what: &str| {
        format!("The provider's {what} was not known when Terraform configured it (it depends on a value known only after apply); apply the resources it depends on first.")
    };
    let (endpoint, token) = match (endpoint, token) {
        (Value::Value(endpoint), Value::Value(token)) => (endpoint, token),
        (Value::Unknown, _) => return Err((namespace, why("endpoint"))),
        (_, Value::Unknown) => return Err((namespace, why("token"))),
        _ => return Err((namespace, "The provider's endpoint or token is not set.".into())),
    };
    let client = match Client::new(&endpoint, token) {
        Ok(client) => client,
        Err(e) => {
            error(diags, "Invalid endpoint", e.to_string(), Some("endpoint"));
            return Err((namespace, e.to_string()));
        }
    };
    match namespace {
        Value::Value(namespace) => Ok(Connection { client, namespace }),
        other => Err((
            other,
            "The provider's namespace was not known when Terraform configured it.".into(),
        )),
    }
}

#[async_trait]
impl Provider for SlessProvider {
    type Config<'a> = ProviderConfig;
    type MetaState<'a> = tf_provider::value::ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(schema(
            "sless: functions, triggers and jobs on a sless server.",
            vec![
                (
                    "endpoint",
                    optional(
                        AttributeType::String,
                        "URL of the sless server, e.g. http://127.0.0.1:8080. Default: $SLESS_ENDPOINT.",
                    ),
                ),
                (
                    "token",
                    sensitive(optional(
                        AttributeType::String,
                        "Bearer token for the REST API. Default: $SLESS_TOKEN.",
                    )),
                ),
                (
                    "namespace",
                    optional(
                        AttributeType::String,
                        "Namespace of resources that do not set one. Default: $SLESS_NAMESPACE, else \"default\".",
                    ),
                ),
            ],
        ))
    }

    async fn configure<'a>(
        &self,
        diags: &mut Diagnostics,
        _terraform_version: String,
        config: Self::Config<'a>,
    ) -> Option<()> {
        let env = |var: &str| std::env::var(var).ok();
        match resolve(&config, &env, diags) {
            Ok(connection) => self.shared.set(connection),
            Err((namespace, why)) => self.shared.defer(namespace, why),
        }
        Some(())
    }

    fn get_resources(&self, _diags: &mut Diagnostics) -> Option<HashMap<String, Box<dyn DynamicResource>>> {
        let shared = &self.shared;
        let resources: [(&str, Box<dyn DynamicResource>); 5] = [
            (
                "function",
                Box::new(Managed::new(FunctionResource::default(), shared.clone())),
            ),
            ("trigger", Box::new(Managed::new(TriggerResource, shared.clone()))),
            ("job", Box::new(Managed::new(JobResource, shared.clone()))),
            ("alias", Box::new(Managed::new(AliasResource, shared.clone()))),
            ("secret", Box::new(Managed::new(SecretResource, shared.clone()))),
        ];
        Some(resources.into_iter().map(|(name, r)| (name.to_string(), r)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(s: &str) -> Value<String> {
        Value::Value(s.to_string())
    }

    #[test]
    fn settings_come_from_the_block_then_the_environment() {
        let env = |var: &str| match var {
            "SLESS_ENDPOINT" => Some("http://env:1".to_string()),
            "SLESS_TOKEN" => Some("env-token".to_string()),
            _ => None,
        };
        let mut diags = Diagnostics::default();
        let connection = resolve(&ProviderConfig::default(), &env, &mut diags).unwrap();
        assert!(diags.errors.is_empty());
        assert_eq!(connection.client.endpoint().as_str(), "http://env:1/");
        assert_eq!(connection.namespace, "default");

        let config = ProviderConfig {
            endpoint: known("http://block:2"),
            token: known("t"),
            namespace: known("team-a"),
        };
        let connection = resolve(&config, &env, &mut diags).unwrap();
        assert_eq!(connection.client.endpoint().as_str(), "http://block:2/");
        assert_eq!(connection.namespace, "team-a");
    }

    #[test]
    fn a_missing_endpoint_or_token_is_an_error_on_that_attribute() {
        let mut diags = Diagnostics::default();
        assert!(resolve(&ProviderConfig::default(), &|_| None, &mut diags).is_err());
        let attributes: Vec<String> = diags.errors.iter().map(|d| d.attribute.to_string()).collect();
        assert_eq!(attributes, ["endpoint", "token"]);
        assert!(diags.errors[0].detail.contains("SLESS_ENDPOINT"));
    }

    #[test]
    fn an_unknown_endpoint_defers_without_an_error_and_a_bad_one_is_reported() {
        let mut diags = Diagnostics::default();
        let config = ProviderConfig {
            endpoint: Value::Unknown,
            token: known("t"),
            namespace: Value::Null,
        };
        let (namespace, why) = resolve(&config, &|_| None, &mut diags).unwrap_err();
        assert!(diags.errors.is_empty());
        assert_eq!(namespace, known("default"));
        assert!(why.contains("endpoint"));

        let config = ProviderConfig {
            endpoint: known("ftp://x"),
            token: known("t"),
            namespace: known("Bad_NS"),
        };
        assert!(resolve(&config, &|_| None, &mut diags).is_err());
        let attributes: Vec<String> = diags.errors.iter().map(|d| d.attribute.to_string()).collect();
        assert_eq!(attributes, ["namespace", "endpoint"]);
    }
}
