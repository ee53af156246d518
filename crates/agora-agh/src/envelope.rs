//! The AGH Network v0 envelope: its typed model and its exact JSON form.
//!
//! Envelope page, "Wire contract" and "Fields"; reference behaviour: the Go reference runtime's envelope parsing.
//!
//! Parsing happens in two steps that mirror the first two steps of the spec's validation order:
//! [`RawEnvelope::parse`] (step 1: size, UTF-8, JSON, top-level object, duplicate keys, field
//! types) and [`RawEnvelope::into_envelope`] (step 2: required fields, `protocol`, `kind`, channel
//! and Peer ID grammars). Freshness, body and cross rules follow in [`crate::validate`](mod@crate::validate).
//!
//! Emission ([`Envelope::write_json`]) uses the reference's field order (`protocol, id, kind,
//! channel, from, to, interaction_id, reply_to, trace_id, causation_id, ts, expires_at, body,
//! proof, ext`), always writes `to` and `proof` (as `null` when absent) and copies `body`, `proof`
//! and `ext` as the raw JSON text they arrived as, so unknown keys survive a forward unchanged.
//!
//! # Important discrepancies
//! - Identifier fields are trimmed of white space and blank optional identifiers become absent, as
//!   the reference does; the spec's grammars are then applied to the trimmed value.
//! - Unknown top-level fields are accepted and ignored (the reference does the same; the spec's
//!   JSON Schema says `additionalProperties: false`). They are checked for duplicate keys but not
//!   re-emitted by [`Envelope::write_json`]; relays forward the original bytes.
//! - Keys match exactly. The Go reference also matches `"KIND"` to `kind`; we do not.
//! - Duplicate keys at any depth and invalid UTF-8 are `malformed` (Go keeps the last key and
//!   replaces bad bytes with U+FFFD).

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::grammar::{PROTOCOL_V0, is_channel, is_peer_id};
use crate::json::{self, Field, RawJson, Str, for_each_field, next_opt, trim_cow, trim_opt};
use crate::reason::Rejection;

/// Largest envelope, in bytes, that any receiver must accept and that this crate will parse
/// (RFC §10.3.1; the reference's `maxProtocolEnvelopeBytes`).
pub const MAX_ENVELOPE_BYTES: usize = 1 << 20;

/// The seven message kinds of AGH Network v0 (generation G1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Presence announcement carrying a Peer Card.
    Greet,
    /// Peer lookup: request or response.
    Whois,
    /// Channel-visible message.
    Say,
    /// Directed work request inside an interaction.
    Direct,
    /// Transfer of one structured capability document.
    Capability,
    /// Acknowledgement of an envelope inside an interaction.
    Receipt,
    /// Progress of an interaction.
    Trace,
}

