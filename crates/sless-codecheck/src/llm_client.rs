//! The OpenAI-compatible chat client that asks for `{"safe": bool, "reason": string}`.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use crate::config::ConfigError;
use crate::prompt;
use crate::review_set::ReviewSet;

/// The model's answer.
#[derive(Debug, Deserialize)]
pub(crate) struct Verdict {
    pub safe: bool,
    pub reason: String,
}

/// Why the LLM gave no verdict. `Display` is the short text used in the log,
/// the status string and the 503 message.
#[derive(Debug)]
pub(crate) enum LlmFailure {
    Timeout(Duration),
    Unreachable(String),
    Status(u16),
    Malformed(String),
}

impl fmt::Display for LlmFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LlmFailure::Timeout(after) => write!(f, "llm timeout after {}", human(*after)),
            LlmFailure::Unreachable(why) => write!(f, "llm unreachable: {why}"),
            LlmFailure::Status(code) => write!(f, "llm answered HTTP {code}"),
            LlmFailure::Malformed(why) => write!(f, "llm reply malformed: {why}"),
        }
    }
}

/// `15s`, `1500ms`.
pub(crate) fn human(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Accepts a base URL (`http://host:8000`, `http://host:8000/v1`) or the full
/// `.../v1/chat/completions` URL and returns the full one.
pub(crate) fn chat_completions_url(endpoint: &str) -> Result<String, ConfigError> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    let lower = trimmed.to_ascii_lowercase();
    let has_host = ["http://", "https://"]
        .iter()
        .any(|scheme| lower.starts_with(scheme) && lower.len() > scheme.len());
    if !has_host {
        return Err(ConfigError::InvalidEndpoint {
            value: endpoint.to_owned(),
        });
    }
    Ok(if lower.ends_with("/chat/completions") {
        trimmed.to_owned()
    } else if lower.ends_with("/v1") {
        format!("{trimmed}/chat/completions")
    } else {
        format!("{trimmed}/v1/chat/completions")
    })
}

/// One configured LLM: where it is, how to authenticate, what to tell it.
pub(crate) struct LlmClient {
    pub http: reqwest::Client,
    pub url: String,
    pub api_key: Option<String>,
    pub model: String,
    pub system_prompt: String,
    pub timeout: Duration,
}

/// The innermost cause of an error ("Connection refused (os error 111)"),
/// short enough for a status string; the whole chain goes to the debug log.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

fn snippet(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Removes a Markdown code fence (```` ```json ... ``` ````) around the answer.
fn strip_fence(content: &str) -> &str {
    let trimmed = content.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let body = match rest.split_once('\n') {
        Some((_language, body)) => body,
        None => rest,
    };
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

/// `choices[0].message.content`, parsed as the verdict object.
fn parse_reply(body: &[u8]) -> Result<Verdict, LlmFailure> {
    let reply: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| LlmFailure::Malformed(format!("response body is not JSON: {e}")))?;
    let content = reply
        .pointer("/choices/0/message/content")
        .and_then(|c| c.as_str())
        .ok_or_else(|| LlmFailure::Malformed("no choices[0].message.content string".to_owned()))?;
    serde_json::from_str::<Verdict>(strip_fence(content)).map_err(|e| {
        LlmFailure::Malformed(format!(
            "expected {{\"safe\": bool, \"reason\": string}} ({e}), got {:?}",
            snippet(content)
        ))
    })
}

impl LlmClient {
    pub(crate) async fn review(&self, set: &ReviewSet<'_>) -> Result<Verdict, LlmFailure> {
        let nonce = prompt::nonce_for(set);
        let body = json!({
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": prompt::user_message(set, &nonce)},
            ],
        });
        let mut request = self.http.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let exchange = async {
            let response = request.send().await.map_err(|e| self.failure(e))?;
            let status = response.status();
            if !status.is_success() {
                return Err(LlmFailure::Status(status.as_u16()));
            }
            response.bytes().await.map_err(|e| self.failure(e))
        };
        let bytes = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_elapsed| LlmFailure::Timeout(self.timeout))??;
        parse_reply(&bytes)
    }

    fn failure(&self, err: reqwest::Error) -> LlmFailure {
        if err.is_timeout() {
            LlmFailure::Timeout(self.timeout)
        } else {
            tracing::debug!(url = %self.url, "llm request failed: {err:?}");
            LlmFailure::Unreachable(root_cause(&err))
        }
    }
}
