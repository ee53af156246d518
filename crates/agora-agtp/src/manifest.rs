//! Agent Manifest Documents as the ANS indexes them (discovery draft §2 and §3.4, base draft -02
//! §6.4), and the lifecycle states of §4.2–4.3.
//!
//! The draft's field names are canonical here. The newer Agent Identity Document names are
//! accepted as aliases (`agent_id`, `name`, `description`, `methods`, `trust_score`, `status`,
//! `scopes_accepted`, `skills`), and lifecycle names are case-insensitive with `retired` meaning
//! Revoked. The document as received is kept (`raw`) so that DESCRIBE answers and refreshes can
//! return it unchanged.

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::error::AgtpError;

/// Largest accepted manifest, serialised.
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;
/// Longest list (methods, capabilities, scopes) accepted in a manifest.
pub const MAX_LIST: usize = 256;

/// Lifecycle state of an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lifecycle {
    /// Discoverable.
    Active,
    /// Temporarily out of service; can be reinstated.
    Suspended,
    /// Permanently withdrawn (`retired` in the newer base drafts).
    Revoked,
    /// Superseded; out of discovery.
    Deprecated,
}

impl Lifecycle {
    /// The draft's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "Active",
            Self::Suspended => "Suspended",
            Self::Revoked => "Revoked",
            Self::Deprecated => "Deprecated",
        }
    }
}

impl Lifecycle {
    /// The newer base draft's spelling (the Identity Document's `status`): `active`,
    /// `suspended`, `retired`, `deprecated`.
    pub fn as_status(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Suspended => "suspended",
            Self::Revoked => "retired",
            Self::Deprecated => "deprecated",
        }
    }
}

impl fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Lifecycle {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "active" => Ok(Self::Active),
            "suspended" => Ok(Self::Suspended),
            "revoked" | "retired" => Ok(Self::Revoked),
            "deprecated" => Ok(Self::Deprecated),
            other => Err(format!(
                "unknown lifecycle state {other:?} (Active, Suspended, Revoked/retired, Deprecated)"
            )),
        }
    }
}

/// The lifecycle methods that move an agent between states (§4.2, §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transition {
    /// `ACTIVATE`: registers the manifest, state Active.
    Activate,
    /// `DEACTIVATE`: Active → Suspended.
    Deactivate,
    /// `REINSTATE`: Suspended → Active.
    Reinstate,
    /// `REVOKE`: any → Revoked (final).
    Revoke,
    /// `DEPRECATE`: Active or Suspended → Deprecated.
    Deprecate,
}

impl Transition {
    /// The AGTP method name.
    pub fn method(self) -> &'static str {
        match self {
            Self::Activate => "ACTIVATE",
            Self::Deactivate => "DEACTIVATE",
            Self::Reinstate => "REINSTATE",
            Self::Revoke => "REVOKE",
            Self::Deprecate => "DEPRECATE",
        }
    }

    /// From an AGTP method name (case-insensitive).
    pub fn from_method(m: &str) -> Option<Self> {
        match m.to_ascii_uppercase().as_str() {
            "ACTIVATE" => Some(Self::Activate),
            "DEACTIVATE" => Some(Self::Deactivate),
            "REINSTATE" => Some(Self::Reinstate),
            "REVOKE" => Some(Self::Revoke),
            "DEPRECATE" => Some(Self::Deprecate),
            _ => None,
        }
    }

    /// The state after this transition from `from` (`None`: not registered yet), or why it is
    /// not allowed. Same-state transitions are allowed (no-ops).
    pub fn apply(self, from: Option<Lifecycle>) -> Result<Lifecycle, AgtpError> {
        use Lifecycle::*;
        let to = match (self, from) {
            (_, Some(Revoked)) if self != Self::Revoke => {
                return Err(AgtpError::Conflict(
                    "the agent is Revoked; revocation is permanent".into(),
                ));
            }
            (Self::Activate, None | Some(Active | Suspended | Deprecated)) => Active,
            (_, None) => {
                return Err(AgtpError::NotFound(
                    "no agent with that canonical_id is registered".into(),
                ));
            }
            (Self::Deactivate, Some(Active | Suspended)) => Suspended,
            (Self::Reinstate, Some(Suspended | Active)) => Active,
            (Self::Revoke, Some(_)) => Revoked,
            (Self::Deprecate, Some(Active | Suspended | Deprecated)) => Deprecated,
            (t, Some(s)) => {
                return Err(AgtpError::Conflict(format!(
                    "{} is not allowed from {s}",
                    t.method()
                )));
            }
        };
        Ok(to)
    }
}

