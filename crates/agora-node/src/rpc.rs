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
    /// The caller's connection (tools registered by it live as long as it does).
    pub conn: u64,
    /// The request.
    pub request: Request,
    /// The outcome.
    pub reply: oneshot::Sender<Result<Value, RpcError>>,
}

/// Server-to-client requests on open connections (a tool provider is asked to run its tool on
/// the connection that registered it).
#[derive(Clone, Debug, Default)]
pub struct Links {
    inner: Arc<Mutex<LinkTable>>,
}

#[derive(Debug, Default)]
struct LinkTable {
    next_conn: u64,
    next_request: u64,
    conns: HashMap<u64, mpsc::Sender<String>>,
    pending: HashMap<String, (u64, oneshot::Sender<Result<Value, RpcError>>)>,
}

impl Links {
    fn open(&self, out: mpsc::Sender<String>) -> u64 {
        let Ok(mut t) = self.inner.lock() else {
            return 0;
        };
        t.next_conn += 1;
        let id = t.next_conn;
        t.conns.insert(id, out);
        id
    }

    fn close(&self, conn: u64) {
        if let Ok(mut t) = self.inner.lock() {
            t.conns.remove(&conn);
            let gone: Vec<String> = t
                .pending
                .iter()
                .filter(|(_, (c, _))| *c == conn)
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                if let Some((_, tx)) = t.pending.remove(&k) {
                    let _ = tx.send(Err(
                        RpcError::peer_unavailable().with_message("the provider disconnected")
                    ));
                }
            }
        }
    }

    /// `true` while connection `conn` is open.
    pub fn is_open(&self, conn: u64) -> bool {
        self.inner.lock().is_ok_and(|t| t.conns.contains_key(&conn))
    }

    /// Sends `method(params)` to the client on `conn` and waits for its answer, at most
    /// `timeout`; −32006 when the connection is gone or does not answer in time.
    pub async fn request(
        &self,
        conn: u64,
        method: &str,
        params: Value,
        timeout: std::time::Duration,
    ) -> Result<Value, RpcError> {
        let unavailable = |why: &str| RpcError::peer_unavailable().with_message(why.to_owned());
        let (tx, rx) = oneshot::channel();
        let (out, id) = {
            let mut t = self
                .inner
                .lock()
                .map_err(|_| unavailable("link table unavailable"))?;
            let out = t
                .conns
                .get(&conn)
                .cloned()
                .ok_or_else(|| unavailable("the provider is not connected"))?;
            t.next_request += 1;
            let id = format!("srv-{}", t.next_request);
            t.pending.insert(id.clone(), (conn, tx));
            (out, id)
        };
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if out.send(req.to_string()).await.is_err() {
            self.forget(&id);
            return Err(unavailable("the provider is not connected"));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(unavailable("the provider disconnected")),
            Err(_) => {
                self.forget(&id);
                Err(unavailable("the provider did not answer in time"))
            }
        }
    }

    fn forget(&self, id: &str) {
        if let Ok(mut t) = self.inner.lock() {
            t.pending.remove(id);
        }
    }

    /// Routes a response frame from a client to the request that awaits it; `false` when the
    /// frame is not a response to one of ours.
    fn resolve(&self, frame: &Value) -> bool {
        let Some(id) = frame.get("id").and_then(Value::as_str) else {
            return false;
        };
        let Ok(mut t) = self.inner.lock() else {
            return false;
        };
        let Some((_, tx)) = t.pending.remove(id) else {
            return false;
        };
        let outcome = match (frame.get("result"), frame.get("error")) {
            (Some(r), None) => Ok(r.clone()),
            (_, Some(e)) => Err(RpcError::new(
                jsonrpc::RpcCode(
                    e["code"]
                        .as_i64()
                        .and_then(|c| i32::try_from(c).ok())
                        .unwrap_or(-32603),
                ),
                e["message"].as_str().unwrap_or("provider error").to_owned(),
            )
            .with_data(e.get("data").cloned().unwrap_or(Value::Null))),
            _ => Err(RpcError::invalid_request()
                .with_message("the provider sent a response without result or error")),
        };
        let _ = tx.send(outcome);
        true
    }
}

/// A frame that looks like a JSON-RPC response (no `method`, a `result` or an `error`).
fn as_response(text: &str) -> Option<Value> {
    let t = text.trim_start();
    if !t.starts_with('{') || !(t.contains("\"result\"") || t.contains("\"error\"")) {
        return None;
    }
    let v: Value = serde_json::from_str(t).ok()?;
    (v.get("method").is_none() && (v.get("result").is_some() || v.get("error").is_some()))
        .then_some(v)
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
    /// Open connections, for server-to-client requests.
    pub links: Links,
    /// Told the id of every connection that closes.
    pub closed: Option<mpsc::Sender<u64>>,
}

