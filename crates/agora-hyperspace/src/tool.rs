//! The Tool primitive (`tool.*`), sans IO: a registry of local tools, discovery over local tools
//! and the tools of live capability cards, per-tool analytics and reputation, and invoke routing.
//!
//! Spec references (the Hyperspace Gossiping Agents Protocol):
//!
//! - §4.3 "Tool Primitive":
//!   `tool.discover(query, capabilities?, minReputation?, maxLatency?, geo?) → { tools[] }`,
//!   `tool.register(name, description, schema, capabilities) → { toolId }`,
//!   `tool.invoke(toolId, params, sessionId?) → { result, duration, peerId }`,
//!   `tool.getAnalytics(toolId) → { invocations, avgLatency, successRate }`,
//!   `tool.listRegistered() → { tools[] }`, and the `tool.discover` example whose tool records
//!   `{id, name, peerId, description, capabilities, reputation, avgLatency, schema}` are
//!   [`ToolRecord`]. "Results are ranked by reputation, filtered by latency and geography
//!   preferences."
//! - §2.4 / §7.4: remote tools come from capability cards ([`crate::card`]), which expire five
//!   minutes after their last heartbeat.
//! - §9.4 "Reputation": peers track reputation; here, of tools, from what this node observed.
//! - §11 Example 1 steps 2–3: `tool.discover {query: "web search", minReputation: 0.8}` and
//!   `tool.invoke {toolId, params, sessionId}` → `{result, duration: 195, peerId}`.
//! - §8: −32602 Invalid Params (unknown tool, bad arguments), −32006 Peer Unavailable, −32003.
//!
//! # Design
//!
//! [`ToolRegistry`] holds plain serde data: the local tools (registered by clients of this node;
//! each has an opaque `owner` the node supplies, e.g. the connection id), the analytics per tool
//! id, and a [`CardTable`] of remote peers' cards, which the node feeds from gossip
//! ([`ToolRegistry::cards_mut`]). It reads no clock (`now_ms` is a parameter) and generates ids
//! through [`IdSource`].
//!
//! [`ToolRegistry::call`] answers `tool.discover`, `tool.register`, `tool.getAnalytics` and
//! `tool.listRegistered`. **`tool.invoke` is not answered by `call`** (it returns `None`): running
//! a tool is I/O. The node parses [`InvokeParams`], asks [`ToolRegistry::plan_invoke`] where the
//! tool lives ([`InvokeTarget::Local`] owner or [`InvokeTarget::Remote`] peer), forwards the call,
//! measures it, reports it with [`ToolRegistry::record_invocation`] and answers [`InvokeResult`].
//!
//! # Discovery
//!
//! Candidates are the local tools and the tools of every **live** card. Filters (all must hold):
//!
//! | param | rule |
//! |---|---|
//! | `query` | every query token is a prefix of (or equal to) some token of the tool's name, description or capabilities |
//! | `capabilities` | every listed capability is among the tool's capabilities |
//! | `minReputation` | the tool's reputation `>=` it |
//! | `maxLatency` | the tool's `avgLatency` `<=` it (milliseconds) |
//! | `geo` | the region of the tool's peer is **exactly** this string (case-sensitive); tools whose peer states no region never match |
//!
//! Tokens are maximal runs of alphanumeric characters, lowercased (so `"web search"` matches the
//! tool `web-search`); a query without tokens (`""`) matches everything. Capabilities compare
//! ASCII case-insensitively. Results are ranked by reputation descending, then `avgLatency`
//! ascending, then `id` ascending — a total order, so the output does not depend on the order in
//! which tools were registered or cards arrived — and cut to [`ToolLimits::max_discover_results`].
//!
//! # Reputation and latency of a tool
//!
//! - Observed: when this node has recorded at least one invocation of the tool,
//!   `reputation = (successes + PRIOR_WEIGHT × PRIOR) / (invocations + PRIOR_WEIGHT)` with
//!   [`REPUTATION_PRIOR`] 0.5 and [`REPUTATION_PRIOR_WEIGHT`] 4 — the success rate, pulled towards
//!   0.5 while there is little evidence (1 success: 0.6; 20 of 20: 0.917; 100 of 100: 0.981) —
//!   and `avgLatency` is the observed mean duration.
//! - Otherwise, a local tool has reputation 0.5 and `avgLatency` 0 (unknown; it passes any
//!   `maxLatency`), and a remote tool has what its card claims: `min(tool.reputation,
//!   card.reputation)` and the tool's `avgLatency`.
//!
//! # Memory bounds ([`ToolLimits`], defaults)
//!
//! | bound | default | when reached |
//! |---|---|---|
//! | local tools | 256 | −32003 |
//! | `name` | 1..=128 bytes, not blank | −32602 |
//! | `description` | 1..=4096 bytes, not blank | −32602 |
//! | `capabilities` | 1..=32 entries, each 1..=64 bytes | −32602 |
//! | `schema` | a JSON object of at most 64 KiB serialized | −32602 |
//! | tool id | 1..=128 bytes | −32602 (or −32603 for a bad generated id) |
//! | `query` | 1024 bytes | −32602 |
//! | discover results | 100 | the rest are not returned |
//! | analytics entries | 4096 | entries of tools no longer known are dropped; otherwise −32003 |
//!
//! # Important discrepancies
//!
//! - **`tool.invoke` is routed, not executed, here** (see Design). `duration` is whole
//!   milliseconds, as in Example 1 (`195`); so is `avgLatency` (the mean, rounded half up).
//! - **Tool ids are not bound to peer keys.** The spec's ids (`tool-8f3a2b`) carry no peer. A
//!   local tool shadows a remote one with the same id, and among remote cards advertising the
//!   same id the peer with the smallest `peerId` wins, deterministically. A card can only
//!   advertise tools for its own peer (see [`crate::card`]).
//! - **Registration is per node, ownership per connection.** `listRegistered` returns every
//!   local tool of the node that has a provider (sorted by id), not only the caller's. When a
//!   connection closes the node calls [`ToolRegistry::orphan_owner`]: its tools stay (with their
//!   ids and analytics) but are not discovered, listed or advertised, and invoking one is −32006.
//!   A later `tool.register` of an identical tool (same name, description, schema and
//!   capabilities) by any connection adopts the orphan and gets its id back, so a provider that
//!   reconnects — or whose node restarted, since the node stores its tools — keeps its tool id
//!   and reputation. Orphans count towards the local tool bound; the longest-orphaned is dropped
//!   when room is needed, and [`ToolRegistry::forget_orphans`] drops old ones. Duplicate
//!   capabilities are dropped (first spelling kept), names need not be unique.
//! - **`getAnalytics` of a tool never invoked** is `{invocations: 0, avgLatency: 0,
//!   successRate: 0}`; an id that is neither local nor in a stored card (and has no analytics) is
//!   −32602 naming `toolId`.
//! - **Unknown vs unavailable.** `plan_invoke` answers −32602 (field `toolId`) for an id nobody
//!   advertises, and −32006 "Peer Unavailable" with `data: {toolId, peerId, reason}` when the only
//!   card advertising it has expired (no heartbeat for 5 minutes) but is still remembered.
//! - **`query` is required** (the §4.3 signature has no `?`); send `""` to list everything.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;

