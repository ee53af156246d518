//! What the bridges' JSON-RPC methods take, return and may fail with (Hyperspace spec §10.1
//! `bridge.registerMCPServer`, §10.2 `bridge.announceA2AAgent`; `docs/bridges.md`), for the
//! node's OpenRPC document ([`crate::openrpc`]). Their params are [`agora_bridge`]'s specs,
//! read with serde; their schemas are written here.

use agora_hyperspace::jsonrpc::RpcCode;
use agora_hyperspace::openrpc::{MethodDoc, no_example, no_params};
use schemars::json_schema;
use serde_json::json;

use agora_bridge::{a2a, mcp};

/// What each `bridge.*` method takes, returns and may fail with.
pub const DOCS: [MethodDoc; 6] = [
    MethodDoc {
        name: mcp::REGISTER,
        summary: "Bridges an MCP server's tools into the mesh (stdio child or Streamable HTTP); API key only.",
        params: |g| {
            let price = agora_hyperspace::payments::schema::price(g);
            json_schema!({
                "type": "object",
                "required": ["url"],
                "properties": {
                    "url": {"type": "string", "description": "`stdio://<name>` (a child process) or `http(s)://…` (Streamable HTTP)."},
                    "name": {"type": "string", "description": "Its name on this node (tools are named `<name>.<tool>`)."},
                    "command": {"type": "string", "description": "The program of a stdio server."},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Variables added to the child's allow-listed environment."},
                    "cwd": {"type": "string"},
                    "tools": {"type": "array", "items": {"type": "string"}, "description": "Only these tools are bridged (all when absent)."},
                    "tags": {"type": "array", "items": {"type": "string"}, "description": "Capability tags added to every bridged tool."},
                    "price": price
                }
            })
        },
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["serverId", "tools"],
                "properties": {
                    "serverId": {"type": "string"},
                    "tools": {"type": "array", "items": {"type": "string"}, "description": "The bridged tools' ids."}
                }
            })
        },
        errors: &[RpcCode::PEER_UNAVAILABLE],
        example: || json!({"url": "http://127.0.0.1:9/mcp", "name": "docs", "tags": ["docs"]}),
    },
    MethodDoc {
        name: mcp::LIST,
        summary: "The bridged MCP servers: state, era, tools, restarts.",
        params: no_params,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["servers"],
                "properties": {"servers": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "serverId": {"type": "string"},
                        "url": {"type": "string"},
                        "origin": {"type": "string", "enum": ["config", "rpc"]},
                        "state": {"type": "string", "enum": ["starting", "running", "restarting"]},
                        "era": {"type": "string", "enum": ["legacy", "modern"]},
                        "protocolVersion": {"type": "string"},
                        "pid": {"type": "integer"},
                        "restarts": {"type": "integer"},
                        "error": {"type": "string"},
                        "tools": {"type": "array", "items": {"type": "object", "properties": {"toolId": {"type": "string"}, "name": {"type": "string"}}}}
                    }
                }}}
            })
        },
        errors: &[],
        example: no_example,
    },
    MethodDoc {
        name: mcp::UNREGISTER,
        summary: "Stops bridging an MCP server registered over JSON-RPC; API key only.",
        params: |_| {
            json_schema!({
                "type": "object",
                "required": ["serverId"],
                "properties": {"serverId": {"type": "string"}}
            })
        },
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["serverId", "removed"],
                "properties": {"serverId": {"type": "string"}, "removed": {"const": true}}
            })
        },
        errors: &[],
        example: || json!({"serverId": "docs"}),
    },
    MethodDoc {
        name: a2a::ANNOUNCE,
        summary: "Announces an A2A agent: its card on gossip, its skills as tools; API key only.",
        params: |g| {
            let price = agora_hyperspace::payments::schema::price(g);
            json_schema!({
                "type": "object",
                "description": "Exactly one of `url` and `agentCard`.",
                "properties": {
                    "name": {"type": "string", "description": "Its name on this node (from the card when absent)."},
                    "url": {"type": "string", "description": "The agent's base URL: its card is fetched from `<url>/.well-known/agent-card.json`."},
                    "agentCard": {"type": "object", "description": "The agent's card, as given."},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "price": price
                }
            })
        },
        result: |_| {
            json_schema!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "url": {"type": "string"},
                    "verified": {"type": "boolean"},
                    "tools": {"type": "array", "items": {"type": "object", "properties": {
                        "toolId": {"type": "string"}, "skillId": {"type": "string"}, "name": {"type": "string"}
                    }}}
                }
            })
        },
        errors: &[RpcCode::PEER_UNAVAILABLE],
        example: || json!({"url": "http://127.0.0.1:9", "name": "helper", "tags": ["demo"]}),
    },
    MethodDoc {
        name: a2a::LIST,
        summary: "The A2A agents this node announced and those heard on gossip.",
        params: no_params,
        result: |_| {
            json_schema!({
                "type": "object",
                "properties": {
                    "agents": {"type": "array", "items": {"type": "object"}},
                    "remote": {"type": "array", "items": {"type": "object", "properties": {
                        "peerId": {"type": "string"}, "name": {"type": "string"}, "url": {"type": "string"},
                        "verified": {"type": "boolean"}, "card": {}
                    }}}
                }
            })
        },
        errors: &[],
        example: no_example,
    },
    MethodDoc {
        name: a2a::WITHDRAW,
        summary: "Withdraws an announced A2A agent and its skills; API key only.",
        params: |_| {
            json_schema!({
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}}
            })
        },
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["name", "withdrawn"],
                "properties": {"name": {"type": "string"}, "withdrawn": {"const": true}}
            })
        },
        errors: &[],
        example: || json!({"name": "helper"}),
    },
];
