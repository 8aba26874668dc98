//! Jobs: create (running when `run_id` > 0), read, rerun by raising
//! `run_id`, delete.

use reqwest::Method;
use serde_json::{json, Value};
use sless_api::{Job, JobCreate, List};

use crate::error::Result;
use crate::http::Client;

impl Client {
    /// `GET /v1/namespaces/{ns}/jobs`.
    pub async fn list_jobs(&self, ns: &str) -> Result<Vec<Job>> {
        let list: List<Job> = self.get_json(self.ns_url(ns, &["jobs"])).await?;
        Ok(list.items)
    }

    /// `GET /v1/namespaces/{ns}/jobs/{name}`.
    pub async fn get_job(&self, ns: &str, name: &str) -> Result<Job> {
        self.get_json(self.ns_url(ns, &["jobs", name])).await
    }

    /// `POST /v1/namespaces/{ns}/jobs`: with `run_id` > 0 the job starts its
    /// first run at once; with 0 it is only recorded (phase `Skipped`).
    pub async fn create_job(&self, ns: &str, job: &JobCreate) -> Result<Job> {
        self.send_json(Method::POST, self.ns_url(ns, &["jobs"]), job).await
    }

    /// `PATCH /v1/namespaces/{ns}/jobs/{name}` with a JSON merge patch.
    pub async fn patch_job(&self, ns: &str, name: &str, patch: &Value) -> Result<Job> {
        self.send_json(Method::PATCH, self.ns_url(ns, &["jobs", name]), patch)
            .await
    }

    /// Starts run `run_id` of an existing job (`PATCH {"run_id": ...}`); it
    /// must be above the job's last run.
    pub async fn rerun_job(&self, ns: &str, name: &str, run_id: u64) -> Result<Job> {
        self.patch_job(ns, name, &json!({ "run_id": run_id })).await
    }

    /// `DELETE /v1/namespaces/{ns}/jobs/{name}`.
    pub async fn delete_job(&self, ns: &str, name: &str) -> Result<()> {
        self.delete(self.ns_url(ns, &["jobs", name])).await
    }
}
