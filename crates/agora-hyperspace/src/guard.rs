//! The Guard primitive (`guard.*`), sans IO: JSON Schema validation, a content safety policy,
//! per-session budgets and sliding-window rate limits.
//!
//! Spec references (`hyperspace-gossiping-agents-protocol.txt`):
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
//! `Guard`) after them. `validate` and `checkSafety` are pure ([`validate`], [`check_safety`]) and the
//! only calls that may take long ([`LONG_METHODS`]): a node runs them apart from the task that
//! owns the state, with [`call_stateless`].
//!
//! # The safety policy
//!
//! `checkSafety` scans `content` — a string, or any JSON value, in which case every string,
//! object key and number is scanned — with fixed, deterministic detectors (regular expressions
//! from the linear-time `regex` crate plus checksums). A finding is reported as its flag name;
//! `flags` is sorted and has no duplicates; `safe` is `flags` being empty.
//!
//! | flag | finds |
//! |---|---|
//! | `pii.email` | `local@domain.tld` |
//! | `pii.phone` | `+` and 8–15 digits (E.164, separators ` .-()` allowed), or a North American number `(NXX) NXX-XXXX` / `NXX-NXX-XXXX` / `NXX.NXX.XXXX` / `NXX NXX XXXX` with area code and exchange starting 2–9 |
//! | `pii.credit_card` | 13–19 digits (single spaces or dashes between groups) with a card-network prefix (Visa 4, Mastercard 51–55 / 2221–2720, Amex 34/37, Discover 6011/65/644–649, JCB 3528–3589, Diners 300–305/36/38, UnionPay 62) **and** a valid Luhn checksum |
//! | `pii.ssn` | US SSN `AAA-GG-SSSS` with area not 000/666/9xx, group not 00, serial not 0000 |
//! | `pii.iban` | an IBAN (country code, 2 check digits, 11–30 alphanumerics, optional spaces every 4) whose ISO 7064 mod-97 checksum is valid |
//! | `secret.private_key` | a PEM `-----BEGIN … PRIVATE KEY-----` header (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP … BLOCK) |
//! | `secret.aws_access_key` | `AKIA`/`ASIA`/`ABIA`/`ACCA` followed by 16 uppercase alphanumerics |
//! | `secret.bearer_token` | `Bearer ` followed by 20 or more token characters |
//! | `secret.jwt` | a compact JWS `eyJ….eyJ….…` |
//! | `secret.api_key` | a well-known key format (OpenAI `sk-…`, Anthropic `sk-ant-…`, Stripe `sk_live_`/`rk_live_`/`sk_test_`, GitHub `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_`, Slack `xox?-`, Google `AIza…`, GitLab `glpat-`, Hugging Face `hf_`), or an assignment such as `api_key = …`, `access_token: …`, `client_secret=…` whose value has 16+ characters including a letter and a digit |
//! | `secret.password` | an assignment `password = …` / `passwd: …` / `pwd=…` with a value of 6+ characters that is not a mask (`******`) |
//!
//! `policy` is optional and selects what to look for. It is either a string — `"all"` or
//! `"default"` (everything), a category (`"pii"`, `"secret"`/`"secrets"`) or one flag name — or an
//! object `{"categories"?: [..], "ignore"?: [..], "enforce"?: bool}` where `categories` (default:
//! everything) and `ignore` (default: nothing) hold the same selectors. An unknown selector is
//! −32602. With `"enforce": true`, an unsafe result is the error −32004 "Safety Violation" with
//! `data: {"flags": [..]}` instead of `{safe: false}`.
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
//! `guard.validate` is the one Guard call whose work a client controls by more than its size: a
//! 1.4 KB schema can make `jsonschema` apply 2²² subschemas and collect as many errors (issue 16:
//! 23 s and 6.5 GB). [`schema_cost::check`] refuses such calls before compiling: sizes, counts,
//! and an upper bound of the steps the validation can take (its module docs say how it is
//! computed). Every refusal is −32602 `Invalid params: schema: …` (or `data: …`) with
//! `data: {"field": "schema" | "data", "limit": <name>, "max": <limit>}`.
//!
//! | limit (`data.limit`) | default | reasoning |
//! |---|---|---|
//! | `schemaBytes`: `schema`, compact JSON | 64 KiB | tool input schemas are a few KiB; large generated ones (OpenAPI bundles) stay under 50 KiB |
//! | `schemaDepth`: nesting of arrays and objects in `schema` | 64 | about 30 levels of nested subschemas; keeps compiling within any thread's stack |
//! | `subschemas` | 2048 | a 64 KiB schema of small subschemas has about this many |
//! | `refs`: `$ref` + `$dynamicRef` + `$recursiveRef` | 512 | generated schemas use one per property at most |
//! | `patterns`: `pattern` + `patternProperties` keys | 128 | each is compiled (up to the regex limits below); real schemas have a handful |
//! | `patternBytes`: one pattern | 1024 | real patterns (e-mail, dates, ids) are under 200 bytes |
//! | compiled regex / its lazy DFA cache | 256 KiB / 256 KiB | `regex` `size_limit` / `dfa_size_limit`: a larger pattern is −32602 (as an invalid schema); 128 patterns stay under 64 MiB |
//! | `dataBytes`: `data`, compact JSON | 512 KiB | half the JSON-RPC message limit |
//! | `dataDepth`: nesting of arrays and objects in `data` | 64 | |
//! | `unevaluatedWalk`: subschemas walked to compile `unevaluatedProperties`/`unevaluatedItems` | 2048 | `jsonschema` compiles these keywords by walking every subschema they reach in place (`$ref`, `allOf`, `anyOf`, `oneOf`, `if`/`then`/`else`, `dependentSchemas`) once per path, whatever the data: a 14-level doubling chain under one took 13 s to compile; 2048 paths compile in about 40 ms |
//! | `nesting`: subschemas applied within each other | 512 | how deep `jsonschema` recurses: about 1 KiB of stack each, so 0.5 MiB (the worker threads have 8 MiB); a 120-deep array against a 10-step `$ref` chain used to overflow a 2 MiB stack and abort the process |
//! | `steps`: upper bound of the validation and of collecting its errors | 10 000 000 | a step is some 10 ns and at most 6 bytes of error memory (measured): at most about 0.1–0.2 s and 60 MiB; 1,000 records of 10 typed fields take 1.6 million |
//! | errors reported | 32 | the rest are not reported (`valid` is still `false`) |
//! | one error field (`message`, `instancePath`, `schemaPath`) | 256 bytes | cut at a character boundary, `…` appended; a message quoting a huge value is not formatted past it |
//! | all reported errors | 16 KiB | errors past it are not reported (the first one always is) |
//!
//! A reference that leaves the schema (a remote URL or a meta-schema) and references that loop
//! without moving into the data (`a = allOf[b]`, `b = allOf[a]`; JSON Schema leaves them
//! undefined) are −32602 with `data: {"field": "schema"}`, as any invalid schema.
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

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub mod schema_cost;

