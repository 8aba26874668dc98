//! Request-body extraction that answers in the API's JSON error shape (axum's
//! own rejections are plain text) and refuses unknown fields.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::state::AppState;

/// A 413 naming the limit and its setting, before a byte of the body is
/// read, when the client waits for `100 Continue` and declares a length
/// (`Content-Length`) over `limit`: it sends none of the body, and it takes
/// no turn. A client that sends its body at once is read up to the limit as
/// before: answered before it is done writing, it would find the connection
/// closed under its writes and read no answer at all.
pub fn within_declared(
    headers: &axum::http::HeaderMap,
    body: &axum::body::Body,
    limit: usize,
    what: &str,
    setting: &str,
) -> Result<()> {
    let waits = (headers.get(axum::http::header::EXPECT))
        .is_some_and(|expect| expect.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if waits && hyper::body::Body::size_hint(body).lower() > limit as u64 {
        return Err(Error::too_large(what, limit, setting));
    }
    Ok(())
}

/// A body as bytes; above the route's limit a 413 naming that limit and its
/// setting, a read error a 400. The limits themselves are the
/// `DefaultBodyLimit` layers in `http/mod.rs`, set from the same config.
async fn read_body(req: Request, state: &Arc<AppState>, limit: usize, what: &str, setting: &str) -> Result<Bytes> {
    within_declared(req.headers(), req.body(), limit, what, setting)?;
    match Bytes::from_request(req, state).await {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(Error::too_large(what, limit, setting)),
        Err(e) => Err(Error::BadRequest(format!("cannot read request body: {e}"))),
    }
}

/// A code upload's raw body (limit `SLESS_MAX_UPLOAD_BYTES`).
pub struct RawBody(pub Bytes);

const UPLOAD: &str = "the code archive";
const UPLOAD_SETTING: &str = "SLESS_MAX_UPLOAD_BYTES";

impl RawBody {
    /// [`within_declared`] for an upload, before it waits for its turn.
    pub fn within_declared(req: &Request, state: &AppState) -> Result<()> {
        within_declared(
            req.headers(),
            req.body(),
            state.config.max_upload_bytes,
            UPLOAD,
            UPLOAD_SETTING,
        )
    }
}

impl FromRequest<Arc<AppState>> for RawBody {
    type Rejection = Error;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let limit = state.config.max_upload_bytes;
        let bytes = read_body(req, state, limit, UPLOAD, UPLOAD_SETTING).await?;
        Ok(RawBody(bytes))
    }
}

/// A JSON object body (limit `SLESS_MAX_JSON_BYTES`).
pub struct JsonObject(pub Map<String, Value>);

impl FromRequest<Arc<AppState>> for JsonObject {
    type Rejection = Error;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let limit = state.config.max_json_bytes;
        let bytes = read_body(req, state, limit, "the JSON body", "SLESS_MAX_JSON_BYTES").await?;
        if bytes.is_empty() {
            return Err(Error::BadRequest(
                "request body is empty: expected a JSON object".into(),
            ));
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => {
                // What is stored must read back: bounded depth (the body's
                // size is bounded by the JSON body limit).
                let body = Value::Object(map);
                crate::bounds::check_depth("request body", &body).map_err(Error::BadRequest)?;
                let Value::Object(map) = body else {
                    unreachable!("just made an object")
                };
                Ok(JsonObject(map))
            }
            Ok(_) => Err(Error::BadRequest("request body must be a JSON object".into())),
            // serde_json stops at 128 levels: as deep as the depth check says.
            Err(e) if e.to_string().starts_with("recursion limit exceeded") => Err(Error::BadRequest(format!(
                "request body is nested more than 128 levels deep; at most {} are kept",
                crate::bounds::MAX_JSON_DEPTH
            ))),
            Err(e) => Err(Error::BadRequest(format!("request body is not valid JSON: {e}"))),
        }
    }
}

/// Deserializes `value` as `T`, turning serde's message (which names unknown
/// or mistyped fields) into a 400 that names the top-level field.
pub fn from_value<T: DeserializeOwned>(what: &str, mut value: Value) -> Result<T, Error> {
    // JSON Schema counts 1.0 as an integer: so do the spec's own fields
    // (not the values inside them, such as an event, which reach handlers as sent).
    if let Value::Object(fields) = &mut value {
        for field in fields.values_mut() {
            if let Some(n) = field.as_f64().filter(|n| n.fract() == 0.0 && n.abs() < 9.0e15) {
                if field.is_f64() {
                    *field = Value::from(n as i64);
                }
            }
        }
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            let message = format!("invalid {what}: {}", e.inner());
            // serde names a missing or unknown field in backticks.
            let named = e.inner().to_string();
            match named
                .strip_prefix("missing field `")
                .or_else(|| named.strip_prefix("unknown field `"))
                .and_then(|rest| rest.split_once('`'))
            {
                Some((field, _)) => Error::invalid(field, message),
                None => Error::BadRequest(message),
            }
        } else {
            let field = path.split(['.', '[']).next().unwrap_or(&path).to_string();
            Error::invalid(field, format!("invalid {what}: {path}: {}", e.inner()))
        }
    })
}

/// Checks a name given in the body's `field` (a DNS label), naming the field
/// when it is not one.
pub fn check_name(field: &str, what: &'static str, name: &str) -> Result<(), Error> {
    sless_api::validate_name(what, name).map_err(|e| Error::invalid(field, e))
}

/// Applies a JSON merge patch (RFC 7396) to `target`.
pub fn merge_patch(target: &mut Value, patch: Value) {
    match patch {
        Value::Object(patch) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let map = target.as_object_mut().expect("just made an object");
            for (key, value) in patch {
                if value.is_null() {
                    map.remove(&key);
                } else {
                    merge_patch(map.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        other => *target = other,
    }
}

/// Takes `name`/`namespace`/`status` out of a request object: the name must
/// be a string, the namespace (if given) must match the path, status is
/// read-only.
pub fn take_identity(body: &mut Map<String, Value>, ns: &str) -> Result<Option<String>> {
    for field in ["status", "created_at", "updated_at"] {
        if body.remove(field).is_some() {
            return Err(Error::invalid(field, format!("{field} is read-only and cannot be set")));
        }
    }
    match body.remove("namespace") {
        None => {}
        Some(Value::String(given)) if given == ns => {}
        Some(other) => {
            return Err(Error::invalid(
                "namespace",
                format!("namespace in the body ({other}) does not match the namespace in the path ({ns:?})"),
            ))
        }
    }
    match body.remove("name") {
        None => Ok(None),
        Some(Value::String(name)) => Ok(Some(name)),
        Some(other) => Err(Error::invalid("name", format!("name must be a string, got {other}"))),
    }
}

/// Serializes an API value for the store.
pub fn to_value<T: serde::Serialize>(value: &T) -> Result<Value> {
    serde_json::to_value(value).map_err(Error::internal)
}