use crate::openrpc::{MethodDoc, no_example, no_params, params_of, result_of};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::card::{CapabilityCard, CardLimits, CardTable};
use crate::jsonrpc::{RpcCode, RpcError};
use crate::params::{capacity_error, invalid_params, parse_params, to_result};
use crate::payments::Price;
use crate::state::IdSource;
use crate::tool_record::{FieldError, check_tool_fields, field_error};
use crate::tool_record::{ToolLimits, ToolRecord, ToolSource};

/// `tool.discover`.
pub const DISCOVER: &str = "tool.discover";
/// `tool.register`.
pub const REGISTER: &str = "tool.register";
/// `tool.invoke`.
pub const INVOKE: &str = "tool.invoke";
/// `tool.getAnalytics`.
pub const GET_ANALYTICS: &str = "tool.getAnalytics";
/// `tool.listRegistered`.
pub const LIST_REGISTERED: &str = "tool.listRegistered";
/// The params of `tool.discover`, in spec order (for positional params).
pub const DISCOVER_PARAMS: [&str; 5] = [
    "query",
    "capabilities",
    "minReputation",
    "maxLatency",
    "geo",
];
/// Every `tool.*` method, in spec order.
pub const METHODS: [&str; 5] = [DISCOVER, REGISTER, INVOKE, GET_ANALYTICS, LIST_REGISTERED];

/// What each `tool.*` method takes, returns and may fail with ([`crate::openrpc`]).
pub const DOCS: [MethodDoc; 5] = [
    MethodDoc {
        name: DISCOVER,
        summary: "Finds tools on this node and on live capability cards, ranked.",
        params: params_of::<DiscoverParams>,
        result: result_of::<ToolsResult>,
        errors: &[],
        example: || json!({"query": "web search", "minReputation": 0.8}),
    },
    MethodDoc {
        name: REGISTER,
        summary: "Registers a tool served by this connection (optionally priced).",
        params: params_of::<RegisterParams>,
        result: result_of::<RegisterResult>,
        errors: &[RpcCode::RATE_LIMITED],
        example: || json!({"name": "web-search", "description": "Searches the web", "schema": {"input": {"type": "object"}}, "capabilities": ["search"]}),
    },
    MethodDoc {
        name: INVOKE,
        summary: "Runs a tool, here or on the peer that serves it; priced tools take a payment.",
        params: params_of::<InvokeParams>,
        result: result_of::<InvokeResult>,
        errors: &[
            RpcCode::SESSION_NOT_FOUND,
            RpcCode::BUDGET_EXCEEDED,
            RpcCode::RATE_LIMITED,
            RpcCode::PEER_UNAVAILABLE,
        ],
        example: || json!({"toolId": "tool-web-9f1c", "params": {"query": "solid-state battery breakthroughs 2026"}, "sessionId": "sess-a8c3f210"}),
    },
    MethodDoc {
        name: GET_ANALYTICS,
        summary: "A tool's invocations, mean latency and success rate seen by this node.",
        params: params_of::<GetAnalyticsParams>,
        result: result_of::<AnalyticsResult>,
        errors: &[],
        example: || json!({"toolId": "tool-web-9f1c"}),
    },
    MethodDoc {
        name: LIST_REGISTERED,
        summary: "The tools registered on this node.",
        params: no_params,
        result: result_of::<ToolsResult>,
        errors: &[],
        example: no_example,
    },
];

