//! The node's HTTP listeners: the AGH WebSocket face for agents (`/agh/v0`) and the HTTP API
//! for the CLI and scripts.
//!
//! HTTP API (JSON everywhere):
//! - `GET /healthz` → `{"status":"ok"}`
//! - `GET /status` → node id, listen addresses, connected nodes, topics, gossip limits, topic
//!   budget and refusals, AGH counters
//! - `GET /agh/v0/peers[?channel=C]` → `{"peers":[…]}`
//! - `POST /agh/v0/envelopes` → body: one envelope per line; processed in order as one short-lived
//!   agent connection (so a body can greet and then send); answers `{"results":[verdict…]}`
//! - `PUT /agh/v0/catalogs/{peer_id}` → body: a capability catalog (array of documents or
//!   `{"capabilities":[…]}`); stored durably, then applied; `DELETE` removes it.
//!
//! Connection limits, timeouts and the Host, Origin and API key checks happen before these
//! handlers, in [`crate::serve`]. An agent session whose WebSocket breaks the protocol is closed
//! with a status code: 1009 for a message over the envelope limit, 1007 for a text frame that is
//! not UTF-8, 1002 for other protocol errors, 1001 when it was idle for too long.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agora_agh::{Catalog, MAX_ENVELOPE_BYTES};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::agh::{AGENT_QUEUE, ConnId, Input, Verdict};
use crate::mesh;
use crate::serve::json_error as error;

/// Largest HTTP body accepted (many envelopes per post).
const MAX_BODY: usize = 8 << 20;

/// Largest WebSocket message (and frame) from an agent: one envelope and some slack.
const MAX_AGENT_MESSAGE: usize = MAX_ENVELOPE_BYTES + 1024;

/// The HTTP API's read-only endpoints, which `public_reads` opens without the API key.
pub const READ_ONLY_PATHS: &[&str] = &[
    "/healthz",
    "/status",
    "/hyperspace/cards",
    "/agh/v0/peers",
    "/",
    "/dashboard/app.js",
    "/dashboard/style.css",
];

/// Paths that answer without the API key in every case: the dashboard's static page, script
/// and style sheet (no state in them; the page asks for the key and sends it with its data
/// requests).
pub const ASSET_PATHS: &[&str] = &["/", "/dashboard/app.js", "/dashboard/style.css"];

/// Shared state of the listeners.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The AGH service.
    pub agh: mpsc::Sender<Input>,
    /// The mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
    /// The Hyperspace service.
    pub hyperspace: mpsc::Sender<crate::hyperspace::Input>,
    /// The memory service.
    pub memory: mpsc::Sender<crate::hyperspace::memory::Input>,
    /// The learning service.
    pub learning: mpsc::Sender<crate::hyperspace::learning::Input>,
    /// The Self-Improving service.
    pub improving: mpsc::Sender<crate::hyperspace::improving::Input>,
    /// The Micropayments service.
    pub payments: mpsc::Sender<crate::hyperspace::payments::Input>,
    /// Connection id source.
    pub conn_ids: Arc<AtomicU64>,
    /// Node start time.
    pub started: Instant,
    /// The faces this node serves (`agh` → `ws://…/agh/v0`, `http` → `http://…`).
    pub faces: Arc<Vec<(&'static str, String)>>,
    /// How often agents are pinged ([`crate::serve::ws_ping_interval`]).
    pub ping_every: std::time::Duration,
    /// The node's metrics.
    pub telemetry: Arc<crate::telemetry::Telemetry>,
    /// The Agent Name Service (for the dashboard).
    pub ans: Arc<crate::agtp::ans::Ans>,
    /// The data directory, as configured (shown on the dashboard).
    pub data_dir: Arc<str>,
    /// The dashboard's last snapshot, shared by every open dashboard.
    pub snapshot: crate::dashboard::Cache,
}

impl AppState {
    fn next_conn(&self) -> ConnId {
        ConnId(self.conn_ids.fetch_add(1, Ordering::Relaxed))
    }
}

/// The AGH face: `GET /agh/v0` upgrades to a WebSocket; each text frame is one envelope.
pub fn agh_face(state: AppState) -> Router {
    Router::new()
        .route("/agh/v0", get(agh_ws))
        .with_state(state)
}

/// The HTTP API face.
pub fn http_face(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/status", get(status))
        .route("/hyperspace/cards", get(hyperspace_cards))
        .route("/hyperspace/settlements", get(hyperspace_settlements))
        .route("/pay/tools/{tool_id}/invoke", post(pay_tool_invoke))
        .route("/agh/v0/peers", get(peers))
        .route("/agh/v0/envelopes", post(post_envelopes))
        .route(
            "/agh/v0/catalogs/{peer_id}",
            put(put_catalog).delete(delete_catalog),
        )
        .merge(crate::dashboard::routes())
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

fn unavailable() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "the node is shutting down")
}

