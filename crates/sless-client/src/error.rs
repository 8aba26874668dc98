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
    /// A 404 that is not the sless API saying an object does not exist:
    /// a body that is not its JSON error, or its router's fallback for a
    /// path it does not serve. The endpoint is not a sless server's root
    /// URL (`/v1` added, another service), or the server predates this
    /// call; either way nothing is known about the object asked for.
    #[error(
        "{url} answered {status} ({message}): the endpoint does not look like a sless API \
         (it should be the server's root URL, e.g. http://127.0.0.1:8080, without /v1), \
         or the server does not have this route"
    )]
    NotSlessApi {
        url: String,
        status: StatusCode,
        message: String,
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

    /// Whether the server said the object asked for does not exist (a
    /// 404 from the sless API itself, never [`Error::NotSlessApi`]).
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

    /// Builds the error for a non-2xx answer of `url` from its status and
    /// body.
    pub(crate) fn from_answer(url: &str, status: StatusCode, body: &[u8]) -> Error {
        let parsed = serde_json::from_slice::<ErrorBody>(body);
        let from_sless = parsed.as_ref().is_ok_and(|p| !p.error.starts_with(sless_api::NO_ROUTE));
        if status == StatusCode::NOT_FOUND && !from_sless {
            let message = match &parsed {
                Ok(parsed) => parsed.error.clone(),
                Err(_) => body_text(status, body),
            };
            return Error::NotSlessApi {
                url: url.to_string(),
                status,
                message,
            };
        }
        match parsed {
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
            Err(_) => Error::Api {
                status,
                message: body_text(status, body),
                body: None,
            },
        }
    }
}

/// A body that is not the JSON error shape, as a message: its text (at
/// most a line's worth), or the status's reason when it is empty.
fn body_text(status: StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body).trim().to_string();
    if text.is_empty() {
        return status.canonical_reason().unwrap_or("error").to_lowercase();
    }
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
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

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://h:1/v1/v1/namespaces/default/functions/f";

    #[test]
    fn only_the_sless_apis_own_404_says_an_object_is_missing() {
        let missing = Error::from_answer(URL, StatusCode::NOT_FOUND, br#"{"error": "function f not found"}"#);
        assert!(missing.is_not_found(), "{missing}");

        let no_route = br#"{"error": "no route for /v1/v1/namespaces/default/functions/f"}"#;
        let other_service = b"<html><body>404 page not found</body></html>";
        for body in [&no_route[..], &other_service[..], b""] {
            let err = Error::from_answer(URL, StatusCode::NOT_FOUND, body);
            assert!(!err.is_not_found(), "{err}");
            let text = err.to_string();
            assert!(text.contains(URL), "{text}");
            assert!(text.contains("does not look like a sless API"), "{text}");
        }
        let refused = Error::from_answer(URL, StatusCode::BAD_REQUEST, b"bad");
        assert_eq!(refused.status(), Some(StatusCode::BAD_REQUEST));
    }
}
