//! Calls through the public invoke gateway, `ANY /fn/{ns}/{name}[/{rest}]`.
//! These requests carry no bearer token: the handler sees every header, and
//! the API token is not the function's business.

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode, Url};

use crate::error::{Error, Result};
use crate::http::Client;

/// One call of a function.
#[derive(Debug, Clone, Default)]
pub struct InvokeRequest {
    pub method: Method,
    /// What follows the function's name, e.g. `/users/1?full=true`; may be empty.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The gateway's answer, whatever its status: a handler's 4xx is an answer,
/// not a client error. `error_message` reads the sless error shape.
#[derive(Debug, Clone)]
pub struct InvokeResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl InvokeResponse {
    /// The `error` field of a JSON error body (`{"error": "..."}`), if any.
    pub fn error_message(&self) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        value.get("error")?.as_str().map(str::to_string)
    }

    /// The message of sless's own error answer: a JSON object whose
    /// `error` is a string and whose `request_id` is the call's, as the
    /// gateway answers when it refuses or fails a call (and for a handler
    /// failure it hides). None for what a handler answered itself.
    pub fn sless_error(&self) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        let request_id = value.get("request_id")?.as_str()?;
        if Some(request_id) != self.request_id() {
            return None;
        }
        value.get("error")?.as_str().map(str::to_string)
    }

    /// The `x-request-id` sless gave the call.
    pub fn request_id(&self) -> Option<&str> {
        self.headers.get("x-request-id")?.to_str().ok()
    }
}

impl Client {
    /// The public URL of a function (without a trailing path).
    pub fn function_url(&self, ns: &str, name: &str) -> Url {
        self.url(&["fn", ns, name])
    }

    /// Calls the function through `/fn/{ns}/{name}{request.path}`. Only a
    /// failure to get an answer is an error; check `status` for the rest.
    pub async fn invoke(&self, ns: &str, name: &str, request: InvokeRequest) -> Result<InvokeResponse> {
        let url = self.gateway_url(ns, name, &request.path);
        let mut builder = self.public(request.method, &url);
        for (key, value) in &request.headers {
            builder = builder.header(key.as_str(), value.as_str());
        }
        let response = builder
            .body(request.body)
            .send()
            .await
            .map_err(|cause| Error::Transport {
                url: url.to_string(),
                cause,
            })?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(|cause| Error::Transport {
            url: url.to_string(),
            cause,
        })?;
        Ok(InvokeResponse {
            status,
            headers,
            body: body.to_vec(),
        })
    }

    fn gateway_url(&self, ns: &str, name: &str, rest: &str) -> Url {
        let mut url = self.function_url(ns, name);
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        if !path.is_empty() {
            let joined = if path.starts_with('/') {
                format!("{}{path}", url.path())
            } else {
                format!("{}/{path}", url.path())
            };
            url.set_path(&joined);
        }
        url.set_query(query.filter(|q| !q.is_empty()));
        url
    }
}

#[cfg(test)]
mod tests {
    use crate::Client;

    #[test]
    fn gateway_urls() {
        let client = Client::new("http://h:1/p", "t").unwrap();
        let url = |rest: &str| client.gateway_url("ns", "f", rest).to_string();
        assert_eq!(url(""), "http://h:1/p/fn/ns/f");
        assert_eq!(url("/"), "http://h:1/p/fn/ns/f/");
        assert_eq!(url("a/b"), "http://h:1/p/fn/ns/f/a/b");
        assert_eq!(url("/a%20b?x=1&y"), "http://h:1/p/fn/ns/f/a%20b?x=1&y");
        assert_eq!(url("?x=1"), "http://h:1/p/fn/ns/f?x=1");
    }
}
