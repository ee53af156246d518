//! The State primitive (`state.*`), sans IO: sessions, key/value state and episodes.
//!
//! Spec references (the Hyperspace Gossiping Agents Protocol):
//!
//! - §4.1 "State Primitive": the six methods and their signatures,
//!   `state.createSession(agentName?, agentType?, peerId?, model?, metadata?) → { sessionId, createdAt }`,
//!   `state.getSession(sessionId) → SessionInfo`, `state.setState(sessionId, key, value) → { updated }`,
//!   `state.getState(sessionId, key) → { value }`, `state.endSession(sessionId) → { ended, duration }`,
//!   `state.recordEpisode(sessionId, outcome, reward) → { episodeId }`, with the `createSession` and
//!   `recordEpisode` request/response examples ("reward accepts values from -1.0 to 1.0").
//! - §8 "Error Codes": −32001 "Session Not Found" (invalid session id), −32602 "Invalid Params".
//! - §11 Example 1 "Agent Session Lifecycle": `createSession` → `{sessionId, createdAt}`, and
//!   `endSession` → `{"ended": true, "duration": 3420}` (milliseconds).
//!
//! # Design
//!
//! [`Sessions`] is a store-agnostic state machine: plain serde data ([`Session`] per session) plus
//! the logic of the six methods. It reads no clock (`now_ms`, Unix milliseconds, is a parameter)
//! and makes no ids (they come from an [`IdSource`]). The node persists it (redb) by storing each
//! [`Session`] under its id after a mutating call — `createSession`, `setState`, `endSession` and
//! `recordEpisode` mutate exactly the session they name (`createSession` the one it returns) — and
//! reloads it with [`Sessions::insert`]. Sessions dropped to make room are queued for
//! [`Sessions::take_evicted`] so the node can delete their rows and call
//! [`Guard::forget_session`](crate::guard::Guard::forget_session) and
//! [`Recursive::forget_session`](crate::recursive::Recursive::forget_session).
//!
//! [`Sessions::call`] dispatches a JSON-RPC method by name (`None` when the method is not
//! `state.*`). Params may be an object (the spec's form), an array (positional, in the spec's
//! signature order) or absent; unknown members are ignored; a wrong type or a missing required
//! member is −32602 `"Invalid params: <field>: <reason>"` with `data: {"field": …}`.
//!
//! The [`SessionLookup`] trait is how the Guard and Recursive primitives ask whether a session
//! exists, is still active, and which budget limit / max depth its creator chose. A node chains
//! the three dispatchers:
//!
//! ```
//! use agora_hyperspace::guard::Guard;
//! use agora_hyperspace::jsonrpc::RpcError;
//! use agora_hyperspace::recursive::Recursive;
//! use agora_hyperspace::state::Sessions;
//! use serde_json::json;
//!
//! let (mut sessions, mut guard, mut recursive) = (Sessions::new(), Guard::new(), Recursive::new());
//! let mut ids = || "sess-a8c3f210".to_owned();
//! let now_ms = 1_773_842_400_000; // 2026-03-18T14:00:00Z
//!
//! let params = json!({"agentName": "a"});
//! let created = sessions.call("state.createSession", &params, now_ms, &mut ids);
//! assert_eq!(
//!     created,
//!     Some(Ok(json!({"sessionId": "sess-a8c3f210", "createdAt": "2026-03-18T14:00:00.000Z"})))
//! );
//!
//! let method = "guard.consumeBudget";
//! let params = json!({"sessionId": "sess-a8c3f210", "amount": 0.88});
//! let outcome = sessions
//!     .call(method, &params, now_ms, &mut ids)
//!     .or_else(|| guard.call(method, &params, now_ms, &sessions))
//!     .or_else(|| recursive.call(method, &params, now_ms, &sessions))
//!     .unwrap_or_else(|| Err(RpcError::method_not_found()));
//! assert_eq!(outcome, Ok(json!({"remaining": 0.12})));
//!
//! // After every call: forget what belonged to sessions evicted to make room.
//! for id in sessions.take_evicted() {
//!     guard.forget_session(&id);
//!     recursive.forget_session(&id);
//! }
//! ```
//!
//! # Memory bounds ([`SessionLimits`], defaults)
//!
//! | bound | default | when reached |
//! |---|---|---|
//! | sessions | 1024 | the oldest *ended* session is evicted; if all are active, −32003 "Rate Limited" |
//! | keys per session | 256 | −32602 for a new key (overwriting or deleting keys still works) |
//! | bytes of state per session (key bytes + compact JSON of the value) | 256 KiB | −32602 |
//! | key length | 256 bytes | −32602 |
//! | episodes kept per session | 256 | the oldest is dropped; `episodeCount` keeps counting |
//! | `agentName`, `agentType`, `peerId`, `model`, `outcome`, ids | 256 bytes each | −32602 |
//! | `metadata` (compact JSON) | 16 KiB | −32602 |
//!
//! # Important discrepancies
//!
//! - **`SessionInfo` is not defined by the spec.** We return `sessionId`, the creation fields that
//!   were given (`agentName`, `agentType`, `peerId`, `model`, `metadata`), `createdAt`,
//!   `status` (`"active"` | `"ended"`), `endedAt` and `duration` (ms) once ended, `stateKeys` (the
//!   number of keys), `episodeCount` (all episodes ever recorded) and `episodes` (the kept ones,
//!   oldest first, each `{episodeId, outcome, reward, recordedAt}`).
//! - **Ended sessions are readable, not writable.** `getSession` and `getState` work on an ended
//!   session; `setState` and `recordEpisode` on it are −32001 "Session Not Found" with
//!   `data: {"sessionId": …, "reason": "ended"}` (an unknown id has `"reason": "unknown"`). §8 only
//!   says "invalid session ID"; an ended session is no longer valid for work.
//! - **`endSession` is idempotent.** Ending an ended session answers `{"ended": true}` again with
//!   the *original* `duration`, so a client retrying after a lost reply sees the same answer.
//!   `ended` is therefore always `true`; an unknown id is −32001.
//! - **`duration` is milliseconds** (Example 1: 3420), `endedAt − createdAt`, never negative.
//! - **`createdAt` is RFC 3339 UTC with milliseconds** (`2026-03-18T12:00:00.000Z`, as in §4.1),
//!   formatted from `now_ms` by [`format_timestamp`].
//! - **`sessionId` and `episodeId` are the [`IdSource`]'s strings verbatim** (the spec shows both a
//!   UUID and `sess-a8c3f210`). An empty or already used id is −32603 "Internal Error".
//! - **`setState` with `"value": null` deletes the key.** `getState` answers `{"value": null}` for
//!   a missing key anyway, so the two are indistinguishable to clients, and deleting frees a key
//!   slot. `updated` is `true` on every successful call (errors are JSON-RPC errors).
//! - **`recordEpisode` checks the spec's reward range.** `reward` outside `[-1.0, 1.0]` is −32602;
//!   `outcome` is a free string (the spec's example is `"success"`).
//! - **`metadata` must be an object** (−32602 otherwise). Two members have a meaning, because the
//!   spec gives the Guard no way to set a budget and the Recursive primitive only a per-session
//!   `setMaxDepth`: `metadata.budget` (a number ≥ 0, or `{"max": number}` as the SDK's
//!   `state.begin({budget:{max}})` spells it) is the session's budget limit, and `metadata.maxDepth`
//!   (an integer ≥ 1) its initial max depth. Invalid values are −32602 at creation.
//! - **Capacity is −32003 "Rate Limited"** when every kept session is active: the client should
//!   end sessions or retry later, which is what that code asks for.

