//! The web console at `/ui/`: the embedded files of `sless-console`, served
//! with strict security headers on every answer (no inline code, nothing
//! from other origins, no framing). The console talks to the public API
//! only; nothing here reads a token or the store.

use axum::extract::{Path, Request};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LOCATION};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::system;
use crate::error::Error;

/// Sent with every console response.
const SECURITY_HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
];

/// `/ui` (redirected to `/ui/`), `/ui/` and `/ui/{path}`, GET and HEAD.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(redirect))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(asset))
        // Set here, inside the headers layer: the one the whole router sets
        // would replace axum's default 405 outside it.
        .method_not_allowed_fallback(system::method_not_allowed)
        .layer(middleware::from_fn(security_headers))
}

async fn redirect() -> Response {
    (StatusCode::PERMANENT_REDIRECT, [(LOCATION, "/ui/")]).into_response()
}

async fn index(headers: HeaderMap) -> Response {
    serve("", &headers)
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    serve(&path, &headers)
}

/// The file with its ETag; 304 when the client holds this version.
fn serve(path: &str, headers: &HeaderMap) -> Response {
    let Some(asset) = sless_console::asset(path) else {
        return Error::NotFound(format!("no console file /ui/{}", sless_api::text::echoed(path))).into_response();
    };
    let etag = HeaderValue::from_str(&asset.etag).expect("hex etag");
    let cached = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == asset.etag || tag.trim() == "*"));
    // Revalidated on every use: a new server version serves new files at once.
    let common = [(ETAG, etag), (CACHE_CONTROL, HeaderValue::from_static("no-cache"))];
    if cached {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    (
        common,
        [(CONTENT_TYPE, HeaderValue::from_static(asset.content_type))],
        asset.bytes,
    )
        .into_response()
}

async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
    response
}
