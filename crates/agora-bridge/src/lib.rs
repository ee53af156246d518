//! # agora-bridge — MCP and A2A bridged into the Hyperspace mesh, sans IO
//!
//! Hyperspace spec §10 ("Bridges"): §10.1 `registerMCPServer` makes an MCP server's tools tools
//! of the mesh, §10.2 `announceA2AAgent` makes an A2A agent's skills tools of the mesh; Agora
//! also serves the mesh's tools the other way, as an MCP server and as an A2A agent. This crate
//! holds what needs no socket: what a bridged server or agent is (as `bridge.*` params and
//! `[[bridge.*]]` in `agora.toml` give it), and the mappings of `../shared/notes/bridges.md` §7
//! between MCP tools and results, A2A skills and tasks, and mesh tools. The node
//! (`agora_node::bridge`, `agora_node::faces`) does the IO.
//!
//! | module | owns |
//! |---|---|
//! | [`mcp`] | an MCP server to bridge ([`mcp::ServerSpec`]) |
//! | [`a2a`] | an A2A agent to announce ([`a2a::AgentSpec`]); Agent Cards (shape, skills as tools, signatures); messages and tasks |
//! | [`mcp_server`] | the node as an MCP server: its tool list, calls, results and error translation |

pub mod a2a;
pub mod mcp;
pub mod mcp_server;

/// The vendor prefix of every key Agora adds to another protocol's open maps (MCP `_meta`, A2A
/// `metadata`): reverse DNS, so it cannot collide with the protocols' reserved prefixes.
pub const VENDOR_PREFIX: &str = "org.agora-mesh/";

/// A bridged server's or agent's name on this node: 1..=[`MAX_NAME_BYTES`] bytes of
/// `[A-Za-z0-9_-]`, since it prefixes tool names (`<name>.<tool>`) and owner ids.
pub const MAX_NAME_BYTES: usize = 64;

/// Checks a bridged server's or agent's name ([`MAX_NAME_BYTES`]).
///
/// # Errors
///
/// What is wrong with it, for the caller's error.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!("name must be 1..={MAX_NAME_BYTES} bytes"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "name {name:?} may hold only A-Z, a-z, 0-9, '_' and '-'"
        ));
    }
    Ok(())
}
