//! The errors an AGTP exchange can end in, one variant per status code, and the JSON error body
//! sent with them.
//!
//! Two vocabularies of error codes are in use. Agora's first, draft-era codes (`not-found`,
//! `malformed-request-line`, `scope-required`, …) predate the newer base draft (-09), whose
//! names the reference implementation sends (`agent-not-found`, `invalid-wire-format`,
//! `authorization-required` with `type: scope-required`, …). The body carries the newer name in
//! `error.code`, which is where the reference's clients read it, and the draft-era name in
//! `error.draft_code` wherever the two differ:
//!
//! ```text
//! {"status": 404, "task_id": "…",
//!  "error": {"code": "agent-not-found", "draft_code": "not-found", "message": "…"}}
//! ```
//!
//! Scope errors also carry the base draft's `type` (`scope-required`), and a claimed
//! Authority-Scope that the caller's registered document does not declare is 262 with
//! `details.code: scope-claim-invalid`, as the reference server answers. A bad DISCOVER
//! parameter adds `parameter`, 429 adds `retry_after_ms`, a missing scope `required_scope`.

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

    /// The newer base draft's name for the error (what `error.code` carries): framing errors
    /// are `invalid-wire-format`, a missing `Agent-ID` is `missing-agent-id`; the rest keep
    /// [`BadRequest::code`].
    pub fn spec_code(&self) -> &'static str {
        match self {
            Self::StartLine(_) | Self::Header(_) | Self::ContentLength(_) => "invalid-wire-format",
            Self::MissingHeader(name) if name.eq_ignore_ascii_case("Agent-ID") => {
                "missing-agent-id"
            }
            other => other.code(),
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
    /// 262 Authorization Required, `scope-claim-invalid`: the caller claimed Authority-Scope
    /// tokens its registered document does not declare (or, if so configured, an unregistered
    /// caller claimed any).
    #[error("scope claim invalid: {reason}")]
    ScopeClaimInvalid {
        /// The claimed tokens that were not accepted.
        not_declared: Vec<String>,
        /// Why.
        reason: String,
    },
    /// 459 Method Violation: the method is unknown here.
    #[error("method violation: {0} is not supported")]
    MethodViolation(String),
    /// 460 Endpoint Violation: the method has no such path here.
    #[error("endpoint violation: {0}")]
    EndpointViolation(String),
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
            Self::ScopeClaimInvalid { .. } => Status::AUTHORIZATION_REQUIRED,
            Self::MethodViolation(_) => Status::METHOD_VIOLATION,
            Self::EndpointViolation(_) => Status::ENDPOINT_VIOLATION,
            Self::ServerError(_) => Status::SERVER_ERROR,
            Self::Unavailable(_) => Status::UNAVAILABLE,
        }
    }

    /// The code in `error.code`: the newer base draft's (and the reference server's) name.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(b) => b.spec_code(),
            Self::NotFound(_) => "agent-not-found",
            Self::ScopeViolation {
                code: ScopeViolationCode::AuthorizationRequired262,
                ..
            }
            | Self::ScopeClaimInvalid { .. } => "authorization-required",
            other => other.draft_code(),
        }
    }

    /// Agora's draft-era code, sent as `error.draft_code` where it differs from [`Self::code`].
    pub fn draft_code(&self) -> &'static str {
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
            Self::ScopeClaimInvalid { .. } => "scope-claim-invalid",
            Self::MethodViolation(_) => "method-violation",
            Self::EndpointViolation(_) => "endpoint-violation",
            Self::ServerError(_) => "server-error",
            Self::Unavailable(_) => "unavailable",
        }
    }

    /// The JSON body sent with the error.
    pub fn body(&self, task_id: Option<&str>) -> Value {
        let mut error = Map::new();
        let (code, draft_code) = (self.code(), self.draft_code());
        error.insert("code".into(), json!(code));
        if draft_code != code {
            error.insert("draft_code".into(), json!(draft_code));
        }
        if matches!(
            self,
            Self::ScopeViolation { .. } | Self::ScopeClaimInvalid { .. }
        ) {
            error.insert("type".into(), json!("scope-required"));
        }
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
            Self::ScopeClaimInvalid { not_declared, .. } => {
                error.insert(
                    "details".into(),
                    json!({"code": "scope-claim-invalid", "not_declared": not_declared}),
                );
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
    fn scope_violation_uses_the_configured_code_and_both_vocabularies() {
        for (code, status, name, draft) in [
            (ScopeViolationCode::Draft451, 451, "scope-violation", None),
            (
                ScopeViolationCode::Renumbered455,
                455,
                "scope-violation",
                None,
            ),
            (
                ScopeViolationCode::AuthorizationRequired262,
                262,
                "authorization-required",
                Some("scope-required"),
            ),
        ] {
            let e = AgtpError::ScopeViolation {
                required: "discovery:query".into(),
                code,
            };
            assert_eq!(e.status(), Status(status));
            let b = e.body(None);
            assert_eq!(b["error"]["code"], name);
            assert_eq!(b["error"]["type"], "scope-required");
            assert_eq!(b["error"].get("draft_code").and_then(Value::as_str), draft);
            assert_eq!(b["error"]["required_scope"], "discovery:query");
        }
    }

    #[test]
    fn a_scope_claim_not_declared_is_262_scope_claim_invalid() {
        let e = AgtpError::ScopeClaimInvalid {
            not_declared: vec!["discovery:query".into()],
            reason: "not declared".into(),
        };
        assert_eq!(e.status(), Status::AUTHORIZATION_REQUIRED);
        let b = e.body(Some("t"));
        assert_eq!(b["error"]["code"], "authorization-required");
        assert_eq!(b["error"]["type"], "scope-required");
        assert_eq!(b["error"]["draft_code"], "scope-claim-invalid");
        assert_eq!(b["error"]["details"]["code"], "scope-claim-invalid");
        assert_eq!(
            b["error"]["details"]["not_declared"],
            json!(["discovery:query"])
        );
    }

    #[test]
    fn newer_base_draft_names_with_the_draft_era_ones_where_they_differ() {
        for (e, code, draft) in [
            (
                AgtpError::NotFound("x".into()),
                "agent-not-found",
                Some("not-found"),
            ),
            (
                BadRequest::StartLine("x".into()).into(),
                "invalid-wire-format",
                Some("malformed-request-line"),
            ),
            (
                BadRequest::Header("x".into()).into(),
                "invalid-wire-format",
                Some("malformed-header"),
            ),
            (
                BadRequest::MissingHeader("Agent-ID").into(),
                "missing-agent-id",
                Some("missing-header"),
            ),
            (
                AgtpError::EndpointViolation("/methods".into()),
                "endpoint-violation",
                None,
            ),
            (
                AgtpError::RateLimited { retry_after_ms: 5 },
                "rate-limited",
                None,
            ),
        ] {
            let b = e.body(None);
            assert_eq!(b["error"]["code"], code, "{e}");
            assert_eq!(
                b["error"].get("draft_code").and_then(Value::as_str),
                draft,
                "{e}"
            );
        }
        assert_eq!(
            AgtpError::EndpointViolation("/x".into()).status(),
            Status(460)
        );
    }
}
