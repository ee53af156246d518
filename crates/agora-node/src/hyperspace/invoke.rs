//! `tool.invoke` (spec §4.3): a tool belongs to the agent connection that registered it, and the
//! call reaches that agent wherever it is in the mesh.
//!
//! - **Local tool**: the call goes to the provider as a JSON-RPC request `tool.invoke
//!   {toolId, params, sessionId}` on its WebSocket ([`crate::rpc::Links`]).
//! - **Remote tool** (advertised by a live card): the call goes to that node by request-response
//!   (`/agora/hyperspace/1.0.0`, `{"op":"invoke",…}`), which hands it to its provider the same
//!   way and answers `{"result":…}` or `{"error":…}`; the provider's error reaches the caller
//!   unchanged.
//!
//! Either way the caller has [`INVOKE_TIMEOUT`]; an unreachable node or provider is −32006
//! "Peer Unavailable" with `data: {toolId, peerId, reason}`. The result is `{result, duration,
//! peerId}`, `duration` measured here in whole milliseconds. Each node records the invocation in
//! its own analytics (the provider's node measures the provider, the caller's node the whole
//! round trip), which feed `getAnalytics`, discovery ranking and the node's card.

use agora_hyperspace::announce::{PeerRequest, PeerResponse};
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::tool::{INVOKE, InvokeParams, InvokeResult, InvokeTarget};
use libp2p::PeerId;
use libp2p::request_response::ResponseChannel;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::{INVOKE_TIMEOUT, Input, Service, now_ms};
use crate::mesh;
use crate::rpc::{Call, Links};

/// Extra time a remote call gets on top of the provider's [`INVOKE_TIMEOUT`].
const NETWORK_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

fn unavailable(tool_id: &str, peer_id: &str, reason: &str) -> RpcError {
    RpcError::peer_unavailable().with_data(json!({
        "toolId": tool_id,
        "peerId": peer_id,
        "reason": reason,
    }))
}

/// The connection behind a local tool's owner name.
fn conn_of(owner: &str) -> Option<u64> {
    owner.strip_prefix("rpc-conn-")?.parse().ok()
}

/// Asks the provider on `conn` to run the tool.
async fn ask_provider(links: &Links, conn: u64, params: &InvokeParams) -> Result<Value, RpcError> {
    let forwarded = json!({
        "toolId": params.tool_id,
        "params": params.params,
        "sessionId": params.session_id,
    });
    links.request(conn, INVOKE, forwarded, INVOKE_TIMEOUT).await
}

/// Asks node `peer_id` to run the tool.
async fn ask_node(
    mesh: &mpsc::Sender<mesh::Command>,
    peer_id: &str,
    params: &InvokeParams,
) -> Result<Value, RpcError> {
    let tool = params.tool_id.as_str();
    let peer: PeerId = peer_id
        .parse()
        .map_err(|_| unavailable(tool, peer_id, "the card names an invalid peer id"))?;
    let request = PeerRequest::Invoke {
        tool_id: params.tool_id.clone(),
        params: params.params.clone(),
        session_id: params.session_id.clone(),
    };
    let data = serde_json::to_vec(&request)
        .map_err(|e| RpcError::internal_error().with_message(e.to_string()))?;
    let (reply, answer) = oneshot::channel();
    mesh.send(mesh::Command::SendDirect {
        proto: mesh::Proto::Hyperspace,
        peer,
        data,
        reply,
    })
    .await
    .map_err(|_| unavailable(tool, peer_id, "the node is shutting down"))?;
    let bytes = match tokio::time::timeout(INVOKE_TIMEOUT + NETWORK_MARGIN, answer).await {
        Ok(Ok(Ok(bytes))) => bytes,
        Ok(Ok(Err(e))) => return Err(unavailable(tool, peer_id, &format!("unreachable: {e}"))),
        Ok(Err(_)) => return Err(unavailable(tool, peer_id, "the request was dropped")),
        Err(_) => return Err(unavailable(tool, peer_id, "no answer in time")),
    };
    let response: PeerResponse = serde_json::from_slice(&bytes)
        .map_err(|e| unavailable(tool, peer_id, &format!("the node answered nonsense: {e}")))?;
    response.into()
}

