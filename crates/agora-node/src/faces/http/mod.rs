//! The HTTP API, for the CLI, scripts and the dashboard (JSON everywhere):
//! - `GET /healthz` → `{"status":"ok"}`
//! - `GET /status` → node id, listen addresses, connected nodes, topics, gossip limits, topic
//!   budget and refusals, AGH counters ([`status`])
//! - `GET /agh/v0/peers[?channel=C]` → `{"peers":[…]}`
//! - `POST /agh/v0/envelopes` → body: one envelope per line; processed in order as one short-lived
//!   agent connection (so a body can greet and then send); answers `{"results":[verdict…]}`
//! - `PUT /agh/v0/catalogs/{peer_id}` → body: a capability catalog (array of documents or
//!   `{"capabilities":[…]}`); stored durably, then applied; `DELETE` removes it.
//! - `GET /hyperspace/cards`, `GET /hyperspace/settlements`, `POST /pay/tools/{toolId}/invoke`
//!   (Hyperspace spec §6.3)
//! - the dashboard ([`dashboard`]) and `GET /metrics` ([`metrics`]).
//! - `GET /openrpc.json` → the OpenRPC document of the JSON-RPC face ([`crate::openrpc`]), the
//!   same as its `rpc.discover`.
//! - `GET /directory/search?q=…` and `GET /.well-known/ai-catalog.json`: the directory
//!   ([`directory`], [`crate::directory`]).
//! - `/mcp`, the node as an MCP server ([`crate::faces::mcp`]), merged into this face's router
//!   by [`crate::faces::serving`].
//! - the node as an A2A agent ([`crate::faces::a2a`]): `GET /.well-known/agent-card.json`,
//!   `GET /.well-known/agent-card-key.json` (public), `POST /a2a`.
//!
//! Connection limits, timeouts and the Host, Origin and API key checks happen before these
//! handlers, in [`crate::faces::serve`].

pub mod dashboard;
pub mod directory;
pub mod metrics;
pub mod status;

use agora_agh::Catalog;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::agh::{AGENT_QUEUE, Input};
use crate::faces::serve::json_error as error;
use crate::faces::state::{AppState, ask};
pub use status::status_value;

/// Largest HTTP body accepted (many envelopes per post).
const MAX_BODY: usize = 8 << 20;

/// The HTTP API's read-only endpoints, which `public_reads` opens without the API key.
pub const READ_ONLY_PATHS: &[&str] = &[
    "/healthz",
    "/status",
    "/hyperspace/cards",
    "/agh/v0/peers",
    "/",
    "/dashboard/app.js",
    "/dashboard/style.css",
    crate::faces::a2a::CARD_PATH,
    crate::faces::a2a::KEY_PATH,
    crate::openrpc::PATH,
    directory::SEARCH_PATH,
    directory::CATALOG_PATH,
];

/// Paths that answer without the API key in every case: the dashboard's static page, script
/// and style sheet (no state in them; the page asks for the key and sends it with its data
/// requests).
pub const ASSET_PATHS: &[&str] = &["/", "/dashboard/app.js", "/dashboard/style.css"];

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
        .route("/metrics", get(metrics::metrics))
        .route(
            crate::openrpc::PATH,
            get(|State(state): State<AppState>| async move {
                Json(serde_json::Value::clone(&state.openrpc))
            }),
        )
        .merge(dashboard::routes())
        .merge(directory::routes())
        .merge(crate::faces::a2a::routes())
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

fn unavailable() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "the node is shutting down")
}

async fn status(State(state): State<AppState>) -> Response {
    match status_value(&state).await {
        Some(v) => Json(v).into_response(),
        None => unavailable(),
    }
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
    let (call, answer) = crate::call::Call::as_api_key("tool.invoke", params);
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
    let budget = crate::agh::InFlight::connection();
    for line in body.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let (tx, rx) = oneshot::channel();
        let Some(held) = state.agh_in_flight.hold(&budget, line.len()).await else {
            return unavailable();
        };
        let input = Input::FromAgent {
            conn,
            bytes: line.to_vec(),
            verdict: Some(tx),
            held,
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