pub use schema_cost::{SchemaLimitError, ValidateLimits};

use crate::jsonrpc::RpcError;
use crate::state::{
    MAX_BUDGET_LIMIT, SessionFacts, SessionIdParams, SessionLookup, check_len, invalid_params,
    make_room, parse_params, require_active, require_session, to_result,
};

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

/// The budget limit of a session whose `metadata` sets none (both spec examples show `1.00`).
pub const DEFAULT_BUDGET_LIMIT: f64 = 1.0;
/// The message of the −32002 error, as spec §11 Example 3 writes it.
pub const BUDGET_EXCEEDED_MESSAGE: &str = "Budget exceeded";

const NANOS_PER_UNIT: f64 = 1e9;

// ---------------------------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------------------------

/// Params of `guard.validate(data, schema)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidateParams {
    /// The instance to validate (required; may be `null`).
    pub data: Value,
    /// The JSON Schema.
    pub schema: Value,
}

/// One validation failure, with Ajv's field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidateResult {
    /// `data` conforms to `schema`.
    pub valid: bool,
    /// The failures (at most [`ValidateLimits::max_errors`]), only when invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<SchemaError>>,
}

/// The `policy` of `guard.checkSafety`: a selector string or a rules object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SafetyPolicyParam {
    /// `"all"`, `"default"`, `"pii"`, `"secret"`, `"secrets"` or one flag name.
    Selector(String),
    /// `{categories?, ignore?, enforce?}`.
    Rules(SafetyPolicy),
}

/// The rules form of a safety policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckSafetyParams {
    /// A string or any JSON value (every string, key and number in it is scanned).
    pub content: Value,
    /// What to look for; everything when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<SafetyPolicyParam>,
}

/// Result of `guard.checkSafety`: `{ safe, flags? }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckSafetyResult {
    /// Nothing was found.
    pub safe: bool,
    /// The flag names found, sorted; only when not safe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
}

/// Params of `guard.checkBudget(sessionId, estimatedCost)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckBudgetParams {
    /// The session.
    pub session_id: String,
    /// The cost of the operation about to run.
    pub estimated_cost: f64,
}

/// Result of `guard.checkBudget`: `{ allowed, remaining, consumed, limit, reason? }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeBudgetResult {
    /// What is left after consuming.
    pub remaining: f64,
}

/// The `data` of the −32002 error (spec §11 Example 3).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
// Budgets
// ---------------------------------------------------------------------------------------------

/// One consumption, kept for audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetEntry {
    /// The amount, in billionths of a unit.
    pub amount_nanos: u64,
    /// The `description` given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Unix milliseconds.
    pub at_ms: u64,
}

/// One session's budget, in billionths of a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// The limit.
    pub limit_nanos: u64,
    /// Consumed so far.
    pub consumed_nanos: u64,
    /// The most recent consumptions, oldest first.
    #[serde(default)]
    pub ledger: VecDeque<BudgetEntry>,
}

/// Converts an amount to billionths, rejecting negative, non-finite and too large values.
fn to_nanos(field: &str, amount: f64) -> Result<u64, RpcError> {
    if !amount.is_finite() || !(0.0..=MAX_BUDGET_LIMIT).contains(&amount) {
        return Err(invalid_params(
            format!("{field}: must be a finite number in 0..={MAX_BUDGET_LIMIT}"),
            Some(field),
        ));
    }
    // In range by the check above: at most 1e18 < u64::MAX.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok((amount * NANOS_PER_UNIT).round() as u64)
}

/// Billionths to a JSON number (exact for every value with up to 9 decimals).
#[allow(clippy::cast_precision_loss)]
fn from_nanos(nanos: u64) -> f64 {
    nanos as f64 / NANOS_PER_UNIT
}

/// `$5.00`, `$0.12`, `$0.005`: two decimals, more when needed.
fn money(nanos: u64) -> String {
    let whole = nanos / 1_000_000_000;
    let fraction = nanos % 1_000_000_000;
    let mut text = format!("${whole}.{fraction:09}");
    while text.ends_with('0') && text.len() > text.find('.').map_or(0, |dot| dot + 3) {
        text.pop();
    }
    text
}