/// The reputation of a tool without evidence, and the value the formula is pulled towards.
pub const REPUTATION_PRIOR: f64 = 0.5;
/// How many invocations' worth of weight the prior has.
pub const REPUTATION_PRIOR_WEIGHT: f64 = 4.0;

// ---------------------------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------------------------

/// Params of `tool.discover(query, capabilities?, minReputation?, maxLatency?, geo?)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverParams {
    /// Free text matched token by token against name, description and capabilities.
    pub query: String,
    /// Capabilities every result must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// Lowest reputation accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reputation: Option<f64>,
    /// Highest `avgLatency` accepted, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_latency: Option<f64>,
    /// Region the tool's peer must state, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo: Option<String>,
}

/// Result of `tool.discover` and `tool.listRegistered`: `{ tools[] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolsResult {
    /// The tools, ranked (discover) or by id (listRegistered).
    pub tools: Vec<ToolRecord>,
}

/// Params of `tool.register(name, description, schema, capabilities)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterParams {
    /// Short name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// A JSON object (e.g. `{input, output}` JSON Schemas).
    pub schema: Value,
    /// Capability tags, at least one.
    pub capabilities: Vec<String>,
    /// A price per invocation: callers pay it with a credential or a channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::payments::schema::price")]
    pub price: Option<Price>,
}

/// Result of `tool.register`: `{ toolId }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterResult {
    /// The new tool's id.
    pub tool_id: String,
}

/// Params of `tool.invoke(toolId, params, sessionId?)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvokeParams {
    /// The tool to run.
    pub tool_id: String,
    /// The tool's input, passed through.
    pub params: Value,
    /// The calling session, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Payment for a priced tool: `{credential}` or `{channelId}` (and, between nodes,
    /// `{channelId, nonce}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<Value>,
}

/// Result of `tool.invoke`: `{ result, duration, peerId }` (built by the node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvokeResult {
    /// The tool's output.
    pub result: Value,
    /// How long the call took, whole milliseconds.
    pub duration: u64,
    /// The peer that ran the tool.
    pub peer_id: String,
}

/// Params of `tool.getAnalytics(toolId)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetAnalyticsParams {
    /// The tool.
    pub tool_id: String,
}

/// Result of `tool.getAnalytics`: `{ invocations, avgLatency, successRate }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalyticsResult {
    /// Recorded invocations.
    pub invocations: u64,
    /// Mean duration, whole milliseconds (0 without invocations).
    pub avg_latency: u64,
    /// Successful invocations / invocations, `0..=1` (0 without invocations).
    pub success_rate: f64,
}

// ---------------------------------------------------------------------------------------------
// Analytics
// ---------------------------------------------------------------------------------------------

/// The invocations this node observed of one tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Analytics {
    /// Recorded invocations.
    pub invocations: u64,
    /// Of which successful.
    pub successes: u64,
    /// Sum of durations, milliseconds (saturating).
    pub total_duration_ms: u64,
}

impl Analytics {
    /// Records one invocation.
    pub fn record(&mut self, duration_ms: u64, success: bool) {
        self.invocations = self.invocations.saturating_add(1);
        self.successes = self.successes.saturating_add(u64::from(success));
        self.total_duration_ms = self.total_duration_ms.saturating_add(duration_ms);
    }

    /// Mean duration rounded half up, 0 without invocations.
    #[must_use]
    pub fn avg_latency(&self) -> u64 {
        if self.invocations == 0 {
            return 0;
        }
        let total = u128::from(self.total_duration_ms);
        let n = u128::from(self.invocations);
        u64::try_from((total * 2 + n) / (2 * n)).unwrap_or(u64::MAX)
    }

    /// Successes / invocations, 0 without invocations.
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn success_rate(&self) -> f64 {
        if self.invocations == 0 {
            return 0.0;
        }
        self.successes as f64 / self.invocations as f64
    }

    /// `(successes + 4 × 0.5) / (invocations + 4)` (see the module docs).
    #[must_use]
    #[allow(clippy::cast_precision_loss)]
    pub fn reputation(&self) -> f64 {
        (self.successes as f64 + REPUTATION_PRIOR_WEIGHT * REPUTATION_PRIOR)
            / (self.invocations as f64 + REPUTATION_PRIOR_WEIGHT)
    }

