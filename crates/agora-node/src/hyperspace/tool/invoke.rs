//! `tool.invoke` (spec §4.3): a tool belongs to the agent connection that registered it, and the
//! call reaches that agent wherever it is in the mesh.
//!
//! - **Local tool**: the call goes to the provider as a JSON-RPC request `tool.invoke
//!   {toolId, params, sessionId}` on its WebSocket ([`crate::faces::rpc::Links`]).
//! - **Remote tool** (advertised by a live card): the call goes to that node by request-response
//!   (`/agora/hyperspace/1.0.0`, `{"op":"invoke",…}`), which hands it to its provider the same
//!   way and answers `{"result":…}` or `{"error":…}`; the provider's error reaches the caller
//!   unchanged.
//!
//! Either way the caller is answered within [`INVOKE_TIMEOUT`], whatever the provider or its
//! node does (not reading, not answering, answering too much): the deadline covers queueing the
//! request to the provider or the mesh as well as waiting for the answer. A node serving a
//! remote caller gives its provider [`INVOKE_TIMEOUT`] − [`NETWORK_MARGIN`], so that its own
//! answer (a result, or −32006 with its reason) reaches the caller in time. An unreachable node
//! or provider, or one out of time, is −32006 "Peer Unavailable" with `data: {toolId, peerId,
//! reason}`. The result is `{result, duration, peerId}`, `duration` measured here in whole
//! milliseconds. Each node records the invocation in its own analytics (the provider's node
//! measures the provider, the caller's node the whole round trip), which feed `getAnalytics`,
//! discovery ranking and the node's card.

use agora_hyperspace::announce::{PeerRequest, PeerResponse};
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::tool::{INVOKE, InvokeParams, InvokeResult, InvokeTarget};
use libp2p::PeerId;
use libp2p::request_response::ResponseChannel;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::bridge::Bridges;
use crate::call::Call;
use crate::clock::now_ms;
use crate::faces::rpc::Links;
use crate::hyperspace::{INVOKE_TIMEOUT, Input, Service};
use crate::mesh;

/// Of a remote caller's [`INVOKE_TIMEOUT`], the share kept for the way between the nodes: the
/// serving node gives its provider the rest.
const NETWORK_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

fn unavailable(tool_id: &str, peer_id: &str, reason: &str) -> RpcError {
    RpcError::peer_unavailable().with_data(json!({
        "toolId": tool_id,
        "peerId": peer_id,
        "reason": reason,
    }))
}

/// Asks the payments service to charge one use of `params.tool_id` at `price`, paid to
/// `payee`.
async fn charge(
    payments: &mpsc::Sender<crate::hyperspace::payments::Input>,
    params: &InvokeParams,
    price: agora_hyperspace::payments::Price,
    payee: &str,
    principal: crate::call::Principal,
    from: Option<String>,
) -> Result<Value, RpcError> {
    let (reply, answer) = oneshot::channel();
    let charge = crate::hyperspace::payments::Charge {
        resource: format!("/pay/tools/{}/invoke", params.tool_id),
        price,
        payee: payee.to_owned(),
        payment: params.payment.clone(),
        principal,
        from,
        reply,
    };
    if payments
        .send(crate::hyperspace::payments::Input::Charge(charge))
        .await
        .is_err()
    {
        return Err(RpcError::internal_error().with_message("the payments service is gone"));
    }
    answer
        .await
        .unwrap_or_else(|_| Err(RpcError::internal_error().with_message("no answer from payments")))
}

/// The connection behind a local tool's owner name.
fn conn_of(owner: &str) -> Option<u64> {
    owner.strip_prefix("rpc-conn-")?.parse().ok()
}

/// Asks the provider on `conn` to run the tool, answering within `timeout`.
async fn ask_provider(
    links: &Links,
    conn: u64,
    params: &InvokeParams,
    timeout: std::time::Duration,
) -> Result<Value, RpcError> {
    let forwarded = json!({
        "toolId": params.tool_id,
        "params": params.params,
        "sessionId": params.session_id,
    });
    links.request(conn, INVOKE, forwarded, timeout).await
}

