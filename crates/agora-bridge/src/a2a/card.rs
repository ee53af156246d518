//! The Agent Card (A2A 1.0 §4.4.1 `AgentCard`, the note's §4.2) as the bridge reads it: a shape
//! check that keeps only what the bridge uses, and the mapping of skills to mesh tools (the
//! note's §7.3). The card itself stays the bytes it came as (signatures are over them); this
//! module only reads a parsed copy.

use agora_hyperspace::payments::Price;
use agora_hyperspace::tool::{BridgedTool, RegisterParams};
use agora_hyperspace::tool_record::ToolSource;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Largest card accepted, in bytes.
pub const MAX_CARD_BYTES: usize = 256 << 10;

/// Most skills taken from one card (the rest are refused with the card).
pub const MAX_SKILLS: usize = 64;

/// `source.verified` of the skills of a card whose signature verified.
pub const SIGNED_CARD: &str = "signed-card";

/// The card is not an A2A 1.0 Agent Card the bridge can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// Not a JSON object.
    #[error("the agent card is not a JSON object")]
    NotObject,
    /// Too large.
    #[error("the agent card is larger than {MAX_CARD_BYTES} bytes")]
    TooLarge,
    /// A required field is missing or has the wrong type.
    #[error("agent card field {field}: {reason}")]
    Field {
        /// The field's path.
        field: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// No interface with the JSON-RPC binding of A2A 1.x.
    #[error("the agent card has no JSONRPC interface of A2A 1.x (supportedInterfaces)")]
    NoJsonRpc,
    /// More skills than [`MAX_SKILLS`].
    #[error("the agent card has more than {MAX_SKILLS} skills")]
    TooManySkills,
}

/// What the bridge reads from a card.
#[derive(Debug, Clone, PartialEq)]
pub struct CardView {
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `version`.
    pub version: String,
    /// The `url` of the first `supportedInterfaces` entry with `protocolBinding: "JSONRPC"` and
    /// a `protocolVersion` of 1.x.
    pub jsonrpc_url: String,
    /// `tenant` of that interface, copied into every request.
    pub tenant: Option<String>,
    /// The skills.
    pub skills: Vec<SkillView>,
}

/// What the bridge reads from one skill.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillView {
    /// `id`.
    pub id: String,
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `tags`.
    pub tags: Vec<String>,
    /// `examples`.
    pub examples: Vec<String>,
}

fn field_err(field: impl Into<String>, reason: &'static str) -> CardError {
    CardError::Field {
        field: field.into(),
        reason,
    }
}

fn string(
    obj: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<String, CardError> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(field_err(format!("{path}{key}"), "must be a string")),
        None => Err(field_err(format!("{path}{key}"), "is required")),
    }
}

fn strings(v: Option<&Value>, path: &str, required: bool) -> Result<Vec<String>, CardError> {
    match v {
        None if !required => Ok(Vec::new()),
        None => Err(field_err(path, "is required")),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| field_err(path, "must be an array of strings"))
            })
            .collect(),
        Some(_) => Err(field_err(path, "must be an array of strings")),
    }
}

/// Checks the shape of an A2A 1.0 Agent Card (the REQUIRED fields and their types) and reads
/// what the bridge uses.
///
/// # Errors
///
/// The first thing wrong with it.
pub fn check_card(card: &Value) -> Result<CardView, CardError> {
    let obj = card.as_object().ok_or(CardError::NotObject)?;
    let name = string(obj, "name", "")?;
    let description = string(obj, "description", "")?;
    let version = string(obj, "version", "")?;
    if !obj.get("capabilities").is_some_and(Value::is_object) {
        return Err(field_err("capabilities", "must be an object"));
    }
    strings(obj.get("defaultInputModes"), "defaultInputModes", true)?;
    strings(obj.get("defaultOutputModes"), "defaultOutputModes", true)?;
    let interfaces = obj
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .ok_or_else(|| field_err("supportedInterfaces", "must be an array"))?;
    let mut jsonrpc = None;
    for (i, iface) in interfaces.iter().enumerate() {
        let path = format!("supportedInterfaces[{i}].");
        let o = iface
            .as_object()
            .ok_or_else(|| field_err(path.clone(), "must be an object"))?;
        let url = string(o, "url", &path)?;
        let binding = string(o, "protocolBinding", &path)?;
        let version = string(o, "protocolVersion", &path)?;
        if jsonrpc.is_none()
            && binding == "JSONRPC"
            && (version == "1" || version.starts_with("1."))
            && super::is_http_url(&url)
        {
            let tenant = o.get("tenant").and_then(Value::as_str).map(str::to_owned);
            jsonrpc = Some((url, tenant.filter(|t| !t.is_empty())));
        }
    }
    let (jsonrpc_url, tenant) = jsonrpc.ok_or(CardError::NoJsonRpc)?;
    let raw_skills = obj
        .get("skills")
        .and_then(Value::as_array)
        .ok_or_else(|| field_err("skills", "must be an array"))?;
    if raw_skills.len() > MAX_SKILLS {
        return Err(CardError::TooManySkills);
    }
    let mut skills = Vec::with_capacity(raw_skills.len());
    for (i, s) in raw_skills.iter().enumerate() {
        let path = format!("skills[{i}].");
        let o = s
            .as_object()
            .ok_or_else(|| field_err(path.clone(), "must be an object"))?;
        skills.push(SkillView {
            id: string(o, "id", &path)?,
            name: string(o, "name", &path)?,
            description: string(o, "description", &path)?,
            tags: strings(o.get("tags"), &format!("{path}tags"), true)?,
            examples: strings(o.get("examples"), &format!("{path}examples"), false)?,
        });
    }
    Ok(CardView {
        name,
        description,
        version,
        jsonrpc_url,
        tenant,
        skills,
    })
}

