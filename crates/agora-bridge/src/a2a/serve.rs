//! The node as an A2A 1.0 agent (the note's §6.4, §7.3, §7.4), sans IO: the node's Agent Card
//! from the mesh tools it can invoke, how a message names a skill and carries its arguments,
//! and a `tool.invoke` outcome as an A2A task.
//!
//! Naming a skill (A2A has no field for it): `message.metadata["org.agora-mesh/skillId"]` (or the
//! request's `metadata`) is the tool id; the first `data` part is the arguments; without one, a
//! single `text` part goes into the tool's single required string property (or is the input as
//! it is when the tool's schema takes a string). Anything else is −32602.

use std::fmt::Write as _;

use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use serde_json::{Value, json};

use super::SKILL_ID_KEY;

/// The URI of the extension that documents skill routing and publishes each skill's schemas
/// and price (A2A skills have no schema field).
pub const ROUTING_EXTENSION: &str = "urn:agora:a2a:skill-routing:v1";

/// A2A 1.0 JSON-RPC methods the node answers, and those it refuses with their own code.
pub mod methods {
    /// Send a message; blocking unless `configuration.returnImmediately`.
    pub const SEND_MESSAGE: &str = "SendMessage";
    /// Send a message; the answer is an SSE stream (the task first; closed at a terminal state).
    pub const SEND_STREAMING_MESSAGE: &str = "SendStreamingMessage";
    /// A task by id.
    pub const GET_TASK: &str = "GetTask";
    /// Tasks, newest first.
    pub const LIST_TASKS: &str = "ListTasks";
    /// Cancel a task in flight.
    pub const CANCEL_TASK: &str = "CancelTask";
    /// Not offered: −32004.
    pub const SUBSCRIBE_TO_TASK: &str = "SubscribeToTask";
    /// Not configured: −32007.
    pub const GET_EXTENDED_AGENT_CARD: &str = "GetExtendedAgentCard";
    /// Push notifications are not supported: −32003.
    pub const PUSH: [&str; 4] = [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ];
}

/// A2A 1.0 error codes (A2A §5.4).
pub mod codes {
    /// TaskNotFoundError.
    pub const TASK_NOT_FOUND: i32 = -32001;
    /// TaskNotCancelableError.
    pub const TASK_NOT_CANCELABLE: i32 = -32002;
    /// PushNotificationNotSupportedError.
    pub const PUSH_NOT_SUPPORTED: i32 = -32003;
    /// UnsupportedOperationError.
    pub const UNSUPPORTED_OPERATION: i32 = -32004;
    /// ExtendedAgentCardNotConfiguredError.
    pub const EXTENDED_CARD_NOT_CONFIGURED: i32 = -32007;
    /// VersionNotSupportedError.
    pub const VERSION_NOT_SUPPORTED: i32 = -32009;
}

/// The node's own skill, on every card (so a node that serves no tool yet still has one, since
/// A2A requires `skills` and a card with an empty list cannot be signed so that both SDKs verify
/// it): search the mesh for tools (`tool.discover`), by the text of the message.
pub const SEARCH_SKILL: &str = "agora.tools.search";

/// [`SEARCH_SKILL`] as a tool record, the way `tool.discover` lists tools (the card is built from
/// such records).
#[must_use]
pub fn search_skill_record() -> Value {
    json!({
        "id": SEARCH_SKILL,
        "name": SEARCH_SKILL,
        "description": "Search the mesh for tools: send the words to look for as one text part \
                        (tool.discover's query; the result lists the matching tools, ranked).",
        "capabilities": ["search", "tools"],
        "schema": {"input": {
            "type": "object",
            "required": ["query"],
            "properties": {"query": {"type": "string"}},
        }},
    })
}

/// An A2A error object `{code, message}`.
#[must_use]
pub fn a2a_error(code: i32, message: &str) -> RpcError {
    RpcError::new(RpcCode(code), message)
}

