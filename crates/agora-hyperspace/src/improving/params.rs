//! Parameters of `improving.getExemplars`, `curate`, `augment`, `assessDifficulty` and
//! `getLibraryStats` (spec §5.2 "Methods"; `recordTrajectory`'s are in
//! [`super::trajectory::RecordParams`]). Refusals are −32602 naming the field. [`DOCS`] describes
//! all six methods (params, results, errors, examples) for the OpenRPC document.
//!
//! | param | bound |
//! |---|---|
//! | `taskType` | [`super::trajectory::valid_task_type`] |
//! | `limit` | 1..=20, default 3 |
//! | `strategy` | `ACCUMULATE` \| `DATABASE_LEVEL` \| `EXEMPLAR_LEVEL` (default) \| `HYBRID` |
//! | `minReward` | −1..=1, default 0 |
//! | `trajectoryId` | `traj-<8 hex>` |
//! | `mode` | `NONE` \| `FEEDBACK_ONLY` (default) \| `FULL_PIPELINE` |
//! | `input` | any JSON of at most 16 KiB; `samples` at most 100 numbers or strings |

use serde::Deserialize;
use serde_json::Value;

use super::library::Strategy;
use super::trajectory::{valid_task_type, valid_trajectory_id};
use crate::jsonrpc::RpcError;
use schemars::{JsonSchema, json_schema};
use serde_json::json;

use super::{
    ASSESS_DIFFICULTY, AUGMENT, CURATE, GET_EXEMPLARS, GET_LIBRARY_STATS, RECORD_TRAJECTORY,
};
use crate::jsonrpc::RpcCode;
use crate::openrpc::{MethodDoc, params_of};
use crate::params::{invalid_choice, invalid_params, parse_params};

/// Default `limit` of `getExemplars`.
pub const DEFAULT_EXEMPLARS: usize = 3;
/// Largest `limit` of `getExemplars`.
pub const MAX_EXEMPLARS: usize = 20;
/// Most `samples`.
pub const MAX_SAMPLES: usize = 100;
/// Largest `input` of `assessDifficulty`, serialized.
pub const MAX_INPUT_BYTES: usize = 16 * 1024;

/// `AugmentationMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AugmentMode {
    /// Nothing.
    None,
    /// A critique from the library's successful runs.
    #[default]
    FeedbackOnly,
    /// Critique, regenerate and rephrase with a model (SiriuS).
    FullPipeline,
}

fn task_type(t: String) -> Result<String, RpcError> {
    if valid_task_type(&t) {
        Ok(t)
    } else {
        Err(invalid_params(
            "taskType: 1..=64 bytes of letters, digits, '.', '_' or '-'",
            Some("taskType"),
        ))
    }
}

fn strategy(s: Option<String>) -> Result<Strategy, RpcError> {
    match s {
        None => Ok(Strategy::default()),
        Some(s) => Strategy::parse(&s).ok_or_else(|| {
            invalid_choice(
                "strategy",
                &s,
                &["ACCUMULATE", "DATABASE_LEVEL", "EXEMPLAR_LEVEL", "HYBRID"],
            )
        }),
    }
}

/// `getExemplars(taskType, limit?, strategy?, minReward?)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExemplarParams {
    /// Task type.
    pub task_type: String,
    /// Most exemplars.
    pub limit: usize,
    /// Strategy.
    pub strategy: Strategy,
    /// Least reward.
    pub min_reward: f64,
}

/// Params of `improving.getExemplars(taskType, limit?, strategy?, minReward?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawExemplars {
    /// The task type: 1..=64 bytes of letters, digits, `.`, `_` or `-`.
    task_type: String,
    /// Most exemplars, 1..=20 (default 3).
    #[serde(default)]
    limit: Option<u64>,
    /// `ACCUMULATE`, `DATABASE_LEVEL`, `EXEMPLAR_LEVEL` (default) or `HYBRID`.
    #[serde(default)]
    strategy: Option<String>,
    /// Least reward (default 0).
    #[serde(default)]
    min_reward: Option<f64>,
}

