//! The `greet` body: a presence announcement.
//!
//! Message Kinds page, "greet"; Peer Discovery page, "Announcing with greet". Body
//! `{ "peer_card": PeerCard, "summary"?: string }`; the card's `peer_id` must equal the envelope
//! `from` (a cross rule checked in [`crate::validate`](mod@crate::validate)).

use std::borrow::Cow;

use crate::json::{self, Str, trim_opt, wire_struct};
use crate::peer_card::{PeerCard, WireCard};
use crate::reason::Rejection;

/// A parsed `greet` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GreetBody<'a> {
    /// The announcing peer's card.
    pub peer_card: PeerCard<'a>,
    /// Free-text summary (trimmed; blank reads as absent).
    pub summary: Option<Cow<'a, str>>,
}

wire_struct!(WireGreet<'a>, "a greet body (a JSON object)", {
    "peer_card" => peer_card: WireCard<'a>,
    "summary" => summary: Str<'a>,
});

impl<'a> GreetBody<'a> {
    /// Parses a `greet` body from its JSON text.
    pub fn from_json(raw: &'a str) -> Result<Self, Rejection> {
        let wire: WireGreet<'a> = serde_json::from_str(raw)
            .map_err(|e| Rejection::Malformed(format!("body: {e}").into()))?;
        let card = wire
            .peer_card
            .ok_or_else(|| Rejection::malformed("body: field `peer_card` is required"))?;
        Ok(Self {
            peer_card: card.into_card()?,
            summary: trim_opt(wire.summary),
        })
    }

    /// The body's JSON form.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"peer_card\":");
        self.peer_card.write_json(&mut out);
        if let Some(summary) = &self.summary {
            out.extend_from_slice(b",\"summary\":");
            json::write_compact(&mut out, &**summary);
        }
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }
}
