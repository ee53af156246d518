//! One bridged server's supervisor (Hyperspace spec §10.1): connect, list the tools, publish
//! them as the tools of `mcp:<name>`, re-list on every list-changed notification, and when the
//! connection ends (the child died, the HTTP server went away) withdraw the tools and connect
//! again after a backoff of [`FIRST_BACKOFF`] doubling up to [`MAX_BACKOFF`]; a run that stayed
//! up [`HEALTHY`] resets it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_bridge::mcp::ServerSpec;
use agora_bridge::mcp::era::Era;
use agora_bridge::mcp::tools::{allowed, bridge_tool};
use agora_hyperspace::tool::BridgedTool;
use rmcp::{Peer, RoleClient};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::client::{self, Connection, Handler};
use crate::bridge::MCP_OWNER;
use crate::hyperspace;

/// The first wait before connecting again.
pub(super) const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before connecting again.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A run this long resets the backoff.
pub(super) const HEALTHY: Duration = Duration::from_secs(60);

/// Where a server's spec comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// `[[bridge.mcp]]` in `agora.toml`.
    Config,
    /// `bridge.registerMCPServer` (kept in redb).
    Rpc,
}

impl Origin {
    pub(super) const fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Rpc => "rpc",
        }
    }
}

/// What the bridge task and `bridge.listMCPServers` see of a server.
#[derive(Default)]
pub(super) struct Status {
    /// `starting`, `running`, `restarting`.
    pub(super) state: &'static str,
    /// The era found at the last connection.
    pub(super) era: Option<Era>,
    /// The protocol version negotiated at the last connection.
    pub(super) protocol_version: Option<String>,
    /// The child's process id (stdio, while running).
    pub(super) pid: Option<u32>,
    /// The connection's peer, while running.
    pub(super) peer: Option<Peer<RoleClient>>,
    /// The tools served now: mesh tool id → MCP tool name.
    pub(super) tools: BTreeMap<String, String>,
    /// Their mesh names, by id.
    pub(super) names: BTreeMap<String, String>,
    /// Why the last connection failed or ended.
    pub(super) error: Option<String>,
    /// Connections made after the first.
    pub(super) restarts: u32,
}

impl Status {
    pub(super) fn to_json(&self) -> Value {
        let tools: Vec<Value> = self
            .names
            .iter()
            .map(|(id, name)| json!({"toolId": id, "name": name}))
            .collect();
        let mut v = json!({
            "state": if self.state.is_empty() { "starting" } else { self.state },
            "tools": tools,
            "restarts": self.restarts,
        });
        if let Some(e) = self.era {
            v["era"] = json!(e.as_str());
        }
        if let Some(p) = &self.protocol_version {
            v["protocolVersion"] = json!(p);
        }
        if let Some(p) = self.pid {
            v["pid"] = json!(p);
        }
        if let Some(e) = &self.error {
            v["error"] = json!(e);
        }
        v
    }
}

/// What a supervisor runs with.
pub(super) struct Supervised {
    pub(super) name: String,
    pub(super) spec: ServerSpec,
    pub(super) peer_id: Arc<str>,
    pub(super) hs: mpsc::Sender<hyperspace::Input>,
    pub(super) status: Arc<Mutex<Status>>,
    /// The first connection's outcome (tool ids, or why it failed) for a registration; after a
    /// first failure a registered server is not retried.
    pub(super) first: Option<oneshot::Sender<Result<Vec<String>, String>>>,
}

impl Supervised {
    fn update(&self, f: impl FnOnce(&mut Status)) {
        if let Ok(mut s) = self.status.lock() {
            f(&mut s);
        }
    }

