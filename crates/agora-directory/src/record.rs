//! One directory record: an agent or a tool as one source knows it (issue 33 item 1), with its
//! provenance, its trust, what it can do, how to call it and whether it is reachable now.
//!
//! A record's [`id`](Record::id) is `{source}:{node}:{local}` — the source, the node that hosts
//! the agent or tool, and the source's own id for it — so every node that learns of the same
//! agent through the same source names it the same way, and fan-out answers deduplicate by id.
//! Records of one agent under several sources are linked by [`identities`](Record::identities)
//! (see [`crate::index`]), never by name.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest name kept, in bytes (longer ones are cut at a character boundary).
pub const MAX_NAME_BYTES: usize = 256;
/// Longest description kept, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Most capabilities kept per record.
pub const MAX_CAPABILITIES: usize = 64;
/// Longest capability kept, in bytes.
pub const MAX_CAPABILITY_BYTES: usize = 256;
/// Most identities kept per record.
pub const MAX_IDENTITIES: usize = 8;

/// Where a record came from: the face or bridge the agent or tool was published on.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// AGH Network v0: presence and capability catalogs (claimed by the agent).
    Agh,
    /// The AGTP Agent Name Service: governance-verified manifests.
    Ans,
    /// Hyperspace: tools and the capability cards nodes sign.
    Hyperspace,
    /// An MCP server bridged into the mesh (Hyperspace §10.1).
    Mcp,
    /// An A2A agent bridged into the mesh (Hyperspace §10.2).
    A2a,
}

impl Source {
    /// Every source, in the order filters and documents list them.
    pub const ALL: [Self; 5] = [Self::Agh, Self::Ans, Self::Hyperspace, Self::Mcp, Self::A2a];

    /// The name on the wire.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agh => "agh",
            Self::Ans => "ans",
            Self::Hyperspace => "hyperspace",
            Self::Mcp => "mcp",
            Self::A2a => "a2a",
        }
    }

    /// The source named `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// What a record describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An agent (AGH peer, ANS agent, A2A agent).
    Agent,
    /// A tool (Hyperspace tool, bridged MCP tool or A2A skill).
    Tool,
}

impl Kind {
    /// The name on the wire.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Tool => "tool",
        }
    }

    /// The kind named `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Agent, Self::Tool]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// How much of a record someone vouches for, weakest first.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TrustLevel {
    /// Said by the agent itself and checked by no one (AGH catalogs; bridged entries whose
    /// card or server nobody verified).
    Claimed,
    /// Signed by the node that hosts it (Hyperspace cards; A2A cards whose signature verified).
    Signed,
    /// Registered through a governance-signed lifecycle (ANS, Active manifests only).
    Verified,
}

impl TrustLevel {
    /// The name on the wire.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Signed => "signed",
            Self::Verified => "verified",
        }
    }

    /// The level named `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Claimed, Self::Signed, Self::Verified]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

/// A record's trust: its level and what stands behind it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Trust {
    /// The level.
    pub level: TrustLevel,
    /// One line saying who vouches and how (`"claimed by the agent in its AGH greet"`, …).
    pub basis: String,
    /// The hosting node's contributor reputation in [0, 1] (Hyperspace §9.4), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reputation: Option<f64>,
    /// The ANS lifecycle state (`Active`, …) of a manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<String>,
    /// What was checked for a bridged entry (`"card-signature"`, `"server-answered"`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verified: Vec<String>,
}

impl Trust {
    /// Claimed, on `basis`.
    #[must_use]
    pub fn claimed(basis: impl Into<String>) -> Self {
        Self::at(TrustLevel::Claimed, basis)
    }

    /// `level`, on `basis`.
    #[must_use]
    pub fn at(level: TrustLevel, basis: impl Into<String>) -> Self {
        Self {
            level,
            basis: basis.into(),
            reputation: None,
            lifecycle: None,
            verified: Vec::new(),
        }
    }
}

/// Where a record came from and who signed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    /// The face it was published on: `agh`, `agtp`, `rpc`, `mcp` or `a2a`.
    pub face: String,
    /// The PeerId of the node that hosts it.
    pub node: String,
    /// Who signed what we hold of it: a node's PeerId, a governance key id, a card's key id;
    /// absent for claims nobody signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
}