async fn agh_ws(State(state): State<AppState>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(MAX_AGENT_MESSAGE)
        .max_frame_size(MAX_AGENT_MESSAGE)
        .on_upgrade(move |socket| agent_session(state, socket))
}

async fn agent_session(state: AppState, socket: WebSocket) {
    let conn = state.next_conn();
    let (frames_tx, mut frames_rx) = mpsc::channel::<String>(AGENT_QUEUE);
    if state
        .agh
        .send(Input::Connect {
            conn,
            frames: frames_tx.clone(),
        })
        .await
        .is_err()
    {
        return;
    }
    let (mut sink, mut stream) = socket.split();
    // A protocol error closes at once with its code; otherwise queued frames go out first.
    let (close_tx, mut close_rx) = oneshot::channel::<CloseFrame>();
    let ping_every = state.ping_every;
    let writer = tokio::spawn(async move {
        let mut closing = false;
        // Pings keep a quiet agent's connection alive: only what it sends counts toward the
        // serving layer's idle bound, and it answers pings.
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = ping.tick() => {
                    if sink.send(Message::Ping(Vec::new().into())).await.is_err() {
                        return;
                    }
                }
                close = &mut close_rx, if !closing => {
                    closing = true;
                    if let Ok(frame) = close {
                        let _ = sink.send(Message::Close(Some(frame))).await;
                        return;
                    }
                }
                frame = frames_rx.recv() => {
                    let Some(frame) = frame else { break };
                    if sink.send(Message::Text(frame.into())).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sink.close().await;
    });
    loop {
        let message = match stream.next().await {
            None => break,
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                if let Some(frame) = close_frame(e) {
                    tracing::debug!(conn = conn.0, code = frame.code, reason = %frame.reason, "closing an agent's WebSocket");
                    let _ = close_tx.send(frame);
                }
                break;
            }
        };
        match message {
            Message::Text(text) => {
                let input = Input::FromAgent {
                    conn,
                    bytes: text.as_bytes().to_vec(),
                    verdict: None,
                };
                if state.agh.send(input).await.is_err() {
                    break;
                }
            }
            Message::Binary(_) => {
                let v = Verdict {
                    ok: false,
                    id: None,
                    reason: Some("malformed".into()),
                    detail: Some("envelopes are sent as text frames".into()),
                };
                let _ = frames_tx.try_send(v.error_frame());
            }
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => {}
        }
    }
    let _ = state.agh.send(Input::Disconnect(conn)).await;
    drop(frames_tx);
    let _ = writer.await;
}

/// The close frame for an error on an agent's WebSocket; `None` when the connection is gone.
fn close_frame(error: axum::Error) -> Option<CloseFrame> {
    use tungstenite::error::{Error as WsError, ProtocolError};
    let inner = error.into_inner();
    let (code, reason) = match inner.downcast_ref::<WsError>()? {
        WsError::Capacity(_) => (
            close_code::SIZE,
            format!("message over the limit of {MAX_AGENT_MESSAGE} bytes"),
        ),
        WsError::Utf8(_) => (close_code::INVALID, "text frame is not UTF-8".to_owned()),
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => return None,
        WsError::Protocol(p) => (close_code::PROTOCOL, format!("protocol error: {p}")),
        WsError::Io(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            (close_code::AWAY, "idle for too long".to_owned())
        }
        _ => return None,
    };
    // A close reason is at most 123 bytes.
    let mut reason = reason;
    while reason.len() > 123 {
        reason.pop();
    }
    Some(CloseFrame {
        code,
        reason: reason.into(),
    })
}

async fn status(State(state): State<AppState>) -> Response {
    match status_value(&state).await {
        Some(v) => Json(v).into_response(),
        None => unavailable(),
    }
}

