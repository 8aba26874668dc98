//! Job runs: each in an instance of its own (not the function's serving
//! pool), with the function's timeout. A run waits (phase Pending) for the
//! function to have a ready version, then runs (Running) and ends Succeeded
//! with the handler's return value or Failed with its error. Deleting a job
//! or starting a newer run stops the running one; a run a restart
//! interrupted is finished as Failed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use sless_api::{FunctionStatus, JobPhase, JobSpec, JobStatus, Phase};

use crate::invoker::{Invoker, Run};
use crate::store::{Kind, Store};
use sless_driver::{FunctionKey, Invocation, InvokeError, RunId, TriggerKind};

/// A run in progress: its run id and the task that runs it.
type Running = (u64, tokio::task::JoinHandle<()>);

/// Runs jobs and remembers the running ones.
pub struct Jobs {
    store: Arc<dyn Store>,
    invoker: Arc<Invoker>,
    /// Runs in progress, by job.
    running: Mutex<HashMap<(String, String), Running>>,
}

impl Jobs {
    /// Finishes runs a restart interrupted.
    pub async fn start(store: Arc<dyn Store>, invoker: Arc<Invoker>) -> crate::Result<Arc<Jobs>> {
        for record in store.list_all(Kind::Job).await? {
            let mut status: JobStatus = serde_json::from_value(record.status.clone()).unwrap_or_default();
            if matches!(status.phase, JobPhase::Pending | JobPhase::Running) {
                status.phase = JobPhase::Failed;
                status.error =
                    Some("interrupted: the server restarted during the run; raise run_id to run it again".into());
                status.finished_at = Some(crate::store::now());
                let value = serde_json::to_value(&status).map_err(crate::Error::internal)?;
                store
                    .update_status(Kind::Job, &record.namespace, &record.name, &value)
                    .await?;
                tracing::warn!(namespace = %record.namespace, job = %record.name, "job run interrupted by a restart marked Failed");
            }
        }
        Ok(Arc::new(Jobs {
            store,
            invoker,
            running: Mutex::new(HashMap::new()),
        }))
    }

    /// Starts run `run_id` of a job (stopping a run still going).
    pub async fn run(self: &Arc<Self>, namespace: &str, name: &str, run_id: u64) {
        self.stop(namespace, name).await;
        let this = self.clone();
        let (ns, job) = (namespace.to_string(), name.to_string());
        let task = tokio::spawn(async move {
            if let Err(e) = this.execute(&ns, &job, run_id).await {
                tracing::error!(namespace = %ns, job = %job, error = %e, "job bookkeeping failed");
            }
        });
        let key = (namespace.to_string(), name.to_string());
        if let Some((_, old)) = self.running.lock().unwrap().insert(key, (run_id, task)) {
            old.abort();
        }
    }

    /// Stops a running job: the driver cancels its run (and waits for its
    /// instance to be gone), then the run's task ends.
    pub async fn stop(&self, namespace: &str, name: &str) {
        let running = self
            .running
            .lock()
            .unwrap()
            .remove(&(namespace.to_string(), name.to_string()));
        let Some((run, task)) = running else {
            return;
        };
        let id = RunId {
            namespace: namespace.to_string(),
            job: name.to_string(),
            run,
        };
        if let Err(e) = self.invoker.driver.cancel_run(&id).await {
            tracing::warn!(run = %id, error = %e, "cancelling a job run failed");
        }
        task.abort();
    }

    /// Writes a status if the job still belongs to this run.
    async fn save(&self, namespace: &str, name: &str, status: &JobStatus) -> crate::Result<bool> {
        let Some(record) = self.store.get(Kind::Job, namespace, name).await? else {
            return Ok(false);
        };
        let current: JobStatus = serde_json::from_value(record.status.clone()).unwrap_or_default();
        if current.run_id != status.run_id {
            return Ok(false);
        }
        let value = serde_json::to_value(status).map_err(crate::Error::internal)?;
        self.store
            .swap_status(Kind::Job, namespace, name, &record.status, &value)
            .await
    }

