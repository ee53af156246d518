//! Peer Cards: what a peer claims about itself.
//!
//! Peer Discovery page, "Peer Card" and "Matching semantics"; Capability Discovery page, "Brief
//! discovery". Reference behaviour: the Go reference runtime's Peer Card and whois matching.
//!
//! # Important discrepancies
//! - The Capability Discovery page says a peer without a local catalog "MUST still emit
//!   `peer_card.capabilities` as `[]`". We read that as "never null" for catalog-driven
//!   projections: a card announced by an agent without a catalog keeps the (advisory) capability
//!   claims it declared, as the Peer Discovery page's examples show; only the brief key is removed.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::catalog::Catalog;
use crate::envelope::check_peer_id;
use crate::json::{self, Field, RawJson, Str, TrimmedList, for_each_field, next_opt, trim_opt};
use crate::reason::Rejection;

/// Extension key of the brief capability projection inside `peer_card.ext`.
pub const BRIEF_EXT_KEY: &str = "agh.capabilities_brief";

/// A Peer Card. Lists are trimmed with blank entries dropped, as the reference normalises them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCard<'a> {
    /// The peer's id; equals the envelope `from` in greets and whois responses.
    pub peer_id: Cow<'a, str>,
    /// Optional human-readable label (never used for routing).
    pub display_name: Option<Cow<'a, str>>,
    /// Supported protocol profiles.
    pub profiles_supported: Vec<Cow<'a, str>>,
    /// Advisory capability claims.
    pub capabilities: Vec<Cow<'a, str>>,
    /// Supported artifact types.
    pub artifacts_supported: Vec<Cow<'a, str>>,
    /// Advisory trust modes.
    pub trust_modes_supported: Vec<Cow<'a, str>>,
    /// Extension object, raw JSON text.
    pub ext: Option<RawJson<'a>>,
}

fn own_list(l: Vec<Cow<'_, str>>) -> Vec<Cow<'static, str>> {
    l.into_iter().map(|s| Cow::Owned(s.into_owned())).collect()
}

impl<'a> PeerCard<'a> {
    /// The card the reference runtime emits for a peer with no richer metadata:
    /// `profiles_supported: ["agh-network/v0"]`, `artifacts_supported: ["capability"]`.
    pub fn minimal(peer_id: impl Into<Cow<'a, str>>) -> Self {
        Self {
            peer_id: peer_id.into(),
            display_name: None,
            profiles_supported: vec![Cow::Borrowed(crate::grammar::PROTOCOL_V0)],
            capabilities: Vec::new(),
            artifacts_supported: vec![Cow::Borrowed("capability")],
            trust_modes_supported: Vec::new(),
            ext: None,
        }
    }

    /// Parses and checks a card from JSON text (`peer_id` grammar, the four required arrays).
    pub fn from_json(json: &'a str) -> Result<Self, Rejection> {
        serde_json::from_str::<WireCard<'a>>(json)
            .map_err(|e| Rejection::Malformed(format!("peer_card: {e}").into()))?
            .into_card()
    }

    /// Detaches the card from its input.
    pub fn into_owned(self) -> PeerCard<'static> {
        PeerCard {
            peer_id: Cow::Owned(self.peer_id.into_owned()),
            display_name: self.display_name.map(|d| Cow::Owned(d.into_owned())),
            profiles_supported: own_list(self.profiles_supported),
            capabilities: own_list(self.capabilities),
            artifacts_supported: own_list(self.artifacts_supported),
            trust_modes_supported: own_list(self.trust_modes_supported),
            ext: self.ext.map(RawJson::into_owned),
        }
    }

    /// whois matching, exactly as the Go reference runtime does: the trimmed query matches when it is
    /// empty, or equals the Peer ID, the display name, or any entry of `capabilities`,
    /// `profiles_supported`, `artifacts_supported` or `trust_modes_supported`. Case-sensitive;
    /// no substring or prefix matching.
    pub fn matches_query(&self, query: &str) -> bool {
        let q = query.trim();
        q.is_empty()
            || self.peer_id == q
            || self.display_name.as_deref() == Some(q)
            || [
                &self.capabilities,
                &self.profiles_supported,
                &self.artifacts_supported,
                &self.trust_modes_supported,
            ]
            .into_iter()
            .any(|list| list.iter().any(|e| e == q))
    }

    /// Projects a local catalog into the card (Capability Discovery, "Brief discovery"): with a
    /// catalog, `capabilities` becomes the catalog ids and `ext["agh.capabilities_brief"]` the
    /// `{id, summary}` pairs in the same order; without one, the brief key is removed. Other
    /// `ext` keys are kept in their order.
    pub fn project_brief(&mut self, catalog: Option<&Catalog>) {
        let brief = catalog.map(|catalog| {
            self.capabilities = catalog.ids().map(|id| Cow::Owned(id.to_owned())).collect();
            catalog.brief_json()
        });
        self.ext = replace_ext_key(self.ext.as_deref(), BRIEF_EXT_KEY, brief.as_deref());
    }

    /// Appends the card's JSON form (field order as the reference emits it).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"peer_id\":");
        json::write_compact(out, &*self.peer_id);
        if let Some(d) = &self.display_name {
            out.extend_from_slice(b",\"display_name\":");
            json::write_compact(out, &**d);
        }
        for (name, list) in [
            (&b",\"profiles_supported\":"[..], &self.profiles_supported),
            (b",\"capabilities\":", &self.capabilities),
            (b",\"artifacts_supported\":", &self.artifacts_supported),
            (b",\"trust_modes_supported\":", &self.trust_modes_supported),
        ] {
            out.extend_from_slice(name);
            json::write_compact(out, list);
        }
        if let Some(ext) = &self.ext {
            out.extend_from_slice(b",\"ext\":");
            out.extend_from_slice(ext.get().as_bytes());
        }
        out.push(b'}');
    }

    /// The card's JSON form.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Rewrites a JSON object, dropping `key` and (when `value` is given) appending `key: value`.
