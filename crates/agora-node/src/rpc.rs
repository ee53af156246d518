//! The Hyperspace JSON-RPC 2.0 face: `ws://<rpc-listen>/` (spec §2.2, default port 3100).
//!
//! Each text frame is one JSON-RPC message or batch, framed by [`agora_hyperspace::jsonrpc`];
//! requests go to the Hyperspace service task and the replies come back in order.
//!
//! Authentication (spec §2.3), checked on the WebSocket upgrade request's
//! `Authorization: Bearer <token>` header:
//! - the **API key** (`[rpc] api_key` / `AGORA_RPC_API_KEY`) grants everything. It is required when
//!   the face is bound beyond loopback (the node refuses to start otherwise) and optional on
//!   loopback (when set, it is required there too);
//! - a **session token**, returned by `state.createSession` as `sessionToken`, grants only calls
//!   about that session and stops working when the session ends;
//! - on loopback without a configured key, a client without a header is trusted (local SDK use).
//!
//! Limits: messages over [`MAX_MESSAGE_BYTES`] close the connection; each connection and each
//! credential has a token bucket (defaults [`CONN_RATE`] and [`KEY_RATE`] requests per second,
//! bursts of one second's worth); a request over either answers −32003 "Rate Limited" with
//! `data.retryAfterMs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agora_hyperspace::jsonrpc::{self, Frame, Request, RpcError};
use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// Largest JSON-RPC message accepted.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Default requests per second per connection.
pub const CONN_RATE: f64 = 200.0;
/// Default requests per second per credential (API key or session token).
pub const KEY_RATE: f64 = 1000.0;
/// Largest batch accepted.
pub const MAX_BATCH: usize = 256;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A loopback client without credentials (allowed only when no API key is configured).
    Local,
    /// Holder of the API key.
    ApiKey,
    /// Holder of a session token: may act on that session only.
    Session(String),
}

/// One call for the Hyperspace service.
#[derive(Debug)]
pub struct Call {
    /// Caller.
    pub principal: Principal,
    /// The request.
    pub request: Request,
    /// The outcome.
    pub reply: oneshot::Sender<Result<Value, RpcError>>,
}

/// Token bucket.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Self {
        Self {
            tokens: rate,
            last: Instant::now(),
        }
    }

    /// Takes one token; on refusal, how long until one is available.
    fn take(&mut self, rate: f64, now: Instant) -> Result<(), u64> {
        let elapsed = now.duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err((((1.0 - self.tokens) / rate) * 1000.0).ceil() as u64)
        }
    }
}

/// Settings and shared state of the face.
#[derive(Clone, Debug)]
pub struct RpcState {
    /// The Hyperspace service.
    pub calls: mpsc::Sender<Call>,
    /// Configured API key.
    pub api_key: Option<Arc<str>>,
    /// Whether the face is bound to loopback.
    pub loopback: bool,
    /// Live session tokens → session id (maintained by the Hyperspace service).
    pub tokens: Arc<Mutex<HashMap<String, String>>>,
    /// Per-credential buckets.
    key_buckets: Arc<Mutex<HashMap<Principal, Bucket>>>,
    /// Requests per second per connection.
    pub conn_rate: f64,
    /// Requests per second per credential.
    pub key_rate: f64,
}

impl RpcState {
    /// State for a face bound to `loopback` (or not) with an optional API key.
    pub fn new(
        calls: mpsc::Sender<Call>,
        api_key: Option<String>,
        loopback: bool,
        tokens: Arc<Mutex<HashMap<String, String>>>,
    ) -> Self {
        Self {
            calls,
            api_key: api_key.map(Into::into),
            loopback,
            tokens,
            key_buckets: Arc::new(Mutex::new(HashMap::new())),
            conn_rate: CONN_RATE,
            key_rate: KEY_RATE,
        }
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, &'static str> {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match (bearer, &self.api_key) {
            (Some(t), Some(key)) if constant_time_eq(t.as_bytes(), key.as_bytes()) => {
                Ok(Principal::ApiKey)
            }
            (Some(t), _) => {
                let tokens = self.tokens.lock().map_err(|_| "token table unavailable")?;
                tokens
                    .get(t)
                    .map(|session| Principal::Session(session.clone()))
                    .ok_or("unknown API key or session token")
            }
            (None, None) if self.loopback => Ok(Principal::Local),
            (None, _) => {
                Err("an Authorization: Bearer <API key or session token> header is required")
            }
        }
    }

    fn take_key_token(&self, principal: &Principal) -> Result<(), u64> {
        let Ok(mut buckets) = self.key_buckets.lock() else {
            return Ok(());
        };
        let rate = self.key_rate;
        let now = Instant::now();
        if buckets.len() > 100_000 {
            buckets.retain(|_, b| now.duration_since(b.last).as_secs() < 60);
        }
        buckets
            .entry(principal.clone())
            .or_insert_with(|| Bucket::new(rate))
            .take(rate, now)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The face's router: the WebSocket endpoint at `/`.
pub fn face(state: RpcState) -> Router {
    Router::new().route("/", get(upgrade)).with_state(state)
}

async fn upgrade(
    State(state): State<RpcState>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let principal = match state.authenticate(&headers) {
        Ok(p) => p,
        Err(why) => {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                axum::Json(json!({ "error": why })),
            )
                .into_response();
        }
    };
    ws.max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| session(state, principal, socket))
}