/// The `/status` document; `None` when the mesh or the AGH service is gone.
pub(crate) async fn status_value(state: &AppState) -> Option<serde_json::Value> {
    let (tx, rx) = oneshot::channel();
    let (stx, srx) = oneshot::channel();
    if state.mesh.send(mesh::Command::Status(tx)).await.is_err()
        || state.agh.send(Input::Stats(stx)).await.is_err()
    {
        return None;
    }
    let (Ok(mesh), Ok(agh)) = (rx.await, srx.await) else {
        return None;
    };
    use crate::hyperspace::{improving, learning, memory, payments};
    let memory = ask(&state.memory, memory::Input::Status).await;
    let learning = ask(&state.learning, learning::Input::Status).await;
    let improving = ask(&state.improving, improving::Input::Status).await;
    let payments = ask(&state.payments, payments::Input::Status).await;
    Some(json!({
        "peer_id": mesh.peer_id,
        "uptime_secs": state.started.elapsed().as_secs(),
        "listen": mesh.listen,
        "faces": state.faces.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        "connected": mesh.connected,
        "topics": mesh.topics,
        "gossip": {
            "message_limit": mesh::MAX_MESSAGE_BYTES,
            "frame_limit": mesh::MAX_FRAME_BYTES,
            "topic_budget": {
                "max_topics": mesh.topic_budget.max_topics,
                "max_bytes": mesh.topic_budget.max_bytes,
                "topics": mesh.topic_budget.topics,
                "bytes": mesh.topic_budget.bytes,
                "by_class": mesh.topic_budget.by_class,
                "rendezvous": mesh.topic_budget.rendezvous,
                "refused": mesh.topic_budget.refused,
            },
            "refused": mesh.refused,
            "dropped": mesh.dropped,
            "mesh": mesh.mesh,
            "neighbours": mesh.neighbours,
            "outbound_streams": mesh.outbound_streams,
            "split_rpcs": mesh.split_rpcs,
            "scores": mesh.scores,
        },
        "agh": agh,
        "memory": memory,
        "learning": learning,
        "improving": improving,
        "payments": payments,
        "kad_peers": mesh.kad_peers,
        "mesh_peers": mesh.mesh_peers,
    }))
}

/// Asks a service for a JSON report (`make` wraps the reply channel in its input); `null` when
/// the service is gone.
pub(crate) async fn ask<I>(
    service: &mpsc::Sender<I>,
    make: impl FnOnce(oneshot::Sender<serde_json::Value>) -> I,
) -> serde_json::Value {
    let (tx, rx) = oneshot::channel();
    if service.send(make(tx)).await.is_err() {
        return serde_json::Value::Null;
    }
    rx.await.unwrap_or(serde_json::Value::Null)
}

/// `POST /pay/tools/{toolId}/invoke` (spec §6.3): runs a tool with the request body (JSON) as
/// its input. A priced tool without payment answers 402 with the challenge (x402 v2
/// `PaymentRequired`) in the body and, base64, in `X-Payment-Required` (and x402 v2's
/// `PAYMENT-REQUIRED`); with a credential in `X-Payment` (or `X-PAYMENT`, or v2's
/// `PAYMENT-SIGNATURE`) the tool runs and the answer is 200 with `{result, duration, peerId}` and
/// the receipt, base64, in `X-Payment-Response` (and `PAYMENT-RESPONSE`). A refused credential is
/// 402 again, with `data.reason` in the body.
async fn pay_tool_invoke(
    State(state): State<AppState>,
    Path(tool_id): Path<String>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    use base64::Engine as _;
    let input: serde_json::Value = if body.is_empty() {
        serde_json::Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("the body is not JSON: {e}"),
                );
            }
        }
    };
    let credential = ["x-payment", "payment-signature"]
        .iter()
        .find_map(|h| headers.get(*h))
        .and_then(|v| v.to_str().ok())
        .map(|v| serde_json::Value::String(v.trim().to_owned()));
    let mut params = json!({ "toolId": tool_id, "params": input });
    if let Some(c) = credential {
        params["payment"] = json!({ "credential": c });
    }
    let (reply, answer) = oneshot::channel();
    let call = crate::rpc::Call {
        principal: crate::rpc::Principal::ApiKey,
        conn: 0,
        request: agora_hyperspace::jsonrpc::Request {
            id: None,
            method: "tool.invoke".into(),
            params: Some(params),
        },
        reply,
    };
    if state
        .hyperspace
        .send(crate::hyperspace::Input::Call(call))
        .await
        .is_err()
    {
        return unavailable();
    }
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(v).unwrap_or_default())
    };
    match answer.await {
        Ok(Ok(mut result)) => {
            let payment = result
                .as_object_mut()
                .and_then(|o| o.remove("payment"))
                .and_then(|p| p.get("paymentResponse").cloned());
            let mut response = Json(result).into_response();
            if let Some(p) = payment
                && let Ok(v) = axum::http::HeaderValue::from_str(&b64(&p))
            {
                response
                    .headers_mut()
                    .insert("x-payment-response", v.clone());
                response.headers_mut().insert("payment-response", v);
            }
            response
        }
        Ok(Err(e)) if e.code == agora_hyperspace::jsonrpc::RpcCode::BUDGET_EXCEEDED => {
            let data = e.data.unwrap_or(serde_json::Value::Null);
            let mut challenge = data
                .get("challenge")
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            if let Some(o) = challenge.as_object_mut() {
                o.insert("error".into(), json!(e.message));
                o.insert(
                    "reason".into(),
                    data.get("reason")
                        .cloned()
                        .unwrap_or_else(|| json!("payment-required")),
                );
            }
            let header = b64(&challenge);
            let mut response = (StatusCode::PAYMENT_REQUIRED, Json(challenge)).into_response();
            if let Ok(v) = axum::http::HeaderValue::from_str(&header) {
                response
                    .headers_mut()
                    .insert("x-payment-required", v.clone());
                response.headers_mut().insert("payment-required", v);
            }
            response
        }
        Ok(Err(e)) => {
            let status = match e.code {
                agora_hyperspace::jsonrpc::RpcCode::INVALID_PARAMS => StatusCode::BAD_REQUEST,
                agora_hyperspace::jsonrpc::RpcCode::PEER_UNAVAILABLE => StatusCode::BAD_GATEWAY,
                agora_hyperspace::jsonrpc::RpcCode::RATE_LIMITED => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, Json(json!({ "error": e }))).into_response()
        }
        Err(_) => unavailable(),
    }
}

