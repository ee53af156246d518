//! The Recursive primitive (`recursive.*`), sans IO: loop detection over a call stack, step
//! tracking with a maximum depth, and traces.
//!
//! Spec references (the Hyperspace Gossiping Agents Protocol):
//!
//! - §4.5 "Recursive Primitive":
//!   `recursive.analyze(sessionId, currentStep, callStack, maxIterations?) → { isLooping, pattern?, recommendation }`,
//!   `recursive.track(sessionId, step, depth) → { tracked, depth }`,
//!   `recursive.getTrace(sessionId) → { steps[], maxDepth, totalIterations }`,
//!   `recursive.setMaxDepth(sessionId, maxDepth) → { updated }`, and the `analyze` example whose
//!   result also carries `iterations` and `depth`:
//!   `{"isLooping": true, "pattern": "refine-search-query -> web-search -> analyze-results",
//!   "iterations": 3, "depth": 7, "recommendation": "warn"}`. It is reproduced exactly.
//! - §8 "Error Codes": −32005 "Loop Detected", −32001 "Session Not Found", −32602.
//!
//! # Design
//!
//! [`analyze`] is a pure function. [`Recursive`] holds a [`RecursionTrace`] per session (plain
//! serde data: the explicit max depth, the kept steps, the step count) and learns about sessions
//! through [`SessionLookup`]. `track` and `setMaxDepth` mutate `traces[sessionId]`; the node
//! persists that entry (or the whole `Recursive`) after them.
//!
//! # Loop detection ([`analyze`])
//!
//! 1. The trace is `callStack`, with `currentStep` pushed on top when it does not occur in
//!    `callStack` at all (a caller may send only the steps that led here). `depth` is the trace's
//!    length (7 in the spec example, whose stack already ends with `currentStep`).
//! 2. The loop is the **shortest repeating suffix**: the smallest period `p` such that the last
//!    `2p` steps are the same `p` steps twice. No such `p` means `isLooping: false`. The repeating
//!    run is then extended backwards as far as the period holds (found in linear time with the
//!    Z-algorithm over the reversed trace).
//! 3. `pattern` is the cycle's steps joined with `" -> "`, **starting at `currentStep`** (the step
//!    at which the loop is re-entered) when `currentStep` is in the cycle, otherwise in trace order
//!    ending at the top.
//! 4. `iterations` counts the passes through the loop that the repeating run touches, a pass
//!    starting at the pattern's first step; a pass cut short at either end of the run counts. For
//!    `a b c a b c a b c` with `currentStep` `a` that is 3; for the spec's
//!    `plan W A R W A R` with `currentStep` `R` the run `W A R W A R` is cut into
//!    `W A | R W A | R`, i.e. 3 — both as expected.
//! 5. `recommendation` is `"stop"` when `iterations >= maxIterations` (default
//!    [`DEFAULT_MAX_ITERATIONS`] 10) or `depth` exceeds the session's max depth, `"warn"` for any
//!    other loop, `"continue"` otherwise. Without a loop, `iterations` is 0 and `pattern` absent.
//!
//! # Memory bounds ([`RecursiveLimits`], defaults)
//!
//! | bound | default | when reached |
//! |---|---|---|
//! | traces | 1024 | traces of vanished, then ended, sessions are dropped; otherwise −32003 |
//! | steps kept per trace | 1024 | the oldest step is dropped; `totalIterations` keeps counting |
//! | `callStack` length | 10 000 | −32602 |
//! | step name | 256 bytes | −32602 |
//! | `maxDepth` | 1..=10 000 | −32602 |
//!
//! # Important discrepancies
//!
//! - **`analyze` returns `iterations` and `depth` always**; the §4.5 signature lists only
//!   `{isLooping, pattern?, recommendation}` but the example has both. `recommendation` is a
//!   keyword (`"continue"` | `"warn"` | `"stop"`), as the example's `"warn"`, not prose.
//! - **How `iterations` counts** is our reading of the example (see step 4 above); plain "complete
//!   repetitions" would give 2 for the spec's stack, where the spec says 3.
//! - **`track` beyond the max depth is −32005**, not `{tracked: false}`: `depth > maxDepth` fails
//!   with `data: {sessionId, step, depth, maxDepth, recommendation: "stop", reason, pattern?,
//!   iterations?}` (the last two when the tracked steps plus this one loop), and the step is not
//!   recorded. `depth == maxDepth` is allowed. `tracked` is therefore always `true`, and the
//!   returned `depth` is the one given.
//! - **The max depth** is, in order: the last `setMaxDepth`, the session's `metadata.maxDepth`
//!   (see [`crate::state`]), [`DEFAULT_MAX_DEPTH`] 32. It also turns `analyze`'s recommendation
//!   into `"stop"` when the analysed depth exceeds it.
//! - **`steps[]`** in `getTrace` are objects `{step, depth, timestamp}` (Unix milliseconds), oldest
//!   first; `totalIterations` is the number of successful `track` calls, including steps no
//!   longer kept.
//! - **Sessions.** Every method needs an existing session (−32001 otherwise). `analyze` and
//!   `getTrace` work on ended sessions; `track` and `setMaxDepth` on an ended session are −32001
//!   with `"reason": "ended"`. `maxIterations` must be ≥ 1.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;