impl Kind {
    /// All kinds, in spec order.
    pub const ALL: [Self; 7] = [
        Self::Greet,
        Self::Whois,
        Self::Say,
        Self::Direct,
        Self::Capability,
        Self::Receipt,
        Self::Trace,
    ];

    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Greet => "greet",
            Self::Whois => "whois",
            Self::Say => "say",
            Self::Direct => "direct",
            Self::Capability => "capability",
            Self::Receipt => "receipt",
            Self::Trace => "trace",
        }
    }

    /// Parses the wire spelling (exact, case-sensitive).
    pub fn from_wire(s: &str) -> Option<Self> {
        Some(match s {
            "greet" => Self::Greet,
            "whois" => Self::Whois,
            "say" => Self::Say,
            "direct" => Self::Direct,
            "capability" => Self::Capability,
            "receipt" => Self::Receipt,
            "trace" => Self::Trace,
            _ => return None,
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated envelope header plus its raw `body`, `proof` and `ext`.
///
/// Strings borrow from the input where they can; [`Envelope::into_owned`] detaches them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// Unique id within the sender's replay window.
    pub id: Cow<'a, str>,
    /// Message kind.
    pub kind: Kind,
    /// Channel name (grammar-checked).
    pub channel: Cow<'a, str>,
    /// Sender Peer ID (grammar-checked).
    pub from: Cow<'a, str>,
    /// Target Peer ID for directed envelopes; `None` for broadcasts.
    pub to: Option<Cow<'a, str>>,
    /// Interaction this envelope belongs to.
    pub interaction_id: Option<Cow<'a, str>>,
    /// Id of the envelope this one answers.
    pub reply_to: Option<Cow<'a, str>>,
    /// End-to-end trace correlation id.
    pub trace_id: Option<Cow<'a, str>>,
    /// Id of the envelope that caused this one.
    pub causation_id: Option<Cow<'a, str>>,
    /// Sender time, Unix seconds.
    pub ts: i64,
    /// Unix second at and after which receivers reject the envelope.
    pub expires_at: Option<i64>,
    /// The kind-specific body, as raw JSON text (always an object).
    pub body: RawJson<'a>,
    /// Reserved trust proof, as raw JSON text (an object); `None` is emitted as `null`.
    pub proof: Option<RawJson<'a>>,
    /// Extension object, as raw JSON text.
    pub ext: Option<RawJson<'a>>,
}

/// An envelope that owns all its data.
pub type OwnedEnvelope = Envelope<'static>;

fn own(s: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(s.into_owned())
}

impl Envelope<'_> {
    /// Parses and checks structure and header (validation steps 1–2). Freshness and the body are
    /// not checked; use [`crate::validate::validate`] for the full receive-side pipeline.
    pub fn parse(bytes: &[u8]) -> Result<Envelope<'_>, Rejection> {
        RawEnvelope::parse(bytes)?.into_envelope()
    }

    /// A new envelope with only the required fields set (`to`, `proof`, `ext` and the optional
    /// correlation fields absent): the starting point for envelopes a node generates.
    pub fn generated(
        kind: Kind,
        id: String,
        channel: &str,
        from: &str,
        ts: i64,
        body: RawJson<'static>,
    ) -> OwnedEnvelope {
        Envelope {
            id: Cow::Owned(id),
            kind,
            channel: Cow::Owned(channel.to_owned()),
            from: Cow::Owned(from.to_owned()),
            to: None,
            interaction_id: None,
            reply_to: None,
            trace_id: None,
            causation_id: None,
            ts,
            expires_at: None,
            body,
            proof: None,
            ext: None,
        }
    }

    /// Detaches the envelope from the input it was parsed from.
    pub fn into_owned(self) -> OwnedEnvelope {
        Envelope {
            id: own(self.id),
            kind: self.kind,
            channel: own(self.channel),
            from: own(self.from),
            to: self.to.map(own),
            interaction_id: self.interaction_id.map(own),
            reply_to: self.reply_to.map(own),
            trace_id: self.trace_id.map(own),
            causation_id: self.causation_id.map(own),
            ts: self.ts,
            expires_at: self.expires_at,
            body: self.body.into_owned(),
            proof: self.proof.map(RawJson::into_owned),
            ext: self.ext.map(RawJson::into_owned),
        }
    }

    /// `true` when the envelope names a target peer.
    pub fn is_directed(&self) -> bool {
        self.to.is_some()
    }

    /// Appends the envelope's JSON form to `out`.
    ///
    /// The emitted form writes `to` and `proof` explicitly and drops unknown top-level fields, so
    /// it can be up to 23 bytes longer than the input it was parsed from: an input right at the
    /// size limit may re-emit just over it. Code that emits an envelope it built or re-encoded
    /// checks [`Envelope::encoded_len`] against [`MAX_ENVELOPE_BYTES`] first; relays forward the
    /// original bytes instead.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.reserve(self.body.get().len() + 256);
        out.extend_from_slice(b"{\"protocol\":\"");
        out.extend_from_slice(PROTOCOL_V0.as_bytes());
        out.extend_from_slice(b"\",\"id\":");
        json::write_compact(out, &*self.id);
        out.extend_from_slice(b",\"kind\":\"");
        out.extend_from_slice(self.kind.as_str().as_bytes());
        out.extend_from_slice(b"\",\"channel\":");
        json::write_compact(out, &*self.channel);
        out.extend_from_slice(b",\"from\":");
        json::write_compact(out, &*self.from);
        out.extend_from_slice(b",\"to\":");
        match &self.to {
            Some(to) => json::write_compact(out, &**to),
            None => out.extend_from_slice(b"null"),
        }
        for (name, value) in [
            (&b",\"interaction_id\":"[..], &self.interaction_id),
            (b",\"reply_to\":", &self.reply_to),
            (b",\"trace_id\":", &self.trace_id),
            (b",\"causation_id\":", &self.causation_id),
        ] {
            if let Some(v) = value {
                out.extend_from_slice(name);
                json::write_compact(out, &**v);
            }
        }
        out.extend_from_slice(b",\"ts\":");
        json::write_compact(out, &self.ts);
        if let Some(exp) = self.expires_at {
            out.extend_from_slice(b",\"expires_at\":");
            json::write_compact(out, &exp);
        }
        out.extend_from_slice(b",\"body\":");
        out.extend_from_slice(self.body.get().as_bytes());
        out.extend_from_slice(b",\"proof\":");
        match &self.proof {
            Some(p) => out.extend_from_slice(p.get().as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        if let Some(ext) = &self.ext {
            out.extend_from_slice(b",\"ext\":");
            out.extend_from_slice(ext.get().as_bytes());
        }
        out.push(b'}');
    }

    /// The envelope's JSON form.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out);
        // Only valid UTF-8 is ever written: JSON-escaped strings and raw JSON text.
        String::from_utf8(out).unwrap_or_default()
    }

    /// Size in bytes of the JSON form.
    pub fn encoded_len(&self) -> usize {
        let mut out = Vec::new();
        self.write_json(&mut out);
        out.len()
    }

    /// Looks up one key of `ext` (parsing `ext` on demand). `None` when `ext` or the key is absent.
    pub fn ext_value(&self, key: &str) -> Option<&RawValue> {
        let ext = self.ext.as_ref()?;
        json::object_entries(ext.get())?
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// An envelope after step 1 of validation: well-formed JSON of the right types, nothing more.
///
/// Every field is optional and untrimmed. Routers use it to build automatic receipts for
/// envelopes that fail later steps (as the Go reference runtime's router does).
#[derive(Clone, Debug, Default)]
pub struct RawEnvelope<'a> {
    /// `protocol`, as sent.
    pub protocol: Option<Cow<'a, str>>,
    /// `id`, as sent.
    pub id: Option<Cow<'a, str>>,
    /// `kind`, as sent.
    pub kind: Option<Cow<'a, str>>,
    /// `channel`, as sent.
    pub channel: Option<Cow<'a, str>>,
    /// `from`, as sent.
    pub from: Option<Cow<'a, str>>,
    /// `to`, as sent.
    pub to: Option<Cow<'a, str>>,
    /// `interaction_id`, as sent.
    pub interaction_id: Option<Cow<'a, str>>,
    /// `reply_to`, as sent.
    pub reply_to: Option<Cow<'a, str>>,
    /// `trace_id`, as sent.
    pub trace_id: Option<Cow<'a, str>>,
    /// `causation_id`, as sent.
    pub causation_id: Option<Cow<'a, str>>,
    /// `ts`.
    pub ts: Option<i64>,
    /// `expires_at`.
    pub expires_at: Option<i64>,
    /// `body`, raw.
    pub body: Option<&'a RawValue>,
    /// `proof`, raw (an object; `null` reads as absent).
    pub proof: Option<&'a RawValue>,
    /// `ext`, raw (an object; `null` reads as absent).
    pub ext: Option<&'a RawValue>,
}

impl<'a> RawEnvelope<'a> {
    /// Validation step 1: size limit, UTF-8, JSON syntax, top-level object, duplicate keys at
    /// every depth, and the JSON type of every known field.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Rejection> {
        Self::parse_inner(bytes, true)
    }

    /// Step 1 without the duplicate-key scan of `body`, for callers that parse the body with
    /// [`crate::Body::parse`] next, which refuses duplicate keys itself (one scan fewer).
    pub(crate) fn parse_deferring_body(bytes: &'a [u8]) -> Result<Self, Rejection> {
        Self::parse_inner(bytes, false)
    }

    fn parse_inner(bytes: &'a [u8], check_body: bool) -> Result<Self, Rejection> {
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(Rejection::Malformed(
                format!(
                    "envelope is {} bytes; the limit is {MAX_ENVELOPE_BYTES}",
                    bytes.len()
                )
                .into(),
            ));
        }
        let text = std::str::from_utf8(bytes).map_err(|e| {
            Rejection::Malformed(format!("envelope is not valid UTF-8 ({e})").into())
        })?;
        let field = Cell::new("");
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = de
            .deserialize_any(RawVisitor {
                field: &field,
                check_body,
            })
            .and_then(|raw| de.end().map(|()| raw));
        parsed.map_err(|e| {
            let detail = match field.get() {
                "" => format!("invalid JSON: {e}"),
                name => format!("field `{name}`: {e}"),
            };
            Rejection::Malformed(detail.into())
        })
    }

    /// Validation step 2: required fields, `protocol`, `kind`, channel and Peer ID grammars,
    /// `ts`, and the types of `body` and `proof`. Identifiers are trimmed first.
    pub fn into_envelope(self) -> Result<Envelope<'a>, Rejection> {
        let protocol = required(self.protocol, "protocol")?;
        if protocol != PROTOCOL_V0 {
            return Err(Rejection::Malformed(
                format!("field `protocol`: expected \"{PROTOCOL_V0}\", got {protocol:?}").into(),
            ));
        }
        let id = required(self.id, "id")?;
        let kind_str = required(self.kind, "kind")?;
        let kind = Kind::from_wire(&kind_str).ok_or_else(|| {
            Rejection::UnsupportedKind(
                format!("field `kind`: {kind_str:?} is not a v0 kind").into(),
            )
        })?;
        let channel = required(self.channel, "channel")?;
        if !is_channel(&channel) {
            return Err(Rejection::Malformed(
                format!("field `channel`: {channel:?} does not match [a-z0-9][a-z0-9_-]{{0,63}}")
                    .into(),
            ));
        }
        let from = required(self.from, "from")?;
        check_peer_id(&from, "from")?;
        let to = self.to.map(trim_cow).filter(|s| !s.is_empty());
        if let Some(to) = &to {
            check_peer_id(to, "to")?;
        }
        let ts = match self.ts {
            Some(ts) if ts > 0 => ts,
            Some(_) => {
                return Err(Rejection::malformed(
                    "field `ts`: must be a positive Unix time in seconds",
                ));
            }
            None => return Err(Rejection::malformed("field `ts` is required")),
        };
        if let Some(exp) = self.expires_at
            && exp < 0
        {
            return Err(Rejection::malformed(
                "field `expires_at`: must be a non-negative Unix time in seconds",
            ));
        }
        let body = self
            .body
            .ok_or_else(|| Rejection::malformed("field `body` is required"))?;
        if !json::is_object(body.get()) {
            return Err(Rejection::malformed("field `body`: must be a JSON object"));
        }
        Ok(Envelope {
            id,
            kind,
            channel,
            from,
            to,
            interaction_id: trim_opt(self.interaction_id.map(Str)),
            reply_to: trim_opt(self.reply_to.map(Str)),
            trace_id: trim_opt(self.trace_id.map(Str)),
            causation_id: trim_opt(self.causation_id.map(Str)),
            ts,
            expires_at: self.expires_at,
            body: RawJson::borrowed(body),
            proof: self.proof.map(RawJson::borrowed),
            ext: self.ext.map(RawJson::borrowed),
        })
    }
}