/// The mesh tool id of a skill: the first 16 bytes of `sha256(cardUrl ‖ 0 ‖ skillId)`, hex (the
/// same on every restart and every node that announces the same card URL). A card given inline
/// has no URL; its JSON-RPC interface URL stands in.
#[must_use]
pub fn tool_id(card_url: &str, skill_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"a2a\0");
    h.update(card_url.as_bytes());
    h.update([0]);
    h.update(skill_id.as_bytes());
    hex_lower(&h.finalize()[..16])
}

fn hex_lower(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The input schema of every bridged skill: an A2A message in short (A2A skills carry no
/// schema). `text` becomes a text part, `data` a data part; `taskId`/`contextId` continue a
/// task that asked for input.
#[must_use]
pub fn message_schema() -> Value {
    json!({
        "input": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "the message's text part"},
                "data": {"description": "a data part (any JSON)"},
                "contextId": {"type": "string", "description": "the A2A context to continue"},
                "taskId": {"type": "string", "description": "the A2A task to continue (after INPUT_REQUIRED)"}
            },
            "anyOf": [{"required": ["text"]}, {"required": ["data"]}],
            "additionalProperties": false
        },
        "output": {
            "type": "object",
            "properties": {
                "state": {"type": "string"},
                "taskId": {"type": "string"},
                "contextId": {"type": "string"},
                "parts": {"type": "array"},
                "artifacts": {"type": "array"}
            },
            "required": ["state", "parts", "artifacts"]
        }
    })
}

/// One mesh tool per skill of `view` (the note's §7.3): name and description from the skill,
/// tags = the skill's tags, the operator's `tags` and `"a2a"`; the fixed message schema;
/// `source {bridge: "a2a", server: agent, name: skill id, verified}`.
#[must_use]
pub fn skill_tools(
    agent: &str,
    card_url: &str,
    view: &CardView,
    tags: &[String],
    price: Option<&Price>,
    verified: bool,
) -> Vec<BridgedTool> {
    view.skills
        .iter()
        .map(|skill| {
            let mut capabilities: Vec<String> = Vec::new();
            for t in skill
                .tags
                .iter()
                .chain(tags)
                .map(String::as_str)
                .chain(["a2a"])
            {
                if !t.is_empty() && !capabilities.iter().any(|c| c == t) {
                    capabilities.push(t.to_owned());
                }
            }
            BridgedTool {
                id: tool_id(card_url, &skill.id),
                params: RegisterParams {
                    name: format!("{agent}.{}", skill.id),
                    description: if skill.description.is_empty() {
                        skill.name.clone()
                    } else {
                        format!("{}: {}", skill.name, skill.description)
                    },
                    schema: message_schema(),
                    capabilities,
                    price: price.cloned(),
                },
                source: ToolSource {
                    bridge: ToolSource::A2A.into(),
                    server: agent.to_owned(),
                    name: skill.id.clone(),
                    verified: verified.then(|| SIGNED_CARD.to_owned()),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Value {
        json!({
            "name": "Echo Agent",
            "description": "echoes",
            "version": "1.0.0",
            "supportedInterfaces": [
                {"url": "http://127.0.0.1:9/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "http://127.0.0.1:9/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {"streaming": true},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "Echo", "description": "says it back", "tags": ["echo"]}]
        })
    }

    #[test]
    fn a_card_is_read_and_its_skills_become_tools() {
        let view = check_card(&sample()).unwrap();
        assert_eq!(view.jsonrpc_url, "http://127.0.0.1:9/");
        let tools = skill_tools("echo", "http://x", &view, &["demo".into()], None, true);
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].params.capabilities, ["echo", "demo", "a2a"]);
        assert_eq!(tools[0].source.verified.as_deref(), Some(SIGNED_CARD));
        assert_eq!(tools[0].id, tool_id("http://x", "echo"));
        assert_ne!(tools[0].id, tool_id("http://y", "echo"));
    }

    #[test]
    fn malformed_cards_are_refused() {
        let mut c = sample();
        c.as_object_mut().unwrap().remove("version");
        assert!(matches!(check_card(&c), Err(CardError::Field { .. })));
        let mut c = sample();
        c["supportedInterfaces"][1]["protocolVersion"] = json!("0.3");
        assert_eq!(check_card(&c), Err(CardError::NoJsonRpc));
        let mut c = sample();
        c["skills"][0]["tags"] = json!("x");
        assert!(check_card(&c).is_err());
        assert_eq!(check_card(&json!([])), Err(CardError::NotObject));
    }
}
