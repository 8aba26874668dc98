//! The public invoke gateway `ANY /fn/{ns}/{name}[/{rest}]`: turns an HTTP
//! request into an invocation of the function's serving version and the
//! handler's answer back into a response, with a request id on every one.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::future::{BoxFuture, Either};
use futures::FutureExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use percent_encoding::percent_decode_str;
use sless_api::{validate_name, FunctionStatus, Phase};
use tower::Service;

use crate::error::Error;
use crate::routes::Selector;
use crate::state::AppState;
use crate::store::Kind;
use sless_driver::{FunctionKey, Invocation, InvokeError, TriggerKind};

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

/// Headers a handler may not set because they act on the whole origin,
/// which every function and the console share: `Service-Worker-Allowed`
/// would let a function's service worker take `/` (the console's pages and
/// other tenants' functions), and `Clear-Site-Data` would clear what the
/// console and every other function keep in the browser.
const ORIGIN_WIDE: &[&str] = &["service-worker-allowed", "clear-site-data"];

/// The application: `/fn` requests go straight to the gateway, everything
/// else through the router. The gateway is the hot path; routing it would
/// copy its headers and URI into extractors and match it against every
/// route first.
#[derive(Clone)]
pub struct App {
    pub state: Arc<AppState>,
    pub router: Router,
}

impl Service<Request> for App {
    type Response = Response;
    type Error = Infallible;
    type Future = Either<BoxFuture<'static, Result<Response, Infallible>>, <Router as Service<Request>>::Future>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // A 2xx to CONNECT turns the connection into a tunnel (hyper hands
        // it over as upgraded): a handler's answer would end it, body unsent.
        if request.method() == axum::http::Method::CONNECT {
            let refused = Error::MethodNotAllowed("CONNECT is not served: sless is no proxy".into());
            return Either::Left(Box::pin(std::future::ready(Ok(refused.into_response()))));
        }
        match Target::of(request.uri().path()) {
            Some(target) => Either::Left(Box::pin(invoke(self.state.clone(), target, request).map(Ok))),
            None => Either::Right(self.router.call(request)),
        }
    }
}

/// The function a `/fn/{ns}/{name}[@{version|alias}][/{rest}]` path
/// names, percent-decoded.
struct Target {
    namespace: String,
    name: String,
    /// What follows an `@` in the name, as written (None: the plain URL).
    selector: Option<String>,
    /// The handler's `path`: `/{rest}`, `/` for a trailing slash, else empty.
    path: String,
}

impl Target {
    /// None for paths the router answers (`/fn` without a namespace and a
    /// name); an undecodable segment becomes a name no function has.
    fn of(path: &str) -> Option<Target> {
        let rest = path.strip_prefix("/fn/")?;
        let (namespace, rest) = rest.split_once('/').unwrap_or((rest, ""));
        let (name, rest) = match rest.split_once('/') {
            Some((name, rest)) => (name, Some(rest)),
            None => (rest, None),
        };
        if namespace.is_empty() || name.is_empty() {
            return None;
        }
        let decode = |s: &str| percent_decode_str(s).decode_utf8().map(|s| s.into_owned());
        let name = decode(name).unwrap_or_default();
        let (name, selector) = match name.split_once('@') {
            Some((name, selector)) => (name.to_string(), Some(selector.to_string())),
            None => (name, None),
        };
        Some(Target {
            namespace: decode(namespace).unwrap_or_default(),
            name,
            selector,
            path: match rest {
                None => String::new(),
                Some(rest) => format!("/{}", decode(rest).unwrap_or_else(|_| rest.to_string())),
            },
        })
    }
}