/// The node's Agent Card (unsigned) from the tool records `tool.discover` gives: one skill per
/// tool (id = tool id, tags = capabilities + `"agora"`), the JSON-RPC interface at `a2a_url`,
/// the routing extension with each skill's schemas and price. Empty values are left out, and so
/// are fields at their ProtoJSON default that are not `optional` (the extension's `required:
/// false`): the Python SDK drops those before canonicalising, so a signature over them would not
/// verify there.
#[must_use]
pub fn node_card(name: &str, version: &str, a2a_url: &str, tools: &[Value]) -> Value {
    let mut skills = Vec::new();
    let mut schemas = serde_json::Map::new();
    for t in tools {
        let Some(id) = t
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        let tool_name = t.get("name").and_then(Value::as_str).unwrap_or(id);
        let description = t
            .get("description")
            .and_then(Value::as_str)
            .filter(|d| !d.is_empty())
            .unwrap_or(tool_name);
        let mut tags: Vec<Value> = t
            .get("capabilities")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| c.as_str().is_some_and(|s| !s.is_empty()))
            .cloned()
            .collect();
        tags.push("agora".into());
        let mut input_modes = vec![json!("application/json")];
        if single_string_property(t.get("schema")).is_some() {
            input_modes.push("text/plain".into());
        }
        skills.push(json!({
            "id": id,
            "name": if tool_name.is_empty() { id } else { tool_name },
            "description": description,
            "tags": tags,
            "inputModes": input_modes,
            "outputModes": ["application/json", "text/plain"],
        }));
        let mut entry = serde_json::Map::new();
        if let Some(s) = t.get("schema").and_then(|s| s.get("input")) {
            entry.insert("inputSchema".into(), s.clone());
        }
        if let Some(s) = t.get("schema").and_then(|s| s.get("output")) {
            entry.insert("outputSchema".into(), s.clone());
        }
        if let Some(p) = t.get("price") {
            entry.insert("price".into(), p.clone());
        }
        if let Some(p) = t.get("peerId") {
            entry.insert("peerId".into(), p.clone());
        }
        schemas.insert(id.to_owned(), Value::Object(entry));
    }
    let mut description = String::from(
        "An Agora node: the tools of its Hyperspace mesh as A2A skills. Name the skill in ",
    );
    let _ = write!(
        description,
        "message.metadata[\"{SKILL_ID_KEY}\"] (its id); put the arguments in the first data part, \
         or, for a tool with a single required string argument, send one text part. \
         Results come back as a task artifact with a data part (JSON) or a text part."
    );
    json!({
        "name": name,
        "description": description,
        "version": version,
        "supportedInterfaces": [
            {"url": a2a_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extensions": [{
                "uri": ROUTING_EXTENSION,
                "description": format!("skill routing: metadata key {SKILL_ID_KEY}; params.skills gives each skill's JSON Schemas, price and peer"),
                "params": {"metadataKey": SKILL_ID_KEY, "skills": schemas},
            }],
        },
        "defaultInputModes": ["application/json", "text/plain"],
        "defaultOutputModes": ["application/json", "text/plain"],
        "skills": skills,
    })
}

/// The name of the tool's single required property when it is a string (`{type: object,
/// required: [p], properties: {p: {type: string}}}` under `schema.input`), or `""` when the
/// input schema itself is a string.
#[must_use]
pub fn single_string_property(schema: Option<&Value>) -> Option<String> {
    let input = schema?.get("input")?;
    if input.get("type").and_then(Value::as_str) == Some("string") {
        return Some(String::new());
    }
    let required = input.get("required")?.as_array()?;
    let [only] = required.as_slice() else {
        return None;
    };
    let name = only.as_str()?;
    let kind = input.get("properties")?.get(name)?.get("type")?.as_str()?;
    (kind == "string").then(|| name.to_owned())
}

/// The tool id a `SendMessage` names (`message.metadata` first, then the request's
/// `metadata`).
///
/// # Errors
///
/// −32602 when neither names one.
pub fn skill_of(params: &Value) -> Result<String, RpcError> {
    [&params["message"]["metadata"], &params["metadata"]]
        .iter()
        .find_map(|m| m.get(SKILL_ID_KEY).and_then(Value::as_str))
        .map(str::to_owned)
        .ok_or_else(|| {
            RpcError::invalid_params().with_message(format!(
                "name the skill in message.metadata[\"{SKILL_ID_KEY}\"]"
            ))
        })
}

/// The tool's input from the message's parts (see the module docs); `schema` is the tool's.
///
/// # Errors
///
/// −32602 when the parts do not make an input.
pub fn arguments(message: &Value, schema: Option<&Value>) -> Result<Value, RpcError> {
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::invalid_params().with_message("the message has no parts"))?;
    if let Some(data) = parts.iter().find_map(|p| p.get("data")) {
        return Ok(data.clone());
    }
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    if let [text] = texts.as_slice() {
        match single_string_property(schema) {
            Some(p) if p.is_empty() => return Ok(Value::String((*text).to_owned())),
            Some(p) => return Ok(json!({ p: text })),
            None => {}
        }
    }
    Err(RpcError::invalid_params().with_message(
        "give the arguments in a data part (a single text part only suits a tool with one required string argument)",
    ))
}