impl ExemplarParams {
    /// Parses and checks.
    pub fn parse(params: &Value) -> Result<Self, RpcError> {
        let raw: RawExemplars =
            parse_params(params, &["taskType", "limit", "strategy", "minReward"])?;
        let limit = match raw.limit {
            None => DEFAULT_EXEMPLARS,
            Some(n) if (1..=MAX_EXEMPLARS as u64).contains(&n) => n as usize,
            Some(n) => {
                return Err(invalid_params(
                    format!("limit: {n} is not within 1..={MAX_EXEMPLARS}"),
                    Some("limit"),
                ));
            }
        };
        let min_reward = match raw.min_reward {
            None => 0.0,
            Some(r) if (-1.0..=1.0).contains(&r) => r,
            Some(r) => {
                return Err(invalid_params(
                    format!("minReward: {r} is not within -1..=1"),
                    Some("minReward"),
                ));
            }
        };
        Ok(Self {
            task_type: task_type(raw.task_type)?,
            limit,
            strategy: strategy(raw.strategy)?,
            min_reward,
        })
    }
}

/// `curate(taskType, strategy?)`.
#[derive(Debug, Clone, PartialEq)]
pub struct CurateParams {
    /// Task type.
    pub task_type: String,
    /// Strategy.
    pub strategy: Strategy,
}

/// Params of `improving.curate(taskType, strategy?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawCurate {
    /// The task type.
    task_type: String,
    /// `ACCUMULATE`, `DATABASE_LEVEL`, `EXEMPLAR_LEVEL` (default) or `HYBRID`.
    #[serde(default)]
    strategy: Option<String>,
}

impl CurateParams {
    /// Parses and checks.
    pub fn parse(params: &Value) -> Result<Self, RpcError> {
        let raw: RawCurate = parse_params(params, &["taskType", "strategy"])?;
        Ok(Self {
            task_type: task_type(raw.task_type)?,
            strategy: strategy(raw.strategy)?,
        })
    }
}

/// `augment(trajectoryId, mode?)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AugmentParams {
    /// Trajectory.
    pub trajectory_id: String,
    /// Mode.
    pub mode: AugmentMode,
}

/// Params of `improving.augment(trajectoryId, mode?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawAugment {
    /// The trajectory: `traj-<8 hex>`.
    trajectory_id: String,
    /// `NONE`, `FEEDBACK_ONLY` (default) or `FULL_PIPELINE`.
    #[serde(default)]
    mode: Option<String>,
}

impl AugmentParams {
    /// Parses and checks.
    pub fn parse(params: &Value) -> Result<Self, RpcError> {
        let raw: RawAugment = parse_params(params, &["trajectoryId", "mode"])?;
        if !valid_trajectory_id(&raw.trajectory_id) {
            return Err(invalid_params(
                "trajectoryId: not traj-<8 hex>",
                Some("trajectoryId"),
            ));
        }
        let mode = match raw.mode.as_deref() {
            None | Some("FEEDBACK_ONLY") => AugmentMode::FeedbackOnly,
            Some("NONE") => AugmentMode::None,
            Some("FULL_PIPELINE") => AugmentMode::FullPipeline,
            Some(other) => {
                return Err(invalid_choice(
                    "mode",
                    other,
                    &["NONE", "FEEDBACK_ONLY", "FULL_PIPELINE"],
                ));
            }
        };
        Ok(Self {
            trajectory_id: raw.trajectory_id,
            mode,
        })
    }
}

/// `assessDifficulty(taskType, input, samples?)`.
#[derive(Debug, Clone, PartialEq)]
pub struct DifficultyParams {
    /// Task type.
    pub task_type: String,
    /// The task's input.
    pub input: Value,
    /// Outcomes of runs: rewards (numbers) or answers (strings).
    pub samples: Option<Vec<Value>>,
}

/// Params of `improving.assessDifficulty(taskType, input, samples?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawDifficulty {
    /// The task type.
    task_type: String,
    /// The task's input (at most 16 KiB serialized).
    #[serde(default)]
    input: Value,
    /// Outcomes of k runs: rewards (numbers) or answers (strings), at most 100.
    #[serde(default)]
    samples: Option<Vec<Value>>,
}