impl RpcState {
    /// State for a face bound to `loopback` (or not) with an optional API key.
    pub fn new(
        calls: mpsc::Sender<Call>,
        api_key: Option<String>,
        loopback: bool,
        tokens: Arc<Mutex<HashMap<String, String>>>,
        links: Links,
        closed: Option<mpsc::Sender<u64>>,
    ) -> Self {
        Self {
            calls,
            api_key: api_key.map(Into::into),
            loopback,
            tokens,
            key_buckets: Arc::new(Mutex::new(HashMap::new())),
            conn_rate: CONN_RATE,
            key_rate: KEY_RATE,
            links,
            closed,
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
    let (out, mut out_rx) = mpsc::channel::<String>(256);
    let writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            if sink.send(Message::Text(frame.into())).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let conn = state.links.open(out.clone());
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
                if out.send(reply).await.is_err() {
                    break;
                }
                continue;
            }
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
        };
        // Answers to our own requests (tool invocations) go to whoever waits for them.
        if let Some(v) = as_response(text.as_str())
            && state.links.resolve(&v)
        {
            continue;
        }
        // Calls reach the service in the order they were sent; their replies are awaited apart,
        // so a slow call (or a provider that is itself waiting) never blocks the connection.
        let pending = dispatch(&state, &principal, conn, &mut bucket, text.as_str()).await;
        let out2 = out.clone();
        tokio::spawn(async move {
            if let Some(reply) = pending.reply().await {
                let _ = out2.send(reply).await;
            }
        });
    }
    state.links.close(conn);
    if let Some(closed) = &state.closed {
        let _ = closed.send(conn).await;
    }
    drop(out);
    let _ = writer.await;
}

/// The replies one frame is waiting for, in request order.
enum Pending {
    /// Nothing to send (notifications only).
    Nothing,
    /// A reply that is ready now.
    Ready(String),
    /// Replies to wait for, in the order of the requests; `batch` says how to encode them.
    Waiting { slots: Vec<Slot>, batch: bool },
}

/// One element of a frame: a framing error, or a request and its outcome.
enum Slot {
    Error(jsonrpc::Response),
    Call(Request, Outcome),
}

/// An outcome now, or one the Hyperspace service will deliver.
enum Outcome {
    Now(Result<Value, RpcError>),
    Later(oneshot::Receiver<Result<Value, RpcError>>),
}

impl Outcome {
    async fn resolve(self) -> Result<Value, RpcError> {
        match self {
            Self::Now(r) => r,
            Self::Later(rx) => rx.await.unwrap_or_else(|_| {
                Err(RpcError::internal_error().with_message("the call was dropped"))
            }),
        }
    }
}

/// Parses a frame and hands its requests to the service in order (so the service sees a
/// connection's calls in the order they were sent); the replies are awaited separately.
async fn dispatch(
    state: &RpcState,
    principal: &Principal,
    conn: u64,
    bucket: &mut Bucket,
    text: &str,
) -> Pending {
    let (items, batch) = match jsonrpc::parse_frame(text) {
        Frame::Single(item) => (vec![item], false),
        Frame::Batch(items) => {
            if items.len() > MAX_BATCH {
                return Pending::Ready(
                    jsonrpc::ErrorResponse::new(
                        jsonrpc::Id::null(),
                        RpcError::invalid_request().with_data(json!(format!(
                            "batches are limited to {MAX_BATCH} requests"
                        ))),
                    )
                    .to_json(),
                );
            }
            (items, true)
        }
    };
    let mut slots = Vec::with_capacity(items.len());
    for item in items {
        slots.push(match item {
            Err(e) => Slot::Error(e.into()),
            Ok(request) => {
                let outcome = submit(state, principal, conn, bucket, &request).await;
                Slot::Call(request, outcome)
            }
        });
    }
    if slots.is_empty() {
        return Pending::Nothing;
    }
    Pending::Waiting { slots, batch }
}

impl Pending {
    /// Waits for the outcomes and encodes the reply.
    async fn reply(self) -> Option<String> {
        match self {
            Self::Nothing => None,
            Self::Ready(s) => Some(s),
            Self::Waiting { slots, batch } => {
                let mut out = Vec::with_capacity(slots.len());
                for slot in slots {
                    match slot {
                        Slot::Error(r) => out.push(r),
                        Slot::Call(request, outcome) => {
                            if let Some(r) = request.reply(outcome.resolve().await) {
                                out.push(r);
                            }
                        }
                    }
                }
                if batch {
                    jsonrpc::encode_batch(&out)
                } else {
                    out.pop().map(|r| r.to_json())
                }
            }
        }
    }
}

async fn submit(
    state: &RpcState,
    principal: &Principal,
    conn: u64,
    bucket: &mut Bucket,
    request: &Request,
) -> Outcome {
    let limited = bucket
        .take(state.conn_rate, Instant::now())
        .and_then(|()| state.take_key_token(principal));
    if let Err(retry_after) = limited {
        return Outcome::Now(Err(
            RpcError::rate_limited().with_data(json!({ "retryAfterMs": retry_after }))
        ));
    }
    let (tx, rx) = oneshot::channel();
    let call = Call {
        principal: principal.clone(),
        conn,
        request: request.clone(),
        reply: tx,
    };
    if state.calls.send(call).await.is_err() {
        return Outcome::Now(Err(
            RpcError::internal_error().with_message("the node is shutting down")
        ));
    }
    Outcome::Later(rx)
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
        let with_key = RpcState::new(
            tx.clone(),
            Some("k3y".into()),
            true,
            Arc::clone(&tokens),
            Links::default(),
            None,
        );
        let open = RpcState::new(
            tx.clone(),
            None,
            true,
            Arc::clone(&tokens),
            Links::default(),
            None,
        );
        let remote = RpcState::new(tx, None, false, tokens, Links::default(), None);
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
