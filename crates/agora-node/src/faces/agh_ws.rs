//! The AGH WebSocket face for agents: `GET /agh/v0` upgrades to a WebSocket and each text
//! frame is one envelope (AGH Network v0). An agent session whose WebSocket breaks the protocol
//! is closed with a status code: 1009 for a message over the envelope limit, 1007 for a text
//! frame that is not UTF-8, 1002 for other protocol errors, 1001 when it was idle for too long.
//!
//! Connection limits, timeouts and the Host, Origin and API key checks happen before this face,
//! in [`crate::faces::serve`].

use agora_agh::MAX_ENVELOPE_BYTES;
use axum::Router;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::Response;
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};

use crate::agh::{AGENT_QUEUE, Input, Verdict};
use crate::faces::state::AppState;
use crate::faces::wrong_face::{self, Faces};

/// Largest WebSocket message (and frame) from an agent: one envelope and some slack.
const MAX_AGENT_MESSAGE: usize = MAX_ENVELOPE_BYTES + 1024;

/// The AGH face: `GET /agh/v0` upgrades to a WebSocket; each text frame is one envelope.
pub fn agh_face(state: AppState) -> Router {
    let faces = Faces::new(std::sync::Arc::clone(&state.faces));
    let told = wrong_face::not_upgraded(faces, "AGH", "agh");
    Router::new()
        .route("/agh/v0", get(agh_ws).fallback(told.clone()))
        .fallback(told)
        .with_state(state)
}

async fn agh_ws(
    State(state): State<AppState>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let faces = Faces::new(std::sync::Arc::clone(&state.faces));
    let Ok(ws) = ws else {
        return wrong_face::upgrade_required(&faces, "AGH", &faces.url("agh"));
    };
    ws.max_message_size(MAX_AGENT_MESSAGE)
        .max_frame_size(MAX_AGENT_MESSAGE)
        .on_upgrade(move |socket| agent_session(state, socket))
}

async fn agent_session(state: AppState, socket: WebSocket) {
    let conn = state.next_conn();
    let budget = crate::agh::InFlight::connection();
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
                if let Some(id) = wrong_face::jsonrpc_id(text.as_str()) {
                    // A JSON-RPC client at the wrong address: one answer it can read.
                    let faces = Faces::new(std::sync::Arc::clone(&state.faces));
                    let error = agora_hyperspace::jsonrpc::RpcError::invalid_request()
                        .with_message(faces.jsonrpc_on_agh());
                    let reply = serde_json::json!({
                        "jsonrpc": "2.0", "id": id, "error": error,
                    });
                    let _ = frames_tx.try_send(reply.to_string());
                    continue;
                }
                let Some(held) = state.agh_in_flight.hold(&budget, text.len()).await else {
                    break;
                };
                let input = Input::FromAgent {
                    conn,
                    bytes: text.as_bytes().to_vec(),
                    verdict: None,
                    held,
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