impl Budget {
    /// A fresh budget with `limit` (clamped to `0..=1e9`).
    #[must_use]
    pub fn new(limit: f64) -> Self {
        Self {
            limit_nanos: to_nanos("limit", limit).unwrap_or(0),
            consumed_nanos: 0,
            ledger: VecDeque::new(),
        }
    }

    fn for_session(facts: &SessionFacts, default_limit: f64) -> Self {
        Self::new(facts.budget_limit.unwrap_or(default_limit))
    }

    /// `limit − consumed` in billionths (never negative).
    #[must_use]
    pub fn remaining_nanos(&self) -> u64 {
        self.limit_nanos.saturating_sub(self.consumed_nanos)
    }

    /// `{remaining, consumed, limit}`.
    #[must_use]
    pub fn status(&self) -> BudgetStatus {
        BudgetStatus {
            remaining: from_nanos(self.remaining_nanos()),
            consumed: from_nanos(self.consumed_nanos),
            limit: from_nanos(self.limit_nanos),
        }
    }

    /// The `checkBudget` answer for a cost, for an active or ended session.
    #[must_use]
    pub fn check(&self, cost_nanos: u64, active: bool) -> CheckBudgetResult {
        let status = self.status();
        let remaining = self.remaining_nanos();
        let reason = if !active {
            Some("Session has ended".to_owned())
        } else if cost_nanos > remaining {
            Some(format!(
                "Estimated cost ({}) exceeds remaining budget ({})",
                money(cost_nanos),
                money(remaining)
            ))
        } else {
            None
        };
        CheckBudgetResult {
            allowed: reason.is_none(),
            remaining: status.remaining,
            consumed: status.consumed,
            limit: status.limit,
            reason,
        }
    }

    /// Consumes `amount_nanos` or refuses with −32002 (nothing is consumed then).
    ///
    /// # Errors
    ///
    /// −32002 "Budget exceeded" with `data: {remaining, requested, limit}`.
    pub fn consume(
        &mut self,
        amount_nanos: u64,
        description: Option<String>,
        now_ms: u64,
        max_ledger: usize,
    ) -> Result<ConsumeBudgetResult, RpcError> {
        let remaining = self.remaining_nanos();
        if amount_nanos > remaining {
            let data = BudgetExceededData {
                remaining: from_nanos(remaining),
                requested: from_nanos(amount_nanos),
                limit: from_nanos(self.limit_nanos),
            };
            return Err(RpcError::budget_exceeded()
                .with_message(BUDGET_EXCEEDED_MESSAGE)
                .with_data(to_result(&data)?));
        }
        self.consumed_nanos += amount_nanos;
        if max_ledger > 0 {
            while self.ledger.len() >= max_ledger {
                self.ledger.pop_front();
            }
            self.ledger.push_back(BudgetEntry {
                amount_nanos,
                description,
                at_ms: now_ms,
            });
        }
        Ok(ConsumeBudgetResult {
            remaining: from_nanos(self.remaining_nanos()),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Rate limits
// ---------------------------------------------------------------------------------------------

/// Who calls `guard.checkRateLimit`: rate-limit keys live in the caller's namespace, so one
/// caller cannot use up (or read) another's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// The node's own clients: the API key or a loopback client without credentials. They share
    /// one namespace.
    Node,
    /// The holder of a session token, by session id: a namespace per session.
    Session(&'a str),
}

impl Caller<'_> {
    /// The stored key of `key` in this namespace: `n:{key}` or `s:{len}:{sessionId}:{key}` (the
    /// length keeps a session id from running into the key).
    fn stored_key(self, key: &str) -> String {
        match self {
            Self::Node => format!("n:{key}"),
            Self::Session(id) => format!("s:{}:{id}:{key}", id.len()),
        }
    }

    /// The prefix of every stored key of this namespace.
    fn prefix(self) -> String {
        self.stored_key("")
    }
}

/// One rate-limit key's sliding log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateWindow {
    /// Unix milliseconds of the allowed calls still in the window, oldest first.
    pub hits: VecDeque<u64>,
    /// The window of the last call, in milliseconds.
    pub window_ms: u64,
    /// Unix milliseconds of the last call (allowed or not).
    pub last_seen_ms: u64,
}

impl RateWindow {
    /// One `checkRateLimit` call at `now_ms`: prune, decide, record if allowed.
    pub fn check(&mut self, limit: u64, window_ms: u64, now_ms: u64) -> CheckRateLimitResult {
        let now = self.hits.back().map_or(now_ms, |&last| now_ms.max(last));
        while let Some(&oldest) = self.hits.front() {
            if oldest.saturating_add(window_ms) <= now {
                self.hits.pop_front();
            } else {
                break;
            }
        }
        let counted = self.hits.len() as u64;
        let allowed = counted < limit;
        if allowed {
            self.hits.push_back(now);
        }
        self.window_ms = window_ms;
        self.last_seen_ms = now;
        CheckRateLimitResult {
            allowed,
            remaining: limit.saturating_sub(self.hits.len() as u64),
            reset_at: self
                .hits
                .front()
                .map_or(now, |&oldest| oldest.saturating_add(window_ms)),
        }
    }

    /// No call of the log counts any more at `now_ms`.
    #[must_use]
    pub fn is_idle(&self, now_ms: u64) -> bool {
        self.hits
            .back()
            .is_none_or(|&last| last.saturating_add(self.window_ms) <= now_ms)
    }
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// `guard.validate`: checks `data` and `schema` against `limits` ([`schema_cost::check`]), then
/// compiles `schema` offline (Draft 2020-12 by default, formats asserted, linear-time patterns of
/// bounded size) and reports at most `limits.max_errors` failures, each field at most
/// `limits.max_error_field_bytes` and all of them at most `limits.max_errors_bytes`.
///
/// # Errors
///
/// −32602 when a limit is exceeded, when `schema` is not a valid schema, or when it references
/// anything outside itself.
pub fn validate(
    data: &Value,
    schema: &Value,
    limits: &ValidateLimits,
) -> Result<ValidateResult, RpcError> {
    schema_cost::check(data, schema, limits)?;
    let patterns = jsonschema::PatternOptions::regex()
        .size_limit(limits.max_regex_bytes)
        .dfa_size_limit(limits.max_regex_cache_bytes);
    let validator = jsonschema::options()
        .offline()
        .should_validate_formats(true)
        .with_pattern_options(patterns)
        .build(schema)
        .map_err(|error| {
            let mut message = String::new();
            bounded_display(&mut message, &error, limits.max_error_field_bytes);
            invalid_params(format!("schema: {message}"), Some("schema"))
        })?;
    if validator.is_valid(data) {
        return Ok(ValidateResult {
            valid: true,
            errors: None,
        });
    }
    let mut errors = Vec::new();
    let mut bytes = 0usize;
    for error in validator.iter_errors(data).take(limits.max_errors) {
        let field = limits.max_error_field_bytes;
        let mut reported = SchemaError {
            instance_path: String::new(),
            schema_path: String::new(),
            keyword: String::new(),
            message: String::new(),
        };
        bounded_display(&mut reported.instance_path, error.instance_path(), field);
        bounded_display(&mut reported.schema_path, error.schema_path(), field);
        bounded_display(&mut reported.keyword, &error.kind().keyword(), field);
        bounded_display(&mut reported.message, &error, field);
        bytes = bytes.saturating_add(
            reported.instance_path.len()
                + reported.schema_path.len()
                + reported.keyword.len()
                + reported.message.len(),
        );
        if bytes > limits.max_errors_bytes && !errors.is_empty() {
            break;
        }
        errors.push(reported);
    }
    Ok(ValidateResult {
        valid: false,
        errors: Some(errors),
    })
}

/// Writes `value` into `out`, stopping at `max` bytes (cut at a character boundary, `…`
/// appended): formatting stops there, so a huge instance quoted in a message costs no more.
fn bounded_display(out: &mut String, value: &impl std::fmt::Display, max: usize) {
    struct Bounded<'a> {
        out: &'a mut String,
        max: usize,
        cut: bool,
    }
    impl std::fmt::Write for Bounded<'_> {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            let room = self.max.saturating_sub(self.out.len());
            if text.len() <= room {
                self.out.push_str(text);
                return Ok(());
            }
            let mut end = room;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            self.out.push_str(&text[..end]);
            self.cut = true;
            Err(std::fmt::Error)
        }
    }
    let mut writer = Bounded {
        out,
        max,
        cut: false,
    };
    let _ = std::fmt::write(&mut writer, format_args!("{value}"));
    if writer.cut {
        writer.out.push('…');
    }
}

