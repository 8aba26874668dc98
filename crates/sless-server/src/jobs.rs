//! Job runs: each in an instance of its own (not the function's serving
//! pool), with the function's timeout. A run waits (phase Pending) for the
//! function to have a ready version, then runs (Running) and ends Succeeded
//! with the handler's return value or Failed with its error. Deleting a job
//! or starting a newer run stops the running one. Runs happen on the
//! leader only, and a run is `Running` only while the leader that started
//! it leads: a leader that steps down stops its runs at once (on the
//! change of leadership itself, not at its next pass over the store,
//! which a leader cut off from the store may never finish) and finishes
//! them as Failed, interrupted; a new leader finishes every `Running` run
//! it finds so, and starts the `Pending` ones, which never reached the
//! handler. A run has one outcome: once finished, whoever finished it
//! first (the run itself, or a leader that found it interrupted), its
//! status is not written again for the same `run_id`. A namespace runs
//! `SLESS_NS_MAX_JOB_RUNS` at once at most: a run past it waits, `Pending`,
//! and starts when one of them ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::Value;
use sless_api::{FunctionStatus, JobPhase, JobSpec, JobStatus, Phase};

use crate::cluster::leader::Leadership;
use crate::invoker::{Invoker, Run};
use crate::store::{Kind, Store};
use sless_driver::{FunctionKey, InvokeError, RunId, TriggerKind};

/// A run in progress: its run id and the task that runs it.
type Running = (u64, tokio::task::JoinHandle<()>);

/// Runs jobs and remembers the running ones.
pub struct Jobs {
    store: Arc<dyn Store>,
    invoker: Arc<Invoker>,
    /// Runs in progress, by job.
    running: Mutex<HashMap<(String, String), Running>>,
    /// Runs of one namespace under way at once at most (SLESS_NS_MAX_JOB_RUNS).
    most_per_namespace: usize,
    /// Set when a run waits for its namespace's quota: the end of a run
    /// ([`Jobs::ended`]) then looks for it.
    waiting: AtomicBool,
    ended: Arc<tokio::sync::Notify>,
    leadership: Arc<Leadership>,
}

impl Jobs {
    /// Runs under way here in a namespace, but for those of job `except`
    /// (a new run of it replaces them).
    fn running_in(&self, namespace: &str, except: &str) -> usize {
        let running = self.running.lock().unwrap();
        running
            .keys()
            .filter(|(ns, job)| ns == namespace && job != except)
            .count()
    }

    pub fn new(
        store: Arc<dyn Store>,
        invoker: Arc<Invoker>,
        most_per_namespace: usize,
        leadership: Arc<Leadership>,
    ) -> Arc<Jobs> {
        let jobs = Arc::new(Jobs {
            store,
            invoker,
            running: Mutex::new(HashMap::new()),
            most_per_namespace,
            waiting: AtomicBool::new(false),
            ended: Arc::new(tokio::sync::Notify::new()),
            leadership: leadership.clone(),
        });
        tokio::spawn(stop_when_deposed(Arc::downgrade(&jobs), leadership.watch()));
        tokio::spawn(start_waiting(Arc::downgrade(&jobs), jobs.ended.clone(), leadership));
        jobs
    }

    /// On becoming leader: runs left `Running` belong to a leader that is
    /// gone (or to this server before a restart); they end Failed,
    /// interrupted. (`Pending` ones are started by [`Jobs::converge`].)
    pub async fn take_over(&self) -> crate::Result<()> {
        for record in self.store.list_all(Kind::Job).await? {
            let status: JobStatus = serde_json::from_value(record.status.clone()).unwrap_or_default();
            let ours = self
                .running
                .lock()
                .unwrap()
                .get(&(record.namespace.clone(), record.name.clone()))
                .is_some_and(|(run, _)| *run == status.run_id);
            if status.phase == JobPhase::Running && !ours {
                self.interrupted(
                    &record.namespace,
                    &record.name,
                    status,
                    "interrupted: the server running it stopped during the run; raise run_id to run it again",
                )
                .await?;
            }
        }
        Ok(())
    }

