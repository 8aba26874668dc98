//! Mode `llm`: the static rules first, then the LLM reviewer, with the fail policy.

use std::sync::Arc;

use async_trait::async_trait;

use crate::config::FailMode;
use crate::llm_client::LlmClient;
use crate::metrics::{CheckMetrics, Decision};
use crate::review_set::ReviewSet;
use crate::static_check::StaticCheck;
use crate::validator::{CheckError, CodeValidator, Outcome, SourceFile};

/// Longest model reason passed on to the rejection message.
const MAX_REASON_CHARS: usize = 500;

pub(crate) struct LlmCheck {
    pub static_check: StaticCheck,
    pub client: LlmClient,
    pub fail_mode: FailMode,
    pub size_budget_bytes: usize,
    pub metrics: Arc<CheckMetrics>,
}

/// The model's reason on one line, bounded in length.
fn clean_reason(reason: &str) -> String {
    let one_line = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return "no reason given".to_owned();
    }
    match one_line.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}...", &one_line[..cut]),
        None => one_line,
    }
}

impl LlmCheck {
    fn skipped(&self, why: String) -> Outcome {
        self.metrics.record(Decision::LlmSkipped);
        tracing::info!(decision = Decision::LlmSkipped.label(), "code check: {why}");
        Outcome::Unchecked { summary: why }
    }
}

#[async_trait]
impl CodeValidator for LlmCheck {
    async fn check(&self, files: &[SourceFile]) -> Result<Outcome, CheckError> {
        // The static verdict is final: a hit rejects without asking the LLM.
        self.static_check.verdict(files)?;

        let set = ReviewSet::select(files);
        if set.total_bytes > self.size_budget_bytes {
            return Ok(self.skipped(format!(
                "skipped llm: {} bytes over budget {}",
                set.total_bytes, self.size_budget_bytes
            )));
        }
        if set.files.is_empty() {
            return Ok(self.skipped("skipped llm: no text files to review".to_owned()));
        }

        match self.client.review(&set).await {
            Ok(verdict) if verdict.safe => {
                self.metrics.record(Decision::LlmSafe);
                tracing::info!(
                    decision = Decision::LlmSafe.label(),
                    files = set.files.len(),
                    bytes = set.total_bytes,
                    reason = %clean_reason(&verdict.reason),
                    "code check: llm says safe"
                );
                Ok(Outcome::Passed {
                    summary: "passed: static+llm".to_owned(),
                })
            }
            Ok(verdict) => {
                let reason = clean_reason(&verdict.reason);
                self.metrics.record(Decision::LlmUnsafe);
                tracing::warn!(
                    decision = Decision::LlmUnsafe.label(),
                    files = set.files.len(),
                    bytes = set.total_bytes,
                    "code check rejected upload: llm says unsafe: {reason}"
                );
                Err(CheckError::Rejected {
                    message: format!("llm-review: {reason}"),
                })
            }
            Err(failure) => {
                self.metrics.record(Decision::LlmError);
                let message = failure.to_string();
                tracing::warn!(
                    decision = Decision::LlmError.label(),
                    fail_mode = %self.fail_mode,
                    "code check: {message}"
                );
                match self.fail_mode {
                    FailMode::Open => Ok(Outcome::Unchecked {
                        summary: format!("unchecked: {message}"),
                    }),
                    FailMode::Closed => Err(CheckError::Unavailable { message }),
                }
            }
        }
    }
}
