//! Every call of a handler goes through here, whatever fired it (gateway,
//! cron, queue, job): the driver runs it, and the call is measured, counted
//! and recorded the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sless_api::LogLine;

use crate::error::Error;
use crate::invocations::InvocationLog;
use crate::metrics::Metrics;
use crate::record::{record_id, status_label, Queued, Text};
use crate::routes::{Routes, Selector};
use crate::versions::Versions;
use sless_driver::{Driver, FunctionKey, Invocation, InvocationResult, InvokeError, RunId, VersionRef};

pub struct Invoker {
    pub driver: Arc<dyn Driver>,
    pub routes: Arc<Routes>,
    /// Versions besides `$latest`, deployed here when first called.
    pub versions: Arc<Versions>,
    pub log: Arc<InvocationLog>,
    pub metrics: Arc<Metrics>,
}

/// Where an invocation runs.
#[derive(Clone, Copy)]
pub enum Run<'a> {
    /// On the instances of the function's `$latest` version.
    Serving,
    /// In an instance of its own (a job run).
    Dedicated(&'a RunId),
}

impl Invoker {
    /// Runs one invocation of `$latest` and records it.
    pub async fn invoke(
        &self,
        key: &FunctionKey,
        invocation: Invocation,
        run: Run<'_>,
    ) -> Result<InvocationResult, InvokeError> {
        self.run(key, &Selector::Latest, invocation, run).await.0
    }

    /// Runs one invocation of the version `selector` names (a number, an
    /// alias, `$latest`) and records it.
    pub async fn invoke_at(
        &self,
        key: &FunctionKey,
        selector: &Selector,
        invocation: Invocation,
        run: Run<'_>,
    ) -> Result<InvocationResult, InvokeError> {
        self.run(key, selector, invocation, run).await.0
    }

    /// Like `invoke`, also returning the id of the record written (none when nothing ran).
    pub async fn invoke_recorded(
        &self,
        key: &FunctionKey,
        invocation: Invocation,
        run: Run<'_>,
    ) -> (Result<InvocationResult, InvokeError>, Option<String>) {
        let (result, id) = self.run(key, &Selector::Latest, invocation, run).await;
        (result, id.map(record_id))
    }

    /// Runs the call and queues its record; the record's id stays in parts
    /// (formatting it on every gateway call only to drop it showed in profiles).
    async fn run(
        &self,
        key: &FunctionKey,
        selector: &Selector,
        invocation: Invocation,
        run: Run<'_>,
    ) -> (Result<InvocationResult, InvokeError>, Option<(u64, u32)>) {
        let kind = invocation.kind;
        let request_id = Text::new(&invocation.request_id);
        let id = invocation.request_id.clone();
        let bytes_in =
            invocation.body.len() as u64 + invocation.event.as_ref().map_or(0, |e| e.to_string().len() as u64);
        let started_at = crate::store::now();
        let clock = Instant::now();
        let result = self
            .call(key, selector, invocation, run)
            .await
            .map(|result| checked_status(result, &id));
        let duration = clock.elapsed();
        let (status, error, version, bytes_out, cold, logs, truncated) = match &result {
            Ok(r) => (
                r.status,
                (r.status >= 400).then(|| error_text(&r.body)),
                r.version,
                r.body.len() as u64,
                r.cold_start,
                r.logs
                    .iter()
                    .map(|l| LogLine {
                        stream: l.stream.as_str().to_string(),
                        text: l.text.clone(),
                    })
                    .collect(),
                r.logs_truncated,
            ),
            // The handler was called but never answered.
            Err(e @ (InvokeError::Timeout { .. } | InvokeError::Crashed { .. } | InvokeError::BadAnswer { .. })) => {
                let code = if matches!(e, InvokeError::Timeout { .. }) {
                    504
                } else {
                    502
                };
                let error = crate::bounds::clip(e.to_string(), crate::bounds::MAX_ERROR_BYTES);
                (code, Some(error), 0, 0, false, Vec::new(), false)
            }
            // The handler could not be loaded (an import that fails, say): the
            // call failed as surely as a crash, and the load error (the user's
            // traceback) is what the owner needs to see in `sless logs`.
            Err(InvokeError::StartFailed { reason, .. }) => {
                let first_line = reason.lines().next().unwrap_or_default();
                let (text, truncated) = capped(reason, START_ERROR_CAP);
                let logs = vec![LogLine {
                    stream: "stderr".to_string(),
                    text: text.to_string(),
                }];
                let error = crate::bounds::clip(
                    format!("the function failed to start: {first_line}"),
                    crate::bounds::MAX_ERROR_BYTES,
                );
                (502, Some(error), 0, 0, false, logs, truncated)
            }
            // Nothing ran (no version, none started, disabled, queue full): no record.
            Err(
                InvokeError::NotDeployed(_)
                | InvokeError::NotStarted { .. }
                | InvokeError::Disabled(_)
                | InvokeError::QueueFull(_)
                | InvokeError::AtQuota { .. },
            ) => return (result, None),
        };
        self.metrics.invocation(
            &key.namespace,
            &key.name,
            kind.as_str(),
            &status_label(kind, status, &mut [0; 3]),
            duration,
            cold,
        );
        self.metrics
            .version_call(&key.namespace, &key.name, version, selector.alias().unwrap_or(""));
        let record = Queued {
            namespace: Text::new(&key.namespace),
            function: Text::new(&key.name),
            request_id,
            id: (started_at.timestamp_micros() as u64, rand::random::<u32>()),
            started_at,
            version,
            alias: selector.alias().map(Into::into),
            kind,
            status,
            // Whole microseconds: as precise as a call's timing is, and fewer digits to store.
            duration_ms: duration.as_micros() as f64 / 1000.0,
            error,
            bytes_in,
            bytes_out,
            cold_start: cold,
            logs,
            logs_truncated: truncated,
        };
        let id = record.id;
        self.log.record(record);
        (result, Some(id))
    }
}

