//! Kind-specific bodies (validation step 4).
//!
//! Message Kinds page: one body contract per kind. [`Body::parse`] dispatches on the envelope's
//! kind to the body module of that kind; the `capability` body is the `{ "capability": doc }`
//! wrapper around a [`CapabilityDoc`], whose digest is verified here.

use serde_json::value::RawValue;

use crate::capability::{CapabilityDoc, DocRules, WireDoc};
use crate::envelope::Kind;
use crate::greet::GreetBody;
use crate::json::wire_struct;
use crate::message::MessageBody;
use crate::reason::Rejection;
use crate::receipt::ReceiptBody;
use crate::trace::TraceBody;
use crate::whois::WhoisBody;

/// A parsed, validated body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// `greet`.
    Greet(GreetBody<'a>),
    /// `whois`.
    Whois(WhoisBody<'a>),
    /// `say`.
    Say(MessageBody<'a>),
    /// `direct`.
    Direct(MessageBody<'a>),
    /// `capability`.
    Capability(CapabilityDoc),
    /// `receipt`.
    Receipt(ReceiptBody<'a>),
    /// `trace`.
    Trace(TraceBody<'a>),
}

wire_struct!(WireCapabilityBody<'a>, "a capability body (a JSON object)", {
    "capability" => capability: WireDoc<'a>,
});

impl<'a> Body<'a> {
    /// Parses and validates the body of an envelope of `kind`.
    pub fn parse(kind: Kind, raw: &'a RawValue) -> Result<Self, Rejection> {
        let raw = raw.get();
        Ok(match kind {
            Kind::Greet => Self::Greet(GreetBody::from_json(raw)?),
            Kind::Whois => Self::Whois(WhoisBody::from_json(raw)?),
            Kind::Say => Self::Say(MessageBody::from_json(raw)?),
            Kind::Direct => Self::Direct(MessageBody::from_json(raw)?),
            Kind::Capability => Self::Capability(capability_body(raw)?),
            Kind::Receipt => Self::Receipt(ReceiptBody::from_json(raw)?),
            Kind::Trace => Self::Trace(TraceBody::from_json(raw)?),
        })
    }

    /// The kind this body belongs to.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Greet(_) => Kind::Greet,
            Self::Whois(_) => Kind::Whois,
            Self::Say(_) => Kind::Say,
            Self::Direct(_) => Kind::Direct,
            Self::Capability(_) => Kind::Capability,
            Self::Receipt(_) => Kind::Receipt,
            Self::Trace(_) => Kind::Trace,
        }
    }
}

fn capability_body(raw: &str) -> Result<CapabilityDoc, Rejection> {
    let wire: WireCapabilityBody<'_> =
        serde_json::from_str(raw).map_err(|e| Rejection::Malformed(format!("body: {e}").into()))?;
    let doc = wire.capability.ok_or_else(|| {
        Rejection::malformed(
            "body: field `capability` is required (the document goes inside {\"capability\": …})",
        )
    })?;
    doc.into_doc(DocRules::Transfer).map_err(|e| match e {
        Rejection::VerificationFailed(d) => {
            Rejection::VerificationFailed(format!("body: {d}").into())
        }
        other => Rejection::Malformed(format!("body: {}", other.detail()).into()),
    })
}

/// The JSON form of a `capability` body carrying `doc`.
pub fn capability_body_json(doc: &CapabilityDoc) -> String {
    format!("{{\"capability\":{}}}", doc.to_transfer_json())
}
