//! Structured capability documents and their canonical digest.
//!
//! Capability Discovery page, "Explicit transfer through kind:capability"; Message Kinds page,
//! capability body; the digest algorithm is the Go reference runtime's, which is what every
//! AGH runtime computes and verifies.
//!
//! # Important discrepancies
//! - The canonical form is **not** RFC 8785: keys come in a fixed order (`id, summary, outcome,
//!   version, context_needed, artifacts_expected, execution_outline, constraints, examples,
//!   requirements`), `requirements` are sorted by byte value, and strings are escaped the way Go's
//!   `encoding/json` escapes them (`<`, `>`, `&`, U+2028 and U+2029 as `\u` escapes; `\b` and `\f`
//!   short forms as in Go ≥ 1.22).
//! - The digests printed in the seed pages (`sha256:4ac7c4d8…`) are placeholders that match no
//!   document; a document carrying one fails with `verification_failed`.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use sha2::{Digest as _, Sha256};

use crate::json::{Field, Str, TrimmedList, field_error, for_each_field, next_opt, trim_cow};
use crate::reason::Rejection;

/// Prefix of every capability digest.
pub const DIGEST_PREFIX: &str = "sha256:";

/// One structured capability document, normalised (trimmed, blank list entries dropped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapabilityDoc {
    /// Capability id (required).
    pub id: String,
    /// One-line summary (required).
    pub summary: String,
    /// What the caller gets (required).
    pub outcome: String,
    /// Optional version.
    pub version: Option<String>,
    /// Context the provider needs.
    pub context_needed: Vec<String>,
    /// Artifacts the provider returns.
    pub artifacts_expected: Vec<String>,
    /// Steps the provider follows.
    pub execution_outline: Vec<String>,
    /// Constraints the provider honours.
    pub constraints: Vec<String>,
    /// Examples.
    pub examples: Vec<String>,
    /// Other capabilities this one requires (unique, non-blank).
    pub requirements: Vec<String>,
    /// The digest the document carried, if any (`sha256:<hex>`).
    pub digest: Option<String>,
}

/// Which fields a document must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocRules {
    /// A `kind:"capability"` transfer: `digest` is required and must verify.
    Transfer,
    /// A document whose digest is to be computed: any `digest` field is ignored.
    Authoring,
}

impl CapabilityDoc {
    /// Parses one capability document from JSON text and normalises it.
    ///
    /// Errors name the offending field. With [`DocRules::Transfer`] a missing digest is
    /// `malformed` and a wrong one `verification_failed`.
    pub fn from_json(json: &str, rules: DocRules) -> Result<Self, Rejection> {
        let wire: WireDoc<'_> = serde_json::from_str(json)
            .map_err(|e| Rejection::Malformed(format!("capability: {e}").into()))?;
        wire.into_doc(rules)
    }

    /// The canonical bytes the digest is computed over (Go-compatible; see the module docs).
    pub fn canonical_json(&self) -> String {
        let mut out = String::with_capacity(128);
        out.push('{');
        push_field(&mut out, "id", &self.id, true);
        push_field(&mut out, "summary", &self.summary, false);
        push_field(&mut out, "outcome", &self.outcome, false);
        if let Some(v) = &self.version {
            push_field(&mut out, "version", v, false);
        }
        push_list(&mut out, "context_needed", &self.context_needed);
        push_list(&mut out, "artifacts_expected", &self.artifacts_expected);
        push_list(&mut out, "execution_outline", &self.execution_outline);
        push_list(&mut out, "constraints", &self.constraints);
        push_list(&mut out, "examples", &self.examples);
        if !self.requirements.is_empty() {
            let mut sorted: Vec<&String> = self.requirements.iter().collect();
            sorted.sort();
            push_list(&mut out, "requirements", sorted);
        }
        out.push('}');
        out
    }

