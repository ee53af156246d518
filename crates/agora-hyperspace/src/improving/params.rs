//! Parameters of `improving.getExemplars`, `curate`, `augment`, `assessDifficulty` and
//! `getLibraryStats` (spec §5.2 "Methods"; `recordTrajectory`'s are in
//! [`super::trajectory::RecordParams`]). Refusals are −32602 naming the field.
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
use crate::params::{invalid_params, parse_params};

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
            invalid_params(
                format!(
                    "strategy: {s:?} is not ACCUMULATE, DATABASE_LEVEL, EXEMPLAR_LEVEL or HYBRID"
                ),
                Some("strategy"),
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawExemplars {
    task_type: String,
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    strategy: Option<String>,
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCurate {
    task_type: String,
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAugment {
    trajectory_id: String,
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
                return Err(invalid_params(
                    format!("mode: {other:?} is not NONE, FEEDBACK_ONLY or FULL_PIPELINE"),
                    Some("mode"),
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDifficulty {
    task_type: String,
    #[serde(default)]
    input: Value,
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawStats {
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
