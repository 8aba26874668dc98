//! Functions: create, read, update (merge patch), delete, and code uploads.

use reqwest::Method;
use serde_json::Value;
use sless_api::{Function, FunctionCreate, List};

use crate::error::{Error, Result};
use crate::http::Client;

impl Client {
    /// `GET /v1/whoami`: the token's name and the namespaces it covers.
    pub async fn whoami(&self) -> Result<sless_api::WhoAmI> {
        self.get_json(self.url(&["v1", "whoami"])).await
    }

    /// `GET /v1/namespaces/{ns}/functions`.
    pub async fn list_functions(&self, ns: &str) -> Result<Vec<Function>> {
        let list: List<Function> = self.get_json(self.ns_url(ns, &["functions"])).await?;
        Ok(list.items)
    }

    /// `GET /v1/namespaces/{ns}/functions/{name}`.
    pub async fn get_function(&self, ns: &str, name: &str) -> Result<Function> {
        self.get_json(self.ns_url(ns, &["functions", name])).await
    }

    /// `POST /v1/namespaces/{ns}/functions`: 409 (`Error::is_conflict`) when
    /// it exists.
    pub async fn create_function(&self, ns: &str, function: &FunctionCreate) -> Result<Function> {
        self.send_json(Method::POST, self.ns_url(ns, &["functions"]), function)
            .await
    }

    /// `PATCH /v1/namespaces/{ns}/functions/{name}` with a JSON merge patch of
    /// the spec (`null` resets a field to its default).
    pub async fn patch_function(&self, ns: &str, name: &str, patch: &Value) -> Result<Function> {
        self.send_json(Method::PATCH, self.ns_url(ns, &["functions", name]), patch)
            .await
    }

    /// `DELETE /v1/namespaces/{ns}/functions/{name}`: a conflict (409)
    /// while triggers or jobs name the function.
    pub async fn delete_function(&self, ns: &str, name: &str) -> Result<()> {
        self.delete(self.ns_url(ns, &["functions", name])).await
    }

    /// `DELETE /v1/namespaces/{ns}/functions/{name}?cascade=true`: the
    /// function and the triggers and jobs that name it.
    pub async fn delete_function_cascade(&self, ns: &str, name: &str) -> Result<()> {
        let mut url = self.ns_url(ns, &["functions", name]);
        url.query_pairs_mut().append_pair("cascade", "true");
        self.delete(url).await
    }

    /// `DELETE /v1/namespaces/{ns}/functions/{name}?orphan=true`: the
    /// function only, leaving the triggers and jobs that name it for the
    /// caller to delete or re-point (they take no work meanwhile).
    pub async fn delete_function_orphan(&self, ns: &str, name: &str) -> Result<()> {
        let mut url = self.ns_url(ns, &["functions", name]);
        url.query_pairs_mut().append_pair("orphan", "true");
        self.delete(url).await
    }

    /// `PUT /v1/namespaces/{ns}/functions/{name}/code` with a zip: the
    /// function as it is once the archive is accepted (phase `Building`,
    /// `status.code_hash` naming this upload). Wait for the build with
    /// `wait_for_build`.
    pub async fn upload_code(&self, ns: &str, name: &str, zip: Vec<u8>) -> Result<Function> {
        let url = self.ns_url(ns, &["functions", name, "code"]);
        let request = self
            .api_with_timeout(Method::PUT, &url, Some(self.upload_timeout()))
            .header(reqwest::header::CONTENT_TYPE, "application/zip")
            .body(zip);
        let function: Function = self.json(request, &url).await?;
        if function.status.code_hash.is_none() {
            return Err(Error::Decode {
                url: url.to_string(),
                message: "the accepted upload has no status.code_hash".into(),
            });
        }
        Ok(function)
    }
}