    /// `sha256:<lowercase hex>` of [`CapabilityDoc::canonical_json`].
    pub fn compute_digest(&self) -> String {
        let hash = Sha256::digest(self.canonical_json().as_bytes());
        format!("{DIGEST_PREFIX}{}", hex::encode(hash))
    }

    /// Fills `digest` with the computed digest and returns it.
    pub fn seal(&mut self) -> &str {
        let digest = self.compute_digest();
        self.digest.insert(digest)
    }

    /// JSON of the document as it rides in `body.capability` (digest last, empty fields omitted).
    pub fn to_transfer_json(&self) -> String {
        let mut out = String::with_capacity(160);
        self.write_common(&mut out, false);
        if let Some(d) = &self.digest {
            push_field(&mut out, "digest", d, false);
        }
        out.push('}');
        out
    }

    /// JSON of the document as a rich catalog entry (`id, summary, outcome` always; `version`,
    /// `digest` and the lists only when non-empty).
    pub fn to_catalog_entry_json(&self) -> String {
        let mut out = String::with_capacity(160);
        self.write_common(&mut out, true);
        out.push('}');
        out
    }

    fn write_common(&self, out: &mut String, digest_after_version: bool) {
        out.push('{');
        push_field(out, "id", &self.id, true);
        push_field(out, "summary", &self.summary, false);
        push_field(out, "outcome", &self.outcome, false);
        if let Some(v) = &self.version {
            push_field(out, "version", v, false);
        }
        if digest_after_version && let Some(d) = &self.digest {
            push_field(out, "digest", d, false);
        }
        push_list(out, "context_needed", &self.context_needed);
        push_list(out, "artifacts_expected", &self.artifacts_expected);
        push_list(out, "execution_outline", &self.execution_outline);
        push_list(out, "constraints", &self.constraints);
        push_list(out, "examples", &self.examples);
        push_list(out, "requirements", &self.requirements);
    }
}

fn push_field(out: &mut String, name: &str, value: &str, first: bool) {
    if !first {
        out.push(',');
    }
    out.push('"');
    out.push_str(name);
    out.push_str("\":");
    write_go_string(out, value);
}

fn push_list<'s, I>(out: &mut String, name: &str, items: I)
where
    I: IntoIterator<Item = &'s String>,
{
    let mut items = items.into_iter().peekable();
    if items.peek().is_none() {
        return;
    }
    out.push_str(",\"");
    out.push_str(name);
    out.push_str("\":[");
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_go_string(out, item);
    }
    out.push(']');
}

/// Writes `s` as a JSON string exactly as Go's `encoding/json` (≥ 1.22, HTML escaping on) does.
pub fn write_go_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let escape: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            _ => None,
        };
        let needs_u = matches!(
            c,
            '\0'..='\u{1f}' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}'
        );
        if escape.is_none() && !needs_u {
            continue;
        }
        out.push_str(&s[start..i]);
        start = i + c.len_utf8();
        if let Some(e) = escape {
            out.push_str(e);
        } else {
            let v = c as u32;
            out.push_str("\\u");
            for shift in [12, 8, 4, 0] {
                out.push(char::from(HEX[((v >> shift) & 0xf) as usize]));
            }
        }
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// The document as it appears on the wire, before normalisation.
#[derive(Default)]
pub(crate) struct WireDoc<'a> {
    id: Option<Cow<'a, str>>,
    summary: Option<Cow<'a, str>>,
    outcome: Option<Cow<'a, str>>,
    version: Option<Cow<'a, str>>,
    lists: [Option<TrimmedList<'a>>; 5],
    requirements: Option<Vec<Str<'a>>>,
    digest: Option<Cow<'a, str>>,
}

const LIST_NAMES: [&str; 5] = [
    "context_needed",
    "artifacts_expected",
    "execution_outline",
    "constraints",
    "examples",
];