use schemars::JsonSchema;

use crate::openrpc::{MethodDoc, params_of, result_of};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::jsonrpc::{RpcCode, RpcError};
use crate::params::{check_len, invalid_params, parse_params, to_result};
use crate::state::{
    MAX_MAX_DEPTH, SessionFacts, SessionIdParams, SessionLookup, make_room, require_active,
    require_session,
};

/// `recursive.analyze`.
pub const ANALYZE: &str = "recursive.analyze";
/// `recursive.track`.
pub const TRACK: &str = "recursive.track";
/// `recursive.getTrace`.
pub const GET_TRACE: &str = "recursive.getTrace";
/// `recursive.setMaxDepth`.
pub const SET_MAX_DEPTH: &str = "recursive.setMaxDepth";
/// Every `recursive.*` method, in spec order.
pub const METHODS: [&str; 4] = [ANALYZE, TRACK, GET_TRACE, SET_MAX_DEPTH];

/// What each `recursive.*` method takes, returns and may fail with ([`crate::openrpc`]).
pub const DOCS: [MethodDoc; 4] = [
    MethodDoc {
        name: ANALYZE,
        summary: "Looks for loops in a call stack and advises continue, warn or stop.",
        params: params_of::<AnalyzeParams>,
        result: result_of::<AnalyzeResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND, RpcCode::LOOP_DETECTED],
        example: || json!({"sessionId": "sess-a8c3f210", "currentStep": "search", "callStack": ["plan", "search"]}),
    },
    MethodDoc {
        name: TRACK,
        summary: "Records a step at a depth in the session's trace; −32005 beyond the max depth.",
        params: params_of::<TrackParams>,
        result: result_of::<TrackResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND, RpcCode::LOOP_DETECTED],
        example: || json!({"sessionId": "sess-a8c3f210", "step": "search", "depth": 1}),
    },
    MethodDoc {
        name: GET_TRACE,
        summary: "The session's recorded steps and depths.",
        params: params_of::<GetTraceParams>,
        result: result_of::<TraceResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210"}),
    },
    MethodDoc {
        name: SET_MAX_DEPTH,
        summary: "Sets the session's max depth (1 to 10,000).",
        params: params_of::<SetMaxDepthParams>,
        result: result_of::<SetMaxDepthResult>,
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210", "maxDepth": 8}),
    },
];

/// The max depth of a session without `setMaxDepth` or `metadata.maxDepth`.
pub const DEFAULT_MAX_DEPTH: u32 = 32;
/// `maxIterations` when `analyze` is called without it.
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;
/// The separator of `pattern`.
pub const PATTERN_SEPARATOR: &str = " -> ";

// ---------------------------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------------------------

/// Params of `recursive.analyze(sessionId, currentStep, callStack, maxIterations?)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalyzeParams {
    /// The session.
    pub session_id: String,
    /// The step being executed.
    pub current_step: String,
    /// The steps from the root to here (the current step may or may not be on top).
    pub call_stack: Vec<String>,
    /// Iterations at which the recommendation becomes `"stop"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
}

/// What `analyze` advises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Recommendation {
    /// No loop, depth within bounds.
    Continue,
    /// A loop below `maxIterations`.
    Warn,
    /// A loop at or beyond `maxIterations`, or the depth exceeds the max depth.
    Stop,
}