// Field names: the draft's first, then the newer Identity Document's.
const ID: [&str; 2] = ["canonical_id", "agent_id"];
const TRUST: [&str; 2] = ["behavioral_trust_score", "trust_score"];
const STATE: [&str; 2] = ["lifecycle_state", "status"];
const CAPABILITIES: [&str; 2] = ["capabilities", "skills"];
const SCOPES: [&str; 2] = ["authority_scope_categories", "scopes_accepted"];
const ENDPOINT: [&str; 2] = ["endpoint", "agtp_endpoint"];
const LABEL: [&str; 2] = ["agent_label", "name"];
const METHODS: [&str; 2] = ["supported_methods", "methods"];
const DESCRIPTION: [&str; 2] = ["job_description", "description"];

/// Every field that has two names (draft name first, newer name second).
pub const FIELD_ALIASES: [[&str; 2]; 9] = [
    ID,
    TRUST,
    STATE,
    CAPABILITIES,
    SCOPES,
    ENDPOINT,
    LABEL,
    METHODS,
    DESCRIPTION,
];

/// An indexed Agent Manifest Document.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// Canonical Agent-ID (the index key).
    pub canonical_id: String,
    /// `agtp://…` URI of the manifest.
    pub manifest_uri: String,
    /// Human-readable label.
    pub agent_label: String,
    /// Organisation domain.
    pub org_domain: String,
    /// Governance zone (`zone:…`).
    pub governance_zone: String,
    /// Trust tier: 1 (verified), 2 (org-asserted), 3 (experimental; never discoverable).
    pub trust_tier: u8,
    /// Behavioural trust score in [0, 1].
    pub behavioral_trust_score: f64,
    /// Methods the agent serves.
    pub supported_methods: Vec<String>,
    /// Declared capability tags (`capabilities`, or the newer `skills` / `tools`).
    pub capabilities: Vec<String>,
    /// Modalities, if declared.
    pub modalities: Vec<String>,
    /// Authority-Scope categories the agent accepts.
    pub authority_scope_categories: Vec<String>,
    /// What the agent does.
    pub job_description: String,
    /// Scope a caller needs to interact with the agent (`required_scope`, else derived from the
    /// scope categories).
    pub required_scope: Option<String>,
    /// Where the agent answers AGTP (`host:port` or `agtp://host[:port]/…`), for refresh.
    pub endpoint: Option<String>,
    /// Lifecycle state declared in the document.
    pub lifecycle_state: Lifecycle,
    /// The document as received.
    pub raw: Value,
}

fn alias<'a>(obj: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .find_map(|n| obj.get(*n).filter(|v| !v.is_null()))
}

fn text(obj: &Map<String, Value>, names: &[&str], max: usize) -> Result<Option<String>, String> {
    match alias(obj, names) {
        None => Ok(None),
        Some(Value::String(s)) if s.len() <= max => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(format!("{} is longer than {max} bytes", names[0])),
        Some(_) => Err(format!("{} must be a string", names[0])),
    }
}

fn list(obj: &Map<String, Value>, names: &[&str]) -> Result<Vec<String>, String> {
    let Some(v) = alias(obj, names) else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = v else {
        return Err(format!("{} must be an array", names[0]));
    };
    if items.len() > MAX_LIST {
        return Err(format!("{} has more than {MAX_LIST} entries", names[0]));
    }
    items
        .iter()
        .map(|item| match item {
            Value::String(s) if s.len() <= 256 => Ok(s.clone()),
            // Newer documents list skills as objects; their name (or id) is the tag.
            Value::Object(o) => match alias(o, &["name", "id"]) {
                Some(Value::String(s)) if s.len() <= 256 => Ok(s.clone()),
                _ => Err(format!("{} entries must be strings or {{name}}", names[0])),
            },
            _ => Err(format!("{} entries must be strings", names[0])),
        })
        .collect()
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '@')
}

