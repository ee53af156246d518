//! The Guard primitive (`guard.*`), sans IO: JSON Schema validation, a content safety policy,
//! per-session budgets and sliding-window rate limits.
//!
//! Spec references (the Hyperspace Gossiping Agents Protocol):
//!
//! - §4.2 "Guard Primitive": `guard.validate(data, schema) → { valid, errors? }`,
//!   `guard.checkSafety(content, policy?) → { safe, flags? }`,
//!   `guard.checkBudget(sessionId, estimatedCost) → { allowed, remaining, consumed, limit }`,
//!   `guard.consumeBudget(sessionId, amount, description?) → { remaining }`,
//!   `guard.checkRateLimit(key, limit, window) → { allowed, remaining, resetAt }`,
//!   `guard.getBudgetStatus(sessionId) → { remaining, consumed, limit }`, and the `checkBudget`
//!   example (limit `1.00`).
//! - §8 "Error Codes": −32001 Session Not Found, −32002 Budget Exceeded, −32004 Safety Violation,
//!   −32602 Invalid Params.
//! - §9.3 "Privacy": PII redaction; the safety policy below is what "PII" means here.
//! - §11 Example 3 "Budget Guard with Error": `checkBudget` over budget answers
//!   `{allowed: false, remaining: 0.12, consumed: 0.88, limit: 1.00, reason: "Estimated cost ($5.00)
//!   exceeds remaining budget ($0.12)"}`, and `consumeBudget` over budget is the error
//!   `{"code": -32002, "message": "Budget exceeded", "data": {"remaining": 0.12, "requested": 5.00,
//!   "limit": 1.00}}`. Both are reproduced exactly.
//!
//! # Design
//!
//! [`Guard`] holds plain serde data: a [`Budget`] per session and a [`RateWindow`] per rate-limit
//! key. It reads no clock (`now_ms`, Unix milliseconds, is a parameter) and learns about sessions
//! through [`SessionLookup`]. Mutating calls: `consumeBudget` changes `budgets[sessionId]`,
//! `checkRateLimit` changes `rate_windows[caller, key]`; the node persists those entries (or the whole
//! `Guard`) after them. `validate` and `checkSafety` are pure ([`validate()`], [`check_safety`]) and the
//! only calls that may take long ([`LONG_METHODS`]): a node runs them apart from the task that
//! owns the state, with [`call_stateless`].
//!
//! # The safety policy
//!
//! `checkSafety` runs fixed, deterministic detectors; [`safety`]'s module docs list them, and
//! how `policy` selects among them.
//!
//! # Memory bounds ([`GuardLimits`], defaults)
//!
//! | bound | default | when reached |
//! |---|---|---|
//! | budgets | 1024 | budgets of sessions that no longer exist, then of ended sessions, are dropped; otherwise −32003 |
//! | ledger entries per budget | 32 | the oldest entry is dropped |
//! | `description` | 256 bytes | −32602 |
//! | rate-limit keys (all namespaces together) | 1024 | keys whose window has emptied are dropped, then the least recently used key |
//! | rate-limit `key` | 256 bytes | −32602 |
//! | rate-limit `limit` | 1..=1000 | −32602 (one stored timestamp per allowed request in the window) |
//! | rate-limit `window` | 1..=86 400 000 ms (one day) | −32602 |
//! | `checkSafety` content | 1 MiB of scanned text | −32602 (the scan is linear in it: at worst about 2 s a MiB in a debug build) |
//!
//! # `validate` limits ([`ValidateLimits`], defaults)
//!
//! `guard.validate` refuses, before compiling, calls whose work would be out of bounds; the
//! limits and their reasoning are in [`validate`](mod@validate)'s module docs.
//!
//! # Important discrepancies
//!
//! - **The budget limit comes from `createSession`.** The spec has no method to set a budget; the
//!   SDK's `state.begin({budget:{max}})` puts it at session start. We read
//!   `metadata.budget` (a number or `{"max": number}`, see [`crate::state`]) and otherwise use
//!   [`DEFAULT_BUDGET_LIMIT`] `1.00`, the limit both spec examples show. Amounts are kept exactly
//!   in billionths (`1e-9`) of a unit, so `1.00 − 0.88` is `0.12`, not `0.12000000000000000002`;
//!   amounts are rounded to the nearest billionth.
//! - **`checkBudget` is read-only and reports the current state.** `remaining` and `consumed` do
//!   not include `estimatedCost`: Example 3 answers `remaining 0.12, consumed 0.88` for a 5.00
//!   estimate. The §4.2 example (`estimatedCost 0.02` → `remaining 0.98, consumed 0.02`) is then
//!   the state after an earlier `consumeBudget(0.02)`. `allowed` is
//!   `estimatedCost <= remaining` and the session is active; when not allowed, the extra member
//!   `reason` from Example 3 says why, with amounts as `$X.XX` (more decimals when needed).
//! - **The −32002 message is Example 3's `"Budget exceeded"`**, not the §8 table's
//!   `"Budget Exceeded"`, so the example's error object is reproduced byte for byte; `data` is
//!   `{remaining, requested, limit}` as there (serde_json's `Value` writes the members sorted,
//!   `limit, remaining, requested`; JSON member order is insignificant). Nothing is consumed on
//!   failure.
//! - **Sessions.** Budget methods need an existing session (−32001 otherwise). `checkBudget` and
//!   `getBudgetStatus` work on ended sessions (`checkBudget` answers `allowed: false`,
//!   `reason: "Session has ended"`); `consumeBudget` on an ended session is −32001 with
//!   `"reason": "ended"`. Negative, non-finite or over-1e9 amounts are −32602.
//! - **`checkRateLimit` counts the call.** It is a sliding log: a call is allowed when fewer than
//!   `limit` allowed calls happened in the last `window` **milliseconds** (the spec gives no unit;
//!   milliseconds match `duration`). An allowed call is recorded, a refused one is not. A call at
//!   time `t` stops counting at exactly `t + window`. `resetAt` is Unix **milliseconds** (a number,
//!   not an RFC 3339 string like `createdAt`): when the oldest counted call leaves the window, i.e.
//!   when one more call becomes possible. **Keys are per caller** ([`Caller`]): a session-token
//!   client's keys live in its session's namespace, the API key's and loopback clients' in the
//!   node's, so the same `key` from two sessions counts two windows and no session can use up or
//!   observe another's; a session's windows go when the session is forgotten. Within a namespace one key's
//!   log is judged with whatever `limit`/`window` each call passes. A `now_ms` earlier than the key's last
//!   call is treated as that call's time. A refusal is `{allowed: false}`, not −32003, which the
//!   node keeps for its own transport limits.
//! - **`validate`** first checks the `validate` limits above, then compiles `schema` with
//!   `jsonschema` (Draft 2020-12 unless `$schema` names another draft), **offline**: a `$ref` to
//!   anything not inside the schema (meta-schemas included) is −32602, as is any invalid schema. `format` is **asserted** (e.g. `"format": "email"` fails on `"x"`), unlike the
//!   2020-12 default where it is only an annotation, because a guard that ignores `format`
//!   surprises callers; unknown formats are ignored. `pattern` uses the linear-time `regex`
//!   engine, so look-around patterns are −32602. `errors` (only when invalid) is a list of
//!   `{instancePath, schemaPath, keyword, message}` (the field names Ajv uses).
//! - **`checkSafety` reports, it does not redact**, and it is heuristic: the detectors above are
//!   the whole policy. `flags` is omitted when `safe` is `true`.