    /// The `tool.getAnalytics` view.
    #[must_use]
    pub fn to_result(&self) -> AnalyticsResult {
        AnalyticsResult {
            invocations: self.invocations,
            avg_latency: self.avg_latency(),
            success_rate: self.success_rate(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Limits and validation
// ---------------------------------------------------------------------------------------------

fn to_invalid_params((field, reason): FieldError) -> RpcError {
    invalid_params(format!("{field}: {reason}"), Some(&field))
}

/// Lowercased maximal alphanumeric runs of `text`.
pub(crate) fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|token| !token.is_empty())
        .map(str::to_lowercase)
}

/// Whether every token of `query` is a prefix of some token of the tool's text.
fn matches_query(query_tokens: &[String], record: &ToolRecord) -> bool {
    if query_tokens.is_empty() {
        return true;
    }
    let tool_tokens: BTreeSet<String> = tokens(&record.name)
        .chain(tokens(&record.description))
        .chain(record.capabilities.iter().flat_map(|c| tokens(c)))
        .collect();
    query_tokens.iter().all(|q| {
        tool_tokens
            .range(q.clone()..)
            .next()
            .is_some_and(|t| t.starts_with(q.as_str()))
    })
}

// ---------------------------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------------------------

/// A tool registered on this node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalTool {
    /// The tool id.
    pub id: String,
    /// Short name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// The schema object.
    pub schema: Value,
    /// Capability tags, deduplicated.
    pub capabilities: Vec<String>,
    /// Who serves it (opaque to this crate, e.g. a connection id); its last owner once orphaned.
    pub owner: String,
    /// Since when (Unix ms) the tool has no provider; `None` while its owner is connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphaned_at: Option<u64>,
    /// Price per invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// Where a bridged tool comes from ([`ToolRegistry::set_owner_tools`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ToolSource>,
}

/// A tool a bridge serves (spec §10): its fixed id (the bridge derives it, so it survives
/// restarts), its fields as `tool.register` takes them, and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgedTool {
    /// The tool id, chosen by the bridge.
    pub id: String,
    /// Name, description, schema, capabilities and price.
    pub params: RegisterParams,
    /// The MCP server or A2A agent behind it.
    pub source: ToolSource,
}

/// What [`ToolRegistry::set_owner_tools`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetToolsOutcome {
    /// Whether the served tools changed (the node's card must be announced again).
    pub changed: bool,
    /// The tools refused, by id, with the reason.
    pub refused: Vec<(String, String)>,
}

/// Where a tool runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvokeTarget {
    /// On this node, served by `owner`.
    Local {
        /// The owner given at registration.
        owner: String,
    },
    /// On another peer, whose card is live.
    Remote {
        /// The peer to forward the call to.
        peer_id: String,
    },
}

/// The routing decision for one `tool.invoke`.
#[derive(Debug, Clone, PartialEq)]
pub struct InvokePlan {
    /// The tool.
    pub tool_id: String,
    /// Where to send the call.
    pub target: InvokeTarget,
    /// The peer that runs the tool (this node's id for local tools): the result's `peerId`.
    pub peer_id: String,
    /// The tool's price (as registered here, or as its card says).
    pub price: Option<Price>,
    /// The tool's input schema, to check the call's params against before its provider sees
    /// them ([`crate::tool_input`]).
    pub input_schema: Option<Value>,
}

/// The Tool primitive's state: local tools, analytics, and remote capability cards.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolRegistry {
    local_peer_id: String,
    local_geo: Option<String>,
    #[serde(default)]
    local_wallet: Option<String>,
    local: BTreeMap<String, LocalTool>,
    analytics: BTreeMap<String, Analytics>,
    cards: CardTable,
    #[serde(skip)]
    limits: ToolLimits,
    /// Local tools added, changed or removed since [`Self::take_dirty`] (for the node's store).
    #[serde(skip)]
    dirty: BTreeSet<String>,
}

impl ToolRegistry {
    /// An empty registry of the node `local_peer_id`, with the default limits.
    #[must_use]
    pub fn new(local_peer_id: impl Into<String>) -> Self {
        Self::with_limits(local_peer_id, ToolLimits::default(), CardLimits::default())
    }