use std::collections::{BTreeMap, VecDeque};

use schemars::JsonSchema;

use crate::openrpc::{MethodDoc, params_of, result_of};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::jsonrpc::{RpcCode, RpcError};
use crate::params::{capacity_error, check_len, invalid_params, json_len, parse_params, to_result};
use crate::timestamp::format_timestamp;

/// `state.createSession`.
pub const CREATE_SESSION: &str = "state.createSession";
/// `state.getSession`.
pub const GET_SESSION: &str = "state.getSession";
/// `state.setState`.
pub const SET_STATE: &str = "state.setState";
/// `state.getState`.
pub const GET_STATE: &str = "state.getState";
/// `state.endSession`.
pub const END_SESSION: &str = "state.endSession";
/// `state.recordEpisode`.
pub const RECORD_EPISODE: &str = "state.recordEpisode";
/// Every `state.*` method, in spec order.
pub const METHODS: [&str; 6] = [
    CREATE_SESSION,
    GET_SESSION,
    SET_STATE,
    GET_STATE,
    END_SESSION,
    RECORD_EPISODE,
];

/// What each `state.*` method takes, returns and may fail with ([`crate::openrpc`]).
pub const DOCS: [MethodDoc; 6] = [
    MethodDoc {
        name: CREATE_SESSION,
        summary: "Creates a session for an agent; its metadata may set a budget and a max depth.",
        params: params_of::<CreateSessionParams>,
        result: result_of::<CreateSessionResult>,
        errors: &[RpcCode::RATE_LIMITED],
        example: || json!({"agentName": "research-agent", "agentType": "autonomous", "model": "gemma-3-12b"}),
    },
    MethodDoc {
        name: GET_SESSION,
        summary: "A session: who it is for, its status, state keys and kept episodes.",
        params: params_of::<GetSessionParams>,
        result: result_of::<SessionInfo>,
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210"}),
    },
    MethodDoc {
        name: SET_STATE,
        summary: "Sets one key of a session's state (`null` deletes it).",
        params: params_of::<SetStateParams>,
        result: result_of::<SetStateResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND, RpcCode::RATE_LIMITED],
        example: || json!({"sessionId": "sess-a8c3f210", "key": "goal", "value": "find sources"}),
    },
    MethodDoc {
        name: GET_STATE,
        summary: "Reads one key of a session's state (`null` when missing).",
        params: params_of::<GetStateParams>,
        result: result_of::<GetStateResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210", "key": "goal"}),
    },
    MethodDoc {
        name: END_SESSION,
        summary: "Ends a session (idempotent); its session token stops working.",
        params: params_of::<EndSessionParams>,
        result: result_of::<EndSessionResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210"}),
    },
    MethodDoc {
        name: RECORD_EPISODE,
        summary: "Records an episode's outcome and reward (−1 to 1) in a session.",
        params: params_of::<RecordEpisodeParams>,
        result: result_of::<RecordEpisodeResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210", "outcome": "success", "reward": 0.91}),
    },
];

