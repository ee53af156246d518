//! The MCP bridge (Hyperspace spec §10.1 `registerMCPServer`; `docs/bridges.md` "Bridge an MCP
//! server into the mesh"): MCP servers' tools served as tools of this node.
//!
//! | module | owns |
//! |---|---|
//! | this one | the bridge task: the `bridge.*MCPServer` methods ([`METHODS`]), the bridged servers (from `[[bridge.mcp]]` and from redb), [`BridgeCall`]s turned into `tools/call` |
//! | `server` | one server's supervisor: connect, list, publish its tools, re-list on notifications, restart with backoff |
//! | `client` | one connection: stdio child or Streamable HTTP, both eras, notifications |
//!
//! The mappings (tool ids and cards, results, errors, the child's environment) are
//! `agora_bridge::mcp`'s. Each server's tools are owned by `mcp:<name>` in the Hyperspace
//! service's registry and set whole ([`crate::hyperspace::Input::Bridged`]): when the server
//! goes away its tools leave the card, and they come back under the same ids when listed again.
//!
//! Authorization: the three methods need the API key ([`Principal::ApiKey`]), since registering
//! a server starts a program on this node and listing shows the commands; any other caller
//! (a session token, a keyless loopback client) gets −32602 with `data.reason:
//! "api-key-required"`.
//!
//! Bounded: at most [`MAX_SERVERS`] servers (beyond, −32602 `reason: "full"`); at most
//! [`MAX_CALLS`] `tools/call` in flight (beyond, −32006 at once); calls queue in
//! [`crate::bridge::QUEUE`].

mod client;
mod server;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agora_bridge::mcp::ServerSpec;
use agora_bridge::mcp::errors::{translate, unavailable};
use agora_bridge::mcp::result::map_result;
use agora_hyperspace::jsonrpc::RpcError;
use rmcp::ServiceError;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{BridgeCall, MCP_OWNER};
use crate::call::{Call, Principal};
use crate::hyperspace;
use crate::routes::CallRoute;
use crate::store::Store;

use server::{Origin, Status};

pub use agora_bridge::mcp::{LIST, METHODS, REGISTER, UNREGISTER};

/// Servers bridged at once.
pub const MAX_SERVERS: usize = 64;
/// `tools/call` in flight across servers.
pub const MAX_CALLS: usize = 256;
/// Calls and events queued to the bridge task (the router waits when it is full).
const INPUT_QUEUE: usize = 256;

/// What the bridge task takes.
#[derive(Debug)]
pub enum Input {
    /// A `bridge.*MCPServer` call.
    Call(Call),
    /// A registration over JSON-RPC failed: forget the server.
    Failed {
        /// The server.
        name: String,
    },
}

/// The calls the bridge answers: exactly its three methods.
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute::new(&[REGISTER, LIST, UNREGISTER], &[&METHODS], tx, Input::Call)
}

/// What the bridge needs from the node.
#[derive(Debug)]
pub struct Wiring {
    /// This node's peer id (part of every bridged tool's id).
    pub peer_id: String,
    /// The Hyperspace service (tool lists go there).
    pub hs: mpsc::Sender<hyperspace::Input>,
    /// The store (servers registered over JSON-RPC).
    pub store: Store,
    /// Calls of MCP-bridged tools.
    pub calls: mpsc::Receiver<BridgeCall>,
    /// `[[bridge.mcp]]`.
    pub config: Vec<ServerSpec>,
}

