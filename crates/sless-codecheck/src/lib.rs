//! Code-safety gate: decides, between unpacking an upload and building it,
//! whether the code looks like abuse of the platform (crypto miners, DDoS or
//! botnet agents, port scanners, reverse shells and C2, container escapes,
//! obfuscation hiding any of these).
//!
//! # Use
//!
//! ```no_run
//! # async fn upload(files: Vec<sless_codecheck::SourceFile>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use sless_codecheck::{build, CheckConfig, CheckMetrics, Mode};
//!
//! let metrics = Arc::new(CheckMetrics::new());
//! let config = CheckConfig { mode: Mode::Static, ..CheckConfig::default() };
//! let validator = build(&config, metrics.clone())?; // once, at start-up
//! let outcome = validator.check(&files).await?;     // per upload
//! let status_validation = outcome.summary();        // e.g. "passed: static"
//! let metrics_text = metrics.render_prometheus();   // appended to /metrics
//! # Ok(()) }
//! ```
//!
//! # Public API
//!
//! - [`SourceFile`]: a file of the unpacked archive (relative path, bytes).
//! - [`CodeValidator`]: `async fn check(&self, &[SourceFile]) -> Result<Outcome, CheckError>`.
//! - [`Outcome`]: `Passed { summary }` or `Unchecked { summary }`; the summary
//!   is the function's `status.validation`.
//! - [`CheckError`]: `Rejected { message }` (HTTP 400, displays as
//!   `code validation failed: <message>`) or `Unavailable { message }`
//!   (HTTP 503, displays as `code checker unavailable: <message>`).
//! - [`CheckConfig`], [`Mode`] (`off|static|llm`), [`FailMode`]
//!   (`open|closed`), [`ConfigError`]; [`build`] picks the validator.
//! - [`CheckMetrics`] and [`Decision`]: counters rendered as
//!   `sless_code_checks_total{decision="..."}`.
//! - [`DEFAULT_SYSTEM_PROMPT`]: the LLM prompt a prompt file replaces.
//!
//! # Modes
//!
//! - `off` (default): nothing runs; summary `unchecked: code check off`.
//! - `static`: the rule table in `rules.rs` over every file (binaries only for
//!   the miner, pool and scanner-name rules). A hit rejects with
//!   `<rule id>: <reason> (<file>:<line>)`; otherwise `passed: static`.
//! - `llm`: the static rules first (their rejection is final and the LLM is
//!   not called), then one `POST .../v1/chat/completions` to an
//!   OpenAI-compatible endpoint with the text files (.py .js .ts .json .yaml
//!   .yml .txt .sh .sql .go, not under `node_modules/`, UTF-8 without NUL),
//!   each between delimiters carrying a fresh random nonce, as untrusted data.
//!   The reply's `choices[0].message.content` must be
//!   `{"safe": bool, "reason": string}` (a ```` ```json ```` fence is
//!   tolerated). Safe: `passed: static+llm`. Unsafe: rejected with
//!   `llm-review: <reason>`. Over the size budget or nothing to send: the LLM
//!   is skipped, `skipped llm: <n> bytes over budget <b>`. Unreachable,
//!   timeout, non-2xx or malformed: with fail mode `open` a warning and
//!   `unchecked: <why>` (e.g. `unchecked: llm timeout after 15s`), with
//!   `closed` [`CheckError::Unavailable`].
//!
//! Every decision is logged with `tracing` and counted in [`CheckMetrics`].
//!
//! **Invariant:** no verdict of the LLM can undo a static rule hit.

mod config;
mod llm_check;
mod llm_client;
mod metrics;
mod off_check;
mod prompt;
mod review_set;
mod rules;
mod static_check;
mod validator;

use std::sync::Arc;

pub use config::{CheckConfig, ConfigError, FailMode, Mode};
pub use metrics::{CheckMetrics, Decision};
pub use prompt::DEFAULT_SYSTEM_PROMPT;
pub use validator::{CheckError, CodeValidator, Outcome, SourceFile};

use llm_check::LlmCheck;
use llm_client::{chat_completions_url, LlmClient};
use off_check::OffCheck;
use static_check::StaticCheck;

/// Builds the validator for `config.mode`. Call once at start-up: mode `llm`
/// without an endpoint, a bad endpoint URL, or an unreadable or empty prompt
/// file is a [`ConfigError`] naming what to fix.
pub fn build(config: &CheckConfig, metrics: Arc<CheckMetrics>) -> Result<Arc<dyn CodeValidator>, ConfigError> {
    Ok(match config.mode {
        Mode::Off => Arc::new(OffCheck),
        Mode::Static => Arc::new(StaticCheck::new(metrics)),
        Mode::Llm => Arc::new(LlmCheck {
            static_check: StaticCheck::new(metrics.clone()),
            client: llm_client(config)?,
            fail_mode: config.fail_mode,
            size_budget_bytes: config.size_budget_bytes,
            metrics,
        }),
    })
}

fn llm_client(config: &CheckConfig) -> Result<LlmClient, ConfigError> {
    let endpoint = config
        .llm_endpoint
        .as_deref()
        .filter(|e| !e.trim().is_empty())
        .ok_or(ConfigError::MissingEndpoint)?;
    let system_prompt = match &config.llm_prompt_file {
        None => DEFAULT_SYSTEM_PROMPT.to_owned(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::PromptFile {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            if text.trim().is_empty() {
                return Err(ConfigError::PromptFile {
                    path: path.clone(),
                    reason: "the file is empty".to_owned(),
                });
            }
            text
        }
    };
    let http = reqwest::Client::builder()
        .timeout(config.llm_timeout)
        .build()
        .map_err(|e| ConfigError::HttpClient { reason: e.to_string() })?;
    Ok(LlmClient {
        http,
        url: chat_completions_url(endpoint)?,
        api_key: config.llm_api_key.clone().filter(|k| !k.is_empty()),
        model: config.llm_model.clone(),
        system_prompt,
        timeout: config.llm_timeout,
    })
}
