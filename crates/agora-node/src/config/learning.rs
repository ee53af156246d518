//! `[learning]`: the learning service (`AGORA_LEARNING_*`).

use serde::Deserialize;
use struct_patch::Patch;

use super::endpoint;
use super::{ConfigError, check, one_of};

/// `[learning]` settings (`docs/node.md` "Learning").
#[derive(Clone, Debug, PartialEq, Eq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[learning]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct LearningConfig {
    /// `builtin` or `openai` (`reflector`, `AGORA_LEARNING_REFLECTOR`).
    pub reflector: String,
    /// The `openai` reflector's API root, e.g. `http://127.0.0.1:11434/v1` (`base_url`,
    /// `AGORA_LEARNING_BASE_URL`).
    #[patch(skip_wrap)]
    pub base_url: Option<String>,
    /// The `openai` reflector's model (`model`, `AGORA_LEARNING_MODEL`).
    #[patch(skip_wrap)]
    pub model: Option<String>,
    /// The `openai` reflector's bearer token (`api_key`, `AGORA_LEARNING_API_KEY`).
    #[patch(skip_wrap)]
    pub api_key: Option<String>,
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
            base_url: None,
            model: None,
            api_key: None,
            timeout_ms: 20_000,
            max_playbooks: 1_000,
            max_bullets: 5_000,
        }
    }
}

impl LearningConfig {
    /// Checks each `[learning]` setting.
    pub(super) fn settle(&mut self) -> Result<(), ConfigError> {
        one_of(
            "learning.reflector",
            &mut self.reflector,
            &["builtin", "openai"],
        )?;
        endpoint::settle(
            "learning",
            &mut self.base_url,
            &mut self.model,
            &mut self.api_key,
        )?;
        check(
            "learning.timeout_ms",
            self.timeout_ms,
            100..=600_000,
            "must be 100..600000",
        )?;
        check(
            "learning.max_playbooks",
            self.max_playbooks,
            1..=1_000_000,
            "must be 1..1000000",
        )?;
        check(
            "learning.max_bullets",
            self.max_bullets,
            1..=100_000,
            "must be 1..100000",
        )
    }

    /// The checks across settings: the `openai` reflector needs its endpoint.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.reflector == "openai" {
            endpoint::validate(
                "learning",
                "reflector = \"openai\"",
                self.base_url.as_deref(),
                self.model.as_deref(),
                self.api_key.as_deref(),
            )?;
        }
        Ok(())
    }
}