/// Asks the local provider `owner` to run the tool, answering within `timeout`: the JSON-RPC
/// connection that registered it, or the bridge that owns it ([`Bridges`]).
async fn ask_local(
    links: &Links,
    bridges: &Bridges,
    (owner, peer_id): (&str, &str),
    params: &InvokeParams,
    timeout: std::time::Duration,
) -> Result<Value, RpcError> {
    if let Some(conn) = conn_of(owner) {
        return ask_provider(links, conn, params, timeout).await;
    }
    if bridges.route(owner).is_some() {
        let (input, session) = (params.params.clone(), params.session_id.clone());
        return (bridges.call(owner, &params.tool_id, input, session, timeout)).await;
    }
    Err(unavailable(&params.tool_id, peer_id, "no provider"))
}

/// Asks node `peer_id` to run the tool, answering within [`INVOKE_TIMEOUT`].
async fn ask_node(
    mesh: &mpsc::Sender<mesh::Command>,
    peer_id: &str,
    params: &InvokeParams,
) -> Result<Value, RpcError> {
    tokio::time::timeout(INVOKE_TIMEOUT, ask_node_unbounded(mesh, peer_id, params))
        .await
        .unwrap_or_else(|_| Err(unavailable(&params.tool_id, peer_id, "no answer in time")))
}

async fn ask_node_unbounded(
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
        payment: params.payment.clone(),
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
    let bytes = match answer.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return Err(unavailable(tool, peer_id, &format!("unreachable: {e}"))),
        Err(_) => return Err(unavailable(tool, peer_id, "the request was dropped")),
    };
    let response: PeerResponse = serde_json::from_slice(&bytes)
        .map_err(|e| unavailable(tool, peer_id, &format!("the node answered nonsense: {e}")))?;
    response.into()
}

