//! The State, Guard and Recursive primitives: wire types against the spec's example JSON, spec
//! §11 Examples 1 and 3 over real JSON-RPC frames, every error code path, the safety policy,
//! sliding-window boundaries, loop detection, memory bounds, persistence, and properties.
// Test helpers take `json!` literals by value for readability.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

use std::collections::{BTreeSet, VecDeque};

use agora_hyperspace::guard::{
    self, BudgetStatus, CheckBudgetParams, CheckBudgetResult, CheckRateLimitParams,
    CheckRateLimitResult, CheckSafetyParams, CheckSafetyResult, ConsumeBudgetParams,
    ConsumeBudgetResult, Guard, GuardLimits, ResolvedPolicy, SafetyFlag, ValidateParams,
    ValidateResult,
};
use agora_hyperspace::jsonrpc::{RpcCode, RpcError, handle_frame};
use agora_hyperspace::recursive::{
    self, AnalyzeParams, AnalyzeResult, Recommendation, Recursive, RecursiveLimits,
    SetMaxDepthParams, SetMaxDepthResult, TraceResult, TrackParams, TrackResult, analyze,
    shortest_suffix_cycle,
};
use agora_hyperspace::state::{
    self, CreateSessionParams, CreateSessionResult, EndSessionResult, GetStateParams,
    GetStateResult, RecordEpisodeParams, RecordEpisodeResult, SessionIdParams, SessionInfo,
    SessionLimits, SessionStatus, Sessions, SetStateParams, SetStateResult,
};
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// A minimal node: the three primitives behind one dispatcher
// ---------------------------------------------------------------------------------------------

/// 2026-03-18T14:00:00.000Z, the time of spec Example 1.
const T0: u64 = 1_773_842_400_000;

struct Node {
    sessions: Sessions,
    guard: Guard,
    recursive: Recursive,
    ids: VecDeque<String>,
    counter: u64,
}

impl Node {
    fn new() -> Self {
        Self::with(Sessions::new(), Guard::new(), Recursive::new())
    }

    fn with(sessions: Sessions, guard: Guard, recursive: Recursive) -> Self {
        Self {
            sessions,
            guard,
            recursive,
            ids: VecDeque::new(),
            counter: 0,
        }
    }

    /// Queues ids for the next createSession / recordEpisode calls.
    fn next_ids(&mut self, ids: &[&str]) {
        self.ids.extend(ids.iter().map(|s| (*s).to_owned()));
    }

    fn call(&mut self, method: &str, params: &Value, now_ms: u64) -> Result<Value, RpcError> {
        let Self { ids, counter, .. } = self;
        let mut source = || {
            ids.pop_front().unwrap_or_else(|| {
                *counter += 1;
                format!("id-{counter}")
            })
        };
        let outcome = self
            .sessions
            .call(method, params, now_ms, &mut source)
            .or_else(|| self.guard.call(method, params, now_ms, &self.sessions))
            .or_else(|| self.recursive.call(method, params, now_ms, &self.sessions))
            .unwrap_or_else(|| Err(RpcError::method_not_found()));
        for evicted in self.sessions.take_evicted() {
            self.guard.forget_session(&evicted);
            self.recursive.forget_session(&evicted);
        }
        outcome
    }

    fn ok(&mut self, method: &str, params: Value, now_ms: u64) -> Value {
        self.call(method, &params, now_ms)
            .unwrap_or_else(|e| panic!("{method} {params}: {e:?}"))
    }

    fn err(&mut self, method: &str, params: Value, now_ms: u64) -> RpcError {
        match self.call(method, &params, now_ms) {
            Ok(value) => panic!("{method} {params}: expected an error, got {value}"),
            Err(error) => error,
        }
    }

    /// One JSON-RPC text frame in, the parsed reply out.
    fn frame(&mut self, text: &str, now_ms: u64) -> Value {
        let reply = handle_frame(text, |request| {
            let params = request.params.clone().unwrap_or(Value::Null);
            self.call(&request.method, &params, now_ms)
        })
        .expect("a reply");
        serde_json::from_str(&reply).unwrap()
    }

    fn session(&mut self, id: &str, metadata: Value) -> String {
        self.next_ids(&[id]);
        let result = self.ok(
            state::CREATE_SESSION,
            json!({"agentName": "t", "metadata": metadata}),
            T0,
        );
        result["sessionId"].as_str().unwrap().to_owned()
    }
}

fn assert_code(error: &RpcError, code: RpcCode) {
    assert_eq!(error.code, code, "{error:?}");
}

fn round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug + PartialEq>(wire: &Value) -> T {
    let typed: T = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(&serde_json::to_value(&typed).unwrap(), wire);
    let again: T = serde_json::from_value(serde_json::to_value(&typed).unwrap()).unwrap();
    assert_eq!(again, typed);
    typed
}

// ---------------------------------------------------------------------------------------------
// Wire types against the spec's JSON
// ---------------------------------------------------------------------------------------------

#[test]
fn state_types_round_trip_the_spec_examples() {
    // §4.1 state.createSession request and response.
    let params: CreateSessionParams = round_trip(&json!({
        "agentName": "web-researcher",
        "agentType": "autonomous",
        "model": "gemma-3-27b",
        "metadata": { "task": "market-analysis" }
    }));
    assert_eq!(params.agent_name.as_deref(), Some("web-researcher"));
    assert_eq!(params.peer_id, None);
    let result: CreateSessionResult = round_trip(&json!({
        "sessionId": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
        "createdAt": "2026-03-18T12:00:00.000Z"
    }));
    assert_eq!(result.created_at, "2026-03-18T12:00:00.000Z");
    // §11 Example 1: createSession without metadata, endSession.
    round_trip::<CreateSessionParams>(&json!({
        "agentName": "research-agent", "agentType": "autonomous", "model": "gemma-3-12b"
    }));
    round_trip::<CreateSessionParams>(&json!({}));
    round_trip::<SessionIdParams>(&json!({ "sessionId": "sess-a8c3f210" }));
    let ended: EndSessionResult = round_trip(&json!({ "ended": true, "duration": 3420 }));
    assert_eq!(ended.duration, 3420);
    // §4.1 state.recordEpisode request.
    let episode: RecordEpisodeParams = round_trip(&json!({
        "sessionId": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
        "outcome": "success",
        "reward": 0.85
    }));
    assert_eq!(episode.reward, 0.85);
    round_trip::<RecordEpisodeResult>(&json!({ "episodeId": "ep-1" }));
    round_trip::<SetStateParams>(
        &json!({ "sessionId": "s", "key": "k", "value": {"a": [1, null]} }),
    );
    round_trip::<SetStateResult>(&json!({ "updated": true }));
    round_trip::<GetStateParams>(&json!({ "sessionId": "s", "key": "k" }));
    round_trip::<GetStateResult>(&json!({ "value": null }));
    round_trip::<GetStateResult>(&json!({ "value": [1, "two"] }));
    let info: SessionInfo = round_trip(&json!({
        "sessionId": "s",
        "agentName": "a",
        "createdAt": "2026-03-18T14:00:00.000Z",
        "status": "ended",
        "endedAt": "2026-03-18T14:00:03.420Z",
        "duration": 3420,
        "stateKeys": 2,
        "episodeCount": 1,
        "episodes": [{"episodeId": "e", "outcome": "success", "reward": 0.5,
                      "recordedAt": "2026-03-18T14:00:01.000Z"}]
    }));
    assert_eq!(info.status, SessionStatus::Ended);
}

#[test]
fn unknown_members_are_ignored_and_required_ones_are_required() {
    let params: SessionIdParams =
        serde_json::from_value(json!({ "sessionId": "s", "extra": 1 })).unwrap();
    assert_eq!(params.session_id, "s");
    assert!(
        serde_json::from_value::<SetStateParams>(json!({ "sessionId": "s", "key": "k" })).is_err()
    );
    assert!(serde_json::from_value::<ValidateParams>(json!({ "schema": {} })).is_err());
    // `data: null` is present, not missing.
    let params: ValidateParams =
        serde_json::from_value(json!({ "data": null, "schema": {} })).unwrap();
    assert_eq!(params.data, Value::Null);
}