// ---------------------------------------------------------------------------------------------
// Safety
// ---------------------------------------------------------------------------------------------

/// One kind of finding of the safety policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SafetyFlag {
    /// `pii.email`.
    PiiEmail,
    /// `pii.phone`.
    PiiPhone,
    /// `pii.credit_card`.
    PiiCreditCard,
    /// `pii.ssn`.
    PiiSsn,
    /// `pii.iban`.
    PiiIban,
    /// `secret.private_key`.
    SecretPrivateKey,
    /// `secret.aws_access_key`.
    SecretAwsAccessKey,
    /// `secret.bearer_token`.
    SecretBearerToken,
    /// `secret.jwt`.
    SecretJwt,
    /// `secret.api_key`.
    SecretApiKey,
    /// `secret.password`.
    SecretPassword,
}

impl SafetyFlag {
    /// Every flag.
    pub const ALL: [Self; 11] = [
        Self::PiiEmail,
        Self::PiiPhone,
        Self::PiiCreditCard,
        Self::PiiSsn,
        Self::PiiIban,
        Self::SecretPrivateKey,
        Self::SecretAwsAccessKey,
        Self::SecretBearerToken,
        Self::SecretJwt,
        Self::SecretApiKey,
        Self::SecretPassword,
    ];

    /// The wire name (`"pii.email"`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PiiEmail => "pii.email",
            Self::PiiPhone => "pii.phone",
            Self::PiiCreditCard => "pii.credit_card",
            Self::PiiSsn => "pii.ssn",
            Self::PiiIban => "pii.iban",
            Self::SecretPrivateKey => "secret.private_key",
            Self::SecretAwsAccessKey => "secret.aws_access_key",
            Self::SecretBearerToken => "secret.bearer_token",
            Self::SecretJwt => "secret.jwt",
            Self::SecretApiKey => "secret.api_key",
            Self::SecretPassword => "secret.password",
        }
    }

    /// `"pii"` or `"secret"`.
    #[must_use]
    pub const fn category(self) -> &'static str {
        match self {
            Self::PiiEmail
            | Self::PiiPhone
            | Self::PiiCreditCard
            | Self::PiiSsn
            | Self::PiiIban => "pii",
            _ => "secret",
        }
    }

    /// The flags a selector names: `"all"`, `"default"`, a category, or one flag name.
    #[must_use]
    pub fn select(selector: &str) -> Option<Vec<Self>> {
        let category = match selector {
            "all" | "default" => return Some(Self::ALL.to_vec()),
            "secrets" => "secret",
            other => other,
        };
        let flags: Vec<Self> = Self::ALL
            .into_iter()
            .filter(|flag| flag.category() == category || flag.as_str() == selector)
            .collect();
        (!flags.is_empty()).then_some(flags)
    }
}

