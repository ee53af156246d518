//! Trajectories (spec §5.2): what `improving.recordTrajectory` takes, checks and stores, and
//! what goes on `hyperspace/trajectories/{taskType}`.
//!
//! | bound ([`TrajectoryLimits`], default) | beyond it |
//! |---|---|
//! | `taskType` 1..=64 bytes of `a-z A-Z 0-9 . _ -` (it names a gossip topic) | −32008 |
//! | `steps` at most 256, each an object with `action` (1..=128 bytes), optional `tool` (≤ 128), `params`, `result`, `duration` (0..=a year, ms), `error` | −32008 |
//! | `reward` a number in [−1, 1] | −32008 |
//! | `input`, `output` any JSON, `metadata` an object or null; the whole trajectory at most 64 KiB serialized | −32008 |
//! | `metadata.exemplarIds` (optional) at most 32 trajectory ids: the exemplars this run used | −32008 |
//!
//! Every refusal is −32008 "Trajectory Rejected" with `data {field, reason}` naming the problem.
//!
//! State: `SUCCESS` when `reward ≥ 0.5`, else `FAILED`; `AUGMENTED` after an augmentation; a
//! `PENDING` trajectory is one recorded without a reward (`reward` omitted or null): kept, never
//! shared, never an exemplar. Ids are `traj-<8 lowercase hex>`.
//!
//! The content hash that deduplicates trajectories is SHA-256 over the canonical JSON (object
//! keys sorted, no whitespace) of `[taskType, input, output, steps, reward]`: the same run
//! recorded twice, or received from two peers, is one trajectory.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::jsonrpc::RpcError;

/// Reward at or above which a trajectory succeeded.
pub const SUCCESS_REWARD: f64 = 0.5;
/// Longest step `duration`, ms.
const MAX_DURATION_MS: f64 = 31_536_000_000.0;
/// Most `metadata.exemplarIds`.
pub const MAX_EXEMPLAR_IDS: usize = 32;

/// Bounds of a trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrajectoryLimits {
    /// Most steps.
    pub max_steps: usize,
    /// Longest trajectory, serialized.
    pub max_bytes: usize,
}

impl Default for TrajectoryLimits {
    fn default() -> Self {
        Self {
            max_steps: 256,
            max_bytes: 64 * 1024,
        }
    }
}

/// `TrajectoryState` (spec §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TrajectoryState {
    /// Recorded without a reward.
    Pending,
    /// `reward ≥ 0.5`.
    Success,
    /// `reward < 0.5`.
    Failed,
    /// Augmented (critique attached, or regenerated).
    Augmented,
}

impl TrajectoryState {
    /// Every state, in the spec's order.
    pub const ALL: [Self; 4] = [Self::Pending, Self::Success, Self::Failed, Self::Augmented];

    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Success => "SUCCESS",
            Self::Failed => "FAILED",
            Self::Augmented => "AUGMENTED",
        }
    }

    /// The state of a trajectory with `reward`.
    #[must_use]
    pub fn of(reward: Option<f64>) -> Self {
        match reward {
            None => Self::Pending,
            Some(r) if r >= SUCCESS_REWARD => Self::Success,
            Some(_) => Self::Failed,
        }
    }
}

/// The shared part of a trajectory: what is gossiped (after redaction) and what every library
/// holds, in the spec's camelCase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trajectory {
    /// `traj-<8 hex>`.
    pub trajectory_id: String,
    /// Its task type.
    pub task_type: String,
    /// The task's input.
    pub input: Value,
    /// Its output.
    pub output: Value,
    /// The steps, as given.
    pub steps: Vec<Value>,
    /// In [−1, 1]; `None` while pending.
    pub reward: Option<f64>,
    /// Metadata (an object or null).
    #[serde(default)]
    pub metadata: Value,
    /// The node that recorded it (its PeerId).
    pub peer_id: String,
    /// Unix milliseconds.
    pub created_at: u64,
}