use std::collections::BTreeMap;

use schemars::JsonSchema;

use crate::openrpc::{MethodDoc, params_of, result_of};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub mod budget;
pub mod rate;
pub mod safety;
pub mod schema_cost;
pub mod validate;

pub use budget::{Budget, BudgetEntry};
pub use rate::{Caller, RateWindow};
pub use safety::{
    ResolvedPolicy, SafetyFlag, check_safety, check_safety_call, luhn, redact_text, redact_value,
};
pub use schema_cost::{SchemaLimitError, ValidateLimits};
pub use validate::validate;

use crate::jsonrpc::{RpcCode, RpcError};
use crate::params::{check_len, invalid_params, parse_params, to_result};
use crate::state::{
    SessionFacts, SessionIdParams, SessionLookup, make_room, require_active, require_session,
};
use budget::to_nanos;

/// `guard.validate`.
pub const VALIDATE: &str = "guard.validate";
/// `guard.checkSafety`.
pub const CHECK_SAFETY: &str = "guard.checkSafety";
/// `guard.checkBudget`.
pub const CHECK_BUDGET: &str = "guard.checkBudget";
/// `guard.consumeBudget`.
pub const CONSUME_BUDGET: &str = "guard.consumeBudget";
/// `guard.checkRateLimit`.
pub const CHECK_RATE_LIMIT: &str = "guard.checkRateLimit";
/// `guard.getBudgetStatus`.
pub const GET_BUDGET_STATUS: &str = "guard.getBudgetStatus";
/// Every `guard.*` method, in spec order.
pub const METHODS: [&str; 6] = [
    VALIDATE,
    CHECK_SAFETY,
    CHECK_BUDGET,
    CONSUME_BUDGET,
    CHECK_RATE_LIMIT,
    GET_BUDGET_STATUS,
];

