//! The `trace` body: progress of an interaction.
//!
//! Message Kinds page, "trace". Body `{ "state": State, "message"?: string, "result"?: any,
//! "artifact_refs"?: [any] }` with `state` one of the interaction states. `submitted` is a valid
//! body but never a legal transition ([`crate::lifecycle`]).

use std::borrow::Cow;
use std::fmt;

use serde_json::value::RawValue;

use crate::json::{self, RawJson, Str, trim_cow, trim_opt, wire_struct};
use crate::reason::Rejection;

/// State of an interaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InteractionState {
    /// Opened, nothing reported yet.
    Submitted,
    /// The target is working on it.
    Working,
    /// The target waits for more input from the initiator.
    NeedsInput,
    /// Finished successfully (terminal).
    Completed,
    /// Finished unsuccessfully (terminal).
    Failed,
    /// Canceled (terminal).
    Canceled,
}

impl InteractionState {
    /// All states.
    pub const ALL: [Self; 6] = [
        Self::Submitted,
        Self::Working,
        Self::NeedsInput,
        Self::Completed,
        Self::Failed,
        Self::Canceled,
    ];

    /// Wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Working => "working",
            Self::NeedsInput => "needs_input",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// Parses the wire spelling.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// `true` for `completed`, `failed` and `canceled`.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }
}

impl fmt::Display for InteractionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed `trace` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceBody<'a> {
    /// Reported state.
    pub state: InteractionState,
    /// Human-readable progress message (trimmed; blank reads as absent).
    pub message: Option<Cow<'a, str>>,
    /// Opaque result value, raw.
    pub result: Option<RawJson<'a>>,
    /// Opaque artifact references (a JSON array), raw.
    pub artifact_refs: Option<RawJson<'a>>,
}

wire_struct!(WireTrace<'a>, "a trace body (a JSON object)", {
    "state" => state: Str<'a>,
    "message" => message: Str<'a>,
    "result" => result: &'a RawValue,
    "artifact_refs" => artifact_refs: &'a RawValue,
});

impl<'a> TraceBody<'a> {
    /// Parses a `trace` body from its JSON text.
    pub fn from_json(raw: &'a str) -> Result<Self, Rejection> {
        let wire: WireTrace<'a> = serde_json::from_str(raw)
            .map_err(|e| Rejection::Malformed(format!("body: {e}").into()))?;
        let state_text = wire.state.map(|s| trim_cow(s.0)).unwrap_or_default();
        let state = InteractionState::from_wire(&state_text).ok_or_else(|| {
            Rejection::Malformed(
                format!("body: field `state`: {state_text:?} is not an interaction state").into(),
            )
        })?;
        if let Some(a) = wire.artifact_refs {
            if !json::is_array(a.get()) {
                return Err(Rejection::malformed(
                    "body: field `artifact_refs` must be an array",
                ));
            }
            json::check_raw(a, "artifact_refs")?;
        }
        if let Some(r) = wire.result {
            json::check_raw(r, "result")?;
        }
        Ok(Self {
            state,
            message: trim_opt(wire.message),
            result: wire.result.map(RawJson::borrowed),
            artifact_refs: wire.artifact_refs.map(RawJson::borrowed),
        })
    }

    /// The JSON form of a trace body with a state and an optional message.
    pub fn json(state: InteractionState, message: Option<&str>) -> String {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(b"{\"state\":\"");
        out.extend_from_slice(state.as_str().as_bytes());
        out.push(b'"');
        if let Some(m) = message {
            out.extend_from_slice(b",\"message\":");
            json::write_compact(&mut out, m);
        }
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_shapes() {
        for s in [
            "submitted",
            "working",
            "needs_input",
            "completed",
            "failed",
            "canceled",
        ] {
            let body = format!(r#"{{"state":"{s}"}}"#);
            assert_eq!(TraceBody::from_json(&body).unwrap().state.as_str(), s);
        }
        for (body, needle) in [
            (r#"{"state":"done"}"#, "`state`"),
            (r#"{}"#, "`state`"),
            (
                r#"{"state":"working","artifact_refs":{}}"#,
                "`artifact_refs`",
            ),
            (r#"{"state":"working","message":3}"#, "`message`"),
        ] {
            let err = TraceBody::from_json(body).unwrap_err();
            assert!(err.detail().contains(needle), "{body}: {err}");
        }
        let t = TraceBody::from_json(
            r#"{"state":"completed","result":{"ok":true},"artifact_refs":[]}"#,
        )
        .unwrap();
        assert_eq!(t.result.as_ref().map(RawJson::get), Some(r#"{"ok":true}"#));
    }
}
