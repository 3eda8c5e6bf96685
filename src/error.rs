//! The one error type. Client errors carry a stable `code`; internal errors are logged once
//! with their context and answered as a bare 500 that leaks nothing (a database error is
//! logged where it happened, naming its operation: see `db::report`).

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One problem with one field of a submitted document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FieldIssue {
    pub field: String,
    pub message: String,
}

/// The body of every API error, as the OpenAPI document describes it (built by [`problem`]):
/// an error answer (RFC 9457 problem details, `application/problem+json`). `code` is stable
/// and machine-readable; `detail` is for people and may change.
#[derive(utoipa::ToSchema, utoipa::ToResponse)]
#[response(
    description = "A problem (`application/problem+json`) whose `code` says what went wrong",
    content_type = "application/problem+json"
)]
#[allow(dead_code)] // a description of a body built by `crate::error::problem`, never constructed
pub struct Problem {
    /// Always `about:blank`: the `code` carries the meaning.
    #[serde(rename = "type")]
    kind: String,
    /// The HTTP status's reason phrase.
    title: String,
    /// The HTTP status code.
    status: u16,
    /// The stable error code, e.g. `not_found`, `invalid_json`, `permission_denied`.
    code: String,
    /// What went wrong, for people.
    detail: String,
    /// The offending field, when the problem is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
    /// Each problem of an invalid configuration (`invalid_config`).
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<Vec<FieldIssue>>,
    /// When to retry, for retryable problems (503).
    #[serde(rename = "retryAfterMs", skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
    /// Where a moved tenant lives now (`tenant_moved`).
    #[serde(skip_serializing_if = "Option::is_none")]
    base_url: Option<String>,
    /// The same URL on the tenant's new deployment (`tenant_moved`).
    #[serde(skip_serializing_if = "Option::is_none")]
    location: Option<String>,
}