/// Invoke a function. Public: no token needed. Any method, with or without
/// a path after the function name (`/fn/{ns}/{name}/{rest}`); that path,
/// the query, headers and body reach the handler. The plain name calls the
/// newest ready build (`$latest`); `{name}@{version}` calls a version by
/// number and `{name}@{alias}` the version(s) an alias points at.
#[utoipa::path(post, path = "/fn/{ns}/{name}", tag = "gateway",
    params(("ns" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Function name"),
        ("X-Sless-Invocation-Type" = Option<String>, Header, description = "`Event`: store the call and answer 202 at once (delivered later with retries); `RequestResponse` (the default): wait for the handler"),
        ("Prefer" = Option<String>, Header, description = "`respond-async` asks for an asynchronous call as `X-Sless-Invocation-Type: Event` does")),
    responses((status = 200, description = "The handler's answer"),
        (status = 202, body = sless_api::AsyncAccepted, description = "Asynchronous call stored; its record is at `Location`"),
        (status = 400, body = sless_api::ErrorBody, description = "A bad X-Sless-Invocation-Type"),
        (status = 404, body = sless_api::ErrorBody),
        (status = 413, body = sless_api::ErrorBody), (status = 429, body = sless_api::ErrorBody, description = "Too many requests waiting, the namespace has SLESS_NS_MAX_CALLS calls under way, or runs as many instances as its quotas allow (SLESS_NS_MAX_INSTANCES, SLESS_NS_MAX_MEMORY_MB), or its asynchronous backlog is full (SLESS_ASYNC_MAX_BACKLOG); Retry-After"),
        (status = 502, body = sless_api::ErrorBody, description = "The handler crashed or failed to start (details in the invocation record under request_id)"),
        (status = 503, body = sless_api::ErrorBody, description = super::openapi::invoke_unavailable()),
        (status = 504, body = sless_api::ErrorBody, description = "The handler ran past timeout_sec")))]
async fn invoke(state: Arc<AppState>, target: Target, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let request_id = request_id(&parts.headers);
    match serve(&state, target, parts, body, &request_id).await {
        Ok(response) => response,
        Err(e) => e.into_response_for(&request_id),
    }
}

