//! `[learning]`: the learning service (`AGORA_LEARNING_*`).

use serde::Deserialize;

use super::{Config, ConfigError, Endpoint, Overrides, invalid, set_in_range};

/// `[learning]` settings (`docs/node.md` "Learning").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LearningConfig {
    /// `builtin` or `openai` (`reflector`, `AGORA_LEARNING_REFLECTOR`).
    pub reflector: String,
    /// The `openai` reflector's chat endpoint (`base_url`, `model`, `api_key`;
    /// `AGORA_LEARNING_BASE_URL`, `AGORA_LEARNING_MODEL`, `AGORA_LEARNING_API_KEY`).
    pub endpoint: Endpoint,
    /// Deadline of one LLM reflection (`timeout_ms`, `AGORA_LEARNING_TIMEOUT_MS`; default
    /// 20,000).
    pub timeout_ms: u64,
    /// Most playbooks (`max_playbooks`, `AGORA_LEARNING_MAX_PLAYBOOKS`; default 1,000).
    pub max_playbooks: usize,
    /// Most bullets per playbook (`max_bullets`, `AGORA_LEARNING_MAX_BULLETS`; default 5,000).
    pub max_bullets: usize,
}

impl Default for LearningConfig {
    fn default() -> Self {
        Self {
            reflector: "builtin".to_owned(),
            endpoint: Endpoint::default(),
            timeout_ms: 20_000,
            max_playbooks: 1_000,
            max_bullets: 5_000,
        }
    }
}

impl Config {
    /// Applies the `[learning]` settings of one layer.
    pub(super) fn apply_learning(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let l = &mut self.learning;
        if let Some(r) = &o.learning.reflector {
            let r = r.trim();
            if !["builtin", "openai"].contains(&r) {
                return Err(invalid(
                    "learning.reflector",
                    &format!("{r:?} is not builtin or openai"),
                ));
            }
            r.clone_into(&mut l.reflector);
        }
        l.endpoint.apply(
            "learning",
            o.learning.base_url.as_ref(),
            o.learning.model.as_ref(),
            o.learning.api_key.as_ref(),
        )?;
        set_in_range(
            &mut l.timeout_ms,
            "learning.timeout_ms",
            o.learning.timeout_ms,
            100..=600_000,
            "must be 100..600000",
        )?;
        set_in_range(
            &mut l.max_playbooks,
            "learning.max_playbooks",
            o.learning.max_playbooks,
            1..=1_000_000,
            "must be 1..1000000",
        )?;
        set_in_range(
            &mut l.max_bullets,
            "learning.max_bullets",
            o.learning.max_bullets,
            1..=100_000,
            "must be 1..100000",
        )?;
        Ok(())
    }
}

/// `[learning]` in one layer of settings (see [`Overrides`]).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LearningOverrides {
    /// `reflector`.
    pub reflector: Option<String>,
    /// `base_url`.
    pub base_url: Option<String>,
    /// `model`.
    pub model: Option<String>,
    /// `api_key`.
    pub api_key: Option<String>,
    /// `timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// `max_playbooks`.
    pub max_playbooks: Option<usize>,
    /// `max_bullets`.
    pub max_bullets: Option<usize>,
}
