//! The Hyperspace JSON-RPC 2.0 face: `ws://<rpc-listen>/` (spec §2.2, default port 3100).
//!
//! This module owns the face's WebSocket connections: who may connect, how frames are read and
//! answered, the rate limits, the flow control that bounds what one connection (and all of
//! them together) can make the node hold, and the server-to-client requests that reach tool
//! providers ([`Links`]). The calls themselves are answered by the Hyperspace service task.
//!
//! Each text frame is one JSON-RPC message or batch, framed by [`agora_hyperspace::jsonrpc`]; a
//! connection's requests reach the service in the order they were sent, and each frame is
//! answered as soon as its calls are (frames may be answered out of order; a batch's entries keep
//! their order).
//!
//! Authentication (spec §2.3), checked on the WebSocket upgrade request's
//! `Authorization: Bearer <token>` header (the scheme in any case, RFC 7235):
//! - the **API key** (`[rpc] api_key` / `AGORA_RPC_API_KEY`) grants everything. It is required when
//!   the face is bound beyond loopback (the node refuses to start otherwise) and optional on
//!   loopback (when set, it is required there too);
//! - a **session token**, returned by `state.createSession` as `sessionToken`, grants only calls
//!   about that session and stops working when the session ends, on connections already open
//!   too: their next frame is answered −32001 and the connection is closed (1008);
//! - on loopback without a configured key, a client without a header is trusted (local SDK use).
//!
//! Flow control. One task per connection reads frames, one writes to the socket; between them a
//! channel of [`RpcConfig::conn_frames`] + [`SERVER_REQUESTS`] entries (when it is full the
//! reader waits, reading nothing, and a server-to-client request waits within its own deadline).
//! The frames whose calls are being answered wait in the reading task, at most
//! [`RpcConfig::conn_frames`] of them (no task per frame). A frame is *in flight*
//! from the moment it is read until its reply has been written to the socket. While its calls
//! are answered it holds the larger of its own size and a reservation for their replies (per
//! call the connection's largest recent reply, at least [`REPLY_RESERVE`]); then the size of its
//! encoded reply until that is written. The reader reads the next frame only while the
//! connection has fewer than [`RpcConfig::conn_frames`] frames in flight, holds less than
//! [`RpcConfig::conn_bytes`] bytes (server-to-client requests waiting to be written included),
//! all connections together hold less than [`RpcConfig::total_bytes`], and the connection is not
//! paused by a rate limit: a client that sends faster than it reads is not read from (TCP
//! pushes back on it). A write that does not complete within [`RpcConfig::write_timeout`] closes
//! the connection (1008, when the socket still takes the close frame). Limits are checked before
//! a frame is read, so a connection can go over them by one frame (≤ [`MAX_MESSAGE_BYTES`]) and
//! by the replies that turn out larger than their reservation (the first large replies of a
//! connection).
//!
//! Rate limits: every element of a frame (a request, a notification, a malformed element, a
//! binary frame) takes a token from the connection's bucket and one from its credential's bucket
//! (the API key, or the session; keyless loopback clients have the connection's only), both
//! token buckets with one second of burst. Once a token is refused, the rest of the frame is
//! refused too: an element whose id could be read gets its own −32003 with `data.retryAfterMs`;
//! the elements without one share a single −32003 (id `null`, `data.refused` counts them), sent
//! at most once per [`IDLESS_REFUSAL_INTERVAL`] per connection; notifications get nothing. The
//! connection is then not read from until a token is due (at most [`MAX_PAUSE`]).
//!
//! Replies are never much larger than what was sent: besides the results of calls that were
//! served, the framing errors (id `null`) of one frame are answered one by one only while they
//! take at most [`ERROR_REPLY_FACTOR`] × the frame's size + [`ERROR_REPLY_FLOOR`] bytes; the rest
//! share one −32600 (`data.omitted` counts them). A reply larger than
//! [`RpcConfig::conn_bytes`] has its too-large entries replaced by −32603.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_bucket::TokenBucket;
use agora_hyperspace::jsonrpc::{self, ErrorResponse, Frame, Id, Request, Response, RpcError};
use axum::Router;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::stream::{FuturesUnordered, SplitSink};
use futures::{FutureExt, SinkExt, StreamExt};
use serde::de::{Deserializer as _, Error as _, IgnoredAny, SeqAccess, Visitor};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, oneshot};

pub use crate::call::{Call, Principal};
use crate::config::RpcConfig;
use crate::config::rpc::MAX_MESSAGE_BYTES;
use crate::faces::wrong_face::{self, Faces};

/// Largest batch accepted.
pub const MAX_BATCH: usize = 256;
/// Server-to-client requests a connection's writer queue takes beyond its frames' replies.
pub const SERVER_REQUESTS: usize = 16;
/// Id-less −32003 replies are sent at most this often per connection.
pub const IDLESS_REFUSAL_INTERVAL: Duration = Duration::from_secs(1);
/// Longest pause of a connection that went over a rate limit.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);
/// Framing errors answered one by one may take this many times the size of their frame…
pub const ERROR_REPLY_FACTOR: usize = 2;
/// …plus this many bytes.
pub const ERROR_REPLY_FLOOR: usize = 256;
/// Least a call waiting for its answer holds of its connection's and the face's byte budgets
/// (more when the connection's recent replies were larger): so a connection has at most
/// [`CONN_BYTES`](crate::config::rpc::CONN_BYTES) / 16 KiB = 256 calls waiting, and the face
/// [`TOTAL_BYTES`](crate::config::rpc::TOTAL_BYTES) / 16 KiB = 4,096.
pub const REPLY_RESERVE: usize = 16 << 10;
/// How long a closing connection gets to take its close frame.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// Flow control
// ---------------------------------------------------------------------------------------------

