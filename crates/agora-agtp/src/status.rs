//! AGTP status codes (draft-hood-independent-agtp-02 §5 as cited by the discovery draft, plus the
//! codes the newer base drafts renumbered) with their reason phrases.
//!
//! The response line is `AGTP/1.0 <code> <reason>`; the reason is informative only.

use std::fmt;

/// A status code this implementation sends or understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Status(pub u16);

impl Status {
    /// 200 OK.
    pub const OK: Self = Self(200);
    /// 262 Authorization Required (base draft -09: Authority-Scope not sufficient).
    pub const AUTHORIZATION_REQUIRED: Self = Self(262);
    /// 400 Bad Request.
    pub const BAD_REQUEST: Self = Self(400);
    /// 401 Unauthorized.
    pub const UNAUTHORIZED: Self = Self(401);
    /// 403 Forbidden.
    pub const FORBIDDEN: Self = Self(403);
    /// 404 Not Found.
    pub const NOT_FOUND: Self = Self(404);
    /// 408 Timeout.
    pub const TIMEOUT: Self = Self(408);
    /// 409 Conflict.
    pub const CONFLICT: Self = Self(409);
    /// 422 Unprocessable.
    pub const UNPROCESSABLE: Self = Self(422);
    /// 429 Rate Limited.
    pub const RATE_LIMITED: Self = Self(429);
    /// 451 Scope Violation (draft -02 numbering, the discovery draft's code).
    pub const SCOPE_VIOLATION_451: Self = Self(451);
    /// 455 Scope Violation (draft -07+ numbering).
    pub const SCOPE_VIOLATION_455: Self = Self(455);
    /// 459 Method Violation (unknown method).
    pub const METHOD_VIOLATION: Self = Self(459);
    /// 460 Endpoint Violation (base draft -09: no such path for this method).
    pub const ENDPOINT_VIOLATION: Self = Self(460);
    /// 500 Server Error.
    pub const SERVER_ERROR: Self = Self(500);
    /// 503 Unavailable.
    pub const UNAVAILABLE: Self = Self(503);

    /// The reason phrase sent on the response line.
    pub fn reason(self) -> &'static str {
        match self.0 {
            200 => "OK",
            202 => "Accepted",
            204 => "No Content",
            262 => "Authorization Required",
            400 => "Bad Request",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Timeout",
            409 => "Conflict",
            410 => "Gone",
            422 => "Unprocessable",
            429 => "Rate Limited",
            451 | 455 => "Scope Violation",
            459 => "Method Violation",
            460 => "Endpoint Violation",
            500 => "Server Error",
            503 => "Unavailable",
            _ => "Unknown",
        }
    }

    /// 2xx.
    pub fn is_success(self) -> bool {
        (200..300).contains(&self.0)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, self.reason())
    }
}

/// Which code answers a caller without the required Authority-Scope. The discovery draft -00 says
/// 451; draft -01 and the base draft's renumbering say 455; base draft -09 (and the reference
/// server) answer 262 Authorization Required. Selectable; 451 by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScopeViolationCode {
    /// 451 Scope Violation.
    #[default]
    Draft451,
    /// 455 Scope Violation.
    Renumbered455,
    /// 262 Authorization Required.
    AuthorizationRequired262,
}

impl ScopeViolationCode {
    /// The status sent.
    pub fn status(self) -> Status {
        match self {
            Self::Draft451 => Status::SCOPE_VIOLATION_451,
            Self::Renumbered455 => Status::SCOPE_VIOLATION_455,
            Self::AuthorizationRequired262 => Status::AUTHORIZATION_REQUIRED,
        }
    }

    /// From a configured number.
    pub fn from_code(code: u16) -> Option<Self> {
        match code {
            451 => Some(Self::Draft451),
            455 => Some(Self::Renumbered455),
            262 => Some(Self::AuthorizationRequired262),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_scope_codes() {
        assert_eq!(Status::RATE_LIMITED.to_string(), "429 Rate Limited");
        assert_eq!(Status(455).reason(), "Scope Violation");
        for code in [451, 455, 262] {
            let c = ScopeViolationCode::from_code(code).map(ScopeViolationCode::status);
            assert_eq!(c, Some(Status(code)));
        }
        assert_eq!(ScopeViolationCode::from_code(403), None);
        assert_eq!(ScopeViolationCode::default().status(), Status(451));
    }
}
