//! `[improving]`: the self-improving service (`AGORA_IMPROVING_*`).

use serde::Deserialize;
use struct_patch::Patch;

use super::endpoint;
use super::{ConfigError, check, de, invalid};

/// `[improving]` settings (`docs/node.md` "Self-improving").
#[derive(Clone, Debug, PartialEq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[improving]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct ImprovingConfig {
    /// Share recorded trajectories on gossip unless a call says otherwise (`share`,
    /// `AGORA_IMPROVING_SHARE`; default false: sharing is opt-in, spec §9.3).
    pub share: bool,
    /// Task types to learn from: their trajectory topics are joined at start (`task_types`,
    /// `AGORA_IMPROVING_TASK_TYPES`, comma-separated).
    #[patch(attribute(serde(deserialize_with = "de::one_or_many")))]
    pub task_types: Vec<String>,
    /// Most trajectories per task type (`max_library`, `AGORA_IMPROVING_MAX_LIBRARY`; default
    /// 1,000).
    pub max_library: usize,
    /// Most task types (`max_task_types`, `AGORA_IMPROVING_MAX_TASK_TYPES`; default 256).
    pub max_task_types: usize,
    /// Least reward of a trajectory received from another node (`min_reward`,
    /// `AGORA_IMPROVING_MIN_REWARD`; default 0).
    pub min_reward: f64,
    /// The API root of `augment` FULL_PIPELINE's chat endpoint, e.g.
    /// `http://127.0.0.1:11434/v1` (`base_url`, `AGORA_IMPROVING_BASE_URL`).
    #[patch(skip_wrap)]
    pub base_url: Option<String>,
    /// The model of `augment` FULL_PIPELINE (`model`, `AGORA_IMPROVING_MODEL`).
    #[patch(skip_wrap)]
    pub model: Option<String>,
    /// The bearer token of `augment` FULL_PIPELINE's chat endpoint (`api_key`,
    /// `AGORA_IMPROVING_API_KEY`).
    #[patch(skip_wrap)]
    pub api_key: Option<String>,
    /// Deadline of one model call (`timeout_ms`, `AGORA_IMPROVING_TIMEOUT_MS`; default 20,000).
    pub timeout_ms: u64,
    /// Length of a pulse round in milliseconds (`pulse_round_ms`,
    /// `AGORA_IMPROVING_PULSE_ROUND_MS`; default 90,000, the settlement rounds'; spec §9.4,
    /// `agora_hyperspace::pulse`). Every node of a mesh must use the same: the round's seed
    /// depends on it.
    pub pulse_round_ms: u64,
}

impl Default for ImprovingConfig {
    fn default() -> Self {
        Self {
            share: false,
            task_types: Vec::new(),
            max_library: 1_000,
            max_task_types: 256,
            min_reward: 0.0,
            base_url: None,
            model: None,
            api_key: None,
            timeout_ms: 20_000,
            pulse_round_ms: agora_hyperspace::pulse::DEFAULT_ROUND_MS,
        }
    }
}

impl ImprovingConfig {
    /// Checks each `[improving]` setting.
    pub(super) fn settle(&mut self) -> Result<(), ConfigError> {
        for t in &self.task_types {
            if !agora_hyperspace::improving::trajectory::valid_task_type(t) {
                return Err(invalid(
                    "improving.task_types",
                    &format!("{t:?} is not 1..=64 bytes of letters, digits, '.', '_' or '-'"),
                ));
            }
        }
        check(
            "improving.max_library",
            self.max_library,
            1..=1_000_000,
            "must be 1..1000000",
        )?;
        check(
            "improving.max_task_types",
            self.max_task_types,
            1..=100_000,
            "must be 1..100000",
        )?;
        check(
            "improving.min_reward",
            self.min_reward,
            -1.0..=1.0,
            "must be -1..1",
        )?;
        endpoint::settle(
            "improving",
            &mut self.base_url,
            &mut self.model,
            &mut self.api_key,
        )?;
        check(
            "improving.timeout_ms",
            self.timeout_ms,
            100..=600_000,
            "must be 100..600000",
        )?;
        check(
            "improving.pulse_round_ms",
            self.pulse_round_ms,
            1_000..=3_600_000,
            "must be 1000..3600000",
        )
    }

    /// The checks across settings: a `base_url` or a `model` asks for the whole endpoint.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.base_url.is_some() || self.model.is_some() {
            endpoint::validate(
                "improving",
                "base_url or model",
                self.base_url.as_deref(),
                self.model.as_deref(),
                self.api_key.as_deref(),
            )?;
        }
        Ok(())
    }
}