/// How to call what a record describes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Call {
    /// The face to call it on: `rpc` (JSON-RPC), `agh` (an envelope), `agtp`, `mcp` or `a2a`.
    pub face: String,
    /// The method or verb (`tool.invoke`, `TALK`, `tools/call`, `SendMessage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// What to name in the call: a tool id, an AGH peer id, an ANS agent id, an MCP tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Where to send it, when it is not any Agora node's face of that kind (an AGTP endpoint,
    /// an A2A card URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// An agent or tool as one source knows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// `{source}:{node}:{local}`.
    pub id: String,
    /// Agent or tool.
    pub kind: Kind,
    /// Where it came from.
    pub source: Source,
    /// Its name.
    pub name: String,
    /// What it does, in the provider's words.
    #[serde(default)]
    pub description: String,
    /// Its capabilities, skills or tags.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Where it came from and who signed it.
    pub provenance: Provenance,
    /// Who vouches for it.
    pub trust: Trust,
    /// How to call it.
    pub call: Call,
    /// Identities it shares with records of other sources (`agent:…`, `url:…`, `key:…`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identities: Vec<String>,
    /// Its price per call in atomic USDC units (6 decimals), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_atomic: Option<u64>,
    /// Its measured mean call latency in milliseconds, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// How long it stays listed after its source stops seeing it, in milliseconds.
    pub ttl_ms: u64,
}

impl Record {
    /// The id of the record `local` of `source` hosted by `node`.
    #[must_use]
    pub fn make_id(source: Source, node: &str, local: &str) -> String {
        format!("{}:{node}:{local}", source.as_str())
    }

    /// Cuts every field to its bound (names, descriptions, capabilities, identities), so a
    /// source can hand over whatever it received.
    pub fn bound(&mut self) {
        cut(&mut self.name, MAX_NAME_BYTES);
        cut(&mut self.description, MAX_DESCRIPTION_BYTES);
        self.capabilities.truncate(MAX_CAPABILITIES);
        for c in &mut self.capabilities {
            cut(c, MAX_CAPABILITY_BYTES);
        }
        self.identities.truncate(MAX_IDENTITIES);
        for i in &mut self.identities {
            cut(i, MAX_CAPABILITY_BYTES);
        }
    }

    /// The text both rankers read: the name, the description and the capabilities (their
    /// `-`, `_`, `.` and `/` read as spaces, so `speech-to-text` matches "speech to text").
    #[must_use]
    pub fn search_text(&self) -> String {
        let mut text = String::with_capacity(
            self.name.len() + self.description.len() + 16 * self.capabilities.len() + 4,
        );
        text.push_str(&self.name);
        if !self.description.is_empty() {
            text.push_str(". ");
            text.push_str(&self.description);
        }
        if !self.capabilities.is_empty() {
            text.push_str(". ");
            for (i, c) in self.capabilities.iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                text.extend(c.chars().map(|ch| match ch {
                    '-' | '_' | '.' | '/' | ':' => ' ',
                    other => other,
                }));
            }
        }
        text
    }
}

/// Cuts `s` to at most `max` bytes at a character boundary.
fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tool record for tests.
    pub(crate) fn tool(local: &str, name: &str, description: &str, caps: &[&str]) -> Record {
        Record {
            id: Record::make_id(Source::Hyperspace, "node-a", local),
            kind: Kind::Tool,
            source: Source::Hyperspace,
            name: name.into(),
            description: description.into(),
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
            provenance: Provenance {
                face: "rpc".into(),
                node: "node-a".into(),
                signer: Some("node-a".into()),
            },
            trust: Trust::at(TrustLevel::Signed, "capability card signed by its node"),
            call: Call {
                face: "rpc".into(),
                method: Some("tool.invoke".into()),
                target: Some(local.into()),
                address: None,
            },
            identities: Vec::new(),
            price_atomic: None,
            latency_ms: None,
            ttl_ms: 60_000,
        }
    }

    #[test]
    fn search_text_reads_tags_as_words() {
        let r = tool(
            "t1",
            "Scribe",
            "Transcribes audio.",
            &["speech-to-text", "audio_files"],
        );
        assert_eq!(
            r.search_text(),
            "Scribe. Transcribes audio.. speech to text, audio files"
        );
    }

    #[test]
    fn bound_cuts_at_char_boundaries() {
        let mut r = tool("t1", &"é".repeat(200), "", &[]);
        r.capabilities = vec!["x".into(); 100];
        r.bound();
        assert!(r.name.len() <= MAX_NAME_BYTES);
        assert!(r.name.chars().all(|c| c == 'é'));
        assert_eq!(r.capabilities.len(), MAX_CAPABILITIES);
    }

    #[test]
    fn names_round_trip() {
        for s in Source::ALL {
            assert_eq!(Source::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).ok(),
                Some(serde_json::Value::String(s.as_str().into()))
            );
        }
        assert!(TrustLevel::Claimed < TrustLevel::Signed);
        assert!(TrustLevel::Signed < TrustLevel::Verified);
        assert_eq!(TrustLevel::parse("verified"), Some(TrustLevel::Verified));
        assert_eq!(Kind::parse("tool"), Some(Kind::Tool));
    }
}