    /// Lists the server's tools and makes them `mcp:<name>`'s; returns the ids set.
    async fn publish(&self, peer: &Peer<RoleClient>) -> Result<Vec<String>, String> {
        let listed = peer
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        let mut tools: Vec<BridgedTool> = Vec::new();
        let mut names = BTreeMap::new();
        for tool in &listed {
            if !allowed(&self.spec, &tool.name) {
                continue;
            }
            let Ok(json) = serde_json::to_value(tool) else {
                continue;
            };
            if let Some(t) = bridge_tool(&self.peer_id, &self.name, &self.spec, &json) {
                names.insert(t.id.clone(), tool.name.to_string());
                tools.push(t);
            }
        }
        let outcome = self.set_tools(tools.clone()).await;
        let refused: Vec<&String> = outcome.iter().map(|(id, _)| id).collect();
        for (id, reason) in &outcome {
            tracing::warn!(server = %self.name, tool = %id, %reason, "bridged MCP tool refused");
        }
        names.retain(|id, _| !refused.contains(&id));
        let mesh_names: BTreeMap<String, String> = tools
            .iter()
            .filter(|t| names.contains_key(&t.id))
            .map(|t| (t.id.clone(), t.params.name.clone()))
            .collect();
        let ids: Vec<String> = names.keys().cloned().collect();
        self.update(|s| {
            s.tools = names;
            s.names = mesh_names;
        });
        Ok(ids)
    }

    /// Sets `mcp:<name>`'s whole list; returns the tools refused.
    async fn set_tools(&self, tools: Vec<BridgedTool>) -> Vec<(String, String)> {
        let (reply, outcome) = oneshot::channel();
        let input = hyperspace::Input::Bridged {
            owner: format!("{MCP_OWNER}{}", self.name),
            tools,
            reply: Some(reply),
        };
        if self.hs.send(input).await.is_err() {
            return Vec::new();
        }
        outcome.await.map(|o| o.refused).unwrap_or_default()
    }

    /// One connection, until it ends: `Ok(())` when it ran, or why it could not be made.
    async fn run_once(&mut self) -> Result<(), String> {
        let (relist_tx, mut relist) = mpsc::channel(1);
        let handler = Handler {
            relist: relist_tx.clone(),
        };
        let conn: Connection = client::connect(&self.spec, handler)
            .await
            .map_err(|e| e.to_string())?;
        let peer = conn.running.peer().clone();
        let listener = client::listen(&conn, relist_tx);
        let ids = self.publish(&peer).await;
        let ids = match ids {
            Ok(ids) => ids,
            Err(e) => {
                if let Some(l) = listener {
                    l.abort();
                }
                return Err(e);
            }
        };
        tracing::info!(server = %self.name, era = conn.era.as_str(), protocol = %conn.protocol_version,
            tools = ids.len(), "MCP server bridged");
        self.update(|s| {
            s.state = "running";
            s.era = Some(conn.era);
            s.protocol_version = Some(conn.protocol_version.clone());
            s.pid = conn.pid;
            s.peer = Some(peer.clone());
            s.error = None;
        });
        if let Some(first) = self.first.take() {
            let _ = first.send(Ok(ids));
        }
        let waiting = conn.running.waiting();
        tokio::pin!(waiting);
        loop {
            tokio::select! {
                _ = &mut waiting => break,
                Some(()) = relist.recv() => {
                    if let Err(e) = self.publish(&peer).await {
                        tracing::warn!(server = %self.name, error = %e, "re-listing failed");
                    }
                }
            }
        }
        if let Some(l) = listener {
            l.abort();
        }
        Ok(())
    }
}

/// Runs server `s` until its task is aborted.
pub(super) async fn supervise(mut s: Supervised) {
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 0u32;
    loop {
        s.update(|st| {
            st.state = if attempt == 0 {
                "starting"
            } else {
                "restarting"
            };
            st.restarts = attempt;
        });
        attempt = attempt.saturating_add(1);
        let started = Instant::now();
        let outcome = s.run_once().await;
        // whatever happened, the server serves nothing now
        s.update(|st| {
            st.peer = None;
            st.pid = None;
            st.tools.clear();
            st.names.clear();
            st.state = "restarting";
        });
        let _ = s.set_tools(Vec::new()).await;
        let error = match outcome {
            Ok(()) => "the connection ended (the server exited or went away)".to_owned(),
            Err(e) => e,
        };
        tracing::warn!(server = %s.name, error = %error, retry_in = ?backoff, "MCP server down");
        s.update(|st| st.error = Some(error.clone()));
        if let Some(first) = s.first.take() {
            let _ = first.send(Err(error));
            return;
        }
        if started.elapsed() >= HEALTHY {
            backoff = FIRST_BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