impl Service {
    /// `tool.invoke` from a client: resolves where the tool lives and asks its provider, off
    /// the service task.
    pub(super) fn invoke(&mut self, call: Call) {
        if let Err(e) = super::authorize(&call.principal, INVOKE, call.request.params.as_ref()) {
            let _ = call.reply.send(Err(e));
            return;
        }
        let params: InvokeParams = match agora_hyperspace::state::parse_params(
            call.request.params.as_ref().unwrap_or(&Value::Null),
            &["toolId", "params", "sessionId"],
        ) {
            Ok(p) => p,
            Err(e) => {
                let _ = call.reply.send(Err(e));
                return;
            }
        };
        let plan = match self.tools.plan_invoke(&params, now_ms()) {
            Ok(p) => p,
            Err(e) => {
                let _ = call.reply.send(Err(e));
                return;
            }
        };
        let links = self.links.clone();
        let mesh = self.mesh.clone();
        let done = self.inputs.clone();
        tokio::spawn(async move {
            let (outcome, duration_ms) = measured(&done, &params.tool_id, async {
                match &plan.target {
                    InvokeTarget::Local { owner } => match conn_of(owner) {
                        Some(conn) => ask_provider(&links, conn, &params).await,
                        None => Err(unavailable(&params.tool_id, &plan.peer_id, "no provider")),
                    },
                    InvokeTarget::Remote { peer_id } => ask_node(&mesh, peer_id, &params).await,
                }
            })
            .await;
            let reply = outcome.and_then(|result| {
                serde_json::to_value(InvokeResult {
                    result,
                    duration: duration_ms,
                    peer_id: plan.peer_id,
                })
                .map_err(|e| RpcError::internal_error().with_message(e.to_string()))
            });
            let _ = call.reply.send(reply);
        });
    }

    /// A node-to-node request: an invocation of one of our tools, or a discovery answer.
    pub(super) async fn peer_request(
        &mut self,
        peer: PeerId,
        data: &[u8],
        channel: ResponseChannel<Vec<u8>>,
    ) {
        let request: PeerRequest = match serde_json::from_slice(data) {
            Ok(r) => r,
            Err(e) => {
                let error = RpcError::invalid_request().with_message(format!("bad request: {e}"));
                respond(&self.mesh, channel, Err(error)).await;
                return;
            }
        };
        match request {
            PeerRequest::Card { record } => {
                let now = now_ms();
                let learned = self.learn_records(&[record.into_bytes()], now);
                self.answer_waiting(now);
                let outcome = if learned > 0 {
                    Ok(Value::Null)
                } else {
                    Err(RpcError::invalid_params().with_message("card record refused"))
                };
                respond(&self.mesh, channel, outcome).await;
            }
            PeerRequest::Invoke {
                tool_id,
                params,
                session_id,
            } => {
                let params = InvokeParams {
                    tool_id,
                    params,
                    session_id,
                };
                let conn = match self.tools.plan_invoke(&params, now_ms()) {
                    Ok(plan) => match plan.target {
                        InvokeTarget::Local { owner } => conn_of(&owner),
                        InvokeTarget::Remote { .. } => None,
                    },
                    Err(e) => {
                        respond(&self.mesh, channel, Err(e)).await;
                        return;
                    }
                };
                let Some(conn) = conn else {
                    let e = unavailable(&params.tool_id, &self.peer_id, "not served by this node");
                    respond(&self.mesh, channel, Err(e)).await;
                    return;
                };
                tracing::debug!(%peer, tool = %params.tool_id, "remote invocation");
                let links = self.links.clone();
                let mesh = self.mesh.clone();
                let done = self.inputs.clone();
                tokio::spawn(async move {
                    let (outcome, _) =
                        measured(&done, &params.tool_id, ask_provider(&links, conn, &params)).await;
                    respond(&mesh, channel, outcome).await;
                });
            }
        }
    }
}

/// Runs one invocation, measures it, and reports it to the service's analytics.
async fn measured(
    done: &mpsc::Sender<Input>,
    tool_id: &str,
    invocation: impl Future<Output = Result<Value, RpcError>>,
) -> (Result<Value, RpcError>, u64) {
    let started = std::time::Instant::now();
    let outcome = invocation.await;
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let _ = done
        .send(Input::Invoked {
            tool_id: tool_id.to_owned(),
            duration_ms,
            success: outcome.is_ok(),
        })
        .await;
    (outcome, duration_ms)
}

/// Answers a node-to-node request.
async fn respond(
    mesh: &mpsc::Sender<mesh::Command>,
    channel: ResponseChannel<Vec<u8>>,
    outcome: Result<Value, RpcError>,
) {
    let mut data = serde_json::to_vec(&PeerResponse::from(outcome)).unwrap_or_default();
    if data.len() > mesh::MAX_MESSAGE_BYTES {
        let e = RpcError::internal_error().with_message("the tool's result is larger than 1 MiB");
        data = serde_json::to_vec(&PeerResponse::from(Err(e))).unwrap_or_default();
    }
    let _ = mesh
        .send(mesh::Command::Respond {
            proto: mesh::Proto::Hyperspace,
            channel,
            data,
        })
        .await;
}
