//! Configuration of the code-safety gate: mode, LLM endpoint, fail mode, size budget.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// Which checks run on an upload (`SLESS_CODE_CHECK`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// No check at all (the default).
    #[default]
    Off,
    /// The static rules only.
    Static,
    /// The static rules, then the LLM reviewer.
    Llm,
}

impl FromStr for Mode {
    type Err = ConfigError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(Mode::Off),
            "static" => Ok(Mode::Static),
            "llm" => Ok(Mode::Llm),
            _ => Err(ConfigError::InvalidMode {
                value: value.to_owned(),
            }),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Off => "off",
            Mode::Static => "static",
            Mode::Llm => "llm",
        })
    }
}

/// What happens when the LLM cannot give a verdict (unreachable, timeout,
/// non-2xx answer, malformed reply).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailMode {
    /// Warn in the log and let the upload through as "unchecked" (the default).
    #[default]
    Open,
    /// Refuse the upload with [`crate::CheckError::Unavailable`].
    Closed,
}

impl FromStr for FailMode {
    type Err = ConfigError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim().to_ascii_lowercase().as_str() {
            "open" => Ok(FailMode::Open),
            "closed" => Ok(FailMode::Closed),
            _ => Err(ConfigError::InvalidFailMode {
                value: value.to_owned(),
            }),
        }
    }
}

impl fmt::Display for FailMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailMode::Open => "open",
            FailMode::Closed => "closed",
        })
    }
}

/// Everything the gate needs, filled from the server's `SLESS_*` settings.
/// `Debug` never prints the API key.
#[derive(Clone)]
pub struct CheckConfig {
    pub mode: Mode,
    /// Base URL (`http://host:port`) or the full
    /// `.../v1/chat/completions` URL of an OpenAI-compatible server.
    pub llm_endpoint: Option<String>,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub llm_api_key: Option<String>,
    pub llm_model: String,
    /// Whole-request timeout for one LLM call.
    pub llm_timeout: Duration,
    /// Replaces the built-in system prompt with this file's contents.
    pub llm_prompt_file: Option<PathBuf>,
    pub fail_mode: FailMode,
    /// Most bytes of text sent to the LLM; a larger upload skips the LLM.
    pub size_budget_bytes: usize,
}

impl CheckConfig {
    pub const DEFAULT_MODEL: &'static str = "gpt-4o-mini";
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
    pub const DEFAULT_SIZE_BUDGET_BYTES: usize = 100 * 1024;
}

impl Default for CheckConfig {
    fn default() -> Self {
        Self {
            mode: Mode::default(),
            llm_endpoint: None,
            llm_api_key: None,
            llm_model: Self::DEFAULT_MODEL.to_owned(),
            llm_timeout: Self::DEFAULT_TIMEOUT,
            llm_prompt_file: None,
            fail_mode: FailMode::default(),
            size_budget_bytes: Self::DEFAULT_SIZE_BUDGET_BYTES,
        }
    }
}

impl fmt::Debug for CheckConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckConfig")
            .field("mode", &self.mode)
            .field("llm_endpoint", &self.llm_endpoint)
            .field("llm_api_key", &self.llm_api_key.as_ref().map(|_| "<redacted>"))
            .field("llm_model", &self.llm_model)
            .field("llm_timeout", &self.llm_timeout)
            .field("llm_prompt_file", &self.llm_prompt_file)
            .field("fail_mode", &self.fail_mode)
            .field("size_budget_bytes", &self.size_budget_bytes)
            .finish()
    }
}

/// A configuration the gate cannot start with. Each message names the bad
/// value or the setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid code check mode {value:?}: expected off, static or llm (SLESS_CODE_CHECK)")]
    InvalidMode { value: String },
    #[error("invalid code check fail mode {value:?}: expected open or closed")]
    InvalidFailMode { value: String },
    #[error("code check mode llm needs an LLM endpoint: set SLESS_LLM_ENDPOINT")]
    MissingEndpoint,
    #[error("invalid LLM endpoint {value:?}: expected an http:// or https:// URL (SLESS_LLM_ENDPOINT)")]
    InvalidEndpoint { value: String },
    #[error("cannot use LLM prompt file {}: {reason}", path.display())]
    PromptFile { path: PathBuf, reason: String },
    #[error("cannot build the LLM HTTP client: {reason}")]
    HttpClient { reason: String },
}
