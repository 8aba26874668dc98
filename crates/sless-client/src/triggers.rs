//! Triggers: create, read, update (merge patch), enable/disable, delete.

use reqwest::Method;
use serde_json::{json, Value};
use sless_api::{List, Trigger, TriggerCreate};

use crate::error::Result;
use crate::http::Client;

impl Client {
    /// `GET /v1/namespaces/{ns}/triggers`.
    pub async fn list_triggers(&self, ns: &str) -> Result<Vec<Trigger>> {
        let list: List<Trigger> = self.get_json(self.ns_url(ns, &["triggers"])).await?;
        Ok(list.items)
    }

    /// `GET /v1/namespaces/{ns}/triggers/{name}`.
    pub async fn get_trigger(&self, ns: &str, name: &str) -> Result<Trigger> {
        self.get_json(self.ns_url(ns, &["triggers", name])).await
    }

    /// `POST /v1/namespaces/{ns}/triggers`.
    pub async fn create_trigger(&self, ns: &str, trigger: &TriggerCreate) -> Result<Trigger> {
        self.send_json(Method::POST, self.ns_url(ns, &["triggers"]), trigger)
            .await
    }

    /// `PATCH /v1/namespaces/{ns}/triggers/{name}` with a JSON merge patch.
    pub async fn patch_trigger(&self, ns: &str, name: &str, patch: &Value) -> Result<Trigger> {
        self.send_json(Method::PATCH, self.ns_url(ns, &["triggers", name]), patch)
            .await
    }

    /// Turns a trigger on or off in place (`PATCH {"enabled": ...}`).
    pub async fn set_trigger_enabled(&self, ns: &str, name: &str, enabled: bool) -> Result<Trigger> {
        self.patch_trigger(ns, name, &json!({ "enabled": enabled })).await
    }

    /// `DELETE /v1/namespaces/{ns}/triggers/{name}`.
    pub async fn delete_trigger(&self, ns: &str, name: &str) -> Result<()> {
        self.delete(self.ns_url(ns, &["triggers", name])).await
    }
}