/// What each `guard.*` method takes, returns and may fail with ([`crate::openrpc`]).
pub const DOCS: [MethodDoc; 6] = [
    MethodDoc {
        name: VALIDATE,
        summary: "Validates data against a JSON Schema (offline; sizes and costs bounded).",
        params: params_of::<ValidateParams>,
        result: result_of::<ValidateResult>,
        errors: &[RpcCode::RATE_LIMITED],
        example: || json!({"data": {"query": "batteries"}, "schema": {"type": "object", "required": ["query"]}}),
    },
    MethodDoc {
        name: CHECK_SAFETY,
        summary: "Scans content for secrets, personal data and injections.",
        params: params_of::<CheckSafetyParams>,
        result: result_of::<CheckSafetyResult>,
        errors: &[RpcCode::SAFETY_VIOLATION, RpcCode::RATE_LIMITED],
        example: || json!({"content": "Summarise the battery papers", "policy": "default"}),
    },
    MethodDoc {
        name: CHECK_BUDGET,
        summary: "Whether an estimated cost fits the session's remaining budget.",
        params: params_of::<CheckBudgetParams>,
        result: result_of::<CheckBudgetResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210", "estimatedCost": 5.00}),
    },
    MethodDoc {
        name: CONSUME_BUDGET,
        summary: "Spends from the session's budget; −32002 when it would exceed it.",
        params: params_of::<ConsumeBudgetParams>,
        result: result_of::<ConsumeBudgetResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND, RpcCode::BUDGET_EXCEEDED],
        example: || json!({"sessionId": "sess-a8c3f210", "amount": 5.00, "description": "large-model-inference"}),
    },
    MethodDoc {
        name: CHECK_RATE_LIMIT,
        summary: "Takes one call from a named window: allowed, remaining, reset time.",
        params: params_of::<CheckRateLimitParams>,
        result: result_of::<CheckRateLimitResult>,
        errors: &[RpcCode::RATE_LIMITED],
        example: || json!({"key": "web-search", "limit": 10, "window": 60000}),
    },
    MethodDoc {
        name: GET_BUDGET_STATUS,
        summary: "A session's budget: limit, spent, remaining.",
        params: params_of::<GetBudgetStatusParams>,
        result: result_of::<BudgetStatus>,
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210"}),
    },
];

/// The budget limit of a session whose `metadata` sets none (both spec examples show `1.00`).
pub const DEFAULT_BUDGET_LIMIT: f64 = 1.0;
/// The message of the −32002 error, as spec §11 Example 3 writes it.
pub const BUDGET_EXCEEDED_MESSAGE: &str = "Budget exceeded";

// ---------------------------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------------------------

/// Params of `guard.validate(data, schema)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidateParams {
    /// The instance to validate (required; may be `null`).
    pub data: Value,
    /// The JSON Schema.
    pub schema: Value,
}