impl Manifest {
    /// Reads a manifest; the error says which field is wrong (answered 422).
    pub fn from_value(raw: Value) -> Result<Self, AgtpError> {
        Self::parse(raw).map_err(AgtpError::Unprocessable)
    }

    fn parse(raw: Value) -> Result<Self, String> {
        let Value::Object(obj) = &raw else {
            return Err("a manifest must be a JSON object".into());
        };
        let canonical_id = text(obj, &ID, 128)?.ok_or("canonical_id (or agent_id) is required")?;
        if canonical_id.is_empty() || !canonical_id.chars().all(is_id_char) {
            return Err(
                "canonical_id must be 1-128 characters of letters, digits and - _ . : / @".into(),
            );
        }
        let trust_tier = match alias(obj, &["trust_tier"]) {
            None => 2,
            Some(v) => match v.as_u64() {
                Some(t @ 1..=3) => t as u8,
                _ => return Err("trust_tier must be 1, 2 or 3".into()),
            },
        };
        let behavioral_trust_score = match alias(obj, &TRUST) {
            None => return Err("behavioral_trust_score (or trust_score) is required".into()),
            Some(v) => match v.as_f64() {
                Some(x) if (0.0..=1.0).contains(&x) => x,
                _ => return Err("behavioral_trust_score must be a number in [0, 1]".into()),
            },
        };
        let lifecycle_state = match text(obj, &STATE, 32)? {
            None => Lifecycle::Active,
            Some(s) => s.parse()?,
        };
        let mut capabilities = list(obj, &CAPABILITIES)?;
        if capabilities.is_empty() {
            capabilities = list(obj, &["tools"])?;
        }
        let authority_scope_categories = list(obj, &SCOPES)?;
        let required_scope = match text(obj, &["required_scope"], 1024)? {
            Some(s) => Some(s),
            None if authority_scope_categories.is_empty() => None,
            None => Some(authority_scope_categories.join(" ")),
        };
        let endpoint = text(obj, &ENDPOINT, 512)?;
        let manifest_uri = text(obj, &["manifest_uri"], 1024)?.unwrap_or_default();
        Ok(Self {
            agent_label: text(obj, &LABEL, 256)?.unwrap_or_default(),
            org_domain: text(obj, &["org_domain"], 256)?.unwrap_or_default(),
            governance_zone: text(obj, &["governance_zone"], 256)?.unwrap_or_default(),
            supported_methods: list(obj, &METHODS)?,
            modalities: list(obj, &["modalities"])?,
            job_description: text(obj, &DESCRIPTION, 8192)?.unwrap_or_default(),
            canonical_id,
            manifest_uri,
            trust_tier,
            behavioral_trust_score,
            capabilities,
            authority_scope_categories,
            required_scope,
            endpoint,
            lifecycle_state,
            raw,
        })
    }

