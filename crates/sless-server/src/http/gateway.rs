//! The public invoke gateway `ANY /fn/{ns}/{name}[/{rest}]`: turns an HTTP
//! request into an invocation of the function's serving version and the
//! handler's answer back into a response, with a request id on every one.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use sless_api::validate_name;

use super::body::RawBody;
use crate::driver::{FunctionKey, Invocation, InvokeError, TriggerKind};
use crate::error::Error;
use crate::state::AppState;
use crate::store::Kind;

/// Hop-by-hop headers a handler may not set on the response.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

/// Invoke a function. Public: no token needed. Any method; the path after
/// the function name, the query, headers and body reach the handler.
#[utoipa::path(post, path = "/fn/{ns}/{name}", tag = "gateway",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name")),
    responses((status = 200, description = "The handler's answer"), (status = 404, body = sless_api::ErrorBody),
        (status = 413, body = sless_api::ErrorBody), (status = 429, body = sless_api::ErrorBody, description = "Too many requests waiting (Retry-After)"),
        (status = 502, body = sless_api::ErrorBody, description = "The instance crashed"),
        (status = 503, body = sless_api::ErrorBody, description = "No ready version yet (Retry-After) or disabled"),
        (status = 504, body = sless_api::ErrorBody, description = "The handler ran past timeout_sec")))]
pub async fn invoke(
    State(state): State<Arc<AppState>>,
    Path(params): Path<Vec<(String, String)>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<RawBody, Error>,
) -> Response {
    let request_id = request_id(&headers);
    match serve(&state, params, method, uri, headers, body, &request_id).await {
        Ok(response) => response,
        Err(e) => e.into_response_for(&request_id),
    }
}

async fn serve(
    state: &AppState,
    params: Vec<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<RawBody, Error>,
    request_id: &str,
) -> Result<Response, Error> {
    let mut ns = String::new();
    let mut name = String::new();
    let mut rest = None;
    for (k, v) in params {
        match k.as_str() {
            "ns" => ns = v,
            "name" => name = v,
            "rest" => rest = Some(v),
            _ => {}
        }
    }
    let key = FunctionKey::new(ns, name);
    if validate_name("namespace", &key.namespace).is_err() || validate_name("function", &key.name).is_err() {
        return Err(not_found(&key));
    }
    if state.triggers.http_blocked(&key) {
        return Err(Error::Unavailable {
            message: format!("function {key} is disabled: its http triggers are all disabled"),
            retry_after: None,
        });
    }
    let RawBody(body) = body?;
    let path = match rest {
        Some(rest) => format!("/{rest}"),
        None if uri.path().ends_with('/') => "/".to_string(),
        None => String::new(),
    };
    let invocation = Invocation {
        kind: TriggerKind::Http,
        request_id: request_id.to_string(),
        method: method.to_string(),
        path,
        query: uri.query().unwrap_or("").to_string(),
        headers: joined_headers(&headers),
        body,
        event: None,
    };
    match state.invoker.invoke(&key, invocation, crate::invoker::Run::Pool).await {
        Ok(result) => {
            let mut response = Response::new(Body::from(result.body));
            *response.status_mut() = StatusCode::from_u16(result.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let out = response.headers_mut();
            for (k, v) in result.headers {
                let lower = k.to_ascii_lowercase();
                if HOP_BY_HOP.contains(&lower.as_str()) {
                    continue;
                }
                if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(lower.as_bytes()), HeaderValue::from_str(&v)) {
                    out.insert(k, v);
                }
            }
            if let Ok(v) = HeaderValue::from_str(request_id) {
                out.insert("x-request-id", v);
            }
            Ok(response)
        }
        Err(InvokeError::NotReady(_)) => {
            // Not deployed: either no such function or no ready version yet.
            match state.store.get(Kind::Function, &key.namespace, &key.name).await? {
                None => Err(not_found(&key)),
                Some(_) => Err(Error::Unavailable {
                    message: format!("function {key} has no ready version yet; retry shortly"),
                    retry_after: Some(2),
                }),
            }
        }
        Err(e @ InvokeError::Disabled(_)) => Err(Error::Unavailable {
            message: e.to_string(),
            retry_after: None,
        }),
        Err(e @ InvokeError::QueueFull(_)) => Err(Error::TooManyRequests {
            message: e.to_string(),
            retry_after: 1,
        }),
        Err(e @ InvokeError::Timeout { .. }) => Err(Error::GatewayTimeout(e.to_string())),
        Err(e @ (InvokeError::Crashed { .. } | InvokeError::StartFailed { .. })) => {
            Err(Error::BadGateway(e.to_string()))
        }
    }
}

fn not_found(key: &FunctionKey) -> Error {
    Error::NotFound(format!(
        "function {:?} not found in namespace {:?}",
        key.name, key.namespace
    ))
}

/// The caller's `x-request-id` when it is a sane token, else a new one.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_string)
        .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()))
}

/// Headers with lowercase names; repeated ones joined with ", ".
fn joined_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(headers.len());
    for (k, v) in headers {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        match out.iter_mut().find(|(name, _)| name == k.as_str()) {
            Some((_, existing)) => {
                existing.push_str(", ");
                existing.push_str(&v);
            }
            None => out.push((k.as_str().to_string(), v)),
        }
    }
    out
}