/// What a task became from a `tool.invoke` outcome (§7.4: Hyperspace codes are translated into
/// A2A states, never passed on): the result → `TASK_STATE_COMPLETED` with one artifact (a text
/// part for a string result, else a data part); −32602 → `TASK_STATE_REJECTED` (the input was
/// refused); −32002 (payment required or budget exceeded) → `TASK_STATE_REJECTED` with the
/// payment challenge in a data part; −32006 and everything else → `TASK_STATE_FAILED`. The
/// reason is the status message's text.
#[must_use]
pub fn outcome_state(
    outcome: &Result<Value, RpcError>,
) -> (&'static str, Option<Value>, Option<Value>) {
    match outcome {
        Ok(result) => {
            // A bridged MCP tool that ran and failed (`{result, content, isError: true}`).
            if let Some(failed) = result
                .get("result")
                .filter(|r| r.get("isError") == Some(&Value::Bool(true)))
            {
                let why = match failed.get("result") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => String::new(),
                };
                let text = format!("the tool failed: {why}");
                return ("TASK_STATE_FAILED", Some(json!([{"text": text}])), None);
            }
            let part = match result.get("result") {
                Some(Value::String(s)) => json!({"text": s}),
                Some(v) => json!({"data": v, "mediaType": "application/json"}),
                None => json!({"data": result, "mediaType": "application/json"}),
            };
            ("TASK_STATE_COMPLETED", None, Some(json!([part])))
        }
        Err(e) => {
            let (state, why) = match e.code {
                RpcCode::INVALID_PARAMS => ("TASK_STATE_REJECTED", "the tool refused its input"),
                RpcCode::BUDGET_EXCEEDED => (
                    "TASK_STATE_REJECTED",
                    "the tool is priced: payment required",
                ),
                RpcCode::PEER_UNAVAILABLE => {
                    ("TASK_STATE_FAILED", "the tool's node is unavailable")
                }
                _ => ("TASK_STATE_FAILED", "the tool failed"),
            };
            let mut parts = vec![json!({"text": format!("{why}: {}", e.message)})];
            if let Some(challenge) = e.data.as_ref().and_then(|d| d.get("challenge")) {
                parts.push(json!({"data": {"paymentRequired": challenge}}));
            }
            (state, Some(json!(parts)), None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_tool() -> Value {
        json!({"id": "t1", "name": "echo", "description": "", "capabilities": ["echo"],
            "schema": {"input": {"type": "object", "required": ["message"],
                "properties": {"message": {"type": "string"}}}}})
    }

    #[test]
    fn the_card_has_no_empty_values() {
        let card = node_card("n", "0.1.0", "http://127.0.0.1:1/a2a", &[echo_tool()]);
        assert_eq!(crate::a2a::jws::without_empty(&card).as_ref(), Some(&card));
        assert_eq!(card["skills"][0]["tags"], json!(["echo", "agora"]));
        assert!(crate::a2a::card::check_card(&card).is_ok());
    }

    #[test]
    fn messages_become_arguments() {
        let tool = echo_tool();
        let m = json!({"parts": [{"text": "hi"}]});
        assert_eq!(
            arguments(&m, tool.get("schema")).unwrap(),
            json!({"message": "hi"})
        );
        let m = json!({"parts": [{"text": "hi"}, {"data": {"a": 1}}]});
        assert_eq!(arguments(&m, None).unwrap(), json!({"a": 1}));
        assert!(arguments(&json!({"parts": [{"text": "hi"}]}), None).is_err());
        let p = json!({"message": {"metadata": {SKILL_ID_KEY: "t1"}}});
        assert_eq!(skill_of(&p).unwrap(), "t1");
        assert!(skill_of(&json!({"message": {}})).is_err());
    }

    #[test]
    fn outcomes_become_states() {
        let ok: Result<Value, RpcError> = Ok(json!({"result": "x"}));
        assert_eq!(outcome_state(&ok).0, "TASK_STATE_COMPLETED");
        let e = Err(RpcError::budget_exceeded().with_data(json!({"challenge": {"x": 1}})));
        let (state, message, _) = outcome_state(&e);
        assert_eq!(state, "TASK_STATE_REJECTED");
        assert_eq!(message.unwrap()[1]["data"]["paymentRequired"]["x"], 1);
        assert_eq!(
            outcome_state(&Err(RpcError::peer_unavailable())).0,
            "TASK_STATE_FAILED"
        );
        let failed =
            Ok(json!({"result": {"result": "no such file", "content": [], "isError": true}}));
        let (state, message, artifacts) = outcome_state(&failed);
        assert_eq!((state, artifacts), ("TASK_STATE_FAILED", None));
        assert_eq!(message.unwrap()[0]["text"], "the tool failed: no such file");
    }

    #[test]
    fn an_empty_mesh_still_makes_a_card_with_a_skill() {
        let card = node_card(
            "n",
            "0.1.0",
            "http://127.0.0.1:1/a2a",
            &[search_skill_record()],
        );
        assert_eq!(card["skills"][0]["id"], SEARCH_SKILL);
        assert_eq!(
            arguments(
                &json!({"parts": [{"text": "web"}]}),
                search_skill_record().get("schema")
            )
            .unwrap(),
            json!({"query": "web"})
        );
        assert!(crate::a2a::card::check_card(&card).is_ok());
    }
}
