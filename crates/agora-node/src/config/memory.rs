//! `[memory]`: the memory service (`AGORA_MEMORY_*`).

use serde::Deserialize;
use struct_patch::Patch;

use super::endpoint;
use super::{ConfigError, check, one_of};

/// `[memory]` settings (`docs/node.md` "Memory").
#[derive(Clone, Debug, PartialEq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[memory]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct MemoryConfig {
    /// Hold memories and join the ring (`serve`, `AGORA_MEMORY_SERVE`; default true).
    pub serve: bool,
    /// `auto` (MiniLM when installed, else lexical), `minilm`, `lexical` or `openai`
    /// (`embedder`, `AGORA_MEMORY_EMBEDDER`).
    pub embedder: String,
    /// The `openai` embedder's API root, e.g. `http://127.0.0.1:11434/v1` (`base_url`,
    /// `AGORA_MEMORY_BASE_URL`).
    #[patch(skip_wrap)]
    pub base_url: Option<String>,
    /// The `openai` embedder's model (`model`, `AGORA_MEMORY_MODEL`).
    #[patch(skip_wrap)]
    pub model: Option<String>,
    /// The `openai` embedder's bearer token (`api_key`, `AGORA_MEMORY_API_KEY`).
    #[patch(skip_wrap)]
    pub api_key: Option<String>,
    /// Worker threads for embeddings and searches (`workers`, `AGORA_MEMORY_WORKERS`; default 2).
    pub workers: usize,
    /// Most memories this node holds (`max_memories`, `AGORA_MEMORY_MAX_MEMORIES`; default
    /// 200,000).
    pub max_memories: usize,
    /// Node-to-node memory requests per second accepted from one peer (`peer_rate`,
    /// `AGORA_MEMORY_PEER_RATE`; default 2,000).
    pub peer_rate: f64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            serve: true,
            embedder: "auto".to_owned(),
            base_url: None,
            model: None,
            api_key: None,
            workers: 2,
            max_memories: 200_000,
            peer_rate: 2_000.0,
        }
    }
}

impl MemoryConfig {
    /// The checks across settings: `openai` needs its endpoint.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.embedder == "openai" {
            endpoint::validate(
                "memory",
                "embedder = \"openai\"",
                self.base_url.as_deref(),
                self.model.as_deref(),
                self.api_key.as_deref(),
            )?;
        }
        Ok(())
    }

    /// Checks each `[memory]` setting.
    pub(super) fn settle(&mut self) -> Result<(), ConfigError> {
        one_of("memory.embedder", &mut self.embedder, &MEMORY_EMBEDDERS)?;
        endpoint::settle(
            "memory",
            &mut self.base_url,
            &mut self.model,
            &mut self.api_key,
        )?;
        check("memory.workers", self.workers, 1..=64, "must be 1..64")?;
        check(
            "memory.max_memories",
            self.max_memories,
            1..=10_000_000,
            "must be 1..10000000",
        )?;
        check(
            "memory.peer_rate",
            self.peer_rate,
            1.0..=1_000_000.0,
            "must be 1..1000000",
        )
    }
}

/// The embedders `[memory] embedder` accepts.
pub const MEMORY_EMBEDDERS: [&str; 4] = ["auto", "minilm", "lexical", "openai"];