/// Result of `recursive.analyze`: `{ isLooping, pattern?, iterations, depth, recommendation }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalyzeResult {
    /// A repeating suffix was found.
    pub is_looping: bool,
    /// The cycle, `"a -> b -> c"`, only when looping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Passes through the loop (0 without a loop).
    pub iterations: usize,
    /// The trace's length.
    pub depth: usize,
    /// `"continue"`, `"warn"` or `"stop"`.
    pub recommendation: Recommendation,
}

/// Params of `recursive.track(sessionId, step, depth)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrackParams {
    /// The session.
    pub session_id: String,
    /// The step's name.
    pub step: String,
    /// The step's depth (0 = root).
    pub depth: u32,
}

/// Result of `recursive.track`: `{ tracked, depth }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrackResult {
    /// Always `true` on success.
    pub tracked: bool,
    /// The depth given.
    pub depth: u32,
}

/// Params of `recursive.getTrace(sessionId)`.
pub type GetTraceParams = SessionIdParams;

/// One tracked step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TraceStep {
    /// The step's name.
    pub step: String,
    /// The step's depth.
    pub depth: u32,
    /// Unix milliseconds when tracked.
    pub timestamp: u64,
}

/// Result of `recursive.getTrace`: `{ steps[], maxDepth, totalIterations }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TraceResult {
    /// The kept steps, oldest first.
    pub steps: Vec<TraceStep>,
    /// The session's max depth in force.
    pub max_depth: u32,
    /// Successful `track` calls, including steps no longer kept.
    pub total_iterations: u64,
}

/// Params of `recursive.setMaxDepth(sessionId, maxDepth)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetMaxDepthParams {
    /// The session.
    pub session_id: String,
    /// The new max depth, 1..=10 000.
    pub max_depth: u32,
}

/// Result of `recursive.setMaxDepth`: `{ updated }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetMaxDepthResult {
    /// Always `true` on success.
    pub updated: bool,
}

// ---------------------------------------------------------------------------------------------
// Loop detection
// ---------------------------------------------------------------------------------------------

/// The shortest repeating suffix of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cycle {
    /// The cycle's length `p`: the last `p` items are one pass.
    pub period: usize,
    /// Where the repeating run starts: `items[run_start..]` has period `p` and is at least `2p`
    /// long, and `run_start` is as small as possible.
    pub run_start: usize,
}

/// The shortest `p` such that the last `2p` items are the same `p` items twice, with the run of
/// that period extended backwards as far as it holds. Linear time (Z-algorithm).
#[must_use]
pub fn shortest_suffix_cycle<T: Eq + Hash>(items: &[T]) -> Option<Cycle> {
    let n = items.len();
    if n < 2 {
        return None;
    }
    // Intern, then reverse: a repeating suffix of `items` is a repeating prefix of `reversed`.
    let mut ids: HashMap<&T, u32> = HashMap::new();
    let mut reversed = Vec::with_capacity(n);
    for item in items.iter().rev() {
        let next = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        reversed.push(*ids.entry(item).or_insert(next));
    }
    let z = z_function(&reversed);
    (1..=n / 2).find(|&p| z[p] >= p).map(|period| Cycle {
        period,
        run_start: n - (period + z[period]),
    })
}

/// `z[i]` = the length of the longest common prefix of `s` and `s[i..]` (`z[0] = len`).
fn z_function(s: &[u32]) -> Vec<usize> {
    let n = s.len();
    let mut z = vec![0; n];
    if n == 0 {
        return z;
    }
    z[0] = n;
    let (mut left, mut right) = (0, 0);
    for i in 1..n {
        let mut length = if i < right {
            (right - i).min(z[i - left])
        } else {
            0
        };
        while i + length < n && s[length] == s[i + length] {
            length += 1;
        }
        z[i] = length;
        if i + length > right {
            left = i;
            right = i + length;
        }
    }
    z
}

