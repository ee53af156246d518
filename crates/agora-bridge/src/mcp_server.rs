//! The node as an MCP server (mesh → MCP; Hyperspace spec §10.1 the other way round, the MCP
//! specification's `server/tools` of 2025-11-25 and 2026-07-28), sans IO: which MCP tools the
//! node lists for the mesh tools it can invoke, how a `tools/call` becomes a Hyperspace call, and
//! how the answer (or the Hyperspace error) becomes a `CallToolResult`.
//!
//! - **The list** ([`catalog`]): first the node's own tools ([`OwnTool`]: search the mesh for
//!   tools, store memory, search memory, search the directory), then every mesh tool `tool.discover {query: ""}`
//!   returned (local, bridged and discovered), ordered by name, then id. Names are made
//!   `[A-Za-z0-9_.-]{1,128}` ([`tool_name`]: other characters become `_`); a name already taken
//!   gets `.<first 6 characters of the tool id>` (and, should that clash too, the whole id).
//! - **Schemas** ([`input_schema`]): the card's `schema.input` (or the schema itself when it has
//!   no `input` but is a JSON Schema of type `object`); a schema that is not `type: "object"` is
//!   wrapped as `{type: object, properties: {input: <schema>}, required: [input]}`, and the call
//!   then takes its params from `arguments.input`.
//! - **`_meta`** of each tool, under the vendor prefix [`META_PREFIX`] (`org.agora-mesh/`):
//!   `toolId`, `peerId`, `price` (when priced) and `source` (when bridged).
//! - **Results** ([`tool_output`]): a string result is the text content; any other JSON is the
//!   `structuredContent` and, serialized, the text content (for clients that only read text).
//!   A directory search's text is one line per result instead ([`directory_text`]).
//! - **Errors** ([`translate_error`], notes §7.4): Hyperspace codes collide with MCP's, so none is
//!   forwarded. A tool nobody offers any more is −32602 (as an unknown tool name is); −32002
//!   (payment) becomes `isError` naming the challenge, −32006 `isError` "peer unavailable", and
//!   every other failure `isError` with the message.

use std::collections::BTreeSet;

use agora_hyperspace::tool_record::ToolRecord;
use agora_hyperspace::{memory, tool};
use serde_json::{Map, Value, json};

/// The vendor prefix of the `_meta` keys this server sets (reverse DNS, not one of MCP's
/// reserved `modelcontextprotocol`/`mcp` second labels).
pub const META_PREFIX: &str = crate::VENDOR_PREFIX;
/// Longest MCP tool name (MCP `server/tools`: 1–128 characters).
pub const MAX_NAME: usize = 128;

/// One of the node's own tools (not mesh tools): each is one Hyperspace method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnTool {
    /// `agora.tools.search` → `tool.discover`.
    Discover,
    /// `agora.memory.store` → `memory.store`.
    MemoryStore,
    /// `agora.memory.search` → `memory.search`.
    MemorySearch,
    /// `agora.directory.search` → `directory.search` (`docs/directory.md`).
    DirectorySearch,
}

impl OwnTool {
    /// Every own tool, in list order.
    pub const ALL: [Self; 4] = [
        Self::Discover,
        Self::MemoryStore,
        Self::MemorySearch,
        Self::DirectorySearch,
    ];