/// A resolved policy: which flags to look for, and whether to fail with −32004.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPolicy {
    /// The flags to look for.
    pub flags: BTreeSet<SafetyFlag>,
    /// Answer −32004 when anything is found.
    pub enforce: bool,
}

impl Default for ResolvedPolicy {
    fn default() -> Self {
        Self {
            flags: SafetyFlag::ALL.into_iter().collect(),
            enforce: false,
        }
    }
}

impl ResolvedPolicy {
    /// Resolves the `policy` param; everything when absent.
    ///
    /// # Errors
    ///
    /// −32602 naming the unknown selector.
    pub fn from_param(param: Option<&SafetyPolicyParam>) -> Result<Self, RpcError> {
        let select = |field: &str, selector: &str| {
            SafetyFlag::select(selector).ok_or_else(|| {
                invalid_params(
                    format!(
                        "{field}: unknown safety selector {selector:?} (use \"all\", \"pii\", \"secret\" or a flag name such as \"pii.email\")"
                    ),
                    Some(field),
                )
            })
        };
        match param {
            None => Ok(Self::default()),
            Some(SafetyPolicyParam::Selector(selector)) => Ok(Self {
                flags: select("policy", selector)?.into_iter().collect(),
                enforce: false,
            }),
            Some(SafetyPolicyParam::Rules(rules)) => {
                let mut flags = BTreeSet::new();
                match &rules.categories {
                    None => flags.extend(SafetyFlag::ALL),
                    Some(selectors) => {
                        for selector in selectors {
                            flags.extend(select("policy.categories", selector)?);
                        }
                    }
                }
                for selector in rules.ignore.iter().flatten() {
                    for flag in select("policy.ignore", selector)? {
                        flags.remove(&flag);
                    }
                }
                Ok(Self {
                    flags,
                    enforce: rules.enforce.unwrap_or(false),
                })
            }
        }
    }
}

struct Detector {
    flag: SafetyFlag,
    regex: Regex,
    /// Decides on the candidate: capture group 1 if the regex has one, else the whole match.
    accept: Accept,
}

/// Decides whether a regex candidate is a finding.
type Accept = fn(&str) -> bool;

const DETECTOR_PATTERNS: &[(SafetyFlag, &str, Accept)] = &[
    (
        SafetyFlag::PiiEmail,
        r"(?i)(?-u:\b)[a-z0-9](?:[a-z0-9._%+-]{0,62}[a-z0-9_%+-])?@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}(?-u:\b)",
        accept_any,
    ),
    (
        SafetyFlag::PiiPhone,
        r"(?:^|[^\w+])(\+\d[\d .()-]{6,22}\d)",
        accept_e164,
    ),
    (
        SafetyFlag::PiiPhone,
        r"(?:^|[^\w+.-])(\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}|\d{3}[ .-]\d{3}[ .-]\d{4})(?-u:\b)",
        accept_nanp,
    ),
    (
        SafetyFlag::PiiCreditCard,
        r"(?-u:\b)\d+(?:[ -]\d+)*(?-u:\b)",
        accept_card_run,
    ),
    (
        SafetyFlag::PiiSsn,
        r"(?-u:\b)\d+(?:[ -]\d+)*(?-u:\b)",
        accept_ssn_run,
    ),
    (
        SafetyFlag::PiiIban,
        r"(?-u:\b)[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?-u:\b)",
        accept_iban,
    ),
    (
        SafetyFlag::SecretPrivateKey,
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
        accept_any,
    ),
    (
        SafetyFlag::SecretAwsAccessKey,
        r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?-u:\b)",
        accept_any,
    ),
    (
        SafetyFlag::SecretBearerToken,
        r"(?i)(?-u:\b)bearer[ \t]+[a-z0-9._~+/-]{20,}=*",
        accept_any,
    ),
    (
        SafetyFlag::SecretJwt,
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
        accept_any,
    ),
    (
        SafetyFlag::SecretApiKey,
        r"(?-u:\b)(?:sk-[A-Za-z0-9]{32,}|sk-(?:proj|svcacct|admin|ant)-[A-Za-z0-9_-]{32,}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|glpat-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,})",
        accept_any,
    ),
    (
        SafetyFlag::SecretApiKey,
        r#"(?i)(?-u:\b)(?:api[_-]?key|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret|private[_-]?token)["']?\s*[:=]\s*["']?([a-z0-9_./+=-]{16,})"#,
        accept_mixed_secret,
    ),
    (
        SafetyFlag::SecretPassword,
        r#"(?i)(?-u:\b)(?:password|passwd|pwd)["']?\s*[:=]\s*["']?([^\s"',;]{6,})"#,
        accept_password,
    ),
];

static DETECTORS: LazyLock<Vec<Detector>> = LazyLock::new(|| {
    DETECTOR_PATTERNS
        .iter()
        .filter_map(|&(flag, pattern, accept)| {
            // Every pattern is a constant checked by a unit test; none fails to compile.
            Regex::new(pattern).ok().map(|regex| Detector {
                flag,
                regex,
                accept,
            })
        })
        .collect()
});

fn accept_any(_: &str) -> bool {
    true
}

fn digits(text: &str) -> Vec<u8> {
    text.bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect()
}

fn accept_e164(candidate: &str) -> bool {
    (8..=15).contains(&digits(candidate).len())
}

fn accept_nanp(candidate: &str) -> bool {
    let d = digits(candidate);
    d.len() == 10 && d[0] >= 2 && d[3] >= 2
}

