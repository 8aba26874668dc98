//! The `Client` itself: endpoint, token, and the one place requests are sent
//! and answers decoded into API types or `Error`s.

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// How long an ordinary API call may take before it fails.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Code uploads carry up to tens of MiB and are checked before the answer.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// A connection to one sless server with one bearer token. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: String,
    timeout: Duration,
}

impl Client {
    /// A client for the server at `endpoint` (`http://host:port`, optionally
    /// with a path prefix) authenticating with `token`.
    pub fn new(endpoint: &str, token: impl Into<String>) -> Result<Client> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("sless-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Endpoint {
                endpoint: endpoint.to_string(),
                message: e.to_string(),
            })?;
        Client::with_http(http, endpoint, token)
    }

    /// Like `new`, with a caller-built `reqwest::Client` (proxies, TLS roots).
    pub fn with_http(http: reqwest::Client, endpoint: &str, token: impl Into<String>) -> Result<Client> {
        let bad = |message: &str| Error::Endpoint {
            endpoint: endpoint.to_string(),
            message: message.to_string(),
        };
        if !endpoint.contains("://") {
            return Err(bad(&format!(
                "a URL starts with its scheme: http://{}",
                endpoint.trim()
            )));
        }
        let base = Url::parse(endpoint.trim()).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad("the scheme must be http or https"));
        }
        if base.cannot_be_a_base() || base.host().is_none() {
            return Err(bad("expected a URL like http://127.0.0.1:8080"));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(bad("the endpoint must not have a query or fragment"));
        }
        Ok(Client {
            http,
            base,
            token: token.into(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Sets the time limit of ordinary API calls (default 60 s). Uploads get
    /// at least 10 minutes; invocations and followed logs have no limit.
    pub fn timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The server's base URL.
    pub fn endpoint(&self) -> &Url {
        &self.base
    }

    /// `GET /healthz`: Ok when the server answers.
    pub async fn health(&self) -> Result<()> {
        let url = self.url(&["healthz"]);
        let request = self.http.get(url.clone()).timeout(self.timeout);
        self.send(request, &url).await.map(drop)
    }

    /// The base URL with `segments` appended, each percent-encoded.
    pub(crate) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in with_http: the endpoint can be a base")
            .pop_if_empty()
            .extend(segments);
        url
    }

    /// `/v1/namespaces/{ns}/{segments...}`.
    pub(crate) fn ns_url(&self, ns: &str, segments: &[&str]) -> Url {
        let mut all = vec!["v1", "namespaces", ns];
        all.extend_from_slice(segments);
        self.url(&all)
    }

    /// An authenticated API request with the ordinary time limit.
    pub(crate) fn api(&self, method: Method, url: &Url) -> RequestBuilder {
        self.http
            .request(method, url.clone())
            .bearer_auth(&self.token)
            .timeout(self.timeout)
    }

    /// An authenticated request with a caller-chosen time limit (`None`: none).
    pub(crate) fn api_with_timeout(&self, method: Method, url: &Url, timeout: Option<Duration>) -> RequestBuilder {
        let request = self.http.request(method, url.clone()).bearer_auth(&self.token);
        match timeout {
            Some(timeout) => request.timeout(timeout),
            None => request,
        }
    }

    pub(crate) fn upload_timeout(&self) -> Duration {
        self.timeout.max(UPLOAD_TIMEOUT)
    }

    /// An unauthenticated request (the public gateway must never see the token).
    pub(crate) fn public(&self, method: Method, url: &Url) -> RequestBuilder {
        self.http.request(method, url.clone())
    }

    /// Sends `request`; a non-2xx answer becomes `Error::Api`.
    pub(crate) async fn send(&self, request: RequestBuilder, url: &Url) -> Result<Response> {
        let response = request.send().await.map_err(|cause| Error::Transport {
            url: url.to_string(),
            cause,
        })?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response.bytes().await.unwrap_or_default();
        Err(Error::from_answer(url.as_str(), status, &body))
    }

    /// Sends `request` and decodes the JSON answer as `T`.
    pub(crate) async fn json<T: DeserializeOwned>(&self, request: RequestBuilder, url: &Url) -> Result<T> {
        let response = self.send(request, url).await?;
        let bytes = response.bytes().await.map_err(|cause| Error::Transport {
            url: url.to_string(),
            cause,
        })?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode {
            url: url.to_string(),
            message: e.to_string(),
        })
    }

    pub(crate) async fn get_json<T: DeserializeOwned>(&self, url: Url) -> Result<T> {
        self.json(self.api(Method::GET, &url), &url).await
    }

    pub(crate) async fn send_json<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: &B,
    ) -> Result<T> {
        self.json(self.api(method, &url).json(body), &url).await
    }

    pub(crate) async fn delete(&self, url: Url) -> Result<()> {
        self.send(self.api(Method::DELETE, &url), &url).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::Client;

    #[test]
    fn urls_keep_a_path_prefix_and_encode_segments() {
        let client = Client::new("http://h:1/prefix/", "t").unwrap();
        assert_eq!(
            client.ns_url("ns", &["functions", "a/b"]).as_str(),
            "http://h:1/prefix/v1/namespaces/ns/functions/a%2Fb"
        );
        let client = Client::new("http://h:1", "t").unwrap();
        assert_eq!(client.url(&["healthz"]).as_str(), "http://h:1/healthz");
        for bare in ["127.0.0.1:8080", "localhost:8080"] {
            let message = Client::new(bare, "t").err().unwrap().to_string();
            assert!(message.contains(&format!("http://{bare}")), "{message}");
        }
    }

    #[test]
    fn endpoints_must_be_http_urls() {
        for bad in ["", "h:1", "ftp://h/", "http://h/?q=1", "mailto:x@y"] {
            assert!(Client::new(bad, "t").is_err(), "{bad}");
        }
    }
}