    /// The text the capability match reads: description, capabilities, methods and label.
    pub fn match_fields(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.job_description.as_str())
            .chain(self.capabilities.iter().map(String::as_str))
            .chain(self.supported_methods.iter().map(String::as_str))
            .chain(std::iter::once(self.agent_label.as_str()))
    }

    /// Whether the manifest declares something in a DESCRIBE capability domain (`methods`,
    /// `tools`, `modalities`, `zones`, `version`, `budget`); `None` when `domain` is not one.
    pub fn declares_domain(&self, domain: &str) -> Option<bool> {
        let obj = self.raw.as_object();
        let has = |k: &str| obj.and_then(|o| o.get(k)).is_some_and(|v| !v.is_null());
        match domain.to_ascii_lowercase().as_str() {
            "methods" => Some(!self.supported_methods.is_empty()),
            "tools" => Some(!self.capabilities.is_empty()),
            "modalities" => Some(!self.modalities.is_empty()),
            "zones" => Some(!self.governance_zone.is_empty() || has("zones_accepted")),
            "version" => Some(has("version")),
            "budget" => Some(has("budget_units_accepted")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_spellings_of_each_state_round_trip() {
        for s in [
            Lifecycle::Active,
            Lifecycle::Suspended,
            Lifecycle::Revoked,
            Lifecycle::Deprecated,
        ] {
            assert_eq!(s.as_str().parse::<Lifecycle>(), Ok(s));
            assert_eq!(s.as_status().parse::<Lifecycle>(), Ok(s));
        }
        assert_eq!(Lifecycle::Revoked.as_status(), "retired");
    }

    fn draft() -> Value {
        json!({
            "document_type": "agtp-manifest",
            "manifest_uri": "agtp://agtp.auditor.tld/agents/solidity-auditor",
            "canonical_id": "4f7e1a2b9c3d",
            "agent_label": "solidity-auditor",
            "org_domain": "auditor.tld",
            "governance_zone": "zone:finance",
            "trust_tier": 1,
            "behavioral_trust_score": 0.97,
            "lifecycle_state": "Active",
            "supported_methods": ["QUERY", "ANALYZE", "VALIDATE", "REPORT"],
            "authority_scope_categories": ["audit:read", "code:analyze"],
            "job_description": "Static and dynamic analysis of Solidity smart contracts."
        })
    }

    #[test]
    fn reads_the_draft_fields() {
        let m = Manifest::from_value(draft()).expect("valid");
        assert_eq!(m.canonical_id, "4f7e1a2b9c3d");
        assert_eq!(m.trust_tier, 1);
        assert_eq!(m.required_scope.as_deref(), Some("audit:read code:analyze"));
        assert_eq!(m.lifecycle_state, Lifecycle::Active);
        assert_eq!(m.declares_domain("methods"), Some(true));
        assert_eq!(m.declares_domain("tools"), Some(false));
        assert_eq!(m.declares_domain("colour"), None);
    }

    #[test]
    fn reads_the_identity_document_names() {
        let m = Manifest::from_value(json!({
            "agent_id": "d8dc6f0df55d66c7",
            "name": "lauren",
            "description": "Books travel.",
            "methods": ["BOOK"],
            "trust_score": 0.5,
            "status": "retired",
            "scopes_accepted": ["booking:write"],
            "skills": [{"name": "travel"}, "hotels"]
        }))
        .expect("valid");
        assert_eq!(m.agent_label, "lauren");
        assert_eq!(m.job_description, "Books travel.");
        assert_eq!(m.lifecycle_state, Lifecycle::Revoked);
        assert_eq!(m.capabilities, vec!["travel", "hotels"]);
        assert_eq!(m.trust_tier, 2);
    }

    #[test]
    fn bad_fields_are_named() {
        for (field, value, needle) in [
            ("trust_tier", json!(4), "trust_tier"),
            (
                "behavioral_trust_score",
                json!(1.5),
                "behavioral_trust_score",
            ),
            ("canonical_id", json!("has space"), "canonical_id"),
            ("lifecycle_state", json!("sleeping"), "lifecycle"),
            ("supported_methods", json!("QUERY"), "supported_methods"),
        ] {
            let mut doc = draft();
            doc[field] = value;
            let e = Manifest::from_value(doc).expect_err(field);
            assert!(e.to_string().contains(needle), "{field}: {e}");
            assert_eq!(e.status().0, 422);
        }
    }

    #[test]
    fn lifecycle_names_and_transitions() {
        assert_eq!("RETIRED".parse::<Lifecycle>(), Ok(Revoked));
        assert_eq!("suspended".parse::<Lifecycle>(), Ok(Suspended));
        use Lifecycle::*;
        assert_eq!(Transition::Activate.apply(None).ok(), Some(Active));
        assert_eq!(
            Transition::Deactivate.apply(Some(Active)).ok(),
            Some(Suspended)
        );
        assert_eq!(
            Transition::Reinstate.apply(Some(Suspended)).ok(),
            Some(Active)
        );
        assert_eq!(
            Transition::Revoke.apply(Some(Suspended)).ok(),
            Some(Revoked)
        );
        assert_eq!(
            Transition::Deprecate.apply(Some(Active)).ok(),
            Some(Deprecated)
        );
        assert_eq!(
            Transition::Reinstate
                .apply(Some(Revoked))
                .map_err(|e| e.status().0),
            Err(409)
        );
        assert_eq!(
            Transition::Reinstate
                .apply(Some(Deprecated))
                .map_err(|e| e.status().0),
            Err(409)
        );
        assert_eq!(
            Transition::Deactivate.apply(None).map_err(|e| e.status().0),
            Err(404)
        );
        assert_eq!(Transition::from_method("revoke"), Some(Transition::Revoke));
    }
}