/// One validation failure, with Ajv's field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaError {
    /// JSON Pointer to the failing part of `data` (`""` for the root).
    pub instance_path: String,
    /// JSON Pointer to the failing keyword in `schema`.
    pub schema_path: String,
    /// The failing keyword (`"type"`, `"required"`, …).
    pub keyword: String,
    /// A human-readable description.
    pub message: String,
}

/// Result of `guard.validate`: `{ valid, errors? }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidateResult {
    /// `data` conforms to `schema`.
    pub valid: bool,
    /// The failures (at most [`ValidateLimits::max_errors`]), only when invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<SchemaError>>,
}

/// The `policy` of `guard.checkSafety`: a selector string or a rules object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SafetyPolicyParam {
    /// `"all"`, `"default"`, `"pii"`, `"secret"`, `"secrets"` or one flag name.
    Selector(String),
    /// `{categories?, ignore?, enforce?}`.
    Rules(SafetyPolicy),
}

/// The rules form of a safety policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SafetyPolicy {
    /// Selectors to look for; everything when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories: Option<Vec<String>>,
    /// Selectors not to look for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<Vec<String>>,
    /// Answer −32004 instead of `{safe: false}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<bool>,
}

/// Params of `guard.checkSafety(content, policy?)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckSafetyParams {
    /// A string or any JSON value (every string, key and number in it is scanned).
    pub content: Value,
    /// What to look for; everything when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<SafetyPolicyParam>,
}

/// Result of `guard.checkSafety`: `{ safe, flags? }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckSafetyResult {
    /// Nothing was found.
    pub safe: bool,
    /// The flag names found, sorted; only when not safe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
}

/// Params of `guard.checkBudget(sessionId, estimatedCost)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckBudgetParams {
    /// The session.
    pub session_id: String,
    /// The cost of the operation about to run.
    pub estimated_cost: f64,
}

/// Result of `guard.checkBudget`: `{ allowed, remaining, consumed, limit, reason? }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckBudgetResult {
    /// `estimatedCost` fits in `remaining` and the session is active.
    pub allowed: bool,
    /// `limit − consumed`.
    pub remaining: f64,
    /// Consumed so far.
    pub consumed: f64,
    /// The session's limit.
    pub limit: f64,
    /// Why not allowed (spec §11 Example 3), only when not allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Params of `guard.consumeBudget(sessionId, amount, description?)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeBudgetParams {
    /// The session.
    pub session_id: String,
    /// The amount to consume.
    pub amount: f64,
    /// What it was for (kept in the budget's ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Result of `guard.consumeBudget`: `{ remaining }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeBudgetResult {
    /// What is left after consuming.
    pub remaining: f64,
}

/// The `data` of the −32002 error (spec §11 Example 3).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetExceededData {
    /// What is left.
    pub remaining: f64,
    /// The refused amount.
    pub requested: f64,
    /// The session's limit.
    pub limit: f64,
}

/// Params of `guard.checkRateLimit(key, limit, window)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckRateLimitParams {
    /// What is limited, within the caller's namespace ([`Caller`]).
    pub key: String,
    /// Calls allowed per window.
    pub limit: u64,
    /// The window, in milliseconds.
    pub window: u64,
}

/// Result of `guard.checkRateLimit`: `{ allowed, remaining, resetAt }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckRateLimitResult {
    /// This call was allowed (and counted).
    pub allowed: bool,
    /// Further calls allowed now.
    pub remaining: u64,
    /// Unix milliseconds at which the oldest counted call leaves the window.
    pub reset_at: u64,
}

/// Params of `guard.getBudgetStatus(sessionId)`.
pub type GetBudgetStatusParams = SessionIdParams;

/// Result of `guard.getBudgetStatus`: `{ remaining, consumed, limit }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetStatus {
    /// `limit − consumed`.
    pub remaining: f64,
    /// Consumed so far.
    pub consumed: f64,
    /// The session's limit.
    pub limit: f64,
}

// ---------------------------------------------------------------------------------------------
// The Guard
// ---------------------------------------------------------------------------------------------

/// The Guard methods that touch no state and may take long: a node runs them apart from the
/// task that owns the state, with [`call_stateless`].
pub const LONG_METHODS: [&str; 2] = [VALIDATE, CHECK_SAFETY];