impl<'de> Deserialize<'de> for WireDoc<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireDoc<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a capability document (a JSON object)")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let mut doc = WireDoc::default();
                for_each_field(map, |key, map| {
                    let s = |map: &mut A| {
                        next_opt::<A, Str<'de>>(map)
                            .map(|s| s.map(Str::into_cow))
                            .map_err(|e| field_error(key, &e))
                    };
                    let index = match key {
                        "id" => {
                            doc.id = s(map)?;
                            0
                        }
                        "summary" => {
                            doc.summary = s(map)?;
                            1
                        }
                        "outcome" => {
                            doc.outcome = s(map)?;
                            2
                        }
                        "version" => {
                            doc.version = s(map)?;
                            3
                        }
                        "digest" => {
                            doc.digest = s(map)?;
                            4
                        }
                        "requirements" => {
                            doc.requirements = next_opt(map).map_err(|e| field_error(key, &e))?;
                            5
                        }
                        other => match LIST_NAMES.iter().position(|n| *n == other) {
                            Some(i) => {
                                doc.lists[i] = next_opt(map).map_err(|e| field_error(key, &e))?;
                                6 + i
                            }
                            None => return Ok(Field::Unknown),
                        },
                    };
                    Ok(Field::Known(index))
                })?;
                Ok(doc)
            }
        }
        deserializer.deserialize_map(V)
    }
}

fn required_text(v: Option<Cow<'_, str>>, name: &str) -> Result<String, Rejection> {
    match v.map(trim_cow) {
        Some(s) if !s.is_empty() => Ok(s.into_owned()),
        _ => Err(Rejection::Malformed(
            format!("capability field `{name}` is required").into(),
        )),
    }
}