/// Bytes held by all connections together, and a signal when some are given back.
#[derive(Debug, Default)]
struct Total {
    bytes: AtomicUsize,
    freed: Notify,
}

/// What one connection holds (frames in flight, bytes), counted in the face's [`Total`] too.
#[derive(Debug)]
struct Flow {
    frames: AtomicUsize,
    bytes: AtomicUsize,
    freed: Notify,
    total: Arc<Total>,
    /// What one call's reply is expected to take: the largest recent one, at least
    /// [`REPLY_RESERVE`].
    estimate: AtomicUsize,
}

impl Flow {
    fn new(total: Arc<Total>) -> Self {
        Self {
            frames: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            freed: Notify::new(),
            total,
            estimate: AtomicUsize::new(REPLY_RESERVE),
        }
    }

    /// What `calls` calls waiting for their answers hold.
    fn reserve(&self, calls: usize) -> usize {
        calls.saturating_mul(self.estimate.load(Ordering::Relaxed))
    }

    /// A frame's largest reply entry was `largest` bytes: the estimate follows it up at once and
    /// down by an eighth per frame.
    fn observe(&self, largest: usize) {
        let old = self.estimate.load(Ordering::Relaxed);
        let new = largest.max(old - old / 8).max(REPLY_RESERVE);
        self.estimate.store(new, Ordering::Relaxed);
    }

    fn add(&self, frames: usize, bytes: usize) {
        self.frames.fetch_add(frames, Ordering::AcqRel);
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        self.total.bytes.fetch_add(bytes, Ordering::AcqRel);
    }

    fn sub(&self, frames: usize, bytes: usize) {
        self.frames.fetch_sub(frames, Ordering::AcqRel);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.total.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.freed.notify_waiters();
        if bytes > 0 {
            self.total.freed.notify_waiters();
        }
    }

    /// Waits until the connection holds fewer than `frames` frames and `bytes` bytes and all
    /// connections together fewer than `total` bytes.
    async fn room(&self, frames: usize, bytes: usize, total: usize) {
        loop {
            let mine = self.freed.notified();
            let all = self.total.freed.notified();
            tokio::pin!(mine, all);
            mine.as_mut().enable();
            all.as_mut().enable();
            if self.frames.load(Ordering::Acquire) < frames
                && self.bytes.load(Ordering::Acquire) < bytes
                && self.total.bytes.load(Ordering::Acquire) < total
            {
                return;
            }
            tokio::select! {
                () = mine => {}
                () = all => {}
            }
        }
    }
}

/// A share of a connection's [`Flow`], given back when dropped.
#[derive(Debug)]
struct Held {
    flow: Arc<Flow>,
    frames: usize,
    bytes: usize,
}

impl Held {
    fn new(flow: &Arc<Flow>, frames: usize, bytes: usize) -> Self {
        flow.add(frames, bytes);
        Self {
            flow: Arc::clone(flow),
            frames,
            bytes,
        }
    }