/// `−32008` with `data {field, reason}`.
#[must_use]
pub fn rejected(field: &str, reason: impl Into<String>) -> RpcError {
    let reason = reason.into();
    RpcError::trajectory_rejected()
        .with_message(format!("Trajectory Rejected: {field}: {reason}"))
        .with_data(json!({ "field": field, "reason": reason }))
}

/// Whether `id` is a trajectory id (`traj-` and 8 lowercase hex digits).
#[must_use]
pub fn valid_trajectory_id(id: &str) -> bool {
    id.strip_prefix("traj-").is_some_and(|hex| {
        hex.len() == 8
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Whether `t` can be a task type (it names the topic `hyperspace/trajectories/{t}`).
#[must_use]
pub fn valid_task_type(t: &str) -> bool {
    (1..=64).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The trajectory id made of 4 random bytes.
#[must_use]
pub fn trajectory_id(random: [u8; 4]) -> String {
    format!("traj-{}", hex::encode(random))
}

pub(crate) fn check_steps(
    steps: &Value,
    limits: &TrajectoryLimits,
) -> Result<Vec<Value>, RpcError> {
    let Value::Array(items) = steps else {
        return Err(rejected("steps", "must be an array"));
    };
    if items.len() > limits.max_steps {
        return Err(rejected(
            "steps",
            format!("{} steps, at most {}", items.len(), limits.max_steps),
        ));
    }
    for (i, step) in items.iter().enumerate() {
        let field = |name: &str| format!("steps[{i}]{name}");
        let Value::Object(s) = step else {
            return Err(rejected(&field(""), "must be an object"));
        };
        match s.get("action") {
            Some(Value::String(a)) if !a.trim().is_empty() && a.len() <= 128 => {}
            _ => {
                return Err(rejected(
                    &field(".action"),
                    "a string of 1..=128 bytes is required",
                ));
            }
        }
        match s.get("tool") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if !t.trim().is_empty() && t.len() <= 128 => {}
            _ => return Err(rejected(&field(".tool"), "a string of 1..=128 bytes")),
        }
        match s.get("duration") {
            None | Some(Value::Null) => {}
            Some(d)
                if d.as_f64()
                    .is_some_and(|d| (0.0..=MAX_DURATION_MS).contains(&d)) => {}
            _ => {
                return Err(rejected(
                    &field(".duration"),
                    "a number of milliseconds from 0 to a year",
                ));
            }
        }
    }
    Ok(items.clone())
}

fn check_reward(reward: Option<&Value>) -> Result<Option<f64>, RpcError> {
    match reward {
        None | Some(Value::Null) => Ok(None),
        Some(r) => match r.as_f64() {
            Some(r) if (-1.0..=1.0).contains(&r) => Ok(Some(r)),
            _ => Err(rejected(
                "reward",
                format!("{r} is not a number in [-1, 1]"),
            )),
        },
    }
}

fn check_metadata(metadata: Option<&Value>) -> Result<Value, RpcError> {
    let metadata = metadata.cloned().unwrap_or(Value::Null);
    match &metadata {
        Value::Null => {}
        Value::Object(m) => {
            if let Some(ids) = m.get("exemplarIds") {
                let ok = ids.as_array().is_some_and(|ids| {
                    ids.len() <= MAX_EXEMPLAR_IDS
                        && ids
                            .iter()
                            .all(|id| id.as_str().is_some_and(valid_trajectory_id))
                });
                if !ok {
                    return Err(rejected(
                        "metadata.exemplarIds",
                        format!("at most {MAX_EXEMPLAR_IDS} trajectory ids (traj-<8 hex>)"),
                    ));
                }
            }
        }
        _ => return Err(rejected("metadata", "must be an object")),
    }
    Ok(metadata)
}

/// `improving.recordTrajectory(taskType, input, output, steps[], reward, metadata?, share?)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordParams {
    /// Task type.
    pub task_type: String,
    /// Input.
    pub input: Value,
    /// Output.
    pub output: Value,
    /// Steps.
    pub steps: Vec<Value>,
    /// Reward (`None`: pending).
    pub reward: Option<f64>,
    /// Metadata.
    pub metadata: Value,
    /// Share it over gossip (overrides `[improving] share`).
    pub share: Option<bool>,
}

const RECORD_NAMES: [&str; 7] = [
    "taskType", "input", "output", "steps", "reward", "metadata", "share",
];

impl RecordParams {
    /// Parses and checks the params (object, or positional in the spec's order).
    pub fn parse(params: &Value, limits: &TrajectoryLimits) -> Result<Self, RpcError> {
        let map: Map<String, Value> = match params {
            Value::Object(m) => m.clone(),
            Value::Array(items) if items.len() <= RECORD_NAMES.len() => RECORD_NAMES
                .iter()
                .zip(items)
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            _ => return Err(rejected("params", "must be an object")),
        };
        let size = serde_json::to_string(&map).map_or(usize::MAX, |s| s.len());
        if size > limits.max_bytes {
            return Err(rejected(
                "params",
                format!("{size} bytes, at most {}", limits.max_bytes),
            ));
        }
        let task_type = match map.get("taskType") {
            Some(Value::String(t)) if valid_task_type(t) => t.clone(),
            _ => {
                return Err(rejected(
                    "taskType",
                    "1..=64 bytes of letters, digits, '.', '_' or '-' are required",
                ));
            }
        };
        let steps = check_steps(map.get("steps").unwrap_or(&Value::Null), limits)?;
        let share = match map.get("share") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(rejected("share", "must be a boolean")),
        };
        Ok(Self {
            task_type,
            input: map.get("input").cloned().unwrap_or(Value::Null),
            output: map.get("output").cloned().unwrap_or(Value::Null),
            steps,
            reward: check_reward(map.get("reward"))?,
            metadata: check_metadata(map.get("metadata"))?,
            share,
        })
    }
}

/// JSON with object keys sorted and no whitespace.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

impl Trajectory {
    /// The content hash (hex) that deduplicates trajectories.
    #[must_use]
    pub fn content_hash(&self) -> String {
        let mut text = String::new();
        canonical(
            &json!([
                self.task_type,
                self.input,
                self.output,
                self.steps,
                self.reward
            ]),
            &mut text,
        );
        let digest = Sha256::digest(text.as_bytes());
        hex::encode(digest)
    }

    /// Its state (before any augmentation).
    #[must_use]
    pub fn base_state(&self) -> TrajectoryState {
        TrajectoryState::of(self.reward)
    }

    /// The `(action, tool)` pairs of its steps.
    #[must_use]
    pub fn actions(&self) -> Vec<(String, String)> {
        self.steps
            .iter()
            .map(|s| {
                (
                    s["action"].as_str().unwrap_or_default().to_owned(),
                    s["tool"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Checks a trajectory received from another node against the same rules as a recorded one
    /// (and its id and PeerId shape); the reward must be set (pending ones are never shared).
    pub fn check_received(&self, limits: &TrajectoryLimits) -> Result<(), RpcError> {
        if !valid_trajectory_id(&self.trajectory_id) {
            return Err(rejected("trajectoryId", "not traj-<8 hex>"));
        }
        if !valid_task_type(&self.task_type) {
            return Err(rejected("taskType", "not a task type"));
        }
        check_steps(&Value::Array(self.steps.clone()), limits)?;
        if check_reward(self.reward.map(|r| json!(r)).as_ref())?.is_none() {
            return Err(rejected("reward", "a shared trajectory has a reward"));
        }
        check_metadata(Some(&self.metadata))?;
        let size = serde_json::to_string(self).map_or(usize::MAX, |s| s.len());
        if size > limits.max_bytes + 1024 {
            return Err(rejected("trajectory", format!("{size} bytes")));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The spec's §5.2 `recordTrajectory` example.
    pub(crate) fn spec_params() -> Value {
        json!({
            "taskType": "web-research",
            "input": { "query": "latest breakthroughs in solid-state batteries" },
            "output": { "summary": "...", "confidence": 0.88 },
            "steps": [
                { "action": "search", "tool": "web-search", "params": { "q": "solid-state batteries 2026" }, "result": { "count": 47 }, "duration": 310 },
                { "action": "filter", "tool": "relevance-scorer", "params": { "threshold": 0.7 }, "result": { "kept": 12 }, "duration": 85 },
                { "action": "extract", "tool": "content-extractor", "params": { "urls": 12 }, "result": { "extracted": 11 }, "duration": 2400 },
                { "action": "synthesize", "tool": "summarizer", "result": { "tokens": 1200 }, "duration": 940 }
            ],
            "reward": 0.88,
            "metadata": { "model": "gemma-3-27b", "totalDuration": 3735 }
        })
    }

    #[test]
    fn the_spec_example_is_accepted_and_succeeds() {
        let p = RecordParams::parse(&spec_params(), &TrajectoryLimits::default()).unwrap();
        assert_eq!(p.task_type, "web-research");
        assert_eq!(p.steps.len(), 4);
        assert_eq!(TrajectoryState::of(p.reward), TrajectoryState::Success);
        assert_eq!(TrajectoryState::of(Some(0.49)), TrajectoryState::Failed);
        assert_eq!(TrajectoryState::of(None), TrajectoryState::Pending);
        assert_eq!(trajectory_id([0x7e, 0x2f, 0x9a, 0x1b]), "traj-7e2f9a1b");
        assert!(valid_trajectory_id("traj-7e2f9a1b"));
        assert!(!valid_trajectory_id("traj-7E2F9A1B"));
    }

    #[test]
    fn rejections_name_the_problem() {
        let limits = TrajectoryLimits::default();
        let with = |k: &str, v: Value| {
            let mut p = spec_params();
            p[k] = v;
            RecordParams::parse(&p, &limits).unwrap_err()
        };
        for (k, v, field) in [
            ("reward", json!(1.5), "reward"),
            ("reward", json!("high"), "reward"),
            ("taskType", json!(""), "taskType"),
            ("taskType", json!("a/b"), "taskType"),
            ("steps", json!({}), "steps"),
            ("steps", json!([{"tool": "x"}]), "steps[0].action"),
            (
                "steps",
                json!([{"action": "a", "duration": -3}]),
                "steps[0].duration",
            ),
            ("metadata", json!([1]), "metadata"),
            (
                "metadata",
                json!({"exemplarIds": ["nope"]}),
                "metadata.exemplarIds",
            ),
            ("share", json!("yes"), "share"),
        ] {
            let e = with(k, v);
            assert_eq!(e.code.0, -32008);
            assert_eq!(e.data.as_ref().unwrap()["field"], field, "{k}");
        }
        let many = json!(vec![json!({"action": "a"}); 257]);
        assert_eq!(with("steps", many).data.unwrap()["field"], "steps");
        let big = json!("x".repeat(70_000));
        assert_eq!(with("input", big).data.unwrap()["field"], "params");
    }

    #[test]
    fn the_content_hash_ignores_key_order_and_metadata() {
        let p = RecordParams::parse(&spec_params(), &TrajectoryLimits::default()).unwrap();
        let t = |metadata: Value, input: Value| Trajectory {
            trajectory_id: "traj-00000001".into(),
            task_type: p.task_type.clone(),
            input,
            output: p.output.clone(),
            steps: p.steps.clone(),
            reward: p.reward,
            metadata,
            peer_id: "a".into(),
            created_at: 1,
        };
        let a = t(json!({"x": 1}), json!({"a": 1, "b": 2}));
        let b = t(
            Value::Null,
            serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap(),
        );
        assert_eq!(a.content_hash(), b.content_hash());
        assert_ne!(
            a.content_hash(),
            t(Value::Null, json!({"a": 2})).content_hash()
        );
        assert!(a.check_received(&TrajectoryLimits::default()).is_ok());
    }
}
