//! The `receipt` body: acknowledgement of an envelope inside an interaction.
//!
//! Message Kinds page, "receipt"; Delivery page, receipt status ↔ reason table. Body
//! `{ "for_id": string, "status": Status, "reason_code"?: ReasonCode|null, "detail"?: string|null }`.
//! `accepted` must not carry a reason code; `rejected`, `duplicate`, `expired` and `unsupported`
//! must; `canceled` may. A non-null reason code must be in the registry.

use std::borrow::Cow;
use std::fmt;

use crate::json::{self, Str, trim_cow, trim_opt, wire_struct};
use crate::reason::{ReasonCode, Rejection};

/// Receipt status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReceiptStatus {
    /// Responsibility for the work is accepted.
    Accepted,
    /// The envelope was refused.
    Rejected,
    /// The envelope was a duplicate.
    Duplicate,
    /// The envelope had expired.
    Expired,
    /// The envelope asked for something unsupported.
    Unsupported,
    /// The initiator cancels the interaction.
    Canceled,
}

impl ReceiptStatus {
    /// All statuses.
    pub const ALL: [Self; 6] = [
        Self::Accepted,
        Self::Rejected,
        Self::Duplicate,
        Self::Expired,
        Self::Unsupported,
        Self::Canceled,
    ];

    /// Wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
            Self::Duplicate => "duplicate",
            Self::Expired => "expired",
            Self::Unsupported => "unsupported",
            Self::Canceled => "canceled",
        }
    }

    /// Parses the wire spelling.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether a reason code is forbidden, required or optional for this status.
    pub const fn reason_rule(self) -> ReasonRule {
        match self {
            Self::Accepted => ReasonRule::Forbidden,
            Self::Canceled => ReasonRule::Optional,
            _ => ReasonRule::Required,
        }
    }
}

impl fmt::Display for ReceiptStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a status takes a reason code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonRule {
    /// Must be absent or null.
    Forbidden,
    /// Must be present.
    Required,
    /// Either.
    Optional,
}

/// A parsed `receipt` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiptBody<'a> {
    /// Id of the acknowledged envelope.
    pub for_id: Cow<'a, str>,
    /// Status.
    pub status: ReceiptStatus,
    /// Registry reason code.
    pub reason_code: Option<ReasonCode>,
    /// Free text (blank reads as absent).
    pub detail: Option<Cow<'a, str>>,
}

wire_struct!(WireReceipt<'a>, "a receipt body (a JSON object)", {
    "for_id" => for_id: Str<'a>,
    "status" => status: Str<'a>,
    "reason_code" => reason_code: Str<'a>,
    "detail" => detail: Str<'a>,
});

impl<'a> ReceiptBody<'a> {
    /// Parses a `receipt` body from its JSON text.
    pub fn from_json(raw: &'a str) -> Result<Self, Rejection> {
        let wire: WireReceipt<'a> = serde_json::from_str(raw)
            .map_err(|e| Rejection::Malformed(format!("body: {e}").into()))?;
        let for_id = trim_opt(wire.for_id)
            .ok_or_else(|| Rejection::malformed("body: field `for_id` is required"))?;
        let status_text = wire.status.map(|s| trim_cow(s.0)).unwrap_or_default();
        let status = ReceiptStatus::from_wire(&status_text).ok_or_else(|| {
            Rejection::Malformed(
                format!("body: field `status`: {status_text:?} is not a receipt status").into(),
            )
        })?;
        let reason_code = match wire.reason_code {
            None => None,
            Some(Str(code)) => Some(code.trim().parse::<ReasonCode>().map_err(|e| {
                Rejection::Malformed(format!("body: field `reason_code`: {e}").into())
            })?),
        };
        match (status.reason_rule(), reason_code) {
            (ReasonRule::Forbidden, Some(_)) => {
                return Err(Rejection::Malformed(
                    format!("body: field `reason_code` must be absent when status is {status}")
                        .into(),
                ));
            }
            (ReasonRule::Required, None) => {
                return Err(Rejection::Malformed(
                    format!("body: field `reason_code` is required when status is {status}").into(),
                ));
            }
            _ => {}
        }
        Ok(Self {
            for_id,
            status,
            reason_code,
            detail: trim_opt(wire.detail),
        })
    }

    /// The body's JSON form. `reason_code` and `detail` are written as `null` when absent, as the
    /// reference's automatic receipts are.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(96);
        out.extend_from_slice(b"{\"for_id\":");
        json::write_compact(&mut out, &*self.for_id);
        out.extend_from_slice(b",\"status\":\"");
        out.extend_from_slice(self.status.as_str().as_bytes());
        out.extend_from_slice(b"\",\"reason_code\":");
        match self.reason_code {
            Some(code) => json::write_compact(&mut out, code.as_str()),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"detail\":");
        match &self.detail {
            Some(d) => json::write_compact(&mut out, &**d),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_reason_rules() {
        let ok = [
            r#"{"for_id":"m","status":"accepted"}"#,
            r#"{"for_id":"m","status":"accepted","reason_code":null,"detail":"  "}"#,
            r#"{"for_id":"m","status":"rejected","reason_code":"busy"}"#,
            r#"{"for_id":"m","status":"duplicate","reason_code":"duplicate"}"#,
            r#"{"for_id":"m","status":"expired","reason_code":"expired"}"#,
            r#"{"for_id":"m","status":"unsupported","reason_code":"unsupported_kind"}"#,
            r#"{"for_id":"m","status":"canceled"}"#,
            r#"{"for_id":"m","status":"canceled","reason_code":"internal"}"#,
        ];
        for body in ok {
            assert!(ReceiptBody::from_json(body).is_ok(), "{body}");
        }
        let bad = [
            (r#"{"status":"accepted"}"#, "`for_id`"),
            (r#"{"for_id":"m","status":"done"}"#, "`status`"),
            (r#"{"for_id":"m"}"#, "`status`"),
            (
                r#"{"for_id":"m","status":"accepted","reason_code":"busy"}"#,
                "must be absent",
            ),
            (r#"{"for_id":"m","status":"rejected"}"#, "is required"),
            (
                r#"{"for_id":"m","status":"rejected","reason_code":"acme.nope"}"#,
                "not a registered",
            ),
            (
                r#"{"for_id":"m","status":"rejected","reason_code":7}"#,
                "`reason_code`",
            ),
        ];
        for (body, needle) in bad {
            let err = ReceiptBody::from_json(body).unwrap_err();
            assert!(err.detail().contains(needle), "{body}: {err}");
        }
    }

    #[test]
    fn to_json_round_trips() {
        let r = ReceiptBody {
            for_id: "msg_1".into(),
            status: ReceiptStatus::Rejected,
            reason_code: Some(ReasonCode::InteractionClosed),
            detail: None,
        };
        let json = r.to_json();
        assert_eq!(
            json,
            r#"{"for_id":"msg_1","status":"rejected","reason_code":"interaction_closed","detail":null}"#
        );
        assert_eq!(ReceiptBody::from_json(&json).unwrap(), r);
    }
}
