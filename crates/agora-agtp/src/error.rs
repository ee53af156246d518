//! The errors an AGTP exchange can end in, one variant per status code, and the JSON error body
//! sent with them (`{"status", "task_id", "error": {"code", "message", …}}`; the base draft's
//! error bodies carry `error.code`, which the reference server also uses).

use serde_json::{Map, Value, json};

use crate::status::{ScopeViolationCode, Status};

/// What was wrong with a request that is answered 400. The `code` strings are stable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// The request line is not `AGTP/1.0 METHOD [target]`.
    #[error("malformed request line: {0}")]
    StartLine(String),
    /// A header line is not `Name: value`, or a header value is invalid.
    #[error("malformed header: {0}")]
    Header(String),
    /// The start line and headers exceed the limit.
    #[error("request line and headers exceed {limit} bytes")]
    HeadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body exceeds the limit.
    #[error("body of {length} bytes exceeds {limit} bytes")]
    BodyTooLarge {
        /// Declared length.
        length: u64,
        /// The limit in bytes.
        limit: usize,
    },
    /// `Content-Length` is invalid, duplicated with another value, or missing before a body.
    #[error("invalid Content-Length: {0}")]
    ContentLength(String),
    /// The body's media type is not an AGTP JSON type.
    #[error(
        "unsupported Content-Type {0:?} (expected application/vnd.agtp+json or application/agtp+json)"
    )]
    ContentType(String),
    /// The body is not JSON, or not the request envelope.
    #[error("invalid body: {0}")]
    Body(String),
    /// A required header is absent.
    #[error("missing {0} header")]
    MissingHeader(&'static str),
    /// A DISCOVER parameter (or another method's parameter) has a bad value.
    #[error("invalid parameter {parameter}: {reason}")]
    Parameter {
        /// The parameter's name, as sent.
        parameter: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl BadRequest {
    /// Stable machine-readable code for the body.
    pub fn code(&self) -> &'static str {
        match self {
            Self::StartLine(_) => "malformed-request-line",
            Self::Header(_) => "malformed-header",
            Self::HeadTooLarge { .. } => "head-too-large",
            Self::BodyTooLarge { .. } => "body-too-large",
            Self::ContentLength(_) => "invalid-content-length",
            Self::ContentType(_) => "unsupported-content-type",
            Self::Body(_) => "invalid-body",
            Self::MissingHeader(_) => "missing-header",
            Self::Parameter { .. } => "invalid-parameter",
        }
    }

    /// Shorthand for [`BadRequest::Parameter`].
    pub fn parameter(parameter: &str, reason: impl Into<String>) -> Self {
        Self::Parameter {
            parameter: parameter.to_owned(),
            reason: reason.into(),
        }
    }
}

/// An AGTP failure; each variant is answered with one status code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgtpError {
    /// 400 Bad Request.
    #[error(transparent)]
    BadRequest(#[from] BadRequest),
    /// 401 Unauthorized: the caller could not be authenticated (e.g. a bad governance signature).
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 403 Forbidden.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 404 Not Found.
    #[error("not found: {0}")]
    NotFound(String),
    /// 408 Timeout.
    #[error("timed out: {0}")]
    Timeout(String),
    /// 409 Conflict (e.g. a lifecycle transition that is not allowed from the current state).
    #[error("conflict: {0}")]
    Conflict(String),
    /// 422 Unprocessable (well-formed but semantically invalid, e.g. a manifest missing fields).
    #[error("unprocessable: {0}")]
    Unprocessable(String),
    /// 429 Rate Limited.
    #[error("rate limited: retry after {retry_after_ms} ms")]
    RateLimited {
        /// When the caller may try again.
        retry_after_ms: u64,
    },
    /// Scope Violation: 451 by default, or 455 / 262 as configured.
    #[error("scope violation: {required} is required")]
    ScopeViolation {
        /// The scope that was required.
        required: String,
        /// Which status code reports it.
        code: ScopeViolationCode,
    },
    /// 459 Method Violation: the method is unknown here.
    #[error("method violation: {0} is not supported")]
    MethodViolation(String),
    /// 500 Server Error.
    #[error("server error: {0}")]
    ServerError(String),
    /// 503 Unavailable.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl AgtpError {
    /// The status code of the response.
    pub fn status(&self) -> Status {
        match self {
            Self::BadRequest(_) => Status::BAD_REQUEST,
            Self::Unauthorized(_) => Status::UNAUTHORIZED,
            Self::Forbidden(_) => Status::FORBIDDEN,
            Self::NotFound(_) => Status::NOT_FOUND,
            Self::Timeout(_) => Status::TIMEOUT,
            Self::Conflict(_) => Status::CONFLICT,
            Self::Unprocessable(_) => Status::UNPROCESSABLE,
            Self::RateLimited { .. } => Status::RATE_LIMITED,
            Self::ScopeViolation { code, .. } => code.status(),
            Self::MethodViolation(_) => Status::METHOD_VIOLATION,
            Self::ServerError(_) => Status::SERVER_ERROR,
            Self::Unavailable(_) => Status::UNAVAILABLE,
        }
    }

    /// Stable machine-readable code for the body.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(b) => b.code(),
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::NotFound(_) => "not-found",
            Self::Timeout(_) => "timeout",
            Self::Conflict(_) => "conflict",
            Self::Unprocessable(_) => "unprocessable",
            Self::RateLimited { .. } => "rate-limited",
            Self::ScopeViolation {
                code: ScopeViolationCode::AuthorizationRequired262,
                ..
            } => "scope-required",
            Self::ScopeViolation { .. } => "scope-violation",
            Self::MethodViolation(_) => "method-violation",
            Self::ServerError(_) => "server-error",
            Self::Unavailable(_) => "unavailable",
        }
    }

    /// The JSON body sent with the error.
    pub fn body(&self, task_id: Option<&str>) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code()));
        error.insert("message".into(), json!(self.to_string()));
        match self {
            Self::BadRequest(BadRequest::Parameter { parameter, .. }) => {
                error.insert("parameter".into(), json!(parameter));
            }
            Self::RateLimited { retry_after_ms } => {
                error.insert("retry_after_ms".into(), json!(retry_after_ms));
            }
            Self::ScopeViolation { required, .. } => {
                error.insert("required_scope".into(), json!(required));
            }
            _ => {}
        }
        let mut body = Map::new();
        body.insert("status".into(), json!(self.status().0));
        if let Some(t) = task_id {
            body.insert("task_id".into(), json!(t));
        }
        body.insert("error".into(), Value::Object(error));
        Value::Object(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_errors_name_the_parameter() {
        let e = AgtpError::from(BadRequest::parameter("limit", "must be 1..=100"));
        assert_eq!(e.status(), Status(400));
        let b = e.body(Some("t1"));
        assert_eq!(b["error"]["parameter"], "limit");
        assert_eq!(b["error"]["code"], "invalid-parameter");
        assert_eq!(b["task_id"], "t1");
        assert_eq!(b["status"], 400);
    }

    #[test]
    fn scope_violation_uses_the_configured_code() {
        for (code, status, name) in [
            (ScopeViolationCode::Draft451, 451, "scope-violation"),
            (ScopeViolationCode::Renumbered455, 455, "scope-violation"),
            (
                ScopeViolationCode::AuthorizationRequired262,
                262,
                "scope-required",
            ),
        ] {
            let e = AgtpError::ScopeViolation {
                required: "discovery:query".into(),
                code,
            };
            assert_eq!(e.status(), Status(status));
            assert_eq!(e.body(None)["error"]["code"], name);
            assert_eq!(e.body(None)["error"]["required_scope"], "discovery:query");
        }
    }
}