    /// No longer leading: this replica's runs stop, every one before
    /// anything is written (the store may not answer: a leader cut off from
    /// it); then the running ones end Failed, interrupted (unless the next
    /// leader has finished them already), the pending ones wait for it.
    pub async fn step_down(&self) {
        let running: Vec<(String, String)> = self.running.lock().unwrap().keys().cloned().collect();
        for (namespace, name) in &running {
            self.stop(namespace, name).await;
        }
        for (namespace, name) in running {
            let Ok(Some(record)) = self.store.get(Kind::Job, &namespace, &name).await else {
                continue;
            };
            let status: JobStatus = serde_json::from_value(record.status.clone()).unwrap_or_default();
            if status.phase == JobPhase::Running {
                let why = "interrupted: the server running it stopped leading; raise run_id to run it again";
                if let Err(e) = self.interrupted(&namespace, &name, status, why).await {
                    tracing::warn!(namespace, job = name, error = %e, "finishing an interrupted job run failed");
                }
            }
        }
    }

    async fn interrupted(&self, namespace: &str, name: &str, mut status: JobStatus, why: &str) -> crate::Result<()> {
        status.phase = JobPhase::Failed;
        status.error = Some(why.into());
        status.finished_at = Some(crate::store::now());
        self.save(namespace, name, &status).await?;
        tracing::warn!(
            namespace,
            job = name,
            run_id = status.run_id,
            "interrupted job run marked Failed"
        );
        Ok(())
    }

    /// On the leader: starts the runs the stored jobs ask for (see
    /// [`Jobs::start_due`]) and stops runs of deleted jobs.
    pub async fn converge(self: &Arc<Self>, records: &[crate::store::Record]) {
        self.start_due(records).await;
        let present: std::collections::HashSet<(String, String)> =
            records.iter().map(|r| (r.namespace.clone(), r.name.clone())).collect();
        let gone: Vec<(String, String)> = self
            .running
            .lock()
            .unwrap()
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for (namespace, name) in gone {
            self.stop(&namespace, &name).await;
        }
    }

    /// Starts the runs `records` ask for (a run_id above the last one run,
    /// or a run left `Pending`), as many as each namespace's quota lets run
    /// at once; the others wait, `Pending`.
    async fn start_due(self: &Arc<Self>, records: &[crate::store::Record]) {
        for record in records {
            let Ok(spec) = serde_json::from_value::<JobSpec>(record.spec.clone()) else {
                continue;
            };
            let status: JobStatus = serde_json::from_value(record.status.clone()).unwrap_or_default();
            let pending = status.phase == JobPhase::Pending && status.run_id == spec.run_id;
            if spec.run_id > 0 && (spec.run_id > status.run_id || pending) {
                if self.running_in(&record.namespace, &record.name) >= self.most_per_namespace {
                    tracing::info!(namespace = %record.namespace, job = %record.name, "job run waits for a run of its namespace to end (SLESS_NS_MAX_JOB_RUNS)");
                    self.waiting.store(true, Ordering::Relaxed);
                    continue;
                }
                self.run(&record.namespace, &record.name, spec.run_id).await;
            }
        }
    }

    /// Starts run `run_id` of a job (stopping a run still going); a run
    /// started already (by the handler or the reconciler) is left alone.
    pub async fn run(self: &Arc<Self>, namespace: &str, name: &str, run_id: u64) {
        let key = (namespace.to_string(), name.to_string());
        let mut running = self.running.lock().unwrap();
        if running.get(&key).is_some_and(|(run, _)| *run >= run_id) {
            return;
        }
        let older = running.remove(&key);
        let this = self.clone();
        let (ns, job) = key.clone();
        let task = tokio::spawn(async move {
            if let Some((run, task)) = older {
                this.cancel(&ns, &job, run, task).await;
            }
            if let Err(e) = this.execute(&ns, &job, run_id).await {
                tracing::error!(namespace = %ns, job = %job, error = %e, "job bookkeeping failed");
            }
            // However the run ended, its place is free.
            let mut running = this.running.lock().unwrap();
            if running
                .get(&(ns.clone(), job.clone()))
                .is_some_and(|(run, _)| *run == run_id)
            {
                running.remove(&(ns, job));
            }
            drop(running);
            this.ended.notify_one();
        });
        running.insert(key, (run_id, task));
    }

    /// Stops a running job: its task ends, then the driver cancels its run
    /// (and waits for its instance to be gone).
    pub async fn stop(&self, namespace: &str, name: &str) {
        let running = self
            .running
            .lock()
            .unwrap()
            .remove(&(namespace.to_string(), name.to_string()));
        if let Some((run, task)) = running {
            self.cancel(namespace, name, run, task).await;
        }
    }