async fn session(state: RpcState, principal: Principal, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let mut bucket = Bucket::new(state.conn_rate);
    while let Some(Ok(message)) = stream.next().await {
        let text = match message {
            Message::Text(t) => t,
            Message::Binary(_) => {
                let reply = jsonrpc::ErrorResponse::new(
                    jsonrpc::Id::null(),
                    RpcError::invalid_request()
                        .with_data(json!("JSON-RPC messages are text frames")),
                )
                .to_json();
                if sink.send(Message::Text(reply.into())).await.is_err() {
                    break;
                }
                continue;
            }
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
        };
        let reply = handle(&state, &principal, &mut bucket, text.as_str()).await;
        if let Some(reply) = reply
            && sink.send(Message::Text(reply.into())).await.is_err()
        {
            break;
        }
    }
}

async fn handle(
    state: &RpcState,
    principal: &Principal,
    bucket: &mut Bucket,
    text: &str,
) -> Option<String> {
    match jsonrpc::parse_frame(text) {
        Frame::Single(item) => {
            let response = respond(state, principal, bucket, item).await?;
            Some(response.to_json())
        }
        Frame::Batch(items) => {
            if items.len() > MAX_BATCH {
                return Some(
                    jsonrpc::ErrorResponse::new(
                        jsonrpc::Id::null(),
                        RpcError::invalid_request().with_data(json!(format!(
                            "batches are limited to {MAX_BATCH} requests"
                        ))),
                    )
                    .to_json(),
                );
            }
            let mut out = Vec::new();
            for item in items {
                if let Some(r) = respond(state, principal, bucket, item).await {
                    out.push(r);
                }
            }
            jsonrpc::encode_batch(&out)
        }
    }
}

async fn respond(
    state: &RpcState,
    principal: &Principal,
    bucket: &mut Bucket,
    item: Result<Request, jsonrpc::ErrorResponse>,
) -> Option<jsonrpc::Response> {
    let request = match item {
        Ok(r) => r,
        Err(e) => return Some(e.into()),
    };
    let limited = bucket
        .take(state.conn_rate, Instant::now())
        .and_then(|()| state.take_key_token(principal));
    let outcome = match limited {
        Err(retry_after) => {
            Err(RpcError::rate_limited().with_data(json!({ "retryAfterMs": retry_after })))
        }
        Ok(()) => {
            let (tx, rx) = oneshot::channel();
            let call = Call {
                principal: principal.clone(),
                request: request.clone(),
                reply: tx,
            };
            if state.calls.send(call).await.is_err() {
                Err(RpcError::internal_error().with_message("the node is shutting down"))
            } else {
                rx.await.unwrap_or_else(|_| {
                    Err(RpcError::internal_error().with_message("the call was dropped"))
                })
            }
        }
    };
    request.reply(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refill_at_their_rate() {
        let t0 = Instant::now();
        let mut b = Bucket {
            tokens: 2.0,
            last: t0,
        };
        assert!(b.take(2.0, t0).is_ok());
        assert!(b.take(2.0, t0).is_ok());
        let wait = b.take(2.0, t0).unwrap_err();
        assert_eq!(wait, 500);
        assert!(
            b.take(2.0, t0 + std::time::Duration::from_millis(500))
                .is_ok()
        );
    }

    #[test]
    fn authentication_tiers() {
        let (tx, _rx) = mpsc::channel(1);
        let tokens = Arc::new(Mutex::new(HashMap::from([(
            "tok".to_owned(),
            "s-1".to_owned(),
        )])));
        let with_key = RpcState::new(tx.clone(), Some("k3y".into()), true, Arc::clone(&tokens));
        let open = RpcState::new(tx.clone(), None, true, Arc::clone(&tokens));
        let remote = RpcState::new(tx, None, false, tokens);
        let h = |v: Option<&str>| {
            let mut m = HeaderMap::new();
            if let Some(v) = v {
                m.insert(header::AUTHORIZATION, v.parse().unwrap());
            }
            m
        };
        assert_eq!(
            with_key.authenticate(&h(Some("Bearer k3y"))),
            Ok(Principal::ApiKey)
        );
        assert_eq!(
            with_key.authenticate(&h(Some("Bearer tok"))),
            Ok(Principal::Session("s-1".into()))
        );
        assert!(
            with_key.authenticate(&h(None)).is_err(),
            "a configured key is required on loopback too"
        );
        assert!(with_key.authenticate(&h(Some("Bearer nope"))).is_err());
        assert_eq!(open.authenticate(&h(None)), Ok(Principal::Local));
        assert!(remote.authenticate(&h(None)).is_err());
    }
}
