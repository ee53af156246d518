//! MCP (Hyperspace spec §10.1; the MCP specification, revisions 2025-11-25 and 2026-07-28): an
//! MCP server to bridge, and the mappings between MCP and the mesh (`../shared/notes/bridges.md`
//! §7), without IO.
//!
//! | module | owns |
//! |---|---|
//! | this one | [`ServerSpec`] and what it designates: the server's name and its [`Transport`] |
//! | [`tools`] | an MCP `Tool` as a mesh tool ([`tools::bridge_tool`]): stable id, name, schema, tags |
//! | [`result`] | a `CallToolResult` as `tool.invoke`'s `result` ([`result::map_result`]) |
//! | [`errors`] | MCP errors translated to Hyperspace codes ([`errors::translate`]) |
//! | [`env`](mod@env) | the environment of a stdio child ([`env::child_env`]) |
//! | [`era`] | the MCP era a negotiated protocol version belongs to ([`era::Era`]) |

pub mod env;
pub mod era;
pub mod errors;
pub mod result;
pub mod tools;

use std::collections::BTreeMap;

use agora_hyperspace::payments::Price;
use serde::{Deserialize, Serialize};

/// `bridge.registerMCPServer(ServerSpec)` → `{serverId, tools: [toolId…]}`.
pub const REGISTER: &str = "bridge.registerMCPServer";
/// `bridge.listMCPServers()` → `{servers: […]}`.
pub const LIST: &str = "bridge.listMCPServers";
/// `bridge.unregisterMCPServer({serverId})` → `{serverId, removed: true}`.
pub const UNREGISTER: &str = "bridge.unregisterMCPServer";
/// The MCP bridge's JSON-RPC methods (the node's call router routes these exact names to it).
pub const METHODS: [&str; 3] = [REGISTER, LIST, UNREGISTER];

/// An MCP server to bridge: the params of `bridge.registerMCPServer` and one `[[bridge.mcp]]`
/// of `agora.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerSpec {
    /// Its name on this node (tools are named `<name>.<tool>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `stdio://<name>` (a child process: `command`, `args`) or `http(s)://…` (Streamable HTTP).
    pub url: String,
    /// The program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables added to the child's environment (which is otherwise built from an allow-list).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The child's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Only these tools are bridged (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Capability tags added to every bridged tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// A price per call of every bridged tool (a priced tool, spec §6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
}

/// How a bridged MCP server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Streamable HTTP at this `http://` URL.
    Http {
        /// The endpoint.
        url: String,
    },
}

/// What is wrong with a [`ServerSpec`] (`bridge.registerMCPServer` answers −32602 with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The URL's scheme is none of `stdio`, `http`, `https`.
    #[error("url {0:?} must start with stdio://, http:// or https://")]
    Scheme(String),
    /// An `https://` upstream: no TLS stack is built into the MCP client.
    #[error(
        "https MCP servers are not supported: this build's MCP client has no TLS (use http:// on \
         loopback, or a local TLS-terminating proxy)"
    )]
    Tls,
    /// A stdio server without a program.
    #[error("a stdio server needs a command (\"command\", or stdio://<program>)")]
    NoCommand,
    /// No usable name.
    #[error("name: {0}")]
    Name(String),
    /// `command`, `args`, `env` or `cwd` on an HTTP server.
    #[error("command, args, env and cwd are for stdio servers only")]
    StdioFieldsOnHttp,
}

impl ServerSpec {
    /// The server's name on this node: `name`, else the program of a `stdio://<program>` URL
    /// (its last path segment), else the host and port of an HTTP URL, each made
    /// [`crate::check_name`]-valid.
    ///
    /// # Errors
    ///
    /// [`SpecError::Name`] when no valid name results.
    pub fn server_name(&self) -> Result<String, SpecError> {
        let name = match &self.name {
            Some(n) => n.clone(),
            None => {
                let rest = self
                    .url
                    .split_once("://")
                    .map_or(self.url.as_str(), |(_, r)| r);
                let rest = if self.url.starts_with("stdio://") {
                    rest.rsplit('/').find(|s| !s.is_empty()).unwrap_or("")
                } else {
                    rest.split('/').next().unwrap_or("")
                };
                rest.chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                            c
                        } else {
                            '-'
                        }
                    })
                    .take(crate::MAX_NAME_BYTES)
                    .collect()
            }
        };
        crate::check_name(&name).map_err(SpecError::Name)?;
        Ok(name)
    }

    /// How the server is reached.
    ///
    /// # Errors
    ///
    /// What is wrong with `url`, `command` and the stdio-only fields.
    pub fn transport(&self) -> Result<Transport, SpecError> {
        if let Some(rest) = self.url.strip_prefix("stdio://") {
            let command = match &self.command {
                Some(c) if !c.trim().is_empty() => c.clone(),
                Some(_) => return Err(SpecError::NoCommand),
                None if !rest.trim_matches('/').is_empty() => rest.trim_end_matches('/').to_owned(),
                None => return Err(SpecError::NoCommand),
            };
            return Ok(Transport::Stdio {
                command,
                args: self.args.clone(),
            });
        }
        let stdio_fields = self.command.is_some()
            || !self.args.is_empty()
            || !self.env.is_empty()
            || self.cwd.is_some();
        if self.url.starts_with("https://") {
            return Err(SpecError::Tls);
        }
        if self.url.starts_with("http://") {
            if stdio_fields {
                return Err(SpecError::StdioFieldsOnHttp);
            }
            return Ok(Transport::Http {
                url: self.url.clone(),
            });
        }
        Err(SpecError::Scheme(self.url.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str) -> ServerSpec {
        serde_json::from_value(serde_json::json!({"url": url})).unwrap()
    }

    #[test]
    fn names_and_transports_come_from_the_url() {
        let s = spec("stdio://everything");
        assert_eq!(s.server_name().unwrap(), "everything");
        assert_eq!(
            s.transport().unwrap(),
            Transport::Stdio {
                command: "everything".into(),
                args: vec![]
            }
        );
        let s = spec("http://127.0.0.1:3001/mcp");
        assert_eq!(s.server_name().unwrap(), "127-0-0-1-3001");
        assert!(matches!(s.transport().unwrap(), Transport::Http { .. }));
        assert_eq!(spec("https://x/mcp").transport(), Err(SpecError::Tls));
        assert!(matches!(
            spec("ftp://x").transport(),
            Err(SpecError::Scheme(_))
        ));
        assert_eq!(spec("stdio://").transport(), Err(SpecError::NoCommand));
        let mut s = spec("stdio://x");
        s.name = Some("bad name".into());
        assert!(matches!(s.server_name(), Err(SpecError::Name(_))));
        let mut s = spec("http://127.0.0.1:1/mcp");
        s.command = Some("node".into());
        assert_eq!(s.transport(), Err(SpecError::StdioFieldsOnHttp));
    }
}