/// Lowest accepted `reward` (spec §4.1).
pub const MIN_REWARD: f64 = -1.0;
/// Highest accepted `reward` (spec §4.1).
pub const MAX_REWARD: f64 = 1.0;

// ---------------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------------

/// Where session and episode ids come from (the node passes a UUID or random-hex generator).
///
/// Implemented for every `FnMut() -> String` closure.
pub trait IdSource {
    /// A fresh, unique, non-empty id.
    fn next_id(&mut self) -> String;
}

impl<F: FnMut() -> String> IdSource for F {
    fn next_id(&mut self) -> String {
        self()
    }
}

// ---------------------------------------------------------------------------------------------
// Session checks shared by the primitives' dispatchers
// ---------------------------------------------------------------------------------------------

/// −32001 "Session Not Found" with `data: {"sessionId": …, "reason": "unknown" | "ended"}`.
pub(crate) fn session_not_found(session_id: &str, ended: bool) -> RpcError {
    RpcError::session_not_found().with_data(json!({
        "sessionId": session_id,
        "reason": if ended { "ended" } else { "unknown" },
    }))
}

/// The session must exist (reads); −32001 otherwise.
pub(crate) fn require_session(
    sessions: &(impl SessionLookup + ?Sized),
    session_id: &str,
) -> Result<SessionFacts, RpcError> {
    sessions
        .session_facts(session_id)
        .ok_or_else(|| session_not_found(session_id, false))
}

/// The session must exist and be active (writes); −32001 otherwise.
pub(crate) fn require_active(
    sessions: &(impl SessionLookup + ?Sized),
    session_id: &str,
) -> Result<SessionFacts, RpcError> {
    let facts = require_session(sessions, session_id)?;
    if facts.active {
        Ok(facts)
    } else {
        Err(session_not_found(session_id, true))
    }
}

/// Makes room for one more entry in a per-session map: drops entries of sessions that no longer
/// exist, then of ended sessions; −32003 if the map is still full.
pub(crate) fn make_room<V>(
    map: &mut BTreeMap<String, V>,
    max: usize,
    sessions: &(impl SessionLookup + ?Sized),
    what: &str,
) -> Result<(), RpcError> {
    if map.len() < max {
        return Ok(());
    }
    map.retain(|id, _| sessions.session_facts(id).is_some());
    if map.len() >= max {
        map.retain(|id, _| sessions.session_facts(id).is_some_and(|facts| facts.active));
    }
    if map.len() >= max {
        return Err(capacity_error(what, max));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------------------------

/// Params of `state.createSession(agentName?, agentType?, peerId?, model?, metadata?)`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionParams {
    /// The agent's name (`"web-researcher"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// The agent's kind (`"autonomous"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
    /// The agent's peer id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_id: Option<String>,
    /// The model the agent runs (`"gemma-3-27b"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Free-form metadata; `budget` and `maxDepth` have a meaning (see the module docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// Result of `state.createSession`: `{ sessionId, createdAt }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionResult {
    /// The new session's id.
    pub session_id: String,
    /// Creation time, RFC 3339 UTC with milliseconds.
    pub created_at: String,
}

/// Params of the methods that take only a session: `state.getSession(sessionId)`,
/// `state.endSession(sessionId)` (and `guard.getBudgetStatus`, `recursive.getTrace`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionIdParams {
    /// The session.
    pub session_id: String,
}

/// Params of `state.getSession(sessionId)`.
pub type GetSessionParams = SessionIdParams;
/// Params of `state.endSession(sessionId)`.
pub type EndSessionParams = SessionIdParams;

/// Whether a session still accepts work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// Created and not ended.
    Active,
    /// `state.endSession` was called.
    Ended,
}

/// One recorded episode as `state.getSession` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EpisodeInfo {
    /// The episode's id.
    pub episode_id: String,
    /// The outcome given to `recordEpisode`.
    pub outcome: String,
    /// The reward, in `[-1.0, 1.0]`.
    pub reward: f64,
    /// When it was recorded, RFC 3339 UTC with milliseconds.
    pub recorded_at: String,
}

/// What `createSession` was told about the agent; a [`Session`] keeps it and a [`SessionInfo`]
/// shows it, both with these members inline (`#[serde(flatten)]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfo {
    /// As given to `createSession`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// As given to `createSession`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
    /// As given to `createSession`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_id: Option<String>,
    /// As given to `createSession`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// As given to `createSession`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// Result of `state.getSession` (the spec names the type but not its fields; see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session's id.
    pub session_id: String,
    /// Who the session is for, as given to `createSession` (its members inline on the wire).
    #[serde(flatten)]
    pub agent: AgentInfo,
    /// Creation time, RFC 3339 UTC with milliseconds.
    pub created_at: String,
    /// `"active"` or `"ended"`.
    pub status: SessionStatus,
    /// End time, once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Milliseconds from creation to end, once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<u64>,
    /// The number of keys set with `setState`.
    pub state_keys: usize,
    /// Every episode ever recorded, including those no longer kept.
    pub episode_count: u64,
    /// The kept episodes, oldest first.
    pub episodes: Vec<EpisodeInfo>,
}

/// Params of `state.setState(sessionId, key, value)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetStateParams {
    /// The session.
    pub session_id: String,
    /// The key.
    pub key: String,
    /// Any JSON value (required; `null` deletes the key).
    pub value: Value,
}

