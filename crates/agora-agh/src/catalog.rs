//! A peer's local capability catalog and its discovery projections.
//!
//! Capability Discovery page: "Brief discovery" (ids + `{id, summary}` pairs in catalog order),
//! "Rich discovery through whois" (`ext["agh.include"]`, `ext["agh.capability_ids"]`, the
//! response's `ext["agh.capability_catalog"]`) and the empty-array rules. Reference behaviour:
//! the Go reference runtime's discovery surfaces.

use std::fmt::Write as _;

use serde_json::value::RawValue;

use crate::capability::{CapabilityDoc, DocRules, write_go_string};
use crate::envelope::Envelope;
use crate::json;
use crate::reason::Rejection;

/// Request extension key listing what the caller wants included.
pub const INCLUDE_EXT_KEY: &str = "agh.include";
/// Value of `agh.include` that asks for the rich catalog.
pub const INCLUDE_CAPABILITY_CATALOG: &str = "capability_catalog";
/// Request extension key narrowing the rich catalog to some capability ids.
pub const CAPABILITY_IDS_EXT_KEY: &str = "agh.capability_ids";
/// Response extension key carrying the rich catalog.
pub const CATALOG_EXT_KEY: &str = "agh.capability_catalog";

/// A catalog could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// Two documents share an id.
    #[error("capability id {0:?} appears more than once")]
    DuplicateId(String),
    /// A document is invalid.
    #[error("{0}")]
    Invalid(#[from] Rejection),
}

/// An ordered set of capability documents with unique ids, each carrying its computed digest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalog {
    docs: Vec<CapabilityDoc>,
}

impl Catalog {
    /// Builds a catalog; digests are (re)computed, ids must be unique.
    pub fn new(docs: Vec<CapabilityDoc>) -> Result<Self, CatalogError> {
        let mut out: Vec<CapabilityDoc> = Vec::with_capacity(docs.len());
        for mut doc in docs {
            if out.iter().any(|d| d.id == doc.id) {
                return Err(CatalogError::DuplicateId(doc.id));
            }
            doc.seal();
            out.push(doc);
        }
        Ok(Self { docs: out })
    }

    /// Reads a catalog from JSON: either an array of documents or `{"capabilities": [...]}` (the
    /// rich-catalog shape). A document that carries a `digest` must carry the right one.
    pub fn from_json(text: &str) -> Result<Self, CatalogError> {
        let text = text.trim_start();
        let list_text = if json::is_object(text) {
            let entries = json::object_entries(text)
                .ok_or_else(|| Rejection::malformed("catalog: invalid JSON object"))?;
            entries
                .into_iter()
                .find(|(k, _)| k == "capabilities")
                .map(|(_, v)| v.get())
                .ok_or_else(|| Rejection::malformed("catalog: field `capabilities` is required"))?
        } else {
            text
        };
        let raw: Vec<&RawValue> = serde_json::from_str(list_text)
            .map_err(|e| Rejection::Malformed(format!("catalog: {e}").into()))?;
        let mut docs = Vec::with_capacity(raw.len());
        for (i, doc) in raw.into_iter().enumerate() {
            let has_digest = json::object_entries(doc.get())
                .is_some_and(|e| e.iter().any(|(k, _)| k == "digest"));
            let rules = if has_digest {
                DocRules::Transfer
            } else {
                DocRules::Authoring
            };
            let parsed = CapabilityDoc::from_json(doc.get(), rules).map_err(|e| {
                let detail = format!("catalog entry {i}: {}", e.detail());
                match e {
                    Rejection::VerificationFailed(_) => {
                        Rejection::VerificationFailed(detail.into())
                    }
                    _ => Rejection::Malformed(detail.into()),
                }
            })?;
            docs.push(parsed);
        }
        Self::new(docs)
    }

    /// Documents in catalog order.
    pub fn docs(&self) -> &[CapabilityDoc] {
        &self.docs
    }

    /// Capability ids in catalog order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.docs.iter().map(|d| d.id.as_str())
    }

    /// The document with this id.
    pub fn get(&self, id: &str) -> Option<&CapabilityDoc> {
        self.docs.iter().find(|d| d.id == id)
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// `true` when the catalog holds no document.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The brief projection: `[{"id":…,"summary":…}, …]` in catalog order.
    pub fn brief_json(&self) -> String {
        brief_json(self.docs.iter())
    }

    /// The documents a filter keeps, in catalog order.
    pub fn filtered<'s>(&'s self, filter: &'s IdFilter) -> impl Iterator<Item = &'s CapabilityDoc> {
        self.docs.iter().filter(move |d| filter.keeps(&d.id))
    }

    /// A copy holding only what `filter` keeps (catalog order kept).
    pub fn narrowed(&self, filter: &IdFilter) -> Self {
        Self {
            docs: self.filtered(filter).cloned().collect(),
        }
    }
}

fn brief_json<'d>(docs: impl Iterator<Item = &'d CapabilityDoc>) -> String {
    let mut out = String::from("[");
    for (i, d) in docs.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"id\":");
        write_go_string(&mut out, &d.id);
        out.push_str(",\"summary\":");
        write_go_string(&mut out, &d.summary);
        out.push('}');
    }
    out.push(']');
    out
}

/// The value of `ext["agh.capability_catalog"]` for a response: `{"capabilities":[…]}` with the
/// documents `filter` keeps, in catalog order; `[]` when there is no catalog.
pub fn rich_catalog_json(catalog: Option<&Catalog>, filter: &IdFilter) -> String {
    let mut out = String::from("{\"capabilities\":[");
    if let Some(catalog) = catalog {
        for (i, d) in catalog.filtered(filter).enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&d.to_catalog_entry_json());
        }
    }
    out.push_str("]}");
    out
}