async fn serve(
    state: &AppState,
    target: Target,
    parts: Parts,
    body: Body,
    request_id: &str,
) -> Result<Response, Error> {
    let Target {
        namespace,
        name,
        selector,
        path,
    } = target;
    let key = FunctionKey::new(namespace, name);
    if validate_name("namespace", &key.namespace).is_err() || validate_name("function", &key.name).is_err() {
        return Err(not_found(&key));
    }
    let selector = match selector.as_deref() {
        None => Selector::Latest,
        Some(text) => Selector::parse(text).ok_or_else(|| {
            Error::NotFound(format!(
                "function {key} has no version or alias {:?}: after '@' comes a version number or an alias name",
                sless_api::text::echoed(text)
            ))
        })?,
    };
    if state.cluster.fenced() {
        // Lost touch with the store: a newer version may be Ready elsewhere.
        return Err(Error::Unavailable {
            message: "this replica cannot reach the store; try again".into(),
            retry_after: Some(1),
        });
    }
    if state.triggers.http_blocked(&key) {
        return Err(Error::Unavailable {
            message: format!("function {key} is disabled: its http triggers are all disabled"),
            retry_after: None,
        });
    }
    // Counted from here (its body is read next) until it is answered.
    let _call = state.calls.take(&key.namespace).ok_or_else(|| Error::TooManyRequests {
        message: format!(
            "namespace {} has {} calls under way, the most it may at once (the server's SLESS_NS_MAX_CALLS); try again when some are done",
            key.namespace,
            state.calls.most()
        ),
        retry_after: 1,
    })?;
    let asynchronous = is_asynchronous(&parts.headers)?;
    let (limit, what, setting) = if asynchronous {
        (
            state.config.async_max_event_bytes,
            "the body of an asynchronous call",
            "SLESS_ASYNC_MAX_EVENT_BYTES",
        )
    } else {
        (
            state.config.max_invoke_bytes,
            "the request body",
            "SLESS_MAX_INVOKE_BYTES",
        )
    };
    super::body::within_declared(&parts.headers, &body, limit, what, setting)?;
    let body = match Limited::new(body, limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return Err(Error::too_large(what, limit, setting)),
        Err(e) => return Err(Error::BadRequest(format!("cannot read request body: {e}"))),
    };
    if asynchronous {
        if !matches!(selector, Selector::Latest) {
            // Events are delivered to `$latest`; a stored event does not keep a selector.
            return Err(Error::invalid(
                "X-Sless-Invocation-Type",
                format!(
                    "asynchronous calls go to the function's latest version: call /fn/{}/{} without '@'",
                    key.namespace, key.name
                ),
            ));
        }
        return accept_event(state, key, &parts, path, body, request_id).await;
    }
    let invocation = Invocation {
        kind: TriggerKind::Http,
        request_id: request_id.to_string(),
        method: parts.method.as_str().to_string(),
        path,
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: header_pairs(&parts.headers),
        body,
        event: None,
    };
    match state
        .invoker
        .invoke_at(&key, &selector, invocation, crate::invoker::Run::Serving)
        .await
    {
        Ok(mut result) => {
            if let Some(at) = result.headers.iter().position(|(k, _)| k.eq_ignore_ascii_case(ERROR_HEADER)) {
                result.headers.swap_remove(at);
                if result.status == 500 && !exposes_errors(state, &key).await {
                    result.body = hidden_error(request_id);
                }
            }
            let mut response = Response::new(Body::from(result.body));
            *response.status_mut() = StatusCode::from_u16(result.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let out = response.headers_mut();
            for (k, mut v) in result.headers {
                if HOP_BY_HOP.iter().chain(ORIGIN_WIDE).any(|h| h.eq_ignore_ascii_case(&k)) {
                    continue;
                }
                if k.eq_ignore_ascii_case("set-cookie") {
                    v = scoped_cookie(&v, &format!("/fn/{}/{}", key.namespace, key.name));
                }
                // from_bytes lowercases the name. Appended: a header the
                // handler gave once per value (its cookies) goes out so.
                if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(&v)) {
                    out.append(k, v);
                }
            }
            if let Ok(v) = HeaderValue::from_str(request_id) {
                out.insert("x-request-id", v);
            }
            Ok(response)
        }
        Err(InvokeError::NotDeployed(_)) => match selector {
            Selector::Latest => not_ready(state, &key).await,
            selector => not_addressable(state, &key, &selector).await,
        },
        Err(InvokeError::NotStarted { reason, retry_after, .. }) => Err(Error::Unavailable {
            message: reason,
            retry_after: Some(retry_after.as_secs().max(1)),
        }),
        Err(e @ InvokeError::Disabled(_)) => Err(Error::Unavailable {
            message: e.to_string(),
            retry_after: None,
        }),
        Err(e @ (InvokeError::QueueFull(_) | InvokeError::AtQuota { .. })) => Err(Error::TooManyRequests {
            message: e.to_string(),
            retry_after: 1,
        }),
        Err(e @ InvokeError::Timeout { .. }) => Err(Error::GatewayTimeout(e.to_string())),
        // What went wrong inside (a traceback, an exit status) is for the
        // owner: it is in the invocation record under this request id.
        Err(InvokeError::Crashed { .. }) => Err(Error::BadGateway(format!(
            "function {key} crashed while handling the request; its owner finds why in the function's invocation record with this request id"
        ))),
        Err(InvokeError::BadAnswer { .. }) => Err(Error::BadGateway(format!(
            "function {key} answered with what the gateway cannot send (too many headers, say); its owner finds why in the function's invocation record with this request id"
        ))),
        Err(InvokeError::StartFailed { .. }) => Err(Error::BadGateway(format!(
            "function {key} failed to start; its owner finds why in the function's invocation record with this request id"
        ))),
    }
}

/// Whether the caller asks for an asynchronous call:
/// `X-Sless-Invocation-Type: Event` (`RequestResponse` is the default), or
/// `Prefer: respond-async` (RFC 7240).
fn is_asynchronous(headers: &HeaderMap) -> Result<bool, Error> {
    if let Some(value) = headers.get("x-sless-invocation-type") {
        let value = value.to_str().unwrap_or_default().trim();
        if value.eq_ignore_ascii_case("event") {
            return Ok(true);
        }
        if !value.eq_ignore_ascii_case("requestresponse") {
            return Err(Error::invalid(
                "X-Sless-Invocation-Type",
                "the X-Sless-Invocation-Type header must be Event or RequestResponse",
            ));
        }
        return Ok(false);
    }
    Ok(headers.get_all("prefer").iter().any(|value| {
        value
            .to_str()
            .unwrap_or_default()
            .split([',', ';'])
            .any(|preference| preference.trim().eq_ignore_ascii_case("respond-async"))
    }))
}