#[test]
fn guard_types_round_trip_the_spec_examples() {
    // §4.2 guard.checkBudget request and response.
    let params: CheckBudgetParams = round_trip(&json!({
        "sessionId": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
        "estimatedCost": 0.02
    }));
    assert_eq!(params.estimated_cost, 0.02);
    round_trip::<CheckBudgetResult>(&json!({
        "allowed": true, "remaining": 0.98, "consumed": 0.02, "limit": 1.00
    }));
    // §11 Example 3.
    let refused: CheckBudgetResult = round_trip(&json!({
        "allowed": false,
        "remaining": 0.12,
        "consumed": 0.88,
        "limit": 1.00,
        "reason": "Estimated cost ($5.00) exceeds remaining budget ($0.12)"
    }));
    assert!(!refused.allowed);
    let consume: ConsumeBudgetParams = round_trip(&json!({
        "sessionId": "sess-a8c3f210", "amount": 5.00, "description": "large-model-inference"
    }));
    assert_eq!(
        consume.description.as_deref(),
        Some("large-model-inference")
    );
    round_trip::<ConsumeBudgetParams>(&json!({ "sessionId": "s", "amount": 0.5 }));
    round_trip::<ConsumeBudgetResult>(&json!({ "remaining": 0.5 }));
    round_trip::<guard::BudgetExceededData>(&json!({
        "remaining": 0.12, "requested": 5.00, "limit": 1.00
    }));
    round_trip::<BudgetStatus>(&json!({ "remaining": 0.12, "consumed": 0.88, "limit": 1.00 }));
    round_trip::<CheckRateLimitParams>(&json!({ "key": "k", "limit": 10, "window": 60000 }));
    round_trip::<CheckRateLimitResult>(&json!({
        "allowed": true, "remaining": 9, "resetAt": 1_773_842_460_000_u64
    }));
    round_trip::<ValidateParams>(&json!({ "data": {"a": 1}, "schema": {"type": "object"} }));
    round_trip::<ValidateResult>(&json!({ "valid": true }));
    round_trip::<ValidateResult>(&json!({
        "valid": false,
        "errors": [{"instancePath": "/a", "schemaPath": "/properties/a/type",
                    "keyword": "type", "message": "1 is not of type \"string\""}]
    }));
    round_trip::<CheckSafetyParams>(&json!({ "content": "hello" }));
    round_trip::<CheckSafetyParams>(&json!({ "content": "hello", "policy": "pii" }));
    round_trip::<CheckSafetyParams>(&json!({
        "content": {"a": "b"}, "policy": {"categories": ["secret"], "ignore": ["secret.jwt"], "enforce": true}
    }));
    round_trip::<CheckSafetyResult>(&json!({ "safe": true }));
    round_trip::<CheckSafetyResult>(&json!({ "safe": false, "flags": ["pii.email"] }));
}

#[test]
fn recursive_types_round_trip_the_spec_example() {
    // §4.5 recursive.analyze request and response.
    let params: AnalyzeParams = round_trip(&json!({
        "sessionId": "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
        "currentStep": "refine-search-query",
        "callStack": [
            "plan-research", "web-search", "analyze-results", "refine-search-query",
            "web-search", "analyze-results", "refine-search-query"
        ],
        "maxIterations": 10
    }));
    assert_eq!(params.max_iterations, Some(10));
    let result: AnalyzeResult = round_trip(&json!({
        "isLooping": true,
        "pattern": "refine-search-query -> web-search -> analyze-results",
        "iterations": 3,
        "depth": 7,
        "recommendation": "warn"
    }));
    assert_eq!(result.recommendation, Recommendation::Warn);
    round_trip::<AnalyzeResult>(&json!({
        "isLooping": false, "iterations": 0, "depth": 1, "recommendation": "continue"
    }));
    round_trip::<TrackParams>(&json!({ "sessionId": "s", "step": "a", "depth": 2 }));
    round_trip::<TrackResult>(&json!({ "tracked": true, "depth": 2 }));
    round_trip::<TraceResult>(&json!({
        "steps": [{"step": "a", "depth": 0, "timestamp": 5}], "maxDepth": 32, "totalIterations": 1
    }));
    round_trip::<SetMaxDepthParams>(&json!({ "sessionId": "s", "maxDepth": 5 }));
    round_trip::<SetMaxDepthResult>(&json!({ "updated": true }));
}

// ---------------------------------------------------------------------------------------------
// Spec §11 Example 1 and Example 3 over JSON-RPC frames
// ---------------------------------------------------------------------------------------------

#[test]
fn example_1_session_lifecycle() {
    let mut node = Node::new();
    node.next_ids(&["sess-a8c3f210"]);
    let reply = node.frame(
        r#"{"jsonrpc":"2.0","method":"state.createSession","params":{"agentName":"research-agent","agentType":"autonomous","model":"gemma-3-12b"},"id":1}"#,
        T0,
    );
    assert_eq!(
        reply,
        json!({
            "jsonrpc": "2.0",
            "result": { "sessionId": "sess-a8c3f210", "createdAt": "2026-03-18T14:00:00.000Z" },
            "id": 1
        })
    );
    // Steps 2–4 belong to tool.* and improving.*, which these primitives do not answer.
    let reply = node.frame(
        r#"{"jsonrpc":"2.0","method":"tool.discover","params":{"query":"web search","minReputation":0.8},"id":2}"#,
        T0 + 100,
    );
    assert_eq!(reply["error"]["code"], -32601);
    // End session.
    let reply = node.frame(
        r#"{"jsonrpc":"2.0","method":"state.endSession","params":{"sessionId":"sess-a8c3f210"},"id":5}"#,
        T0 + 3420,
    );
    assert_eq!(
        reply,
        json!({ "jsonrpc": "2.0", "result": { "ended": true, "duration": 3420 }, "id": 5 })
    );
    let info = node.ok(
        state::GET_SESSION,
        json!({"sessionId": "sess-a8c3f210"}),
        T0 + 5000,
    );
    assert_eq!(
        info,
        json!({
            "sessionId": "sess-a8c3f210",
            "agentName": "research-agent",
            "agentType": "autonomous",
            "model": "gemma-3-12b",
            "createdAt": "2026-03-18T14:00:00.000Z",
            "status": "ended",
            "endedAt": "2026-03-18T14:00:03.420Z",
            "duration": 3420,
            "stateKeys": 0,
            "episodeCount": 0,
            "episodes": []
        })
    );
}

#[test]
fn example_3_budget_guard_with_error() {
    let mut node = Node::new();
    let id = node.session("sess-a8c3f210", json!({}));
    assert_eq!(
        node.ok(
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": 0.88}),
            T0 + 1
        ),
        json!({ "remaining": 0.12 })
    );
    let reply = node.frame(
        r#"{"jsonrpc":"2.0","method":"guard.checkBudget","params":{"sessionId":"sess-a8c3f210","estimatedCost":5.00},"id":11}"#,
        T0 + 2,
    );
    assert_eq!(
        reply,
        json!({
            "jsonrpc": "2.0",
            "result": {
                "allowed": false,
                "remaining": 0.12,
                "consumed": 0.88,
                "limit": 1.00,
                "reason": "Estimated cost ($5.00) exceeds remaining budget ($0.12)"
            },
            "id": 11
        })
    );
    let frame = r#"{"jsonrpc":"2.0","method":"guard.consumeBudget","params":{"sessionId":"sess-a8c3f210","amount":5.00,"description":"large-model-inference"},"id":12}"#;
    let reply = node.frame(frame, T0 + 3);
    assert_eq!(
        reply,
        json!({
            "jsonrpc": "2.0",
            "error": {
                "code": -32002,
                "message": "Budget exceeded",
                "data": { "remaining": 0.12, "requested": 5.00, "limit": 1.00 }
            },
            "id": 12
        })
    );
    // The bytes: the same members; `data`'s members come out sorted because serde_json's `Value`
    // (without `preserve_order`) keeps objects sorted. Member order is insignificant in JSON.
    let text = handle_frame(frame, |request| {
        node.call(&request.method, request.params.as_ref().unwrap(), T0 + 4)
    })
    .unwrap();
    assert_eq!(
        text,
        r#"{"jsonrpc":"2.0","id":12,"error":{"code":-32002,"message":"Budget exceeded","data":{"limit":1.0,"remaining":0.12,"requested":5.0}}}"#
    );
    // Nothing was consumed by the refusals.
    assert_eq!(
        node.ok(guard::GET_BUDGET_STATUS, json!({"sessionId": id}), T0 + 5),
        json!({ "remaining": 0.12, "consumed": 0.88, "limit": 1.0 })
    );
}