/// Starts the bridge: the servers of `[[bridge.mcp]]` and of redb, then the task; returns its
/// sender.
pub async fn start(w: Wiring) -> mpsc::Sender<Input> {
    let (tx, rx) = mpsc::channel(INPUT_QUEUE);
    let mut bridge = Bridge {
        peer_id: Arc::from(w.peer_id.as_str()),
        hs: w.hs,
        store: w.store,
        servers: BTreeMap::new(),
        calls_in_flight: Arc::new(Semaphore::new(MAX_CALLS)),
        tx: tx.clone(),
    };
    for spec in w.config {
        if let Err(e) = bridge.add(spec, Origin::Config, None) {
            tracing::warn!(error = %e.message, "[[bridge.mcp]] not bridged");
        }
    }
    let stored: Vec<ServerSpec> = bridge
        .store
        .read_json(Store::bridge_mcp, "bridged MCP server")
        .await
        .unwrap_or_default();
    for spec in stored {
        if let Err(e) = bridge.add(spec, Origin::Rpc, None) {
            tracing::warn!(error = %e.message, "a stored MCP server is not bridged");
        }
    }
    tokio::spawn(bridge.run(rx, w.calls));
    tx
}

/// One bridged server, as the task holds it.
struct Entry {
    spec: ServerSpec,
    origin: Origin,
    status: Arc<Mutex<Status>>,
    task: tokio::task::JoinHandle<()>,
}

struct Bridge {
    peer_id: Arc<str>,
    hs: mpsc::Sender<hyperspace::Input>,
    store: Store,
    servers: BTreeMap<String, Entry>,
    calls_in_flight: Arc<Semaphore>,
    tx: mpsc::Sender<Input>,
}

fn refused(reason: &str, message: impl Into<String>) -> RpcError {
    RpcError::invalid_params()
        .with_message(message)
        .with_data(json!({"reason": reason}))
}

impl Bridge {
    async fn run(mut self, mut rx: mpsc::Receiver<Input>, mut calls: mpsc::Receiver<BridgeCall>) {
        loop {
            tokio::select! {
                input = rx.recv() => match input {
                    Some(Input::Call(call)) => self.answer(call),
                    Some(Input::Failed { name }) => {
                        if let Some(e) = self.servers.remove(&name) {
                            e.task.abort();
                        }
                    }
                    None => break,
                },
                call = calls.recv() => match call {
                    Some(call) => self.tool_call(call),
                    None => break,
                },
            }
        }
        for entry in self.servers.values() {
            entry.task.abort();
        }
    }

    /// Starts bridging `spec`; `first` hears the outcome of the first connection (a
    /// registration over JSON-RPC waits for it).
    fn add(
        &mut self,
        mut spec: ServerSpec,
        origin: Origin,
        first: Option<oneshot::Sender<Result<Vec<String>, String>>>,
    ) -> Result<String, RpcError> {
        let name = spec
            .server_name()
            .map_err(|e| refused("invalid", e.to_string()))?;
        spec.transport()
            .map_err(|e| refused("invalid", e.to_string()))?;
        if self.servers.contains_key(&name) {
            return Err(refused(
                "exists",
                format!("an MCP server named {name} is bridged already"),
            ));
        }
        if self.servers.len() >= MAX_SERVERS {
            return Err(refused(
                "full",
                format!("this node bridges {MAX_SERVERS} MCP servers already"),
            ));
        }
        spec.name = Some(name.clone());
        let status = Arc::new(Mutex::new(Status::default()));
        let task = tokio::spawn(server::supervise(server::Supervised {
            name: name.clone(),
            spec: spec.clone(),
            peer_id: Arc::clone(&self.peer_id),
            hs: self.hs.clone(),
            status: Arc::clone(&status),
            first,
        }));
        self.servers.insert(
            name.clone(),
            Entry {
                spec,
                origin,
                status,
                task,
            },
        );
        Ok(name)
    }

    fn answer(&mut self, call: Call) {
        let Call {
            principal,
            request,
            reply,
            ..
        } = call;
        let method = request.method.as_str();
        if principal != Principal::ApiKey {
            let _ = reply.send(Err(refused(
                "api-key-required",
                format!(
                    "{method} needs the node's API key: bridging an MCP server starts a program on \
                     this node"
                ),
            )));
            return;
        }
        let params = request.params.unwrap_or(Value::Null);
        let outcome = match method {
            REGISTER => return self.register(&params, reply),
            LIST => Ok(self.list()),
            UNREGISTER => self.unregister(&params),
            _ => Err(RpcError::method_not_found()),
        };
        let _ = reply.send(outcome);
    }