/// Result of `state.setState`: `{ updated }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetStateResult {
    /// Always `true` on success.
    pub updated: bool,
}

/// Params of `state.getState(sessionId, key)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetStateParams {
    /// The session.
    pub session_id: String,
    /// The key.
    pub key: String,
}

/// Result of `state.getState`: `{ value }`, `null` for a missing key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetStateResult {
    /// The stored value or `null`.
    pub value: Value,
}

/// Result of `state.endSession`: `{ ended, duration }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndSessionResult {
    /// Always `true` (ending twice is idempotent).
    pub ended: bool,
    /// Milliseconds from creation to end.
    pub duration: u64,
}

/// Params of `state.recordEpisode(sessionId, outcome, reward)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordEpisodeParams {
    /// The session.
    pub session_id: String,
    /// The outcome (`"success"`).
    pub outcome: String,
    /// The reward, `-1.0` (worst) to `1.0` (best).
    pub reward: f64,
}

/// Result of `state.recordEpisode`: `{ episodeId }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordEpisodeResult {
    /// The new episode's id.
    pub episode_id: String,
}

// ---------------------------------------------------------------------------------------------
// Stored state
// ---------------------------------------------------------------------------------------------

/// One stored episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Episode {
    /// The episode's id.
    pub episode_id: String,
    /// The outcome.
    pub outcome: String,
    /// The reward.
    pub reward: f64,
    /// Unix milliseconds when recorded.
    pub recorded_at_ms: u64,
}

/// One session: what the node stores per `sessionId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The session's id.
    pub session_id: String,
    /// Who the session is for, as given to `createSession` (its members inline on the wire).
    #[serde(flatten)]
    pub agent: AgentInfo,
    /// Unix milliseconds at creation.
    pub created_at_ms: u64,
    /// Unix milliseconds at `endSession`, once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<u64>,
    /// The key/value state.
    #[serde(default)]
    pub state: BTreeMap<String, Value>,
    /// Bytes accounted to `state` (key bytes plus compact JSON of each value).
    #[serde(default)]
    pub state_bytes: usize,
    /// The kept episodes, oldest first.
    #[serde(default)]
    pub episodes: VecDeque<Episode>,
    /// Every episode ever recorded.
    #[serde(default)]
    pub episode_count: u64,
}

impl Session {
    /// `"active"` or `"ended"`.
    #[must_use]
    pub fn status(&self) -> SessionStatus {
        if self.ended_at_ms.is_some() {
            SessionStatus::Ended
        } else {
            SessionStatus::Active
        }
    }

    /// Milliseconds from creation to end, once ended.
    #[must_use]
    pub fn duration(&self) -> Option<u64> {
        self.ended_at_ms
            .map(|ended| ended.saturating_sub(self.created_at_ms))
    }

    /// What the other primitives need to know about this session.
    #[must_use]
    pub fn facts(&self) -> SessionFacts {
        let metadata = self.agent.metadata.as_ref();
        SessionFacts {
            active: self.ended_at_ms.is_none(),
            budget_limit: metadata
                .and_then(|m| m.get("budget"))
                .and_then(|b| budget_from_metadata(b).ok()),
            max_depth: metadata
                .and_then(|m| m.get("maxDepth"))
                .and_then(|d| max_depth_from_metadata(d).ok()),
        }
    }

    /// The `getSession` view.
    #[must_use]
    pub fn info(&self) -> SessionInfo {
        SessionInfo {
            session_id: self.session_id.clone(),
            agent: self.agent.clone(),
            created_at: format_timestamp(self.created_at_ms),
            status: self.status(),
            ended_at: self.ended_at_ms.map(format_timestamp),
            duration: self.duration(),
            state_keys: self.state.len(),
            episode_count: self.episode_count,
            episodes: self
                .episodes
                .iter()
                .map(|e| EpisodeInfo {
                    episode_id: e.episode_id.clone(),
                    outcome: e.outcome.clone(),
                    reward: e.reward,
                    recorded_at: format_timestamp(e.recorded_at_ms),
                })
                .collect(),
        }
    }
}

/// The largest budget limit `metadata.budget` may set.
pub const MAX_BUDGET_LIMIT: f64 = 1e9;
/// The largest max depth `metadata.maxDepth` (and `recursive.setMaxDepth`) may set.
pub const MAX_MAX_DEPTH: u32 = 10_000;

/// `metadata.budget`: a number, or `{"max": number}`, finite, in `0..=MAX_BUDGET_LIMIT`.
fn budget_from_metadata(value: &Value) -> Result<f64, RpcError> {
    let number = match value {
        Value::Object(object) => object.get("max").and_then(Value::as_f64),
        other => other.as_f64(),
    };
    match number {
        Some(limit) if limit.is_finite() && (0.0..=MAX_BUDGET_LIMIT).contains(&limit) => Ok(limit),
        _ => Err(invalid_params(
            format!(
                "metadata.budget: must be a number in 0..={MAX_BUDGET_LIMIT} or {{\"max\": number}}"
            ),
            Some("metadata.budget"),
        )),
    }
}