    async fn execute(&self, namespace: &str, name: &str, run_id: u64) -> crate::Result<()> {
        let Some(record) = self.store.get(Kind::Job, namespace, name).await? else {
            return Ok(());
        };
        let spec: JobSpec = serde_json::from_value(record.spec).map_err(crate::Error::internal)?;
        let mut status = JobStatus {
            phase: JobPhase::Pending,
            run_id,
            ..JobStatus::default()
        };
        self.save(namespace, name, &status).await?;
        let key = FunctionKey::new(namespace, &spec.function);

        // Wait for a ready version of the function.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(spec.wait_timeout_sec));
        loop {
            let function = self.store.get(Kind::Function, namespace, &spec.function).await?;
            let ready = function
                .as_ref()
                .and_then(|f| serde_json::from_value::<FunctionStatus>(f.status.clone()).ok())
                .is_some_and(|s| {
                    s.version > 0 && (s.phase == Phase::Ready || s.phase == Phase::Failed || s.phase == Phase::Building)
                });
            if ready {
                break;
            }
            let why = if function.is_none() {
                format!("function {:?} does not exist in namespace {namespace:?}", spec.function)
            } else {
                format!("function {:?} has no ready version", spec.function)
            };
            if tokio::time::Instant::now() >= deadline {
                status.phase = JobPhase::Failed;
                status.error = Some(format!("{why} after waiting {}s", spec.wait_timeout_sec));
                status.finished_at = Some(crate::store::now());
                self.save(namespace, name, &status).await?;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        status.phase = JobPhase::Running;
        status.started_at = Some(crate::store::now());
        self.save(namespace, name, &status).await?;
        let invocation = Invocation {
            kind: TriggerKind::Job,
            request_id: format!("{:016x}", rand::random::<u64>()),
            method: String::new(),
            path: String::new(),
            query: String::new(),
            headers: Default::default(),
            body: Default::default(),
            event: Some(spec.event.clone()),
        };
        let run = RunId {
            namespace: namespace.to_string(),
            job: name.to_string(),
            run: run_id,
        };
        let (result, record) = self
            .invoker
            .invoke_recorded(&key, invocation, Run::Dedicated(&run))
            .await;
        status.finished_at = Some(crate::store::now());
        status.invocation_id = record;
        match result {
            Ok(r) if r.status < 400 => match kept_result(&r.body) {
                Ok(result) => {
                    status.phase = JobPhase::Succeeded;
                    status.result = Some(result);
                }
                Err(why) => {
                    status.phase = JobPhase::Failed;
                    status.error = Some(why);
                }
            },
            Ok(r) => {
                status.phase = JobPhase::Failed;
                status.error = Some(crate::invoker::error_text(&r.body));
            }
            Err(e @ InvokeError::Timeout { .. }) => {
                status.phase = JobPhase::Failed;
                status.error = Some(format!("timed out: {e}"));
            }
            Err(e) => {
                status.phase = JobPhase::Failed;
                status.error = Some(crate::bounds::clip(e.to_string(), crate::bounds::MAX_ERROR_BYTES));
            }
        }
        tracing::info!(namespace, job = name, run_id, phase = ?status.phase, "job run finished");
        self.save(namespace, name, &status).await?;
        let mut running = self.running.lock().unwrap();
        let key = (namespace.to_string(), name.to_string());
        if running.get(&key).is_some_and(|(run, _)| *run == run_id) {
            running.remove(&key);
        }
        Ok(())
    }
}

/// The handler's answer as the job's `result` (its JSON, else its text),
/// or why it is not kept: deeper or larger than a stored status may hold.
pub(crate) fn kept_result(body: &[u8]) -> Result<Value, String> {
    use crate::bounds::{check_depth, MAX_JOB_RESULT_BYTES};
    if body.len() > MAX_JOB_RESULT_BYTES {
        return Err(format!(
            "the handler's result is {} bytes; a job keeps results of at most {MAX_JOB_RESULT_BYTES} bytes",
            body.len()
        ));
    }
    // The parser refuses more than 127 levels: such a body is not kept as text either.
    let result = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) if e.to_string().contains("recursion limit") => {
            return Err(format!(
                "the handler's result is nested more than {} levels deep, more than a job keeps",
                crate::bounds::MAX_JSON_DEPTH
            ))
        }
        Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()),
    };
    check_depth("the handler's result", &result)?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::kept_result;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn results_are_kept_within_depth_and_size() {
        assert_eq!(kept_result(b"{\"a\": 1}").unwrap(), serde_json::json!({"a": 1}));
        assert_eq!(kept_result(b"plain text").unwrap(), serde_json::json!("plain text"));
        assert!(kept_result(nested(64).as_bytes()).is_ok());
        for depth in [65, 127, 200] {
            let refused = kept_result(nested(depth).as_bytes()).unwrap_err();
            assert!(refused.contains("nested"), "{depth}: {refused}");
        }
        let big = format!("\"{}\"", "x".repeat(crate::bounds::MAX_JOB_RESULT_BYTES));
        assert!(kept_result(big.as_bytes()).unwrap_err().contains("bytes"));
    }
}