/// Runs one of the [`LONG_METHODS`] (`guard.validate`, `guard.checkSafety`), which read no state;
/// `None` for any other method.
#[must_use]
pub fn call_stateless(
    method: &str,
    params: &Value,
    limits: &GuardLimits,
) -> Option<Result<Value, RpcError>> {
    let outcome = match method {
        VALIDATE => parse_params::<ValidateParams>(params, &["data", "schema"])
            .and_then(|p| validate(&p.data, &p.schema, &limits.validate))
            .and_then(|r| to_result(&r)),
        CHECK_SAFETY => parse_params(params, &["content", "policy"])
            .and_then(|p| check_safety_call(&p, limits.max_safety_bytes))
            .and_then(|r| to_result(&r)),
        _ => return None,
    };
    Some(outcome)
}

/// Memory bounds and defaults of [`Guard`] (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuardLimits {
    /// Budgets kept.
    pub max_budgets: usize,
    /// Ledger entries kept per budget.
    pub max_ledger_entries: usize,
    /// Bytes of a `description`.
    pub max_description_bytes: usize,
    /// Rate-limit keys kept.
    pub max_rate_keys: usize,
    /// Largest rate-limit `limit`.
    pub max_rate_limit: u64,
    /// Largest rate-limit `window`, in milliseconds.
    pub max_window_ms: u64,
    /// Bytes of a rate-limit `key`.
    pub max_key_bytes: usize,
    /// Limits of `guard.validate`.
    pub validate: ValidateLimits,
    /// Bytes of text `checkSafety` scans.
    pub max_safety_bytes: usize,
    /// The limit of sessions whose metadata sets none.
    pub default_budget_limit: f64,
}

impl Default for GuardLimits {
    fn default() -> Self {
        Self {
            max_budgets: 1024,
            max_ledger_entries: 32,
            max_description_bytes: 256,
            max_rate_keys: 1024,
            max_rate_limit: 1000,
            max_window_ms: 86_400_000,
            max_key_bytes: 256,
            validate: ValidateLimits::default(),
            max_safety_bytes: 1024 * 1024,
            default_budget_limit: DEFAULT_BUDGET_LIMIT,
        }
    }
}

/// The Guard primitive's state machine: budgets by session and rate windows by key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Guard {
    budgets: BTreeMap<String, Budget>,
    rate_windows: BTreeMap<String, RateWindow>,
    #[serde(skip)]
    limits: GuardLimits,
}

