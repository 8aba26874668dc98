//! A stand-in for the Kubernetes API server (there is no cluster on this
//! machine): a `tower_test` mock service behind a real `kube::Client`, as
//! kube-rs's controller guide tests reconcilers. A scenario names, step by
//! step, the one request it expects next and what the "API server"
//! answers; a request that does not come within a second fails the test,
//! and so does any other request.

use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// The way to answer a request taken with [`ApiServer::hold`].
pub type Responder = tower_test::mock::SendResponse<Response<Body>>;

/// Answers a held request: `status` with `answer` (a string is sent as is).
pub fn respond(send: Responder, status: u16, answer: Value) {
    let text = match answer {
        Value::String(text) => text,
        other => other.to_string(),
    };
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(text.into_bytes()))
            .unwrap(),
    );
}

/// How long a step waits for its request.
const STEP: Duration = Duration::from_secs(1);

/// The scenario's side of the mocked API.
pub struct ApiServer {
    handle: Handle,
}

/// One request as the API server saw it.
#[derive(Debug)]
pub struct Seen {
    pub query: String,
    pub content_type: String,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
}

/// A client whose every request goes to the returned [`ApiServer`].
pub fn mocked() -> (Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer { handle })
}

impl ApiServer {
    /// Expects `method path` next (query aside), answers `status` with
    /// `answer`, and returns what was sent.
    pub async fn expect(&mut self, method: &str, path: &str, status: u16, answer: Value) -> Seen {
        let (seen, send) = self.hold(method, path).await;
        respond(send, status, answer);
        seen
    }

    /// Expects `method path` next and returns it with the means to answer
    /// it later (a watch kept open).
    pub async fn hold(&mut self, method: &str, path: &str) -> (Seen, Responder) {
        let (seen_method, seen_path, seen, send) = self.next(&format!("{method} {path}")).await;
        assert_eq!(
            (seen_method.as_str(), seen_path.as_str()),
            (method, path),
            "unexpected request {seen_method} {seen_path}?{}",
            seen.query
        );
        (seen, send)
    }

    /// The next request, whatever it is (`expected` names it in the
    /// failure when none comes): its method and path, what was sent, and
    /// the means to answer it.
    pub async fn next(&mut self, expected: &str) -> (String, String, Seen, Responder) {
        let (request, send) = tokio::time::timeout(STEP, self.handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("expected {expected}: no request came"))
            .unwrap_or_else(|| panic!("expected {expected}: the client is gone"));
        let seen_method = request.method().to_string();
        let seen_path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or_default().to_string();
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        (
            seen_method,
            seen_path,
            Seen {
                query,
                content_type,
                body,
            },
            send,
        )
    }

    /// Expects a server-side apply (field manager `sless`, forced) at
    /// `path` and answers with the object as applied, `uid` set.
    pub async fn apply(&mut self, path: &str) -> Value {
        self.apply_at(path, None).await
    }

    /// [`ApiServer::apply`], answering with `resource_version` too (an
    /// apply that changed the object gets a new one).
    pub async fn apply_at(&mut self, path: &str, resource_version: Option<&str>) -> Value {
        let (request, send) = tokio::time::timeout(STEP, self.handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("expected an apply of {path}: no request came"))
            .unwrap();
        assert_eq!(
            (request.method().as_str(), request.uri().path()),
            ("PATCH", path),
            "unexpected request {}",
            request.uri()
        );
        let query = request.uri().query().unwrap_or_default().to_string();
        assert!(
            query.contains("fieldManager=sless") && query.contains("force=true"),
            "{query}"
        );
        assert_eq!(
            request.headers()[http::header::CONTENT_TYPE],
            "application/apply-patch+yaml"
        );
        let mut object: Value = serde_json::from_slice(&request.into_body().collect_bytes().await.unwrap()).unwrap();
        object["metadata"]["uid"] = json!(format!("uid-of-{}", object["metadata"]["name"].as_str().unwrap()));
        if let Some(version) = resource_version {
            object["metadata"]["resourceVersion"] = json!(version);
        }
        send.send_response(
            Response::builder()
                .body(Body::from(object.to_string().into_bytes()))
                .unwrap(),
        );
        object
    }

    /// No request comes within a short while.
    pub async fn nothing_more(&mut self) {
        if let Ok(Some((request, _))) =
            tokio::time::timeout(Duration::from_millis(200), self.handle.next_request()).await
        {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}

/// The API server's answer for a missing object.
pub fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "reason": "NotFound", "code": 404, "message": "not found"})
}

/// A Status of success (deletes).
pub fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 200})
}