/// `metadata.maxDepth`: an integer in `1..=MAX_MAX_DEPTH`.
fn max_depth_from_metadata(value: &Value) -> Result<u32, RpcError> {
    match value.as_u64() {
        Some(depth) if (1..=u64::from(MAX_MAX_DEPTH)).contains(&depth) => {
            u32::try_from(depth).map_err(|_| RpcError::internal_error())
        }
        _ => Err(invalid_params(
            format!("metadata.maxDepth: must be an integer in 1..={MAX_MAX_DEPTH}"),
            Some("metadata.maxDepth"),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Lookup for the other primitives
// ---------------------------------------------------------------------------------------------

/// What the Guard and Recursive primitives need to know about a session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionFacts {
    /// Not ended.
    pub active: bool,
    /// The budget limit chosen at creation (`metadata.budget`), if any.
    pub budget_limit: Option<f64>,
    /// The max depth chosen at creation (`metadata.maxDepth`), if any.
    pub max_depth: Option<u32>,
}

/// Answers whether a session exists; implemented by [`Sessions`], and by the node's own store if
/// it keeps sessions elsewhere.
pub trait SessionLookup {
    /// The session's facts, or `None` when no such session exists.
    fn session_facts(&self, session_id: &str) -> Option<SessionFacts>;
}

// ---------------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------------

/// Memory bounds of [`Sessions`] (see the module docs for what happens when one is reached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions kept.
    pub max_sessions: usize,
    /// Keys per session.
    pub max_keys_per_session: usize,
    /// Bytes of state per session (key bytes plus compact JSON of each value).
    pub max_state_bytes_per_session: usize,
    /// Bytes per key.
    pub max_key_bytes: usize,
    /// Episodes kept per session.
    pub max_episodes_per_session: usize,
    /// Bytes of each short text: `agentName`, `agentType`, `peerId`, `model`, `outcome`, ids.
    pub max_text_bytes: usize,
    /// Bytes of `metadata` as compact JSON.
    pub max_metadata_bytes: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_sessions: 1024,
            max_keys_per_session: 256,
            max_state_bytes_per_session: 256 * 1024,
            max_key_bytes: 256,
            max_episodes_per_session: 256,
            max_text_bytes: 256,
            max_metadata_bytes: 16 * 1024,
        }
    }
}

/// The State primitive's state machine: every session, by id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sessions {
    sessions: BTreeMap<String, Session>,
    #[serde(skip)]
    limits: SessionLimits,
    #[serde(skip)]
    evicted: Vec<String>,
}

impl SessionLookup for Sessions {
    fn session_facts(&self, session_id: &str) -> Option<SessionFacts> {
        self.sessions.get(session_id).map(Session::facts)
    }
}

impl Sessions {
    /// An empty store with the default limits.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with the given limits.
    #[must_use]
    pub fn with_limits(limits: SessionLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// Replaces the limits (after reloading a deserialized store). Existing data over a new
    /// bound is kept; the bound applies to later calls.
    pub fn set_limits(&mut self, limits: SessionLimits) {
        self.limits = limits;
    }

    /// One session.
    #[must_use]
    pub fn session(&self, session_id: &str) -> Option<&Session> {
        self.sessions.get(session_id)
    }

    /// Every session, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Session> {
        self.sessions.values()
    }

    /// The number of sessions kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// No session is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Adds or replaces a session as stored (reloading from disk); no limit is checked.
    pub fn insert(&mut self, session: Session) {
        self.sessions.insert(session.session_id.clone(), session);
    }

    /// Removes a session (the node's data deletion); `None` if unknown.
    pub fn remove(&mut self, session_id: &str) -> Option<Session> {
        self.sessions.remove(session_id)
    }

    /// The ids of sessions evicted to make room since the last call, oldest first.
    pub fn take_evicted(&mut self) -> Vec<String> {
        std::mem::take(&mut self.evicted)
    }

    /// Dispatches one `state.*` call; `None` when `method` is not a State method.
    pub fn call<I: IdSource + ?Sized>(
        &mut self,
        method: &str,
        params: &Value,
        now_ms: u64,
        ids: &mut I,
    ) -> Option<Result<Value, RpcError>> {
        let outcome = match method {
            CREATE_SESSION => parse_params(
                params,
                &["agentName", "agentType", "peerId", "model", "metadata"],
            )
            .and_then(|p| self.create_session(&p, now_ms, ids))
            .and_then(|r| to_result(&r)),
            GET_SESSION => parse_params::<GetSessionParams>(params, &["sessionId"])
                .and_then(|p| self.get_session(&p.session_id))
                .and_then(|r| to_result(&r)),
            SET_STATE => parse_params(params, &["sessionId", "key", "value"])
                .and_then(|p| self.set_state(p))
                .and_then(|r| to_result(&r)),
            GET_STATE => parse_params(params, &["sessionId", "key"])
                .and_then(|p| self.get_state(&p))
                .and_then(|r| to_result(&r)),
            END_SESSION => parse_params::<EndSessionParams>(params, &["sessionId"])
                .and_then(|p| self.end_session(&p.session_id, now_ms))
                .and_then(|r| to_result(&r)),
            RECORD_EPISODE => parse_params(params, &["sessionId", "outcome", "reward"])
                .and_then(|p| self.record_episode(&p, now_ms, ids))
                .and_then(|r| to_result(&r)),
            _ => return None,
        };
        Some(outcome)
    }