impl Guard {
    /// An empty guard with the default limits.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty guard with the given limits.
    #[must_use]
    pub fn with_limits(limits: GuardLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> GuardLimits {
        self.limits
    }

    /// Replaces the limits (after reloading a deserialized guard).
    pub fn set_limits(&mut self, limits: GuardLimits) {
        self.limits = limits;
    }

    /// A session's stored budget (none before its first `consumeBudget`).
    #[must_use]
    pub fn budget(&self, session_id: &str) -> Option<&Budget> {
        self.budgets.get(session_id)
    }

    /// Stores a budget as loaded from disk.
    pub fn insert_budget(&mut self, session_id: impl Into<String>, budget: Budget) {
        self.budgets.insert(session_id.into(), budget);
    }

    /// A rate-limit key's log in the node's namespace ([`Caller::Node`]).
    #[must_use]
    pub fn rate_window(&self, key: &str) -> Option<&RateWindow> {
        self.rate_window_of(Caller::Node, key)
    }

    /// A rate-limit key's log in `caller`'s namespace.
    #[must_use]
    pub fn rate_window_of(&self, caller: Caller<'_>, key: &str) -> Option<&RateWindow> {
        self.rate_windows.get(&caller.stored_key(key))
    }

    /// Stores a rate-limit log (node namespace) as loaded from disk.
    pub fn insert_rate_window(&mut self, key: &str, window: RateWindow) {
        self.rate_windows
            .insert(Caller::Node.stored_key(key), window);
    }

    /// Drops a session's budget and rate-limit windows (the session was evicted or deleted).
    pub fn forget_session(&mut self, session_id: &str) {
        self.budgets.remove(session_id);
        let prefix = Caller::Session(session_id).prefix();
        self.rate_windows.retain(|key, _| !key.starts_with(&prefix));
    }

    /// Dispatches one `guard.*` call from the node's own clients ([`Caller::Node`]); `None`
    /// when `method` is not a Guard method.
    pub fn call(
        &mut self,
        method: &str,
        params: &Value,
        now_ms: u64,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Option<Result<Value, RpcError>> {
        self.call_as(Caller::Node, method, params, now_ms, sessions)
    }

    /// Dispatches one `guard.*` call from `caller`; `None` when `method` is not a Guard method.
    /// The [`LONG_METHODS`] run here too; a node runs them apart instead, with
    /// [`call_stateless`].
    pub fn call_as(
        &mut self,
        caller: Caller<'_>,
        method: &str,
        params: &Value,
        now_ms: u64,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Option<Result<Value, RpcError>> {
        let outcome = match method {
            VALIDATE | CHECK_SAFETY => return call_stateless(method, params, &self.limits),
            CHECK_BUDGET => parse_params(params, &["sessionId", "estimatedCost"])
                .and_then(|p| self.check_budget(&p, sessions))
                .and_then(|r| to_result(&r)),
            CONSUME_BUDGET => parse_params(params, &["sessionId", "amount", "description"])
                .and_then(|p| self.consume_budget(p, now_ms, sessions))
                .and_then(|r| to_result(&r)),
            CHECK_RATE_LIMIT => parse_params(params, &["key", "limit", "window"])
                .and_then(|p| self.check_rate_limit(caller, &p, now_ms))
                .and_then(|r| to_result(&r)),
            GET_BUDGET_STATUS => parse_params::<GetBudgetStatusParams>(params, &["sessionId"])
                .and_then(|p| self.get_budget_status(&p.session_id, sessions))
                .and_then(|r| to_result(&r)),
            _ => return None,
        };
        Some(outcome)
    }

    /// `guard.checkSafety`.
    ///
    /// # Errors
    ///
    /// −32602 for an unknown selector or oversized content; −32004 when the policy enforces and
    /// something is found.
    pub fn check_safety(&self, params: &CheckSafetyParams) -> Result<CheckSafetyResult, RpcError> {
        check_safety_call(params, self.limits.max_safety_bytes)
    }

    fn budget_view(&self, session_id: &str, facts: &SessionFacts) -> Budget {
        self.budgets
            .get(session_id)
            .cloned()
            .unwrap_or_else(|| Budget::for_session(facts, self.limits.default_budget_limit))
    }

    /// `guard.checkBudget` (read-only).
    ///
    /// # Errors
    ///
    /// −32001 for an unknown session; −32602 for a bad `estimatedCost`.
    pub fn check_budget(
        &self,
        params: &CheckBudgetParams,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Result<CheckBudgetResult, RpcError> {
        let cost = to_nanos("estimatedCost", params.estimated_cost)?;
        let facts = require_session(sessions, &params.session_id)?;
        Ok(self
            .budget_view(&params.session_id, &facts)
            .check(cost, facts.active))
    }

    /// `guard.consumeBudget`; takes the params by value to keep `description` without a copy.
    ///
    /// # Errors
    ///
    /// −32001 for an unknown or ended session; −32602 for a bad `amount` or `description`;
    /// −32002 when `amount` exceeds what remains.
    #[allow(clippy::needless_pass_by_value)] // `description` is moved into the ledger
    pub fn consume_budget(
        &mut self,
        params: ConsumeBudgetParams,
        now_ms: u64,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Result<ConsumeBudgetResult, RpcError> {
        let amount = to_nanos("amount", params.amount)?;
        if let Some(description) = &params.description {
            check_len(
                "description",
                description,
                self.limits.max_description_bytes,
            )?;
        }
        let facts = require_active(sessions, &params.session_id)?;
        if !self.budgets.contains_key(&params.session_id) {
            make_room(
                &mut self.budgets,
                self.limits.max_budgets,
                sessions,
                "budgets",
            )?;
            let budget = Budget::for_session(&facts, self.limits.default_budget_limit);
            self.budgets.insert(params.session_id.clone(), budget);
        }
        let max_ledger = self.limits.max_ledger_entries;
        let budget = self
            .budgets
            .get_mut(&params.session_id)
            .ok_or_else(RpcError::internal_error)?;
        budget.consume(amount, params.description, now_ms, max_ledger)
    }

    /// `guard.getBudgetStatus` (read-only).
    ///
    /// # Errors
    ///
    /// −32001 for an unknown session.
    pub fn get_budget_status(
        &self,
        session_id: &str,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Result<BudgetStatus, RpcError> {
        let facts = require_session(sessions, session_id)?;
        Ok(self.budget_view(session_id, &facts).status())
    }

    /// `guard.checkRateLimit` in `caller`'s namespace.
    ///
    /// # Errors
    ///
    /// −32602 for an empty or long key, or a `limit` or `window` out of range.
    pub fn check_rate_limit(
        &mut self,
        caller: Caller<'_>,
        params: &CheckRateLimitParams,
        now_ms: u64,
    ) -> Result<CheckRateLimitResult, RpcError> {
        let limits = self.limits;
        if params.key.is_empty() {
            return Err(invalid_params("key: must not be empty", Some("key")));
        }
        check_len("key", &params.key, limits.max_key_bytes)?;
        if !(1..=limits.max_rate_limit).contains(&params.limit) {
            return Err(invalid_params(
                format!("limit: must be in 1..={}", limits.max_rate_limit),
                Some("limit"),
            ));
        }
        if !(1..=limits.max_window_ms).contains(&params.window) {
            return Err(invalid_params(
                format!(
                    "window: must be in 1..={} milliseconds",
                    limits.max_window_ms
                ),
                Some("window"),
            ));
        }
        let stored = caller.stored_key(&params.key);
        if !self.rate_windows.contains_key(&stored)
            && self.rate_windows.len() >= limits.max_rate_keys
        {
            self.rate_windows
                .retain(|_, window| !window.is_idle(now_ms));
            while self.rate_windows.len() >= limits.max_rate_keys.max(1) {
                let least_recent = self
                    .rate_windows
                    .iter()
                    .min_by_key(|(key, window)| (window.last_seen_ms, (*key).clone()))
                    .map(|(key, _)| key.clone());
                match least_recent {
                    Some(key) => self.rate_windows.remove(&key),
                    None => break,
                };
            }
        }
        Ok(self
            .rate_windows
            .entry(stored)
            .or_default()
            .check(params.limit, params.window, now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_keys_are_per_caller() {
        let mut guard = Guard::new();
        let params = CheckRateLimitParams {
            key: "k".into(),
            limit: 1,
            window: 1000,
        };
        let a = Caller::Session("a");
        assert!(guard.check_rate_limit(a, &params, 0).unwrap().allowed);
        assert!(!guard.check_rate_limit(a, &params, 1).unwrap().allowed);
        // Another session and the node have windows of their own.
        assert!(
            guard
                .check_rate_limit(Caller::Session("b"), &params, 2)
                .unwrap()
                .allowed
        );
        assert!(
            guard
                .check_rate_limit(Caller::Node, &params, 3)
                .unwrap()
                .allowed
        );
        assert!(guard.rate_window("k").is_some());
        // A session id cannot run into the key: ("a:1", "k") is not ("a", "1:k").
        let colon = CheckRateLimitParams {
            key: "1:k".into(),
            ..params.clone()
        };
        assert!(guard.check_rate_limit(a, &colon, 4).unwrap().allowed);
        assert!(
            guard
                .check_rate_limit(Caller::Session("a:1"), &params, 5)
                .unwrap()
                .allowed
        );
        // A session's windows go with it.
        guard.forget_session("a");
        assert!(guard.rate_window_of(a, "k").is_none());
        assert!(guard.rate_window_of(a, "1:k").is_none());
        assert!(guard.rate_window_of(Caller::Session("a:1"), "k").is_some());
        assert!(guard.rate_window_of(Caller::Session("b"), "k").is_some());
    }
}