    /// Holds `bytes` bytes instead of what it held.
    fn set_bytes(&mut self, bytes: usize) {
        if bytes > self.bytes {
            self.flow.add(0, bytes - self.bytes);
        } else {
            self.flow.sub(0, self.bytes - bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.flow.sub(self.frames, self.bytes);
    }
}

/// A frame for a connection's writer.
#[derive(Debug)]
enum Outgoing {
    /// A text frame, and what it holds of its connection until it is written.
    Text(Utf8Bytes, Held),
    /// Close the connection with this code and reason.
    Close(u16, &'static str),
}

// ---------------------------------------------------------------------------------------------
// Server-to-client requests
// ---------------------------------------------------------------------------------------------

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
    conns: HashMap<u64, Link>,
    pending: HashMap<String, (u64, oneshot::Sender<Result<Value, RpcError>>)>,
}

/// An open connection as server-to-client requests reach it.
#[derive(Clone, Debug)]
struct Link {
    out: mpsc::Sender<Outgoing>,
    flow: Arc<Flow>,
    /// A request waits until the connection holds fewer bytes than this.
    max_bytes: usize,
}

impl Links {
    fn open(&self, link: Link) -> u64 {
        let Ok(mut t) = self.inner.lock() else {
            return 0;
        };
        t.next_conn += 1;
        let id = t.next_conn;
        t.conns.insert(id, link);
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

    /// Sends `method(params)` to the client on `conn` and waits for its answer; −32006 when the
    /// connection is gone, or when `timeout` passes before the answer (the time the request
    /// waits for room on the connection counts).
    pub async fn request(
        &self,
        conn: u64,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let unavailable = |why: &str| RpcError::peer_unavailable().with_message(why.to_owned());
        let (tx, rx) = oneshot::channel();
        let (link, id) = {
            let mut t = self
                .inner
                .lock()
                .map_err(|_| unavailable("link table unavailable"))?;
            let link = t
                .conns
                .get(&conn)
                .cloned()
                .ok_or_else(|| unavailable("the provider is not connected"))?;
            t.next_request += 1;
            let id = format!("srv-{}", t.next_request);
            t.pending.insert(id.clone(), (conn, tx));
            (link, id)
        };
        let text =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        let queued = tokio::time::timeout_at(deadline, async {
            link.flow.room(usize::MAX, link.max_bytes, usize::MAX).await;
            let held = Held::new(&link.flow, 0, text.len());
            link.out
                .send(Outgoing::Text(text.into(), held))
                .await
                .is_ok()
        })
        .await;
        let outcome = match queued {
            Ok(true) => match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(r)) => return r,
                Ok(Err(_)) => Err(unavailable("the provider disconnected")),
                Err(_) => Err(unavailable("the provider did not answer in time")),
            },
            Ok(false) => Err(unavailable("the provider is not connected")),
            Err(_) => Err(unavailable("the provider did not take the request in time")),
        };
        self.forget(&id);
        outcome
    }

    fn forget(&self, id: &str) {
        if let Ok(mut t) = self.inner.lock() {
            t.pending.remove(id);
        }
    }

    /// Routes a response frame from connection `conn` to the request that awaits it; `false`
    /// when the frame is not a response to one of ours sent on that connection.
    fn resolve(&self, conn: u64, frame: &Value) -> bool {
        let Some(id) = frame.get("id").and_then(Value::as_str) else {
            return false;
        };
        let Ok(mut t) = self.inner.lock() else {
            return false;
        };
        if t.pending.get(id).is_none_or(|(c, _)| *c != conn) {
            return false;
        }
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

// ---------------------------------------------------------------------------------------------
// Rate limits and authentication
// ---------------------------------------------------------------------------------------------

/// Milliseconds since the first call, the clock of the token buckets: a bucket is `rate` deep
/// (one second of burst) and refills at `rate` a second.
fn now_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A full bucket for `rate` requests a second.
fn full_bucket(rate: f64) -> TokenBucket {
    TokenBucket::new(rate, now_ms())
}

/// An authenticated client.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Caller {
    principal: Principal,
    /// The session token it presented, checked again on every frame.
    token: Option<String>,
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
    key_buckets: Arc<Mutex<HashMap<Principal, TokenBucket>>>,
    /// The flow limits: request rates, frames and bytes held, the write timeout (`[rpc]`;
    /// defaults in [`crate::config::rpc`]).
    pub limits: RpcConfig,
    /// How often clients are pinged (default: for the serving layer's default idle bound).
    pub ping_every: Duration,
    /// What all connections hold.
    total: Arc<Total>,
    /// Open connections, for server-to-client requests.
    pub links: Links,
    /// Told the id of every connection that closes.
    pub closed: Option<mpsc::Sender<u64>>,
    /// Counts calls per method and outcome, and their latency.
    pub telemetry: Option<Arc<crate::telemetry::Telemetry>>,
    /// The node's faces, to name the right one to a client at the wrong one.
    pub faces: Faces,
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
            limits: RpcConfig::default(),
            ping_every: crate::faces::serve::ws_ping_interval(
                crate::config::FaceLimits::default().ws_idle_timeout,
            ),
            total: Arc::new(Total::default()),
            links,
            closed,
            telemetry: None,
            faces: Faces::default(),
        }
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, &'static str> {
        let trusted = |principal| Caller {
            principal,
            token: None,
        };
        match (bearer(headers), &self.api_key) {
            (Some(t), Some(key)) if constant_time_eq(t.as_bytes(), key.as_bytes()) => {
                Ok(trusted(Principal::ApiKey))
            }
            (Some(t), _) => {
                let tokens = self.tokens.lock().map_err(|_| "token table unavailable")?;
                tokens
                    .get(t)
                    .map(|session| Caller {
                        principal: Principal::Session(session.clone()),
                        token: Some(t.to_owned()),
                    })
                    .ok_or(
                        "unknown API key or session token (the agora CLI sends the key given \
                         with --api-key KEY or AGORA_API_KEY)",
                    )
            }
            (None, None) if self.loopback => Ok(trusted(Principal::Local)),
            (None, _) => Err(
                "an Authorization: Bearer <API key or session token> header is required (the \
                     agora CLI sends the key given with --api-key KEY or AGORA_API_KEY)",
            ),
        }
    }

    /// Whether the caller's credential still holds (a session token whose session ended does
    /// not).
    fn still_valid(&self, caller: &Caller) -> bool {
        match (&caller.principal, &caller.token) {
            (Principal::Session(session), Some(token)) => self
                .tokens
                .lock()
                .is_ok_and(|t| t.get(token) == Some(session)),
            _ => true,
        }
    }

