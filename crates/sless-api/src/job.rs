//! Jobs: one run of a function with a JSON event, rerun by raising `run_id`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Largest job result the server keeps, as compact JSON.
pub const MAX_JOB_RESULT_BYTES: usize = 1024 * 1024;

/// Largest job event the server takes, as compact JSON: an asynchronous
/// call's bound, as Lambda's.
pub const MAX_JOB_EVENT_BYTES: usize = 256 * 1024;

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn default_wait() -> u32 {
    300
}

/// What the user declares about a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// A function of the job's namespace.
    pub function: String,
    /// The handler's event.
    #[serde(default = "empty_object")]
    pub event: Value,
    /// 0: create without running (phase Skipped). Raising it starts a new run.
    #[serde(default)]
    pub run_id: u64,
    /// Seconds a run may wait for the function to have a ready version.
    #[serde(default = "default_wait")]
    pub wait_timeout_sec: u32,
}

/// Where a job's latest run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub enum JobPhase {
    #[default]
    Skipped,
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl JobPhase {
    pub fn is_finished(self) -> bool {
        matches!(self, JobPhase::Skipped | JobPhase::Succeeded | JobPhase::Failed)
    }
}

/// What sless reports about a job's latest run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct JobStatus {
    pub phase: JobPhase,
    /// The run_id of the latest run started (0 before any).
    pub run_id: u64,
    /// The handler's return value. A list of jobs leaves out one whose JSON
    /// is over 8 KiB (`result_bytes` says how large); a job's own GET has it.
    pub result: Option<Value>,
    /// The size of a result kept apart from the job's record (over 8 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_bytes: Option<u64>,
    pub error: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The invocation record of the run.
    pub invocation_id: Option<String>,
}

/// `POST .../jobs` body.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobCreate {
    pub name: String,
    #[serde(flatten)]
    pub spec: JobSpec,
}

/// A job as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Job {
    pub name: String,
    pub namespace: String,
    #[serde(flatten)]
    pub spec: JobSpec,
    pub status: JobStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
