//! The client's error type: what went wrong talking to a sless server.

use reqwest::StatusCode;
use sless_api::ErrorBody;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error status; `message` is its `error`
    /// field (or the body's text when it was not the JSON error shape).
    #[error("{message} ({status})")]
    Api {
        status: StatusCode,
        message: String,
        /// The parsed error body, when the server sent one (boxed: it is
        /// large next to the other variants).
        body: Option<Box<ErrorBody>>,
    },
    /// The request never got an answer (connection refused, TLS, timeout).
    /// Says where and the innermost cause once (reqwest's own chain repeats
    /// the URL at every level), so `cause` is not also the error's source.
    #[error("cannot reach {}: {}", origin(url), root_cause(cause))]
    Transport { url: String, cause: reqwest::Error },
    /// The server answered 2xx with a body this client does not understand.
    #[error("unexpected answer from {url}: {message}")]
    Decode { url: String, message: String },
    /// The endpoint given to `Client::new` is not an http(s) URL.
    #[error("invalid endpoint {endpoint:?}: {message}")]
    Endpoint { endpoint: String, message: String },
    /// Another upload replaced the one being waited for before its build ended.
    #[error("upload {code_hash} of function {function:?} was replaced by upload {newer} before its build finished")]
    Superseded {
        function: String,
        code_hash: String,
        newer: String,
    },
    /// A wait (for a build, for a job) ran past its deadline.
    #[error("timed out after {secs} s waiting for {what}")]
    Timeout { what: String, secs: u64 },
}

impl Error {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(StatusCode::NOT_FOUND)
    }

    pub fn is_conflict(&self) -> bool {
        self.status() == Some(StatusCode::CONFLICT)
    }

    /// For a transport error where no connection could be made (nothing
    /// listening, unknown host): the server's origin, `http://host:port`.
    pub fn unreachable_server(&self) -> Option<String> {
        match self {
            Error::Transport { url, cause } if cause.is_connect() => Some(origin(url)),
            _ => None,
        }
    }

    /// Builds the error for a non-2xx answer from its status and body.
    pub(crate) fn from_answer(status: StatusCode, body: &[u8]) -> Error {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(parsed) => {
                let mut message = parsed.error.clone();
                if let Some(entry) = &parsed.entry {
                    if !message.contains(entry.as_str()) {
                        message = format!("{message} (entry {entry:?})");
                    }
                }
                Error::Api {
                    status,
                    message,
                    body: Some(Box::new(parsed)),
                }
            }
            Err(_) => {
                let text = String::from_utf8_lossy(body).trim().to_string();
                let message = if text.is_empty() {
                    status.canonical_reason().unwrap_or("error").to_lowercase()
                } else {
                    text
                };
                Error::Api {
                    status,
                    message,
                    body: None,
                }
            }
        }
    }
}

/// `scheme://host:port` of a URL (the URL itself if it does not parse).
fn origin(url: &str) -> String {
    reqwest::Url::parse(url).map_or_else(|_| url.to_string(), |u| u.origin().ascii_serialization())
}

/// The innermost error under `error`: `Connection refused (os error 111)`
/// rather than the layers of client machinery above it.
fn root_cause(error: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