/// `recursive.analyze` on its own: loop detection over `call_stack` and `current_step` (see the
/// module docs for every rule). Never panics.
#[must_use]
pub fn analyze<S: AsRef<str>>(
    current_step: &str,
    call_stack: &[S],
    max_iterations: u32,
    max_depth: u32,
) -> AnalyzeResult {
    let mut trace: Vec<&str> = call_stack.iter().map(AsRef::as_ref).collect();
    if !trace.contains(&current_step) {
        trace.push(current_step);
    }
    let depth = trace.len();
    let too_deep = u64::try_from(depth).unwrap_or(u64::MAX) > u64::from(max_depth);
    let Some(cycle) = shortest_suffix_cycle(&trace) else {
        return AnalyzeResult {
            is_looping: false,
            pattern: None,
            iterations: 0,
            depth,
            recommendation: if too_deep {
                Recommendation::Stop
            } else {
                Recommendation::Continue
            },
        };
    };
    let (pattern, iterations) = describe(&trace, cycle, current_step);
    let recommendation =
        if too_deep || u64::try_from(iterations).unwrap_or(u64::MAX) >= u64::from(max_iterations) {
            Recommendation::Stop
        } else {
            Recommendation::Warn
        };
    AnalyzeResult {
        is_looping: true,
        pattern: Some(pattern),
        iterations,
        depth,
        recommendation,
    }
}

/// The pattern text (rotated to start at `current_step` when it is in the cycle) and the number
/// of passes the run touches.
fn describe(trace: &[&str], cycle: Cycle, current_step: &str) -> (String, usize) {
    let n = trace.len();
    let p = cycle.period;
    let unit = &trace[n - p..];
    let offset = unit.iter().position(|s| *s == current_step).unwrap_or(0);
    let pattern = unit[offset..]
        .iter()
        .chain(&unit[..offset])
        .copied()
        .collect::<Vec<_>>()
        .join(PATTERN_SEPARATOR);
    // Passes start at trace positions congruent to `anchor` modulo `p`.
    let anchor = (n - p + offset) % p;
    let starts_before = |end: usize| end / p + usize::from(end % p > anchor);
    let cuts = starts_before(n) - starts_before(cycle.run_start + 1);
    (pattern, cuts + 1)
}

// ---------------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------------

/// One session's trace: what the node stores per `sessionId`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecursionTrace {
    /// The max depth set by `setMaxDepth`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u32>,
    /// The kept steps, oldest first.
    #[serde(default)]
    pub steps: VecDeque<TraceStep>,
    /// Successful `track` calls.
    #[serde(default)]
    pub total_iterations: u64,
}

/// Memory bounds and defaults of [`Recursive`] (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecursiveLimits {
    /// Traces kept.
    pub max_traces: usize,
    /// Steps kept per trace.
    pub max_steps_per_trace: usize,
    /// Longest accepted `callStack`.
    pub max_call_stack: usize,
    /// Bytes of a step name.
    pub max_step_bytes: usize,
    /// The max depth of sessions that set none.
    pub default_max_depth: u32,
    /// `maxIterations` when absent.
    pub default_max_iterations: u32,
}

impl Default for RecursiveLimits {
    fn default() -> Self {
        Self {
            max_traces: 1024,
            max_steps_per_trace: 1024,
            max_call_stack: 10_000,
            max_step_bytes: 256,
            default_max_depth: DEFAULT_MAX_DEPTH,
            default_max_iterations: DEFAULT_MAX_ITERATIONS,
        }
    }
}

/// The Recursive primitive's state machine: a trace per session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recursive {
    traces: BTreeMap<String, RecursionTrace>,
    #[serde(skip)]
    limits: RecursiveLimits,
}