/// Stores an asynchronous call and answers 202 with its id and, in
/// `Location`, its record. The function must exist (it need not be ready:
/// the event waits for a version).
async fn accept_event(
    state: &AppState,
    key: FunctionKey,
    parts: &Parts,
    path: String,
    body: bytes::Bytes,
    request_id: &str,
) -> Result<Response, Error> {
    if state.invoker.routes.latest(&key).is_none()
        && state
            .store
            .get(Kind::Function, &key.namespace, &key.name)
            .await?
            .is_none()
    {
        return Err(not_found(&key));
    }
    // What is stored, not only the body, is bounded: a request's head (its
    // path, query and headers) may be some hundreds of KiB too.
    let query = parts.uri.query().unwrap_or("").to_string();
    let headers = serde_json::to_string(&header_pairs(&parts.headers)).map_err(Error::internal)?;
    let limit = state.config.async_max_event_bytes;
    if body.len() + path.len() + query.len() + headers.len() > limit {
        return Err(Error::too_large(
            "an asynchronous call as stored (its body, path, query and headers)",
            limit,
            "SLESS_ASYNC_MAX_EVENT_BYTES",
        ));
    }
    let created_at = crate::store::events::now_micros();
    let id = crate::async_invoke::event_id(created_at);
    let event = crate::store::events::NewEvent {
        id: id.clone(),
        namespace: key.namespace.clone(),
        function: key.name.clone(),
        request_id: request_id.to_string(),
        method: parts.method.as_str().to_string(),
        path,
        query,
        headers,
        body,
        created_at,
        source: None,
        parked_until: None,
    };
    state.async_invocations.accept(event).await?;
    let location = format!(
        "/v1/namespaces/{}/functions/{}/async-invocations/{id}",
        key.namespace, key.name
    );
    let accepted = sless_api::AsyncAccepted {
        id,
        status: sless_api::AsyncStatus::Queued,
        request_id: request_id.to_string(),
        location: location.clone(),
    };
    let mut response = Response::new(Body::from(serde_json::to_vec(&accepted).map_err(Error::internal)?));
    *response.status_mut() = StatusCode::ACCEPTED;
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(&location) {
        headers.insert("location", v);
    }
    if let Ok(v) = HeaderValue::from_str(request_id) {
        headers.insert("x-request-id", v);
    }
    Ok(response)
}

/// The header a shim puts on the 500 it answers for a handler that failed
/// (an unhandled exception, a value it cannot send); never passed on.
const ERROR_HEADER: &str = "x-sless-error";

/// What a public caller learns of a handler's failure: that it failed, and
/// the request id under which the owner finds the exception in the
/// invocation record.
fn hidden_error(request_id: &str) -> bytes::Bytes {
    serde_json::json!({"error": "the function failed", "request_id": request_id})
        .to_string()
        .into()
}

/// Whether the function opted into showing its exceptions to callers
/// (`expose_errors`). Read from the store on this error path only, so
/// every replica answers alike.
async fn exposes_errors(state: &AppState, key: &FunctionKey) -> bool {
    match state.store.get(Kind::Function, &key.namespace, &key.name).await {
        Ok(Some(record)) => record.spec.get("expose_errors").and_then(|v| v.as_bool()) == Some(true),
        _ => false,
    }
}

/// A handler's `Set-Cookie` scoped to its own function: every function is
/// served from one origin, so a cookie's `Domain` is dropped and its `Path`
/// is the function's `/fn/{ns}/{name}` (or a path below it the handler set).
fn scoped_cookie(value: &str, own: &str) -> String {
    let mut parts = value.split(';');
    let mut cookie = parts.next().unwrap_or_default().trim().to_string();
    let mut path = None;
    for attribute in parts.map(str::trim).filter(|a| !a.is_empty()) {
        let name = attribute.split('=').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("domain") {
            continue;
        }
        if name.eq_ignore_ascii_case("path") {
            let given = attribute.split_once('=').map_or("", |(_, p)| p.trim());
            let below = given == own || given.strip_prefix(own).is_some_and(|rest| rest.starts_with('/'));
            path = Some(if below { given.to_string() } else { own.to_string() });
            continue;
        }
        cookie.push_str("; ");
        cookie.push_str(attribute);
    }
    cookie.push_str("; Path=");
    cookie.push_str(path.as_deref().unwrap_or(own));
    cookie
}