/// Other entries keep their order and exact text. `None` when the result would be empty.
pub(crate) fn replace_ext_key(
    ext: Option<&RawValue>,
    key: &str,
    value: Option<&str>,
) -> Option<RawJson<'static>> {
    let entries = ext
        .and_then(|e| json::object_entries(e.get()))
        .unwrap_or_default();
    let mut out = Vec::with_capacity(64);
    out.push(b'{');
    let kept = entries
        .iter()
        .filter(|(k, _)| k != key)
        .map(|(k, v)| (&**k, v.get()));
    for (k, v) in kept.chain(value.map(|v| (key, v))) {
        if out.len() > 1 {
            out.push(b',');
        }
        json::write_compact(&mut out, k);
        out.push(b':');
        out.extend_from_slice(v.as_bytes());
    }
    if out.len() == 1 {
        return None;
    }
    out.push(b'}');
    let text = String::from_utf8(out).ok()?;
    RawJson::from_string(text).ok()
}

#[derive(Default)]
pub(crate) struct WireCard<'a> {
    peer_id: Option<Str<'a>>,
    display_name: Option<Str<'a>>,
    lists: [Option<TrimmedList<'a>>; 4],
    ext: Option<&'a RawValue>,
}

const LISTS: [&str; 4] = [
    "profiles_supported",
    "capabilities",
    "artifacts_supported",
    "trust_modes_supported",
];

impl<'de> Deserialize<'de> for WireCard<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireCard<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Peer Card (a JSON object)")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let mut card = WireCard::default();
                for_each_field(map, |key, map| {
                    let index = match key {
                        "peer_id" => {
                            card.peer_id = next_opt(map).map_err(|e| json::field_error(key, &e))?;
                            0
                        }
                        "display_name" => {
                            card.display_name =
                                next_opt(map).map_err(|e| json::field_error(key, &e))?;
                            1
                        }
                        "ext" => {
                            let ext: Option<&'de RawValue> =
                                next_opt(map).map_err(|e| json::field_error(key, &e))?;
                            if let Some(ext) = ext {
                                if !json::is_object(ext.get()) {
                                    return Err(serde::de::Error::custom(
                                        "field `ext` must be an object",
                                    ));
                                }
                                json::check_value(ext.get()).map_err(|e| json::nested_error(&e))?;
                                card.ext = Some(ext);
                            }
                            2
                        }
                        other => match LISTS.iter().position(|n| *n == other) {
                            Some(i) => {
                                card.lists[i] =
                                    next_opt(map).map_err(|e| json::field_error(other, &e))?;
                                3 + i
                            }
                            None => return Ok(Field::Unknown),
                        },
                    };
                    Ok(Field::Known(index))
                })?;
                Ok(card)
            }
        }
        deserializer.deserialize_map(V)
    }
}

