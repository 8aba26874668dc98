//! Secrets: create, read (names and keys only: the API never returns
//! values), change values (merge patch of `data`), delete.

use reqwest::Method;
use sless_api::{List, Secret, SecretCreate, SecretPatch};

use crate::error::Result;
use crate::http::Client;

impl Client {
    /// `GET /v1/namespaces/{ns}/secrets`.
    pub async fn list_secrets(&self, ns: &str) -> Result<Vec<Secret>> {
        let list: List<Secret> = self.get_json(self.ns_url(ns, &["secrets"])).await?;
        Ok(list.items)
    }

    /// `GET /v1/namespaces/{ns}/secrets/{name}`.
    pub async fn get_secret(&self, ns: &str, name: &str) -> Result<Secret> {
        self.get_json(self.ns_url(ns, &["secrets", name])).await
    }

    /// `POST /v1/namespaces/{ns}/secrets`.
    pub async fn create_secret(&self, ns: &str, secret: &SecretCreate) -> Result<Secret> {
        self.send_json(Method::POST, self.ns_url(ns, &["secrets"]), secret)
            .await
    }

    /// `PATCH /v1/namespaces/{ns}/secrets/{name}`: a value sets a key, None
    /// removes it; the functions that use the secret roll.
    pub async fn patch_secret(&self, ns: &str, name: &str, patch: &SecretPatch) -> Result<Secret> {
        self.send_json(Method::PATCH, self.ns_url(ns, &["secrets", name]), patch)
            .await
    }

    /// `DELETE /v1/namespaces/{ns}/secrets/{name}` (409 while a function uses it).
    pub async fn delete_secret(&self, ns: &str, name: &str) -> Result<()> {
        self.delete(self.ns_url(ns, &["secrets", name])).await
    }
}
