//! Reason codes and rejections.
//!
//! Implements the reason-code registry of AGH Network v0 (Message Kinds page, "Reason codes"; the
//! G1 reference's `ReasonCode`). Every way this crate refuses an envelope is a [`Rejection`], and
//! every `Rejection` variant is exactly one registry code: [`Rejection::reason`] is the only place
//! where an error becomes a wire code.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// A reason code from the AGH Network v0 registry (11 codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReasonCode {
    /// The envelope or its body does not have the required shape.
    Malformed,
    /// `expires_at` has passed or `ts` is outside the replay window.
    Expired,
    /// An envelope with the same `id` was already accepted inside its window.
    Duplicate,
    /// `kind` is not one of the seven v0 kinds.
    UnsupportedKind,
    /// The `protocol` or a trust profile is not supported.
    UnsupportedProfile,
    /// A digest or proof does not verify.
    VerificationFailed,
    /// A directed envelope is not addressed to a peer present here.
    NotTarget,
    /// The referenced peer, interaction or capability does not exist.
    NotFound,
    /// The receiver cannot take more work now.
    Busy,
    /// The receiver failed for a reason of its own.
    Internal,
    /// Work was sent into an interaction that already reached a terminal state.
    InteractionClosed,
}

impl ReasonCode {
    /// Every code, in registry order.
    pub const ALL: [Self; 11] = [
        Self::Malformed,
        Self::Expired,
        Self::Duplicate,
        Self::UnsupportedKind,
        Self::UnsupportedProfile,
        Self::VerificationFailed,
        Self::NotTarget,
        Self::NotFound,
        Self::Busy,
        Self::Internal,
        Self::InteractionClosed,
    ];

    /// The wire spelling of the code.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Expired => "expired",
            Self::Duplicate => "duplicate",
            Self::UnsupportedKind => "unsupported_kind",
            Self::UnsupportedProfile => "unsupported_profile",
            Self::VerificationFailed => "verification_failed",
            Self::NotTarget => "not_target",
            Self::NotFound => "not_found",
            Self::Busy => "busy",
            Self::Internal => "internal",
            Self::InteractionClosed => "interaction_closed",
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The string is not a registered reason code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a registered AGH reason code")]
pub struct UnknownReasonCode(pub String);

impl FromStr for ReasonCode {
    type Err = UnknownReasonCode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|code| code.as_str() == s)
            .ok_or_else(|| UnknownReasonCode(s.to_owned()))
    }
}

/// Human-readable detail attached to a rejection; names the offending field.
pub type Detail = Cow<'static, str>;

/// Why an envelope was refused. One variant per registry code; the payload is the detail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// `malformed`.
    #[error("malformed: {0}")]
    Malformed(Detail),
    /// `expired`.
    #[error("expired: {0}")]
    Expired(Detail),
    /// `duplicate`.
    #[error("duplicate: {0}")]
    Duplicate(Detail),
    /// `unsupported_kind`.
    #[error("unsupported_kind: {0}")]
    UnsupportedKind(Detail),
    /// `unsupported_profile`.
    #[error("unsupported_profile: {0}")]
    UnsupportedProfile(Detail),
    /// `verification_failed`.
    #[error("verification_failed: {0}")]
    VerificationFailed(Detail),
    /// `not_target`.
    #[error("not_target: {0}")]
    NotTarget(Detail),
    /// `not_found`.
    #[error("not_found: {0}")]
    NotFound(Detail),
    /// `busy`.
    #[error("busy: {0}")]
    Busy(Detail),
    /// `internal`.
    #[error("internal: {0}")]
    Internal(Detail),
    /// `interaction_closed`.
    #[error("interaction_closed: {0}")]
    InteractionClosed(Detail),
}

impl Rejection {
    /// The registry code of this rejection.
    pub const fn reason(&self) -> ReasonCode {
        match self {
            Self::Malformed(_) => ReasonCode::Malformed,
            Self::Expired(_) => ReasonCode::Expired,
            Self::Duplicate(_) => ReasonCode::Duplicate,
            Self::UnsupportedKind(_) => ReasonCode::UnsupportedKind,
            Self::UnsupportedProfile(_) => ReasonCode::UnsupportedProfile,
            Self::VerificationFailed(_) => ReasonCode::VerificationFailed,
            Self::NotTarget(_) => ReasonCode::NotTarget,
            Self::NotFound(_) => ReasonCode::NotFound,
            Self::Busy(_) => ReasonCode::Busy,
            Self::Internal(_) => ReasonCode::Internal,
            Self::InteractionClosed(_) => ReasonCode::InteractionClosed,
        }
    }

    /// The detail text (names the offending field where there is one).
    pub fn detail(&self) -> &str {
        match self {
            Self::Malformed(d)
            | Self::Expired(d)
            | Self::Duplicate(d)
            | Self::UnsupportedKind(d)
            | Self::UnsupportedProfile(d)
            | Self::VerificationFailed(d)
            | Self::NotTarget(d)
            | Self::NotFound(d)
            | Self::Busy(d)
            | Self::Internal(d)
            | Self::InteractionClosed(d) => d,
        }
    }

    pub(crate) fn malformed(detail: impl Into<Detail>) -> Self {
        Self::Malformed(detail.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_wire_spelling() {
        for code in ReasonCode::ALL {
            assert_eq!(code.as_str().parse::<ReasonCode>(), Ok(code));
        }
        assert!("Malformed".parse::<ReasonCode>().is_err());
        assert!("acme.custom".parse::<ReasonCode>().is_err());
    }

    #[test]
    fn every_rejection_maps_to_its_own_code() {
        let all = [
            Rejection::Malformed("".into()),
            Rejection::Expired("".into()),
            Rejection::Duplicate("".into()),
            Rejection::UnsupportedKind("".into()),
            Rejection::UnsupportedProfile("".into()),
            Rejection::VerificationFailed("".into()),
            Rejection::NotTarget("".into()),
            Rejection::NotFound("".into()),
            Rejection::Busy("".into()),
            Rejection::Internal("".into()),
            Rejection::InteractionClosed("".into()),
        ];
        let codes: Vec<_> = all.iter().map(Rejection::reason).collect();
        assert_eq!(codes, ReasonCode::ALL);
    }
}