impl Invoker {
    /// Resolves the version and has the driver run the call. A version
    /// retired between resolving and calling (`$latest` moved on) is
    /// resolved again; a version called by number or alias that does not
    /// run here yet is deployed first. [`InvokeError::NotDeployed`] with
    /// version 0 means there is nothing to call (no ready version here, no
    /// such alias); with a number, no such version is kept.
    async fn call(
        &self,
        key: &FunctionKey,
        selector: &Selector,
        invocation: Invocation,
        run: Run<'_>,
    ) -> Result<InvocationResult, InvokeError> {
        // Bounded: each retry follows a move of `$latest` or a deploy.
        for _ in 0..3 {
            let target = self
                .routes
                .resolve(key, selector)
                .unwrap_or_else(|| VersionRef::new(key.clone(), 0));
            if target.version == 0 {
                return Err(InvokeError::NotDeployed(target));
            }
            let addressed = *selector != Selector::Latest;
            if addressed {
                self.versions.used(&target);
            }
            let result = match run {
                Run::Serving => self.driver.invoke(&target, &invocation).await,
                Run::Dedicated(id) => self.driver.run_once(&target, id, &invocation).await,
            };
            if addressed {
                self.versions.answered(&target);
            }
            match result {
                Err(InvokeError::NotDeployed(_)) if addressed => match self.versions.ensure(&target).await {
                    Ok(true) => continue,
                    Ok(false) => return Err(InvokeError::NotDeployed(target)),
                    Err(e) => {
                        tracing::warn!(version = %target, error = %e, "deploying a version for a call failed");
                        return Err(match e {
                            // Said for the caller (see `Versions::ensure`).
                            Error::Unavailable { message, retry_after } => InvokeError::NotStarted {
                                target,
                                reason: crate::bounds::clip(message, crate::bounds::MAX_ERROR_BYTES),
                                retry_after: Duration::from_secs(retry_after.unwrap_or(1)),
                            },
                            _ => InvokeError::NotDeployed(target),
                        });
                    }
                },
                Err(InvokeError::NotDeployed(_)) if self.routes.latest(key).as_ref() != Some(&target) => continue,
                other => return other,
            }
        }
        Err(InvokeError::NotDeployed(VersionRef::new(key.clone(), 0)))
    }
}

/// The most of a start-up error kept in a record's log (a handler's own
/// output is capped alike).
const START_ERROR_CAP: usize = 64 * 1024;

/// `text` cut to at most `max` bytes on a character boundary, and whether it was cut.
fn capped(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// Statuses a handler may answer with. Anything else (1xx would switch
/// protocols or hang the caller, and numbers outside 100-999 are not HTTP)
/// becomes a 502 that says why, for the caller, the record and the metrics.
pub const HANDLER_STATUSES: std::ops::RangeInclusive<u16> = 200..=599;

/// The result, or a 502 in its place when the handler's status is not one
/// of [`HANDLER_STATUSES`].
fn checked_status(result: InvocationResult, request_id: &str) -> InvocationResult {
    if HANDLER_STATUSES.contains(&result.status) {
        return result;
    }
    let error = format!(
        "the handler answered with status {}; a handler's statusCode must be between 200 and 599",
        result.status
    );
    InvocationResult {
        status: 502,
        headers: vec![("content-type".into(), "application/json".into())],
        body: serde_json::to_vec(&serde_json::json!({ "error": error, "request_id": request_id }))
            .expect("plain JSON")
            .into(),
        ..result
    }
}

/// The call of a trigger, a job or a queued message: `event` for the
/// handler, nothing of HTTP.
pub fn event_call(kind: sless_driver::TriggerKind, event: serde_json::Value) -> Invocation {
    Invocation {
        kind,
        request_id: format!("{:016x}", rand::random::<u64>()),
        method: String::new(),
        path: String::new(),
        query: String::new(),
        headers: Default::default(),
        body: Default::default(),
        event: Some(event),
    }
}

/// The `error` field of a JSON error body, else the body's start; at most
/// [`crate::bounds::MAX_ERROR_BYTES`] of it.
pub fn error_text(body: &[u8]) -> String {
    let text = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned());
    crate::bounds::clip(text, crate::bounds::MAX_ERROR_BYTES)
}

#[cfg(test)]
mod tests {
    use super::capped;

    #[test]
    fn start_errors_are_capped_on_a_character_boundary() {
        assert_eq!(capped("short", 10), ("short", false));
        assert_eq!(capped("aé", 2), ("a", true));
        assert_eq!(capped("aéb", 3), ("aé", true));
    }
}