    /// Its MCP name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Discover => "agora.tools.search",
            Self::MemoryStore => "agora.memory.store",
            Self::MemorySearch => "agora.memory.search",
            Self::DirectorySearch => "agora.directory.search",
        }
    }

    /// The Hyperspace method it calls.
    #[must_use]
    pub const fn method(self) -> &'static str {
        match self {
            Self::Discover => tool::DISCOVER,
            Self::MemoryStore => memory::STORE,
            Self::MemorySearch => memory::SEARCH,
            Self::DirectorySearch => DIRECTORY_SEARCH,
        }
    }

    fn description(self) -> &'static str {
        match self {
            Self::Discover => {
                "Search the Agora mesh for tools: every query word must prefix a word of a tool's \
                 name, description or capabilities (\"\" lists all). Answers {tools: [{id, name, \
                 peerId, description, capabilities, reputation, avgLatency, schema}]}."
            }
            Self::MemoryStore => {
                "Store a text in the mesh's semantic memory. Answers {id, peerId, replicas}."
            }
            Self::MemorySearch => {
                "Search the mesh's semantic memory for texts close in meaning to a query. Answers \
                 {memories: [{id, content, similarity, metadata, …}], searchTime, embedder}."
            }
            Self::DirectorySearch => {
                "Search the directory of every agent and tool this node knows, from every face (AGH \
                 agents, the Agent Name Service, Hyperspace tools, bridged MCP and A2A), by words \
                 and by meaning, the live first. Each result says its source, its trust \
                 (claimed, signed, verified), whether it is online now, how to call it and why it \
                 ranks where it does. Answers {results: [{id, kind, source, name, description, \
                 capabilities, provenance, trust, call, online, lastSeenMs, score, explain, …}], \
                 count, embedder, answeredBy, tookMs}."
            }
        }
    }

    fn input_schema(self) -> Value {
        let tier = json!({"type": "string", "enum": ["working", "archival"]});
        match self {
            Self::Discover => json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "words to look for; \"\" for all"},
                    "capabilities": {"type": "array", "items": {"type": "string"}},
                    "minReputation": {"type": "number", "minimum": 0, "maximum": 1},
                    "maxLatency": {"type": "number", "minimum": 0}
                },
                "required": ["query"]
            }),
            Self::MemoryStore => json!({
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "sessionId": {"type": "string"},
                    "metadata": {"type": "object"},
                    "tier": tier
                },
                "required": ["content"]
            }),
            Self::MemorySearch => json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "sessionId": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                    "threshold": {"type": "number", "minimum": 0, "maximum": 1},
                    "tier": tier
                },
                "required": ["query"]
            }),
            Self::DirectorySearch => json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "maxLength": 1024,
                              "description": "what is wanted, in words; \"\" with a filter lists what the filter keeps"},
                    "filters": {
                        "type": "object",
                        "description": "all given must hold",
                        "properties": {
                            "source": {
                                "description": "one source or a list",
                                "anyOf": [
                                    {"type": "string", "enum": SOURCES},
                                    {"type": "array", "items": {"type": "string", "enum": SOURCES}}
                                ]
                            },
                            "trust": {"type": "string", "enum": ["claimed", "signed", "verified"],
                                      "description": "the lowest trust level accepted"},
                            "capability": {"type": "string",
                                           "description": "a capability or tag the record lists (case ignored)"},
                            "kind": {"type": "string", "enum": ["agent", "tool"]},
                            "online": {"type": "boolean", "description": "only what is reachable now"},
                            "maxPrice": {"type": ["string", "number"],
                                         "description": "highest price per call in USDC; unpriced records pass"},
                            "maxPriceAtomic": {"type": "integer", "minimum": 0,
                                               "description": "highest price per call in atomic USDC units, instead of maxPrice"},
                            "maxLatencyMs": {"type": "integer", "minimum": 0,
                                             "description": "highest measured latency; unmeasured records pass"}
                        }
                    },
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                              "description": "most results (default 10)"}
                },
                "required": ["query"]
            }),
        }
    }
}

/// `directory.search` (`agora_directory::rpc::SEARCH`; this crate does not depend on the
/// directory's).
const DIRECTORY_SEARCH: &str = "directory.search";

/// The directory's sources, as its `source` filter takes them.
const SOURCES: [&str; 5] = ["agh", "ans", "hyperspace", "mcp", "a2a"];

/// What a listed tool calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One of the node's own tools.
    Own(OwnTool),
    /// A mesh tool, through `tool.invoke`.
    Mesh {
        /// Its id.
        tool_id: String,
        /// Its input schema was wrapped: the params are `arguments.input`.
        wrapped: bool,
    },
}

/// One tool as this server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    /// Its MCP name (unique in the list).
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its `inputSchema` (always `type: "object"`).
    pub input_schema: Map<String, Value>,
    /// Its `outputSchema`, when the card gives an object schema.
    pub output_schema: Option<Map<String, Value>>,
    /// Its `_meta` (keys under [`META_PREFIX`]).
    pub meta: Map<String, Value>,
    /// What a call runs.
    pub target: Target,
}

/// `raw` as an MCP tool name: characters outside `[A-Za-z0-9_.-]` become `_`, at most
/// `max` characters, `"tool"` when nothing is left.
#[must_use]
pub fn tool_name(raw: &str, max: usize) -> String {
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect();
    if name.is_empty() {
        "tool".to_owned()
    } else {
        name
    }
}