impl DifficultyParams {
    /// Parses and checks.
    pub fn parse(params: &Value) -> Result<Self, RpcError> {
        let raw: RawDifficulty = parse_params(params, &["taskType", "input", "samples"])?;
        let size = serde_json::to_string(&raw.input).map_or(usize::MAX, |s| s.len());
        if size > MAX_INPUT_BYTES {
            return Err(invalid_params(
                format!("input: {size} bytes, at most {MAX_INPUT_BYTES}"),
                Some("input"),
            ));
        }
        if let Some(s) = &raw.samples {
            let numbers = s.iter().all(|v| v.as_f64().is_some_and(f64::is_finite));
            let strings = s
                .iter()
                .all(|v| v.as_str().is_some_and(|t| t.len() <= 1024));
            if s.len() > MAX_SAMPLES || !(numbers || strings) {
                return Err(invalid_params(
                    format!(
                        "samples: at most {MAX_SAMPLES} rewards (numbers) or answers (strings of at most 1,024 bytes), not mixed"
                    ),
                    Some("samples"),
                ));
            }
        }
        Ok(Self {
            task_type: task_type(raw.task_type)?,
            input: raw.input,
            samples: raw.samples,
        })
    }
}

/// `getLibraryStats(taskType?)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsParams {
    /// One task type, or all.
    pub task_type: Option<String>,
}

/// Params of `improving.getLibraryStats(taskType?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawStats {
    /// One task type; every library when absent.
    #[serde(default)]
    task_type: Option<String>,
}

impl StatsParams {
    /// Parses and checks.
    pub fn parse(params: &Value) -> Result<Self, RpcError> {
        let raw: RawStats = parse_params(params, &["taskType"])?;
        Ok(Self {
            task_type: raw.task_type.map(task_type).transpose()?,
        })
    }
}