    /// An empty registry with the given limits.
    #[must_use]
    pub fn with_limits(
        local_peer_id: impl Into<String>,
        limits: ToolLimits,
        card_limits: CardLimits,
    ) -> Self {
        Self {
            local_peer_id: local_peer_id.into(),
            local_geo: None,
            local_wallet: None,
            local: BTreeMap::new(),
            analytics: BTreeMap::new(),
            cards: CardTable::with_limits(card_limits),
            limits,
            dirty: BTreeSet::new(),
        }
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> ToolLimits {
        self.limits
    }

    /// Replaces the limits (after reloading a deserialized registry).
    pub fn set_limits(&mut self, limits: ToolLimits, card_limits: CardLimits) {
        self.limits = limits;
        self.cards.set_limits(card_limits);
    }

    /// This node's peer id.
    #[must_use]
    pub fn local_peer_id(&self) -> &str {
        &self.local_peer_id
    }

    /// Sets the wallet address this node's card publishes.
    pub fn set_local_wallet(&mut self, wallet: Option<String>) {
        self.local_wallet = wallet;
    }

    /// Sets this node's region, matched by the `geo` filter for local tools.
    pub fn set_local_geo(&mut self, geo: Option<String>) {
        self.local_geo = geo;
    }

    /// The remote capability cards.
    #[must_use]
    pub fn cards(&self) -> &CardTable {
        &self.cards
    }

    /// The remote capability cards, for the node to feed from gossip.
    pub fn cards_mut(&mut self) -> &mut CardTable {
        &mut self.cards
    }

    /// A local tool by id.
    #[must_use]
    pub fn local_tool(&self, tool_id: &str) -> Option<&LocalTool> {
        self.local.get(tool_id)
    }

    /// Dispatches one `tool.*` call; `None` when `method` is not a Tool method **or is
    /// `tool.invoke`**, which the node routes with [`Self::plan_invoke`]. `owner` becomes the
    /// owner of a registered tool.
    pub fn call(
        &mut self,
        method: &str,
        params: &Value,
        now_ms: u64,
        owner: &str,
        ids: &mut (impl IdSource + ?Sized),
    ) -> Option<Result<Value, RpcError>> {
        let outcome = match method {
            DISCOVER => parse_params(params, &DISCOVER_PARAMS)
                .and_then(|p| self.discover(&p, now_ms))
                .and_then(|r| to_result(&r)),
            REGISTER => parse_params(
                params,
                &["name", "description", "schema", "capabilities", "price"],
            )
            .and_then(|p| self.register(&p, owner, ids))
            .and_then(|r| to_result(&r)),
            GET_ANALYTICS => parse_params::<GetAnalyticsParams>(params, &["toolId"])
                .and_then(|p| self.get_analytics(&p.tool_id))
                .and_then(|r| to_result(&r)),
            LIST_REGISTERED => {
                parse_params::<Value>(params, &[]).and_then(|_| to_result(&self.list_registered()))
            }
            _ => return None,
        };
        Some(outcome)
    }

    /// `tool.register`: stores a local tool served by `owner`.
    ///
    /// # Errors
    ///
    /// −32602 naming the field for invalid params; −32003 when the registry is full; −32603 when
    /// `ids` yields an empty, oversized or already used id.
    pub fn register(
        &mut self,
        params: &RegisterParams,
        owner: &str,
        ids: &mut (impl IdSource + ?Sized),
    ) -> Result<RegisterResult, RpcError> {
        let capabilities = check_tool_fields(
            &params.name,
            &params.description,
            &params.schema,
            &params.capabilities,
            &self.limits,
        )
        .map_err(to_invalid_params)?;
        if let Some(price) = &params.price {
            price
                .check()
                .map_err(|e| to_invalid_params(field_error("price", &e)))?;
        }
        let orphan = self
            .local
            .values()
            .filter(|t| {
                t.orphaned_at.is_some()
                    && t.name == params.name
                    && t.description == params.description
                    && t.schema == params.schema
                    && t.capabilities == capabilities
                    && t.price == params.price
            })
            .min_by_key(|t| (t.orphaned_at, t.id.clone()))
            .map(|t| t.id.clone());
        if let Some(id) = orphan
            && let Some(tool) = self.local.get_mut(&id)
        {
            tool.owner = owner.to_owned();
            tool.orphaned_at = None;
            self.dirty.insert(id.clone());
            return Ok(RegisterResult { tool_id: id });
        }
        if !self.make_room() {
            return Err(capacity_error("tools", self.limits.max_local_tools));
        }
        let id = ids.next_id();
        if id.is_empty() || id.len() > self.limits.max_id_bytes || self.local.contains_key(&id) {
            return Err(RpcError::internal_error()
                .with_data(json!({ "reason": "the id source returned an unusable tool id" })));
        }
        // A stale analytics entry of a remote tool with the same id must not leak in.
        self.analytics.remove(&id);
        self.local.insert(
            id.clone(),
            LocalTool {
                id: id.clone(),
                name: params.name.clone(),
                description: params.description.clone(),
                schema: params.schema.clone(),
                capabilities,
                owner: owner.to_owned(),
                orphaned_at: None,
                price: params.price,
                source: None,
            },
        );
        self.dirty.insert(id.clone());
        Ok(RegisterResult { tool_id: id })
    }

    /// Makes `tools` the tools `owner` serves (a bridge's whole list, spec §10): each is added,
    /// updated or adopted back from an orphan under its fixed id; the owner's tools not in
    /// `tools` become orphans (not advertised, kept with their analytics until listed again or
    /// forgotten). A tool whose fields are invalid, whose id another owner serves, or that does
    /// not fit in the registry is refused and reported; the others are still set.
    pub fn set_owner_tools(
        &mut self,
        owner: &str,
        tools: Vec<BridgedTool>,
        now_ms: u64,
    ) -> SetToolsOutcome {
        let mut outcome = SetToolsOutcome::default();
        let listed: BTreeSet<&str> = tools.iter().map(|t| t.id.as_str()).collect();
        for tool in self.local.values_mut() {
            if tool.owner == owner
                && tool.orphaned_at.is_none()
                && !listed.contains(tool.id.as_str())
            {
                tool.orphaned_at = Some(now_ms);
                self.dirty.insert(tool.id.clone());
                outcome.changed = true;
            }
        }
        for tool in tools {
            match self.set_bridged(owner, tool.clone()) {
                Ok(changed) => outcome.changed |= changed,
                Err(reason) => outcome.refused.push((tool.id, reason)),
            }
        }
        outcome
    }

    /// Adds or updates one bridged tool; `Ok(changed)`, or why it was refused.
    fn set_bridged(&mut self, owner: &str, tool: BridgedTool) -> Result<bool, String> {
        let BridgedTool { id, params, source } = tool;
        if id.is_empty() || id.len() > self.limits.max_id_bytes {
            return Err(format!(
                "the id must be 1..={} bytes",
                self.limits.max_id_bytes
            ));
        }
        let described = |(field, reason): FieldError| format!("{field}: {reason}");
        let capabilities = check_tool_fields(
            &params.name,
            &params.description,
            &params.schema,
            &params.capabilities,
            &self.limits,
        )
        .map_err(described)?;
        crate::tool_record::check_source(&source, &self.limits).map_err(described)?;
        if let Some(price) = &params.price {
            price.check().map_err(|e| format!("price: {e}"))?;
        }
        let wanted = LocalTool {
            id: id.clone(),
            name: params.name,
            description: params.description,
            schema: params.schema,
            capabilities,
            owner: owner.to_owned(),
            orphaned_at: None,
            price: params.price,
            source: Some(source),
        };
        match self.local.get_mut(&id) {
            Some(existing) if existing.owner != owner && existing.orphaned_at.is_none() => {
                Err(format!("the tool id {id} is served by another provider"))
            }
            Some(existing) if *existing == wanted => Ok(false),
            Some(existing) => {
                *existing = wanted;
                self.dirty.insert(id);
                Ok(true)
            }
            None => {
                if !self.make_room() {
                    let max = self.limits.max_local_tools;
                    return Err(format!("the node serves {max} tools already"));
                }
                self.analytics.remove(&id);
                self.local.insert(id.clone(), wanted);
                self.dirty.insert(id);
                Ok(true)
            }
        }
    }

    /// Whether one more local tool fits, after dropping the longest-orphaned tool if needed.
    fn make_room(&mut self) -> bool {
        if self.local.len() < self.limits.max_local_tools {
            return true;
        }
        let oldest_orphan = self
            .local
            .values()
            .filter_map(|t| t.orphaned_at.map(|at| (at, t.id.clone())))
            .min();
        oldest_orphan.is_some_and(|(_, id)| self.unregister(&id))
    }

    /// Removes a local tool; returns whether it existed.
    pub fn unregister(&mut self, tool_id: &str) -> bool {
        let removed = self.local.remove(tool_id).is_some();
        if removed {
            self.analytics.remove(tool_id);
            self.dirty.insert(tool_id.to_owned());
        }
        removed
    }

    /// Marks every tool of `owner` as orphaned at `now_ms` (its connection closed); returns how
    /// many. See the module docs.
    pub fn orphan_owner(&mut self, owner: &str, now_ms: u64) -> usize {
        let mut n = 0;
        for tool in self.local.values_mut() {
            if tool.owner == owner && tool.orphaned_at.is_none() {
                tool.orphaned_at = Some(now_ms);
                self.dirty.insert(tool.id.clone());
                n += 1;
            }
        }
        n
    }

    /// Drops tools orphaned for at least `max_age_ms` at `now_ms`; returns how many.
    pub fn forget_orphans(&mut self, now_ms: u64, max_age_ms: u64) -> usize {
        let old: Vec<String> = self
            .local
            .values()
            .filter(|t| {
                t.orphaned_at
                    .is_some_and(|at| now_ms.saturating_sub(at) >= max_age_ms)
            })
            .map(|t| t.id.clone())
            .collect();
        for id in &old {
            self.unregister(id);
        }
        old.len()
    }

    /// Puts back a stored tool (after a restart) as an orphan since `now_ms` unless it already
    /// was one; its provider must register it again. Ignored when the registry is full.
    pub fn restore_tool(&mut self, mut tool: LocalTool, now_ms: u64) -> bool {
        if self.local.len() >= self.limits.max_local_tools || self.local.contains_key(&tool.id) {
            return false;
        }
        tool.orphaned_at.get_or_insert(now_ms);
        self.local.insert(tool.id.clone(), tool);
        true
    }

    /// The ids of local tools added, changed or removed since the last call (for persistence:
    /// write [`Self::local_tool`] of each, or delete it when absent).
    pub fn take_dirty(&mut self) -> Vec<String> {
        std::mem::take(&mut self.dirty).into_iter().collect()
    }

    /// Local tools with a connected provider.
    fn served(&self) -> impl Iterator<Item = &LocalTool> {
        self.local.values().filter(|t| t.orphaned_at.is_none())
    }

    /// Removes every local tool of `owner` (its connection closed); returns how many.
    pub fn remove_owner(&mut self, owner: &str) -> usize {
        let ids: Vec<String> = self
            .local
            .values()
            .filter(|tool| tool.owner == owner)
            .map(|tool| tool.id.clone())
            .collect();
        for id in &ids {
            self.unregister(id);
        }
        ids.len()
    }

    fn local_record(&self, tool: &LocalTool) -> ToolRecord {
        let analytics = self.analytics.get(&tool.id).copied().unwrap_or_default();
        let (reputation, avg_latency) = if analytics.invocations > 0 {
            (analytics.reputation(), analytics.avg_latency())
        } else {
            (REPUTATION_PRIOR, 0)
        };
        ToolRecord {
            id: tool.id.clone(),
            name: tool.name.clone(),
            peer_id: self.local_peer_id.clone(),
            description: tool.description.clone(),
            capabilities: tool.capabilities.clone(),
            reputation,
            avg_latency,
            schema: tool.schema.clone(),
            price: tool.price,
            source: tool.source.clone(),
        }
    }

    fn remote_record(&self, card: &CapabilityCard, tool: &ToolRecord) -> ToolRecord {
        let mut record = tool.clone();
        record.peer_id.clone_from(&card.peer_id);
        match self.analytics.get(&tool.id) {
            Some(analytics) if analytics.invocations > 0 => {
                record.reputation = analytics.reputation();
                record.avg_latency = analytics.avg_latency();
            }
            _ => record.reputation = tool.reputation.min(card.reputation),
        }
        record
    }

    /// `tool.listRegistered`: the local tools, by id.
    #[must_use]
    pub fn list_registered(&self) -> ToolsResult {
        ToolsResult {
            tools: self.served().map(|tool| self.local_record(tool)).collect(),
        }
    }

    /// Every candidate tool at `now_ms` with its peer's region: local tools, then the tools of
    /// live cards not shadowed by an earlier id.
    fn candidates(&self, now_ms: u64) -> BTreeMap<String, (ToolRecord, Option<String>)> {
        let mut out = BTreeMap::new();
        for tool in self.served() {
            out.insert(
                tool.id.clone(),
                (self.local_record(tool), self.local_geo.clone()),
            );
        }
        for card in self.cards.live_cards(now_ms) {
            if card.peer_id == self.local_peer_id {
                continue;
            }
            for tool in &card.tools {
                out.entry(tool.id.clone())
                    .or_insert_with(|| (self.remote_record(card, tool), card.geo.clone()));
            }
        }
        out
    }

    /// Every tool known at `now_ms`, for the node's directory: the local tools served here
    /// (heard from now), then the tools of live cards not shadowed by an earlier id, each with
    /// when its card's last heartbeat was accepted and whether it is local.
    #[must_use]
    pub fn known_tools(&self, now_ms: u64) -> Vec<(ToolRecord, u64, bool)> {
        self.candidates(now_ms)
            .into_values()
            .map(|(record, _)| {
                let local = record.peer_id == self.local_peer_id;
                let seen = if local {
                    now_ms
                } else {
                    self.cards
                        .entry(&record.peer_id)
                        .map_or(now_ms, |e| e.last_heartbeat_ms)
                };
                (record, seen, local)
            })
            .collect()
    }

    /// `tool.discover`: filtering and ranking (module docs), read-only.
    ///
    /// # Errors
    ///
    /// −32602 for an oversized `query`, a negative or non-finite `maxLatency`, or a non-finite
    /// `minReputation`.
    pub fn discover(&self, params: &DiscoverParams, now_ms: u64) -> Result<ToolsResult, RpcError> {
        if params.query.len() > self.limits.max_query_bytes {
            return Err(to_invalid_params(field_error(
                "query",
                format!("longer than {} bytes", self.limits.max_query_bytes),
            )));
        }
        if params.min_reputation.is_some_and(|r| !r.is_finite()) {
            return Err(to_invalid_params(field_error(
                "minReputation",
                "must be finite",
            )));
        }
        if params
            .max_latency
            .is_some_and(|l| !l.is_finite() || l < 0.0)
        {
            return Err(to_invalid_params(field_error(
                "maxLatency",
                "must be a non-negative number",
            )));
        }
        let query: Vec<String> = tokens(&params.query).collect();
        let required: Vec<String> = params
            .capabilities
            .iter()
            .flatten()
            .map(|c| c.to_ascii_lowercase())
            .collect();
        let mut tools: Vec<ToolRecord> = self
            .candidates(now_ms)
            .into_values()
            .filter(|(record, geo)| {
                #[allow(clippy::cast_precision_loss)]
                let latency = record.avg_latency as f64;
                params
                    .geo
                    .as_ref()
                    .is_none_or(|want| geo.as_ref() == Some(want))
                    && params
                        .min_reputation
                        .is_none_or(|min| record.reputation >= min)
                    && params.max_latency.is_none_or(|max| latency <= max)
                    && required.iter().all(|want| {
                        record
                            .capabilities
                            .iter()
                            .any(|have| have.eq_ignore_ascii_case(want))
                    })
                    && matches_query(&query, record)
            })
            .map(|(record, _)| record)
            .collect();
        tools.sort_by(|a, b| {
            b.reputation
                .total_cmp(&a.reputation)
                .then(a.avg_latency.cmp(&b.avg_latency))
                .then_with(|| a.id.cmp(&b.id))
        });
        tools.truncate(self.limits.max_discover_results);
        Ok(ToolsResult { tools })
    }

    /// Whether `tool_id` is local or advertised by a stored card (live or expired).
    fn is_known(&self, tool_id: &str) -> bool {
        self.local.contains_key(tool_id)
            || self
                .cards
                .entries()
                .any(|entry| entry.card.tools.iter().any(|tool| tool.id == tool_id))
    }

    fn unknown_tool(tool_id: &str) -> RpcError {
        invalid_params(format!("toolId: unknown tool {tool_id:?}"), Some("toolId"))
    }

    /// Resolves where `tool.invoke` must go.
    ///
    /// # Errors
    ///
    /// −32602 naming `toolId` for an empty or unknown id; −32006 "Peer Unavailable" with
    /// `data: {toolId, peerId, reason}` when the tool is only advertised by expired cards.
    pub fn plan_invoke(&self, params: &InvokeParams, now_ms: u64) -> Result<InvokePlan, RpcError> {
        let tool_id = params.tool_id.as_str();
        if tool_id.is_empty() {
            return Err(to_invalid_params(field_error(
                "toolId",
                "must not be empty",
            )));
        }
        if let Some(tool) = self.local.get(tool_id) {
            if tool.orphaned_at.is_some() {
                return Err(
                    RpcError::from_code(RpcCode::PEER_UNAVAILABLE).with_data(json!({
                        "toolId": tool_id,
                        "peerId": self.local_peer_id,
                        "reason": "the tool's provider is not connected",
                    })),
                );
            }
            return Ok(InvokePlan {
                tool_id: tool_id.to_owned(),
                target: InvokeTarget::Local {
                    owner: tool.owner.clone(),
                },
                peer_id: self.local_peer_id.clone(),
                price: tool.price,
                input_schema: crate::tool_input::input_schema(&tool.schema).cloned(),
            });
        }
        let mut expired_owner = None;
        for entry in self.cards.entries() {
            let card = &entry.card;
            if card.peer_id == self.local_peer_id
                || !card.tools.iter().any(|tool| tool.id == tool_id)
            {
                continue;
            }
            if self.cards.is_live(&card.peer_id, now_ms) {
                let record = card.tools.iter().find(|t| t.id == tool_id);
                return Ok(InvokePlan {
                    tool_id: tool_id.to_owned(),
                    target: InvokeTarget::Remote {
                        peer_id: card.peer_id.clone(),
                    },
                    peer_id: card.peer_id.clone(),
                    price: record.and_then(|t| t.price),
                    input_schema: record
                        .and_then(|t| crate::tool_input::input_schema(&t.schema))
                        .cloned(),
                });
            }
            expired_owner.get_or_insert_with(|| card.peer_id.clone());
        }
        match expired_owner {
            Some(peer_id) => Err(
                RpcError::from_code(RpcCode::PEER_UNAVAILABLE).with_data(json!({
                    "toolId": tool_id,
                    "peerId": peer_id,
                    "reason": "capability card expired (no heartbeat for 5 minutes)",
                })),
            ),
            None => Err(Self::unknown_tool(tool_id)),
        }
    }

    /// Records one invocation of a local or advertised tool (the node measured it).
    ///
    /// # Errors
    ///
    /// −32602 naming `toolId` for an unknown tool; −32003 when the analytics table is full of
    /// known tools.
    pub fn record_invocation(
        &mut self,
        tool_id: &str,
        duration_ms: u64,
        success: bool,
    ) -> Result<AnalyticsResult, RpcError> {
        if !self.analytics.contains_key(tool_id) {
            if !self.is_known(tool_id) {
                return Err(Self::unknown_tool(tool_id));
            }
            if self.analytics.len() >= self.limits.max_analytics {
                let stale: Vec<String> = self
                    .analytics
                    .keys()
                    .filter(|id| !self.is_known(id))
                    .cloned()
                    .collect();
                for id in stale {
                    self.analytics.remove(&id);
                }
            }
            if self.analytics.len() >= self.limits.max_analytics {
                return Err(capacity_error(
                    "analytics entries",
                    self.limits.max_analytics,
                ));
            }
        }
        let analytics = self.analytics.entry(tool_id.to_owned()).or_default();
        analytics.record(duration_ms, success);
        Ok(analytics.to_result())
    }

    /// The invocations of all local tools together: the node's own track record, which its
    /// capability card reports as `reputation` and `latency`.
    #[must_use]
    pub fn local_summary(&self) -> Analytics {
        let mut sum = Analytics::default();
        for a in self.local.keys().filter_map(|id| self.analytics.get(id)) {
            sum.invocations = sum.invocations.saturating_add(a.invocations);
            sum.successes = sum.successes.saturating_add(a.successes);
            sum.total_duration_ms = sum.total_duration_ms.saturating_add(a.total_duration_ms);
        }
        sum
    }

    /// The raw analytics of a tool, if any invocation was recorded.
    #[must_use]
    pub fn analytics(&self, tool_id: &str) -> Option<&Analytics> {
        self.analytics.get(tool_id)
    }

    /// `tool.getAnalytics`.
    ///
    /// # Errors
    ///
    /// −32602 naming `toolId` for a tool that is unknown and has no analytics.
    pub fn get_analytics(&self, tool_id: &str) -> Result<AnalyticsResult, RpcError> {
        match self.analytics.get(tool_id) {
            Some(analytics) => Ok(analytics.to_result()),
            None if self.is_known(tool_id) => Ok(Analytics::default().to_result()),
            None => Err(Self::unknown_tool(tool_id)),
        }
    }

    /// This node's capability card for the next heartbeat: the local tools (as
    /// `listRegistered`), this node's region and the given fields.
    #[must_use]
    pub fn local_card(
        &self,
        task_types: Vec<String>,
        reputation: f64,
        latency: u64,
        version: u64,
        updated_at: u64,
    ) -> CapabilityCard {
        CapabilityCard {
            peer_id: self.local_peer_id.clone(),
            tools: self.list_registered().tools,
            task_types,
            reputation,
            geo: self.local_geo.clone(),
            latency,
            version,
            updated_at,
            wallet_address: self.local_wallet.clone(),
        }
    }
}