/// The digit groups of a run like `4111 1111-1111 1111`, each with the separator before it.
fn groups(run: &str) -> Vec<(Option<char>, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut separator = None;
    for (index, ch) in run.char_indices() {
        if ch == ' ' || ch == '-' {
            out.push((separator, &run[start..index]));
            separator = Some(ch);
            start = index + 1;
        }
    }
    out.push((separator, &run[start..]));
    out
}

/// Some contiguous groups of the run hold 13–19 digits with a card prefix and a valid Luhn sum.
/// Linear in the run: from each group, at most the groups that make 19 digits are joined (a run
/// of a million one-digit groups used to be joined from every start to the end), and only from
/// groups that start like a card number.
fn accept_card_run(run: &str) -> bool {
    let groups = groups(run);
    (0..groups.len()).any(|start| {
        // Every card network's numbers start with 2–6.
        if !matches!(groups[start].1.as_bytes().first(), Some(b'2'..=b'6')) {
            return false;
        }
        let mut digits = [0u8; 19];
        let mut len = 0;
        let mut network = None;
        for (_, group) in &groups[start..] {
            for byte in group.bytes() {
                if len == digits.len() || !byte.is_ascii_digit() {
                    return false;
                }
                digits[len] = byte - b'0';
                len += 1;
            }
            if len >= 13
                && *network.get_or_insert_with(|| card_network(&digits))
                && luhn_digits(digits[..len].iter().copied())
            {
                return true;
            }
        }
        false
    })
}

/// Digits (values 0–9, at least 4) that start with a card network's prefix.
fn card_network(digits: &[u8]) -> bool {
    let prefix = |n: usize| {
        digits
            .iter()
            .take(n)
            .fold(0u32, |acc, d| acc * 10 + u32::from(*d))
    };
    digits.first() == Some(&4)
        || (51..=55).contains(&prefix(2))
        || (2221..=2720).contains(&prefix(4))
        || matches!(prefix(2), 34 | 37 | 36 | 38 | 65 | 62)
        || prefix(4) == 6011
        || (644..=649).contains(&prefix(3))
        || (3528..=3589).contains(&prefix(4))
        || (300..=305).contains(&prefix(3))
}

/// The Luhn (mod 10) checksum of a digit string.
#[must_use]
pub fn luhn(number: &str) -> bool {
    !number.is_empty() && luhn_digits(number.bytes().filter(u8::is_ascii_digit).map(|b| b - b'0'))
}

/// The Luhn checksum of digit values, most significant first.
fn luhn_digits(digits: impl DoubleEndedIterator<Item = u8>) -> bool {
    let mut sum = 0u32;
    for (index, digit) in digits.rev().enumerate() {
        let mut value = u32::from(digit);
        if index % 2 == 1 {
            value *= 2;
            if value > 9 {
                value -= 9;
            }
        }
        sum += value;
    }
    sum.is_multiple_of(10)
}

/// Three consecutive dash-separated groups of the run are a valid `AAA-GG-SSSS`.
fn accept_ssn_run(run: &str) -> bool {
    let groups = groups(run);
    groups.windows(3).any(|w| {
        let [(_, area), (sep1, group), (sep2, serial)] = w else {
            return false;
        };
        *sep1 == Some('-')
            && *sep2 == Some('-')
            && area.len() == 3
            && group.len() == 2
            && serial.len() == 4
            && *area != "000"
            && *area != "666"
            && !area.starts_with('9')
            && *group != "00"
            && *serial != "0000"
    })
}

/// ISO 13616 length and ISO 7064 mod-97-10 checksum.
fn accept_iban(candidate: &str) -> bool {
    let compact: Vec<u8> = candidate.bytes().filter(|b| *b != b' ').collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder = 0u32;
    for &byte in tail.iter().chain(head) {
        let value = match byte {
            b'0'..=b'9' => u32::from(byte - b'0'),
            b'A'..=b'Z' => u32::from(byte - b'A') + 10,
            _ => return false,
        };
        remainder = if value >= 10 {
            (remainder * 100 + value) % 97
        } else {
            (remainder * 10 + value) % 97
        };
    }
    remainder == 1
}

fn accept_mixed_secret(value: &str) -> bool {
    value.bytes().any(|b| b.is_ascii_digit()) && value.bytes().any(|b| b.is_ascii_alphabetic())
}

fn accept_password(value: &str) -> bool {
    !value
        .bytes()
        .all(|b| b == b'*' || b == b'x' || b == b'X' || b == b'.')
}

/// The flags of `policy` found in `text`, added to `found`.
fn scan_text(text: &str, policy: &ResolvedPolicy, found: &mut BTreeSet<SafetyFlag>) {
    for detector in DETECTORS.iter() {
        if found.contains(&detector.flag) || !policy.flags.contains(&detector.flag) {
            continue;
        }
        let hit = detector.regex.captures_iter(text).any(|captures| {
            captures
                .get(1)
                .or_else(|| captures.get(0))
                .is_some_and(|m| (detector.accept)(m.as_str()))
        });
        if hit {
            found.insert(detector.flag);
        }
    }
}