    async fn cancel(&self, namespace: &str, name: &str, run: u64, task: tokio::task::JoinHandle<()>) {
        let id = RunId {
            namespace: namespace.to_string(),
            job: name.to_string(),
            run,
        };
        // The task first: it would see its instance stop and write the run
        // Failed as a crash of the function ("instance stopped"), where
        // whoever stops it says why (interrupted, deleted, run again).
        task.abort();
        if let Err(e) = self.invoker.driver.cancel_run(&id).await {
            tracing::warn!(run = %id, error = %e, "cancelling a job run failed");
        }
    }

    /// Writes a status if the job still belongs to this run and the run
    /// has not ended (one outcome per run: a deposed leader's run that
    /// ends after the next leader found it interrupted writes nothing); a
    /// result over [`INLINE_RESULT_BYTES`] goes to the record's detail,
    /// out of what lists of jobs read. The write is a compare-and-set of
    /// the status read: one that ended the run meanwhile wins.
    async fn save(&self, namespace: &str, name: &str, status: &JobStatus) -> crate::Result<bool> {
        let Some(record) = self.store.get(Kind::Job, namespace, name).await? else {
            return Ok(false);
        };
        let current: JobStatus = serde_json::from_value(record.status.clone()).unwrap_or_default();
        if current.run_id != status.run_id || current.phase.is_finished() {
            return Ok(false);
        }
        let mut status = status.clone();
        let result = status.result.as_ref().map(Value::to_string);
        let detail = result.filter(|text| text.len() > INLINE_RESULT_BYTES);
        if let Some(text) = &detail {
            status.result = None;
            status.result_bytes = Some(text.len() as u64);
        }
        let value = serde_json::to_value(&status).map_err(crate::Error::internal)?;
        self.store
            .swap_status_and_detail(Kind::Job, namespace, name, &record.status, &value, detail.as_deref())
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

        // Only a leader calls the handler, and only for a run nobody ended
        // meanwhile (a leader that took over and found it interrupted).
        if !self.leadership.is_leader() {
            return Ok(()); // Pending: the next leader starts it
        }
        status.phase = JobPhase::Running;
        status.started_at = Some(crate::store::now());
        if !self.save(namespace, name, &status).await? {
            tracing::info!(
                namespace,
                job = name,
                run_id,
                "job run ended or replaced before it started"
            );
            return Ok(());
        }
        let invocation = crate::invoker::event_call(TriggerKind::Job, spec.event.clone());
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
        Ok(())
    }
}

/// Stops this replica's runs as soon as it no longer leads: the
/// reconciler's step down comes at its next pass, which a leader cut off
/// from the store waits for as long as the store does not answer, while
/// the next leader takes over within seconds.
async fn stop_when_deposed(jobs: Weak<Jobs>, mut leading: tokio::sync::watch::Receiver<bool>) {
    while leading.changed().await.is_ok() {
        if *leading.borrow_and_update() {
            continue;
        }
        let Some(jobs) = jobs.upgrade() else {
            return;
        };
        if !jobs.running.lock().unwrap().is_empty() {
            tracing::warn!("no longer leading: stopping this replica's job runs");
            jobs.step_down().await;
        }
    }
}

/// Starts the runs that wait for their namespace's quota when a run ends,
/// on the leader (a single server has no periodic pass that would).
async fn start_waiting(jobs: Weak<Jobs>, ended: Arc<tokio::sync::Notify>, leadership: Arc<Leadership>) {
    loop {
        ended.notified().await;
        let Some(jobs) = jobs.upgrade() else {
            return;
        };
        if !leadership.is_leader() || !jobs.waiting.swap(false, Ordering::Relaxed) {
            continue;
        }
        match jobs.store.list_all(Kind::Job).await {
            Ok(records) => jobs.start_due(&records).await,
            Err(e) => {
                tracing::warn!(error = %e, "reading the jobs to start a waiting run failed");
                jobs.waiting.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// The largest result kept in a job's status as JSON; a larger one is kept
/// apart (`Store::detail`), so the lists of jobs that the leader and every
/// quota check read hold at most this much of each.
pub const INLINE_RESULT_BYTES: usize = 8 * 1024;

/// A job as its own GET shows it: with its result, kept apart or not.
pub async fn with_result(store: &dyn Store, mut job: sless_api::Job) -> crate::Result<sless_api::Job> {
    if job.status.result.is_none() && job.status.result_bytes.is_some() {
        if let Some(text) = store.detail(Kind::Job, &job.namespace, &job.name).await? {
            job.status.result = Some(serde_json::from_str(&text).map_err(crate::Error::internal)?);
        }
    }
    Ok(job)
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