/// The request's headers as the handler sees them: lowercase names, a
/// repeated header's values joined with ", ".
fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    let mut pairs = Vec::with_capacity(headers.keys_len());
    for name in headers.keys() {
        let mut values = headers.get_all(name).iter();
        let mut value = String::from_utf8_lossy(values.next().map_or(&[][..], |v| v.as_bytes())).into_owned();
        for more in values {
            value.push_str(", ");
            value.push_str(&String::from_utf8_lossy(more.as_bytes()));
        }
        pairs.push((name.as_str().to_string(), value));
    }
    pairs
}

/// Why a function the driver does not serve gives no answer: it does not
/// exist (404), or its status says what is missing (503). Read only on this
/// error path.
async fn not_ready(state: &AppState, key: &FunctionKey) -> Result<Response, Error> {
    let Some(record) = state.store.get(Kind::Function, &key.namespace, &key.name).await? else {
        return Err(not_found(key));
    };
    let status: FunctionStatus = serde_json::from_value(record.status).unwrap_or_default();
    let get = match key.namespace.as_str() {
        "default" => format!("sless get {}", key.name),
        ns => format!("sless get {} -n {ns}", key.name),
    };
    let (message, retry_after) = match (status.phase, status.version) {
        // Waiting will not help here: a new upload will.
        (Phase::Failed, 0) => (
            format!("function {key} is not serving: the last build failed: see `{get}`"),
            None,
        ),
        // Still "no ready version yet" (the contract's Retry-After): its
        // code may be on the way, as in a pipeline that creates, then uploads.
        (Phase::Pending, 0) if status.code_hash.is_none() => (
            format!("function {key} has no code yet: deploy it with `sless deploy` or PUT .../code"),
            Some(2),
        ),
        _ => (
            format!("function {key} has no ready version yet; retry shortly"),
            Some(2),
        ),
    };
    Err(Error::Unavailable { message, retry_after })
}

/// Why a version called by number or alias gives no answer: the function,
/// the version or the alias does not exist (404), or it cannot be started
/// here now (503).
async fn not_addressable(state: &AppState, key: &FunctionKey, selector: &Selector) -> Result<Response, Error> {
    if state
        .store
        .get(Kind::Function, &key.namespace, &key.name)
        .await?
        .is_none()
    {
        return Err(not_found(key));
    }
    let missing = match selector {
        Selector::Version(version) => state
            .store
            .version(&key.namespace, &key.name, *version)
            .await?
            .is_none()
            .then(|| {
                format!(
                    "function {key} has no version {version} (or it is no longer kept): see `sless versions {}`",
                    key.name
                )
            }),
        Selector::Alias(alias) => state
            .store
            .alias(&key.namespace, &key.name, alias)
            .await?
            .is_none()
            .then(|| match sless_api::RESERVED_ALIAS_NAMES.contains(&alias.as_str()) {
                true => format!(
                    "function {key} has no alias {alias:?}: no alias may be named so; /fn/{}/{} calls the newest version",
                    key.namespace, key.name
                ),
                false => format!(
                    "function {key} has no alias {alias:?}: see `sless alias ls {}`",
                    key.name
                ),
            }),
        Selector::Latest => None,
    };
    match missing {
        Some(message) => Err(Error::NotFound(message)),
        None => Err(Error::Unavailable {
            message: format!("function {key}: the version called is not serving here yet; retry shortly"),
            retry_after: Some(2),
        }),
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
        .unwrap_or_else(|| crate::record::hex_id(&[(rand::random::<u64>(), 16)]))
}

#[cfg(test)]
mod tests {
    use super::scoped_cookie;

    #[test]
    fn cookies_are_scoped_to_their_function() {
        let own = "/fn/ns/app";
        assert_eq!(scoped_cookie("sid=1", own), "sid=1; Path=/fn/ns/app");
        assert_eq!(
            scoped_cookie("sid=1; Path=/; Domain=example.com; HttpOnly; Max-Age=60", own),
            "sid=1; HttpOnly; Max-Age=60; Path=/fn/ns/app"
        );
        assert_eq!(
            scoped_cookie("a=b; path=/fn/ns/app/admin", own),
            "a=b; Path=/fn/ns/app/admin"
        );
        assert_eq!(
            scoped_cookie("a=b; Path=/fn/ns/application", own),
            "a=b; Path=/fn/ns/app"
        );
        assert_eq!(scoped_cookie("a=b; Path=/fn/ns/other", own), "a=b; Path=/fn/ns/app");
    }
}