/// The media type of every API error body (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A missing object, or another tenant's: the two are indistinguishable on purpose.
    #[error("{what} not found")]
    NotFound { what: &'static str },
    /// Bad input; `field` names the offending field when there is one.
    #[error("{message}")]
    Invalid { code: &'static str, message: String, field: Option<&'static str> },
    /// A configuration with one or more problems, each naming its field (422).
    #[error("invalid configuration")]
    InvalidConfig { issues: Vec<FieldIssue> },
    /// The request is well formed but collides with existing state (409).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// A compare-and-set whose expectation no longer holds (412).
    #[error("{message}")]
    Precondition { code: &'static str, message: String },
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    #[error("authentication required")]
    Unauthorized,
    /// The tenant was moved to another deployment (issue 26): 421 with the new address for
    /// API and MCP clients, a 308 redirect there for browsers.
    #[error("this tenant has moved to {base_url}")]
    Moved { base_url: String, location: String, redirect: bool },
    #[error("request body too large")]
    PayloadTooLarge,
    /// Retryable: contention, a dependency down, a queue full (503).
    #[error("{message}")]
    Unavailable { code: &'static str, message: String, retry_after_ms: Option<u64> },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl Error {
    pub fn invalid(code: &'static str, field: Option<&'static str>, message: impl Into<String>) -> Self {
        Error::Invalid { code, message: message.into(), field }
    }

    /// The stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::InvalidConfig { .. } => "invalid_config",
            Error::Invalid { code, .. }
            | Error::Conflict { code, .. }
            | Error::Precondition { code, .. }
            | Error::Forbidden { code, .. }
            | Error::Unavailable { code, .. } => code,
            Error::Unauthorized => "unauthorized",
            Error::Moved { .. } => "tenant_moved",
            Error::PayloadTooLarge => "payload_too_large",
            Error::Database(e) if read_only(e) => "database_read_only",
            Error::Database(e) if connection_lost(e) => "database_unavailable",
            Error::Database(_) | Error::Internal(_) => "internal",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::Invalid { .. } | Error::InvalidConfig { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::Precondition { .. } => StatusCode::PRECONDITION_FAILED,
            Error::Forbidden { .. } => StatusCode::FORBIDDEN,
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::Moved { redirect: true, .. } => StatusCode::PERMANENT_REDIRECT,
            Error::Moved { redirect: false, .. } => StatusCode::MISDIRECTED_REQUEST,
            Error::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Error::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::Database(e) if connection_lost(e) || read_only(e) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Database(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The SQLSTATE of a database error, if this is one.
    pub fn sqlstate(&self) -> Option<String> {
        match self {
            Error::Database(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
            _ => None,
        }
    }

    /// The violated constraint's name, if this is a constraint violation.
    pub fn constraint(&self) -> Option<&str> {
        match self {
            Error::Database(sqlx::Error::Database(db)) => db.constraint(),
            _ => None,
        }
    }

    /// Replaces a violation of the named constraint with a client error. Constraint
    /// violations are mapped by name rather than by a racy pre-check `SELECT`.
    pub fn on_constraint(self, name: &str, to: impl FnOnce() -> Error) -> Error {
        if self.constraint() == Some(name) { to() } else { self }
    }

    /// True for the SQLSTATEs a serializable transaction is retried on.
    pub fn is_retryable_conflict(&self) -> bool {
        matches!(self.sqlstate().as_deref(), Some("40001" | "40P01"))
    }

    /// A database error answered 503: the database is unreachable, dropped the connection, or
    /// is a read-only node. Anything else from the database is a bug or a broken invariant.
    pub fn is_database_unavailable(&self) -> bool {
        matches!(self, Error::Database(e) if connection_lost(e) || read_only(e))
    }

    /// The connection this error came on is no use any more, nor are its pool's siblings
    /// opened before it: the server went away (I/O error, 08xxx, an administrator's or the
    /// postmaster's shutdown, 57P01/57P02/57P03), or it is a read-only node (25006: a demoted
    /// primary behind a connection that a failover did not move).
    pub fn is_connection_loss(&self) -> bool {
        match self {
            Error::Database(sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) => true,
            Error::Database(e @ sqlx::Error::Database(_)) => connection_lost(e) || read_only(e),
            _ => false,
        }
    }
}

/// A write reached a read-only node (a standby, or a primary that was demoted).
fn read_only(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("25006"))
}

/// The database is unreachable or dropped the connection: retryable, not a bug.
fn connection_lost(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed)
        || matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")))
}

/// A problem response's `code`, kept beside the body so the access log names it (the log line
/// of each response, in `crate::http`); the suite checks each code it sees against the route's
/// document.
#[derive(Debug, Clone)]
pub struct ProblemCode(pub Box<str>);

/// Builds a problem+json response. `extra` fields are merged into the body.
pub fn problem(status: StatusCode, code: &str, detail: &str, extra: Option<Value>) -> Response {
    let mut body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "code": code,
        "detail": detail,
    });
    if let (Some(Value::Object(extra)), Value::Object(map)) = (extra, &mut body) {
        map.extend(extra);
    }
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response.extensions_mut().insert(ProblemCode(code.into()));
    response
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            Error::Database(e) if read_only(e) => {
                tracing::warn!(error = %e, "write refused by a read-only database node");
                problem(
                    status,
                    self.code(),
                    "the database is read-only (failing over); retry shortly",
                    Some(json!({ "retryAfterMs": 500 })),
                )
            }
            Error::Database(e) if connection_lost(e) => {
                tracing::warn!(error = %e, "database unavailable");
                problem(status, self.code(), "the database is unavailable; retry shortly", Some(json!({ "retryAfterMs": 500 })))
            }
            // Logged at ERROR once already, with the operation that failed and inside its
            // spans, by the database entry point the work ran through (`db::report`): every
            // request reaches the database through one. Here only the answer is noted.
            Error::Database(e) => {
                tracing::debug!(error = %e, "database error answered as 500");
                problem(status, "internal", "internal error", None)
            }
            Error::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "internal error");
                problem(status, "internal", "internal error", None)
            }
            Error::InvalidConfig { issues } => {
                problem(status, self.code(), "invalid configuration", Some(json!({ "errors": issues })))
            }
            Error::Invalid { field: Some(field), .. } => {
                problem(status, self.code(), &self.to_string(), Some(json!({ "field": field })))
            }
            Error::Unavailable { retry_after_ms: Some(ms), .. } => {
                let mut r = problem(status, self.code(), &self.to_string(), Some(json!({ "retryAfterMs": ms })));
                let secs = ms.div_ceil(1000).max(1);
                if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                    r.headers_mut().insert(header::RETRY_AFTER, v);
                }
                r
            }
            Error::Unauthorized => {
                let mut r = problem(status, "unauthorized", "authentication required", None);
                r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                r
            }
            Error::Moved { base_url, location, .. } => {
                let extra = json!({ "base_url": base_url, "location": location });
                let mut r = problem(status, self.code(), &self.to_string(), Some(extra));
                if let Ok(v) = HeaderValue::from_str(location) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                r
            }
            _ => problem(status, self.code(), &self.to_string(), None),
        }
    }
}