/// `text` with every finding of the safety detectors (all of [`SafetyFlag::ALL`]) replaced by
/// `[REDACTED:{flag}]`, and the flags found, sorted. Overlapping findings are replaced once, as
/// one span. Used for what leaves the node (shared trajectories, spec §9.3).
#[must_use]
pub fn redact_text(text: &str) -> (String, Vec<SafetyFlag>) {
    let mut spans: Vec<(usize, usize, SafetyFlag)> = Vec::new();
    for detector in DETECTORS.iter() {
        for captures in detector.regex.captures_iter(text) {
            if let Some(m) = captures.get(1).or_else(|| captures.get(0))
                && (detector.accept)(m.as_str())
            {
                spans.push((m.start(), m.end(), detector.flag));
            }
        }
    }
    if spans.is_empty() {
        return (text.to_owned(), Vec::new());
    }
    spans.sort_unstable();
    let mut flags = BTreeSet::new();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut i = 0;
    while i < spans.len() {
        let (start, mut end, flag) = spans[i];
        flags.insert(flag);
        let mut j = i + 1;
        while j < spans.len() && spans[j].0 < end {
            end = end.max(spans[j].1);
            flags.insert(spans[j].2);
            j += 1;
        }
        if start >= at {
            out.push_str(&text[at..start]);
            out.push_str("[REDACTED:");
            out.push_str(flag.as_str());
            out.push(']');
            at = end;
        }
        i = j;
    }
    out.push_str(&text[at..]);
    (out, flags.into_iter().collect())
}

/// [`redact_text`] over every string and number of `value` (a number that is a finding becomes
/// the redaction text); the flags found, sorted and without repeats, are added to `flags`.
#[must_use]
pub fn redact_value(value: &Value, flags: &mut BTreeSet<SafetyFlag>) -> Value {
    match value {
        Value::String(text) => {
            let (clean, found) = redact_text(text);
            flags.extend(found);
            Value::String(clean)
        }
        Value::Number(n) => {
            let text = n.to_string();
            let (clean, found) = redact_text(&text);
            if found.is_empty() {
                value.clone()
            } else {
                flags.extend(found);
                Value::String(clean)
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| redact_value(v, flags)).collect()),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), redact_value(v, flags)))
                .collect(),
        ),
        Value::Null | Value::Bool(_) => value.clone(),
    }
}

/// Collects every string, object key and number in `content`; `false` once more than `budget`
/// bytes would be collected.
fn collect_texts<'a>(content: &'a Value, out: &mut Vec<Cow<'a, str>>, budget: &mut usize) -> bool {
    fn push<'a>(text: Cow<'a, str>, out: &mut Vec<Cow<'a, str>>, budget: &mut usize) -> bool {
        if text.len() > *budget {
            return false;
        }
        *budget -= text.len();
        out.push(text);
        true
    }
    match content {
        Value::String(text) => push(Cow::Borrowed(text), out, budget),
        Value::Number(number) => push(Cow::Owned(number.to_string()), out, budget),
        Value::Array(items) => items.iter().all(|item| collect_texts(item, out, budget)),
        Value::Object(members) => members.iter().all(|(key, value)| {
            push(Cow::Borrowed(key), out, budget) && collect_texts(value, out, budget)
        }),
        Value::Null | Value::Bool(_) => true,
    }
}

/// `guard.checkSafety` without enforcement: the sorted flags of `policy` found in `content`.
///
/// # Errors
///
/// −32602 when `content` holds more than `max_bytes` of text.
pub fn check_safety(
    content: &Value,
    policy: &ResolvedPolicy,
    max_bytes: usize,
) -> Result<Vec<SafetyFlag>, RpcError> {
    let mut texts = Vec::new();
    let mut budget = max_bytes;
    if !collect_texts(content, &mut texts, &mut budget) {
        return Err(invalid_params(
            format!("content: more than {max_bytes} bytes of text"),
            Some("content"),
        ));
    }
    let mut found = BTreeSet::new();
    for text in &texts {
        scan_text(text, policy, &mut found);
    }
    Ok(found.into_iter().collect())
}