fn required<'a>(v: Option<Cow<'a, str>>, name: &'static str) -> Result<Cow<'a, str>, Rejection> {
    match v.map(trim_cow) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(Rejection::Malformed(
            format!("field `{name}` is required").into(),
        )),
    }
}

pub(crate) fn check_peer_id(s: &str, field: &str) -> Result<(), Rejection> {
    if is_peer_id(s) {
        Ok(())
    } else {
        Err(Rejection::Malformed(
            format!("field `{field}`: {s:?} is not a Peer ID ([a-z0-9][a-z0-9._-]{{0,127}})")
                .into(),
        ))
    }
}

struct RawVisitor<'f> {
    field: &'f Cell<&'static str>,
    check_body: bool,
}

/// Top-level fields, in emission order; a field's index is its bit in the duplicate mask.
const FIELDS: [&str; 15] = [
    "protocol",
    "id",
    "kind",
    "channel",
    "from",
    "to",
    "interaction_id",
    "reply_to",
    "trace_id",
    "causation_id",
    "ts",
    "expires_at",
    "body",
    "proof",
    "ext",
];

/// Reads an optional raw object field (`proof`, `ext`): `null` is absent, anything but an object
/// is an error, and duplicate keys are refused at every depth.
fn object_field<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<&'de RawValue>, A::Error> {
    let raw: &'de RawValue = map.next_value()?;
    if json::is_null(raw.get()) {
        return Ok(None);
    }
    if !json::is_object(raw.get()) {
        return Err(de::Error::custom("must be an object or null"));
    }
    json::check_value(raw.get()).map_err(|e| json::nested_error(&e))?;
    Ok(Some(raw))
}

