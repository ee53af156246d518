//! The node as an A2A 1.0 agent (A2A spec v1.0.1, JSON-RPC binding; the note's §6.4;
//! `docs/bridges.md` "The node as an A2A agent"), on the HTTP face:
//! - `GET /.well-known/agent-card.json` (a read, `READ_ONLY_PATHS`): the node's Agent Card, one skill per tool this
//!   node can invoke (`tool.discover {query: ""}`: local, bridged and discovered), signed with
//!   ES256 over RFC 8785 JCS ([`agora_bridge::a2a::jws::sign_card`]) with the key of
//!   `<data>/a2a-card-key.json` (private JWK, made at first start); rebuilt at most every
//!   [`CARD_TTL`].
//! - `GET /.well-known/agent-card-key.json` (a read): that key's public JWK, for clients that
//!   verify the card.
//! - `POST /a2a` (API key, as the other write paths): `SendMessage`, `SendStreamingMessage` (SSE:
//!   the task first, then its artifact and final status; closed at the terminal state),
//!   `GetTask`, `ListTasks`, `CancelTask` (aborts the in-flight `tool.invoke` → CANCELED, or
//!   −32002 TaskNotCancelable). Push-notification methods → −32003, `SubscribeToTask` → −32004,
//!   `GetExtendedAgentCard` → −32007; a request without `A2A-Version: 1.0` (a header, or a query
//!   parameter of that name; a missing one means 0.3, A2A §3.6) → −32009.
//!
//! A message becomes a `tool.invoke` as [`agora_bridge::a2a::serve`] says; its outcome becomes the
//! task's state there too (Hyperspace codes are translated, never passed on). Tasks are kept in
//! redb (`a2a_tasks`) and in memory, at most `[bridge] a2a_max_tasks` (the oldest finished task is
//! forgotten first; when every task is in flight a new message is refused with −32603), each for
//! `[bridge] a2a_task_ttl` after its last change.

use std::convert::Infallible;

use agora_bridge::a2a::serve::{codes, methods};
use agora_bridge::a2a::{VERSION, VERSION_HEADER};
use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::faces::state::AppState;

pub mod agent;

pub use agent::{A2aFace, CARD_PATH, CARD_TTL, KEY_FILE, KEY_PATH, RPC_PATH, Settings};
use agent::{a2a_err, is_final};

/// The routes of the A2A face (merged into the HTTP face).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(CARD_PATH, get(card))
        .route(KEY_PATH, get(card_key))
        .route(RPC_PATH, post(rpc))
}

async fn card(State(state): State<AppState>) -> Response {
    match state.a2a.card().await {
        Some((card, _)) => ([("cache-control", "max-age=5")], Json(card)).into_response(),
        None => crate::faces::serve::json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the node is shutting down",
        ),
    }
}

async fn card_key(State(state): State<AppState>) -> Response {
    Json(state.a2a.0.key.verifying_key().to_jwk()).into_response()
}

fn answer(id: &Value, outcome: Result<Value, RpcError>) -> Response {
    let body = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
    };
    Json(body).into_response()
}

/// `POST /a2a`.
async fn rpc(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    body: axum::body::Bytes,
) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return answer(&Value::Null, Err(RpcError::parse_error()));
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let Some(method) = request.get("method").and_then(Value::as_str) else {
        return answer(&id, Err(RpcError::invalid_request()));
    };
    // The version as a header, else as a query parameter (A2A 1.0 §3.6 allows either).
    let from_query = query.as_deref().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k.eq_ignore_ascii_case(VERSION_HEADER))
            .map(|(_, v)| v.into_owned())
    });
    let version = headers
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(from_query)
        .unwrap_or_else(|| "0.3".to_owned());
    if !(version == VERSION || version == "1") {
        return answer(
            &id,
            Err(a2a_err(
                codes::VERSION_NOT_SUPPORTED,
                &format!("A2A version {version} is not supported; send A2A-Version: {VERSION}"),
            )),
        );
    }
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    let face = &state.a2a;
    let task_id = || {
        params
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let outcome = match method {
        methods::SEND_MESSAGE => match face.start(&params).await {
            Ok((task, mut rx)) => {
                let immediately = params["configuration"]["returnImmediately"] == true;
                if immediately {
                    Ok(json!({"task": task}))
                } else {
                    let done = rx.wait_for(is_final).await.map(|t| t.clone());
                    Ok(json!({"task": done.unwrap_or(task)}))
                }
            }
            Err(e) => Err(e),
        },
        methods::SEND_STREAMING_MESSAGE => {
            return match face.start(&params).await {
                Ok((task, rx)) => stream(id, &task, rx),
                Err(e) => answer(&id, Err(e)),
            };
        }
        methods::GET_TASK => face.get(&task_id()),
        methods::LIST_TASKS => Ok(face.list(&params)),
        methods::CANCEL_TASK => face.cancel(&task_id()).await,
        methods::SUBSCRIBE_TO_TASK => Err(a2a_err(
            codes::UNSUPPORTED_OPERATION,
            "SubscribeToTask is not offered",
        )),
        methods::GET_EXTENDED_AGENT_CARD => Err(a2a_err(
            codes::EXTENDED_CARD_NOT_CONFIGURED,
            "no extended agent card",
        )),
        m if methods::PUSH.contains(&m) => Err(a2a_err(
            codes::PUSH_NOT_SUPPORTED,
            "push notifications are not supported",
        )),
        _ => Err(RpcError::new(RpcCode::METHOD_NOT_FOUND, "method not found")),
    };
    answer(&id, outcome)
}

/// The SSE answer of `SendStreamingMessage`: the task, then an artifact update per artifact and
/// the final status update; closed after it.
fn stream(id: Value, task: &Value, mut rx: watch::Receiver<Value>) -> Response {
    let frame = move |result: Value| {
        Ok::<_, Infallible>(
            Event::default()
                .data(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()),
        )
    };
    let first = frame(json!({"task": task}));
    let (task_id, context_id) = (task["id"].clone(), task["contextId"].clone());
    let (tx, out) = mpsc::channel::<Result<Event, Infallible>>(8);
    tokio::spawn(async move {
        if tx.send(first).await.is_err() {
            return;
        }
        let Ok(done) = rx.wait_for(is_final).await.map(|t| t.clone()) else {
            return;
        };
        for artifact in done["artifacts"].as_array().into_iter().flatten() {
            let update = json!({"artifactUpdate": {"taskId": task_id, "contextId": context_id, "artifact": artifact, "lastChunk": true}});
            if tx.send(frame(update)).await.is_err() {
                return;
            }
        }
        let status = json!({"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": done["status"]}});
        let _ = tx.send(frame(status)).await;
    });
    let stream =
        futures::stream::unfold(
            out,
            |mut out| async move { out.recv().await.map(|e| (e, out)) },
        );
    let mut response = Sse::new(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        "cache-control",
        axum::http::HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    response
}
