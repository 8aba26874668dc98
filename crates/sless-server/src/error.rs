//! The server's error type and its one mapping to an HTTP response.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sless_api::ErrorBody;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a request can fail with. Handlers return it; `IntoResponse`
/// turns it into `{"error": ...}` with the fitting status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadRequest(String),
    /// A 400 about one field of the request body (`field` in the answer).
    #[error("{message}")]
    Invalid { field: String, message: String },
    /// An archive entry broke an upload rule.
    #[error("{message}")]
    Archive {
        message: String,
        entry: Option<String>,
        rule: &'static str,
    },
    #[error("missing or invalid bearer token")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{message}")]
    TooManyRequests { message: String, retry_after: u64 },
    #[error("{message}")]
    Unavailable { message: String, retry_after: Option<u64> },
    #[error("{0}")]
    BadGateway(String),
    #[error("{0}")]
    GatewayTimeout(String),
    /// The disk the server stores on (or its database's) is full: 507,
    /// nothing was stored. The cause is in the server's log.
    #[error("the server's storage is full, so nothing was stored; try again once its operator has freed space")]
    StorageFull,
    #[error(transparent)]
    CodeCheck(#[from] sless_codecheck::CheckError),
    #[error("database error: {0}")]
    Store(sqlx::Error),
    #[error("code store error: {0}")]
    Blob(object_store::Error),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn internal(e: impl std::fmt::Display) -> Self {
        Error::Internal(e.to_string())
    }

    /// A body over a configured limit (413), naming the limit and the
    /// server setting that raises it.
    pub fn too_large(what: &str, limit: usize, setting: &str) -> Self {
        Error::PayloadTooLarge(format!(
            "{what} is larger than the limit of {limit} bytes (the server's {setting} setting raises it)"
        ))
    }

    /// A 400 naming the request field it is about.
    pub fn invalid(field: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Error::Invalid {
            field: field.into(),
            message: message.to_string(),
        }
    }

    pub fn status(&self) -> StatusCode {
        use sless_codecheck::CheckError;
        match self {
            Error::BadRequest(_) | Error::Invalid { .. } | Error::Archive { .. } => StatusCode::BAD_REQUEST,
            Error::CodeCheck(CheckError::Rejected { .. }) => StatusCode::BAD_REQUEST,
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Error::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::CodeCheck(CheckError::Unavailable { .. }) => StatusCode::SERVICE_UNAVAILABLE,
            Error::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Error::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Error::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
            Error::Store(_) | Error::Blob(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The response with the request id in the body and the `x-request-id` header.
    pub fn into_response_for(self, request_id: &str) -> Response {
        let mut response = self.response(Some(request_id.to_string()));
        if let Ok(value) = HeaderValue::from_str(request_id) {
            response.headers_mut().insert("x-request-id", value);
        }
        response
    }

    fn response(self, request_id: Option<String>) -> Response {
        let status = self.status();
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, request_id = request_id.as_deref().unwrap_or(""), "request failed");
        }
        // What failed in the database or the object store (a driver's
        // message, a path, a host) is for the server's log, which has it
        // under the request id; the caller learns only that it was not its
        // fault. `Internal` texts are written for the caller.
        let error = match &self {
            Error::Store(_) | Error::Blob(_) => "internal server error: the server's log has the details".to_string(),
            _ => self.to_string(),
        };
        let (entry, rule) = match &self {
            Error::Archive { entry, rule, .. } => (entry.clone(), Some(rule.to_string())),
            _ => (None, None),
        };
        let field = match &self {
            Error::Invalid { field, .. } => Some(field.clone()),
            _ => None,
        };
        let body = ErrorBody {
            error,
            field,
            entry,
            rule,
            request_id,
        };
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        match &self {
            Error::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Error::Unavailable {
                retry_after: Some(secs),
                ..
            }
            | Error::TooManyRequests { retry_after: secs, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*secs));
            }
            _ => {}
        }
        response
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        match e {
            // Every connection busy for the pool's whole wait: the server
            // is overloaded, not broken, and the request may be sent again.
            sqlx::Error::PoolTimedOut => {
                tracing::warn!("no database connection came free in time; answering 503");
                Error::Unavailable {
                    message: "every database connection of the server is busy; try again".to_string(),
                    retry_after: Some(1),
                }
            }
            e if disk_full(&e) || database_full(&e) => storage_full(&e),
            e => Error::Store(e),
        }
    }
}

impl From<object_store::Error> for Error {
    fn from(e: object_store::Error) -> Self {
        if disk_full(&e) {
            storage_full(&e)
        } else {
            Error::Blob(e)
        }
    }
}

/// Logs why (an operator's matter) and answers [`Error::StorageFull`].
fn storage_full(e: &dyn std::fmt::Display) -> Error {
    tracing::error!(error = %e, "the server's storage is full; answering 507");
    Error::StorageFull
}

/// Whether `e`, or an error it was caused by, is a file system's "no
/// space left" or "quota exceeded".
pub fn disk_full(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ) {
                return true;
            }
        }
        next = e.source();
    }
    false
}

/// A database that says it is full: SQLite's SQLITE_FULL (13),
/// PostgreSQL's disk_full (53100).
fn database_full(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("13" | "53100")),
        _ => false,
    }
}

impl From<sless_api::NameError> for Error {
    fn from(e: sless_api::NameError) -> Self {
        Error::BadRequest(e.to_string())
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        self.response(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_too_busy_to_lend_a_connection_is_a_503_to_retry() {
        let response = Error::from(sqlx::Error::PoolTimedOut).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let other = Error::from(sqlx::Error::RowNotFound);
        assert_eq!(other.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
