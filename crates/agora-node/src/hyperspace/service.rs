//! The skeleton the primitive services share (memory, learning, improving, payments; Hyperspace
//! spec §4): each runs one task built `start → prepare → run(Receiver<Input>)` whose input has
//! the same shape — `Call` (a JSON-RPC call), `Peer(Request)` (a node-to-node request on the
//! service's protocol, [`crate::routes::Request`]: `peer`, `data`, `channel`), `Status` (its
//! `/status` section) — plus what is its own; its `call_route` and `event_routes` declare what
//! the routers hand it ([`crate::routes`]).
//! This module holds what they would otherwise each write out: answering a call on a task of its
//! own within an in-flight bound ([`spawn_call`]), the error mapping ([`internal`], [`invalid`]),
//! requests and responses over the mesh on the service's protocol ([`PeerLink`]) and the
//! counters of its `/status` section ([`Counters`]).
//!
//! The Hyperspace service (state, guard, recursive, tool: `super`) keeps its own loop: its
//! primitives share one state (sessions, their budgets and traces, the tool registry) that calls
//! change in order on that task, so its calls are not spawned; its long guard calls go to the
//! worker pool in [`super::guard`], and its node-to-node requests (`/agora/hyperspace/1.0.0`)
//! are answered in `tool::invoke`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use libp2p::PeerId;
use libp2p::request_response::ResponseChannel;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::call::{Call, Principal};
use crate::mesh;

/// −32603 with `message`.
pub(crate) fn internal(message: impl std::fmt::Display) -> RpcError {
    RpcError::internal_error().with_message(message.to_string())
}

/// −32602 with `message`.
pub(crate) fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::invalid_params().with_message(message.into())
}

/// Answers `call` on a task of its own while one of `in_flight`'s permits is held; with no
/// permit left, answers −32003 "too many {what} calls in flight" at once. `run` gets the caller,
/// the method and the params (`null` when absent).
pub(crate) fn spawn_call<F, Fut>(in_flight: &Arc<Semaphore>, what: &str, call: Call, run: F)
where
    F: FnOnce(Principal, String, Value) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Value, RpcError>> + Send + 'static,
{
    let Ok(permit) = Arc::clone(in_flight).try_acquire_owned() else {
        let _ = call
            .reply
            .send(Err(RpcError::from_code(RpcCode::RATE_LIMITED)
                .with_message(format!(
                    "Rate Limited: too many {what} calls in flight"
                ))));
        return;
    };
    let Call {
        principal,
        request,
        reply,
        ..
    } = call;
    tokio::spawn(async move {
        let params = request.params.unwrap_or(Value::Null);
        let outcome = run(principal, request.method, params).await;
        let _ = reply.send(outcome);
        drop(permit);
    });
}

/// Why a request to another node has no answer.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// The mesh is gone: the node is shutting down.
    ShuttingDown,
    /// The mesh's error, a dropped request, or no answer in time.
    Failed(String),
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ShuttingDown => f.write_str("the node is shutting down"),
            Self::Failed(why) => f.write_str(why),
        }
    }
}

/// A service's requests and responses over the mesh, on its own protocol.
#[derive(Clone, Debug)]
pub(crate) struct PeerLink {
    /// Commands to the mesh.
    pub(crate) mesh: mpsc::Sender<mesh::Command>,
    /// The service's protocol.
    pub(crate) proto: mesh::Proto,
}

impl PeerLink {
    /// Sends `data` to `peer` and waits up to `timeout` for its answer's bytes.
    pub(crate) async fn request(
        &self,
        peer: PeerId,
        data: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, Unanswered> {
        let (reply, answer) = oneshot::channel();
        self.mesh
            .send(mesh::Command::SendDirect {
                proto: self.proto,
                peer,
                data,
                reply,
            })
            .await
            .map_err(|_| Unanswered::ShuttingDown)?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(Ok(bytes))) => Ok(bytes),
            Ok(Ok(Err(e))) => Err(Unanswered::Failed(e)),
            Ok(Err(_)) => Err(Unanswered::Failed("the request was dropped".to_owned())),
            Err(_) => Err(Unanswered::Failed("no answer in time".to_owned())),
        }
    }

    /// Answers a request from another node with `data`.
    pub(crate) async fn respond(&self, channel: ResponseChannel<Vec<u8>>, data: Vec<u8>) {
        let _ = self
            .mesh
            .send(mesh::Command::Respond {
                proto: self.proto,
                channel,
                data,
            })
            .await;
    }
}

/// Named event counters of a service (its `/status` section's `counters`).
#[derive(Debug, Default)]
pub(crate) struct Counters(Mutex<BTreeMap<&'static str, u64>>);

impl Counters {
    /// Counts one `what`.
    pub(crate) fn count(&self, what: &'static str) {
        self.add(what, 1);
    }

    /// Counts `n` of `what`.
    pub(crate) fn add(&self, what: &'static str, n: u64) {
        if let Ok(mut c) = self.0.lock() {
            *c.entry(what).or_insert(0) += n;
        }
    }

    /// The counters as a JSON object, by name.
    pub(crate) fn json(&self) -> Value {
        self.0
            .lock()
            .map(|c| {
                c.iter()
                    .map(|(k, v)| ((*k).to_owned(), json!(v)))
                    .collect::<serde_json::Map<_, _>>()
            })
            .unwrap_or_default()
            .into()
    }
}