    /// `state.createSession`.
    ///
    /// # Errors
    ///
    /// −32602 for an over-long field or invalid `metadata.budget` / `metadata.maxDepth`, −32003
    /// when every kept session is active, −32603 when `ids` returns an empty or used id.
    pub fn create_session<I: IdSource + ?Sized>(
        &mut self,
        params: &CreateSessionParams,
        now_ms: u64,
        ids: &mut I,
    ) -> Result<CreateSessionResult, RpcError> {
        let max = self.limits.max_text_bytes;
        for (field, text) in [
            ("agentName", &params.agent_name),
            ("agentType", &params.agent_type),
            ("peerId", &params.peer_id),
            ("model", &params.model),
        ] {
            if let Some(text) = text {
                check_len(field, text, max)?;
            }
        }
        if let Some(metadata) = &params.metadata {
            if let Some(budget) = metadata.get("budget") {
                budget_from_metadata(budget)?;
            }
            if let Some(depth) = metadata.get("maxDepth") {
                max_depth_from_metadata(depth)?;
            }
            let size: usize = metadata
                .iter()
                .map(|(k, v)| k.len() + json_len(v) + 4)
                .sum::<usize>()
                + 2;
            if size > self.limits.max_metadata_bytes {
                return Err(invalid_params(
                    format!(
                        "metadata: longer than {} bytes",
                        self.limits.max_metadata_bytes
                    ),
                    Some("metadata"),
                ));
            }
        }
        self.make_room()?;
        let session_id = ids.next_id();
        if session_id.is_empty()
            || session_id.len() > max
            || self.sessions.contains_key(&session_id)
        {
            return Err(RpcError::internal_error().with_data(json!(
                "the id source returned an empty, too long or used id"
            )));
        }
        let session = Session {
            session_id: session_id.clone(),
            agent: AgentInfo {
                agent_name: params.agent_name.clone(),
                agent_type: params.agent_type.clone(),
                peer_id: params.peer_id.clone(),
                model: params.model.clone(),
                metadata: params.metadata.clone(),
            },
            created_at_ms: now_ms,
            ended_at_ms: None,
            state: BTreeMap::new(),
            state_bytes: 0,
            episodes: VecDeque::new(),
            episode_count: 0,
        };
        self.sessions.insert(session_id.clone(), session);
        Ok(CreateSessionResult {
            session_id,
            created_at: format_timestamp(now_ms),
        })
    }

    /// Evicts the oldest ended session when the store is full.
    fn make_room(&mut self) -> Result<(), RpcError> {
        while self.sessions.len() >= self.limits.max_sessions {
            let oldest_ended = self
                .sessions
                .values()
                .filter_map(|s| s.ended_at_ms.map(|at| (at, &s.session_id)))
                .min()
                .map(|(_, id)| id.clone());
            let Some(id) = oldest_ended else {
                return Err(capacity_error("active sessions", self.limits.max_sessions));
            };
            self.sessions.remove(&id);
            self.evicted.push(id);
        }
        Ok(())
    }

    fn known(&self, session_id: &str) -> Result<&Session, RpcError> {
        self.sessions
            .get(session_id)
            .ok_or_else(|| session_not_found(session_id, false))
    }

    fn active_mut(&mut self, session_id: &str) -> Result<&mut Session, RpcError> {
        match self.sessions.get_mut(session_id) {
            None => Err(session_not_found(session_id, false)),
            Some(session) if session.ended_at_ms.is_some() => {
                Err(session_not_found(session_id, true))
            }
            Some(session) => Ok(session),
        }
    }

    /// `state.getSession`.
    ///
    /// # Errors
    ///
    /// −32001 for an unknown session.
    pub fn get_session(&self, session_id: &str) -> Result<SessionInfo, RpcError> {
        self.known(session_id).map(Session::info)
    }

    /// `state.setState`; takes the params by value to store `value` without a copy.
    ///
    /// # Errors
    ///
    /// −32001 for an unknown or ended session; −32602 for a key or state over the limits.
    #[allow(clippy::needless_pass_by_value)] // `value` is moved into the store
    pub fn set_state(&mut self, params: SetStateParams) -> Result<SetStateResult, RpcError> {
        let limits = self.limits;
        check_len("key", &params.key, limits.max_key_bytes)?;
        let session = self.active_mut(&params.session_id)?;
        let old_bytes = session
            .state
            .get(&params.key)
            .map_or(0, |old| params.key.len() + json_len(old));
        if params.value.is_null() {
            if session.state.remove(&params.key).is_some() {
                session.state_bytes = session.state_bytes.saturating_sub(old_bytes);
            }
            return Ok(SetStateResult { updated: true });
        }
        if old_bytes == 0 && session.state.len() >= limits.max_keys_per_session {
            return Err(invalid_params(
                format!(
                    "key: the session already has {} keys (the limit)",
                    limits.max_keys_per_session
                ),
                Some("key"),
            ));
        }
        let new_bytes = params.key.len() + json_len(&params.value);
        let total = session.state_bytes.saturating_sub(old_bytes) + new_bytes;
        if total > limits.max_state_bytes_per_session {
            return Err(invalid_params(
                format!(
                    "value: the session's state would exceed {} bytes",
                    limits.max_state_bytes_per_session
                ),
                Some("value"),
            ));
        }
        session.state_bytes = total;
        session.state.insert(params.key, params.value);
        Ok(SetStateResult { updated: true })
    }

