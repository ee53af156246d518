//! The `whois` body: peer lookup requests and responses.
//!
//! Message Kinds page, "whois"; Peer Discovery page, "Querying with whois". A request carries an
//! optional `query` and no card; a response carries the answering peer's `peer_card` (and the
//! envelope a `reply_to`, checked in [`crate::validate`](mod@crate::validate)).

use std::borrow::Cow;

use crate::json::{self, Str, trim_cow, wire_struct};
use crate::peer_card::{PeerCard, WireCard};
use crate::reason::Rejection;

/// A parsed `whois` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WhoisBody<'a> {
    /// `{"type":"request","query"?:…}`; an absent query reads as empty (matches every peer).
    Request {
        /// The trimmed query.
        query: Cow<'a, str>,
    },
    /// `{"type":"response","peer_card":…}`.
    Response {
        /// The answering peer's card.
        peer_card: PeerCard<'a>,
    },
}

wire_struct!(WireWhois<'a>, "a whois body (a JSON object)", {
    "type" => kind: Str<'a>,
    "query" => query: Str<'a>,
    "peer_card" => peer_card: WireCard<'a>,
});

impl<'a> WhoisBody<'a> {
    /// Parses a `whois` body from its JSON text.
    pub fn from_json(raw: &'a str) -> Result<Self, Rejection> {
        let wire: WireWhois<'a> = serde_json::from_str(raw)
            .map_err(|e| Rejection::Malformed(format!("body: {e}").into()))?;
        let kind = wire.kind.map(|k| trim_cow(k.0)).unwrap_or_default();
        match &*kind {
            "request" => {
                if wire.peer_card.is_some() {
                    return Err(Rejection::malformed(
                        "body: field `peer_card` must be absent on a whois request",
                    ));
                }
                Ok(Self::Request {
                    query: wire.query.map(|q| trim_cow(q.0)).unwrap_or_default(),
                })
            }
            "response" => {
                let card = wire.peer_card.ok_or_else(|| {
                    Rejection::malformed("body: field `peer_card` is required on a whois response")
                })?;
                Ok(Self::Response {
                    peer_card: card.into_card()?,
                })
            }
            "" => Err(Rejection::malformed("body: field `type` is required")),
            other => Err(Rejection::Malformed(
                format!("body: field `type`: {other:?} is neither \"request\" nor \"response\"")
                    .into(),
            )),
        }
    }

    /// The body's JSON form.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(256);
        match self {
            Self::Request { query } => {
                out.extend_from_slice(b"{\"type\":\"request\"");
                if !query.is_empty() {
                    out.extend_from_slice(b",\"query\":");
                    json::write_compact(&mut out, &**query);
                }
            }
            Self::Response { peer_card } => {
                out.extend_from_slice(b"{\"type\":\"response\",\"peer_card\":");
                peer_card.write_json(&mut out);
            }
        }
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }
}
