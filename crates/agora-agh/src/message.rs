//! The `say` and `direct` body: a text message.
//!
//! Message Kinds page, "say" and "direct". Body `{ "text": string, "intent"?: string,
//! "artifacts"?: [any] }`. `text` must not be blank and is kept exactly as sent; `intent` is
//! trimmed; artifacts are opaque JSON values. `direct` additionally needs `to` and
//! `interaction_id` on the envelope (checked in [`crate::validate`](mod@crate::validate)).

use std::borrow::Cow;

use serde_json::value::RawValue;

use crate::json::{self, RawJson, Str, trim_opt, wire_struct};
use crate::reason::Rejection;

/// A parsed `say` or `direct` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageBody<'a> {
    /// The message text, untrimmed, never blank.
    pub text: Cow<'a, str>,
    /// Trimmed intent label.
    pub intent: Option<Cow<'a, str>>,
    /// Opaque artifacts (a JSON array), raw.
    pub artifacts: Option<RawJson<'a>>,
}

wire_struct!(WireMessage<'a>, "a message body (a JSON object)", {
    "text" => text: Str<'a>,
    "intent" => intent: Str<'a>,
    "artifacts" => artifacts: &'a RawValue,
});

impl<'a> MessageBody<'a> {
    /// Parses a `say`/`direct` body from its JSON text.
    pub fn from_json(raw: &'a str) -> Result<Self, Rejection> {
        let wire: WireMessage<'a> = serde_json::from_str(raw)
            .map_err(|e| Rejection::Malformed(format!("body: {e}").into()))?;
        let text = match wire.text {
            Some(Str(t)) if !t.trim().is_empty() => t,
            _ => return Err(Rejection::malformed("body: field `text` must not be blank")),
        };
        if let Some(a) = wire.artifacts {
            if !json::is_array(a.get()) {
                return Err(Rejection::malformed(
                    "body: field `artifacts` must be an array",
                ));
            }
            json::check_raw(a, "artifacts")?;
        }
        Ok(Self {
            text,
            intent: trim_opt(wire.intent),
            artifacts: wire.artifacts.map(RawJson::borrowed),
        })
    }

    /// The JSON form of a message body with `text` and an optional `intent`.
    pub fn json(text: &str, intent: Option<&str>) -> String {
        let mut out = Vec::with_capacity(text.len() + 32);
        out.extend_from_slice(b"{\"text\":");
        json::write_compact(&mut out, text);
        if let Some(intent) = intent {
            out.extend_from_slice(b",\"intent\":");
            json::write_compact(&mut out, intent);
        }
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }
}
