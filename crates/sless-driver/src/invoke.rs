//! One call of a handler: what goes in, what comes out, and how it fails.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use crate::{FunctionKey, VersionRef};

/// What fired an invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerKind {
    Http,
    /// An attempt of an asynchronous call (`X-Sless-Invocation-Type:
    /// Event`): the HTTP request as it came, replayed.
    Async,
    Cron,
    Amqp,
    Job,
}

impl TriggerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Http => "http",
            TriggerKind::Async => "async",
            TriggerKind::Cron => "cron",
            TriggerKind::Amqp => "amqp",
            TriggerKind::Job => "job",
        }
    }

    /// The kind the handler is told (the shims' `kind`, runtimes/PROTOCOL.md):
    /// an asynchronous attempt is an HTTP request to the handler, the same
    /// as a direct call but for its `x-sless-async-id` and `x-sless-attempt`
    /// headers.
    pub fn for_handler(self) -> &'static str {
        match self {
            TriggerKind::Async => TriggerKind::Http.as_str(),
            other => other.as_str(),
        }
    }
}

/// One call of a handler.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub kind: TriggerKind,
    pub request_id: String,
    pub method: String,
    /// The path after `/fn/{ns}/{name}`: empty or starting with `/`.
    pub path: String,
    pub query: String,
    /// The request's headers as `(lowercase name, value)`, a repeated
    /// header's values joined with ", "; empty for non-HTTP kinds.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// The event for non-HTTP kinds.
    pub event: Option<Value>,
}

/// Names one job run, so that it can be cancelled.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId {
    pub namespace: String,
    pub job: String,
    pub run: u64,
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}#{}", self.namespace, self.job, self.run)
    }
}

/// Which output stream a handler wrote to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Text the handler printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    pub stream: OutputStream,
    pub text: String,
}

/// The handler's answer.
#[derive(Debug, Clone)]
pub struct InvocationResult {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub logs: Vec<LogChunk>,
    /// The handler printed more than the per-invocation cap.
    pub logs_truncated: bool,
    /// Whether this call waited for a new instance.
    pub cold_start: bool,
    pub version: u64,
}

/// Why an invocation has no answer from the handler.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// The version is not deployed (never, not yet, or retired): the
    /// caller decides whether that means "no ready version" or whether to
    /// deploy it and try again.
    #[error("{}", not_deployed_text(.0))]
    NotDeployed(VersionRef),
    #[error("function {0} is disabled: every trigger of it is disabled, or its replicas is 0 (the function's status.not_serving, or `sless get`, says which)")]
    Disabled(FunctionKey),
    #[error("function {0} is at capacity: too many requests waiting")]
    QueueFull(FunctionKey),
    /// No answer within `after`: the handler ran that long, or (`queued`)
    /// the call waited that long for a free instance and never reached it.
    #[error("{}", timeout_text(key, *after, *queued))]
    Timeout {
        key: FunctionKey,
        after: Duration,
        queued: bool,
    },
    #[error("function {key} crashed while handling the request: {reason}")]
    Crashed { key: FunctionKey, reason: String },
    /// The handler answered, with what cannot be sent on (too many
    /// headers, a malformed answer); the instance goes on.
    #[error("function {key} answered with what cannot be sent to the caller: {reason}")]
    BadAnswer { key: FunctionKey, reason: String },
    #[error("function {key} could not start: {reason}")]
    StartFailed { key: FunctionKey, reason: String },
    /// Its namespace runs as many instances as its quotas allow, those
    /// still finishing calls of an earlier version included: nothing ran,
    /// and the call may be tried again shortly. `reason` is for the caller.
    #[error("function {key} cannot start an instance now: {reason}")]
    AtQuota { key: FunctionKey, reason: String },
    /// A version called by number or alias could not be started for the
    /// call (no room for it yet, say): `reason` says why in words fit for
    /// the caller, who may try again after `retry_after`.
    #[error("version {target} cannot be started now: {reason}")]
    NotStarted {
        target: VersionRef,
        reason: String,
        retry_after: Duration,
    },
}

/// What a caller is told of a [`InvokeError::Timeout`]: a call that never
/// reached a handler is not said to be one the handler did not answer.
fn timeout_text(key: &FunctionKey, after: Duration, queued: bool) -> String {
    if queued {
        format!(
            "function {key} had no free instance within {after:?}: its instances were busy with other calls, and this \
             one never reached the handler (a function serves max_instances x concurrency calls at once)"
        )
    } else {
        format!("function {key} did not answer within {after:?}")
    }
}

/// What a caller is told of [`InvokeError::NotDeployed`]: version 0 is no
/// version at all (what a trigger or job of a function without a build
/// meets), which "version ns/f@0 is not deployed" did not say.
fn not_deployed_text(version: &VersionRef) -> String {
    if version.version == 0 {
        format!(
            "function {} has no version to call yet: no code was uploaded, or no build of it succeeded (`sless get {}` says which)",
            version.key, version.key.name
        )
    } else {
        format!("version {version} is not deployed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_without_a_version_is_not_said_to_miss_version_0() {
        let none = InvokeError::NotDeployed(VersionRef::new(FunctionKey::new("h", "nocode"), 0)).to_string();
        assert!(
            none.starts_with("function h/nocode has no version to call yet"),
            "{none}"
        );
        let retired = InvokeError::NotDeployed(VersionRef::new(FunctionKey::new("h", "f"), 3)).to_string();
        assert_eq!(retired, "version h/f@3 is not deployed");
    }
}
