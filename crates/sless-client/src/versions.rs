//! Versions (listed, fetched, deleted) and aliases: create or move, patch,
//! delete.

use reqwest::Method;
use serde_json::Value;
use sless_api::{Alias, AliasSpec, FunctionVersion, List};

use crate::error::Result;
use crate::http::Client;

impl Client {
    /// `GET /v1/namespaces/{ns}/functions/{name}/versions`, newest first.
    pub async fn list_versions(&self, ns: &str, function: &str) -> Result<Vec<FunctionVersion>> {
        let list: List<FunctionVersion> = self
            .get_json(self.ns_url(ns, &["functions", function, "versions"]))
            .await?;
        Ok(list.items)
    }

    /// `GET /v1/namespaces/{ns}/functions/{name}/versions/{version}`.
    pub async fn get_version(&self, ns: &str, function: &str, version: u64) -> Result<FunctionVersion> {
        let version = version.to_string();
        self.get_json(self.ns_url(ns, &["functions", function, "versions", &version]))
            .await
    }

    /// `DELETE /v1/namespaces/{ns}/functions/{name}/versions/{version}`:
    /// not the serving version, nor one an alias points at.
    pub async fn delete_version(&self, ns: &str, function: &str, version: u64) -> Result<()> {
        let version = version.to_string();
        self.delete(self.ns_url(ns, &["functions", function, "versions", &version]))
            .await
    }

    /// `GET /v1/namespaces/{ns}/functions/{name}/aliases`.
    pub async fn list_aliases(&self, ns: &str, function: &str) -> Result<Vec<Alias>> {
        let list: List<Alias> = self
            .get_json(self.ns_url(ns, &["functions", function, "aliases"]))
            .await?;
        Ok(list.items)
    }

    /// `GET /v1/namespaces/{ns}/functions/{name}/aliases/{alias}`.
    pub async fn get_alias(&self, ns: &str, function: &str, alias: &str) -> Result<Alias> {
        self.get_json(self.ns_url(ns, &["functions", function, "aliases", alias]))
            .await
    }

    /// `PUT .../aliases/{alias}`: creates the alias or moves it, atomically.
    pub async fn put_alias(&self, ns: &str, function: &str, alias: &str, spec: &AliasSpec) -> Result<Alias> {
        self.send_json(
            Method::PUT,
            self.ns_url(ns, &["functions", function, "aliases", alias]),
            spec,
        )
        .await
    }

    /// `PATCH .../aliases/{alias}` with a JSON merge patch of its spec.
    pub async fn patch_alias(&self, ns: &str, function: &str, alias: &str, patch: &Value) -> Result<Alias> {
        self.send_json(
            Method::PATCH,
            self.ns_url(ns, &["functions", function, "aliases", alias]),
            patch,
        )
        .await
    }

    /// `DELETE .../aliases/{alias}`.
    pub async fn delete_alias(&self, ns: &str, function: &str, alias: &str) -> Result<()> {
        self.delete(self.ns_url(ns, &["functions", function, "aliases", alias]))
            .await
    }
}