    fn register(&mut self, params: &Value, reply: oneshot::Sender<Result<Value, RpcError>>) {
        let spec: ServerSpec = match serde_json::from_value(params.clone()) {
            Ok(s) => s,
            Err(e) => {
                let e = refused("invalid", format!("invalid params: {e}"));
                let e = agora_hyperspace::params::with_every_problem_of(
                    &crate::bridge::describe::DOCS,
                    REGISTER,
                    params,
                    e,
                );
                let _ = reply.send(Err(e));
                return;
            }
        };
        let (first_tx, first_rx) = oneshot::channel();
        let name = match self.add(spec, Origin::Rpc, Some(first_tx)) {
            Ok(n) => n,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let Some(spec) = self.servers.get(&name).map(|e| e.spec.clone()) else {
            return;
        };
        let (store, tx) = (self.store.clone(), self.tx.clone());
        tokio::spawn(async move {
            let outcome = match first_rx.await {
                Ok(Ok(tools)) => match serde_json::to_string(&spec) {
                    Ok(json) => match store.put_bridge_mcp(&name, &json).await {
                        Ok(()) => Ok(json!({"serverId": name, "tools": tools})),
                        Err(e) => Err(RpcError::internal_error().with_message(e.to_string())),
                    },
                    Err(e) => Err(RpcError::internal_error().with_message(e.to_string())),
                },
                Ok(Err(reason)) => Err(RpcError::internal_error()
                    .with_message(format!("MCP server {name}: {reason}"))
                    .with_data(json!({"reason": "unreachable", "error": reason}))),
                Err(_) => Err(RpcError::internal_error().with_message("the bridge stopped")),
            };
            if outcome.is_err() {
                let _ = tx.send(Input::Failed { name }).await;
            }
            let _ = reply.send(outcome);
        });
    }

    fn list(&self) -> Value {
        let servers: Vec<Value> = self
            .servers
            .iter()
            .map(|(name, e)| {
                let mut v = e.status.lock().map_or_else(|_| json!({}), |s| s.to_json());
                v["serverId"] = json!(name);
                v["url"] = json!(e.spec.url);
                v["origin"] = json!(e.origin.as_str());
                if let Some(c) = &e.spec.command {
                    v["command"] = json!(c);
                }
                if !e.spec.args.is_empty() {
                    v["args"] = json!(e.spec.args);
                }
                // the values of `env` may be credentials: only their names are shown
                if !e.spec.env.is_empty() {
                    v["env"] = json!(e.spec.env.keys().collect::<Vec<_>>());
                }
                if !e.spec.tags.is_empty() {
                    v["tags"] = json!(e.spec.tags);
                }
                if let Some(p) = &e.spec.price {
                    v["price"] = json!(p);
                }
                v
            })
            .collect();
        json!({"servers": servers})
    }

    fn unregister(&mut self, params: &Value) -> Result<Value, RpcError> {
        let Some(name) = params.get("serverId").and_then(Value::as_str) else {
            return Err(refused("invalid", "serverId (a string) is required"));
        };
        match self.servers.get(name) {
            None => Err(refused(
                "not-found",
                format!("no MCP server {name} is bridged"),
            )),
            Some(e) if e.origin == Origin::Config => Err(refused(
                "config",
                format!(
                    "MCP server {name} is declared in agora.toml ([[bridge.mcp]]); remove it there"
                ),
            )),
            Some(_) => {
                let name = name.to_owned();
                if let Some(e) = self.servers.remove(&name) {
                    e.task.abort();
                }
                let (hs, store, owner) = (
                    self.hs.clone(),
                    self.store.clone(),
                    format!("{MCP_OWNER}{name}"),
                );
                let n = name.clone();
                tokio::spawn(async move {
                    let _ = hs
                        .send(hyperspace::Input::Bridged {
                            owner,
                            tools: Vec::new(),
                            reply: None,
                        })
                        .await;
                    if let Err(e) = store.delete_bridge_mcp(&n).await {
                        tracing::warn!(server = %n, error = %e, "the MCP server stays in the store");
                    }
                });
                Ok(json!({"serverId": name, "removed": true}))
            }
        }
    }

    /// A `tool.invoke` of a bridged tool: `tools/call` on its server, answered on a task of its
    /// own.
    fn tool_call(&self, call: BridgeCall) {
        let name = call
            .owner
            .strip_prefix(MCP_OWNER)
            .unwrap_or(&call.owner)
            .to_owned();
        let found = self.servers.get(&name).and_then(|e| {
            let s = e.status.lock().ok()?;
            Some((s.peer.clone(), s.tools.get(&call.tool_id).cloned()))
        });
        let (peer, tool) = match found {
            Some((Some(peer), Some(tool))) => (peer, tool),
            Some((None, _)) => {
                let _ = call
                    .reply
                    .send(Err(unavailable(&name, "the server is not running")));
                return;
            }
            _ => {
                let _ = call.reply.send(Err(unavailable(
                    &name,
                    "the server no longer serves this tool",
                )));
                return;
            }
        };
        let Ok(permit) = Arc::clone(&self.calls_in_flight).try_acquire_owned() else {
            let _ = call
                .reply
                .send(Err(unavailable(&name, "too many calls in flight")));
            return;
        };
        let arguments = match call.params {
            Value::Object(o) => Some(o),
            Value::Null => None,
            _ => {
                let _ = call.reply.send(Err(RpcError::invalid_params()
                    .with_message("an MCP tool's params must be a JSON object")));
                return;
            }
        };
        tokio::spawn(async move {
            let _permit = permit;
            let mut params = CallToolRequestParams::new(tool);
            if let Some(a) = arguments {
                params = params.with_arguments(a);
            }
            let outcome = match tokio::time::timeout(call.timeout, peer.call_tool(params)).await {
                Err(_) => Err(unavailable(&name, "no answer in time")),
                Ok(Ok(result)) => serde_json::to_value(&result)
                    .map(|v| map_result(&v))
                    .map_err(|e| RpcError::internal_error().with_message(e.to_string())),
                Ok(Err(e)) => Err(service_error(&name, e)),
            };
            let _ = call.reply.send(outcome);
        });
    }
}

/// The Hyperspace error for an rmcp failure of a call to server `name`.
fn service_error(name: &str, e: ServiceError) -> RpcError {
    match e {
        ServiceError::McpError(e) => translate(name, i64::from(e.code.0), &e.message),
        ServiceError::TransportClosed
        | ServiceError::TransportSend(_)
        | ServiceError::Cancelled { .. }
        | ServiceError::Timeout { .. } => unavailable(name, &e.to_string()),
        other => RpcError::internal_error()
            .with_message(format!("MCP server {name}: {other}"))
            .with_data(json!({"mcp": {"server": name, "error": other.to_string()}})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ErrorCode, ErrorData};

    #[test]
    fn rmcp_failures_become_hyperspace_codes() {
        let mcp = |code| ServiceError::McpError(ErrorData::new(ErrorCode(code), "m", None));
        assert_eq!(service_error("s", mcp(-32602)).code.0, -32602);
        assert_eq!(service_error("s", mcp(-32006)).code.0, -32603);
        assert_eq!(
            service_error("s", ServiceError::TransportClosed).code.0,
            -32006
        );
        let timeout = ServiceError::Timeout {
            timeout: std::time::Duration::from_secs(1),
        };
        assert_eq!(service_error("s", timeout).code.0, -32006);
        assert_eq!(
            service_error("s", ServiceError::UnexpectedResponse).code.0,
            -32603
        );
    }
}