impl<'de> Visitor<'de> for RawVisitor<'_> {
    type Value = RawEnvelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an envelope (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut raw = RawEnvelope::default();
        let field = self.field;
        for_each_field(map, |key, map| {
            let Some(index) = FIELDS.iter().position(|f| *f == key) else {
                return Ok(Field::Unknown);
            };
            field.set(FIELDS[index]);
            let string = |map: &mut A| next_opt::<A, Str<'de>>(map).map(|s| s.map(Str::into_cow));
            match index {
                0 => raw.protocol = string(map)?,
                1 => raw.id = string(map)?,
                2 => raw.kind = string(map)?,
                3 => raw.channel = string(map)?,
                4 => raw.from = string(map)?,
                5 => raw.to = string(map)?,
                6 => raw.interaction_id = string(map)?,
                7 => raw.reply_to = string(map)?,
                8 => raw.trace_id = string(map)?,
                9 => raw.causation_id = string(map)?,
                10 => raw.ts = next_opt(map)?,
                11 => raw.expires_at = next_opt(map)?,
                12 => {
                    let body: &'de RawValue = map.next_value()?;
                    if !json::is_null(body.get()) {
                        if self.check_body {
                            json::check_value(body.get()).map_err(|e| json::nested_error(&e))?;
                        }
                        raw.body = Some(body);
                    }
                }
                13 => raw.proof = object_field(map)?,
                _ => raw.ext = object_field(map)?,
            }
            field.set("");
            Ok(Field::Known(index))
        })?;
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIRECT: &str = r#"{"protocol":"agh-network/v0","id":"msg_direct_01","kind":"direct","channel":"builders","from":"coder.sess-abc","to":"reviewer.sess-xyz","interaction_id":"int_patch_42","reply_to":"msg_say_01","trace_id":"trace_ops_patch_42","causation_id":"msg_say_01","ts":1775822400,"expires_at":1775823000,"body":{"text":"Please review the patch.","intent":"review_request"},"proof":null,"ext":{"agh.workflow":{"ticket":"NET-42"}}}"#;

    #[test]
    fn reference_form_round_trips_byte_for_byte() {
        let env = Envelope::parse(DIRECT.as_bytes()).unwrap();
        assert_eq!(env.to_json(), DIRECT);
        assert!(matches!(env.id, Cow::Borrowed(_)));
    }

    #[test]
    fn to_and_proof_are_always_emitted() {
        let src = r#"{"protocol":"agh-network/v0","id":"m","kind":"say","channel":"c","from":"p","ts":5,"body":{"text":"hi"}}"#;
        let env = Envelope::parse(src.as_bytes()).unwrap();
        assert_eq!(
            env.to_json(),
            r#"{"protocol":"agh-network/v0","id":"m","kind":"say","channel":"c","from":"p","to":null,"ts":5,"body":{"text":"hi"},"proof":null}"#
        );
    }

    #[test]
    fn unknown_ext_keys_and_spacing_survive() {
        let src = r#"{"protocol":"agh-network/v0","id":"m","kind":"say","channel":"c","from":"p","ts":5,"body":{ "text" : "hi", "x.y" : [1, {"z":null}] },"proof":null,"ext":{"acme.v" : {"deep":[1,2,3]},  "agh.future":true}}"#;
        let env = Envelope::parse(src.as_bytes()).unwrap();
        let out = env.to_json();
        assert!(out.contains(r#""body":{ "text" : "hi", "x.y" : [1, {"z":null}] }"#));
        assert!(out.ends_with(r#""ext":{"acme.v" : {"deep":[1,2,3]},  "agh.future":true}}"#));
        assert_eq!(env.ext_value("agh.future").map(RawValue::get), Some("true"));
        assert!(env.ext_value("missing").is_none());
    }

    #[test]
    fn structure_errors_are_malformed_and_name_the_problem() {
        let cases: &[(&[u8], &str)] = &[
            (b"[]", "invalid JSON"),
            (b"\"x\"", "invalid JSON"),
            (b"{", "invalid JSON"),
            (b"{} {}", "trailing"),
            (b"{\"id\":\"a\",\"id\":\"b\"}", "duplicate key `id`"),
            (b"{\"body\":{\"a\":1,\"a\":2}}", "duplicate key `a`"),
            (b"{\"ext\":{\"k\":{\"a\":1,\"a\":2}}}", "duplicate key `a`"),
            (b"{\"zz\":1,\"zz\":2}", "duplicate key `zz`"),
            (b"{\"ts\":1.5}", "field `ts`"),
            (b"{\"ts\":\"1\"}", "field `ts`"),
            (b"{\"kind\":7}", "field `kind`"),
            (b"{\"proof\":\"sig\"}", "field `proof`"),
            (b"{\"ext\":[]}", "field `ext`"),
            (b"{\"id\":\"\xff\"}", "UTF-8"),
        ];
        for (input, needle) in cases {
            let err = RawEnvelope::parse(input).unwrap_err();
            assert!(matches!(err, Rejection::Malformed(_)), "{err}");
            assert!(
                err.detail().contains(needle),
                "{:?}: {err}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn oversize_input_is_refused_before_parsing() {
        let big = vec![b' '; MAX_ENVELOPE_BYTES + 1];
        let err = RawEnvelope::parse(&big).unwrap_err();
        assert!(err.detail().contains("limit"));
    }

    #[test]
    fn header_rules() {
        let base: serde_json::Value = serde_json::from_str(DIRECT).unwrap();
        let check = |edit: &dyn Fn(&mut serde_json::Value), want: &str| {
            let mut v = base.clone();
            edit(&mut v);
            let bytes = serde_json::to_vec(&v).unwrap();
            let got = Envelope::parse(&bytes)
                .map(|_| ())
                .map_err(|e| e.to_string());
            match got {
                Ok(()) => assert_eq!(want, "ok"),
                Err(e) => assert!(e.starts_with(want), "{e} !~ {want}"),
            }
        };
        check(&|v| v["protocol"] = " agh-network/v0 ".into(), "ok");
        check(
            &|v| v["protocol"] = "agh-network/v1".into(),
            "malformed: field `protocol`",
        );
        check(
            &|v| v["kind"] = "recipe".into(),
            "unsupported_kind: field `kind`",
        );
        check(&|v| v["kind"] = " direct ".into(), "ok");
        check(
            &|v| v["channel"] = "bad.channel".into(),
            "malformed: field `channel`",
        );
        check(&|v| v["from"] = "BadPeer".into(), "malformed: field `from`");
        check(
            &|v| v["to"] = "missing channel".into(),
            "malformed: field `to`",
        );
        check(&|v| v["to"] = "   ".into(), "ok");
        check(&|v| v["ts"] = 0.into(), "malformed: field `ts`");
        check(
            &|v| v["expires_at"] = (-1).into(),
            "malformed: field `expires_at`",
        );
        check(&|v| v["body"] = "text".into(), "malformed: field `body`");
        check(
            &|v| v["body"] = serde_json::Value::Null,
            "malformed: field `body` is required",
        );
        check(
            &|v| {
                v.as_object_mut().unwrap().remove("id");
            },
            "malformed: field `id` is required",
        );
    }

    #[test]
    fn blank_optional_identifiers_become_absent() {
        let src = DIRECT.replace(r#""trace_id":"trace_ops_patch_42""#, r#""trace_id":"  ""#);
        let env = Envelope::parse(src.as_bytes()).unwrap();
        assert_eq!(env.trace_id, None);
    }
}