/// `GET /hyperspace/settlements`: the settlement log (newest first), from this node's payments
/// and the settlement gossip it verified.
async fn hyperspace_settlements(State(state): State<AppState>) -> Response {
    match ask(
        &state.payments,
        crate::hyperspace::payments::Input::Settlements,
    )
    .await
    {
        serde_json::Value::Null => unavailable(),
        log => Json(log).into_response(),
    }
}

/// `GET /hyperspace/cards`: the capability cards this node knows and the card records it holds
/// for the DHT.
async fn hyperspace_cards(State(state): State<AppState>) -> Response {
    let (tx, rx) = oneshot::channel();
    if state
        .hyperspace
        .send(crate::hyperspace::Input::Cards(tx))
        .await
        .is_err()
    {
        return unavailable();
    }
    match rx.await {
        Ok(v) => Json(v).into_response(),
        Err(_) => unavailable(),
    }
}

#[derive(Debug, Deserialize)]
struct PeersQuery {
    channel: Option<String>,
}

async fn peers(State(state): State<AppState>, Query(q): Query<PeersQuery>) -> Response {
    if let Some(c) = &q.channel
        && !agora_agh::grammar::is_channel(c)
    {
        return error(
            StatusCode::BAD_REQUEST,
            format!("{c:?} is not a channel name"),
        );
    }
    let (tx, rx) = oneshot::channel();
    if state
        .agh
        .send(Input::Peers {
            channel: q.channel,
            reply: tx,
        })
        .await
        .is_err()
    {
        return unavailable();
    }
    match rx.await {
        Ok(peers) => Json(json!({ "peers": peers })).into_response(),
        Err(_) => unavailable(),
    }
}

async fn post_envelopes(State(state): State<AppState>, body: axum::body::Bytes) -> Response {
    let conn = state.next_conn();
    let (frames, _drain) = mpsc::channel(AGENT_QUEUE);
    if state
        .agh
        .send(Input::Connect { conn, frames })
        .await
        .is_err()
    {
        return unavailable();
    }
    let mut results = Vec::new();
    for line in body.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let (tx, rx) = oneshot::channel();
        let input = Input::FromAgent {
            conn,
            bytes: line.to_vec(),
            verdict: Some(tx),
        };
        if state.agh.send(input).await.is_err() {
            return unavailable();
        }
        match rx.await {
            Ok(v) => results.push(v),
            Err(_) => return unavailable(),
        }
    }
    let _ = state.agh.send(Input::Disconnect(conn)).await;
    let status = if results.iter().all(|v| v.ok) {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    (status, Json(json!({ "results": results }))).into_response()
}

async fn put_catalog(
    State(state): State<AppState>,
    Path(peer_id): Path<String>,
    body: String,
) -> Response {
    let catalog = match Catalog::from_json(&body) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let ids: Vec<String> = catalog.ids().map(str::to_owned).collect();
    set_catalog(state, peer_id, Some(catalog), ids).await
}

async fn delete_catalog(State(state): State<AppState>, Path(peer_id): Path<String>) -> Response {
    set_catalog(state, peer_id, None, Vec::new()).await
}

async fn set_catalog(
    state: AppState,
    peer_id: String,
    catalog: Option<Catalog>,
    ids: Vec<String>,
) -> Response {
    let (tx, rx) = oneshot::channel();
    let input = Input::SetCatalog {
        peer_id: peer_id.clone(),
        catalog,
        reply: tx,
    };
    if state.agh.send(input).await.is_err() {
        return unavailable();
    }
    match rx.await {
        Ok(Ok(channels)) => Json(json!({
            "peer_id": peer_id,
            "capabilities": ids,
            "applied_to_channels": channels,
        }))
        .into_response(),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, e),
        Err(_) => unavailable(),
    }
}
