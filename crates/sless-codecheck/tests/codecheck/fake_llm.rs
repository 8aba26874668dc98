//! A scripted OpenAI-compatible chat server on 127.0.0.1:0 that records what
//! it receives. It stands in for the external LLM service only.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

/// How the server answers every request.
#[derive(Clone)]
pub enum Reply {
    /// 200 with `choices[0].message.content` set to this text.
    Content(String),
    /// 200 with this raw body.
    RawBody(String),
    /// This status with a small error body.
    Status(u16),
    /// Sleep this long, then answer a safe verdict.
    Sleep(Duration),
}

impl Reply {
    pub fn verdict(safe: bool, reason: &str) -> Self {
        Reply::Content(json!({"safe": safe, "reason": reason}).to_string())
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Received {
    pub authorization: Option<String>,
    pub body: Value,
}

impl Received {
    pub fn message(&self, role: &str) -> String {
        self.body["messages"]
            .as_array()
            .expect("messages array")
            .iter()
            .find(|m| m["role"] == role)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_else(|| panic!("no {role} message in {}", self.body))
            .to_owned()
    }
}

#[derive(Clone)]
struct Script {
    reply: Reply,
    received: Arc<Mutex<Vec<Received>>>,
}

pub struct FakeLlm {
    /// Base URL, `http://127.0.0.1:<port>`.
    pub base_url: String,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeLlm {
    pub async fn start(reply: Reply) -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Script {
            reply,
            received: received.clone(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(script);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake llm");
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake llm serves");
        });
        Self {
            base_url,
            received,
            task,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The one request the server got.
    pub fn only_request(&self) -> Received {
        let received = self.received();
        assert_eq!(received.len(), 1, "expected exactly one LLM request");
        received.into_iter().next().unwrap()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chat(State(script): State<Script>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).expect("request body is JSON");
    script.received.lock().unwrap().push(Received {
        authorization: headers.get("authorization").map(|v| v.to_str().unwrap().to_owned()),
        body,
    });
    let completion = |content: &str| {
        json!({
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        })
        .to_string()
    };
    match script.reply {
        Reply::Content(content) => (StatusCode::OK, completion(&content)).into_response(),
        Reply::RawBody(body) => (StatusCode::OK, body).into_response(),
        Reply::Status(code) => (
            StatusCode::from_u16(code).unwrap(),
            r#"{"error": {"message": "scripted failure"}}"#,
        )
            .into_response(),
        Reply::Sleep(pause) => {
            tokio::time::sleep(pause).await;
            (StatusCode::OK, completion(r#"{"safe": true, "reason": "late"}"#)).into_response()
        }
    }
}