    /// `state.getState`: `{"value": null}` for a missing key.
    ///
    /// # Errors
    ///
    /// −32001 for an unknown session (ended sessions are readable).
    pub fn get_state(&self, params: &GetStateParams) -> Result<GetStateResult, RpcError> {
        let session = self.known(&params.session_id)?;
        Ok(GetStateResult {
            value: session
                .state
                .get(&params.key)
                .cloned()
                .unwrap_or(Value::Null),
        })
    }

    /// `state.endSession`: idempotent, the second call answers the original duration.
    ///
    /// # Errors
    ///
    /// −32001 for an unknown session.
    pub fn end_session(
        &mut self,
        session_id: &str,
        now_ms: u64,
    ) -> Result<EndSessionResult, RpcError> {
        let session = self
            .sessions
            .get_mut(session_id)
            .ok_or_else(|| session_not_found(session_id, false))?;
        if session.ended_at_ms.is_none() {
            session.ended_at_ms = Some(now_ms.max(session.created_at_ms));
        }
        Ok(EndSessionResult {
            ended: true,
            duration: session.duration().unwrap_or(0),
        })
    }

    /// `state.recordEpisode`.
    ///
    /// # Errors
    ///
    /// −32001 for an unknown or ended session; −32602 for a reward outside `[-1, 1]` or an
    /// over-long outcome; −32603 when `ids` returns an empty or used id.
    pub fn record_episode<I: IdSource + ?Sized>(
        &mut self,
        params: &RecordEpisodeParams,
        now_ms: u64,
        ids: &mut I,
    ) -> Result<RecordEpisodeResult, RpcError> {
        let limits = self.limits;
        check_len("outcome", &params.outcome, limits.max_text_bytes)?;
        if !(MIN_REWARD..=MAX_REWARD).contains(&params.reward) {
            return Err(invalid_params(
                format!(
                    "reward: {} is outside [{MIN_REWARD:.1}, {MAX_REWARD:.1}]",
                    params.reward
                ),
                Some("reward"),
            ));
        }
        let session = self.active_mut(&params.session_id)?;
        let episode_id = ids.next_id();
        if episode_id.is_empty()
            || episode_id.len() > limits.max_text_bytes
            || session.episodes.iter().any(|e| e.episode_id == episode_id)
        {
            return Err(RpcError::internal_error().with_data(json!(
                "the id source returned an empty, too long or used id"
            )));
        }
        while session.episodes.len() >= limits.max_episodes_per_session.max(1) {
            session.episodes.pop_front();
        }
        session.episodes.push_back(Episode {
            episode_id: episode_id.clone(),
            outcome: params.outcome.clone(),
            reward: params.reward,
            recorded_at_ms: now_ms,
        });
        session.episode_count += 1;
        Ok(RecordEpisodeResult { episode_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::RpcCode;

    /// [`Session`] as it was before [`AgentInfo`] was flattened into it.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct SessionBefore {
        session_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Map<String, Value>>,
        created_at_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ended_at_ms: Option<u64>,
        #[serde(default)]
        state: BTreeMap<String, Value>,
        #[serde(default)]
        state_bytes: usize,
        #[serde(default)]
        episodes: VecDeque<Episode>,
        #[serde(default)]
        episode_count: u64,
    }

    /// [`SessionInfo`] as it was before [`AgentInfo`] was flattened into it.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct SessionInfoBefore {
        session_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metadata: Option<Map<String, Value>>,
        created_at: String,
        status: SessionStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ended_at: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration: Option<u64>,
        state_keys: usize,
        episode_count: u64,
        episodes: Vec<EpisodeInfo>,
    }

    fn before(s: &Session) -> SessionBefore {
        SessionBefore {
            session_id: s.session_id.clone(),
            agent_name: s.agent.agent_name.clone(),
            agent_type: s.agent.agent_type.clone(),
            peer_id: s.agent.peer_id.clone(),
            model: s.agent.model.clone(),
            metadata: s.agent.metadata.clone(),
            created_at_ms: s.created_at_ms,
            ended_at_ms: s.ended_at_ms,
            state: s.state.clone(),
            state_bytes: s.state_bytes,
            episodes: s.episodes.clone(),
            episode_count: s.episode_count,
        }
    }

    fn info_before(i: &SessionInfo) -> SessionInfoBefore {
        SessionInfoBefore {
            session_id: i.session_id.clone(),
            agent_name: i.agent.agent_name.clone(),
            agent_type: i.agent.agent_type.clone(),
            peer_id: i.agent.peer_id.clone(),
            model: i.agent.model.clone(),
            metadata: i.agent.metadata.clone(),
            created_at: i.created_at.clone(),
            status: i.status,
            ended_at: i.ended_at.clone(),
            duration: i.duration,
            state_keys: i.state_keys,
            episode_count: i.episode_count,
            episodes: i.episodes.clone(),
        }
    }

    #[test]
    fn flattened_agent_info_writes_and_reads_the_same_json() {
        let metadata = json!({"budget": {"max": 2.5}, "maxDepth": 7, "big": 18_446_744_073_709_551_615_u64,
            "neg": -3, "f": 0.1, "nested": [null, true, "x", {"é": 1e300}]});
        let full = Session {
            session_id: "sess-1".into(),
            agent: AgentInfo {
                agent_name: Some("web-researcher".into()),
                agent_type: Some("autonomous".into()),
                peer_id: Some("12D3KooWabc".into()),
                model: Some("gemma-3-27b".into()),
                metadata: metadata.as_object().cloned(),
            },
            created_at_ms: 1_773_842_400_000,
            ended_at_ms: Some(1_773_842_460_000),
            state: BTreeMap::from([("k".to_owned(), json!({"v": [1, 2]}))]),
            state_bytes: 12,
            episodes: VecDeque::from([Episode {
                episode_id: "ep-1".into(),
                outcome: "success".into(),
                reward: 0.85,
                recorded_at_ms: 1_773_842_430_000,
            }]),
            episode_count: 3,
        };
        let bare = Session {
            session_id: "sess-2".into(),
            agent: AgentInfo::default(),
            created_at_ms: 0,
            ended_at_ms: None,
            state: BTreeMap::new(),
            state_bytes: 0,
            episodes: VecDeque::new(),
            episode_count: 0,
        };
        let partial = Session {
            agent: AgentInfo {
                model: Some("m".into()),
                ..AgentInfo::default()
            },
            ..bare.clone()
        };
        for session in [full, bare, partial] {
            // Written: the same bytes, compact and pretty.
            let text = serde_json::to_string(&session).unwrap();
            assert_eq!(text, serde_json::to_string(&before(&session)).unwrap());
            assert_eq!(
                serde_json::to_string_pretty(&session).unwrap(),
                serde_json::to_string_pretty(&before(&session)).unwrap()
            );
            let info = session.info();
            let info_text = serde_json::to_string(&info).unwrap();
            assert_eq!(
                info_text,
                serde_json::to_string(&info_before(&info)).unwrap()
            );
            // Read: the same values, from the old form and with unknown members around.
            assert_eq!(serde_json::from_str::<Session>(&text).unwrap(), session);
            assert_eq!(
                before(&serde_json::from_str::<Session>(&text).unwrap()),
                serde_json::from_str::<SessionBefore>(&text).unwrap()
            );
            let mut extra: Value = serde_json::from_str(&text).unwrap();
            extra["unknownMember"] = json!({"x": 1});
            assert_eq!(serde_json::from_value::<Session>(extra).unwrap(), session);
            assert_eq!(
                serde_json::from_str::<SessionInfo>(&info_text).unwrap(),
                info
            );
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc_millis() {
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_timestamp(1_773_842_400_000),
            "2026-03-18T14:00:00.000Z"
        );
        assert_eq!(
            format_timestamp(1_773_835_200_000),
            "2026-03-18T12:00:00.000Z"
        );
        assert_eq!(
            format_timestamp(951_868_799_999),
            "2000-02-29T23:59:59.999Z"
        );
        // Does not panic at the extreme.
        assert!(format_timestamp(u64::MAX).ends_with('Z'));
    }

    #[test]
    fn params_errors_name_the_field() {
        let error = parse_params::<RecordEpisodeParams>(
            &json!({"sessionId": "s", "outcome": "ok", "reward": "high"}),
            &["sessionId", "outcome", "reward"],
        )
        .unwrap_err();
        assert_eq!(error.code, RpcCode::INVALID_PARAMS);
        assert_eq!(
            error.message,
            "Invalid params: reward: value is not of type \"number\""
        );
        assert_eq!(
            error.data,
            Some(json!({"field": "reward", "errors": [
                {"field": "reward", "reason": "value is not of type \"number\""}
            ]}))
        );

        let error = parse_params::<SetStateParams>(
            &json!({"sessionId": "s", "key": "k"}),
            &["sessionId", "key", "value"],
        )
        .unwrap_err();
        assert_eq!(error.message, "Invalid params: value: required");
        assert_eq!(error.data.unwrap()["field"], "value");
    }

    #[test]
    fn positional_and_absent_params() {
        let p: GetStateParams = parse_params(&json!(["s", "k"]), &["sessionId", "key"]).unwrap();
        assert_eq!(p.session_id, "s");
        assert_eq!(p.key, "k");
        let p: CreateSessionParams = parse_params(&Value::Null, &["agentName"]).unwrap();
        assert_eq!(p, CreateSessionParams::default());
        assert!(
            parse_params::<GetStateParams>(&json!(["s", "k", 3]), &["sessionId", "key"]).is_err()
        );
        assert!(parse_params::<GetStateParams>(&json!("s"), &["sessionId", "key"]).is_err());
    }

    #[test]
    fn state_bytes_are_accounted_on_overwrite_and_delete() {
        let mut sessions = Sessions::new();
        let mut ids = || "s".to_owned();
        sessions
            .create_session(&CreateSessionParams::default(), 0, &mut ids)
            .unwrap();
        let set = |sessions: &mut Sessions, value: Value| {
            sessions
                .set_state(SetStateParams {
                    session_id: "s".into(),
                    key: "k".into(),
                    value,
                })
                .unwrap();
        };
        set(&mut sessions, json!("abc"));
        assert_eq!(sessions.session("s").unwrap().state_bytes, 1 + 5);
        set(&mut sessions, json!([1, 2]));
        assert_eq!(sessions.session("s").unwrap().state_bytes, 1 + 5);
        set(&mut sessions, json!(12));
        assert_eq!(sessions.session("s").unwrap().state_bytes, 1 + 2);
        set(&mut sessions, Value::Null);
        assert_eq!(sessions.session("s").unwrap().state_bytes, 0);
        assert!(sessions.session("s").unwrap().state.is_empty());
    }
}