impl WireDoc<'_> {
    pub(crate) fn into_doc(self, rules: DocRules) -> Result<CapabilityDoc, Rejection> {
        let id = required_text(self.id, "id")?;
        let summary = required_text(self.summary, "summary")?;
        let outcome = required_text(self.outcome, "outcome")?;
        let version = self
            .version
            .map(trim_cow)
            .filter(|v| !v.is_empty())
            .map(Cow::into_owned);
        let [
            context_needed,
            artifacts_expected,
            execution_outline,
            constraints,
            examples,
        ] = self.lists.map(|l| {
            l.map(|l| l.0.into_iter().map(Cow::into_owned).collect())
                .unwrap_or_default()
        });
        let mut requirements: Vec<String> = Vec::new();
        for Str(r) in self.requirements.unwrap_or_default() {
            let r = trim_cow(r);
            if r.is_empty() {
                return Err(Rejection::malformed(
                    "capability field `requirements`: entries must not be blank",
                ));
            }
            if requirements.iter().any(|e| *e == r) {
                return Err(Rejection::Malformed(
                    format!("capability field `requirements`: {r:?} is listed twice").into(),
                ));
            }
            requirements.push(r.into_owned());
        }
        let mut doc = CapabilityDoc {
            id,
            summary,
            outcome,
            version,
            context_needed,
            artifacts_expected,
            execution_outline,
            constraints,
            examples,
            requirements,
            digest: None,
        };
        match rules {
            DocRules::Authoring => {
                doc.seal();
            }
            DocRules::Transfer => {
                let claimed = required_text(self.digest, "digest")?;
                let actual = doc.compute_digest();
                if claimed != actual {
                    return Err(Rejection::VerificationFailed(
                        format!(
                            "capability field `digest`: {claimed} does not match the document ({actual})"
                        )
                        .into(),
                    ));
                }
                doc.digest = Some(actual);
            }
        }
        Ok(doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_string_escaping() {
        let mut s = String::new();
        write_go_string(
            &mut s,
            "a\"\\\n\r\t\u{8}\u{c}\u{1}<>&\u{2028}\u{2029}/\u{7f}é😀",
        );
        assert_eq!(
            s,
            "\"a\\\"\\\\\\n\\r\\t\\b\\f\\u0001\\u003c\\u003e\\u0026\\u2028\\u2029/\u{7f}é😀\""
        );
    }

    #[test]
    fn normalisation_vector_from_the_notes() {
        let doc = CapabilityDoc::from_json(
            r#"{"id":"  spaced  ","summary":"  S  ","outcome":" O ","version":"   ","context_needed":["  a ","","   "],"examples":[],"requirements":[" zeta","Alpha","beta"]}"#,
            DocRules::Authoring,
        )
        .unwrap();
        assert_eq!(
            doc.canonical_json(),
            r#"{"id":"spaced","summary":"S","outcome":"O","context_needed":["a"],"requirements":["Alpha","beta","zeta"]}"#
        );
        assert_eq!(
            doc.digest.as_deref(),
            Some("sha256:60d3b3c819e47d9ce3d20b54e75cc5933810e30129397e68c39c550b5afd31ff")
        );
    }

    #[test]
    fn transfer_rules() {
        let good = r#"{"id":"review-fix","summary":"Review Fix Flow","outcome":"A reusable review fix workflow.","version":"1.0.0","execution_outline":["Inspect the issue","Draft the fix"],"requirements":["workspace-write"],"digest":"sha256:edb42ce4ca23d905aeeba399001ca6d23420610775ba41ef66e90f47f14dba0d"}"#;
        let doc = CapabilityDoc::from_json(good, DocRules::Transfer).unwrap();
        assert_eq!(doc.to_transfer_json(), good);
        let seed = good.replace(
            "edb42ce4ca23d905aeeba399001ca6d23420610775ba41ef66e90f47f14dba0d",
            "4ac7c4d8f64f35672e0e46ae7b8cfb2fd8d8a48fd6a0f4f37ab89f4459ef560f",
        );
        assert!(matches!(
            CapabilityDoc::from_json(&seed, DocRules::Transfer),
            Err(Rejection::VerificationFailed(_))
        ));
        let upper = good.replace("sha256:edb42ce4", "sha256:EDB42CE4");
        assert!(matches!(
            CapabilityDoc::from_json(&upper, DocRules::Transfer),
            Err(Rejection::VerificationFailed(_))
        ));
        for (edit, needle) in [
            (good.replace(r#""outcome":"A reusable review fix workflow.","#, ""), "`outcome`"),
            (good.replace(r#","digest":"sha256:edb42ce4ca23d905aeeba399001ca6d23420610775ba41ef66e90f47f14dba0d""#, ""), "`digest`"),
            (good.replace(r#"["workspace-write"]"#, r#"["a","a"]"#), "listed twice"),
            (good.replace(r#"["workspace-write"]"#, r#"["a"," "]"#), "blank"),
            (good.replace(r#""version":"1.0.0""#, r#""version":1"#), "invalid type"),
        ] {
            let err = CapabilityDoc::from_json(&edit, DocRules::Transfer).unwrap_err();
            assert!(matches!(err, Rejection::Malformed(_)), "{err}");
            assert!(err.detail().contains(needle), "{err}");
        }
    }

    #[test]
    fn catalog_entry_puts_digest_after_version() {
        let mut doc = CapabilityDoc {
            id: "build-site".into(),
            summary: "Build the landing page.".into(),
            outcome: "A finished landing page.".into(),
            version: Some("1.0.0".into()),
            context_needed: vec!["repo".into()],
            execution_outline: vec!["Inspect".into(), "Build".into()],
            ..CapabilityDoc::default()
        };
        doc.seal();
        assert_eq!(
            doc.to_catalog_entry_json(),
            r#"{"id":"build-site","summary":"Build the landing page.","outcome":"A finished landing page.","version":"1.0.0","digest":"sha256:56756e530d86ff5ec3dbdf2a0034fdcd69dae0f8d676dd04faca07f46b63c225","context_needed":["repo"],"execution_outline":["Inspect","Build"]}"#
        );
    }
}
