//! The validator trait every check mode implements, and what a check returns.

use async_trait::async_trait;

/// One file of the unpacked upload, with its path relative to the archive root
/// (`/`-separated, as in the zip).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    pub path: String,
    pub contents: Vec<u8>,
}

impl SourceFile {
    pub fn new(path: impl Into<String>, contents: impl Into<Vec<u8>>) -> Self {
        Self {
            path: path.into(),
            contents: contents.into(),
        }
    }
}

/// A check that let the upload through. `summary` is the short text for the
/// function's `status.validation`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every configured check ran and found nothing: `"passed: static"`,
    /// `"passed: static+llm"`.
    Passed { summary: String },
    /// The upload continues without a full verdict: the check is off, the LLM
    /// was skipped (size budget) or failed with the fail mode `open`, e.g.
    /// `"unchecked: llm timeout after 15s"`,
    /// `"skipped llm: 123456 bytes over budget 102400"`.
    Unchecked { summary: String },
}

impl Outcome {
    /// The text for the function's `status.validation`.
    pub fn summary(&self) -> &str {
        match self {
            Outcome::Passed { summary } | Outcome::Unchecked { summary } => summary,
        }
    }
}

/// A check that stops the upload. `Display` gives the whole error text for
/// the HTTP response body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The code looks like abuse: HTTP 400. `message` is
    /// `<rule id>: <reason> (<file>:<line>)` for a static rule hit, or
    /// `llm-review: <model's reason>` for an unsafe LLM verdict.
    #[error("code validation failed: {message}")]
    Rejected { message: String },
    /// The LLM could not give a verdict and the fail mode is `closed`:
    /// HTTP 503.
    #[error("code checker unavailable: {message}")]
    Unavailable { message: String },
}

/// Decides whether an upload may be built. Chosen once at start-up by
/// [`crate::build`]; callers never match on which one runs.
#[async_trait]
pub trait CodeValidator: Send + Sync {
    async fn check(&self, files: &[SourceFile]) -> Result<Outcome, CheckError>;
}
