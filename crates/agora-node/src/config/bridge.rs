//! `[bridge]`, `[[bridge.mcp]]` and `[[bridge.a2a]]`: the MCP servers and A2A agents this node
//! bridges into the mesh at start (Hyperspace spec §10; `docs/bridges.md`).

use serde::Deserialize;
use struct_patch::Patch;

use super::{ConfigError, invalid};

/// `[bridge]` settings.
#[derive(Clone, Debug, PartialEq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[bridge]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct BridgeConfig {
    /// MCP servers bridged at start (`[[bridge.mcp]]`: `name`, `url`, `command`, `args`, `env`,
    /// `cwd`, `tools`, `tags`, `price`, as `bridge.registerMCPServer` takes them).
    pub mcp: Vec<agora_bridge::mcp::ServerSpec>,
    /// A2A agents announced at start (`[[bridge.a2a]]`: `name`, `url` or `agentCard`, `tags`,
    /// `price`, as `bridge.announceA2AAgent` takes them).
    pub a2a: Vec<agora_bridge::a2a::AgentSpec>,
    /// Public JWK files (ES256, with a `kid`) of the keys A2A Agent Cards may be signed with
    /// (`a2a_keys`): a signed card verifies only under one of these, never under a key the
    /// card names.
    pub a2a_keys: Vec<std::path::PathBuf>,
    /// How long the node keeps an A2A task after its last change, in seconds
    /// (`a2a_task_ttl_secs`; the node as an A2A agent, `POST /a2a`).
    pub a2a_task_ttl_secs: u64,
    /// Most A2A tasks kept (`a2a_max_tasks`); beyond it the oldest finished task is forgotten.
    pub a2a_max_tasks: usize,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            mcp: Vec::new(),
            a2a: Vec::new(),
            a2a_keys: Vec::new(),
            a2a_task_ttl_secs: 24 * 3600,
            a2a_max_tasks: 10_000,
        }
    }
}

impl BridgeConfigPatch {
    /// Takes relative `a2a_keys` paths from `base` (the directory of the file the layer comes
    /// from).
    pub(super) fn rebase(&mut self, base: &std::path::Path) {
        for p in self.a2a_keys.iter_mut().flatten() {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }
}

impl BridgeConfig {
    /// Checks every bridged server's and agent's name.
    pub(super) fn settle(&mut self) -> Result<(), ConfigError> {
        if self.a2a_max_tasks == 0 {
            return Err(invalid("bridge.a2a_max_tasks", "must be at least 1"));
        }
        for spec in &self.a2a {
            spec.check().map_err(|e| invalid("bridge.a2a", &e))?;
        }
        let names = self.mcp.iter().map(|s| ("bridge.mcp", s.name.as_deref()));
        let names = names.chain(self.a2a.iter().map(|a| ("bridge.a2a", a.name.as_deref())));
        for (key, name) in names {
            if let Some(name) = name {
                agora_bridge::check_name(name).map_err(|e| invalid(key, &e))?;
            }
        }
        Ok(())
    }
}