/// `guard.checkSafety` with content of at most `max_bytes` of text.
///
/// # Errors
///
/// −32602 for an unknown selector or oversized content; −32004 when the policy enforces and
/// something is found.
pub fn check_safety_call(
    params: &CheckSafetyParams,
    max_bytes: usize,
) -> Result<CheckSafetyResult, RpcError> {
    let policy = ResolvedPolicy::from_param(params.policy.as_ref())?;
    let flags: Vec<String> = check_safety(&params.content, &policy, max_bytes)?
        .into_iter()
        .map(|flag| flag.as_str().to_owned())
        .collect();
    if flags.is_empty() {
        return Ok(CheckSafetyResult {
            safe: true,
            flags: None,
        });
    }
    if policy.enforce {
        return Err(RpcError::safety_violation().with_data(json!({ "flags": flags })));
    }
    Ok(CheckSafetyResult {
        safe: false,
        flags: Some(flags),
    })
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
    fn every_detector_compiles() {
        assert_eq!(DETECTORS.len(), DETECTOR_PATTERNS.len());
    }

    #[test]
    fn money_formats_like_example_3() {
        assert_eq!(money(5_000_000_000), "$5.00");
        assert_eq!(money(120_000_000), "$0.12");
        assert_eq!(money(5_000_000), "$0.005");
        assert_eq!(money(0), "$0.00");
        assert_eq!(money(1), "$0.000000001");
    }

    #[test]
    fn nanos_are_exact() {
        assert_eq!(to_nanos("a", 0.88).unwrap(), 880_000_000);
        assert_eq!(from_nanos(1_000_000_000 - 880_000_000), 0.12);
        assert!(to_nanos("a", -0.01).is_err());
        assert!(to_nanos("a", f64::NAN).is_err());
        assert!(to_nanos("a", f64::INFINITY).is_err());
        assert!(to_nanos("a", 2e9).is_err());
    }

    #[test]
    fn luhn_and_iban_checksums() {
        assert!(luhn("4111111111111111"));
        assert!(!luhn("4111111111111112"));
        assert!(accept_iban("DE89 3704 0044 0532 0130 00"));
        assert!(accept_iban("GB82WEST12345698765432"));
        assert!(!accept_iban("GB82WEST12345698765433"));
    }

    #[test]
    fn groups_keep_their_separators() {
        assert_eq!(
            groups("123-45 6789"),
            vec![(None, "123"), (Some('-'), "45"), (Some(' '), "6789")]
        );
    }

    #[test]
    fn card_runs_are_scanned_in_linear_time() {
        // 200,000 one-digit groups: joined from every start to the end, this took minutes.
        // Seventeen 4s pass the Luhn check, so a run of 4s is a card; a run of 1s is not, and
        // every start of a run of 5s (Mastercard's 55) is tried at every length from 13 to 19
        // without passing it: the worst case.
        for (digit, card) in [("1", false), ("4", true), ("5", false)] {
            let run = format!("{digit} ").repeat(200_000);
            assert_eq!(accept_card_run(&run), card);
            let flags = check_safety(&json!(run), &ResolvedPolicy::default(), 2 << 20).unwrap();
            assert_eq!(flags.contains(&SafetyFlag::PiiCreditCard), card);
        }
        // Still found at the end of a long run.
        let tail = format!("{}4111 1111 1111 1111", "1 ".repeat(1000));
        assert!(accept_card_run(&tail));
    }

    #[test]
    fn validation_errors_are_bounded_in_count_and_bytes() {
        let long = "é".repeat(2000);
        let data = Value::Array((0..100).map(|_| json!(long)).collect());
        let schema = json!({"items": {"type": "integer"}});
        let limits = ValidateLimits::default();
        let result = validate(&data, &schema, &limits).unwrap();
        let errors = result.errors.unwrap();
        let size = |e: &SchemaError| {
            e.message.len() + e.instance_path.len() + e.schema_path.len() + e.keyword.len()
        };
        assert!(!errors.is_empty() && errors.len() <= limits.max_errors);
        for error in &errors {
            // 256 bytes at most, then `…`.
            assert!(
                error.message.len() <= limits.max_error_field_bytes + 3,
                "{error:?}"
            );
            assert!(error.message.ends_with('…'));
        }
        assert!(errors.iter().map(size).sum::<usize>() <= limits.max_errors_bytes);
        // A tighter byte limit reports fewer errors, but always the first.
        let tight = ValidateLimits {
            max_errors_bytes: 700,
            ..limits
        };
        let errors = validate(&data, &schema, &tight).unwrap().errors.unwrap();
        assert_eq!(errors.len(), 2);
        assert!(errors.iter().map(size).sum::<usize>() <= 700);
        let none = ValidateLimits {
            max_errors_bytes: 0,
            ..limits
        };
        assert_eq!(
            validate(&data, &schema, &none)
                .unwrap()
                .errors
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn validate_refuses_what_is_over_a_limit_as_invalid_params() {
        let mut defs = serde_json::Map::new();
        defs.insert("a0".into(), json!({"type": "integer"}));
        for i in 1..=22 {
            let below = format!("#/$defs/a{}", i - 1);
            defs.insert(
                format!("a{i}"),
                json!({"anyOf": [{"$ref": below}, {"$ref": below}]}),
            );
        }
        let schema = json!({"$defs": defs, "$ref": "#/$defs/a22"});
        let error = validate(&json!("x"), &schema, &ValidateLimits::default()).unwrap_err();
        assert_eq!(error.code, RpcError::invalid_params().code);
        assert!(error.message.contains("steps"), "{}", error.message);
        let huge = json!({"pattern": "a".repeat(2000)});
        let error = validate(&json!("x"), &huge, &ValidateLimits::default()).unwrap_err();
        assert_eq!(
            error.data,
            Some(json!({"field": "schema", "limit": "patternBytes", "max": 1024}))
        );
        // A pattern over the compiled-size limit is an invalid schema.
        let big = json!({"pattern": "[^x]{1000}"});
        let error = validate(&json!("x"), &big, &ValidateLimits::default()).unwrap_err();
        assert_eq!(error.data, Some(json!({"field": "schema"})));
    }

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

    #[test]
    fn rate_window_clock_going_back_is_clamped() {
        let mut window = RateWindow::default();
        assert!(window.check(2, 100, 1000).allowed);
        let second = window.check(2, 100, 900);
        assert!(second.allowed);
        assert_eq!(window.hits, VecDeque::from([1000, 1000]));
        assert_eq!(second.reset_at, 1100);
    }

    #[test]
    fn redaction_replaces_every_finding_and_keeps_the_rest() {
        let (clean, flags) = redact_text(
            "mail ana@agents.localhost, key sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD, card 4111 1111 1111 1111.",
        );
        assert_eq!(
            clean,
            "mail [REDACTED:pii.email], key [REDACTED:secret.api_key], card [REDACTED:pii.credit_card]."
        );
        assert_eq!(
            flags,
            vec![
                SafetyFlag::PiiEmail,
                SafetyFlag::PiiCreditCard,
                SafetyFlag::SecretApiKey
            ]
        );
        assert_eq!(redact_text("nothing here"), ("nothing here".into(), vec![]));
        let mut found = BTreeSet::new();
        let v = redact_value(
            &json!({"to": ["x@mail.localhost"], "n": 4_111_111_111_111_111_u64, "ok": 3}),
            &mut found,
        );
        assert_eq!(
            v,
            json!({"to": ["[REDACTED:pii.email]"], "n": "[REDACTED:pii.credit_card]", "ok": 3})
        );
        assert_eq!(found.len(), 2);
    }
}