/// The `inputSchema` of a card's `schema`, and whether it was wrapped (module docs).
#[must_use]
pub fn input_schema(schema: &Value) -> (Map<String, Value>, bool) {
    let input = match schema.get("input") {
        Some(input) => input,
        None if schema.get("type").is_some() => schema,
        None => return (object_schema(), false),
    };
    match input {
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("object") => {
            (o.clone(), false)
        }
        Value::Object(o) if o.is_empty() => (object_schema(), false),
        other => {
            let mut wrapped = Map::new();
            wrapped.insert("type".into(), json!("object"));
            wrapped.insert("properties".into(), json!({ "input": other }));
            wrapped.insert("required".into(), json!(["input"]));
            (wrapped, true)
        }
    }
}

fn object_schema() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), json!("object"));
    m
}

/// The card's output schema, when it is an object schema.
fn output_schema(schema: &Value) -> Option<Map<String, Value>> {
    match schema.get("output") {
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("object") => {
            Some(o.clone())
        }
        _ => None,
    }
}

/// The tools this server lists for the mesh tools `records` (module docs: own tools first, then
/// by name and id, names unique).
#[must_use]
pub fn catalog(records: &[ToolRecord]) -> Vec<ListedTool> {
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut out: Vec<ListedTool> = OwnTool::ALL
        .iter()
        .map(|&own| {
            taken.insert(own.name().to_owned());
            let Value::Object(input_schema) = own.input_schema() else {
                unreachable!("own schemas are objects")
            };
            ListedTool {
                name: own.name().to_owned(),
                description: own.description().to_owned(),
                input_schema,
                output_schema: None,
                meta: Map::new(),
                target: Target::Own(own),
            }
        })
        .collect();
    let mut sorted: Vec<&ToolRecord> = records.iter().collect();
    sorted.sort_by(|a, b| {
        tool_name(&a.name, MAX_NAME)
            .cmp(&tool_name(&b.name, MAX_NAME))
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut seen_ids: BTreeSet<&str> = BTreeSet::new();
    for record in sorted {
        if !seen_ids.insert(&record.id) {
            continue;
        }
        let name = unique_name(&record.name, &record.id, &taken);
        taken.insert(name.clone());
        let (input_schema, wrapped) = input_schema(&record.schema);
        let mut meta = Map::new();
        meta.insert(format!("{META_PREFIX}toolId"), json!(record.id));
        if !record.peer_id.is_empty() {
            meta.insert(format!("{META_PREFIX}peerId"), json!(record.peer_id));
        }
        if let Some(price) = &record.price {
            meta.insert(format!("{META_PREFIX}price"), json!(price));
        }
        if let Some(source) = &record.source {
            meta.insert(format!("{META_PREFIX}source"), json!(source));
        }
        out.push(ListedTool {
            name,
            description: record.description.clone(),
            input_schema,
            output_schema: output_schema(&record.schema),
            meta,
            target: Target::Mesh {
                tool_id: record.id.clone(),
                wrapped,
            },
        });
    }
    out
}

/// `name` made a valid MCP name not in `taken`: as it is, else with `.<first 6 of id>`, else
/// with `.<id>`, else with a counter.
fn unique_name(name: &str, id: &str, taken: &BTreeSet<String>) -> String {
    let base = tool_name(name, MAX_NAME);
    if !taken.contains(&base) {
        return base;
    }
    let id = tool_name(id, MAX_NAME);
    for suffix in [id.chars().take(6).collect::<String>(), id] {
        let head = tool_name(name, MAX_NAME.saturating_sub(suffix.len() + 1));
        let candidate = format!("{head}.{suffix}");
        if !taken.contains(&candidate) {
            return candidate;
        }
    }
    (2u32..)
        .map(|n| {
            let suffix = n.to_string();
            let head = tool_name(name, MAX_NAME.saturating_sub(suffix.len() + 1));
            format!("{head}.{suffix}")
        })
        .find(|c| !taken.contains(c))
        .unwrap_or(base)
}

/// The Hyperspace method and params of a `tools/call` of `target` with `arguments`.
#[must_use]
pub fn call_params(
    target: &Target,
    arguments: Option<Map<String, Value>>,
) -> (&'static str, Value) {
    let arguments = arguments.unwrap_or_default();
    match target {
        Target::Own(own) => (own.method(), Value::Object(arguments)),
        Target::Mesh { tool_id, wrapped } => {
            let params = if *wrapped {
                arguments.get("input").cloned().unwrap_or(Value::Null)
            } else {
                Value::Object(arguments)
            };
            (tool::INVOKE, json!({ "toolId": tool_id, "params": params }))
        }
    }
}

/// What a successful call shows the MCP client.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The text content.
    pub text: String,
    /// The structured content, when the result is JSON other than a string.
    pub structured: Option<Value>,
    /// The tool reported a failure (a bridged MCP tool's `isError`).
    pub is_error: bool,
    /// The content blocks of a tool bridged from another MCP server, verbatim (images, audio,
    /// resource links and resources come back out as they went in); the text above otherwise.
    pub blocks: Option<Vec<Value>>,
}

/// The output of a call of `target` that answered `answer` (for `tool.invoke`, its `result`
/// field is the tool's result). A tool bridged from an MCP server answers
/// `{result, content: [blocks], isError?}` (`docs/bridges.md` "Results"): its blocks are given
/// back verbatim, its `result` is the structured content unless it is the joined text, and
/// `isError: true` is a failure.
#[must_use]
pub fn tool_output(target: &Target, answer: Value) -> ToolOutput {
    if *target == Target::Own(OwnTool::DirectorySearch) {
        return ToolOutput {
            text: directory_text(&answer),
            structured: Some(answer),
            is_error: false,
            blocks: None,
        };
    }
    let mut value = match target {
        Target::Own(_) => answer,
        Target::Mesh { .. } => match answer {
            Value::Object(mut o) => o.remove("result").unwrap_or(Value::Null),
            other => other,
        },
    };
    let mut is_error = false;
    let mut blocks = None;
    if let Value::Object(o) = &mut value
        && o.contains_key("result")
        && (o.get("isError") == Some(&Value::Bool(true))
            || o.get("content").is_some_and(Value::is_array))
    {
        is_error = o.get("isError") == Some(&Value::Bool(true));
        if let Some(Value::Array(content)) = o.remove("content") {
            blocks = Some(content);
        }
        value = o.remove("result").unwrap_or(Value::Null);
    }
    match value {
        Value::String(text) => ToolOutput {
            text,
            structured: None,
            is_error,
            blocks,
        },
        Value::Null if blocks.is_some() => ToolOutput {
            text: String::new(),
            structured: None,
            is_error,
            blocks,
        },
        other => ToolOutput {
            text: other.to_string(),
            structured: Some(other),
            is_error,
            blocks,
        },
    }
}

/// The text of a `directory.search` result: one line per result, best first — score, source,
/// trust, online or offline, name and how to call it (`face method target at address`); `no
/// results` when there is none.
#[must_use]
pub fn directory_text(result: &Value) -> String {
    let hits = result
        .get("results")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if hits.is_empty() {
        return "no results".to_owned();
    }
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("?").to_owned();
    let lines: Vec<String> = hits
        .iter()
        .map(|hit| {
            let call = hit.get("call").unwrap_or(&Value::Null);
            let mut how: Vec<&str> = ["face", "method", "target"]
                .iter()
                .filter_map(|k| call.get(*k).and_then(Value::as_str))
                .collect();
            if let Some(address) = call.get("address").and_then(Value::as_str) {
                how.extend(["at", address]);
            }
            format!(
                "{:.3} {} {} {} {} — call: {}",
                hit.get("score").and_then(Value::as_f64).unwrap_or(0.0),
                text(hit, "source"),
                hit.get("trust")
                    .map_or_else(|| "?".to_owned(), |t| text(t, "level")),
                if hit.get("online") == Some(&Value::Bool(true)) {
                    "online"
                } else {
                    "offline"
                },
                text(hit, "name"),
                if how.is_empty() {
                    "?".to_owned()
                } else {
                    how.join(" ")
                },
            )
        })
        .collect();
    lines.join("\n")
}

/// A Hyperspace error of a call, as this server answers it (one variant per MCP answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// A JSON-RPC −32602 to the MCP client (the tool is unknown).
    #[error("{0}")]
    UnknownTool(String),
    /// A tool result with `isError: true` and this text.
    #[error("{0}")]
    Tool(String),
}