impl Service {
    /// `tool.invoke` from a client: resolves where the tool lives and asks its provider, off
    /// the service task.
    pub(in crate::hyperspace) fn invoke(&mut self, call: Call) {
        if let Err(e) = crate::hyperspace::state::authorize(
            &call.principal,
            INVOKE,
            call.request.params.as_ref(),
        ) {
            let _ = call.reply.send(Err(e));
            return;
        }
        let params: InvokeParams = match agora_hyperspace::params::parse_params(
            call.request.params.as_ref().unwrap_or(&Value::Null),
            &["toolId", "params", "sessionId", "payment"],
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
        let bridges = self.bridges.clone();
        let mesh = self.mesh.clone();
        let done = self.inputs.clone();
        let payments = self.payments.clone();
        let principal = call.principal.clone();
        tokio::spawn(async move {
            let mut params = match checked_input(params, plan.input_schema.clone()).await {
                Ok(p) => p,
                Err(e) => {
                    let _ = call.reply.send(Err(e));
                    return;
                }
            };
            // A priced tool is paid before it runs: here for a local tool (or a payment on a
            // channel this node pays), by the tool's node for a credential sent along.
            let mut paid = None;
            if let Some(price) = plan.price {
                let local = matches!(plan.target, InvokeTarget::Local { .. });
                let on_channel = params
                    .payment
                    .as_ref()
                    .is_some_and(|p| p.get("channelId").is_some() && p.get("nonce").is_none());
                if local || on_channel {
                    match charge(&payments, &params, price, &plan.peer_id, principal, None).await {
                        Ok(receipt) => {
                            if !local {
                                params.payment = Some(json!({
                                    "channelId": receipt["channelId"],
                                    "nonce": receipt["nonce"],
                                }));
                            }
                            paid = Some(receipt);
                        }
                        Err(e) => {
                            let _ = call.reply.send(Err(e));
                            return;
                        }
                    }
                }
            }
            let (outcome, duration_ms, late) = measured(&done, &params.tool_id, async {
                match &plan.target {
                    InvokeTarget::Local { owner } => {
                        let local = (owner.as_str(), plan.peer_id.as_str());
                        ask_local(&links, &bridges, local, &params, INVOKE_TIMEOUT).await
                    }
                    InvokeTarget::Remote { peer_id } => ask_node(&mesh, peer_id, &params).await,
                }
            })
            .await;
            let reply = outcome.and_then(|result| {
                let mut v = serde_json::to_value(InvokeResult {
                    result,
                    duration: duration_ms,
                    peer_id: plan.peer_id,
                })
                .map_err(|e| RpcError::internal_error().with_message(e.to_string()))?;
                if let (Some(p), Some(o)) = (paid, v.as_object_mut()) {
                    o.insert("payment".into(), p);
                }
                Ok(v)
            });
            let _ = call.reply.send(reply);
            if let Some(report) = late {
                let _ = done.send(report).await;
            }
        });
    }

    /// A node-to-node request: an invocation of one of our tools, or a discovery answer.
    pub(in crate::hyperspace) async fn peer_request(
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
                payment,
            } => {
                let params = InvokeParams {
                    tool_id,
                    params,
                    session_id,
                    payment,
                };
                let (owner, price, schema) = match self.tools.plan_invoke(&params, now_ms()) {
                    Ok(plan) => match plan.target {
                        InvokeTarget::Local { owner } => {
                            (Some(owner), plan.price, plan.input_schema)
                        }
                        InvokeTarget::Remote { .. } => (None, None, None),
                    },
                    Err(e) => {
                        respond(&self.mesh, channel, Err(e)).await;
                        return;
                    }
                };
                let Some(owner) = owner else {
                    let e = unavailable(&params.tool_id, &self.peer_id, "not served by this node");
                    respond(&self.mesh, channel, Err(e)).await;
                    return;
                };
                tracing::debug!(%peer, tool = %params.tool_id, "remote invocation");
                let links = self.links.clone();
                let bridges = self.bridges.clone();
                let mesh = self.mesh.clone();
                let done = self.inputs.clone();
                let payments = self.payments.clone();
                let me = self.peer_id.clone();
                tokio::spawn(async move {
                    let params = match checked_input(params, schema).await {
                        Ok(p) => p,
                        Err(e) => {
                            respond(&mesh, channel, Err(e)).await;
                            return;
                        }
                    };
                    if let Some(price) = price {
                        let principal = crate::call::Principal::ApiKey;
                        let from = Some(peer.to_string());
                        if let Err(e) =
                            charge(&payments, &params, price, &me, principal, from).await
                        {
                            respond(&mesh, channel, Err(e)).await;
                            return;
                        }
                    }
                    let timeout = INVOKE_TIMEOUT.saturating_sub(NETWORK_MARGIN);
                    let asked = ask_local(&links, &bridges, (&owner, &me), &params, timeout);
                    let (outcome, _, late) = measured(&done, &params.tool_id, asked).await;
                    respond(&mesh, channel, outcome).await;
                    if let Some(report) = late {
                        let _ = done.send(report).await;
                    }
                });
            }
        }
    }
}

/// Checks a call's params against the tool's input schema, on a blocking thread (the
/// validation is bounded but CPU-bound: [`agora_hyperspace::tool_input::check`]); before any
/// payment, so a refused call costs nothing.
async fn checked_input(
    params: InvokeParams,
    schema: Option<Value>,
) -> Result<InvokeParams, RpcError> {
    let Some(schema) = schema else {
        return Ok(params);
    };
    tokio::task::spawn_blocking(move || {
        agora_hyperspace::tool_input::check(&params.params, &schema).map(|()| params)
    })
    .await
    .unwrap_or_else(|_| Err(RpcError::internal_error().with_message("input check failed")))
}

/// Runs one invocation and measures it. Its report for the service's analytics is handed over
/// at once when the service's input has room (so a call that follows the answer sees it), else
/// returned, to be sent once the caller is answered (a busy service never delays the answer).
async fn measured(
    done: &mpsc::Sender<Input>,
    tool_id: &str,
    invocation: impl Future<Output = Result<Value, RpcError>>,
) -> (Result<Value, RpcError>, u64, Option<Input>) {
    let started = std::time::Instant::now();
    let outcome = invocation.await;
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let report = Input::Invoked {
        tool_id: tool_id.to_owned(),
        duration_ms,
        success: outcome.is_ok(),
    };
    let late = match done.try_send(report) {
        Err(mpsc::error::TrySendError::Full(report)) => Some(report),
        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => None,
    };
    (outcome, duration_ms, late)
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