impl Recursive {
    /// An empty store with the default limits.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with the given limits.
    #[must_use]
    pub fn with_limits(limits: RecursiveLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> RecursiveLimits {
        self.limits
    }

    /// Replaces the limits (after reloading a deserialized store).
    pub fn set_limits(&mut self, limits: RecursiveLimits) {
        self.limits = limits;
    }

    /// A session's trace (none before its first `track` or `setMaxDepth`).
    #[must_use]
    pub fn trace(&self, session_id: &str) -> Option<&RecursionTrace> {
        self.traces.get(session_id)
    }

    /// Stores a trace as loaded from disk.
    pub fn insert_trace(&mut self, session_id: impl Into<String>, trace: RecursionTrace) {
        self.traces.insert(session_id.into(), trace);
    }

    /// Drops a session's trace (the session was evicted or deleted).
    pub fn forget_session(&mut self, session_id: &str) {
        self.traces.remove(session_id);
    }

    /// The max depth in force for a session.
    fn max_depth(&self, session_id: &str, facts: &SessionFacts) -> u32 {
        self.traces
            .get(session_id)
            .and_then(|trace| trace.max_depth)
            .or(facts.max_depth)
            .unwrap_or(self.limits.default_max_depth)
    }

    /// Dispatches one `recursive.*` call; `None` when `method` is not a Recursive method.
    pub fn call(
        &mut self,
        method: &str,
        params: &Value,
        now_ms: u64,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Option<Result<Value, RpcError>> {
        let outcome = match method {
            ANALYZE => parse_params(
                params,
                &["sessionId", "currentStep", "callStack", "maxIterations"],
            )
            .and_then(|p| self.analyze(&p, sessions))
            .and_then(|r| to_result(&r)),
            TRACK => parse_params(params, &["sessionId", "step", "depth"])
                .and_then(|p| self.track(p, now_ms, sessions))
                .and_then(|r| to_result(&r)),
            GET_TRACE => parse_params::<GetTraceParams>(params, &["sessionId"])
                .and_then(|p| self.get_trace(&p.session_id, sessions))
                .and_then(|r| to_result(&r)),
            SET_MAX_DEPTH => parse_params(params, &["sessionId", "maxDepth"])
                .and_then(|p| self.set_max_depth(&p, sessions))
                .and_then(|r| to_result(&r)),
            _ => return None,
        };
        Some(outcome)
    }

    /// `recursive.analyze` (read-only).
    ///
    /// # Errors
    ///
    /// −32001 for an unknown session; −32602 for `maxIterations` 0, a too long `callStack` or
    /// step name.
    pub fn analyze(
        &self,
        params: &AnalyzeParams,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Result<AnalyzeResult, RpcError> {
        let limits = self.limits;
        let max_iterations = params
            .max_iterations
            .unwrap_or(limits.default_max_iterations);
        if max_iterations == 0 {
            return Err(invalid_params(
                "maxIterations: must be at least 1",
                Some("maxIterations"),
            ));
        }
        if params.call_stack.len() > limits.max_call_stack {
            return Err(invalid_params(
                format!("callStack: longer than {} steps", limits.max_call_stack),
                Some("callStack"),
            ));
        }
        check_len("currentStep", &params.current_step, limits.max_step_bytes)?;
        for step in &params.call_stack {
            check_len("callStack", step, limits.max_step_bytes)?;
        }
        let facts = require_session(sessions, &params.session_id)?;
        let max_depth = self.max_depth(&params.session_id, &facts);
        Ok(analyze(
            &params.current_step,
            &params.call_stack,
            max_iterations,
            max_depth,
        ))
    }

    /// `recursive.track`; takes the params by value to store `step` without a copy.
    ///
    /// # Errors
    ///
    /// −32001 for an unknown or ended session; −32602 for a too long step name; −32005 when
    /// `depth` exceeds the session's max depth.
    #[allow(clippy::needless_pass_by_value)] // `step` is moved into the trace
    pub fn track(
        &mut self,
        params: TrackParams,
        now_ms: u64,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Result<TrackResult, RpcError> {
        let limits = self.limits;
        check_len("step", &params.step, limits.max_step_bytes)?;
        let facts = require_active(sessions, &params.session_id)?;
        let max_depth = self.max_depth(&params.session_id, &facts);
        if params.depth > max_depth {
            return Err(self.loop_detected(&params, max_depth));
        }
        let trace = self.trace_mut(&params.session_id, sessions)?;
        while trace.steps.len() >= limits.max_steps_per_trace.max(1) {
            trace.steps.pop_front();
        }
        trace.steps.push_back(TraceStep {
            step: params.step,
            depth: params.depth,
            timestamp: now_ms,
        });
        trace.total_iterations += 1;
        Ok(TrackResult {
            tracked: true,
            depth: params.depth,
        })
    }

    /// The −32005 error for a step beyond the max depth, with the loop the steps form, if any.
    fn loop_detected(&self, params: &TrackParams, max_depth: u32) -> RpcError {
        let mut data = json!({
            "sessionId": params.session_id,
            "step": params.step,
            "depth": params.depth,
            "maxDepth": max_depth,
            "recommendation": Recommendation::Stop,
            "reason": format!("depth {} exceeds maxDepth {max_depth}", params.depth),
        });
        if let Some(trace) = self.traces.get(&params.session_id) {
            let mut steps: Vec<&str> = trace.steps.iter().map(|s| s.step.as_str()).collect();
            steps.push(&params.step);
            let analysis = analyze(&params.step, &steps, u32::MAX, u32::MAX);
            if let (Some(pattern), Some(object)) = (analysis.pattern, data.as_object_mut()) {
                object.insert("pattern".into(), pattern.into());
                object.insert("iterations".into(), analysis.iterations.into());
            }
        }
        RpcError::loop_detected().with_data(data)
    }

    fn trace_mut(
        &mut self,
        session_id: &str,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Result<&mut RecursionTrace, RpcError> {
        if !self.traces.contains_key(session_id) {
            make_room(&mut self.traces, self.limits.max_traces, sessions, "traces")?;
        }
        Ok(self.traces.entry(session_id.to_owned()).or_default())
    }

    /// `recursive.getTrace` (read-only).
    ///
    /// # Errors
    ///
    /// −32001 for an unknown session.
    pub fn get_trace(
        &self,
        session_id: &str,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Result<TraceResult, RpcError> {
        let facts = require_session(sessions, session_id)?;
        let max_depth = self.max_depth(session_id, &facts);
        Ok(match self.traces.get(session_id) {
            Some(trace) => TraceResult {
                steps: trace.steps.iter().cloned().collect(),
                max_depth,
                total_iterations: trace.total_iterations,
            },
            None => TraceResult {
                steps: Vec::new(),
                max_depth,
                total_iterations: 0,
            },
        })
    }

    /// `recursive.setMaxDepth`.
    ///
    /// # Errors
    ///
    /// −32001 for an unknown or ended session; −32602 for a max depth outside 1..=10 000.
    pub fn set_max_depth(
        &mut self,
        params: &SetMaxDepthParams,
        sessions: &(impl SessionLookup + ?Sized),
    ) -> Result<SetMaxDepthResult, RpcError> {
        if !(1..=MAX_MAX_DEPTH).contains(&params.max_depth) {
            return Err(invalid_params(
                format!("maxDepth: must be in 1..={MAX_MAX_DEPTH}"),
                Some("maxDepth"),
            ));
        }
        require_active(sessions, &params.session_id)?;
        self.trace_mut(&params.session_id, sessions)?.max_depth = Some(params.max_depth);
        Ok(SetMaxDepthResult { updated: true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_force(items: &[&str]) -> Option<Cycle> {
        let n = items.len();
        let period = (1..=n / 2).find(|&p| (n - p..n).all(|i| items[i] == items[i - p]))?;
        let mut start = n - 2 * period;
        while start > 0 && items[start - 1] == items[start - 1 + period] {
            start -= 1;
        }
        Some(Cycle {
            period,
            run_start: start,
        })
    }

    #[test]
    fn z_function_matches_brute_force() {
        let cases: [&[&str]; 8] = [
            &[],
            &["a"],
            &["a", "a"],
            &["a", "b"],
            &["a", "b", "a", "b"],
            &["x", "a", "b", "c", "a", "b", "c"],
            &["a", "a", "b", "a", "a", "b", "a", "a"],
            &["p", "w", "a", "r", "w", "a", "r"],
        ];
        for case in cases {
            assert_eq!(shortest_suffix_cycle(case), brute_force(case), "{case:?}");
        }
    }

    #[test]
    fn spec_example_numbers() {
        let stack = [
            "plan-research",
            "web-search",
            "analyze-results",
            "refine-search-query",
            "web-search",
            "analyze-results",
            "refine-search-query",
        ];
        let result = analyze("refine-search-query", &stack, 10, DEFAULT_MAX_DEPTH);
        assert_eq!(
            result.pattern.as_deref(),
            Some("refine-search-query -> web-search -> analyze-results")
        );
        assert_eq!((result.iterations, result.depth), (3, 7));
        assert_eq!(result.recommendation, Recommendation::Warn);
    }

    #[test]
    fn self_recursion_is_a_loop_of_one() {
        let result = analyze("a", &["a", "a"], 10, 32);
        assert_eq!(result.pattern.as_deref(), Some("a"));
        assert_eq!(result.iterations, 2);
        let result = analyze("a", &["a"], 10, 32);
        assert!(!result.is_looping);
    }
}