#[test]
fn section_4_2_check_budget_example() {
    let mut node = Node::new();
    let id = node.session("a1b2c3d4-e5f6-7890-abcd-ef1234567890", json!({}));
    node.ok(
        guard::CONSUME_BUDGET,
        json!({"sessionId": id, "amount": 0.02}),
        T0,
    );
    let reply = node.frame(
        r#"{"jsonrpc":"2.0","method":"guard.checkBudget","params":{"sessionId":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","estimatedCost":0.02},"id":3}"#,
        T0,
    );
    assert_eq!(
        reply,
        json!({
            "jsonrpc": "2.0",
            "result": { "allowed": true, "remaining": 0.98, "consumed": 0.02, "limit": 1.00 },
            "id": 3
        })
    );
}

#[test]
fn section_4_5_analyze_example() {
    let mut node = Node::new();
    node.session("a1b2c3d4-e5f6-7890-abcd-ef1234567890", json!({}));
    let reply = node.frame(
        r#"{"jsonrpc":"2.0","method":"recursive.analyze","params":{"sessionId":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","currentStep":"refine-search-query","callStack":["plan-research","web-search","analyze-results","refine-search-query","web-search","analyze-results","refine-search-query"],"maxIterations":10},"id":6}"#,
        T0,
    );
    assert_eq!(
        reply,
        json!({
            "jsonrpc": "2.0",
            "result": {
                "isLooping": true,
                "pattern": "refine-search-query -> web-search -> analyze-results",
                "iterations": 3,
                "depth": 7,
                "recommendation": "warn"
            },
            "id": 6
        })
    );
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

#[test]
fn state_keys_values_and_episodes() {
    let mut node = Node::new();
    let id = node.session("s1", json!({"task": "x"}));
    let set = |node: &mut Node, key: &str, value: Value| {
        node.ok(
            state::SET_STATE,
            json!({"sessionId": "s1", "key": key, "value": value}),
            T0,
        )
    };
    assert_eq!(
        set(&mut node, "plan", json!({"steps": [1, 2]})),
        json!({"updated": true})
    );
    assert_eq!(set(&mut node, "n", json!(3)), json!({"updated": true}));
    assert_eq!(
        node.ok(
            state::GET_STATE,
            json!({"sessionId": id, "key": "plan"}),
            T0
        ),
        json!({"value": {"steps": [1, 2]}})
    );
    // A missing key is `{ "value": null }`, and null deletes.
    assert_eq!(
        node.ok(
            state::GET_STATE,
            json!({"sessionId": id, "key": "nope"}),
            T0
        ),
        json!({"value": null})
    );
    set(&mut node, "n", Value::Null);
    assert_eq!(
        node.ok(state::GET_STATE, json!({"sessionId": id, "key": "n"}), T0),
        json!({"value": null})
    );
    // Positional params in signature order.
    assert_eq!(
        node.ok(state::GET_STATE, json!(["s1", "plan"]), T0),
        json!({"value": {"steps": [1, 2]}})
    );
    node.next_ids(&["ep-1", "ep-2"]);
    assert_eq!(
        node.ok(
            state::RECORD_EPISODE,
            json!({"sessionId": id, "outcome": "success", "reward": 0.85}),
            T0 + 1000
        ),
        json!({"episodeId": "ep-1"})
    );
    node.ok(
        state::RECORD_EPISODE,
        json!({"sessionId": id, "outcome": "failure", "reward": -1.0}),
        T0 + 2000,
    );
    let info = node.ok(state::GET_SESSION, json!({"sessionId": id}), T0 + 3000);
    assert_eq!(info["status"], "active");
    assert_eq!(info["stateKeys"], 1);
    assert_eq!(info["episodeCount"], 2);
    assert_eq!(info["metadata"], json!({"task": "x"}));
    assert_eq!(
        info["episodes"][0],
        json!({"episodeId": "ep-1", "outcome": "success", "reward": 0.85,
               "recordedAt": "2026-03-18T14:00:01.000Z"})
    );
    assert!(info.get("duration").is_none() && info.get("endedAt").is_none());
}

#[test]
fn ended_sessions_are_readable_not_writable_and_end_is_idempotent() {
    let mut node = Node::new();
    let id = node.session("s1", json!({}));
    node.ok(
        state::SET_STATE,
        json!({"sessionId": id, "key": "k", "value": 1}),
        T0,
    );
    assert_eq!(
        node.ok(state::END_SESSION, json!({"sessionId": id}), T0 + 500),
        json!({"ended": true, "duration": 500})
    );
    assert_eq!(
        node.ok(state::END_SESSION, json!({"sessionId": id}), T0 + 9999),
        json!({"ended": true, "duration": 500})
    );
    assert_eq!(
        node.ok(state::GET_STATE, json!({"sessionId": id, "key": "k"}), T0),
        json!({"value": 1})
    );
    let ended = json!({"sessionId": "s1", "reason": "ended"});
    for (method, params) in [
        (
            state::SET_STATE,
            json!({"sessionId": id, "key": "k", "value": 2}),
        ),
        (
            state::RECORD_EPISODE,
            json!({"sessionId": id, "outcome": "success", "reward": 1}),
        ),
        (
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": 0.1}),
        ),
        (
            recursive::TRACK,
            json!({"sessionId": id, "step": "a", "depth": 1}),
        ),
        (
            recursive::SET_MAX_DEPTH,
            json!({"sessionId": id, "maxDepth": 3}),
        ),
    ] {
        let error = node.err(method, params, T0 + 600);
        assert_code(&error, RpcCode::SESSION_NOT_FOUND);
        assert_eq!(error.message, "Session Not Found");
        assert_eq!(error.data.as_ref(), Some(&ended), "{method}");
    }
    // Reads still work.
    let check = node.ok(
        guard::CHECK_BUDGET,
        json!({"sessionId": id, "estimatedCost": 0.1}),
        T0,
    );
    assert_eq!(
        check,
        json!({"allowed": false, "remaining": 1.0, "consumed": 0.0, "limit": 1.0,
               "reason": "Session has ended"})
    );
    node.ok(guard::GET_BUDGET_STATUS, json!({"sessionId": id}), T0);
    node.ok(recursive::GET_TRACE, json!({"sessionId": id}), T0);
    node.ok(
        recursive::ANALYZE,
        json!({"sessionId": id, "currentStep": "a", "callStack": []}),
        T0,
    );
}

#[test]
fn unknown_sessions_are_32001_for_every_session_method() {
    let mut node = Node::new();
    let unknown = json!({"sessionId": "nope", "reason": "unknown"});
    for (method, params) in [
        (state::GET_SESSION, json!({"sessionId": "nope"})),
        (
            state::SET_STATE,
            json!({"sessionId": "nope", "key": "k", "value": 1}),
        ),
        (state::GET_STATE, json!({"sessionId": "nope", "key": "k"})),
        (state::END_SESSION, json!({"sessionId": "nope"})),
        (
            state::RECORD_EPISODE,
            json!({"sessionId": "nope", "outcome": "x", "reward": 0}),
        ),
        (
            guard::CHECK_BUDGET,
            json!({"sessionId": "nope", "estimatedCost": 1}),
        ),
        (
            guard::CONSUME_BUDGET,
            json!({"sessionId": "nope", "amount": 1}),
        ),
        (guard::GET_BUDGET_STATUS, json!({"sessionId": "nope"})),
        (
            recursive::ANALYZE,
            json!({"sessionId": "nope", "currentStep": "a", "callStack": ["a"]}),
        ),
        (
            recursive::TRACK,
            json!({"sessionId": "nope", "step": "a", "depth": 0}),
        ),
        (recursive::GET_TRACE, json!({"sessionId": "nope"})),
        (
            recursive::SET_MAX_DEPTH,
            json!({"sessionId": "nope", "maxDepth": 2}),
        ),
    ] {
        let error = node.err(method, params, T0);
        assert_code(&error, RpcCode::SESSION_NOT_FOUND);
        assert_eq!(error.data.as_ref(), Some(&unknown), "{method}");
    }
}

#[test]
fn invalid_params_name_the_field() {
    let mut node = Node::new();
    let id = node.session("s1", json!({}));
    let cases = [
        (state::GET_SESSION, json!({}), "sessionId"),
        (
            state::SET_STATE,
            json!({"sessionId": id, "key": "k"}),
            "value",
        ),
        (
            state::SET_STATE,
            json!({"sessionId": id, "key": 5, "value": 1}),
            "key",
        ),
        (
            state::RECORD_EPISODE,
            json!({"sessionId": id, "reward": 0.5}),
            "outcome",
        ),
        (
            state::RECORD_EPISODE,
            json!({"sessionId": id, "outcome": "x", "reward": 1.5}),
            "reward",
        ),
        (
            state::RECORD_EPISODE,
            json!({"sessionId": id, "outcome": "x", "reward": "high"}),
            "reward",
        ),
        (
            state::CREATE_SESSION,
            json!({"metadata": "not an object"}),
            "metadata",
        ),
        (
            state::CREATE_SESSION,
            json!({"metadata": {"budget": -1}}),
            "metadata.budget",
        ),
        (
            state::CREATE_SESSION,
            json!({"metadata": {"budget": {"max": "lots"}}}),
            "metadata.budget",
        ),
        (
            state::CREATE_SESSION,
            json!({"metadata": {"maxDepth": 0}}),
            "metadata.maxDepth",
        ),
        (
            state::CREATE_SESSION,
            json!({"agentName": "x".repeat(300)}),
            "agentName",
        ),
        (guard::VALIDATE, json!({"schema": {}}), "data"),
        (
            guard::VALIDATE,
            json!({"data": 1, "schema": {"type": 5}}),
            "schema",
        ),
        (
            guard::CHECK_BUDGET,
            json!({"sessionId": id, "estimatedCost": -0.01}),
            "estimatedCost",
        ),
        (
            guard::CHECK_BUDGET,
            json!({"sessionId": id, "estimatedCost": "5"}),
            "estimatedCost",
        ),
        (
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": -1}),
            "amount",
        ),
        (
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": 1e300}),
            "amount",
        ),
        (
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": null}),
            "amount",
        ),
        (
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": 0.1, "description": "d".repeat(300)}),
            "description",
        ),
        (
            guard::CHECK_RATE_LIMIT,
            json!({"key": "k", "limit": 0, "window": 10}),
            "limit",
        ),
        (
            guard::CHECK_RATE_LIMIT,
            json!({"key": "k", "limit": 2.5, "window": 10}),
            "limit",
        ),
        (
            guard::CHECK_RATE_LIMIT,
            json!({"key": "k", "limit": 1, "window": 0}),
            "window",
        ),
        (
            guard::CHECK_RATE_LIMIT,
            json!({"key": "", "limit": 1, "window": 1}),
            "key",
        ),
        (guard::CHECK_SAFETY, json!({}), "content"),
        (
            guard::CHECK_SAFETY,
            json!({"content": "x", "policy": "bogus"}),
            "policy",
        ),
        (
            guard::CHECK_SAFETY,
            json!({"content": "x", "policy": {"categories": ["pii", "nope"]}}),
            "policy.categories",
        ),
        (
            recursive::ANALYZE,
            json!({"sessionId": id, "currentStep": "a", "callStack": "a"}),
            "callStack",
        ),
        (
            recursive::ANALYZE,
            json!({"sessionId": id, "currentStep": "a", "callStack": [], "maxIterations": 0}),
            "maxIterations",
        ),
        (
            recursive::TRACK,
            json!({"sessionId": id, "step": "a", "depth": -1}),
            "depth",
        ),
        (
            recursive::SET_MAX_DEPTH,
            json!({"sessionId": id, "maxDepth": 0}),
            "maxDepth",
        ),
        (
            recursive::SET_MAX_DEPTH,
            json!({"sessionId": id, "maxDepth": 10_001}),
            "maxDepth",
        ),
    ];
    for (method, params, field) in cases {
        let error = node.err(method, params.clone(), T0);
        assert_code(&error, RpcCode::INVALID_PARAMS);
        assert!(
            error
                .message
                .starts_with(&format!("Invalid params: {field}")),
            "{method} {params}: {}",
            error.message
        );
        assert_eq!(field_of(&error), Some(json!(field)), "{method} {params}");
    }
    // Params that are neither object, array nor absent; too many positional params.
    assert_code(
        &node.err(state::GET_SESSION, json!("s1"), T0),
        RpcCode::INVALID_PARAMS,
    );
    assert_code(
        &node.err(state::GET_SESSION, json!(["s1", "extra"]), T0),
        RpcCode::INVALID_PARAMS,
    );
    // The typed API rejects NaN, which JSON cannot carry.
    let error = node
        .guard
        .check_budget(
            &CheckBudgetParams {
                session_id: id,
                estimated_cost: f64::NAN,
            },
            &node.sessions,
        )
        .unwrap_err();
    assert_code(&error, RpcCode::INVALID_PARAMS);
}

#[test]
fn other_primitives_methods_are_not_claimed() {
    let mut sessions = Sessions::new();
    let mut guard = Guard::new();
    let mut recursive = Recursive::new();
    let mut ids = || "x".to_owned();
    for method in [
        "state.nope",
        "guard.validate",
        "recursive.track",
        "tool.invoke",
    ] {
        if method.starts_with("state.")
            || !method.starts_with("guard.") && !method.starts_with("recursive.")
        {
            assert!(guard.call(method, &json!({}), 0, &sessions).is_none());
            assert!(recursive.call(method, &json!({}), 0, &sessions).is_none());
        }
        if method != "state.nope" {
            assert!(sessions.call(method, &json!({}), 0, &mut ids).is_none());
        }
    }
    assert!(
        sessions
            .call("state.nope", &json!({}), 0, &mut ids)
            .is_none()
    );
    assert!(guard.call("guard.nope", &json!({}), 0, &sessions).is_none());
    assert!(
        recursive
            .call("recursive.nope", &json!({}), 0, &sessions)
            .is_none()
    );
    for method in state::METHODS {
        assert!(sessions.call(method, &json!({}), 0, &mut ids).is_some());
    }
    for method in guard::METHODS {
        assert!(guard.call(method, &json!({}), 0, &sessions).is_some());
    }
    for method in recursive::METHODS {
        assert!(recursive.call(method, &json!({}), 0, &sessions).is_some());
    }
}

#[test]
fn bad_id_sources_are_internal_errors() {
    let mut sessions = Sessions::new();
    let mut same = || "dup".to_owned();
    sessions
        .create_session(&CreateSessionParams::default(), T0, &mut same)
        .unwrap();
    let error = sessions
        .create_session(&CreateSessionParams::default(), T0, &mut same)
        .unwrap_err();
    assert_code(&error, RpcCode::INTERNAL_ERROR);
    let mut empty = String::new;
    let error = sessions
        .create_session(&CreateSessionParams::default(), T0, &mut empty)
        .unwrap_err();
    assert_code(&error, RpcCode::INTERNAL_ERROR);
}

#[test]
fn state_memory_bounds() {
    let limits = SessionLimits {
        max_sessions: 2,
        max_keys_per_session: 2,
        max_state_bytes_per_session: 40,
        max_episodes_per_session: 2,
        ..SessionLimits::default()
    };
    let mut node = Node::with(
        Sessions::with_limits(limits),
        Guard::new(),
        Recursive::new(),
    );
    let a = node.session("a", json!({}));
    let b = node.session("b", json!({}));
    // Keys.
    node.ok(
        state::SET_STATE,
        json!({"sessionId": a, "key": "k1", "value": 1}),
        T0,
    );
    node.ok(
        state::SET_STATE,
        json!({"sessionId": a, "key": "k2", "value": 2}),
        T0,
    );
    let error = node.err(
        state::SET_STATE,
        json!({"sessionId": a, "key": "k3", "value": 3}),
        T0,
    );
    assert_code(&error, RpcCode::INVALID_PARAMS);
    // Overwriting and deleting still work at the key limit.
    node.ok(
        state::SET_STATE,
        json!({"sessionId": a, "key": "k2", "value": 5}),
        T0,
    );
    node.ok(
        state::SET_STATE,
        json!({"sessionId": a, "key": "k2", "value": null}),
        T0,
    );
    node.ok(
        state::SET_STATE,
        json!({"sessionId": a, "key": "k3", "value": 3}),
        T0,
    );
    // Bytes.
    let error = node.err(
        state::SET_STATE,
        json!({"sessionId": b, "key": "big", "value": "x".repeat(40)}),
        T0,
    );
    assert_code(&error, RpcCode::INVALID_PARAMS);
    assert_eq!(field_of(&error), Some(json!("value")));
    // Episodes: the oldest is dropped, the count keeps going.
    for reward in [0.1, 0.2, 0.3] {
        node.ok(
            state::RECORD_EPISODE,
            json!({"sessionId": b, "outcome": "ok", "reward": reward}),
            T0,
        );
    }
    let info = node.ok(state::GET_SESSION, json!({"sessionId": b}), T0);
    assert_eq!(info["episodeCount"], 3);
    let rewards: Vec<f64> = info["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reward"].as_f64().unwrap())
        .collect();
    assert_eq!(rewards, [0.2, 0.3]);
    // Sessions: full of active sessions is −32003; an ended one is evicted to make room, and the
    // other primitives forget it.
    let error = node.err(state::CREATE_SESSION, json!({}), T0);
    assert_code(&error, RpcCode::RATE_LIMITED);
    assert_eq!(error.data.unwrap()["limit"], 2);
    node.ok(
        guard::CONSUME_BUDGET,
        json!({"sessionId": a, "amount": 0.5}),
        T0,
    );
    node.ok(
        recursive::TRACK,
        json!({"sessionId": a, "step": "x", "depth": 1}),
        T0,
    );
    node.ok(state::END_SESSION, json!({"sessionId": a}), T0 + 10);
    assert!(node.guard.budget("a").is_some() && node.recursive.trace("a").is_some());
    node.next_ids(&["c"]);
    node.ok(state::CREATE_SESSION, json!({}), T0 + 20);
    assert!(node.sessions.session("a").is_none());
    assert!(node.guard.budget("a").is_none() && node.recursive.trace("a").is_none());
    assert_eq!(node.sessions.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Guard: budgets
// ---------------------------------------------------------------------------------------------

#[test]
fn budget_limits_come_from_metadata_or_default() {
    let mut node = Node::new();
    let plain = node.session("plain", json!({}));
    let number = node.session("number", json!({"budget": 2.5}));
    let object = node.session("object", json!({"budget": {"max": 0.5}}));
    for (id, limit) in [(plain, 1.0), (number, 2.5), (object, 0.5)] {
        assert_eq!(
            node.ok(guard::GET_BUDGET_STATUS, json!({"sessionId": id}), T0),
            json!({"remaining": limit, "consumed": 0.0, "limit": limit})
        );
    }
}

#[test]
fn budget_consumption_is_exact_and_bounded() {
    let mut node = Node::new();
    let id = node.session("s", json!({"budget": 0.3}));
    for _ in 0..3 {
        node.ok(
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": 0.1}),
            T0,
        );
    }
    // 0.1 + 0.1 + 0.1 is exactly the limit: nothing remains, and not −0.00000000000000004.
    assert_eq!(
        node.ok(guard::GET_BUDGET_STATUS, json!({"sessionId": id}), T0),
        json!({"remaining": 0.0, "consumed": 0.3, "limit": 0.3})
    );
    assert_eq!(
        node.ok(
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": 0}),
            T0
        ),
        json!({"remaining": 0.0})
    );
    let error = node.err(
        guard::CONSUME_BUDGET,
        json!({"sessionId": id, "amount": 0.000_000_001}),
        T0,
    );
    assert_code(&error, RpcCode::BUDGET_EXCEEDED);
    assert_eq!(
        error.data,
        Some(json!({"remaining": 0.0, "requested": 0.000_000_001, "limit": 0.3}))
    );
    // checkBudget at the boundary: a cost equal to what remains is allowed.
    let other = node.session("t", json!({}));
    node.ok(
        guard::CONSUME_BUDGET,
        json!({"sessionId": other, "amount": 0.75}),
        T0,
    );
    assert_eq!(
        node.ok(
            guard::CHECK_BUDGET,
            json!({"sessionId": other, "estimatedCost": 0.25}),
            T0
        )["allowed"],
        true
    );
    let refused = node.ok(
        guard::CHECK_BUDGET,
        json!({"sessionId": other, "estimatedCost": 0.255}),
        T0,
    );
    assert_eq!(
        refused["reason"],
        "Estimated cost ($0.255) exceeds remaining budget ($0.25)"
    );
    // The ledger keeps the most recent entries.
    let guard_limits = GuardLimits {
        max_ledger_entries: 2,
        ..GuardLimits::default()
    };
    let mut node = Node::with(
        Sessions::new(),
        Guard::with_limits(guard_limits),
        Recursive::new(),
    );
    let id = node.session("s", json!({}));
    for (i, description) in ["a", "b", "c"].iter().enumerate() {
        node.ok(
            guard::CONSUME_BUDGET,
            json!({"sessionId": id, "amount": 0.01, "description": description}),
            T0 + i as u64,
        );
    }
    let budget = node.guard.budget(&id).unwrap();
    assert_eq!(budget.consumed_nanos, 30_000_000);
    let kept: Vec<_> = budget
        .ledger
        .iter()
        .map(|e| e.description.clone().unwrap())
        .collect();
    assert_eq!(kept, ["b", "c"]);
}

// ---------------------------------------------------------------------------------------------
// Guard: rate limits
// ---------------------------------------------------------------------------------------------

#[test]
fn rate_limit_sliding_window_boundaries() {
    let mut node = Node::new();
    let mut check = |now: u64| {
        node.ok(
            guard::CHECK_RATE_LIMIT,
            json!({"key": "tool:web-search", "limit": 2, "window": 1000}),
            now,
        )
    };
    assert_eq!(
        check(0),
        json!({"allowed": true, "remaining": 1, "resetAt": 1000})
    );
    assert_eq!(
        check(500),
        json!({"allowed": true, "remaining": 0, "resetAt": 1000})
    );
    // One millisecond before the first call leaves the window: refused, and not counted.
    assert_eq!(
        check(999),
        json!({"allowed": false, "remaining": 0, "resetAt": 1000})
    );
    // Exactly `window` after the first call it no longer counts.
    assert_eq!(
        check(1000),
        json!({"allowed": true, "remaining": 0, "resetAt": 1500})
    );
    assert_eq!(
        check(1499),
        json!({"allowed": false, "remaining": 0, "resetAt": 1500})
    );
    assert_eq!(
        check(1500),
        json!({"allowed": true, "remaining": 0, "resetAt": 2000})
    );
    // A long pause empties the window.
    assert_eq!(
        check(10_000),
        json!({"allowed": true, "remaining": 1, "resetAt": 11_000})
    );
}

#[test]
fn rate_limit_keys_are_independent_and_bounded() {
    let limits = GuardLimits {
        max_rate_keys: 2,
        ..GuardLimits::default()
    };
    let mut guard = Guard::with_limits(limits);
    let sessions = Sessions::new();
    let check = |guard: &mut Guard, key: &str, now: u64| {
        let params = json!({"key": key, "limit": 1, "window": 100});
        guard
            .call(guard::CHECK_RATE_LIMIT, &params, now, &sessions)
            .unwrap()
            .unwrap()["allowed"]
            .as_bool()
            .unwrap()
    };
    assert!(check(&mut guard, "a", 0));
    assert!(!check(&mut guard, "a", 1));
    assert!(check(&mut guard, "b", 2));
    // A third key evicts the least recently used one ("a", last seen at 1).
    assert!(check(&mut guard, "c", 3));
    assert!(guard.rate_window("a").is_none());
    assert!(guard.rate_window("b").is_some());
    // "a" starts afresh.
    assert!(check(&mut guard, "a", 4));
    // Idle keys are dropped first: at 200 "a", "b" and "c" have all left their windows.
    assert!(check(&mut guard, "d", 200));
    for key in ["a", "b", "c"] {
        assert!(guard.rate_window(key).is_none(), "{key}");
    }
    assert!(guard.rate_window("d").is_some());
}

// ---------------------------------------------------------------------------------------------
// Guard: validation and safety
// ---------------------------------------------------------------------------------------------

#[test]
fn validate_with_json_schema() {
    let mut node = Node::new();
    let schema = json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "email": {"type": "string", "format": "email"}
        }
    });
    assert_eq!(
        node.ok(
            guard::VALIDATE,
            json!({"data": {"name": "Ada", "age": 36}, "schema": schema}),
            T0
        ),
        json!({"valid": true})
    );
    let result = node.ok(
        guard::VALIDATE,
        json!({"data": {"age": "old", "email": "not-an-email"}, "schema": schema}),
        T0,
    );
    assert_eq!(result["valid"], false);
    let errors = result["errors"].as_array().unwrap();
    let keywords: BTreeSet<(&str, &str)> = errors
        .iter()
        .map(|e| {
            (
                e["instancePath"].as_str().unwrap(),
                e["keyword"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keywords,
        BTreeSet::from([("", "required"), ("/age", "type"), ("/email", "format")])
    );
    assert!(
        errors
            .iter()
            .all(|e| !e["message"].as_str().unwrap().is_empty())
    );
    assert!(
        errors
            .iter()
            .any(|e| e["schemaPath"] == "/properties/age/type")
    );
    // Draft 2020-12 by default: `prefixItems` is a keyword.
    let result = node.ok(
        guard::VALIDATE,
        json!({"data": [1], "schema": {"prefixItems": [{"type": "string"}]}}),
        T0,
    );
    assert_eq!(result["valid"], false);
    // Invalid schemas, remote references and look-around patterns are −32602.
    for schema in [
        json!({"type": 5}),
        json!({"$ref": "https://example.com/schema.json"}),
        json!({"type": "string", "pattern": "(?=a)a"}),
    ] {
        let error = node.err(guard::VALIDATE, json!({"data": "a", "schema": schema}), T0);
        assert_code(&error, RpcCode::INVALID_PARAMS);
        assert_eq!(field_of(&error), Some(json!("schema")));
    }
    // Local references work.
    let schema = json!({"$defs": {"n": {"type": "number"}}, "items": {"$ref": "#/$defs/n"}});
    assert_eq!(
        node.ok(
            guard::VALIDATE,
            json!({"data": [1, "x"], "schema": schema}),
            T0
        )["valid"],
        false
    );
    // At most 32 errors are reported.
    let data: Vec<Value> = (0..100).map(|_| json!("x")).collect();
    let result = node.ok(
        guard::VALIDATE,
        json!({"data": data, "schema": {"items": {"type": "number"}}}),
        T0,
    );
    assert_eq!(result["errors"].as_array().unwrap().len(), 32);
}

fn flags(content: Value) -> Vec<&'static str> {
    guard::check_safety(&content, &ResolvedPolicy::default(), 1 << 20)
        .unwrap()
        .into_iter()
        .map(SafetyFlag::as_str)
        .collect()
}

#[test]
fn safety_policy_finds_pii_and_secrets() {
    let cases: [(&str, &[&str]); 21] = [
        ("write to jane.doe+news@example.co.uk today", &["pii.email"]),
        ("call +1 (415) 555-2671", &["pii.phone"]),
        ("call +44 20 7946 0958", &["pii.phone"]),
        ("office: 415-555-2671.", &["pii.phone"]),
        ("office: (212) 555 0123", &["pii.phone"]),
        ("card 4111 1111 1111 1111 exp 12/29", &["pii.credit_card"]),
        ("mc 5500-0000-0000-0004", &["pii.credit_card"]),
        ("amex 378282246310005", &["pii.credit_card"]),
        ("ref 1 4111111111111111", &["pii.credit_card"]),
        ("SSN: 123-45-6789", &["pii.ssn"]),
        ("IBAN GB82 WEST 1234 5698 7654 32", &["pii.iban"]),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...",
            &["secret.private_key"],
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            &["secret.private_key"],
        ),
        (
            "aws_access_key_id=AKIAIOSFODNN7EXAMPLE",
            &["secret.aws_access_key"],
        ),
        (
            "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
            &["secret.bearer_token"],
        ),
        (
            "token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            &["secret.jwt"],
        ),
        (
            "OPENAI_KEY sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL",
            &["secret.api_key"],
        ),
        (
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            &["secret.api_key"],
        ),
        (
            r#"{"api_key": "a1b2c3d4e5f6g7h8i9j0"}"#,
            &["secret.api_key"],
        ),
        ("db password: hunter22!", &["secret.password"]),
        (
            "mail a@b.io, key AKIAIOSFODNN7EXAMPLE",
            &["pii.email", "secret.aws_access_key"],
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(flags(json!(text)), expected, "{text}");
    }
}

#[test]
fn safety_policy_negative_cases() {
    for text in [
        "",
        "The meeting is on 2026-03-18 at 14:00 in room 415.",
        "version 1.2.3.4, order #12345678, ip 192.168.100.1",
        "timestamp 1773842400000 and 1773842400000123",
        "card 4111 1111 1111 1112 (bad checksum)",
        "ssn-like 000-12-3456, 666-12-3456, 900-12-3456, 123-00-4567, 123-45-0000",
        "serial 123-45-67890",
        "phone 123-456-7890 has an invalid area code",
        "plus +12 points",
        "Use a Bearer token for auth",
        "pip install sk-learn-tutorial-for-beginners-2026",
        "password: ********",
        "password: <your password>",
        "api_key = YOUR_API_KEY_HERE_PLEASE",
        "user@localhost",
        "IBAN GB82 WEST 1234 5698 7654 33",
        "-----BEGIN PUBLIC KEY-----",
        "AKIA1234",
    ] {
        assert_eq!(flags(json!(text)), Vec::<&str>::new(), "{text}");
    }
}

#[test]
fn safety_scans_structured_content_and_policies_select() {
    let content = json!({
        "user": {"contact": "ada@example.org"},
        "cards": [4_111_111_111_111_111_u64],
        "aws": {"AKIAIOSFODNN7EXAMPLE": true}
    });
    assert_eq!(
        flags(content.clone()),
        ["pii.email", "pii.credit_card", "secret.aws_access_key"]
    );
    let mut node = Node::new();
    let check = |node: &mut Node, policy: Value| {
        node.call(
            guard::CHECK_SAFETY,
            &json!({"content": content, "policy": policy}),
            T0,
        )
    };
    assert_eq!(
        check(&mut node, json!("pii")).unwrap(),
        json!({"safe": false, "flags": ["pii.email", "pii.credit_card"]})
    );
    assert_eq!(
        check(&mut node, json!({"categories": ["secrets"]})).unwrap(),
        json!({"safe": false, "flags": ["secret.aws_access_key"]})
    );
    assert_eq!(
        check(&mut node, json!({"ignore": ["pii"]})).unwrap(),
        json!({"safe": false, "flags": ["secret.aws_access_key"]})
    );
    assert_eq!(
        check(&mut node, json!({"categories": ["pii.ssn", "secret.jwt"]})).unwrap(),
        json!({"safe": true})
    );
    assert_eq!(
        check(&mut node, json!("all")).unwrap()["flags"],
        json!(["pii.email", "pii.credit_card", "secret.aws_access_key"])
    );
    // Enforcing turns a finding into −32004.
    let error = check(
        &mut node,
        json!({"categories": ["pii.email"], "enforce": true}),
    )
    .unwrap_err();
    assert_code(&error, RpcCode::SAFETY_VIOLATION);
    assert_eq!(error.data, Some(json!({"flags": ["pii.email"]})));
    assert_eq!(
        node.ok(
            guard::CHECK_SAFETY,
            json!({"content": "hello", "policy": {"enforce": true}}),
            T0
        ),
        json!({"safe": true})
    );
    // Oversized content is −32602.
    let error =
        guard::check_safety(&json!("x".repeat(100)), &ResolvedPolicy::default(), 99).unwrap_err();
    assert_code(&error, RpcCode::INVALID_PARAMS);
}

#[test]
fn safety_flags_are_named_and_selectable() {
    let names: Vec<&str> = SafetyFlag::ALL.iter().map(|f| f.as_str()).collect();
    assert_eq!(
        names,
        [
            "pii.email",
            "pii.phone",
            "pii.credit_card",
            "pii.ssn",
            "pii.iban",
            "secret.private_key",
            "secret.aws_access_key",
            "secret.bearer_token",
            "secret.jwt",
            "secret.api_key",
            "secret.password"
        ]
    );
    for flag in SafetyFlag::ALL {
        assert_eq!(SafetyFlag::select(flag.as_str()), Some(vec![flag]));
        assert!(flag.as_str().starts_with(flag.category()));
    }
    assert_eq!(SafetyFlag::select("pii").unwrap().len(), 5);
    assert_eq!(SafetyFlag::select("secret"), SafetyFlag::select("secrets"));
    assert_eq!(SafetyFlag::select("nope"), None);
}

// ---------------------------------------------------------------------------------------------
// Recursive
// ---------------------------------------------------------------------------------------------

#[test]
fn loop_detection_abc_three_times() {
    let stack = ["a", "b", "c", "a", "b", "c", "a", "b", "c"];
    let result = analyze("a", &stack, 10, 32);
    assert_eq!(
        result,
        AnalyzeResult {
            is_looping: true,
            pattern: Some("a -> b -> c".into()),
            iterations: 3,
            depth: 9,
            recommendation: Recommendation::Warn,
        }
    );
    // maxIterations reached: stop.
    assert_eq!(
        analyze("a", &stack, 3, 32).recommendation,
        Recommendation::Stop
    );
    // A current step that is not on the stack is pushed, and a fresh step is no loop.
    let result = analyze("d", &stack, 10, 32);
    assert!(!result.is_looping);
    assert_eq!(result.depth, 10);
    assert_eq!(result.recommendation, Recommendation::Continue);
    // Too deep is stop even without a loop.
    let result = analyze("z", &["a", "b", "c"], 10, 3);
    assert_eq!(
        (result.is_looping, result.recommendation),
        (false, Recommendation::Stop)
    );
    // A two-step ping-pong and the shortest cycle wins over longer ones.
    let result = analyze("b", &["x", "a", "b", "a", "b"], 10, 32);
    assert_eq!(result.pattern.as_deref(), Some("b -> a"));
    let result = analyze("a", &["a", "a", "a", "a"], 10, 32);
    assert_eq!(
        (result.pattern.as_deref(), result.iterations),
        (Some("a"), 4)
    );
}

#[test]
fn track_get_trace_and_max_depth() {
    let mut node = Node::new();
    let id = node.session("s", json!({}));
    for (i, (step, depth)) in [("plan", 0), ("search", 1), ("analyze", 2)]
        .iter()
        .enumerate()
    {
        assert_eq!(
            node.ok(
                recursive::TRACK,
                json!({"sessionId": id, "step": step, "depth": depth}),
                T0 + i as u64
            ),
            json!({"tracked": true, "depth": depth})
        );
    }
    assert_eq!(
        node.ok(recursive::GET_TRACE, json!({"sessionId": id}), T0),
        json!({
            "steps": [
                {"step": "plan", "depth": 0, "timestamp": T0},
                {"step": "search", "depth": 1, "timestamp": T0 + 1},
                {"step": "analyze", "depth": 2, "timestamp": T0 + 2}
            ],
            "maxDepth": 32,
            "totalIterations": 3
        })
    );
    assert_eq!(
        node.ok(
            recursive::SET_MAX_DEPTH,
            json!({"sessionId": id, "maxDepth": 3}),
            T0
        ),
        json!({"updated": true})
    );
    // depth == maxDepth is fine, beyond it is −32005 and nothing is recorded.
    node.ok(
        recursive::TRACK,
        json!({"sessionId": id, "step": "search", "depth": 3}),
        T0,
    );
    let error = node.err(
        recursive::TRACK,
        json!({"sessionId": id, "step": "deeper", "depth": 4}),
        T0,
    );
    assert_code(&error, RpcCode::LOOP_DETECTED);
    assert_eq!(error.message, "Loop Detected");
    assert_eq!(
        error.data,
        Some(json!({
            "sessionId": "s",
            "step": "deeper",
            "depth": 4,
            "maxDepth": 3,
            "recommendation": "stop",
            "reason": "depth 4 exceeds maxDepth 3"
        }))
    );
    let trace = node.ok(recursive::GET_TRACE, json!({"sessionId": id}), T0);
    assert_eq!(trace["totalIterations"], 4);
    assert_eq!(trace["maxDepth"], 3);
    // The analysis uses the session's max depth too.
    let result = node.ok(
        recursive::ANALYZE,
        json!({"sessionId": id, "currentStep": "e", "callStack": ["a", "b", "c", "d"]}),
        T0,
    );
    assert_eq!(result["recommendation"], "stop");
}

#[test]
fn loop_detected_data_names_the_loop() {
    let mut node = Node::new();
    let id = node.session("s", json!({"maxDepth": 4}));
    assert_eq!(
        node.ok(recursive::GET_TRACE, json!({"sessionId": id}), T0)["maxDepth"],
        4
    );
    for (depth, step) in ["a", "b", "a", "b", "a"].iter().enumerate() {
        node.ok(
            recursive::TRACK,
            json!({"sessionId": id, "step": step, "depth": depth}),
            T0,
        );
    }
    let error = node.err(
        recursive::TRACK,
        json!({"sessionId": id, "step": "b", "depth": 5}),
        T0,
    );
    assert_code(&error, RpcCode::LOOP_DETECTED);
    let data = error.data.unwrap();
    // The steps a b a b a plus b, seen from b: passes `a | b a | b a | b`.
    assert_eq!(data["pattern"], "b -> a");
    assert_eq!(data["iterations"], 4);
    assert_eq!(data["maxDepth"], 4);
}

#[test]
fn recursive_memory_bounds() {
    let limits = RecursiveLimits {
        max_steps_per_trace: 3,
        max_call_stack: 5,
        ..RecursiveLimits::default()
    };
    let mut node = Node::with(
        Sessions::new(),
        Guard::new(),
        Recursive::with_limits(limits),
    );
    let id = node.session("s", json!({}));
    for i in 0..5 {
        node.ok(
            recursive::TRACK,
            json!({"sessionId": id, "step": format!("s{i}"), "depth": i}),
            T0,
        );
    }
    let trace = node.ok(recursive::GET_TRACE, json!({"sessionId": id}), T0);
    let steps: Vec<&str> = trace["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["s2", "s3", "s4"]);
    assert_eq!(trace["totalIterations"], 5);
    let error = node.err(
        recursive::ANALYZE,
        json!({"sessionId": id, "currentStep": "a", "callStack": vec!["a"; 6]}),
        T0,
    );
    assert_eq!(field_of(&error), Some(json!("callStack")));
    let error = node.err(
        recursive::TRACK,
        json!({"sessionId": id, "step": "x".repeat(257), "depth": 0}),
        T0,
    );
    assert_eq!(field_of(&error), Some(json!("step")));
}

// ---------------------------------------------------------------------------------------------
// Persistence: the state is plain serde data
// ---------------------------------------------------------------------------------------------

#[test]
fn state_survives_a_serde_round_trip() {
    let mut node = Node::new();
    let id = node.session("s", json!({"budget": 2}));
    node.ok(
        state::SET_STATE,
        json!({"sessionId": id, "key": "k", "value": [1]}),
        T0,
    );
    node.ok(
        state::RECORD_EPISODE,
        json!({"sessionId": id, "outcome": "ok", "reward": 0.5}),
        T0,
    );
    node.ok(
        guard::CONSUME_BUDGET,
        json!({"sessionId": id, "amount": 0.5}),
        T0,
    );
    node.ok(
        guard::CHECK_RATE_LIMIT,
        json!({"key": "k", "limit": 1, "window": 1000}),
        T0,
    );
    node.ok(
        recursive::SET_MAX_DEPTH,
        json!({"sessionId": id, "maxDepth": 7}),
        T0,
    );
    node.ok(
        recursive::TRACK,
        json!({"sessionId": id, "step": "a", "depth": 1}),
        T0,
    );

    let stored = (
        serde_json::to_string(&node.sessions).unwrap(),
        serde_json::to_string(&node.guard).unwrap(),
        serde_json::to_string(&node.recursive).unwrap(),
        serde_json::to_string(node.sessions.session(&id).unwrap()).unwrap(),
    );
    let sessions: Sessions = serde_json::from_str(&stored.0).unwrap();
    let guard: Guard = serde_json::from_str(&stored.1).unwrap();
    let recursive: Recursive = serde_json::from_str(&stored.2).unwrap();
    assert_eq!(sessions, node.sessions);
    assert_eq!(guard, node.guard);
    assert_eq!(recursive, node.recursive);
    // One session row reloads on its own too.
    let mut rebuilt = Sessions::new();
    rebuilt.insert(serde_json::from_str(&stored.3).unwrap());
    assert_eq!(rebuilt.session(&id), node.sessions.session(&id));

    let mut reloaded = Node::with(sessions, guard, recursive);
    assert_eq!(
        reloaded.ok(guard::GET_BUDGET_STATUS, json!({"sessionId": id}), T0),
        json!({"remaining": 1.5, "consumed": 0.5, "limit": 2.0})
    );
    assert_eq!(
        reloaded.ok(
            guard::CHECK_RATE_LIMIT,
            json!({"key": "k", "limit": 1, "window": 1000}),
            T0 + 1
        )["allowed"],
        false
    );
    assert_eq!(
        reloaded.ok(recursive::GET_TRACE, json!({"sessionId": id}), T0)["maxDepth"],
        7
    );
    assert_eq!(
        reloaded.ok(state::GET_STATE, json!({"sessionId": id, "key": "k"}), T0),
        json!({"value": [1]})
    );
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

fn brute_force_period(items: &[String]) -> Option<usize> {
    let n = items.len();
    (1..=n / 2).find(|&p| (n - p..n).all(|i| items[i] == items[i - p]))
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "[a-z0-9 @.+-]{0,12}".prop_map(Value::from),
        Just(json!("s")),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("sessionId".to_owned()),
                    Just("key".to_owned()),
                    Just("value".to_owned()),
                    Just("amount".to_owned()),
                    Just("limit".to_owned()),
                    Just("window".to_owned()),
                    Just("callStack".to_owned()),
                    Just("currentStep".to_owned()),
                    Just("depth".to_owned()),
                    Just("content".to_owned()),
                    Just("schema".to_owned()),
                    Just("data".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn analyze_never_panics(
        stack in prop::collection::vec("[a-d]{1,2}|.{0,8}", 0..64),
        current in "[a-d]{1,2}|.{0,8}",
        max_iterations in 0u32..20,
        max_depth in 0u32..100,
    ) {
        let result = analyze(&current, &stack, max_iterations, max_depth);
        prop_assert!(result.depth == stack.len() || result.depth == stack.len() + 1);
        if result.is_looping {
            let pattern = result.pattern.unwrap();
            prop_assert!(result.iterations >= 2);
            prop_assert!(!pattern.is_empty() || current.is_empty() || stack.iter().any(String::is_empty));
            prop_assert_ne!(result.recommendation, Recommendation::Continue);
        } else {
            prop_assert!(result.pattern.is_none());
            prop_assert_eq!(result.iterations, 0);
        }
    }

    #[test]
    fn a_stack_without_repeats_never_loops(
        steps in prop::collection::btree_set(".{0,10}", 0..40),
        pick in any::<prop::sample::Index>(),
        fresh in any::<bool>(),
    ) {
        let stack: Vec<String> = steps.into_iter().collect();
        let current = if fresh || stack.is_empty() {
            "\u{0}fresh\u{0}".to_owned()
        } else {
            stack[pick.index(stack.len())].clone()
        };
        let result = analyze(&current, &stack, 10, u32::MAX);
        prop_assert!(!result.is_looping);
        prop_assert_eq!(result.recommendation, Recommendation::Continue);
    }

    #[test]
    fn shortest_cycle_matches_brute_force(stack in prop::collection::vec("[a-c]", 0..40)) {
        let fast = shortest_suffix_cycle(&stack).map(|c| c.period);
        prop_assert_eq!(fast, brute_force_period(&stack));
        if let Some(cycle) = shortest_suffix_cycle(&stack) {
            let run = &stack[cycle.run_start..];
            prop_assert!(run.len() >= 2 * cycle.period);
            prop_assert!((cycle.period..run.len()).all(|i| run[i] == run[i - cycle.period]));
            // Maximal: one more step back would break the period.
            if cycle.run_start > 0 {
                prop_assert_ne!(
                    &stack[cycle.run_start - 1],
                    &stack[cycle.run_start - 1 + cycle.period]
                );
            }
        }
    }

    #[test]
    fn repeating_a_unit_k_times_is_found(
        unit in prop::collection::btree_set("[a-z]{1,3}", 1..6),
        k in 2usize..6,
    ) {
        let unit: Vec<String> = unit.into_iter().collect();
        let stack: Vec<String> = unit.iter().cycle().take(unit.len() * k).cloned().collect();
        let result = analyze(&unit[0], &stack, 100, u32::MAX);
        prop_assert!(result.is_looping);
        prop_assert_eq!(result.pattern.unwrap(), unit.join(" -> "));
        prop_assert_eq!(result.iterations, k);
    }

    #[test]
    fn dispatchers_never_panic(params in arb_json(), method in prop::sample::select(vec![
        "state.createSession", "state.getSession", "state.setState", "state.getState",
        "state.endSession", "state.recordEpisode", "guard.validate", "guard.checkSafety",
        "guard.checkBudget", "guard.consumeBudget", "guard.checkRateLimit",
        "guard.getBudgetStatus", "recursive.analyze", "recursive.track", "recursive.getTrace",
        "recursive.setMaxDepth",
    ]), now in any::<u64>()) {
        let mut node = Node::new();
        node.session("s", json!({}));
        let _ = node.call(method, &params, now);
    }

    #[test]
    fn safety_never_panics(text in ".{0,200}") {
        let _ = flags(json!(text));
    }
}

/// `data.field` of a −32602, after checking that its `data.errors`, when it has them, list that
/// field first (the face completes the others: `params::complete`).
fn field_of(error: &RpcError) -> Option<Value> {
    let data = error.data.as_ref()?;
    if let Some(errors) = data.get("errors") {
        assert_eq!(
            errors[0]["field"], data["field"],
            "data.errors names data.field first: {data}"
        );
    }
    data.get("field").cloned()
}