/// What each `improving.*` method takes, returns and may fail with ([`crate::openrpc`]).
pub const DOCS: [MethodDoc; 6] = [
    MethodDoc {
        name: RECORD_TRAJECTORY,
        summary: "Records a run (input, output, steps, reward) in the task type's library and gossips it.",
        params: |_| {
            json_schema!({
                "type": "object",
                "required": ["taskType", "input", "output", "steps"],
                "properties": {
                    "taskType": {"type": "string", "description": "1..=64 bytes of letters, digits, `.`, `_` or `-`."},
                    "input": {"description": "The task's input."},
                    "output": {"description": "What the run produced."},
                    "steps": {"type": "array", "items": {
                        "type": "object",
                        "required": ["action"],
                        "properties": {
                            "action": {"type": "string"},
                            "tool": {"type": "string"},
                            "params": {},
                            "result": {},
                            "duration": {"type": "number", "description": "Milliseconds."},
                            "error": {}
                        }
                    }},
                    "reward": {"type": "number", "minimum": -1, "maximum": 1, "description": "Omitted: the trajectory stays PENDING."},
                    "metadata": {"type": "object", "description": "`exemplarIds`: the exemplars this run used."},
                    "share": {"type": "boolean", "description": "Gossip it to the mesh (default per the node's settings)."}
                }
            })
        },
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["trajectoryId", "state"],
                "properties": {
                    "trajectoryId": {"type": "string"},
                    "state": {"type": "string"},
                    "gossipedTo": {"type": "integer"},
                    "shared": {"type": "boolean"},
                    "redactions": {"type": "integer"},
                    "kept": {"type": "boolean"},
                    "duplicate": {"type": "boolean"}
                }
            })
        },
        errors: &[RpcCode::TRAJECTORY_REJECTED, RpcCode::RATE_LIMITED],
        example: || {
            json!({
                "taskType": "web-research",
                "input": {"query": "solid-state battery breakthroughs 2026"},
                "output": {"summary": "...", "confidence": 0.91},
                "steps": [
                    {"action": "discover", "tool": "tool.discover", "duration": 45},
                    {"action": "search", "tool": "web-search", "duration": 195},
                    {"action": "synthesize", "tool": "summarizer", "duration": 720}
                ],
                "reward": 0.91
            })
        },
    },
    MethodDoc {
        name: GET_EXEMPLARS,
        summary: "The best past runs of a task type, to show a model as examples.",
        params: params_of::<RawExemplars>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["exemplars", "librarySize", "avgReward", "strategy"],
                "properties": {
                    "exemplars": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "trajectoryId": {"type": "string"},
                            "input": {}, "output": {}, "steps": {"type": "array"},
                            "reward": {"type": "number"},
                            "state": {"type": "string"},
                            "utilityScore": {"type": "number"},
                            "usageCount": {"type": "integer"},
                            "peerId": {"type": "string"},
                            "critique": {"type": "string"}
                        }
                    }},
                    "librarySize": {"type": "integer"},
                    "avgReward": {"type": "number"},
                    "strategy": {"type": "string"}
                }
            })
        },
        errors: &[],
        example: || json!({"taskType": "web-research", "limit": 3, "minReward": 0.8}),
    },
    MethodDoc {
        name: CURATE,
        summary: "Prunes a task type's library by its strategy.",
        params: params_of::<RawCurate>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["kept", "pruned", "librarySize", "prunedIds", "strategy"],
                "properties": {
                    "kept": {"type": "integer"},
                    "pruned": {"type": "integer"},
                    "librarySize": {"type": "integer"},
                    "prunedIds": {"type": "array", "items": {"type": "string"}},
                    "strategy": {"type": "string"}
                }
            })
        },
        errors: &[],
        example: || json!({"taskType": "web-research", "strategy": "EXEMPLAR_LEVEL"}),
    },
    MethodDoc {
        name: AUGMENT,
        summary: "Critiques (and optionally regenerates) a failed run from the library's successes.",
        params: params_of::<RawAugment>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["augmented", "newState"],
                "properties": {
                    "augmented": {"type": "boolean"},
                    "newState": {"type": "string"},
                    "critique": {"type": "string"},
                    "regenerated": {}
                }
            })
        },
        errors: &[RpcCode::RATE_LIMITED],
        example: || json!({"trajectoryId": "traj-0a1b2c3d", "mode": "FEEDBACK_ONLY"}),
    },
    MethodDoc {
        name: ASSESS_DIFFICULTY,
        summary: "How hard a task is, from the library or from the outcomes of k runs.",
        params: params_of::<RawDifficulty>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["difficulty", "passRate", "recommendation"],
                "properties": {
                    "difficulty": {"type": "string"},
                    "passRate": {"type": "number"},
                    "recommendation": {"type": "string"},
                    "runs": {"type": "integer"},
                    "basis": {"type": "string"},
                    "confidence": {"type": "number"}
                }
            })
        },
        errors: &[],
        example: || json!({"taskType": "web-research", "input": {"query": "solid-state batteries"}, "samples": [0.9, 0.4, 1.0]}),
    },
    MethodDoc {
        name: GET_LIBRARY_STATS,
        summary: "Trajectory counts by state, mean reward and top contributors.",
        params: params_of::<RawStats>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["total", "byState", "avgReward", "topContributors"],
                "properties": {
                    "total": {"type": "integer"},
                    "byState": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "avgReward": {"type": "number"},
                    "topContributors": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "peerId": {"type": "string"},
                            "trajectories": {"type": "integer"},
                            "reputation": {"type": "number"},
                            "uses": {"type": "integer"}
                        }
                    }}
                }
            })
        },
        errors: &[],
        example: || json!({"taskType": "web-research"}),
    },
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn the_spec_get_exemplars_request_parses_and_bad_ones_name_their_field() {
        let p = ExemplarParams::parse(&json!({
            "taskType": "web-research", "limit": 3, "strategy": "EXEMPLAR_LEVEL", "minReward": 0.7
        }))
        .unwrap();
        assert_eq!(
            (p.limit, p.strategy, p.min_reward),
            (3, Strategy::ExemplarLevel, 0.7)
        );
        for (params, field) in [
            (json!({"taskType": "x", "limit": 0}), "limit"),
            (json!({"taskType": "x", "strategy": "BEST"}), "strategy"),
            (json!({"taskType": "x", "minReward": 2}), "minReward"),
            (json!({"taskType": "x y"}), "taskType"),
        ] {
            let e = ExemplarParams::parse(&params).unwrap_err();
            assert_eq!(e.data.unwrap()["field"], field);
        }
        assert_eq!(
            AugmentParams::parse(&json!(["traj-7e2f9a1b"]))
                .unwrap()
                .mode,
            AugmentMode::FeedbackOnly
        );
        assert!(AugmentParams::parse(&json!(["traj-7e2f9a1b", "ALL"])).is_err());
        assert!(DifficultyParams::parse(&json!({"taskType": "x", "samples": [1, "a"]})).is_err());
        assert!(StatsParams::parse(&json!({})).unwrap().task_type.is_none());
        assert_eq!(
            CurateParams::parse(&json!(["x", "HYBRID"]))
                .unwrap()
                .strategy,
            Strategy::Hybrid
        );
    }
}
