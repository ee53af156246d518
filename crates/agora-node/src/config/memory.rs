//! `[memory]`: the memory service (`AGORA_MEMORY_*`).

use serde::Deserialize;

use super::{Config, ConfigError, Endpoint, Overrides, invalid, set_in_range};

/// `[memory]` settings (`docs/node.md` "Memory").
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryConfig {
    /// Hold memories and join the ring (`serve`, `AGORA_MEMORY_SERVE`; default true).
    pub serve: bool,
    /// `auto` (MiniLM when installed, else lexical), `minilm`, `lexical` or `openai`
    /// (`embedder`, `AGORA_MEMORY_EMBEDDER`).
    pub embedder: String,
    /// The `openai` embedder's endpoint (`base_url`, `model`, `api_key`;
    /// `AGORA_MEMORY_BASE_URL`, `AGORA_MEMORY_MODEL`, `AGORA_MEMORY_API_KEY`).
    pub endpoint: Endpoint,
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
            endpoint: Endpoint::default(),
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
            self.endpoint.validate("memory", "embedder = \"openai\"")?;
        }
        Ok(())
    }
}

/// The embedders `[memory] embedder` accepts.
pub const MEMORY_EMBEDDERS: [&str; 4] = ["auto", "minilm", "lexical", "openai"];

impl Config {
    /// Applies the `[memory]` settings of one layer.
    pub(super) fn apply_memory(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let m = &mut self.memory;
        if let Some(serve) = o.memory.serve {
            m.serve = serve;
        }
        if let Some(e) = &o.memory.embedder {
            let e = e.trim();
            if !MEMORY_EMBEDDERS.contains(&e) {
                return Err(invalid(
                    "memory.embedder",
                    &format!("{e:?} is not one of auto, minilm, lexical, openai"),
                ));
            }
            e.clone_into(&mut m.embedder);
        }
        m.endpoint.apply(
            "memory",
            o.memory.base_url.as_ref(),
            o.memory.model.as_ref(),
            o.memory.api_key.as_ref(),
        )?;
        set_in_range(
            &mut m.workers,
            "memory.workers",
            o.memory.workers,
            1..=64,
            "must be 1..64",
        )?;
        set_in_range(
            &mut m.max_memories,
            "memory.max_memories",
            o.memory.max_memories,
            1..=10_000_000,
            "must be 1..10000000",
        )?;
        set_in_range(
            &mut m.peer_rate,
            "memory.peer_rate",
            o.memory.peer_rate,
            1.0..=1_000_000.0,
            "must be 1..1000000",
        )?;
        Ok(())
    }
}

/// `[memory]` in one layer of settings (see [`Overrides`]).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryOverrides {
    /// `serve`.
    pub serve: Option<bool>,
    /// `embedder`.
    pub embedder: Option<String>,
    /// `base_url`.
    pub base_url: Option<String>,
    /// `model`.
    pub model: Option<String>,
    /// `api_key`.
    pub api_key: Option<String>,
    /// `workers`.
    pub workers: Option<usize>,
    /// `max_memories`.
    pub max_memories: Option<usize>,
    /// `peer_rate`.
    pub peer_rate: Option<f64>,
}