    /// One token from the caller's credential bucket (keyless loopback callers have none).
    fn take_key_token(&self, principal: &Principal) -> Result<(), u64> {
        if *principal == Principal::Local {
            return Ok(());
        }
        let Ok(mut buckets) = self.key_buckets.lock() else {
            return Ok(());
        };
        let rate = self.limits.key_rate;
        let now = now_ms();
        if let Some(bucket) = buckets.get_mut(principal) {
            return bucket.take(rate, rate, now);
        }
        if buckets.len() > 100_000 {
            buckets.retain(|_, b| now.saturating_sub(b.last_ms()) < 60_000);
        }
        buckets
            .entry(principal.clone())
            .or_insert_with(|| full_bucket(rate))
            .take(rate, rate, now)
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// ---------------------------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------------------------

/// The face's router: the WebSocket endpoint at `/`; anything else is told where it is
/// ([`wrong_face::upgrade_required`]).
pub fn face(state: RpcState) -> Router {
    let told = wrong_face::not_upgraded(state.faces.clone(), "JSON-RPC", "rpc");
    Router::new()
        .route("/", get(upgrade).fallback(told.clone()))
        .fallback(told)
        .with_state(state)
}

async fn upgrade(
    State(state): State<RpcState>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> axum::response::Response {
    let Ok(ws) = ws else {
        return wrong_face::upgrade_required(&state.faces, "JSON-RPC", &state.faces.url("rpc"));
    };
    let caller = match state.authenticate(&headers) {
        Ok(c) => c,
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
        .on_upgrade(move |socket| session(state, caller, socket))
}

/// The close frame for a WebSocket error from the client, if one can still be sent.
fn close_for(error: &axum::Error) -> Option<(u16, &'static str)> {
    // axum hides tungstenite's error type; its messages are stable within tungstenite 0.x.
    let text = error.to_string();
    if text.starts_with("Space limit exceeded") {
        Some((close_code::SIZE, "message larger than 1 MiB"))
    } else if text.starts_with("UTF-8 encoding error") {
        Some((close_code::INVALID, "text frame is not UTF-8"))
    } else if text.starts_with("WebSocket protocol error") {
        Some((close_code::PROTOCOL, "WebSocket protocol error"))
    } else {
        None
    }
}

/// What became of one message from the client.
enum Step {
    /// Nothing to send.
    Next,
    /// A reply ready to be written.
    Reply(Outgoing),
    /// A reply to wait for.
    Wait(Waiting),
    /// End the connection, after a last reply and with a close frame when given.
    End(Option<Outgoing>, Option<(u16, &'static str)>),
}

/// The reading side of one connection.
struct Conn {
    id: u64,
    caller: Caller,
    flow: Arc<Flow>,
    out: mpsc::Sender<Outgoing>,
    bucket: TokenBucket,
    /// Nothing is read before this instant (the connection went over a rate limit).
    paused_until: Option<tokio::time::Instant>,
    /// When an id-less −32003 was last sent.
    idless_refusal: Option<Instant>,
}

/// Waits until a frame may be read: the connection is not paused and there is room; returns
/// the frame's share of the flow.
async fn admit(
    flow: &Arc<Flow>,
    paused_until: Option<tokio::time::Instant>,
    state: &RpcState,
) -> Held {
    if let Some(until) = paused_until {
        tokio::time::sleep_until(until).await;
    }
    flow.room(
        state.limits.conn_frames.max(1),
        state.limits.conn_bytes.max(1),
        state.limits.total_bytes.max(1),
    )
    .await;
    Held::new(flow, 1, 0)
}

async fn session(state: RpcState, caller: Caller, socket: WebSocket) {
    let (sink, mut stream) = socket.split();
    let (out, rx) = mpsc::channel(state.limits.conn_frames.max(1) + SERVER_REQUESTS);
    let flow = Arc::new(Flow::new(Arc::clone(&state.total)));
    let writer = tokio::spawn(write(
        sink,
        rx,
        state.limits.write_timeout,
        state.ping_every,
    ));
    let id = state.links.open(Link {
        out: out.clone(),
        flow: Arc::clone(&flow),
        max_bytes: state.limits.conn_bytes.max(1),
    });
    let mut conn = Conn {
        id,
        caller,
        flow,
        out,
        bucket: full_bucket(state.limits.conn_rate),
        paused_until: None,
        idless_refusal: None,
    };
    // Frames waiting for the service, bounded by `conn_frames` (each holds a frame slot).
    let mut pending = FuturesUnordered::new();
    // The slot of the next frame, taken before it is read.
    let mut slot: Option<Held> = None;
    let close = loop {
        let step = tokio::select! {
            biased;
            () = conn.out.closed() => break None,
            Some(reply) = pending.next() => match reply {
                Some(reply) => Step::Reply(reply),
                None => Step::Next,
            },
            held = admit(&conn.flow, conn.paused_until, &state), if slot.is_none() => {
                conn.paused_until = None;
                slot = Some(held);
                Step::Next
            }
            message = stream.next(), if slot.is_some() => match message {
                None => Step::End(None, None),
                Some(Err(e)) => Step::End(None, close_for(&e)),
                Some(Ok(m)) => conn.receive(&state, m, &mut slot).await,
            },
        };
        match step {
            Step::Next => {}
            Step::Reply(reply) => {
                if conn.out.send(reply).await.is_err() {
                    break None;
                }
            }
            Step::Wait(waiting) => pending.push(waiting.answer()),
            Step::End(reply, close) => {
                if let Some(reply) = reply {
                    let _ = conn.out.send(reply).await;
                }
                break close;
            }
        }
    };
    state.links.close(conn.id);
    drop(pending);
    drop(slot);
    if let Some((code, reason)) = close {
        let _ =
            tokio::time::timeout(CLOSE_GRACE, conn.out.send(Outgoing::Close(code, reason))).await;
    }
    if let Some(closed) = &state.closed {
        let _ = closed.send(conn.id).await;
    }
    drop(conn);
    let _ = writer.await;
}

/// Writes a connection's frames, each within `timeout`; a write that takes longer closes the
/// connection with 1008. Pings the client every `ping_every`: the serving layer counts only what
/// a WebSocket client sends toward its idle bound, and a live client answers pings.
async fn write(
    mut sink: SplitSink<WebSocket, Message>,
    mut rx: mpsc::Receiver<Outgoing>,
    timeout: Duration,
    ping_every: Duration,
) {
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let out = tokio::select! {
            out = rx.recv() => out,
            _ = ping.tick() => {
                match tokio::time::timeout(timeout, sink.send(Message::Ping(Vec::new().into()))).await {
                    Ok(Ok(())) => continue,
                    _ => return,
                }
            }
        };
        let Some(out) = out else { break };
        match out {
            Outgoing::Text(text, held) => {
                match tokio::time::timeout(timeout, sink.send(Message::Text(text))).await {
                    Ok(Ok(())) => drop(held),
                    Ok(Err(_)) => return,
                    Err(_) => {
                        tracing::info!(
                            timeout_ms = timeout.as_secs_f64() * 1e3,
                            "closing a JSON-RPC connection that took no reply in time"
                        );
                        close(
                            &mut sink,
                            close_code::POLICY,
                            "a reply waited too long to be read",
                        )
                        .await;
                        return;
                    }
                }
            }
            Outgoing::Close(code, reason) => {
                close(&mut sink, code, reason).await;
                return;
            }
        }
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, sink.close()).await;
}

async fn close(sink: &mut SplitSink<WebSocket, Message>, code: u16, reason: &'static str) {
    let frame = CloseFrame {
        code,
        reason: Utf8Bytes::from_static(reason),
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, sink.send(Message::Close(Some(frame)))).await;
}

impl Conn {
    /// Handles one message; `slot` is the frame slot taken for it.
    async fn receive(
        &mut self,
        state: &RpcState,
        message: Message,
        slot: &mut Option<Held>,
    ) -> Step {
        let text = match message {
            Message::Text(t) => t,
            Message::Binary(b) => {
                let Some(held) = slot.take() else {
                    return Step::Next;
                };
                let e = RpcError::invalid_request()
                    .with_data(json!("JSON-RPC messages are text frames"));
                let frame = Frame::Single(Err(ErrorResponse::new(Id::null(), e)));
                return self.dispatch(state, frame, b.len(), held).await;
            }
            Message::Close(_) => return Step::End(None, None),
            Message::Ping(_) | Message::Pong(_) => return Step::Next,
        };
        // Answers to our own requests (tool invocations) go to whoever waits for them.
        if let Some(v) = as_response(text.as_str())
            && state.links.resolve(self.id, &v)
        {
            return Step::Next;
        }
        let Some(mut held) = slot.take() else {
            return Step::Next;
        };
        held.set_bytes(text.len());
        if !state.still_valid(&self.caller) {
            let reply = ended(text.as_str());
            held.set_bytes(reply.len());
            return Step::End(
                Some(Outgoing::Text(reply.into(), held)),
                Some((close_code::POLICY, "the session of this token has ended")),
            );
        }
        let frame = if oversized_batch(text.as_str()) {
            let e = RpcError::invalid_request().with_data(json!(format!(
                "batches are limited to {MAX_BATCH} requests"
            )));
            Frame::Single(Err(ErrorResponse::new(Id::null(), e)))
        } else {
            match jsonrpc::parse_frame(text.as_str()) {
                // An AGH agent at the wrong address: one line naming the AGH face.
                Frame::Single(Err(_)) if wrong_face::is_envelope(text.as_str()) => {
                    let e = RpcError::invalid_request().with_message(state.faces.envelope_on_rpc());
                    Frame::Single(Err(ErrorResponse::new(Id::null(), e)))
                }
                frame => frame,
            }
        };
        let len = text.len();
        drop(text);
        self.dispatch(state, frame, len, held).await
    }

    /// One token for one element of a frame, unless the frame was already refused.
    fn take_token(&mut self, state: &RpcState, refused: &mut Option<u64>) -> Result<(), u64> {
        if let Some(ms) = *refused {
            return Err(ms);
        }
        let taken = self
            .bucket
            .take(state.limits.conn_rate, state.limits.conn_rate, now_ms())
            .and_then(|()| state.take_key_token(&self.caller.principal));
        if let Err(ms) = taken {
            *refused = Some(ms);
        }
        taken
    }

    /// Takes tokens for the frame's elements, hands the admitted requests to the service in
    /// order and says what to answer.
    async fn dispatch(
        &mut self,
        state: &RpcState,
        frame: Frame,
        len: usize,
        mut held: Held,
    ) -> Step {
        let (items, batch) = match frame {
            Frame::Single(item) => (vec![item], false),
            Frame::Batch(items) => (items, true),
        };
        let allowance = ERROR_REPLY_FACTOR * len + ERROR_REPLY_FLOOR;
        let (mut error_bytes, mut omitted, mut idless) = (0, 0u64, 0u64);
        let mut refused = None;
        let mut slots = Vec::with_capacity(items.len());
        for item in items {
            let token = self.take_token(state, &mut refused);
            match (item, token) {
                (Ok(request), Ok(())) => {
                    if let Some(slot) = self.submit(state, request).await {
                        slots.push(slot);
                    }
                }
                (Ok(request), Err(ms)) => {
                    if let Some(id) = request.id {
                        slots.push(Slot::Encoded(Response::err(id, rate_limited(ms)).to_json()));
                    }
                }
                (Err(e), Ok(())) if e.id.is_null() => {
                    let text = e.to_json();
                    if error_bytes + text.len() <= allowance {
                        error_bytes += text.len();
                        slots.push(Slot::Encoded(text));
                    } else {
                        omitted += 1;
                    }
                }
                (Err(e), Ok(())) => slots.push(Slot::Encoded(e.to_json())),
                (Err(e), Err(_)) if e.id.is_null() => idless += 1,
                (Err(e), Err(ms)) => {
                    slots.push(Slot::Encoded(
                        Response::err(e.id, rate_limited(ms)).to_json(),
                    ));
                }
            }
        }
        if omitted > 0 {
            let e = RpcError::invalid_request().with_data(json!({ "omitted": omitted }));
            slots.push(Slot::Encoded(ErrorResponse::new(Id::null(), e).to_json()));
        }
        if let Some(ms) = refused {
            let now = Instant::now();
            if idless > 0
                && self
                    .idless_refusal
                    .is_none_or(|at| now.duration_since(at) >= IDLESS_REFUSAL_INTERVAL)
            {
                self.idless_refusal = Some(now);
                let e =
                    rate_limited(ms).with_data(json!({ "retryAfterMs": ms, "refused": idless }));
                slots.push(Slot::Encoded(ErrorResponse::new(Id::null(), e).to_json()));
            }
            let pause = Duration::from_millis(ms).min(MAX_PAUSE);
            self.paused_until = Some(tokio::time::Instant::now() + pause);
        }
        let calls = slots
            .iter()
            .filter(|s| matches!(s, Slot::Waiting(..)))
            .count();
        held.set_bytes(len.max(self.flow.reserve(calls)));
        let waiting = Waiting {
            slots,
            batch,
            cap: state.limits.conn_bytes.max(1),
            held,
        };
        if calls > 0 {
            return Step::Wait(waiting);
        }
        // Nothing to wait for: the reply is ready now.
        match waiting.answer().now_or_never().flatten() {
            Some(reply) => Step::Reply(reply),
            None => Step::Next,
        }
    }

    /// Hands one admitted request to the service; the slot of its reply (none for a
    /// notification).
    async fn submit(&self, state: &RpcState, request: Request) -> Option<Slot> {
        let id = request.id.clone();
        let relayed = request.method == agora_hyperspace::tool::INVOKE;
        let timing = state.telemetry.as_ref().map(|t| Timing {
            telemetry: Arc::clone(t),
            method: request.method.clone(),
            started: Instant::now(),
        });
        let (tx, rx) = oneshot::channel();
        let call = Call {
            principal: self.caller.principal.clone(),
            conn: self.id,
            request,
            reply: tx,
        };
        if state.calls.send(call).await.is_err() {
            let e = RpcError::internal_error().with_message("the node is shutting down");
            return id.map(|id| Slot::Encoded(Response::err(id, e).to_json()));
        }
        id.map(|id| Slot::Waiting(id, rx, timing, relayed))
    }
}

/// What a call's reply is counted against (method, start).
struct Timing {
    telemetry: Arc<crate::telemetry::Telemetry>,
    method: String,
    started: Instant,
}

fn rate_limited(retry_after_ms: u64) -> RpcError {
    RpcError::rate_limited().with_data(json!({ "retryAfterMs": retry_after_ms }))
}

/// The reply to a frame that arrives after its connection's session ended: −32001 with the
/// request's id when it is a single request, else id `null`.
fn ended(text: &str) -> String {
    let id = match jsonrpc::parse_frame(text) {
        Frame::Single(Ok(Request { id: Some(id), .. })) => id,
        _ => Id::null(),
    };
    let e = RpcError::session_not_found()
        .with_data(json!({ "reason": "the session of this connection's token has ended" }));
    Response::err(id, e).to_json()
}

/// Whether `text` is a JSON array of more than [`MAX_BATCH`] elements (counted without building
/// them).
fn oversized_batch(text: &str) -> bool {
    struct Count<'a>(&'a Cell<bool>);
    impl<'de> Visitor<'de> for Count<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a batch")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
                if n > MAX_BATCH {
                    self.0.set(true);
                    return Err(A::Error::custom("too many elements"));
                }
            }
            Ok(())
        }
    }
    if !text.trim_start().starts_with('[') {
        return false;
    }
    let over = Cell::new(false);
    let _ = serde_json::Deserializer::from_str(text).deserialize_seq(Count(&over));
    over.get()
}

/// One entry of a frame's reply: encoded already, or the outcome of a call to wait for.
enum Slot {
    Encoded(String),
    /// The call's id, its outcome to come, its timing, and whether a −32602 is relayed as it
    /// is (a tool provider's own error to `tool.invoke`) rather than completed
    /// ([`agora_hyperspace::params::complete`]).
    Waiting(
        Id,
        oneshot::Receiver<Result<Value, RpcError>>,
        Option<Timing>,
        bool,
    ),
}

/// A frame's reply in the making, and what the frame holds of its connection.
struct Waiting {
    slots: Vec<Slot>,
    batch: bool,
    /// Largest reply: entries that would go beyond are replaced by −32603.
    cap: usize,
    held: Held,
}

impl Waiting {
    /// Waits for the outcomes in order and encodes the reply (none when there is no entry).
    async fn answer(self) -> Option<Outgoing> {
        let Self {
            slots,
            batch,
            cap,
            mut held,
        } = self;
        let mut out = String::new();
        if batch {
            out.push('[');
        }
        let mut sep = "";
        let mut largest = None;
        for slot in slots {
            let mark = out.len();
            let this_sep = sep;
            out.push_str(this_sep);
            sep = ",";
            match slot {
                Slot::Encoded(text) => out.push_str(&text),
                Slot::Waiting(id, rx, timing, relayed) => {
                    let outcome = rx.await.unwrap_or_else(|_| {
                        Err(RpcError::internal_error().with_message("the call was dropped"))
                    });
                    let outcome = if relayed {
                        outcome
                    } else {
                        outcome.map_err(agora_hyperspace::params::complete)
                    };
                    if let Some(t) = timing {
                        let code = outcome.as_ref().err().map(|e| i64::from(e.code.0));
                        t.telemetry.rpc_call(&t.method, code, t.started.elapsed());
                    }
                    let response = Response { id, outcome };
                    // Writing into a String cannot fail.
                    let _ = write!(out, "{response}");
                    largest = largest.max(Some(out.len() - mark));
                    if out.len() > cap {
                        out.truncate(mark);
                        out.push_str(this_sep);
                        let e = RpcError::internal_error()
                            .with_message(format!("the reply would be larger than {cap} bytes"));
                        let _ = write!(out, "{}", Response::err(response.id, e));
                    }
                }
            }
        }
        if let Some(largest) = largest {
            held.flow.observe(largest);
        }
        if sep.is_empty() {
            return None;
        }
        if batch {
            out.push(']');
        }
        held.set_bytes(out.len());
        Some(Outgoing::Text(out.into(), held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rpc::CONN_BYTES;

    #[test]
    fn buckets_refill_at_their_rate() {
        let t0 = now_ms();
        let mut b = TokenBucket::new(2.0, t0);
        assert!(b.take(2.0, 2.0, t0).is_ok());
        assert!(b.take(2.0, 2.0, t0).is_ok());
        let wait = b.take(2.0, 2.0, t0).unwrap_err();
        assert_eq!(wait, 500);
        assert!(b.take(2.0, 2.0, t0 + 500).is_ok());
    }

    fn headers(v: Option<&str>) -> HeaderMap {
        let mut m = HeaderMap::new();
        if let Some(v) = v {
            m.insert(header::AUTHORIZATION, v.parse().unwrap());
        }
        m
    }

    /// The tokens table with one live session token, `tok` of session `s-1`.
    fn one_token() -> Arc<Mutex<HashMap<String, String>>> {
        Arc::new(Mutex::new(HashMap::from([(
            "tok".to_owned(),
            "s-1".to_owned(),
        )])))
    }

    fn state(
        key: Option<&str>,
        loopback: bool,
        tokens: &Arc<Mutex<HashMap<String, String>>>,
    ) -> RpcState {
        let (tx, _rx) = mpsc::channel(1);
        let key = key.map(str::to_owned);
        RpcState::new(
            tx,
            key,
            loopback,
            Arc::clone(tokens),
            Links::default(),
            None,
        )
    }

    #[test]
    fn authentication_tiers() {
        let tokens = one_token();
        let (with_key, open, remote) = (
            state(Some("k3y"), true, &tokens),
            state(None, true, &tokens),
            state(None, false, &tokens),
        );
        let principal =
            |s: &RpcState, v: Option<&str>| s.authenticate(&headers(v)).map(|c| c.principal);
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            let v = format!("{scheme} k3y");
            assert_eq!(principal(&with_key, Some(&v)), Ok(Principal::ApiKey), "{v}");
        }
        assert_eq!(
            principal(&with_key, Some("Bearer  k3y ")),
            Ok(Principal::ApiKey)
        );
        assert_eq!(
            principal(&with_key, Some("Bearer tok")),
            Ok(Principal::Session("s-1".into()))
        );
        assert!(
            principal(&with_key, None).is_err(),
            "a configured key is required on loopback too"
        );
        assert!(principal(&with_key, Some("Bearer nope")).is_err());
        assert!(principal(&with_key, Some("Basic k3y")).is_err());
        assert_eq!(principal(&open, None), Ok(Principal::Local));
        assert!(principal(&remote, None).is_err());
    }

    #[test]
    fn a_session_token_stops_holding_when_its_session_ends() {
        let tokens = one_token();
        let state = state(None, true, &tokens);
        let caller = state.authenticate(&headers(Some("bearer tok"))).unwrap();
        assert!(state.still_valid(&caller));
        tokens.lock().unwrap().clear();
        assert!(!state.still_valid(&caller));
        let local = state.authenticate(&headers(None)).unwrap();
        assert!(state.still_valid(&local));
    }

    #[test]
    fn keyless_loopback_callers_share_no_credential_bucket() {
        let mut state = state(None, true, &Arc::default());
        state.limits.key_rate = 1.0;
        for _ in 0..10 {
            assert!(state.take_key_token(&Principal::Local).is_ok());
        }
        assert!(state.take_key_token(&Principal::ApiKey).is_ok());
        assert!(state.take_key_token(&Principal::ApiKey).is_err());
        assert!(
            state
                .take_key_token(&Principal::Session("a".into()))
                .is_ok()
        );
    }

    #[test]
    fn oversized_batches_are_counted_without_being_built() {
        let batch = |n: usize| format!("[{}]", vec!["1"; n].join(","));
        assert!(!oversized_batch(&batch(MAX_BATCH)));
        assert!(oversized_batch(&batch(MAX_BATCH + 1)));
        assert!(oversized_batch(&format!(
            " {}garbage",
            batch(MAX_BATCH + 1)
        )));
        assert!(!oversized_batch("{\"a\":[1,2]}"));
        assert!(!oversized_batch("[1,"));
    }

    fn flow() -> Arc<Flow> {
        Arc::new(Flow::new(Arc::new(Total::default())))
    }

    #[test]
    fn held_shares_are_given_back() {
        let flow = flow();
        let mut held = Held::new(&flow, 1, 10);
        held.set_bytes(300);
        let other = Held::new(&flow, 0, 5);
        assert_eq!(flow.bytes.load(Ordering::Acquire), 305);
        assert_eq!(flow.total.bytes.load(Ordering::Acquire), 305);
        held.set_bytes(20);
        drop(other);
        assert_eq!(flow.bytes.load(Ordering::Acquire), 20);
        drop(held);
        assert_eq!(flow.frames.load(Ordering::Acquire), 0);
        assert_eq!(flow.bytes.load(Ordering::Acquire), 0);
        assert_eq!(flow.total.bytes.load(Ordering::Acquire), 0);
    }

    #[test]
    fn reservations_follow_large_replies_up_at_once_and_down_slowly() {
        let flow = flow();
        assert_eq!(
            flow.reserve(256),
            CONN_BYTES,
            "a full batch of small calls fits"
        );
        flow.observe(100);
        assert_eq!(flow.reserve(1), REPLY_RESERVE);
        flow.observe(200 << 10);
        assert_eq!(flow.reserve(2), 400 << 10);
        for _ in 0..5 {
            flow.observe(100);
        }
        let after = flow.reserve(1);
        assert!(REPLY_RESERVE < after && after < 200 << 10, "{after}");
        for _ in 0..50 {
            flow.observe(100);
        }
        assert_eq!(flow.reserve(1), REPLY_RESERVE);
    }

    #[tokio::test]
    async fn room_waits_for_bytes_to_be_given_back() {
        let flow = flow();
        let held = Held::new(&flow, 0, 100);
        let waiting = tokio::spawn({
            let flow = Arc::clone(&flow);
            async move { flow.room(10, 50, usize::MAX).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn replies_larger_than_the_cap_are_replaced() {
        let flow = flow();
        let (tx, rx) = oneshot::channel();
        tx.send(Ok(json!("x".repeat(500)))).unwrap();
        let (tx2, rx2) = oneshot::channel();
        tx2.send(Ok(json!(1))).unwrap();
        let waiting = Waiting {
            slots: vec![
                Slot::Encoded(r#"{"a":1}"#.into()),
                Slot::Waiting(Id::from(7u64), rx, None, false),
                Slot::Waiting(Id::from(8u64), rx2, None, false),
            ],
            batch: true,
            cap: 300,
            held: Held::new(&flow, 1, 50),
        };
        let Some(Outgoing::Text(text, held)) = waiting.answer().await else {
            panic!("a reply")
        };
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        assert_eq!(v[1]["id"], 7);
        assert_eq!(v[1]["error"]["code"], -32603);
        assert_eq!(v[2]["result"], 1);
        assert_eq!(held.bytes, text.len());
        assert_eq!(flow.bytes.load(Ordering::Acquire), text.len());
    }

    #[tokio::test]
    async fn a_request_nobody_takes_ends_at_its_deadline() {
        let links = Links::default();
        let flow = flow();
        let (out, _rx) = mpsc::channel(1);
        out.try_send(Outgoing::Close(1000, "")).unwrap();
        let conn = links.open(Link {
            out,
            flow: Arc::clone(&flow),
            max_bytes: 1 << 20,
        });
        let started = Instant::now();
        let r = links
            .request(conn, "tool.invoke", json!({}), Duration::from_millis(100))
            .await;
        assert_eq!(r.unwrap_err().code, jsonrpc::RpcCode(-32006));
        assert!(started.elapsed() < Duration::from_secs(2));
        // A connection holding more than it may waits for room, within the deadline too.
        let _full = Held::new(&flow, 0, 2 << 20);
        let (out, _rx) = mpsc::channel(4);
        let conn = links.open(Link {
            out,
            flow,
            max_bytes: 1 << 20,
        });
        let r = links
            .request(conn, "tool.invoke", json!({}), Duration::from_millis(100))
            .await;
        assert_eq!(r.unwrap_err().code, jsonrpc::RpcCode(-32006));
        assert!(links.inner.lock().unwrap().pending.is_empty());
    }

    #[test]
    fn responses_resolve_only_on_the_connection_asked() {
        let links = Links::default();
        let (tx, mut rx) = oneshot::channel();
        links
            .inner
            .lock()
            .unwrap()
            .pending
            .insert("srv-1".into(), (3, tx));
        let answer = json!({"jsonrpc": "2.0", "id": "srv-1", "result": 1});
        assert!(!links.resolve(4, &answer));
        assert!(links.resolve(3, &answer));
        assert_eq!(rx.try_recv().unwrap(), Ok(json!(1)));
    }
}
