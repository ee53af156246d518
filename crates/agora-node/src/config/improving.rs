//! `[improving]`: the self-improving service (`AGORA_IMPROVING_*`).

use serde::Deserialize;

use super::{Config, ConfigError, Endpoint, Overrides, invalid, set_in_range};

/// `[improving]` settings (`docs/node.md` "Self-improving").
#[derive(Clone, Debug, PartialEq)]
pub struct ImprovingConfig {
    /// Share recorded trajectories on gossip unless a call says otherwise (`share`,
    /// `AGORA_IMPROVING_SHARE`; default false: sharing is opt-in, spec §9.3).
    pub share: bool,
    /// Task types to learn from: their trajectory topics are joined at start (`task_types`,
    /// `AGORA_IMPROVING_TASK_TYPES`, comma-separated).
    pub task_types: Vec<String>,
    /// Most trajectories per task type (`max_library`, `AGORA_IMPROVING_MAX_LIBRARY`; default
    /// 1,000).
    pub max_library: usize,
    /// Most task types (`max_task_types`, `AGORA_IMPROVING_MAX_TASK_TYPES`; default 256).
    pub max_task_types: usize,
    /// Least reward of a trajectory received from another node (`min_reward`,
    /// `AGORA_IMPROVING_MIN_REWARD`; default 0).
    pub min_reward: f64,
    /// The chat endpoint of `augment` FULL_PIPELINE (`base_url`, `model`, `api_key`;
    /// `AGORA_IMPROVING_BASE_URL`, `AGORA_IMPROVING_MODEL`, `AGORA_IMPROVING_API_KEY`).
    pub endpoint: Endpoint,
    /// Deadline of one model call (`timeout_ms`, `AGORA_IMPROVING_TIMEOUT_MS`; default 20,000).
    pub timeout_ms: u64,
}

impl Default for ImprovingConfig {
    fn default() -> Self {
        Self {
            share: false,
            task_types: Vec::new(),
            max_library: 1_000,
            max_task_types: 256,
            min_reward: 0.0,
            endpoint: Endpoint::default(),
            timeout_ms: 20_000,
        }
    }
}

impl Config {
    /// Applies the `[improving]` settings of one layer.
    pub(super) fn apply_improving(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let i = &mut self.improving;
        if let Some(b) = o.improving.share {
            i.share = b;
        }
        if !o.improving.task_types.is_empty() {
            for t in &o.improving.task_types {
                if !agora_hyperspace::improving::trajectory::valid_task_type(t) {
                    return Err(invalid(
                        "improving.task_types",
                        &format!("{t:?} is not 1..=64 bytes of letters, digits, '.', '_' or '-'"),
                    ));
                }
            }
            i.task_types.clone_from(&o.improving.task_types);
        }
        set_in_range(
            &mut i.max_library,
            "improving.max_library",
            o.improving.max_library,
            1..=1_000_000,
            "must be 1..1000000",
        )?;
        set_in_range(
            &mut i.max_task_types,
            "improving.max_task_types",
            o.improving.max_task_types,
            1..=100_000,
            "must be 1..100000",
        )?;
        set_in_range(
            &mut i.min_reward,
            "improving.min_reward",
            o.improving.min_reward,
            -1.0..=1.0,
            "must be -1..1",
        )?;
        i.endpoint.apply(
            "improving",
            o.improving.base_url.as_ref(),
            o.improving.model.as_ref(),
            o.improving.api_key.as_ref(),
        )?;
        set_in_range(
            &mut i.timeout_ms,
            "improving.timeout_ms",
            o.improving.timeout_ms,
            100..=600_000,
            "must be 100..600000",
        )?;
        Ok(())
    }
}

/// `[improving]` in one layer of settings (see [`Overrides`]).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImprovingOverrides {
    /// `share`.
    pub share: Option<bool>,
    /// `task_types`.
    #[serde(deserialize_with = "super::file::one_or_many")]
    pub task_types: Vec<String>,
    /// `max_library`.
    pub max_library: Option<usize>,
    /// `max_task_types`.
    pub max_task_types: Option<usize>,
    /// `min_reward`.
    pub min_reward: Option<f64>,
    /// `base_url`.
    pub base_url: Option<String>,
    /// `model`.
    pub model: Option<String>,
    /// `api_key`.
    pub api_key: Option<String>,
    /// `timeout_ms`.
    pub timeout_ms: Option<u64>,
}