impl<'a> WireCard<'a> {
    pub(crate) fn into_card(self) -> Result<PeerCard<'a>, Rejection> {
        let peer_id = trim_opt(self.peer_id)
            .ok_or_else(|| Rejection::malformed("field `peer_card.peer_id` is required"))?;
        check_peer_id(&peer_id, "peer_card.peer_id")?;
        let [profiles, capabilities, artifacts, trust] = self.lists;
        let list = |l: Option<TrimmedList<'a>>, name: &str| {
            l.map(|l| l.0).ok_or_else(|| {
                Rejection::Malformed(
                    format!("field `peer_card.{name}` is required (an array, possibly empty)")
                        .into(),
                )
            })
        };
        Ok(PeerCard {
            peer_id,
            display_name: trim_opt(self.display_name),
            profiles_supported: list(profiles, LISTS[0])?,
            capabilities: list(capabilities, LISTS[1])?,
            artifacts_supported: list(artifacts, LISTS[2])?,
            trust_modes_supported: list(trust, LISTS[3])?,
            ext: self.ext.map(RawJson::borrowed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::CapabilityDoc;

    const CARD: &str = r#"{"peer_id":"patch-worker.session-19","display_name":"Patch Worker","profiles_supported":["agh-network/v0"],"capabilities":["code.patch","test.run"],"artifacts_supported":["capability"],"trust_modes_supported":["unverified"]}"#;

    #[test]
    fn minimal_card_is_the_reference_default() {
        let card = PeerCard::minimal("p.1");
        assert_eq!(
            card.to_json(),
            r#"{"peer_id":"p.1","profiles_supported":["agh-network/v0"],"capabilities":[],"artifacts_supported":["capability"],"trust_modes_supported":[]}"#
        );
        assert_eq!(PeerCard::from_json(&card.to_json()).unwrap(), card);
    }

    #[test]
    fn parses_and_re_emits() {
        let card = PeerCard::from_json(CARD).unwrap();
        assert_eq!(card.to_json(), CARD);
    }

    #[test]
    fn required_arrays_and_grammar() {
        for (edit, needle) in [
            (
                CARD.replace(r#""capabilities":["code.patch","test.run"],"#, ""),
                "capabilities",
            ),
            (
                CARD.replace(r#"["unverified"]"#, "null"),
                "trust_modes_supported",
            ),
            (
                CARD.replace("patch-worker.session-19", "Patch"),
                "peer_card.peer_id",
            ),
            (
                CARD.replace(r#"["capability"]"#, r#""capability""#),
                "artifacts_supported",
            ),
        ] {
            let err = PeerCard::from_json(&edit).unwrap_err();
            assert!(err.detail().contains(needle), "{err}");
        }
    }

    #[test]
    fn matching_is_exact_and_case_sensitive() {
        let card = PeerCard::from_json(CARD).unwrap();
        for q in [
            "",
            "  ",
            "patch-worker.session-19",
            "Patch Worker",
            " test.run ",
            "agh-network/v0",
            "capability",
            "unverified",
        ] {
            assert!(card.matches_query(q), "{q:?}");
        }
        for q in ["test", "patch worker", "TEST.RUN", "code", "session-19"] {
            assert!(!card.matches_query(q), "{q:?}");
        }
    }

    #[test]
    fn brief_projection_keeps_other_ext_keys() {
        let mut card = PeerCard::from_json(CARD).unwrap().into_owned();
        card.ext =
            RawJson::from_string(r#"{"acme.x":{"k":[1]},"agh.capabilities_brief":[]}"#.into()).ok();
        let mut doc = CapabilityDoc {
            id: "build-site".into(),
            summary: "Build the landing page.".into(),
            outcome: "A finished landing page.".into(),
            ..CapabilityDoc::default()
        };
        doc.seal();
        let catalog = Catalog::new(vec![doc]).unwrap();
        card.project_brief(Some(&catalog));
        assert_eq!(card.capabilities, vec!["build-site"]);
        assert_eq!(
            card.ext.as_deref().map(RawValue::get),
            Some(
                r#"{"acme.x":{"k":[1]},"agh.capabilities_brief":[{"id":"build-site","summary":"Build the landing page."}]}"#
            )
        );
        card.project_brief(None);
        assert_eq!(
            card.ext.as_deref().map(RawValue::get),
            Some(r#"{"acme.x":{"k":[1]}}"#)
        );
        card.ext = None;
        card.project_brief(None);
        assert!(card.ext.is_none());
    }
}