/// Hyperspace spec §8 codes this module reads.
const INVALID_PARAMS: i64 = -32602;
const BUDGET_EXCEEDED: i64 = -32002;
const RATE_LIMITED: i64 = -32003;
const SAFETY: i64 = -32004;
const PEER_UNAVAILABLE: i64 = -32006;

/// How a Hyperspace error (`code`, `message`, `data`) of a call is answered (module docs); no
/// Hyperspace code reaches the MCP client as a code.
#[must_use]
pub fn translate_error(code: i64, message: &str, data: Option<&Value>) -> CallError {
    let field = data.and_then(|d| d.get("field")).and_then(Value::as_str);
    match code {
        INVALID_PARAMS if field == Some("toolId") => CallError::UnknownTool(format!(
            "the tool is no longer offered in the mesh: {message}"
        )),
        INVALID_PARAMS => CallError::Tool(format!("invalid arguments: {message}")),
        BUDGET_EXCEEDED => {
            let challenge = data
                .and_then(|d| d.get("challenge"))
                .map_or_else(|| "none given".to_owned(), Value::to_string);
            CallError::Tool(format!(
                "payment required: {message}; the tool's x402 payment challenge: {challenge}"
            ))
        }
        PEER_UNAVAILABLE => CallError::Tool(format!("peer unavailable: {message}")),
        RATE_LIMITED => CallError::Tool(format!("rate limited: {message}")),
        SAFETY => CallError::Tool(format!("refused by the safety guard: {message}")),
        _ => CallError::Tool(message.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, name: &str, schema: Value) -> ToolRecord {
        ToolRecord {
            id: id.into(),
            name: name.into(),
            peer_id: "12D3KooWpeer".into(),
            description: format!("{name} tool"),
            capabilities: vec!["x".into()],
            reputation: 0.5,
            avg_latency: 0,
            schema,
            price: None,
            source: None,
        }
    }

    #[test]
    fn names_are_valid_unique_and_ordered() {
        let records = vec![
            record("tool-bbbbbbbb", "web search", json!({})),
            record("tool-aaaaaaaa", "web_search", json!({})),
            record("tool-cccccccc", "agora.memory.store", json!({})),
            record("tool-dddddddd", &"é".repeat(300), json!({})),
            record("tool-aaaaaaaa", "web_search", json!({})),
        ];
        let names: Vec<String> = catalog(&records).into_iter().map(|t| t.name).collect();
        assert_eq!(
            names[..4],
            [
                "agora.tools.search",
                "agora.memory.store",
                "agora.memory.search",
                "agora.directory.search"
            ]
        );
        assert_eq!(names[4], "_".repeat(MAX_NAME), "cut to 128, sorted by name");
        assert_eq!(
            names[5..],
            [
                "agora.memory.store.tool-c",
                "web_search",
                "web_search.tool-b"
            ]
        );
        assert_eq!(names.len(), 8, "the repeated id is listed once");
        for n in &names {
            assert!((1..=MAX_NAME).contains(&n.len()), "{n}");
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
            );
        }
        assert_eq!(tool_name("", MAX_NAME), "tool");
    }

    #[test]
    fn schemas_are_objects_and_others_are_wrapped() {
        let obj = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        assert_eq!(
            input_schema(&json!({"input": obj})).0,
            obj.as_object().cloned().unwrap_or_default()
        );
        assert_eq!(
            input_schema(&obj),
            (obj.as_object().cloned().unwrap_or_default(), false)
        );
        assert_eq!(input_schema(&json!({})), (object_schema(), false));
        let (wrapped, is) = input_schema(&json!({"input": {"type": "string"}}));
        assert!(is);
        assert_eq!(
            Value::Object(wrapped),
            json!({"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]})
        );
        let target = Target::Mesh {
            tool_id: "t".into(),
            wrapped: true,
        };
        let args = json!({"input": "hi"}).as_object().cloned();
        assert_eq!(
            call_params(&target, args),
            ("tool.invoke", json!({"toolId": "t", "params": "hi"}))
        );
    }

    #[test]
    fn meta_carries_id_peer_price_and_source() {
        let mut r = record("tool-1", "priced", json!({}));
        r.source = Some(agora_hyperspace::tool_record::ToolSource {
            bridge: "mcp".into(),
            server: "everything".into(),
            name: "echo".into(),
            verified: None,
        });
        let listed = catalog(&[r]);
        let meta = &listed[OwnTool::ALL.len()].meta;
        assert_eq!(meta["org.agora-mesh/toolId"], "tool-1");
        assert_eq!(meta["org.agora-mesh/peerId"], "12D3KooWpeer");
        assert_eq!(meta["org.agora-mesh/source"]["server"], "everything");
        assert!(!meta.contains_key("org.agora-mesh/price"));
    }

    #[test]
    fn results_become_text_and_structured_content() {
        let mesh = Target::Mesh {
            tool_id: "t".into(),
            wrapped: false,
        };
        let out = tool_output(&mesh, json!({"result": "Echo: hi", "duration": 3}));
        assert_eq!(
            (out.text.as_str(), out.structured, out.is_error),
            ("Echo: hi", None, false)
        );
        let out = tool_output(&mesh, json!({"result": {"links": [1]}}));
        assert_eq!(out.structured, Some(json!({"links": [1]})));
        assert_eq!(out.text, r#"{"links":[1]}"#);
        let out = tool_output(
            &mesh,
            json!({"result": {"result": "boom", "isError": true}}),
        );
        assert!(out.is_error);
        assert_eq!(out.text, "boom");
        let own = Target::Own(OwnTool::Discover);
        assert_eq!(
            tool_output(&own, json!({"tools": []})).structured,
            Some(json!({"tools": []}))
        );
    }

    #[test]
    fn a_directory_search_is_one_line_per_result_beside_its_structured_content() {
        let own = Target::Own(OwnTool::DirectorySearch);
        assert_eq!(
            call_params(&own, json!({"query": "x", "limit": 2}).as_object().cloned()),
            ("directory.search", json!({"query": "x", "limit": 2}))
        );
        let answer = json!({"results": [
            {"score": 0.91234, "source": "hyperspace", "trust": {"level": "signed"}, "online": true,
             "name": "minutes-writer", "call": {"face": "rpc", "method": "tool.invoke", "target": "tool-1"}},
            {"score": 0.4, "source": "agh", "trust": {"level": "claimed"}, "online": false,
             "name": "scribe-7", "call": {"face": "agh", "method": "direct", "target": "scribe-7",
                                          "address": "channel:general"}}
        ], "count": 2});
        let out = tool_output(&own, answer.clone());
        assert_eq!(
            out.text,
            "0.912 hyperspace signed online minutes-writer — call: rpc tool.invoke tool-1\n\
             0.400 agh claimed offline scribe-7 — call: agh direct scribe-7 at channel:general"
        );
        assert_eq!((out.structured, out.is_error), (Some(answer), false));
        assert_eq!(
            directory_text(&json!({"results": [], "count": 0})),
            "no results"
        );
        assert_eq!(
            directory_text(&json!({"results": [{}]})),
            "0.000 ? ? offline ? — call: ?"
        );
    }

    #[test]
    fn a_bridged_mcp_result_comes_back_out_with_its_blocks() {
        let mesh = Target::Mesh {
            tool_id: "t".into(),
            wrapped: false,
        };
        let image = json!({"type": "image", "data": "iVBO", "mimeType": "image/png"});
        let answer = json!({"result": {"result": null, "content": [image]}});
        let out = tool_output(&mesh, answer);
        assert_eq!(out.blocks, Some(vec![image]));
        assert_eq!((out.structured, out.is_error), (None, false));
        let answer = json!({"result": {"result": {"n": 3}, "content": [{"type": "text", "text": "{\"n\":3}"}]}});
        let out = tool_output(&mesh, answer);
        assert_eq!(out.structured, Some(json!({"n": 3})));
        let answer = json!({"result": {"result": "no such file", "content": [], "isError": true}});
        let out = tool_output(&mesh, answer);
        assert_eq!((out.text.as_str(), out.is_error), ("no such file", true));
    }

    #[test]
    fn hyperspace_codes_are_translated_never_forwarded() {
        let challenge = json!({"challenge": {"accepts": []}});
        let CallError::Tool(t) = translate_error(-32002, "Budget Exceeded", Some(&challenge))
        else {
            panic!("payment is a tool error")
        };
        assert!(
            t.contains("payment required") && t.contains("accepts"),
            "{t}"
        );
        assert_eq!(
            translate_error(-32006, "gone", None),
            CallError::Tool("peer unavailable: gone".into())
        );
        assert!(matches!(
            translate_error(-32602, "unknown", Some(&json!({"field": "toolId"}))),
            CallError::UnknownTool(_)
        ));
        assert!(matches!(
            translate_error(-32602, "bad q", None),
            CallError::Tool(_)
        ));
        assert!(matches!(
            translate_error(-32001, "x", None),
            CallError::Tool(_)
        ));
    }
}