/// Which capability ids a rich whois response may carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdFilter {
    /// No `agh.capability_ids`: every capability.
    All,
    /// Only these ids (trimmed). Empty when the request's list was empty, all blank or not an
    /// array of strings: the response then carries `[]`.
    Only(Vec<String>),
}

impl IdFilter {
    /// `true` when the capability `id` passes the filter.
    pub fn keeps(&self, id: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(ids) => ids.iter().any(|i| i == id),
        }
    }
}

/// A whois request's opt-in to rich discovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RichRequest {
    /// Which capabilities to return.
    pub filter: IdFilter,
}

impl RichRequest {
    /// Reads the request extensions. `None` unless `ext["agh.include"]` is an array of strings
    /// containing `"capability_catalog"` (a bare string or any other shape is ignored; unknown
    /// values inside the array are ignored).
    pub fn from_envelope(envelope: &Envelope<'_>) -> Option<Self> {
        let include = envelope.ext_value(INCLUDE_EXT_KEY)?;
        let include: Vec<String> = serde_json::from_str(include.get()).ok()?;
        if !include
            .iter()
            .any(|v| v.trim() == INCLUDE_CAPABILITY_CATALOG)
        {
            return None;
        }
        let filter = match envelope.ext_value(CAPABILITY_IDS_EXT_KEY) {
            None => IdFilter::All,
            // Present but `null`, empty, all blank or not an array of strings: nothing matches
            // (the reference decodes `null` as an empty list).
            Some(raw) => IdFilter::Only(
                serde_json::from_str::<Vec<String>>(raw.get())
                    .map(|ids| {
                        ids.into_iter()
                            .map(|s| s.trim().to_owned())
                            .filter(|s| !s.is_empty())
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
        };
        Some(Self { filter })
    }

    /// The request extension object asking for the rich catalog (optionally narrowed).
    pub fn ext_json(ids: Option<&[&str]>) -> String {
        let mut out = format!("{{\"{INCLUDE_EXT_KEY}\":[\"{INCLUDE_CAPABILITY_CATALOG}\"]");
        if let Some(ids) = ids {
            let _ = write!(out, ",\"{CAPABILITY_IDS_EXT_KEY}\":");
            out.push_str(&serde_json::to_string(ids).unwrap_or_else(|_| "[]".into()));
        }
        out.push('}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, summary: &str) -> CapabilityDoc {
        CapabilityDoc {
            id: id.into(),
            summary: summary.into(),
            outcome: format!("{id} done"),
            ..CapabilityDoc::default()
        }
    }

    fn catalog() -> Catalog {
        Catalog::new(vec![
            doc("build-site", "Build."),
            doc("review-copy", "Review."),
            doc("ship", "Ship."),
        ])
        .unwrap()
    }

    #[test]
    fn ids_unique_and_digests_sealed() {
        let err = Catalog::new(vec![doc("a", "x"), doc("a", "y")]).unwrap_err();
        assert_eq!(err, CatalogError::DuplicateId("a".into()));
        assert!(catalog().docs().iter().all(|d| {
            d.digest
                .as_deref()
                .is_some_and(|d| d.starts_with("sha256:"))
        }));
    }

    #[test]
    fn brief_in_catalog_order() {
        assert_eq!(
            catalog().brief_json(),
            r#"[{"id":"build-site","summary":"Build."},{"id":"review-copy","summary":"Review."},{"id":"ship","summary":"Ship."}]"#
        );
    }

    #[test]
    fn rich_filtering_keeps_catalog_order_and_empty_rules() {
        let c = catalog();
        let ids = |json: &str| -> Vec<String> {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            v["capabilities"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            ids(&rich_catalog_json(Some(&c), &IdFilter::All)),
            ["build-site", "review-copy", "ship"]
        );
        let only = IdFilter::Only(vec!["ship".into(), "build-site".into()]);
        assert_eq!(
            ids(&rich_catalog_json(Some(&c), &only)),
            ["build-site", "ship"]
        );
        assert_eq!(
            rich_catalog_json(Some(&c), &IdFilter::Only(vec!["nope".into()])),
            r#"{"capabilities":[]}"#
        );
        assert_eq!(
            rich_catalog_json(Some(&c), &IdFilter::Only(vec![])),
            r#"{"capabilities":[]}"#
        );
        assert_eq!(
            rich_catalog_json(None, &IdFilter::All),
            r#"{"capabilities":[]}"#
        );
    }

    #[test]
    fn catalog_files_in_both_shapes() {
        let arr =
            r#"[{"id":"a","summary":"A","outcome":"x"},{"id":"b","summary":"B","outcome":"y"}]"#;
        let obj = format!(r#"{{"capabilities":{arr}}}"#);
        assert_eq!(
            Catalog::from_json(arr).unwrap(),
            Catalog::from_json(&obj).unwrap()
        );
        let bad_digest = r#"[{"id":"a","summary":"A","outcome":"x","digest":"sha256:00"}]"#;
        assert!(matches!(
            Catalog::from_json(bad_digest),
            Err(CatalogError::Invalid(Rejection::VerificationFailed(_)))
        ));
        assert!(Catalog::from_json(r#"[{"id":"a","summary":"A"}]"#).is_err());
        assert!(Catalog::from_json("{}").is_err());
    }
}
